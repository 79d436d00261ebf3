"""Symptoms: what the deployment shows today, computed from the facts (not from the rules): each
objective it misses and by how much, queue timeouts, preemptions, queueing, and the share of the
GPU's math that prefills take where the performance model gives it. Every format shows them first,
before the bottleneck (docs/advice-format.md#symptoms)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbopt.engine.advice.whatif import Plan, number

MEASURED, ESTIMATED = "measured", "estimated"

# The prefill share worth a line: from a quarter of the GPU's math, prefills visibly stretch the
# decode steps they share (and the TTFT of the prompts queued behind them).
PREFILL_SHARE_SHOWN = 0.25
# Queueing worth a line: on average at least one request waits.
WAITING_SHOWN = 1.0

# (kind, label, objective, measured facts in order of preference, the model's estimate). An
# objective on the mean (constraints.*_slo_stat) reads the mean alone: its tail judges nothing.
_OBJECTIVES = (
    ("ttft", "TTFT", "constraints.ttft_slo_ms", (("workload.ttft_p99_ms", "p99"), ("workload.ttft_mean_ms", "mean")),
     "derived.ttft_expected_ms"),
    ("itl", "ITL", "constraints.itl_slo_ms", (("workload.itl_p99_ms", "p99"), ("workload.itl_mean_ms", "mean")),
     "derived.itl_expected_ms"),
)


def on_the_mean(facts: Mapping[str, Any], objective_fact: str) -> bool:
    """Whether an SLO (constraints.ttft_slo_ms, constraints.itl_slo_ms) bounds the mean, as its
    constraints.*_slo_stat says; else it bounds the 99th percentile."""
    return facts.get(objective_fact.removesuffix("_ms") + "_stat") == "mean"
# The estimate whose move under the plan scales each measured statistic: a p99 ITL moves as the
# modelled p99 (its prefill stalls included), a TTFT p99 as the modelled p99 (the long prompt after
# the queue's tail), not as the mean: a queue the plan drains shrinks the tail more than the mean.
_SCALED_BY = {"workload.itl_p99_ms": "derived.itl_p99_expected_ms", "workload.itl_mean_ms": "derived.itl_expected_ms",
              "workload.ttft_p99_ms": "derived.ttft_p99_expected_ms", "workload.ttft_mean_ms": "derived.ttft_expected_ms"}
# Where the estimate is of the measured statistic itself, a model that reads today's value this far
# off (either way) does not scale it: its ratio would carry its own error into the projection.
_SAME_STATISTIC = frozenset({"workload.itl_p99_ms", "workload.itl_mean_ms", "workload.ttft_mean_ms", "workload.ttft_p99_ms"})
AGREEMENT = 1.5
# An objective met today is shown where the plan takes its statistic this much further toward (or
# past) it: a trade the advice makes for another objective (a chunk budget for the ITL spends TTFT).
WORSENED_SHOWN = 0.05
# The smallest chunk budget the advice prints (S-CHUNKED-PREFILL, C-CHUNK-BUDGET-MISSES-ITL).
CHUNK_FLOOR = 64


@dataclass(frozen=True)
class Symptom:
    """One thing the facts show going wrong, or an objective the plan spends. `objective` and
    `miss` (value / objective - 1) are set for an objective (negative where it is met today and the
    plan spends its room); `against` for queueing (the requests running)."""
    kind: str                        # ttft | itl | queue_timeouts | preemptions | queueing | prefill_share
    fact: str                        # the fact that shows it: workload.ttft_p99_ms
    value: float
    unit: str
    source: str                      # measured (a fact given) | estimated (the performance model's)
    objective: float | None = None
    objective_fact: str | None = None
    miss: float | None = None
    against: float | None = None
    against_fact: str | None = None
    label: str = ""                  # `TTFT p99`
    after: float | None = None       # a missed objective's value after the whole plan (the model's ratio applied)
    after_basis: str | None = None   # the estimate whose before -> after ratio scales it
    unprojected: str = ""            # why the plan's move is not projected onto the measurement
    traded_for: str = ""             # the missed objective the plan meets at this one's cost (its label)
    # the model's own before -> after of that estimate where the move is not projected onto the
    # measurement: two plans can still be ranked by it (advisor._objective_score)
    model_move: tuple[float, float] | None = None
    # a missed first-token objective's own prompt's prefill after the plan, where that alone is
    # past the objective: no setting of this engine on these GPUs meets it (review set 40 d2)
    floor: float | None = None
    # what can still meet it then, of the levers not in place (review set 42 F10: FP8 tensor cores
    # and tensor parallelism named on four H100s already running FP8 W8A8 at TP4)
    floor_levers: str = ""

    def text(self) -> str:
        """`TTFT p99 1,350 ms against a 1,000 ms objective (+35%)`, and where the plan moves it,
        `; after the plan about 900 ms: meets it`."""
        if self.objective is not None and self.miss is not None and self.miss < 0:
            return f"{self.label} {number(self.value)} {self.unit} within a {number(self.objective)} {self.unit} objective" \
                + self._after_text(spent=True)
        if self.objective is not None and self.miss is not None:
            miss = f"+{self.miss:.0%}" if self.miss >= 0.1 else f"+{self.miss:.1%}"
            return f"{self.label} {number(self.value)} {self.unit} against a {number(self.objective)} {self.unit} objective ({miss})" \
                + self._after_text() + self._floor_text()
        if self.kind == "queue_timeouts":
            return f"{_percent(self.value)} of requests time out in the queue"
        if self.kind == "preemptions":
            return f"{number(self.value)} KV-cache preemptions per finished request"
        if self.kind == "queueing":
            per = f" ({number(self.value / self.against)} per running request)" if self.against else ""
            return f"{number(self.value)} requests wait on average against {number(self.against or 0)} running{per}"
        if self.kind == "prefill_share":
            return f"prefills take {_percent(self.value)} of the GPU's math"
        return f"{self.fact} = {number(self.value)}"

    def _after_text(self, spent: bool = False) -> str:
        if self.unprojected:
            return f"; {self.unprojected}"
        if self.after is None or self.objective is None:
            return ""
        over = f"over by {self.after / self.objective - 1:.0%}"
        verdict = ("still meets it" if spent else "meets it") if self.after <= self.objective else (over if spent else f"still {over}")
        how = "" if self.source == ESTIMATED else f", as {self.after_basis} moves"
        lead = "; the plan spends its room: after the plan" if spent else "; after the plan"
        traded = (f"; the plan trades it for the {self.traded_for} objective (missed by more, or named in "
                  f"constraints.objective_first; constraints.objective_first: {self.kind} keeps this one instead): one replica of "
                  "these GPUs meets one at the other's cost, and prefills on GPUs of their own (disaggregation) or more GPUs a "
                  "replica are what can meet both") if self.traded_for else ""
        return f"{lead} about {number(self.after)} {self.unit}{how}: {verdict}{traded}"

    def _floor_text(self) -> str:
        if self.floor is None:
            return ""
        prompt = "the 99th-percentile prompt's" if self.fact in _MEAN_OF else "the mean prompt's"
        return (f"; {prompt} own prefill takes about {number(self.floor)} {self.unit} on these GPUs after the plan, "
                "past the objective before any wait: the plan's settings cannot meet it on these GPUs; more math per "
                f"prefill can ({self.floor_levers or 'a GPU with more FLOP/s'}), as can prompts cached or shorter")

    def note(self) -> str:
        """Where it comes from: `measured: workload.ttft_p99_ms`, or the model's estimate."""
        if self.source == ESTIMATED:
            return f"estimated by the performance model, nothing measured: {self.fact}" if self.objective is not None \
                else f"estimated by the performance model: {self.fact}"
        return f"measured: {self.fact}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "fact": self.fact, "value": self.value, "unit": self.unit,
                               "source": self.source}
        if self.objective is not None:
            out.update(objective=self.objective, objective_fact=self.objective_fact, miss=round(self.miss or 0.0, 4))
        if self.after is not None:
            out.update(after_plan=self.after, after_plan_basis=self.after_basis, meets_after_plan=self.after <= (self.objective or 0))
        if self.unprojected:
            out.update(after_plan_not_projected=self.unprojected)
        if self.traded_for:
            out.update(traded_for=self.traded_for)
        if self.floor is not None:
            out.update(prefill_after_plan=self.floor)
        if self.against is not None:
            out.update(against=self.against, against_fact=self.against_fact)
        return out


