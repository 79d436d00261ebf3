"""After chaining: which facts are known, absent or unknown, and why each rule did or did not fire."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbopt.engine import expr
from kbopt.engine.derivation import Derivation
from kbopt.engine.rule import Pack, Rule


@dataclass(frozen=True)
class Check:
    """One comparison that held: `fact` (value) `op` threshold, or against another fact."""
    fact: str
    value: Any
    op: str
    threshold: Any = None
    parameter: str | None = None
    against: str | None = None


class FinalFacts:
    """Facts at the fix-point, with three-valued status for derived ones.

    A derived fact no rule produced is *absent* when every rule that could produce it is false
    on known facts, and *unknown* when one of them could not be evaluated for lack of facts.
    """

    def __init__(self, pack: Pack, inputs: dict[str, Any], derivation: Derivation):
        self.pack, self.inputs = pack, inputs
        self.derived = {path: value for path, (value, _) in derivation.derived.items()}
        self.fired = set(derivation.fired)
        self.rules = pack.by_id()
        self.status: dict[str, str] = {}
        undecided = {p for p in pack.producers if p not in self.derived}
        for path in undecided:
            self.status[path] = expr.UNKNOWN
        changed = True
        while changed:
            changed = False
            for path in sorted(undecided):
                if self.status[path] == expr.UNKNOWN and all(
                        expr.evaluate(self.rules[r].fire_condition, self.lookup) is False
                        for r in pack.producers[path] if r not in self.fired):
                    self.status[path] = expr.ABSENT
                    changed = True

    def lookup(self, path: str):
        if path in self.inputs:
            return expr.KNOWN, self.inputs[path]
        if path in self.derived:
            return expr.KNOWN, self.derived[path]
        if path.startswith("derived."):
            return self.status.get(path, expr.ABSENT), None
        return expr.MISSING, None

    def missing_inputs(self, rule: Rule, seen: frozenset = frozenset()) -> list[str]:
        """The input facts that, once known, would decide `rule` (what to collect)."""
        out: list[str] = []
        for path in dict.fromkeys(expr.undecided_by(rule.fire_condition, self.lookup)):
            status, _ = self.lookup(path)
            if status == expr.MISSING:
                out.append(path)
            if status != expr.UNKNOWN:
                continue
            for producer in self.pack.producers.get(path, ()):
                if producer not in seen and expr.evaluate(self.rules[producer].fire_condition, self.lookup) is None:
                    out.extend(self.missing_inputs(self.rules[producer], seen | {rule.id}))
        return sorted(set(out))

    def witness(self, rule: Rule) -> tuple[dict[str, Any], tuple[Check, ...]]:
        """The fact values that made `rule` fire, and the comparisons that held."""
        leaves = expr.witnesses(rule.when, self.lookup)
        facts: dict[str, Any] = {}
        checks = []
        for leaf in leaves:
            for path in expr.facts_of(leaf):
                status, value = self.lookup(path)
                if status == expr.KNOWN:
                    facts[path] = value
            checks.append(self._check(leaf))
        return facts, tuple(checks)

    def _check(self, leaf) -> Check:
        if isinstance(leaf, expr.Cmp):
            _, value = self.lookup(leaf.left.path)
            if isinstance(leaf.right, expr.Fact):
                _, other = self.lookup(leaf.right.path)
                return Check(leaf.left.path, value, leaf.op, other, against=leaf.right.path)
            return Check(leaf.left.path, value, leaf.op, leaf.right.value, parameter=leaf.right.parameter)
        if isinstance(leaf, expr.Not):
            inner = self._check(leaf.item) if not isinstance(leaf.item, (expr.And, expr.Or)) else None
            if inner is not None:
                return Check(inner.fact, inner.value, "not " + inner.op, inner.threshold, inner.parameter, inner.against)
            path = next(expr.facts_of(leaf))
            return Check(path, self.lookup(path)[1], "not", expr.render(leaf.item))
        path = next(expr.facts_of(leaf))
        _, value = self.lookup(path)
        if isinstance(leaf, expr.OneOf):
            return Check(path, value, "not in" if leaf.negated else "in", list(leaf.values))
        if isinstance(leaf, expr.Contains):
            return Check(path, value, "lacks" if leaf.negated else "has", leaf.item)
        return Check(path, value, "missing" if leaf.negated else "known")
