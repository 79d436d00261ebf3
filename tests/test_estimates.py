"""advice/2: the performance model's estimates, each strategy's expected gains by what-if, the
negligible-gain rejection and the plan, on a toy model (tests/fixtures/model_pack), not on the
built-in rules' numbers."""
from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest
from conftest import needs_durable

from kbopt.engine.advice import advisor
from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.estimates import input_confidence
from kbopt.engine.advice.whatif import WhatIf
from kbopt.engine.evaluators.reference import ReferenceEvaluator, Rerun, rerun_of
from kbopt.engine.pack.loader import build_pack, load_rule_text
from kbopt.errors import KboptError
from kbopt.kb.catalog import Strategy, strategies
from kbopt.kb.facts import facts_from_document

MODEL = Path(__file__).parent / "fixtures" / "model_pack"
GIB = 1073741824


def toy_pack(strategy_catalog=None, version="toy"):
    rules = [load_rule_text(p.read_text(encoding="utf-8"), f"model/{p.name}", pack="model")
             for p in sorted(MODEL.glob("*.yaml"))]
    pack = build_pack(rules, version)
    if strategy_catalog is not None:
        pack = dataclasses.replace(pack, kb=dataclasses.replace(pack.kb, strategies=strategy_catalog))
    return pack


def toy_facts(**workload):
    return facts_from_document({
        "hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
        "model": {"params_billion": 8, "weight_dtype": "fp16", "kv_cache_dtype": "fp16",
                  "num_layers": 32, "num_kv_heads": 8, "head_dim": 128},
        "serving": {"tensor_parallel_size": 1},
        "workload": {"requests_running_mean": 32, "seq_len_mean": 2048, **workload}}, "toy")


@pytest.fixture(scope="module")
def toy():
    return toy_pack()


def test_estimates_carry_rule_inputs_and_confidence(toy):
    advice = advise(toy_facts(), toy, "reference")
    estimates = advice.to_dict()["estimates"]
    assert list(estimates) == ["weights_gib_per_gpu", "kv_pool_gib_per_gpu", "kv_pool_tokens",
                               "decode_step_floor_ms", "decode_step_expected_ms", "arithmetic_intensity"]  # vocabulary order
    weights = estimates["weights_gib_per_gpu"]
    assert weights == {"value": 8e9 * 2 / GIB, "unit": "GiB", "rule": "M-WEIGHTS", "confidence": "high",
                       "inputs": {"model.params_billion": 8, "model.weight_dtype": "fp16",
                                  "serving.tensor_parallel_size": 1}}
    # The GPU's memory and bandwidth come from the catalog: medium, and so is all that rests on them.
    pool = estimates["kv_pool_gib_per_gpu"]
    assert pool["confidence"] == "medium" and pool["inputs"]["hardware.memory_total_gib"] == 79.6
    assert pool["inputs"]["derived.weights_gib_per_gpu"] == weights["value"]
    assert estimates["decode_step_floor_ms"]["confidence"] == "medium"
    # A `default_*` parameter is a default: low, and it says which.
    expected = estimates["decode_step_expected_ms"]
    assert expected["confidence"] == "low" and expected["defaults"] == ["default_efficiency"]
    assert expected["value"] == pytest.approx(estimates["decode_step_floor_ms"]["value"] / 0.8)
    # derived facts without `estimate: true` are not estimates (they stay under "derived")
    assert "kv_bytes_per_token_per_gpu" not in estimates


def test_coalesce_fallback_past_a_missing_fact_is_medium(toy):
    """An engine's own default standing in for a setting not given is likely right, not a guess."""
    facts = toy_facts()
    facts = dataclasses.replace(facts, values={k: v for k, v in facts.values.items() if k != "serving.tensor_parallel_size"})
    weights = advise(facts, toy, "reference").estimates["weights_gib_per_gpu"]
    assert weights.confidence == "medium" and weights.defaults == ("serving.tensor_parallel_size",)
    assert "serving.tensor_parallel_size" not in weights.inputs


