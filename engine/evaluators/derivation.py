"""What an evaluator returns: which rules fired and the facts they derived."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kbopt.engine.evaluators.closures import Acceptance, Compute, compile_value
from kbopt.engine.lang.logic import KNOWN, Missing, not_held
from kbopt.engine.lang.nodes import Value, unique_facts
from kbopt.engine.lang.parse import MAX_EXACT
from kbopt.engine.lang.text import fmt
from kbopt.engine.pack.kept import Kept
from kbopt.engine.pack.rule import Derive, Pack, Rule
from kbopt.errors import EvaluationError
from kbopt.kb.vocabulary import Vocabulary


class Derivation(NamedTuple):         # a NamedTuple: made once an evaluation, and what-ifs evaluate often
    fired: tuple[str, ...]                       # rule ids, in pack order
    # path -> (value, id of the first rule in pack order that derived it), in no particular
    # order: sorted where an output shows them
    derived: dict[str, tuple[Any, str]]


@dataclass(frozen=True)
class CompiledDerive:
    """A derive conclusion compiled once per pack: its value expression as a closure, and a quick
    test of the value's type (value_problem says why one fails)."""
    derive: Derive
    compute: Compute
    acceptance: Acceptance
    accepts: Callable[[Any], bool]        # acceptance.test()


def conclusions(pack: Pack) -> dict[str, tuple[CompiledDerive, ...]]:
    """Each rule's derive conclusions, compiled once per pack."""
    def build() -> dict[str, tuple[CompiledDerive, ...]]:
        vocabulary = pack.kb.vocabulary
        def conclusion(derive: Derive) -> CompiledDerive:
            accepted = acceptance(vocabulary, derive.path)
            return CompiledDerive(derive, compile_value(derive.value), accepted, accepted.test())
        return {rule.id: tuple(conclusion(c) for c in rule.then if isinstance(c, Derive)) for rule in pack.rules}
    runtime = pack.runtime
    if runtime.conclusions is None:
        runtime.conclusions = build()
    return runtime.conclusions


def acceptance(vocabulary: Vocabulary, path: str) -> Acceptance:
    """What value_problem accepts without a word for the fact at `path` (Acceptance)."""
    spec = vocabulary.get(path)
    if spec is None:
        return Acceptance("nothing")
    if spec.type == "bool":
        return Acceptance("bool")
    if spec.type == "enum":
        return Acceptance("enum", frozenset(spec.values))
    return Acceptance("number") if spec.is_numeric else Acceptance("nothing")


class DerivedFacts:
    """Derived facts as chaining adds them; the same fact may not get two values."""

    def __init__(self, inputs: dict[str, Any], pack: Pack):
        self.inputs = inputs
        self.vocabulary = pack.kb.vocabulary
        self.order = pack.order          # rule id -> position in the pack, for stable messages
        self.values: dict[str, tuple[Any, str]] = {}
        self.pack = pack
        # the pack's conclusions, fetched by the first conclude()
        self._conclusions: dict[str, tuple[CompiledDerive, ...]] | None = None
        # Inputs and derived values in one dict: the lookup below is the evaluators' hottest call.
        self.known: dict[str, Any] = dict(inputs)

    def lookup(self, path: str) -> tuple[str, Any]:  # a logic.Lookup: (status, value)
        known = self.known
        if path in known:
            return KNOWN, known[path]
        # During chaining a derived fact not yet produced behaves as absent.
        return not_held(path)

    def take(self, path: str, value: Any, rule_id: str) -> None:
        """A value derived by `rule_id` in an earlier evaluation that holds in this one too."""
        self.values[path] = (value, rule_id)
        self.known[path] = value

    def conclude(self, rule: Rule) -> list[tuple[str, Any]]:
        """Compute the facts `rule` derives; return those that are new."""
        new: list[tuple[str, Any]] = []
        concluded = self._conclusions
        if concluded is None:
            concluded = self._conclusions = conclusions(self.pack)
        for compiled in concluded[rule.id]:
            conclusion = compiled.derive
            try:
                value = compiled.compute(self.lookup)
            except Missing as missing:
                raise EvaluationError(f"rule {rule.id} ({rule.location}) fired but cannot compute "
                                      f"{conclusion.path}: needs {', '.join(missing.paths)}") from None
            except (ArithmeticError, ValueError, TypeError) as error:
                raise EvaluationError(f"rule {rule.id} ({rule.location}) cannot compute {conclusion.path}: "
                                      f"{error} (from {self._inputs_of(conclusion.value)})") from None
            problem = None if compiled.accepts(value) else value_problem(self.vocabulary, conclusion.path, value)
            if problem:
                raise EvaluationError(f"rule {rule.id} ({rule.location}) computes {conclusion.path} = "
                                      f"{fmt(value)}: {problem} (from {self._inputs_of(conclusion.value)})")
            known = self.values.get(conclusion.path)
            if known is not None:
                if known[0] != value:
                    first, second = sorted([(known[1], known[0]), (rule.id, value)], key=lambda rv: self.order.get(rv[0], 0))
                    raise EvaluationError(f"rules {first[0]} and {second[0]} derive different values for "
                                          f"{conclusion.path} ({fmt(first[1])} vs {fmt(second[1])}); "
                                          "make their conditions exclusive")
                continue
            self.values[conclusion.path] = (value, rule.id)
            self.known[conclusion.path] = value
            new.append((conclusion.path, value))
        return new

    def _inputs_of(self, node: Value) -> str:
        return ", ".join(f"{p}={fmt(self.lookup(p)[1])}" for p in unique_facts(node)
                         if self.lookup(p)[0] == KNOWN) or "constants"


