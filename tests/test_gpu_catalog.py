"""The GPU catalog's new rows: names as NVML/DCGM (NVIDIA) or amd-smi (AMD) report them find their
own row and no other (the catalog is ordered from specific to general), every row's figures are
consistent, and advice on an AMD GPU decides from what the part can do, not from a CUDA compute
capability it does not have."""
from __future__ import annotations

import json

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.advice.settings import targets
from kbopt.engine.evaluators import available_evaluators
from kbopt.errors import KboptError
from kbopt.kb.catalog import gpus
from kbopt.kb.facts import FactsError, facts_from_document, load_facts
from kbopt.kb.knowledge import match_gpu

NAMES = {
    "NVIDIA RTX A4000": "RTX-A4000", "NVIDIA RTX A5000": "RTX-A5000", "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA GeForce RTX 4090": "RTX-4090", "NVIDIA H20": "H20", "NVIDIA L20": "L20",
    "NVIDIA GB200": "GB200", "NVIDIA B200": "B200",
    "NVIDIA GeForce RTX 5090": "RTX-5090",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-Blackwell",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000-Blackwell",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada", "NVIDIA L40": "L40", "NVIDIA A30": "A30", "NVIDIA A40": "A40",
    # amd-smi's market name, rocm-smi's card series, and a VM's virtual function:
    "AMD Instinct MI300X": "MI300X", "AMD INSTINCT MI300X (MCM) OAM AC MBA": "MI300X", "AMD Instinct MI300X VF": "MI300X",
    "AMD Instinct MI325X": "MI325X", "AMD Instinct MI355X": "MI355X", "AMD Instinct MI350X": "MI350X",
    # Rows that must still win over the new ones, and names that must not fall into them:
    "NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA L40S": "L40S", "NVIDIA L4": "L4",
    "NVIDIA A10": "A10", "NVIDIA GH200 480GB": "GH200", "NVIDIA A100-SXM4-80GB": "A100-80GB",
}
# Other products, each near a row's name: none may borrow a row (their figures differ).
NOT_IN_CATALOG = ["NVIDIA GeForce RTX 4090 D", "NVIDIA RTX A2000", "NVIDIA GeForce RTX 5090 D",
                  "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 5090 Laptop GPU",
                  "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Quadro RTX 6000",
                  "NVIDIA H800", "NVIDIA A800-SXM4-80GB", "NVIDIA B300", "AMD Instinct MI300A", "AMD Instinct MI250X",
                  "AMD Instinct MI308X"]


def test_names_find_their_own_row():
    assert {name: match_gpu(name).id for name in NAMES} == NAMES


@pytest.mark.parametrize("name", NOT_IN_CATALOG)
def test_other_products_do_not_borrow_a_row(name):
    assert match_gpu(name) is None, name


def test_every_row_has_a_source_and_dense_figures():
    for gpu in gpus():
        assert gpu.source, gpu.id
        assert gpu.memory_gib > 0 and gpu.bandwidth_gbps > 0 and gpu.fp16_tflops > 0, gpu.id
        # FP8 (where there are FP8 tensor cores) runs at twice FP16's dense rate (L40S's datasheet rounds: 362 and 733); none without them.
        assert gpu.fp8_tflops == (pytest.approx(2 * gpu.fp16_tflops, rel=0.02) if gpu.fp8_tensor_cores else 0), gpu.id
        # FP4 where there are FP4 tensor cores (NVFP4; MXFP4 on AMD CDNA 4), at least FP8's rate; none without.
        assert (gpu.fp4_tflops >= gpu.fp8_tflops) if gpu.fp4_tensor_cores else gpu.fp4_tflops == 0, gpu.id
        # A CUDA compute capability on every NVIDIA row and none on an AMD one.
        assert (gpu.compute_capability is None) == (gpu.vendor == "amd"), gpu.id


def test_blackwell_rows_have_fp4_and_geforce_rates_are_the_fp32_accumulate_ones():
    rtx5090, pro6000 = match_gpu("NVIDIA GeForce RTX 5090"), match_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (rtx5090.compute_capability, pro6000.compute_capability) == ("12.0", "12.0")
    assert rtx5090.fp4_tensor_cores and pro6000.fp4_tensor_cores
    # GeForce: FP16 at half the FP16-accumulate 419 TFLOPS; INT8 and FP4 at full rate (3,352 sparse / 2).
    assert (rtx5090.fp16_tflops, rtx5090.int8_tops, rtx5090.fp4_tflops) == (209.5, 838, 1676)
    # The professional part runs FP32 accumulate at full rate: FP4 = 2 x FP8 = 4 x FP16.
    assert pro6000.fp4_tflops == pytest.approx(4 * pro6000.fp16_tflops)


def test_amd_rows_follow_from_compute_units_and_clock():
    """AMD's dense peaks are CUs x clock x FLOPs per CU per clock: the catalog's figures agree."""
    fp8 = {"MI300X": 304 * 2.1e9 * 4096, "MI325X": 304 * 2.1e9 * 4096, "MI355X": 256 * 2.4e9 * 8192, "MI350X": 256 * 2.2e9 * 8192}
    for gpu_id, flops in fp8.items():
        gpu = next(g for g in gpus() if g.id == gpu_id)
        assert gpu.vendor == "amd" and gpu.fp8_tensor_cores
        assert gpu.fp8_tflops == pytest.approx(flops / 1e12, abs=0.1), gpu_id
        assert gpu.fp4_tensor_cores == gpu_id.startswith("MI35")           # MXFP4 from CDNA 4