def _percent(ratio: float) -> str:
    return f"{number(ratio * 100)}%"


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _number(values: Mapping[str, Any], path: str) -> float | None:
    value = values.get(path)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


# A TTFT p99 whose model reads it off may still move as the model's p99 does, where the model
# reads the measured mean: the queue is described, and only the tail's shape (ln 100 times the
# mean wait) is in doubt, which a ratio after / before cancels.
_MEAN_OF = {"workload.ttft_p99_ms": ("workload.ttft_mean_ms", "derived.ttft_expected_ms")}


def _agrees(modelled: float, measured: float) -> bool:
    return 1 / AGREEMENT <= modelled / measured <= AGREEMENT


# ... but only so far: a tail the model reads several times off is another queue than the one
# measured, and its ratio projects nothing (set 12: a TTFT p99 modelled at 116 s where 12 s is
# measured was projected to 683 ms after the plan, under the prefill of a mean prompt).
TAIL_OFF_AT_MOST = 3.0


def _mean_agrees(facts: Mapping[str, Any], derived: Mapping[str, Any], path: str) -> bool:
    measured_fact, estimate = _MEAN_OF.get(path, ("", ""))
    measured, modelled = _number(facts, measured_fact), _number(derived, estimate)
    tail_measured, tail_modelled = _number(facts, path), _number(derived, _SCALED_BY.get(path, path))
    if tail_measured is not None and tail_modelled is not None and tail_measured > 0 and tail_modelled > 0 \
            and not 1 / TAIL_OFF_AT_MOST <= tail_modelled / tail_measured <= TAIL_OFF_AT_MOST:
        return False
    return measured is not None and modelled is not None and measured > 0 and _agrees(modelled, measured)