def value_problem(vocabulary: Vocabulary, path: str, value: Any) -> str | None:
    """Why a derived value does not fit its declared type, or None."""
    spec = vocabulary.get(path)
    if spec is None:        # the loader admits only declared facts; this keeps a stray one from crashing here
        return "not a fact the vocabulary declares"
    if spec.type == "bool":
        return None if isinstance(value, bool) else "not true or false"
    if spec.type == "enum":
        return None if value in spec.values else f"not one of {', '.join(spec.values)}"
    if spec.is_numeric:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        if not math.isfinite(value):
            return "not a finite number"
        if isinstance(value, int) and abs(value) > MAX_EXACT:
            # durable_rules' core saturates integers at 2^63: beyond ±2^53 the evaluators could disagree
            return "beyond ±2^53, the largest integers kbopt computes exactly"
    return None


def finish(pack: Pack, fired: set[str], derived: DerivedFacts) -> Derivation:
    """The evaluation's result: the rules that fired in pack order, and each derived fact with
    the first of them (in pack order) that derives it. Every fact a fired rule derives is set
    (a rule that cannot compute one fails the evaluation), so which rule each fact is credited
    to follows from the set of rules alone: kept per pack and set of rules once a set comes back
    (engine/pack/kept.py), as most evaluations of a batch, and most what-ifs, fire a set some
    evaluation fired before."""
    key = frozenset(fired)
    runtime = pack.runtime
    plans = runtime.finish_plans
    if plans is None:
        plans = runtime.finish_plans = Kept(PLANS_KEPT)
    plan = plans.get(key)
    if plan is None:
        plan = finish_plan(pack, fired)
        plans.offer(key, plan)
    order, paths, credits = plan
    values = derived.values
    # values holds each fact a fired rule derives (every one is set, and only they set one)
    # with the first rule that set it, and the evaluation is done with it: it is the result as
    # it stands, in no particular order, once each fact that more than one fired rule derives
    # is credited as in pack order (chaining order need not be).
    facts = values if len(values) == len(paths) else {path: values[path] for path in paths if path in values}
    for path, rule_id in credits:
        if path in facts and facts[path][1] != rule_id:
            facts[path] = (facts[path][0], rule_id)
    return Derivation(fired=order, derived=facts)


PLANS_KEPT = 512       # sets of fired rules whose credits a pack keeps: about 4 KB each, 2 MB at most

# finish's plan for a set of fired rules: those rules in pack order; the facts they derive, in
# order; and the credit of each fact that more than one of them derives
FinishPlan = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]


def finish_plan(pack: Pack, fired: set[str]) -> FinishPlan:
    """finish's plan: credit_plan's, with only the facts whose credit the values may not hold
    (in one pass: with a large pack most sets of fired rules are new)."""
    order = tuple(sorted(fired, key=pack.order.__getitem__))
    rules = pack.by_id()
    first: dict[str, str] = {}
    shared: set[str] = set()
    for rule_id in order:
        for path in rules[rule_id].derives:
            if path in first:
                shared.add(path)
            else:
                first[path] = rule_id
    return order, tuple(first), tuple((path, first[path]) for path in sorted(shared))


def credit_plan(pack: Pack, fired: set[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The fired rules in pack order, and (fact, the first of them deriving it) by fact."""
    order = tuple(sorted(fired, key=pack.order.__getitem__))
    first: dict[str, str] = {}
    rules = pack.by_id()
    for rule_id in order:
        for path in rules[rule_id].derives:
            first.setdefault(path, rule_id)
    return order, tuple(sorted(first.items()))
