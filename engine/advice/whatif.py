"""What a strategy would bring, by re-evaluating the performance model with its effects applied.

A strategy's effects (kb/strategies.yaml) change input facts. The rules the estimates rest on run
again on the changed facts (only those that read a change, directly or through a derived fact:
engine/evaluators/reference.py, Rerun), and every estimate is compared before and after: the gain
is what the model says, never a hand formula, and several strategies applied together (the plan) go
through the model once, so their gains combine where the model combines them and stop at the
next roof (max of compute and bandwidth) instead of multiplying.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from kbopt.engine.advice.estimates import Confidence, Estimate, Model, input_confidence, trace, weakest
from kbopt.engine.advice.restate import GAUGE_READ_ON
from kbopt.engine.evaluators.reference import rerun_of
from kbopt.engine.lang.logic import KNOWN, Missing, value_of
from kbopt.engine.lang.nodes import Call, Fact, Value, facts_of
from kbopt.engine.lang.parse import parse_value
from kbopt.engine.lang.text import fmt
from kbopt.engine.pack.rule import Pack
from kbopt.errors import EvaluationError, KboptError
from kbopt.kb.catalog import Strategy
from kbopt.kb.vocabulary import DERIVED_SECTION, QUALITY_PREFIX, Vocabulary

MINUS, TIMES = "\u2212", "\u00d7"   # typeset minus and times signs (ruff flags them written out)
FORGET = None          # an effect's value that forgets a measurement the change makes stale


def relative_change(before: Any, after: Any) -> float:
    """Relative change; a move away from zero counts as infinite."""
    if before == 0:
        return 0.0 if after == 0 else float("inf")
    return float((after - before) / abs(before))


def relative_text(before: Any, after: Any) -> str:
    """`-5.7%` with a true minus sign; `2.0x` past +50% (growth reads as a factor, a cut stays a share)."""
    change = relative_change(before, after)
    if change == float("inf"):
        return "from zero"
    if change >= 0.5:
        return f"{after / before:.1f}{TIMES}"
    return f"{change:+.1%}".replace("-", MINUS)


class Gain(NamedTuple):
    """How one estimate moves: `before` on today's facts, `after` with the changes applied.
    (A NamedTuple, immutable like the frozen dataclasses: a document's what-ifs make about a
    dozen, and a tuple is built in a third of the time.)"""
    metric: str                    # the estimate's name
    before: Any
    after: Any
    unit: str | None
    rules: tuple[str, ...]         # the rules that computed the after-value, its own first
    confidence: Confidence         # the weaker of the two values'

    @property
    def change(self) -> float:
        return relative_change(self.before, self.after)

    def text(self) -> str:
        """`decode step expected 21.0 → 19.8 ms (-5.7%)`, with a true minus sign; `(2.0x)` past +50%."""
        unit = f" {self.unit}" if self.unit else ""
        return f"{label(self.metric)} {number(self.before)} → {number(self.after)}{unit} ({relative_text(self.before, self.after)})"

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "before": self.before, "after": self.after, "unit": self.unit,
                "rules": list(self.rules), "confidence": self.confidence}


# The estimates that say what a deployment gets (time per step, throughput, first token, how much
# the KV cache holds); the others (ridge point, bytes per token, weights per GPU) describe it.
PERFORMANCE_METRICS = frozenset({
    "decode_step_floor_ms", "decode_step_expected_ms", "decode_tokens_per_s", "ttft_floor_ms",
    "itl_expected_ms", "ttft_expected_ms", "prefill_ms",
    "kv_pool_tokens", "kv_pool_sequences", "max_batch_kv", "max_batch_itl"})
# What a client gets: the time between tokens, to the first token, and tokens a second.
SERVICE_METRICS = ("itl_expected_ms", "decode_tokens_per_s", "ttft_expected_ms", "service_tokens_per_s")


# What a launch script's header says each change gives: the means, and the tails an SLO judges
# (set 12: a chunk budget's header showed only its TTFT cost, not the ITL p99 it exists for).
CLIENT_METRICS = ("itl_expected_ms", "itl_p99_expected_ms", "decode_tokens_per_s", "ttft_expected_ms",
                  "ttft_p99_expected_ms", "service_tokens_per_s")


def service_gain(gains: tuple[Gain, ...] | list[Gain]) -> str:
    """What a client gets from these estimates' moves, the three that say most (time between
    tokens first), as text; empty where none of them moves."""
    shown = sorted((g for g in gains if g.metric in CLIENT_METRICS), key=lambda g: CLIENT_METRICS.index(g.metric))
    return "; ".join(g.text() for g in shown[:3])


# What a client gets, as each objective judges it: a latency objective by the times, a throughput
# objective by the tokens a second. (Means: a modelled tail need not read today's measured one.)
OBJECTIVE_METRICS = {
    "latency": ("itl_expected_ms", "ttft_expected_ms"),
    "throughput": ("decode_tokens_per_s", "service_tokens_per_s"),
}


def adds_too_little(full: Plan, without: Plan, threshold: float, objective: object = None) -> str | None:
    """Why a change that costs accuracy is not worth it in the plan, or None: the plan without it
    gives a client (time between tokens, to the first token, tokens a second; under a stated
    objective, what it judges) within `threshold` of the plan with it. Capacity no request fills
    is no gain, nor are tokens a second that a latency objective does not ask for (review set 30
    d3: an FP8 KV cache on A100s for 5% more decode tokens, its times within 5%)."""
    metrics = OBJECTIVE_METRICS.get(objective, SERVICE_METRICS) if isinstance(objective, str) else SERVICE_METRICS
    lean = {g.metric: g for g in without.expected}
    pairs = sorted(((g, lean[g.metric]) for g in full.expected if g.metric in metrics and g.metric in lean),
                   key=lambda pair: metrics.index(pair[0].metric))
    if not pairs or any(abs(relative_change(other.after, g.after)) >= threshold for g, other in pairs):
        return None
    shown = "; ".join(f"{label(g.metric)} {number(other.after)} → {number(g.after)}{' ' + g.unit if g.unit else ''} "
                      f"({relative_text(other.after, g.after)})" for g, other in pairs[:2])
    return (f"negligible for its accuracy cost: the plan with it against the plan without it moves what a client gets "
            f"by less than {threshold:.0%} ({shown}); the capacity it adds is not what binds")


# Facts an effect forgets or carries over only to keep the model consistent with the change
# (measurements made before it, the efficiency they calibrated); they are not what it changes.
BOOKKEEPING = frozenset({
    "workload.itl_mean_ms", "workload.itl_p99_ms", "workload.generation_tokens_per_s", "workload.prompt_tokens_per_s",
    "serving.num_gpu_blocks", "telemetry.bandwidth_efficiency", "telemetry.host_step_ms", "telemetry.step_unexplained_ms",
    "telemetry.itl_p99_model_fit",
    "workload.arrival_rate_per_s"})


@dataclass(frozen=True)
class Outcome:
    """One what-if: the changes made, and how the estimates moved."""
    changes: tuple[tuple[str, Any], ...]   # fact -> new value (None: forgotten)
    moved: tuple[tuple[str, Any, Any], ...]   # (estimate, before, after) of every estimate known before and after that moved
    # Those moves as Gains, made when first asked: naming the rules behind each after-value and
    # its confidence costs, and a candidate left out of the advice shows neither (a third of them).
    explain: Callable[[], tuple[Gain, ...]] = field(default=tuple, compare=False, repr=False)
    # the estimates that rest on a changed fact, found when first asked (tracing them costs, and
    # only a what-if whose gains are all small asks)
    reach: Callable[[], tuple[str, ...]] = field(default=tuple, compare=False, repr=False)
    unevaluated: str | None = None         # why the model could not evaluate the effects

    @cached_property
    def gains(self) -> tuple[Gain, ...]:
        """Every estimate known before and after whose value moved, in vocabulary order."""
        return self.explain()

    @cached_property
    def reached(self) -> tuple[str, ...]:
        return self.reach()

    def negligible(self, threshold: float) -> bool:
        """Negligible only when the model measured what a deployment gains (a performance metric
        known before and after) and nothing moved enough: a change the model cannot size, because
        the facts lack the model's shape, is not thereby a change that brings nothing."""
        if self.unevaluated is not None or not all(abs(relative_change(before, after)) < threshold for _, before, after in self.moved):
            return False
        return any(name in PERFORMANCE_METRICS for name in self.reached)


