"""The pure-Python reference evaluator: the rules run once each, in dependency order.

It is the test oracle for the durable_rules backend (which hashes facts to 32 bits and can
silently drop one), and the fallback where the durable_rules extension does not import.

Conditions can only gain truth as derived facts appear (the loader refuses to negate a derived
fact, and a derived fact never changes once set), so running each rule after every rule that
can produce what it reads reaches the same fix-point as re-checking every rule until nothing
changes. Only rules that feed each other in a cycle are re-checked, among themselves.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kbopt.engine.evaluators.closures import ChainingCheck, compile_chaining_check
from kbopt.engine.evaluators.derivation import Derivation, DerivedFacts, credit_plan, finish
from kbopt.engine.lang.nodes import facts_of
from kbopt.engine.pack.graph import strongly_connected
from kbopt.engine.pack.kept import Kept
from kbopt.engine.pack.rule import Derive, Pack, Rule

Schedule = tuple[tuple[tuple[Rule, ChainingCheck], ...], ...]


@dataclass(frozen=True)
class Chain:
    """A schedule ready to run: its rules, component by component, with their compiled checks."""
    schedule: Schedule

    def run(self, derived: DerivedFacts, fired: set[str]) -> None:
        """Fire every scheduled rule whose condition holds, in order; a cycle's rules until none fires."""
        known = derived.known
        for component in self.schedule:
            if len(component) == 1:          # most rules: checked once, after everything they read
                rule, check = component[0]
                if check(known) is True and rule.id not in fired:
                    fired.add(rule.id)
                    derived.conclude(rule)
                continue
            _cycle(known, fired, derived.conclude, component)


def schedule(pack: Pack) -> tuple[tuple[Rule, ...], ...]:
    """The pack's rules grouped into components (rules that feed each other in a cycle), each
    after every component that produces a fact it reads (`reads`); within a component, pack order."""
    consumers: dict[str, list[str]] = {}
    for rule in pack.rules:
        # every fact the rule reads, the alternatives of a coalesce() included: a derived
        # alternative must be decided before the rule computes, or which one it takes would
        # follow the pack's order rather than the facts
        for path in reads(rule):
            for producer in pack.producers.get(path, ()):
                consumers.setdefault(producer, []).append(rule.id)
    rules = pack.by_id()
    components = strongly_connected([r.id for r in pack.rules], lambda rule_id: consumers.get(rule_id, ()))
    # Tarjan lists consumers before their producers: reversed, producers come first.
    return tuple(tuple(sorted((rules[r] for r in component), key=lambda r: pack.order[r.id]))
                 for component in reversed(components))


def schedule_order(pack: Pack) -> tuple[tuple[str, ...], ...]:
    """The rule ids of `schedule(pack)`, component by component: worked out once per pack and
    kept in the compiled-pack cache (a 1,000-rule pack's took a cold advise 15 ms)."""
    compiled = pack.compiled
    if compiled.schedule_order is None:
        compiled.schedule_order = tuple(tuple(rule.id for rule in component) for component in schedule(pack))
    return compiled.schedule_order


def scheduled(pack: Pack) -> tuple[tuple[Rule, ...], ...]:
    """`schedule(pack)`, from its kept order."""
    def rules_of() -> tuple[tuple[Rule, ...], ...]:
        rules = pack.by_id()
        return tuple(tuple(rules[rule_id] for rule_id in component) for component in schedule_order(pack))
    runtime = pack.runtime
    if runtime.schedule is None:
        runtime.schedule = rules_of()
    return runtime.schedule


class ReferenceEvaluator:
    name = "reference"

    def __init__(self, pack: Pack):
        self.pack = pack
        self.chain = make_chain(pack)      # conditions run as closures, not as tree walks

    def run(self, values: dict[str, Any]) -> Derivation:
        derived = DerivedFacts(values, self.pack)
        fired: set[str] = set()
        self.chain.run(derived, fired)
        return finish(self.pack, fired, derived)


def _cycle(known: dict[str, Any], fired: set[str], conclude: Callable[[Rule], Any],
           component: tuple[tuple[Rule, ChainingCheck], ...]) -> None:
    """Rules that feed each other: checked in turn until none fires."""
    changed = True
    while changed:
        changed = False
        for rule, check in component:
            if rule.id not in fired and check(known) is True:
                fired.add(rule.id)
                conclude(rule)
                changed = True


def reads(rule: Rule) -> tuple[str, ...]:
    """Every fact a rule's evaluation can look at: its condition's and its derive expressions'."""
    derived_from = (path for c in rule.then if isinstance(c, Derive) for path in facts_of(c.value))
    return tuple(dict.fromkeys([*facts_of(rule.fire_condition), *derived_from]))


