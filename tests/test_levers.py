"""The levers of issue 26 item 7 against hand arithmetic and the engines' own names: speculative
decoding chosen by the model (MTP, EAGLE-3, n-gram) with its gain from the acceptance rate,
prefill/decode disaggregation, engine migration, the TTFT levers, and one batch cap for the
action list and the launch script. Hand figures are written out from the formulas' sources."""
from __future__ import annotations

import json

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.engines import engine_catalog
from kbopt.kb.facts import facts_from_document

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
LLAMA3_8B = {"name": "meta-llama/Llama-3.1-8B-Instruct", "params_billion": 8.03, "weight_dtype": "bf16", "num_layers": 32,
             "num_kv_heads": 8, "head_dim": 128, "num_attention_heads": 32}
DEEPSEEK_R1 = {"name": "deepseek-ai/DeepSeek-R1", "params_billion": 671, "active_params_billion": 37, "weight_dtype": "fp8",
               "num_layers": 61, "num_experts": 256, "experts_per_token": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
               "num_attention_heads": 128, "hidden_size": 7168, "mtp_layers": 1}


def _advice(pack, document):
    return advise(facts_from_document({"kbopt": "facts/1", **document}, "levers"), pack, available_evaluators()[0])


def _deepseek(engine: str, version: str | None = None) -> dict:
    serving = {"tensor_parallel_size": 8, **({"engine_version": version} if version else {})}
    return {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8}, "model": DEEPSEEK_R1,
            "workload": {"task": "generation", "engine": engine, "prompt_len_mean": 1024, "output_len_mean": 512,
                         "requests_running_mean": 8},
            "serving": serving, "constraints": {"objective": "latency"}}


def test_expected_tokens_per_step_is_leviathans_sum(pack):
    # (1 - a^(k+1)) / (1 - a): n-gram, k = 3, a = 0.3 (assumed) -> 1 + .3 + .09 + .027
    d = _advice(pack, {"workload": {"task": "generation"}}).derived
    assert d["derived.spec_tokens_per_step"] == pytest.approx((1 - 0.3 ** 4) / (1 - 0.3))
    # MTP: k = 1, a = 0.85 (DeepSeek-V3's report) -> 1.85; a measured rate replaces the assumption
    d = _advice(pack, {"model": {"mtp_layers": 1}, "workload": {"task": "generation"},
                       "telemetry": {"spec_acceptance_rate": 0.6}}).derived
    assert d["derived.spec_method"] == "mtp" and d["derived.spec_tokens_per_step"] == pytest.approx(1.6)


def test_the_verify_step_pays_the_reads_once_and_the_math_k_plus_one_times(pack):
    d = _advice(pack, {"hardware": H100, "model": LLAMA3_8B, "workload": {
        "task": "generation", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 2},
        "constraints": {"objective": "latency"}}).derived
    k, g = 3, (1 - 0.3 ** 4) / (1 - 0.3)
    reads = d["derived.decode_bytes_ms"] / d["derived.bandwidth_efficiency"]
    math_ = (k + 1) * d["derived.decode_compute_ms"] / 0.55          # compute_efficiency
    hand_step = max(reads, math_) + d["derived.step_overhead_ms"] + 0.004 * 2      # request_fixed_ms x batch; n-gram: no drafter
    assert d["derived.spec_step_ms"] == pytest.approx(hand_step)
    assert d["derived.spec_itl_ms"] == pytest.approx(hand_step / g + d["derived.prefill_share_ms"])
    assert d["derived.spec_itl_ms"] < d["derived.itl_expected_ms"]      # bandwidth-bound at 2: a gain


def test_deepseek_mtp_is_proposed_with_each_engines_own_name(pack):
    expected = {("vllm", "0.10.2"): '"method": "deepseek_mtp"', ("vllm", "0.11.0"): '"method": "mtp"',
                ("vllm", "0.12.0"): '"method": "mtp"', ("sglang", "0.5.1"): "--speculative-algorithm EAGLE",
                ("trtllm", "1.1.0"): '"decoding_type": "MTP"'}
    for (engine, version), text in expected.items():
        advice = _advice(pack, _deepseek(engine, version))
        chosen = {s.key: s for s in advice.strategies}
        assert "speculative_decoding[mtp]" in chosen, (engine, [s.key for s in advice.strategies])
        launch = build_launch(advice, engine)
        line = " ".join(f"{a.name} {a.value or ''}" for a in launch.args)
        assert text in line, (engine, version, line)
        assert not engine_catalog().engines[engine].problems(launch.target.version, launch.argv())
        assert "DRAFT_MODEL" not in line and "--speculative-draft-model-path" not in line


def test_mtp_before_vllm_0_11_is_refused_by_the_profile():
    vllm = engine_catalog().engines["vllm"]
    assert vllm.problems((0, 10, 2), [("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}))])
    assert not vllm.problems((0, 11, 0), [("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}))])
    trtllm = engine_catalog().engines["trtllm"]
    assert trtllm.problems((1, 1, 0), [("speculative_config", json.dumps({"decoding_type": "Eagle3"}))])


def test_an_eagle3_head_named_in_the_facts_is_the_draft(pack):
    model = {**LLAMA3_8B, "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    advice = _advice(pack, {"hardware": H100, "model": model, "workload": {
        "task": "generation", "engine": "vllm", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 2},
        "constraints": {"objective": "latency"}})
    assert "speculative_decoding[eagle3]" in {s.key for s in advice.strategies}
    spec = dict(build_launch(advice, "vllm").argv())["--speculative-config"]
    assert json.loads(spec or "") == {"method": "eagle3", "num_speculative_tokens": 3,
                                      "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    sglang = dict(build_launch(advice, "sglang").argv())
    assert sglang["--speculative-algorithm"] == "EAGLE3"
    assert sglang["--speculative-draft-model-path"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_no_speculation_where_the_verify_step_costs_more_than_it_yields(pack):
    advice = _advice(pack, {"hardware": H100, "model": LLAMA3_8B, "workload": {
        "task": "generation", "prompt_len_mean": 512, "output_len_mean": 256, "requests_running_mean": 256},
        "constraints": {"objective": "latency"}})
    assert advice.derived["derived.spec_itl_ms"] >= advice.derived["derived.itl_expected_ms"]
    assert not [s for s in advice.strategies if s.id == "speculative_decoding"]