def _advise(document, pack):
    return advise(facts_from_document(document, "test"), pack, available_evaluators()[0])


MI300X_70B = {
    "kbopt": "facts/1",
    "hardware": {"gpu_name": "AMD Instinct MI300X", "gpu_count": 8},
    "telemetry": {"compute_utilization": 0.35, "bandwidth_utilization": 0.78, "memory_used_ratio": 0.9, "kv_cache_usage_ratio": 0.5},
    "model": {"name": "llama-3-70b", "params_billion": 70.6, "num_layers": 80, "num_kv_heads": 8, "head_dim": 128,
              "num_attention_heads": 64, "hidden_size": 8192, "weight_dtype": "bf16", "kv_cache_dtype": "bf16"},
    "workload": {"task": "generation", "prompt_len_mean": 2000, "output_len_mean": 500, "requests_running_mean": 64,
                 "requests_waiting_mean": 0, "preemption_ratio": 0},
    "serving": {"tensor_parallel_size": 8},
    "constraints": {"allowed_precisions": ["bf16", "fp8"]},
}


def _no_trtllm(advice):
    """No TensorRT-LLM setting anywhere in the advice (rules that fired or wait may name it in their condition
    that lists the engines)."""
    assert all("trtllm" not in s.settings for s in advice.strategies)
    out = {key: value for key, value in advice.to_dict().items() if key not in ("fired", "not_evaluated", "rules")}
    text = json.dumps(out).lower()
    assert "trtllm" not in text and "tensorrt" not in text


@pytest.mark.parametrize("engine", ["vllm", None])
def test_mi300x_70b_bandwidth_bound_gets_fp8_and_never_tensorrt_llm(pack, engine):
    document = json.loads(json.dumps(MI300X_70B))
    if engine:
        document["workload"]["engine"] = engine
    advice = _advise(document, pack)
    facts = advice.facts
    assert facts["hardware.vendor"] == "amd" and "hardware.compute_capability" not in facts
    assert advice.bottleneck == "memory_bandwidth"
    assert advice.derived["derived.fp8_tensor_cores"] is True            # D-FP8-MATRIX-CORES-AMD
    chosen = {(s.id, s.params.get("scheme") or s.params.get("dtype")): s for s in advice.strategies}
    fp8 = chosen[("quantization", "fp8")]
    assert fp8.params["mode"] == "w8a8" and "S-QUANT-FP8" in fp8.because
    assert ("kv_cache_quantization", "fp8") in chosen
    # the engines settings are written for: vLLM, or every engine that runs on AMD (no TensorRT-LLM)
    assert [t.engine for t in targets(facts)] == (["vllm"] if engine else ["vllm", "sglang", "tgi"])
    _no_trtllm(advice)
    with pytest.raises(KboptError, match="NVIDIA GPUs only"):
        build_launch(advice, "trtllm")


def test_the_bundled_mi300x_example(pack):
    advice = advise(load_facts("examples/vllm-70b-8xmi300x.json"), pack, available_evaluators()[0])
    assert advice.bottleneck == "memory_bandwidth"
    assert {"quantization", "kv_cache_quantization"} <= {s.id for s in advice.strategies}
    _no_trtllm(advice)


def test_amd_facts_refuse_a_compute_capability_and_tensorrt_llm():
    with_cc = json.loads(json.dumps(MI300X_70B))
    with_cc["hardware"]["compute_capability"] = "9.4"        # what PyTorch on ROCm reports for gfx942
    with pytest.raises(FactsError, match="AMD's, which has none"):
        facts_from_document(with_cc, "test")
    trtllm = json.loads(json.dumps(MI300X_70B))
    trtllm["workload"]["engine"] = "trtllm"
    with pytest.raises(FactsError, match="NVIDIA GPUs only"):
        facts_from_document(trtllm, "test")
    nvidia = json.loads(json.dumps(MI300X_70B))
    nvidia["hardware"]["vendor"] = "nvidia"
    with pytest.raises(FactsError, match="contradicts"):
        facts_from_document(nvidia, "test")


def test_rtx_5090_considers_nvfp4(pack):
    document = {"kbopt": "facts/1", "hardware": {"gpu_name": "NVIDIA GeForce RTX 5090", "gpu_count": 1},
                "telemetry": {"compute_utilization": 0.4, "bandwidth_utilization": 0.8, "memory_used_ratio": 0.9,
                              "kv_cache_usage_ratio": 0.5},
                "model": {"name": "llama-3-8b", "params_billion": 8.03, "num_layers": 32, "num_kv_heads": 8,
                          "head_dim": 128, "num_attention_heads": 32, "hidden_size": 4096, "weight_dtype": "bf16"},
                "workload": {"task": "generation", "engine": "vllm", "prompt_len_mean": 1000, "output_len_mean": 300,
                             "requests_running_mean": 16, "requests_waiting_mean": 0, "preemption_ratio": 0},
                "constraints": {"allowed_precisions": ["bf16", "fp8", "fp4"]}}
    advice = _advise(document, pack)
    assert advice.facts["hardware.compute_capability"] == "12.0" and advice.facts["hardware.fp4_tflops"] == 1676
    considered = {(s.id, s.params.get("scheme")) for s in advice.strategies} | \
                 {(r.id, r.params.get("scheme")) for r in advice.rejected}
    assert ("quantization", "nvfp4") in considered
    nvfp4 = [s for s in advice.strategies if s.id == "quantization" and s.params.get("scheme") == "nvfp4"]
    assert nvfp4 and "S-QUANT-NVFP4-BLACKWELL" in nvfp4[0].because