class Rerun:
    """The pack evaluated again after some input facts changed, from an earlier evaluation.

    Only the rules *downstream* of the changed facts run: those that read one, or read a fact
    that a downstream rule derives. Every other rule reads exactly what it read before, so it
    fires as before and derives the same values, which are taken over from the earlier
    derivation. The result is the Derivation a whole evaluation of the changed facts gives (a
    test checks it against one): the what-ifs of an advice re-evaluate the model this way, for
    a fraction of a whole evaluation each.

    With `wanted` (derived facts, e.g. the performance model's estimates), it also leaves out
    the rules that nothing wanted rests on: only the producers of wanted facts run, and the
    producers of the derived facts those read, transitively. The Derivation is then exact for
    those rules (what they fire and derive; a test checks it) and silent on the others: a rule
    that only recommends, or an error in a rule no estimate rests on, is not the model's.
    """

    def __init__(self, pack: Pack, wanted: frozenset[str] | None = None):
        self.pack = pack
        consumers: dict[str, list[str]] = {}
        for rule in pack.rules:
            for path in reads(rule):
                consumers.setdefault(path, []).append(rule.id)
        self.consumers = consumers
        self.relevant = upstream(pack, wanted) if wanted is not None else frozenset(pack.order)
        self._downstream: dict[frozenset[str], frozenset[str]] = {}
        self._chains: dict[frozenset[str], Chain] = {}
        self._derived: dict[frozenset[str], frozenset[str]] = {}
        self._takes: Kept[tuple[tuple[str, ...], frozenset[str]],
                          tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = Kept(TAKES_KEPT)

    def chain(self, changed: frozenset[str]) -> Chain:
        """The schedule of the rules downstream of `changed`, kept per fact set."""
        chain = self._chains.get(changed)
        if chain is None:
            chain = self._chains[changed] = make_chain(self.pack, self.downstream(changed))
        return chain

    def downstream(self, changed: frozenset[str]) -> frozenset[str]:
        """The rules downstream of `changed`, among the relevant ones (kept per fact set: the
        what-ifs of one strategy always change the same facts)."""
        known = self._downstream.get(changed)
        if known is not None:
            return known
        rules = self.pack.by_id()
        found: set[str] = set()
        seen, stack = set(changed), list(changed)
        while stack:
            for rule_id in self.consumers.get(stack.pop(), ()):
                if rule_id not in found:
                    found.add(rule_id)
                    for path in rules[rule_id].derives:
                        if path not in seen:
                            seen.add(path)
                            stack.append(path)
        result = self._downstream[changed] = frozenset(found) & self.relevant
        return result

    def derived_downstream(self, changed: frozenset[str]) -> frozenset[str]:
        """The derived facts a rule downstream of `changed` produces: all that may differ."""
        known = self._derived.get(changed)
        if known is None:
            rules = self.pack.by_id()
            known = self._derived[changed] = frozenset(
                path for rule_id in self.downstream(changed) for path in rules[rule_id].derives)
        return known

    def run(self, values: dict[str, Any], earlier: Derivation, changed: Iterable[str]) -> Derivation:
        """The evaluation of `values`, which differ from those of `earlier` at most in `changed`."""
        changed = frozenset(changed)
        rerun, chain = self.downstream(changed), self.chain(changed)
        derived = DerivedFacts(values, self.pack)
        kept, taken = self._kept(earlier.fired, changed, rerun)
        fired = set(kept)
        for path, rule_id in taken:
            derived.take(path, earlier.derived[path][0], rule_id)
        chain.run(derived, fired)
        return finish(self.pack, fired, derived)

    def _kept(self, fired: tuple[str, ...], changed: frozenset[str], rerun: frozenset[str]
              ) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """The earlier evaluation's fired rules that do not run again, in pack order, and each
        fact they derive with the first of them deriving it: what depends on the rules that fired
        and the facts changed alone, kept per both (engine/pack/kept.py) as a what-if's comes back."""
        key = (fired, changed)
        found = self._takes.get(key)
        if found is None:
            # the same crediting as an evaluation's result (finish), over the rules kept
            found = credit_plan(self.pack, {rule_id for rule_id in fired if rule_id not in rerun and rule_id in self.relevant})
            self._takes.offer(key, found)
        return found


TAKES_KEPT = 512      # (fired rules, changed facts) whose kept rules a Rerun keeps: a few KB each


def upstream(pack: Pack, wanted: frozenset[str]) -> frozenset[str]:
    """The rules that derive a wanted fact, or a derived fact such a rule reads, transitively."""
    rules = pack.by_id()
    found: set[str] = set()
    seen, stack = set(wanted), list(wanted)
    while stack:
        for rule_id in pack.producers.get(stack.pop(), ()):
            if rule_id not in found:
                found.add(rule_id)
                for path in reads(rules[rule_id]):
                    if path in pack.producers and path not in seen:
                        seen.add(path)
                        stack.append(path)
    return frozenset(found)


def chaining_check(pack: Pack, rule: Rule) -> ChainingCheck:
    """The rule's fire condition as the evaluators test it while chaining, compiled once per pack."""
    checks = pack.runtime.chaining
    check = checks.get(rule.id)
    if check is None:
        check = checks[rule.id] = compile_chaining_check(rule.fire_condition)
    return check


def make_chain(pack: Pack, only: frozenset[str] | None = None) -> Chain:
    """The pack's schedule (only some rules') with each rule's chaining check, ready to run."""
    picked = (tuple(rule for rule in component if only is None or rule.id in only) for component in scheduled(pack))
    return Chain(tuple(tuple((rule, chaining_check(pack, rule)) for rule in component) for component in picked if component))


def rerun_of(pack: Pack) -> Rerun:
    """The pack's Rerun for the performance model's estimates, built once and kept with the pack."""
    runtime = pack.runtime
    if runtime.rerun is None:
        runtime.rerun = Rerun(pack, frozenset(pack.kb.vocabulary.estimate_paths))
    return runtime.rerun