def _spent(facts: Mapping[str, Any], derived: Mapping[str, Any], path: str, value: float, source: str,
           moves: Mapping[str, tuple[Any, Any]]) -> float | None:
    """Where the plan takes an objective met today WORSENED_SHOWN or more toward it, the value it
    leaves (projected as a missed one's is), else None."""
    before, after = moves.get(_SCALED_BY.get(path, path), (None, None))
    if not (_positive(before) and _positive(after)) or after < before * (1 + WORSENED_SHOWN):
        return None
    if source == ESTIMATED:
        return float(after)
    if path in _SAME_STATISTIC and not _agrees(before, value) and not _mean_agrees(facts, derived, path):
        return None
    return max(float(value * after / before), _own_prefill_after(facts, derived, moves, path))


def _trades(objectives: list[Symptom], moves: Mapping[str, tuple[Any, Any]]) -> list[Symptom]:
    """The objectives missed today that the plan takes further from their objective while it brings
    another missed one closer, marked with that one (set 20 d5: a chunk budget that meets the ITL
    p99 objective on two H200s took a missed TTFT p99 one from 1,400 to 1,836 ms, unsaid)."""
    def move(s: Symptom) -> float:
        before, after = moves.get(s.after_basis or _SCALED_BY.get(s.fact, s.fact), (None, None))
        return float(after / before - 1) if _positive(before) and _positive(after) else 0.0

    def improved(s: Symptom) -> bool:
        return move(s) < 0
    missed = [s for s in objectives if s.objective is not None and s.miss is not None and s.miss > 0]
    out = []
    for s in objectives:
        # worsened by the plan's own move: a projection above today's measurement where the model
        # reads today high (its after-value kept, no margin claimed) is no trade (set 25 d4)
        if s in missed and s.after is not None and s.after > s.value and move(s) > 0:
            other = next((o for o in missed if o.kind != s.kind and improved(o)), None)
            if other is not None:
                s = dataclasses.replace(s, traded_for=other.label)
        out.append(s)
    return out


