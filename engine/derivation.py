"""What an evaluator returns: which rules fired and the facts they derived."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbopt.engine import expr
from kbopt.engine.rule import Derive, Pack, Rule
from kbopt.errors import EvaluationError


@dataclass(frozen=True)
class Derivation:
    fired: tuple[str, ...]                       # rule ids, in pack order
    derived: dict[str, tuple[Any, str]]          # path -> (value, id of the first rule in pack order that derived it)


class DerivedFacts:
    """Derived facts as chaining adds them; the same fact may not get two values."""

    def __init__(self, inputs: dict[str, Any]):
        self.inputs = inputs
        self.values: dict[str, tuple[Any, str]] = {}

    def lookup(self, path: str):
        if path in self.inputs:
            return expr.KNOWN, self.inputs[path]
        if path in self.values:
            return expr.KNOWN, self.values[path][0]
        # During chaining a derived fact not yet produced behaves as absent.
        return (expr.ABSENT, None) if path.startswith("derived.") else (expr.MISSING, None)

    def conclude(self, rule: Rule) -> list[tuple[str, Any]]:
        """Compute the facts `rule` derives; return those that are new."""
        new = []
        for conclusion in rule.then:
            if not isinstance(conclusion, Derive):
                continue
            try:
                value = expr.value_of(conclusion.value, self.lookup)
            except expr.Missing as missing:
                raise EvaluationError(f"rule {rule.id} ({rule.location}) fired but cannot compute "
                                      f"{conclusion.path}: needs {', '.join(missing.paths)}") from None
            known = self.values.get(conclusion.path)
            if known is not None:
                if known[0] != value:
                    raise EvaluationError(f"rules {known[1]} and {rule.id} derive different values for "
                                          f"{conclusion.path} ({expr.fmt(known[0])} vs {expr.fmt(value)}); "
                                          f"make their conditions exclusive ({rule.location})")
                continue
            self.values[conclusion.path] = (value, rule.id)
            new.append((conclusion.path, value))
        return new


def finish(pack: Pack, fired: set[str], derived: DerivedFacts) -> Derivation:
    order = [r.id for r in pack.rules if r.id in fired]
    first: dict[str, tuple[Any, str]] = {}
    rules = pack.by_id()
    for rule_id in order:
        for path in rules[rule_id].derives:
            if path in derived.values and path not in first:
                first[path] = (derived.values[path][0], rule_id)
    return Derivation(fired=tuple(order), derived=dict(sorted(first.items())))