def test_input_confidence_by_quality():
    assert input_confidence("telemetry.compute_utilization", "measured") == "high"
    assert input_confidence("telemetry.compute_utilization", "proxy") == "medium"
    assert input_confidence("hardware.bandwidth_gbps", "catalog") == "medium"
    assert input_confidence("model.num_layers", "user") == "high"          # stated configuration
    assert input_confidence("workload.seq_len_mean", "user") == "medium"   # a number typed in, not measured


def test_expected_gains_come_from_a_what_if(toy):
    advice = advise(toy_facts(), toy, "reference")
    chosen = {s.key: s for s in advice.strategies}
    fp8 = {g.metric: g for g in chosen["quantization[fp8]"].expected}
    # Half the weight bytes: the toy model's own formulas, evaluated again, not a hand formula here.
    assert fp8["weights_gib_per_gpu"].after == pytest.approx(fp8["weights_gib_per_gpu"].before / 2)
    kv_bytes = 2 * 32 * 8 * 128 * 2 * 32 * 2048
    assert fp8["decode_step_floor_ms"].after == pytest.approx((8e9 + kv_bytes) / 3350e6)
    assert fp8["decode_step_floor_ms"].rules == ("M-STEP-FLOOR", "M-WEIGHTS")
    assert fp8["decode_step_expected_ms"].confidence == "low"
    kv = {g.metric: g for g in chosen["kv_cache_quantization[fp8]"].expected}
    assert kv["kv_pool_tokens"].after == pytest.approx(2 * kv["kv_pool_tokens"].before)
    assert kv["kv_pool_tokens"].text().endswith("tokens (2.0\u00d7)")
    assert "weights_gib_per_gpu" not in kv                         # what does not move is not listed
    assert chosen["op_fusion"].expected == ()                      # no effects: as in advice/1
    assert "expected" not in next(s for s in advice.to_dict()["strategies"] if s["id"] == "op_fusion")


def test_plan_is_evaluated_once_through_the_model(toy, monkeypatch):
    runs = []
    real = advisor.make_evaluator

    def counting(pack, name):
        evaluator = real(pack, name)

        class Counting:
            def run(self, values):
                runs.append(dict(values))
                return evaluator.run(values)
        return Counting()
    monkeypatch.setattr(advisor, "make_evaluator", counting)
    rerun = Rerun.run

    def counting_rerun(self, values, earlier, changed):
        runs.append(dict(values))
        return rerun(self, values, earlier, changed)
    monkeypatch.setattr(Rerun, "run", counting_rerun)
    advice = advise(toy_facts(), toy, "reference")
    # today's facts, then (re-running only what they change) one what-if per candidate with
    # effects (two), the plan once
    assert len(runs) == 4
    assert runs[-1]["model.weight_dtype"] == "fp8" and runs[-1]["model.kv_cache_dtype"] == "fp8"
    assert advice.plan is not None and advice.plan.strategies == ("quantization[fp8]", "kv_cache_quantization[fp8]")
    plan = {g.metric: g for g in advice.plan.expected}
    both = (8e9 * 1 + 2 * 32 * 8 * 128 * 1 * 32 * 2048) / 3350e6     # 8 B parameters and the KV, a byte each
    assert plan["decode_step_floor_ms"].after == pytest.approx(both)
    # Not the product of the two strategies' separate ratios: they share one step.
    separate = {s.key: {g.metric: g for g in s.expected} for s in advice.strategies if s.expected}
    product = plan["decode_step_floor_ms"].before
    for gains in separate.values():
        product *= gains["decode_step_floor_ms"].after / gains["decode_step_floor_ms"].before
    assert plan["decode_step_floor_ms"].after != pytest.approx(product)


def _with_effects(**changes):
    catalog = dict(strategies())
    for sid, effects in changes.items():
        catalog[sid] = dataclasses.replace(catalog[sid], effects=tuple(effects.items()), variant_effects={})
    return catalog


def test_negligible_gain_is_rejected_with_its_numbers():
    # FP8 weights here change the dtype of... nothing the toy model reads but a 1% shorter mean length.
    catalog = _with_effects(quantization={"workload.seq_len_mean": "= workload.seq_len_mean * 0.99"})
    advice = advise(toy_facts(), toy_pack(catalog, "toy-negligible"), "reference")
    assert "quantization[fp8]" not in {s.key for s in advice.strategies}
    rejection = next(r for r in advice.rejected if r.key == "quantization[fp8]")
    assert rejection.reason.startswith("negligible: ")
    assert "decode step floor 7.34 → 7.31 ms (\u22120.3%)" in rejection.reason
    assert rejection.because == ("M-INTENSITY",)          # the rule of the estimate that moved most
    assert any(e.kind == "vetoes" and e.target == "quantization[fp8]" for e in advice.graph)