def _own_prefill_after(facts: Mapping[str, Any], derived: Mapping[str, Any], moves: Mapping[str, tuple[Any, Any]],
                       path: str) -> float:
    """What a first token cannot beat after the plan: its prompt's own prefill (the mean prompt's,
    or the 99th-percentile prompt's at its length's share, as M-TTFT-P99-EXPECTED takes it); 0 for
    other statistics. A measurement scaled by the model's move can fall under it where the wait
    the model reads shrinks (set 12 d6: a 12 s TTFT p99 projected to 1.9 s, under the 60k-token
    prompt's 3.7 s prefill once prefix caching and INT4 take the mean's to 1.5 s; set 19 d4)."""
    if path not in _MEAN_OF and path != "workload.ttft_mean_ms":
        return 0.0
    prefill = moves.get("derived.prefill_ms", (None, _number(derived, "derived.prefill_ms")))[1]
    if not _positive(prefill):
        return 0.0
    mean, p99 = _number(facts, "workload.prompt_len_mean"), _number(facts, "workload.prompt_len_p99")
    longer = max(1.0, p99 / mean) if path in _MEAN_OF and mean and p99 else 1.0
    return float(prefill * longer)


def _floor_levers(facts: Mapping[str, Any]) -> str:
    """The levers that give a prompt's prefill more math, less those in place: a GPU with more
    FLOP/s always; FP8 tensor cores where the weights are 16-bit; tensor parallelism past today's."""
    levers = ["a GPU with more FLOP/s"]
    if facts.get("model.weight_dtype") in ("bf16", "fp16", "fp32", None):
        levers.append("FP8 tensor cores")
    degree = _number(facts, "serving.tensor_parallel_size") or _number(facts, "hardware.gpu_count") or 1
    levers.append(f"tensor parallelism over more than today's {degree:g} GPU{'s' if degree != 1 else ''}")
    return " or ".join(levers[:-1]) + ", " + levers[-1]


