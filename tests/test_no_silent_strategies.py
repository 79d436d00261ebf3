"""No no-ops and no silent drops: a strategy the engine already applies is not a change, fusion
without FP8/FP4 activations to fuse is rejected with its reason, and every methodology strategy a
deployment triggers is shown (advice, keep, or rejected with its reason). Structure, not figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import engine_runs_on

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def _examples(engine):
    return [example for example in EXAMPLES if engine_runs_on(engine, example)]
ENGINES = ("vllm", "sglang", "tgi", "trtllm")


def _advice(pack, name, engine=None, **sections):
    document = json.loads((ROOT / "examples" / name).read_text(encoding="utf-8"))
    if engine:
        document.setdefault("workload", {})["engine"] = engine
    for section, values in sections.items():
        document.setdefault(section, {}).update(values)
    return advise(facts_from_document(document, name), pack, available_evaluators()[0])


def _shown(advice):
    return {s.id for s in advice.strategies} | {r.id for r in advice.rejected}


def test_fusion_is_rejected_with_its_reason_where_activations_stay_16_bit(pack):
    advice = _advice(pack, "tgi-a10g-7b-long-prompts.json", "vllm")     # A10G: no FP8 tensor cores
    assert "op_fusion" not in {s.id for s in advice.strategies}
    rejection = next(r for r in advice.rejected if r.id == "op_fusion")
    assert rejection.because == ("R-FUSION-NO-FP8-ACTIVATIONS",) and "FP8/FP4" in rejection.reason


def test_fusion_goes_with_an_fp8_quantization_or_not_at_all(pack):
    # L40S, bf16, bandwidth-bound: FP8 W8A8 is chosen, online from the 16-bit checkpoint, and its
    # dynamic per-tensor scales match no vLLM fusion pass: the fusion is shown rejected by the rule
    # that says so (it would need an NVFP4 checkpoint; review set 9)
    advice = _advice(pack, "bandwidth-l40s-decode.json", "vllm")
    assert "quantization[fp8]" in {s.key for s in advice.strategies}
    assert "op_fusion" not in {s.id for s in advice.strategies}
    online = next(r for r in advice.rejected if r.id == "op_fusion")
    assert online.because == ("C-FUSION-NO-ONLINE-FP8",) and online.reason.startswith("it requires quantization[nvfp4], which ")
    # FP8 not allowed: no FP8/FP4 activations will exist, and the fusion is shown rejected for that
    advice = _advice(pack, "bandwidth-l40s-decode.json", "vllm", constraints={"allowed_precisions": ["bf16", "int4"]})
    assert "op_fusion" not in {s.id for s in advice.strategies}
    rejection = next(r for r in advice.rejected if r.id == "op_fusion")
    assert rejection.reason == "it requires quantization[nvfp4], which no rule recommended"     # names the variant (set 7)


@pytest.mark.parametrize("engine", ENGINES)
def test_continuous_batching_is_never_a_change_on_an_engine_that_always_batches_so(pack, engine):
    for example in _examples(engine):
        advice = _advice(pack, example.name, engine)
        for strategy in advice.strategies:
            if strategy.id == "continuous_batching":
                assert strategy.status == "keep", (example.name, strategy)


def test_continuous_batching_is_a_change_when_the_cap_changes(pack):
    kept = next(s for s in _advice(pack, "bandwidth-l40s-decode.json", "vllm").strategies if s.id == "continuous_batching")
    cap = kept.params["max_batch_size"]
    changed = _advice(pack, "bandwidth-l40s-decode.json", "vllm", serving={"max_num_seqs": cap // 2})
    assert next(s for s in changed.strategies if s.id == "continuous_batching").status == "change"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_triggered_methodology_strategy_is_shown(pack, engine):
    checked = 0
    for example in _examples(engine):
        advice = _advice(pack, example.name, engine)
        derived, shown = advice.derived, _shown(advice)
        if derived.get("derived.long_sequence_heavy") is True:            # K4.6
            assert "length_bucketing" in shown, example.name
            checked += 1
        quantized = any(s.id == "quantization" for s in advice.strategies)
        if quantized and derived.get("derived.bottleneck") in ("memory_bandwidth", "memory_capacity") \
                and advice.facts.get("model.weight_dtype") in ("fp16", "bf16"):   # K4.3
            assert "mixed_precision" in shown, example.name
            checked += 1
        if engine == "vllm" and derived.get("derived.bottleneck") == "memory_bandwidth":   # K3.5
            assert "op_fusion" in shown, example.name
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("engine,status", [("tgi", "keep"), ("sglang", "change")])
def test_fusion_is_kept_where_the_engine_fuses_with_no_switch(pack, engine, status):
    # launch-bound (S-FUSION-LAUNCH-BOUND): TGI's kernels are fused already; SGLang has torch.compile to turn on
    document = {"telemetry": {"kernel_time_ratio": 0.91, "compute_utilization": 0.156}, "workload": {"engine": engine}}
    advice = advise(facts_from_document(document, "launch-bound"), pack, available_evaluators()[0])
    assert next(s for s in advice.strategies if s.id == "op_fusion").status == status
