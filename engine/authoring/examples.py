"""Run each rule's inline examples: facts in, fires or not, what it concludes."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.model import Advice
from kbopt.engine.lang.logic import KNOWN, evaluate, not_held
from kbopt.engine.lang.nodes import leaves
from kbopt.engine.pack.rule import Example, Pack, Rule
from kbopt.errors import FactsError
from kbopt.kb.facts import facts_from_document


@dataclass(frozen=True)
class ExampleResult:
    rule: str
    example: str
    location: str
    evaluator: str
    failures: tuple[str, ...]
    leaves: tuple[bool | None, ...] = ()    # each comparison of the rule's condition, on this example


    @property
    def ok(self) -> bool:
        return not self.failures


def check_example(rule: Rule, example: Example, pack: Pack, evaluator: str) -> ExampleResult:
    location = f"{rule.file}:{example.line}"
    try:
        facts = facts_from_document(example.facts, "facts")
    except FactsError as error:
        return ExampleResult(rule.id, example.name, location, evaluator, (f"the example's {error}",))
    advice = advise(facts, pack, evaluator)
    values = {**facts.engine_values(pack.kb.vocabulary), **advice.derived}

    def lookup(path: str) -> tuple[str, Any]:
        if path in values:
            return KNOWN, values[path]
        return not_held(path)
    outcomes = tuple(evaluate(leaf, lookup) for leaf in leaves(rule.when))
    return ExampleResult(rule.id, example.name, location, evaluator, tuple(expectation_failures(rule, example, advice)),
                         outcomes)


def leaf_coverage(results: list[ExampleResult]) -> tuple[int, int]:
    """(comparisons seen both true and false across their rule's examples, all comparisons)."""
    seen: dict[tuple[str, int], set[bool | None]] = {}
    for result in results:
        for index, outcome in enumerate(result.leaves):
            seen.setdefault((result.rule, index), set()).add(outcome)
    return sum(1 for outcomes in seen.values() if {True, False} <= outcomes), len(seen)


def expectation_failures(rule: Rule, example: Example, advice: Advice) -> list[str]:
    failures = []
    fired = {f.rule for f in advice.fired}
    missing = next((n.missing for n in advice.not_evaluated if n.rule == rule.id), None)
    # A non-firing example must decide the rule false: "not evaluated" is its own outcome.
    outcome = True if rule.id in fired else ("unknown" if missing is not None else False)
    if outcome != example.fires:
        found = {True: "it fired", False: "it was decided false",
                 "unknown": f"it was not evaluated (missing {', '.join(missing or ())})"}[outcome]
        failures.append(f"expected fires: {str(example.fires).lower()}, found: {found}")
    expect = example.expect
    if "bottleneck" in expect and advice.bottleneck != expect["bottleneck"]:
        failures.append(f"expected bottleneck {expect['bottleneck']}, found {advice.bottleneck}")
    for path, value in (expect.get("derived") or {}).items():
        found = advice.derived.get(path, "(not derived)")
        if found != value:
            failures.append(f"expected {path} = {value!r}, found {found!r}")
    chosen = {s.key for s in advice.strategies} | {s.id for s in advice.strategies}
    for key in expect.get("chosen", ()):
        if key not in chosen:
            failures.append(f"expected {key} among the strategies, found {sorted(chosen)}")
    rejected = {r.key for r in advice.rejected} | {r.id for r in advice.rejected}
    for key in expect.get("rejected", ()):
        if key not in rejected:
            failures.append(f"expected {key} rejected, found rejected {sorted(rejected)}")
    by_id = {s.id: s for s in advice.strategies if not s.stands_in_for}   # the plan's variant, not the script's stand-in
    for strategy, params in (expect.get("params") or {}).items():
        advised = by_id.get(strategy)
        for name, value in params.items():
            got = advised.params.get(name, "(absent)") if advised else "(strategy not chosen)"
            if got != value:
                failures.append(f"expected {strategy}.{name} = {value!r}, found {got!r}")
    return failures


def run_examples(pack: Pack, evaluators: Sequence[str] = ("durable", "reference"),
                 rules: Sequence[Rule] | None = None) -> list[ExampleResult]:
    """Each rule's examples (`rules`: these of the pack's, default all) on each evaluator, in the whole pack."""
    return [check_example(rule, example, pack, evaluator)
            for rule in (pack.rules if rules is None else rules) for example in rule.examples for evaluator in evaluators]