def test_an_effect_that_moves_nothing_it_reaches_is_negligible_too():
    catalog = _with_effects(quantization={"model.weight_dtype": "fp16"})
    advice = advise(toy_facts(), toy_pack(catalog, "toy-nothing"), "reference")
    rejection = next(r for r in advice.rejected if r.key == "quantization[fp8]")
    assert rejection.reason.startswith("negligible: no estimate moves (weights stays 14.9 GiB; KV pool stays 56.7 GiB;")


def test_effects_the_model_cannot_evaluate_keep_advice_1_behaviour():
    # The toy model has no max_batch_kv, and kv_cache is read by none of its rules.
    catalog = _with_effects(quantization={"workload.requests_running_mean": "= derived.max_batch_kv"},
                            kv_cache_quantization={"workload.kv_cache": "paged"})
    advice = advise(toy_facts(), toy_pack(catalog, "toy-unevaluated"), "reference")
    chosen = {s.key: s for s in advice.strategies}
    assert chosen["quantization[fp8]"].expected == () and chosen["kv_cache_quantization[fp8]"].expected == ()
    assert not advice.rejected


def test_effects_may_change_only_input_facts(toy):
    advice = advise(toy_facts(), toy, "reference")
    assert advice.estimates
    from kbopt.engine.advice.estimates import Model
    from kbopt.engine.evaluators import make_evaluator
    inputs = toy_facts().engine_values()
    evaluator = make_evaluator(toy, "reference")
    whatif = WhatIf(toy, inputs, Model(toy, inputs, evaluator.run(inputs)))
    bad = Strategy("x", "compute", "x", {}, effects=(("derived.weights_gib_per_gpu", 1.0),))
    with pytest.raises(KboptError, match="not an input fact"):
        whatif.strategy(bad, None, "x")


def test_builtin_effects_parse_against_the_vocabulary(pack):
    """Every effect in kb/strategies.yaml names an input fact, and its expression parses."""
    from kbopt.engine.lang.parse import parse_value
    vocabulary = pack.kb.vocabulary
    parameters = {p.name: p.value for rule in pack.rules for p in rule.parameters}
    for strategy in strategies().values():
        for variant in (None, *strategy.variants):
            for path, raw in strategy.effects_of(variant):
                spec = vocabulary.get(path)
                assert spec is not None and not spec.derived, (strategy.id, path)
                if isinstance(raw, str) and raw.startswith("="):     # `{param}`: the strategy's parameter, a number
                    for name in re.findall(r"\{([a-z_][a-z0-9_]*)\}", raw):
                        assert name in strategy.params, (strategy.id, path, name)
                    parse_value(re.sub(r"\{[a-z_][a-z0-9_]*\}", "2", raw[1:]), vocabulary, parameters)
                elif isinstance(raw, str) and raw.startswith("param:"):
                    assert raw.removeprefix("param:") in strategy.params, (strategy.id, path, raw)
                elif raw is not None and spec.values:
                    assert raw in spec.values, (strategy.id, path, raw)


@needs_durable
def test_both_evaluators_give_identical_advice_2_on_random_facts(toy):
    rng = random.Random(7)
    checked = 0
    for _ in range(40):
        document = {
            "hardware": {"gpu_name": rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA A100-SXM4-40GB"]),
                         "gpu_count": 1},
            "model": {"params_billion": rng.choice([1, 7, 8, 13, 30]), "weight_dtype": rng.choice(["fp16", "fp8", "bf16"]),
                      "kv_cache_dtype": rng.choice(["fp16", "fp8"]), "num_layers": rng.choice([16, 32, 80]),
                      "num_kv_heads": rng.choice([1, 8]), "head_dim": 128},
            "workload": {"requests_running_mean": rng.choice([1, 8, 64]), "seq_len_mean": rng.choice([256, 2048])},
        }
        if rng.random() < 0.5:
            document["serving"] = {"tensor_parallel_size": 1}
        facts = facts_from_document(document, "random")
        durable = advise(facts, toy, "durable").to_json()
        assert durable == advise(facts, toy, "reference").to_json(), document
        checked += bool(json.loads(durable)["estimates"])
    assert checked >= 20


