"""Helpers every renderer shares: they read an Advice, never the rules or the facts."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.estimates import Estimate
from kbopt.engine.advice.explain import Check, NotEvaluated
from kbopt.engine.advice.launch import Launch, deployed_launch
from kbopt.engine.advice.model import Advice, Firing, StrategyAdvice
from kbopt.engine.advice.symptoms import AGREEMENT, Symptom, on_the_mean
from kbopt.engine.advice.whatif import TIMES, Gain, Plan, label, number, relative_text
from kbopt.engine.lang.text import fmt
from kbopt.kb.engines import ENGINES, version_text
from kbopt.kb.knowledge import engine_catalog


def firings(advice: Advice) -> dict[str, Firing]:
    return {f.rule: f for f in advice.fired}


def producers(advice: Advice) -> dict[str, str]:
    """Derived fact -> the rule that derived it."""
    return {path: f.rule for f in advice.fired for path in f.derived}


def chain(advice: Advice, rule_ids: Iterable[str]) -> list[tuple[int, Firing]]:
    """The proof of a conclusion: each rule, then (indented) the rules that derived its facts."""
    by_rule, made_by = firings(advice), producers(advice)
    out: list[tuple[int, Firing]] = []
    seen: set[str] = set()

    def visit(rule_id: str, depth: int) -> None:
        if rule_id in seen or rule_id not in by_rule:
            return
        seen.add(rule_id)
        firing = by_rule[rule_id]
        out.append((depth, firing))
        for path in firing.facts:
            if path in made_by:
                visit(made_by[path], depth + 1)

    for rule_id in rule_ids:
        visit(rule_id, 0)
    return out


def check_text(check: Check) -> str:
    value = fmt(check.value)
    if check.against:
        return f"{check.fact} = {value} {check.op} {check.against} = {fmt(check.threshold)}"
    if check.threshold is None:
        return f"{check.fact} {check.op}" if check.op in ("known", "missing") else f"{check.fact} = {value}"
    threshold = fmt(check.threshold, quote=isinstance(check.threshold, str))
    named = f" ({check.parameter})" if check.parameter else ""
    if check.op == "==" and check.value == check.threshold:
        return f"{check.fact} = {fmt(check.value, quote=isinstance(check.value, str))}"
    return f"{check.fact} = {value} {check.op} {threshold}{named}"


def params_text(params: Mapping[str, object]) -> str:
    return " ".join(f"{k}={fmt(v)}" for k, v in params.items())


def engine_settings(strategy: StrategyAdvice) -> list[tuple[str, str]]:
    """The deployed engine's lines for a strategy, as every report shows them: only where the facts
    name the engine (JSON and --emit give all four otherwise); a strategy kept sets nothing."""
    if len(strategy.settings) != 1:
        return []
    engine, lines = next(iter(strategy.settings.items()))
    if strategy.status == "keep":
        return [(engine, "in place, nothing set")]
    return [(engine, "; ".join(lines) or "no setting")]


def origin_detail(advice: Advice, path: str) -> str:
    """Where a fact came from, with the collector's note (percentiles, windows, caveats)."""
    provenance = advice.provenance.get(path)
    return provenance.detail() if provenance else origin_text(advice, path)


def origin_text(advice: Advice, path: str) -> str:
    if path.startswith("quality."):
        return "provenance"
    if path in advice.facts:
        provenance = advice.provenance.get(path)
        return provenance.short() if provenance else "input"
    return "derived" if path in advice.derived else "not given"


def key_text(strategy: StrategyAdvice, facts: Mapping[str, object]) -> str:
    """The strategy's key as a reader should see it: the catalog's 16-bit quantization variant is
    fp16, which over bf16 weights means keep them bf16 (set 15: "Keep quantization[fp16]" read as
    a change of dtype)."""
    if strategy.key == "quantization[fp16]" and facts.get("model.weight_dtype") == "bf16":
        return "quantization[bf16]"
    engine = facts.get("workload.engine")
    batching = facts.get("workload.batching") or (
        dict(engine_catalog().engines[engine].states).get("workload.batching") if engine in ENGINES else None)
    if strategy.id == "continuous_batching" and strategy.status == "change" and batching == "continuous":
        # every covered engine batches continuously: what changes is its running cap (a newcomer
        # read "1. continuous_batching" for vLLM as kbopt not knowing the engine)
        return "continuous_batching (in place: its running cap changes)"
    if strategy.stands_in_for:
        # applied only until the plan's variant has its checkpoint (set 38 d1: online FP8 beside INT8 W8A8)
        return f"{strategy.key} (until the {strategy.stands_in_for} checkpoint)"
    return strategy.key


