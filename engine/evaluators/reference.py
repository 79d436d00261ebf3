"""The pure-Python reference evaluator: the rules run once each, in dependency order.

It is the test oracle for the durable_rules backend (which hashes facts to 32 bits and can
silently drop one), and the fallback where the durable_rules extension does not import.

Conditions can only gain truth as derived facts appear (the loader refuses to negate a derived
fact, and a derived fact never changes once set), so running each rule after every rule that
can produce what it reads reaches the same fix-point as re-checking every rule until nothing
changes. Only rules that feed each other in a cycle are re-checked, among themselves.
"""
from __future__ import annotations

from typing import Any

from kbopt.engine.evaluators.derivation import Derivation, DerivedFacts, finish
from kbopt.engine.lang.nodes import facts_of
from kbopt.engine.pack.graph import strongly_connected
from kbopt.engine.pack.rule import Pack, Rule


def schedule(pack: Pack) -> tuple[tuple[Rule, ...], ...]:
    """The pack's rules grouped into components (rules that feed each other in a cycle), each
    after every component that produces a fact it reads; within a component, pack order."""
    consumers: dict[str, list[str]] = {}
    for rule in pack.rules:
        for path in dict.fromkeys(facts_of(rule.fire_condition)):
            for producer in pack.producers.get(path, ()):
                consumers.setdefault(producer, []).append(rule.id)
    rules = pack.by_id()
    components = strongly_connected([r.id for r in pack.rules], lambda rule_id: consumers.get(rule_id, ()))
    # Tarjan lists consumers before their producers: reversed, producers come first.
    return tuple(tuple(sorted((rules[r] for r in component), key=lambda r: pack.order[r.id]))
                 for component in reversed(components))


class ReferenceEvaluator:
    name = "reference"

    def __init__(self, pack: Pack):
        self.pack = pack
        # Conditions run as closures compiled once per pack (Pack.check), not as tree walks.
        self.schedule = tuple(tuple((rule, pack.check(rule.id)) for rule in component) for component in schedule(pack))

    def run(self, values: dict[str, Any]) -> Derivation:
        derived = DerivedFacts(values, self.pack)
        fired: set[str] = set()
        for component in self.schedule:
            changed = True
            while changed:
                changed = False
                for rule, check in component:
                    if rule.id not in fired and check(derived.lookup) is True:
                        fired.add(rule.id)
                        derived.conclude(rule)
                        changed = len(component) > 1
        return finish(self.pack, fired, derived)