def test_text_starts_with_the_bottleneck_then_the_top_actions_with_their_gains(toy):
    from kbopt.reports.text import render_text
    text = render_text(advise(toy_facts(), toy, "reference"), explain=True)
    head = text.split("\nStrategies (")[0]
    assert head.startswith("kbopt advice — bottleneck: ")
    assert "  model: decode step expected 9.18 ms [low], decode step floor 7.34 ms [medium]" in head
    actions = head[head.index("Actions — expected by the performance model"):]
    assert "  1. quantization[fp8]: decode step expected 9.18 → 6.19 ms (\u221232.5%)" in actions
    assert "  2. kv_cache_quantization[fp8]: decode step expected 9.18 → 7.57 ms (\u221217.5%), KV pool tokens\n" \
           "    464,805 → 929,609 tokens (2.0\u00d7)" in actions
    assert "  3. op_fusion: fused_ops=3" in actions
    assert "  all together: decode step expected 9.18 → 4.59 ms (\u221250.0%)" in actions
    # the rest as before, with the estimates and the plan in full
    assert "\nPlan: quantization[fp8] + kv_cache_quantization[fp8] together, through the model once\n" in text
    assert "\nEstimates (6)\n  weights_gib_per_gpu = 14.9 GiB  [high; M-WEIGHTS]\n" in text
    assert "decode_step_expected_ms = 9.18 ms  [low, assumed: default_efficiency; M-STEP-EXPECTED]" in text


def test_html_draws_the_roofline_and_the_memory_bar_self_contained(toy):
    import re

    from kbopt.reports.html import render_html
    advice = advise(toy_facts(), toy, "reference")
    page = render_html(advice)
    roof = page[page.index('<div class="chart" id="roofline">'):]
    roof = roof[:roof.index("</svg>")]
    assert "3,350 GB/s bandwidth roof, 989 TFLOP/s compute roof" in roof
    assert re.search(r"<title>today: 20.8 FLOP/byte, [\d.]+ TFLOP/s achieved</title>", roof)
    # where each recommended strategy with gains moves the point
    assert "<title>quantization[fp8]: 30.9 FLOP/byte" in roof and "<title>kv_cache_quantization[fp8]:" in roof
    bar = page[page.index('<div class="chart" id="memory-bar">'):]
    bar = bar[:bar.index("</svg>")]
    assert "<title>weights: 14.9 GiB</title>" in bar and "<title>KV pool: 56.7 GiB</title>" in bar
    assert "<title>other: 8.0 GiB</title>" in bar or "<title>other: 7.96 GiB</title>" in bar
    assert "Plan: quantization[fp8] + kv_cache_quantization[fp8], evaluated together" in page
    assert "<script" not in page and not re.search(r'\b(src|href)\s*=\s*"(https?:)?//', page)
    assert 'class="pill conf-low">low</span> <span class="muted">assumed: default_efficiency' in page


def test_html_says_what_the_charts_lack(toy):
    from kbopt.reports.html import render_html
    facts = toy_facts()
    facts = dataclasses.replace(facts, values={k: v for k, v in facts.values.items() if k != "workload.requests_running_mean"})
    page = render_html(advise(facts, toy, "reference"))
    # no running batch: no step, no intensity, so the roofs are drawn but not the operating point
    assert "The operating point is not drawn: the advice has no <code>arithmetic_intensity</code>, <code>decode_step_floor_ms</code>" in page
    assert "today:" not in page