def shown_params(strategy: StrategyAdvice, facts: Mapping[str, object]) -> dict[str, object]:
    """The strategy's parameters as a reader should see them: the 16-bit variant's scheme is the
    weights' own dtype (bf16 over bf16 weights), as key_text says."""
    if key_text(strategy, facts) == "quantization[bf16]" and strategy.params.get("scheme") == "fp16":
        return {**strategy.params, "scheme": "bf16"}
    return dict(strategy.params)


def rejection_label(strategy: str, params: Mapping[str, object]) -> str:
    return f"{strategy} ({params_text(params)})" if params else strategy


def facts_to_collect(advice: Advice) -> list[tuple[str, int]]:
    """Input facts that would let more rules be evaluated, those that could change most first
    (engine/advice/wanted.py), with the rules waiting on each."""
    return [(wanted.fact, wanted.rules) for wanted in advice.to_collect]


def needs_text(item: NotEvaluated, code: Callable[[str], str] = str) -> str:
    """What a waiting rule needs, in words: `a, b` when it needs them all, `a or b` when any one
    decides it, `(a and b) or c` when the ways to decide it take several facts each; `code` formats
    a fact path for the format at hand."""
    if not item.one_of:
        return ", ".join(code(path) for path in item.missing)
    if all(len(way) == 1 for way in item.one_of):
        return " or ".join(code(way[0]) for way in item.one_of)
    return " or ".join(code(way[0]) if len(way) == 1 else "(" + " and ".join(code(p) for p in way) + ")"
                       for way in item.one_of)


def bottleneck_evidence(advice: Advice, most: int = 6) -> list[tuple[Firing, Check]]:
    """What decided the bottleneck, in numbers: the deciding rule's own comparisons (a derived
    number such as the share of the KV pool in use counts; the yes/no steps of the diagnosis do
    not), else the comparisons on input facts found through the facts it derived from. The whole
    chain stays in each strategy's proof."""
    if not advice.bottleneck_rule:
        return []
    deciding = firings(advice).get(advice.bottleneck_rule)
    own = [(deciding, check) for check in deciding.checks
           if not isinstance(check.value, bool) and check.op != "known"] if deciding else []
    if own:
        return own[:most]
    out = [(firing, check) for _, firing in chain(advice, [advice.bottleneck_rule])
           for check in firing.checks if check.fact in advice.facts]
    compared = {check.fact for _, check in out if check.op != "known"}
    return [(f, c) for f, c in out if not (c.op == "known" and c.fact in compared)][:most]   # `known(x) and x == ..`


# The metrics a reader asks about first, in that order; the rest follow by how much they move.
HEADLINE = ("service_tokens_per_s", "decode_tokens_per_s", "itl_expected_ms", "itl_p99_expected_ms", "ttft_expected_ms",
            "ttft_p99_expected_ms", "decode_step_expected_ms", "kv_pool_tokens",
            "kv_pool_sequences", "weights_overflow_gib", "ttft_floor_ms", "decode_step_floor_ms")


# A missed objective's own estimates, which a summary line names before the others.
MISSED = (("constraints.ttft_slo_ms", ("workload.ttft_p99_ms", "workload.ttft_mean_ms"), ("ttft_expected_ms", "ttft_p99_expected_ms")),
          ("constraints.itl_slo_ms", ("workload.itl_p99_ms", "workload.itl_mean_ms"), ("itl_expected_ms", "itl_p99_expected_ms")))


def missed_metrics(facts: Mapping[str, object], symptoms: Iterable[Symptom] = ()) -> tuple[str, ...]:
    """The estimates of the objectives the measurements show missed (TTFT or ITL over its SLO; the
    mean alone where the objective bounds the mean): an action advised for a late first token leads
    with its TTFT (set 15 d6 showed decode gains only). Then those of an objective met today that the
    plan (`symptoms`) takes past it (set 41 F3: a TTFT p99 taken from 2.6 to about 4.2 s against 3 s
    was left out of the summary line)."""
    out: list[str] = []
    for slo_path, measured, metrics in MISSED:
        slo = facts.get(slo_path)
        on_mean = on_the_mean(facts, slo_path)
        values = [facts.get(m) for m in (measured[1:] if on_mean else measured)]
        if isinstance(slo, int | float) and any(isinstance(v, int | float) and v > slo for v in values):
            out.extend(metrics[:1] if on_mean else metrics)
    out += [s.after_basis.removeprefix("derived.") for s in symptoms if s.objective is not None and s.miss is not None
            and s.miss <= 0 and s.after is not None and s.after > s.objective and s.after_basis]
    return tuple(dict.fromkeys(out))


