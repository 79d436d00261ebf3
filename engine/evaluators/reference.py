"""The pure-Python reference evaluator: a naive fix-point over the same rules.

It is the test oracle for the durable_rules backend (which hashes facts to 32 bits and can
silently drop one), and the fallback where the durable_rules extension does not import.
"""
from __future__ import annotations

from typing import Any

from kbopt.engine.lang.logic import evaluate
from kbopt.engine.evaluators.derivation import Derivation, DerivedFacts, finish
from kbopt.engine.pack.rule import Pack


class ReferenceEvaluator:
    name = "reference"

    def __init__(self, pack: Pack):
        self.pack = pack

    def run(self, values: dict[str, Any]) -> Derivation:
        derived = DerivedFacts(values, self.pack.order)
        fired: set[str] = set()
        changed = True
        while changed:
            changed = False
            for rule in self.pack.rules:
                if rule.id not in fired and evaluate(rule.fire_condition, derived.lookup) is True:
                    fired.add(rule.id)
                    derived.conclude(rule)
                    changed = True
        return finish(self.pack, fired, derived)