def test_untrusted_strings_stay_inert_in_the_model_section(toy):
    from kbopt.reports.html import render_html
    facts = toy_facts()
    facts = dataclasses.replace(facts, values={**facts.values, "model.name": "<img src=x onerror=alert(1)>"})
    page = render_html(advise(facts, toy, "reference"))
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_markdown_shows_estimates_gains_and_the_plan(toy):
    from kbopt.reports.markdown import render_markdown
    page = render_markdown(advise(toy_facts(), toy, "reference"))
    assert "| `weights_gib_per_gpu` | 14.9 | GiB | high | `M-WEIGHTS` | model.params_billion=8, " in page
    assert "| `decode_step_expected_ms` | 9.18 | ms | low (assumed: default_efficiency) | `M-STEP-EXPECTED` |" in page
    assert "Expected by the performance model:\n\n- KV pool tokens 464,805 → 929,609 tokens (2.0\u00d7) (medium; " in page
    assert "## Plan: `quantization[fp8]` + `kv_cache_quantization[fp8]`, evaluated together" in page


def _changed(inputs, effects, rng):
    """`inputs` with an effect set applied as a what-if applies it (values drawn at random)."""
    out, touched = dict(inputs), []
    for path, raw in effects:
        for key in (path, "quality." + path):
            out.pop(key, None)
            touched.append(key)
        if raw is not None and rng.random() < 0.8:
            out[path] = raw if not (isinstance(raw, str) and raw.startswith(("=", "param:"))) else inputs.get(path, 1)
            out["quality." + path] = "user"
    return out, touched


def test_a_rerun_of_the_changed_facts_equals_a_whole_evaluation(pack):
    """What-ifs re-run only the rules downstream of what they change: on every example and
    every strategy's effects, the derivation is the one a whole evaluation gives."""
    from kbopt.kb.facts import load_facts
    rng = random.Random(11)
    whole, rerun, model_only = ReferenceEvaluator(pack), Rerun(pack), rerun_of(pack)
    assert 0 < len(model_only.relevant) < len(pack.rules)
    from kbopt.engine.evaluators.reference import reads
    # what the model rests on: the estimates, and every derived fact a rule they rest on reads
    model_facts = set(pack.kb.vocabulary.estimate_paths) | {
        path for rule_id in model_only.relevant for path in reads(pack.by_id()[rule_id]) if path in pack.producers}
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.json"))
    compared = partial = 0
    for path in examples:
        inputs = load_facts(path).engine_values(pack.kb.vocabulary)
        earlier = whole.run(inputs)
        for strategy in pack.kb.strategies.values():
            for variant in (None, *strategy.variant_effects):
                effects = strategy.effects_of(variant)
                if not effects:
                    continue
                changed, touched = _changed(inputs, effects, rng)
                try:
                    expected = whole.run(changed)
                except KboptError as error:
                    with pytest.raises(KboptError, match=str(error).split(":")[0]):
                        rerun.run(changed, earlier, touched)
                    continue
                again = rerun.run(changed, earlier, touched)
                assert (again.fired, again.derived) == (expected.fired, expected.derived), (path.name, strategy.id, variant)
                # The what-ifs' rerun: exact on the rules the estimates rest on, silent on the others.
                model = model_only.run(changed, earlier, touched)
                assert model.fired == tuple(r for r in expected.fired if r in model_only.relevant)
                assert {p: v for p, (v, _) in model.derived.items() if p in model_facts} == \
                    {p: v for p, (v, _) in expected.derived.items() if p in model_facts}, (path.name, strategy.id, variant)
                compared += 1
                partial += len(rerun.downstream(frozenset(touched))) < len(pack.rules)
    assert compared > 100 and partial == compared     # and none of them re-ran the whole pack


def test_a_rerun_on_a_chained_synthetic_pack_equals_a_whole_evaluation():
    from kbopt.engine.authoring.synthetic import random_telemetry, synthetic_pack
    pack = synthetic_pack(300)
    rng = random.Random(4)
    whole, rerun = ReferenceEvaluator(pack), Rerun(pack)
    for _ in range(60):
        inputs = random_telemetry(rng)
        earlier = whole.run(inputs)
        changed = dict(inputs)
        touched = rng.sample(sorted(inputs), k=min(3, len(inputs)))
        for path in touched:
            if rng.random() < 0.3:
                del changed[path]
            else:
                changed[path] = round(rng.random(), 3)
        expected, again = whole.run(changed), rerun.run(changed, earlier, touched)
        assert (again.fired, again.derived) == (expected.fired, expected.derived)
