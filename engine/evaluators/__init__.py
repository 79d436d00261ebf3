"""Evaluators: chain a pack's rules over the facts to a fix-point and report a Derivation.

Every backend meets the `Evaluator` protocol and registers here by name; the CLI, the advisor and
the tests choose one through `make_evaluator`, so a new backend touches this module alone.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from kbopt.engine.evaluators.derivation import Derivation
from kbopt.engine.evaluators.durable import DurableEvaluator, ruleset_texts
from kbopt.engine.evaluators.reference import ReferenceEvaluator, schedule_order
from kbopt.engine.pack.rule import Pack


@runtime_checkable
class Evaluator(Protocol):
    name: str

    def run(self, values: dict[str, Any]) -> Derivation: ...


# name -> factory; the first is the default where it is available
_REGISTRY: dict[str, Callable[[Pack], Evaluator]] = {"durable": DurableEvaluator, "reference": ReferenceEvaluator}
EVALUATORS = tuple(_REGISTRY)


def durable_available() -> str | None:
    """None when durable_rules' core imports here, else why not (e.g. on Python 3.13)."""
    try:
        import durable_rules_engine  # noqa: F401
    except ImportError as error:
        return str(error)
    return None


def available_evaluators() -> tuple[str, ...]:
    return EVALUATORS if durable_available() is None else ("reference",)


def precompile(pack: Pack) -> None:
    """Compile what each backend keeps with a pack, before the compiled-pack cache stores it."""
    ruleset_texts(pack)
    schedule_order(pack)


def make_evaluator(pack: Pack, name: str = "durable") -> Evaluator:
    """The pack's evaluator of that name, built once and kept with the pack (building one compiles
    the pack's rules: closures, durable_rules rulesets), so it lives exactly as long as the pack."""
    evaluators = pack.runtime.evaluators
    evaluator = evaluators.get(name)
    if evaluator is None:
        evaluator = evaluators[name] = _REGISTRY[name](pack)
        # Checked once, when made: a runtime-checkable Protocol's isinstance takes about 7 us,
        # and an advice asks for its evaluator every time.
        assert isinstance(evaluator, Evaluator)
    return evaluator