@dataclass(frozen=True)
class Plan:
    strategies: tuple[str, ...]    # candidate keys whose effects were applied together
    expected: tuple[Gain, ...]
    # Replicas the plan serves the load on (serving.replicas, set by scale_out): its service rate
    # then counts new GPUs, which a report says beside the gain (per GPU it is this many times less).
    replicas: float | None = None
    today_replicas: float = 1.0    # serving.replicas today: the plan's GPUs are replicas / today_replicas times today's

    @property
    def gpus_factor(self) -> float:
        return (self.replicas or self.today_replicas) / self.today_replicas

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"strategies": list(self.strategies), "expected": [g.to_dict() for g in self.expected]}
        if self.replicas is not None:
            out["replicas"] = self.replicas
            if self.today_replicas != 1:
                out["today_replicas"] = self.today_replicas
        return out


def label(metric: str) -> str:
    """A metric's name as prose: `decode_step_expected_ms` -> `decode step expected`."""
    words = metric.split("_")
    while len(words) > 1 and words[-1] in ("ms", "gib", "s", "gpu", "per"):
        words.pop()
    return " ".join(words).replace("kv ", "KV ")


def number(value: Any) -> str:
    """A number as people read it: thousands separated, three significant figures past them."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}".removesuffix(".0")


def gauge_reading(inputs: Mapping[str, Any], baseline: Model) -> dict[str, Any]:
    """The pool and running batch today's KV gauge was read on, as inputs every what-if carries
    (where the facts do not give them): today's evaluation reads them as they are, so they move
    nothing until a change moves the pool or the batch."""
    if "telemetry.kv_cache_usage_ratio" not in inputs:
        return {}
    out = {}
    for source, target in GAUGE_READ_ON:
        status, value = baseline.lookup(source)
        if target not in inputs and status == KNOWN and isinstance(value, (int, float)):
            out[target] = value
    return out


class WhatIf:
    """Re-evaluates one pack's performance model on changed facts, from today's evaluation and model."""

    def __init__(self, pack: Pack, inputs: Mapping[str, Any], baseline: Model) -> None:
        self.pack, self.baseline = pack, baseline
        self.inputs = {**inputs, **gauge_reading(inputs, baseline)}
        # Each what-if re-runs only the rules downstream of the facts it changes (Rerun): the
        # same derivation as a whole evaluation, whichever evaluator made the baseline's.
        self.rerun = rerun_of(pack)
        self._outcomes: dict[tuple[tuple[str, Any], ...], Outcome] = {}
        self._effect_values: dict[str, Any] = {}
        self._effect_levels: dict[str, Confidence] = {}
        self.before = baseline.estimates()

    def changes(self, effects: tuple[tuple[str, Any], ...], owner: str) -> tuple[tuple[str, Any], ...]:
        """Each effect's value on today's final facts (FORGET where an expression lacks facts)."""
        out: list[tuple[str, Any]] = []
        for path, raw in effects:
            spec = self.pack.kb.vocabulary.get(path)
            if spec is None or spec.derived or spec.quality_of:
                raise KboptError(f"kb/strategies.yaml: {owner} changes {path}, which is not an input fact "
                                 "(effects change input facts; derived ones follow through the rules)")
            if isinstance(raw, str) and raw.startswith("="):
                out.append((path, self._computed(raw)))
            else:
                out.append((path, raw))
        return tuple(out) + self._same_replica_cap(dict(out))

    def _same_replica_cap(self, changed: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """The engine's cap restated where a change turns data-parallel attention off and sets no cap
        of its own: the fact counts a rank's requests under it, the replica's without, and the
        replica admits what it admitted (set 34 d1: DP attention off read 64 a rank as 64 in all,
        and the 96 in flight at the peak waited for slots)."""
        if "serving.dp_attention" not in changed or "serving.max_num_seqs" in changed:
            return ()
        status, cap = self.baseline.lookup("serving.max_num_seqs")
        today = self.baseline.lookup("serving.dp_attention") == (KNOWN, True)
        _, ranks = self.baseline.lookup("derived.tensor_parallel")
        after = changed["serving.dp_attention"] is True
        if status != KNOWN or not isinstance(cap, int) or not isinstance(ranks, int) or ranks < 2 or not today or after:
            return ()        # turned on, the cap the script carries or sets is sized on the plan's pool (caps.py)
        return (("serving.max_num_seqs", cap * ranks),)

    def _computed(self, raw: str) -> Any:
        """An `=expression` effect's value on today's facts, once per advice (what-ifs share them)."""
        if raw not in self._effect_values:
            try:
                self._effect_values[raw] = value_of(self._expression(raw), self.baseline.lookup)
            except Missing:
                # What the facts cannot compute is left unknown: a calibration the model never
                # made carries nothing over, and the model says what it then cannot estimate.
                self._effect_values[raw] = FORGET
        return self._effect_values[raw]

    def _expression(self, raw: str) -> Value:
        """An effect's `=expression`, parsed once per pack."""
        def parse() -> Value:
            parameters = {p.name: p.value for rule in self.pack.rules for p in rule.parameters}
            return parse_value(raw[1:], self.pack.kb.vocabulary, parameters)
        effects = self.pack.runtime.effects
        node = effects.get(raw)
        if node is None:
            node = effects[raw] = parse()
        return node

    def _on_shape(self, effects: tuple[tuple[str, Any], ...], shape: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """The effects whose `=expression` reads a fact of the deployment's shape that the plan
        changes, computed with the plan's value of it (the rest as they are)."""
        # only data-parallel attention turned off: a replica's cap sized for the plan that turns it on
        # is sized on today's pool, and divided among the ranks it under-counts the script's
        # (the regression review of set 36: DP-attention plans read 4-8x fewer running requests)
        changed = {path: value for path, value in shape.items()
                   if value is False and self.baseline.lookup(path) == (KNOWN, True)}
        if not changed:
            return effects
        out = []
        for path, raw in effects:
            if isinstance(raw, str) and raw.startswith("=") and not changed.keys().isdisjoint(facts_of(self._expression(raw))):
                def planned(fact: str) -> tuple[str, Any]:
                    return (KNOWN, changed[fact]) if fact in changed else self.baseline.lookup(fact)
                try:
                    raw = value_of(self._expression(raw), planned)
                except Missing:
                    raw = FORGET
            out.append((path, raw))
        return tuple(out)

    def _keeps_today(self, path: str, raw: Any) -> bool:
        """Whether an effect only keeps the fact's value where it is known, `= coalesce(path, ...)`,
        or pins it at today's model of it, `= derived.x` (a calibration the change holds, which
        another change that moves the fact overrides: set 40 d4, where continuous batching's
        `telemetry.host_step_ms: = derived.host_step_ms` took the plan's async-scheduling overlap
        away, and the plan moved no estimate that the action alone moved 25%)."""
        if not (isinstance(raw, str) and raw.startswith("=")):
            return False
        node = self._expression(raw)
        if isinstance(node, Fact):
            return node.path.startswith(DERIVED_SECTION)
        return isinstance(node, Call) and node.fn == "coalesce" and bool(node.args) \
            and isinstance(node.args[0], Fact) and node.args[0].path == path

    def run(self, effects: tuple[tuple[str, Any], ...], owner: str) -> Outcome:
        # The same effects move the model the same way: a plan of one strategy is its what-if.
        try:
            known = self._outcomes.get(effects)
        except TypeError:              # a value that cannot be a key (a list): not kept
            return self._run(effects, owner)
        if known is None:
            known = self._outcomes[effects] = self._run(effects, owner)
        return known

    def _run(self, effects: tuple[tuple[str, Any], ...], owner: str) -> Outcome:
        changes = self.changes(effects, owner)
        inputs = dict(self.inputs)
        levels: dict[str, Confidence] = {}
        for path, value in changes:
            inputs.pop(path, None)
            inputs.pop(QUALITY_PREFIX + path, None)
            if value is not FORGET:
                inputs[path] = value
                inputs[QUALITY_PREFIX + path] = "user"      # a setting the change makes
                levels[path] = self._level_of(effects, path)
        touched = [p for path, _ in changes for p in (path, QUALITY_PREFIX + path)]
        try:
            derivation = self.rerun.run(inputs, self.baseline.derivation, touched)
        except EvaluationError as error:
            return Outcome(changes, (), unevaluated=f"the model cannot evaluate it: {error}")
        after = Model(self.pack, inputs, derivation, levels, earlier=self.baseline,
                      recomputed=self.rerun.derived_downstream(frozenset(touched)))
        # What the strategy changes, not the measurements it keeps consistent: an estimate reached
        # only through those says nothing of what the strategy brings.
        changed = {path for path, _ in changes if path not in BOOKKEEPING}
        # Only the estimates re-derived can have moved or reach a change (the others read nothing
        # that changed, not even through derived facts): no other is traced again.
        estimates = [path for path in self.pack.kb.vocabulary.estimate_paths if path in derivation.derived]

        def reach() -> tuple[str, ...]:
            return tuple(path.removeprefix(DERIVED_SECTION) for path in estimates
                         if path in after.recomputed and not changed.isdisjoint(after.depends_anew(path)))
        # Each estimate known before whose value moved, which tells a negligible change; the
        # Gains, with the rules behind each and its confidence, are made when first asked.
        moved = [(path, was, now) for path in estimates
                 if (was := self.before.get(path.removeprefix(DERIVED_SECTION))) is not None
                 and was.value != (now := derivation.derived[path][0])]
        return Outcome(changes, tuple((was.name, was.value, now) for _, was, now in moved),
                       functools.partial(gains_of, after, moved), reach)

    def _level_of(self, effects: tuple[tuple[str, Any], ...], path: str) -> Confidence:
        """A literal setting is what it is; a computed one is as good as the facts it read."""
        raw = dict(effects).get(path)       # none: restated with the change (_same_replica_cap)
        if not (isinstance(raw, str) and raw.startswith("=")):
            return "high"
        if raw not in self._effect_levels:
            self._effect_levels[raw] = self._level_of_expression(raw)
        return self._effect_levels[raw]

    def _level_of_expression(self, raw: str) -> Confidence:
        t = trace(self._expression(raw), self.baseline.lookup)
        levels: list[Confidence] = ["low"] if t.fell_back else []
        for fact in t.read:
            if Vocabulary.is_derived(fact):
                levels.append(self.baseline.confidence(fact)[0])
            else:
                quality = self.inputs.get(QUALITY_PREFIX + fact)
                levels.append(input_confidence(fact, quality if isinstance(quality, str) else None))
        return weakest(levels)

    def strategy(self, strategy: Strategy, variant: str | None, key: str,
                 params: Mapping[str, Any] | None = None, partners: tuple[tuple[str, Any], ...] = ()) -> Outcome | None:
        """The outcome of applying one candidate, or None when it has no effects. `partners` are
        the bound effects of the changes it is only made together with (a Require between two
        candidates): applied beside its own, where it does not set the same fact, or sets it only
        to keep today's value (`= coalesce(fact, ...)`: a memory budget keeps today's requests in
        flight; the client concurrency it is paired with raises them, set 20 d2)."""
        effects = bound(strategy.effects_of(variant), params or {})
        if effects and partners:
            merged = dict(effects)
            for path, value in partners:
                if path not in merged or self._keeps_today(path, merged[path]):
                    merged[path] = value
            effects = tuple(merged.items())
        return self.run(effects, key) if effects else None

    def plan(self, chosen: list[tuple[str, Strategy, str | None, Mapping[str, Any]]]) -> Plan | None:
        """Every chosen strategy's effects together (with its parameters' values), evaluated once.
        Where two change the same fact, the stronger (earlier) strategy's change stands, unless it
        only keeps today's value (`= coalesce(fact, ...)`)."""
        merged: dict[str, Any] = {}
        applied = []
        every = [(key, bound(strategy.effects_of(variant), params)) for key, strategy, variant, params in chosen]
        for key, effects in every:
            # counted against the deployment's shape after the plan: another strategy's DP attention
            shape = {path: value for other, others in every if other != key for path, value in others
                     if path in PLAN_SHAPE and not (isinstance(value, str) and value.startswith("="))}
            effects = self._on_shape(effects, shape)
            if effects:
                applied.append(key)
                for path, value in effects:
                    if path not in merged or self._keeps_today(path, merged[path]):
                        merged[path] = value
                if any(path == "serving.replicas" for path, _ in effects):
                    # the other changes hold the arrivals at today's; more replicas split them, whatever
                    # the order (set 16 d4: 8 replicas each credited with the whole stream, 8x the demand)
                    merged.update((path, value) for path, value in effects if path in ARRIVALS)
        if not applied:
            return None
        outcome = self.run(tuple(merged.items()), "the plan")
        if outcome.unevaluated is not None:
            return None
        replicas = merged.get("serving.replicas")
        today = self.inputs.get("serving.replicas")
        today = float(today) if isinstance(today, int | float) and not isinstance(today, bool) and today >= 1 else 1.0
        if not isinstance(replicas, int | float) or isinstance(replicas, bool) or replicas <= today:
            return Plan(tuple(applied), outcome.gains)
        return Plan(tuple(applied), outcome.gains, float(replicas), today)


ARRIVALS = ("workload.arrival_rate_per_s", "workload.arrival_rate_peak_per_s")   # the load a scale-out splits
# Facts of the deployment's shape that a strategy's effect counts its setting against (a replica's
# cap written as each data-parallel attention rank's share): where another strategy of the plan
# changes one, the effect is computed with the plan's value (set 34 d1: a rank's share of 128
# written as the replica's cap once the plan turned DP attention off).
PLAN_SHAPE = frozenset({"serving.dp_attention"})
PARAM = "param:"     # an effect that sets a fact to the strategy's parameter (`param:max_num_batched_tokens`)
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")   # a parameter's number inside an `=expression` effect


def reads_params(raw: Any) -> bool:
    return isinstance(raw, str) and (raw.startswith(PARAM) or (raw.startswith("=") and _PLACEHOLDER.search(raw) is not None))


def bound(effects: tuple[tuple[str, Any], ...], params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The effects with the strategy's parameters in place: `param:NAME` is the parameter's value,
    `{NAME}` in an `=expression` its number, so the setting the strategy prints is the one the
    model evaluates. An effect on a parameter the advice does not give is left out: the fact
    stays as today (a reshape that names no dp_attention keeps today's, a memory budget that
    sets only the cap keeps today's memory fraction)."""
    out = []
    for path, raw in effects:
        if isinstance(raw, str) and raw.startswith(PARAM):
            if raw.removeprefix(PARAM) not in params:
                continue
            raw = params[raw.removeprefix(PARAM)]
        elif isinstance(raw, str) and raw.startswith("="):
            names = _PLACEHOLDER.findall(raw)
            values = {name: params.get(name) for name in names}
            if any(not isinstance(v, int | float) or isinstance(v, bool) for v in values.values()):
                continue
            raw = _PLACEHOLDER.sub(functools.partial(_placeholder_value, values), raw)
        out.append((path, raw))
    return tuple(out)


def _placeholder_value(values: Mapping[str, Any], match: re.Match[str]) -> str:
    return repr(values[match.group(1)])


def gains_of(after: Model, moved: list[tuple[str, Estimate, Any]]) -> tuple[Gain, ...]:
    """Each estimate's move (path, before, after value) as a Gain, with the rules behind it.
    A function of the what-if's model alone (its `earlier` is the baseline), not a method of
    the WhatIf: an Outcome that kept a WhatIf which keeps its outcomes would be a reference
    cycle, left for the garbage collector to find."""
    return tuple(Gain(was.name, was.value, now, was.unit, _rules(after, path),
                      weakest([was.confidence, after.confidence(path)[0]])) for path, was, now in moved)


def _rules(after: Model, path: str) -> tuple[str, ...]:
    """The rule of the after-value, then those of the derived facts it rests on that moved."""
    assert after.earlier is not None          # a what-if's model re-runs the baseline's
    rules = {after.rule_of(path): None}
    derived, before = after.derivation.derived, after.earlier.derivation.derived
    # Only a re-derived fact can have moved; in any order: all rules but the first are sorted below.
    for fact in after.depends_anew(path) & after.recomputed:
        now = derived.get(fact)
        if now is not None and (fact not in before or before[fact][0] != now[0]):
            rules[now[1]] = None
    order = after.pack.order
    first, *rest = rules
    return (first, *sorted(rest, key=lambda r: order.get(r, 0)))


def negligible_reason(outcome: Outcome, before: Mapping[str, Estimate]) -> str:
    """`negligible: decode step expected 12.3 → 12.1 ms (-1.6%)`, or what stays the same."""
    if outcome.gains:
        return "negligible: " + "; ".join(g.text() for g in outcome.gains)
    unchanged = "; ".join(f"{label(e.name)} stays {number(e.value)}{' ' + e.unit if e.unit else ''}"
                          for e in before.values() if e.name in outcome.reached)
    return "negligible: no estimate moves" + (f" ({unchanged})" if unchanged else "")
