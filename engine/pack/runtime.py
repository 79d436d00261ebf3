"""What the evaluators and the advice make from a pack and keep as long as it: one typed object.

A `Pack` is a plain value (its rules, its knowledge base, and `Compiled`, the plain data the
compiled-pack cache stores with it). Everything made from it to run it (the evaluators, each
condition's closure, the schedule as rules, the explanation's per-rule forms, the bounded caches a
batch reuses) lives here instead, made by whichever module owns it when first asked and read
through a named, typed attribute. It is never written to the cache, and a pickled pack (a spawned
batch worker) comes without it and makes its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:       # the owners' types: each module imports this one, never the reverse
    from collections.abc import Callable

    from kbopt.engine.advice.advisor import Explained
    from kbopt.engine.advice.estimates import Trace
    from kbopt.engine.advice.explain import ExplainForm, NotEvaluated
    from kbopt.engine.evaluators import Evaluator
    from kbopt.engine.evaluators.closures import ChainingCheck, CompiledCondition
    from kbopt.engine.evaluators.derivation import CompiledDerive, FinishPlan
    from kbopt.engine.evaluators.reference import Rerun
    from kbopt.engine.lang.logic import Lookup
    from kbopt.engine.lang.nodes import Value
    from kbopt.engine.pack.kept import Kept
    from kbopt.engine.pack.rule import Rule


@dataclass
class Runtime:
    # the evaluators (engine/evaluators): each by its registry name, and what they run
    evaluators: dict[str, Evaluator] = field(default_factory=dict)
    schedule: tuple[tuple[Rule, ...], ...] | None = None
    chaining: dict[str, ChainingCheck] = field(default_factory=dict)         # by rule id
    conclusions: dict[str, tuple[CompiledDerive, ...]] | None = None         # by rule id
    finish_plans: Kept[frozenset[str], FinishPlan] | None = None             # by the set of rules fired
    rerun: Rerun | None = None
    # the advice (engine/advice)
    conditions: dict[str, CompiledCondition] = field(default_factory=dict)   # catalog conditions, by text
    effects: dict[str, Value] = field(default_factory=dict)                  # what-if `=expression`s, by text
    traces: dict[tuple[str, str], Callable[[Lookup], Trace]] = field(default_factory=dict)  # by (rule, fact)
    memory_constants: tuple[tuple[str, float], ...] | None = None
    explained: dict[str, Explained] = field(default_factory=dict)            # each fired rule's texts
    explain_forms: dict[str, ExplainForm] | None = None                      # by rule id
    absent_order: tuple[tuple[str, ...], dict[str, int], dict[str, tuple[str, ...]]] | None = None
    not_evaluated_walks: Kept[tuple[Any, ...], tuple[NotEvaluated, ...]] | None = None