def symptoms(facts: Mapping[str, Any], derived: Mapping[str, Any], plan: Plan | None = None) -> tuple[Symptom, ...]:
    """The symptoms of `facts` (the input facts) and `derived` (the final derived facts), in a
    fixed order: objectives (TTFT, ITL), queue timeouts, preemptions, queueing, prefill share.
    A missed objective says where the whole plan leaves it: a measurement scaled by the ratio the
    model gives its statistic (after / before), an estimate by the model's after-value."""
    moves = {f"derived.{g.metric}": (g.before, g.after) for g in plan.expected} if plan is not None else {}
    out: list[Symptom] = []
    for kind, name, objective_fact, measured, estimate in _OBJECTIVES:
        objective = _number(facts, objective_fact)
        if objective is None or objective <= 0:
            continue
        read: tuple[tuple[str, str], ...] = tuple((path, which) for path, which in measured
                                                  if which == "mean" or not on_the_mean(facts, objective_fact))
        found = next(((path, which, v) for path, which in read if (v := _number(facts, path)) is not None), None)
        if found is not None:
            path, which, value = found
            source, label = MEASURED, f"{name} {which}"
        else:
            expected = _number(derived, estimate)
            if expected is None:
                continue
            path, value, source, label = estimate, expected, ESTIMATED, f"{name} expected"
        if value > objective:
            basis = _SCALED_BY.get(path, path)
            before, after = moves.get(basis, (None, None))
            projected, unprojected = None, ""
            if kind == "ttft" and facts.get("serving.disaggregation_role") == "decode":
                # the first token is the prefill instances' queue and prefill and the KV transfer:
                # this server's plan moves none of it (set 28 d3: a 20k-token p99 prompt projected to
                # 218 ms, a tenth of its prefill on the peer)
                unprojected = ("on this decode instance the first token waits on the prefill instances and the KV "
                               "transfer, which this plan does not move (W-DISAGG-DECODE-TTFT): not projected")
            elif _positive(before) and _positive(after):
                if source == MEASURED and path in _SAME_STATISTIC and not _agrees(before, value) \
                        and not _mean_agrees(facts, derived, path):
                    unprojected = (f"after the plan the model's {basis} goes {number(before)} -> {number(after)} ms, but it "
                                   f"reads {number(before)} ms where {number(value)} ms is measured: not projected")
                else:
                    # A model that reads today's value high claims no margin from it: where the plan removes
                    # what it overstated (a queue, a whole-prompt stall) the rest is its own after-value
                    # (set 20 d1: an ITL p99 read 141.5 ms where 110 is measured projected 30.3 ms from the
                    # model's 39 for a chunk step the reviewer put at 43-49 ms).
                    scaled = value * after / before
                    projected = max(after if source == ESTIMATED else scaled if value >= before else max(scaled, after),
                                    _own_prefill_after(facts, derived, moves, path))
                    if source != ESTIMATED and after < before:
                        # a plan the model says shortens it does not leave it above today's measurement
                        # (set 25 d4: an ITL p99 measured at 180 ms, read at 261, was projected to 246)
                        projected = min(projected, value)
            elif plan is not None and _positive(derived.get(basis)):     # modelled today, and the plan leaves it
                unprojected = "the plan does not move it"
                budget = _number(derived, "derived.chunk_budget_itl")
                if kind == "itl" and budget is not None and budget < CHUNK_FLOOR:
                    unprojected += (f": no prefill chunk budget of {CHUNK_FLOOR} tokens or more meets it on these GPUs (the "
                                    f"largest is {number(budget)}), so it takes prefills apart from the decodes "
                                    "(disaggregation) or more GPUs per prefill (C-CHUNK-BUDGET-MISSES-ITL)")
            # a floor is claimed only where today's measurement holds it: a prefill modelled longer than
            # the first token measured over it is the model's error, not a floor (set 11 d2: 1,418 ms
            # for the p99 prompt where the TTFT p99 measured 1,400)
            own = _own_prefill_after(facts, derived, moves, path) if kind == "ttft" and plan is not None else 0.0
            own = own if source == ESTIMATED or own <= value else 0.0
            out.append(Symptom(kind, path, value, "ms", source, objective, objective_fact, value / objective - 1,
                               label=label, after=projected, after_basis=basis if projected is not None else None,
                               unprojected=unprojected, model_move=(before, after) if projected is None
                               and _positive(before) and _positive(after) else None,
                               floor=own if own > objective else None,
                               floor_levers=_floor_levers(facts) if own > objective else ""))
        elif (spent := _spent(facts, derived, path, value, source, moves)) is not None:
            out.append(Symptom(kind, path, value, "ms", source, objective, objective_fact, value / objective - 1,
                               label=label, after=spent, after_basis=_SCALED_BY.get(path, path)))
    out = _trades(out, moves)
    timeouts = _number(facts, "workload.queue_timeout_ratio")
    if timeouts is not None and timeouts > 0:
        out.append(Symptom("queue_timeouts", "workload.queue_timeout_ratio", timeouts, "ratio", MEASURED))
    preemptions = _number(facts, "workload.preemption_ratio")
    if preemptions is not None and preemptions > 0:
        out.append(Symptom("preemptions", "workload.preemption_ratio", preemptions, "preemptions / finished request",
                           MEASURED))
    waiting = _number(facts, "workload.requests_waiting_mean")
    if waiting is not None and waiting >= WAITING_SHOWN:
        running = _number(facts, "workload.requests_running_mean")
        out.append(Symptom("queueing", "workload.requests_waiting_mean", waiting, "requests", MEASURED,
                           against=running, against_fact="workload.requests_running_mean" if running is not None else None))
    prefill = _number(derived, "derived.prefill_load")
    if prefill is not None and prefill >= PREFILL_SHARE_SHOWN:
        out.append(Symptom("prefill_share", "derived.prefill_load", prefill, "ratio", ESTIMATED))
    return tuple(out)
