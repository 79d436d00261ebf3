"""Typed rules: what the loader produces and every evaluator consumes (the intermediate form)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar

from kbopt.engine.pack.runtime import Runtime
from kbopt.kb.catalog import LAYERS, Layer  # noqa: F401  (re-exported: rules are read by layer)
from kbopt.kb.knowledge import KnowledgeBase, builtin_knowledge


def candidate_key(strategy: str, variant: str | None = None) -> str:
    """Node name of a candidate strategy: `op_fusion`, `quantization[int8]`."""
    return f"{strategy}[{variant}]" if variant else strategy


@dataclass(frozen=True)
class StrategyRef:
    """A strategy, or one variant of it: the one spelling of `quantization[int8]` once parsed."""
    strategy: str
    variant: str | None = None

    @classmethod
    def parse(cls, key: str) -> StrategyRef:
        strategy, _, variant = key.rstrip("]").partition("[")
        return cls(strategy, variant or None)

    @property
    def key(self) -> str:
        return candidate_key(self.strategy, self.variant)

    def matches(self, strategy: str, variant: str | None) -> bool:
        """True for `strategy` itself (no variant asked) or for the variant asked."""
        return refers_to(self.strategy, self.variant, strategy, variant)


def refers_to(wanted: str, wanted_variant: str | None, strategy: str, variant: str | None) -> bool:
    """StrategyRef(wanted, wanted_variant).matches(strategy, variant), without making the
    reference: an advice asks it for every caveat and chosen strategy."""
    return strategy == wanted and (wanted_variant is None or variant == wanted_variant)


@dataclass(frozen=True)
class Derive:
    path: str
    value: Any                     # an expression node (Const for a literal)


@dataclass(frozen=True)
class Recommend:
    strategy: str
    variant: str | None
    params: tuple[tuple[str, Any], ...]    # (name, expression node), in file order
    weight: float
    gain: str | None = None

    @property
    def key(self) -> str:
        return candidate_key(self.strategy, self.variant)


@dataclass(frozen=True)
class Reject:
    strategy: str
    variant: str | None
    reason: str
    after_plan: bool = False       # decided on the deployment the advice's other changes leave, not today's

    @property
    def key(self) -> str:
        return candidate_key(self.strategy, self.variant)


@dataclass(frozen=True)
class Caveat:
    strategy: str
    variant: str | None
    text: str

    @property
    def key(self) -> str:
        return candidate_key(self.strategy, self.variant)


@dataclass(frozen=True)
class Require:
    """`strategy` is only safe together with `needs` (a strategy, or `strategy[variant]`).
    Several requirements of one candidate on variants of the same strategy are alternatives."""
    strategy: str
    variant: str | None
    needs: str

    @property
    def key(self) -> str:
        return candidate_key(self.strategy, self.variant)


@dataclass(frozen=True)
class Mitigate:
    strategy: str                  # the strategy whose side effect is mitigated
    by: str                        # the strategy that mitigates it
    text: str | None = None


@dataclass(frozen=True)
class Warn:
    """A warning about the advice as a whole (e.g. it rests on proxy telemetry)."""
    text: str


Conclusion = Derive | Recommend | Reject | Caveat | Require | Mitigate | Warn
C = TypeVar("C", Derive, Recommend, Reject, Caveat, Require, Mitigate, Warn)


@dataclass(frozen=True)
class Drawn(Generic[C]):
    """A conclusion together with the fired rule that drew it."""
    rule: str
    conclusion: C


@dataclass(frozen=True)
class Parameter:
    name: str
    value: Any
    why: str
    overrides: bool = False        # in a pack's parameters.yaml: retunes an earlier pack's value
    line: int | None = None


@dataclass(frozen=True)
class Example:
    name: str
    facts: dict[str, Any]
    fires: bool | str              # True, False (decided false) or "unknown" (not evaluated)
    expect: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    layer: Layer
    when_text: str
    when: Any                      # condition node, as written
    fire_condition: Any            # `when` and Needs() of every fact a derived value is computed from
    then: tuple[Conclusion, ...]
    because: str
    sources: tuple[str, ...]
    parameters: tuple[Parameter, ...] = ()
    examples: tuple[Example, ...] = ()
    notes: str | None = None
    tags: tuple[str, ...] = ()
    file: str = ""
    line: int = 1
    pack: str = "builtin"
    overrides: bool = False
    lines: dict[str, int] = field(default_factory=dict)   # line of each top-level key, for lint

    @cached_property
    def derives(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.then if isinstance(c, Derive))

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


RulesetText = tuple[str, int, tuple[tuple[str, ...], ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


@dataclass
class Compiled:
    """What backends compile from a pack that is plain data, worked out once and stored with the pack
    in the compiled-pack cache (engine/evaluators' precompile fills it before the cache writes):
    the reference evaluator's schedule, as rule ids component by component (a 1,000-rule pack's took
    a cold advise 15 ms), and durable_rules' rulesets as the JSON text its C core takes."""
    schedule_order: tuple[tuple[str, ...], ...] | None = None
    durable_rulesets: tuple[RulesetText, ...] | None = None


@dataclass(frozen=True)
class Pack:
    rules: tuple[Rule, ...]
    version: str                   # content hash of the rule files
    producers: dict[str, tuple[str, ...]] = field(default_factory=dict)   # derived fact -> rule ids
    kb: KnowledgeBase = field(default_factory=builtin_knowledge)          # what the rules were checked against
    compiled: Compiled = field(default_factory=Compiled, compare=False, repr=False)

    @cached_property
    def runtime(self) -> Runtime:
        """What running the pack makes from it (engine/pack/runtime.py): not part of its value."""
        return Runtime()

    def __getstate__(self) -> dict[str, object]:
        """The pack's fields alone: a pickled pack (a spawned batch worker's) makes its own runtime."""
        return {name: self.__dict__[name] for name in ("rules", "version", "producers", "kb", "compiled")}

    def by_id(self) -> dict[str, Rule]:
        return self._by_id

    @cached_property
    def order(self) -> dict[str, int]:
        return {rule.id: index for index, rule in enumerate(self.rules)}

    @cached_property
    def _by_id(self) -> dict[str, Rule]:
        return {rule.id: rule for rule in self.rules}