def headline(gains: Iterable[Gain], most: int = 3, first: tuple[str, ...] = ()) -> list[Gain]:
    """The gains worth a summary line: a missed objective's estimates (`first`), then the headline
    metrics, then the largest moves."""
    order = first + tuple(m for m in HEADLINE if m not in first)
    def rank(gain: Gain) -> tuple[int, float, str]:
        place = order.index(gain.metric) if gain.metric in order else len(order)
        return place, -abs(gain.change), gain.metric
    gains = list(gains)
    # without prefills sharing the steps the client's ITL is the decode step: say it once
    itl = {(g.before, g.after) for g in gains if g.metric == "itl_expected_ms"}
    gains = [g for g in gains if not (g.metric == "decode_step_expected_ms" and (g.before, g.after) in itl)]
    # one replica's tokens and the service's move alike unless the replicas change: say it once
    decode = {round(g.change, 9) for g in gains if g.metric == "decode_tokens_per_s"}
    gains = [g for g in gains if not (g.metric == "service_tokens_per_s" and round(g.change, 9) in decode)]
    return sorted(gains, key=rank)[:most]


def estimate_text(estimate: Estimate) -> str:
    """`decode step expected 9.18 ms`."""
    return f"{label(estimate.name)} {number(estimate.value)}" + (f" {estimate.unit}" if estimate.unit else "")


def model_evidence(advice: Advice) -> list[Estimate]:
    """The estimates that say where the deployment stands, for the summary (headline order)."""
    return [advice.estimates[name] for name in
            ("itl_expected_ms", "ttft_expected_ms", "decode_tokens_per_s", "decode_step_expected_ms", "decode_step_floor_ms",
             "arithmetic_intensity", "ridge_point", "kv_pool_tokens", "weights_overflow_gib") if name in advice.estimates]


# Why the actions come in the order they do: the advisor ranks by the recommending rule's weight.
ACTION_ORDER = ("ranked by the rules' weight: how directly the change treats the bottleneck and how little it takes "
                "(a flag before a new checkpoint before new GPUs), with those that bring a missed objective nearer "
                "first; each figure is that action's own modelled gain, not its rank")


def plan_label(plan: Plan) -> str:
    """`all together`, or where the plan adds replicas, how many GPUs its gain takes and what is
    left of it per GPU: new hardware is not tuning."""
    if plan.replicas is None:
        return "all together"
    service = next((g for g in plan.expected if g.metric == "service_tokens_per_s"
                    and isinstance(g.before, int | float) and isinstance(g.after, int | float) and g.before > 0), None)
    per_gpu = f", {number(service.after / service.before / plan.gpus_factor)}{TIMES} per GPU" if service is not None else ""
    return f"all together, on {number(plan.replicas)} replicas ({number(plan.gpus_factor)}{TIMES} today's GPUs{per_gpu})"


# The measurement of the statistic each client estimate models.
_MEASURED_AS = {"itl_expected_ms": "workload.itl_mean_ms", "itl_p99_expected_ms": "workload.itl_p99_ms",
                "ttft_expected_ms": "workload.ttft_mean_ms", "ttft_p99_expected_ms": "workload.ttft_p99_ms"}


def gain_text(gain: Gain, facts: Mapping[str, object] | None = None) -> str:
    """A gain as text; where the model's before-value reads today's measurement of the same
    statistic more than AGREEMENT off, only its move is quoted, with both readings, so that no
    figure the symptoms call unprojectable heads an action (a newcomer's 2026-12 try: "ttft p99
    expected 12,007 -> 1,750 ms" beside "the model reads 12,007 ms where 2,400 ms is measured")."""
    measured = facts.get(_MEASURED_AS.get(gain.metric, "")) if facts is not None else None
    before = gain.before
    if (isinstance(measured, int | float) and not isinstance(measured, bool) and measured > 0
            and isinstance(before, int | float) and before > 0 and not 1 / AGREEMENT <= before / measured <= AGREEMENT):
        unit = f" {gain.unit}" if gain.unit else ""
        return (f"{label(gain.metric)} {relative_text(gain.before, gain.after)} (the model's move only: it reads "
                f"{number(before)}{unit} where {number(measured)}{unit} is measured)")
    return gain.text()


def gains_text(gains: Iterable[Gain], facts: Mapping[str, object] | None = None) -> str:
    return ", ".join(gain_text(g, facts) for g in gains)


def deployed(advice: Advice, command: Command | None = None) -> tuple[str, Launch | str] | None:
    """The deployed engine and its launch after the advice (or why none can be written), for the
    renderers' Launch sections; None when the facts name no engine kbopt has a profile for."""
    launch = deployed_launch(advice, command)
    return None if launch is None else (str(advice.facts.get("workload.engine")), launch)


def version_warning(launch: Launch) -> str | None:
    """Where serving.engine_version is not a covered version: whose settings the launch holds."""
    target = launch.target
    if target.asked is None:
        return None
    return (f"{launch.spec.id} {version_text(target.asked)} (serving.engine_version) is not covered: the settings are "
            f"{version_text(target.version)}'s, the nearest covered version; check them against {version_text(target.asked)}")
