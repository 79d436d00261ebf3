"""Expert review set 26: four deployments a reviewer wrote (vLLM 0.12 with Qwen3-30B-A3B and EAGLE-3 on
an H100, vLLM 0.11 with Llama-3.1-70B FP8 on 8 MI300X, TensorRT-LLM 1.1 with Llama-3.3-70B NVFP4 on 4
B200s, vLLM 0.13 with Gemma 3 27B on 2 H100s; tests/data/review26, with today's launch commands and
hand arithmetic in NOTES.md), and what the advice must now read for the defects it found."""
from __future__ import annotations

from conftest import changed_deployment, review_deployment, script_flag

DATA = "review26"


def test_d3_a_host_kv_tier_is_capped_by_what_a_rank_may_pin(pack, tmp_path):
    # twice a B200's 141 GiB pool was written as kv_cache_config.host_cache_size for each of 4 ranks:
    # 1.1 TiB of pinned host memory, unchecked. Without the host's memory it is an assumed 64 GiB a
    # GPU; with it, half of what the host has a GPU.
    advice, script = review_deployment(pack, DATA, "d3")
    assert int(script_flag(script, "host_cache_size") or 0) <= 64 * 2**30
    assert any("every rank of a host pins its own" in c.text for s in advice.strategies if s.id == "kv_offload" for c in s.caveats)


def test_the_host_budget_follows_the_hosts_memory(pack, tmp_path):
    advice = changed_deployment(pack, DATA, "d3", tmp_path, hardware__host_memory_gib_per_gpu=512)
    assert advice.derived["derived.host_kv_budget_gib_per_gpu"] == 256


def test_d4_vllm_0_13_is_a_covered_version(pack):
    # the flags kbopt writes were checked against the v0.13.0 wheel (tests/data/engine_flags/vllm-0.13.0.txt):
    # a 0.13.0 deployment is no longer written "as 0.12.0's"
    _, script = review_deployment(pack, DATA, "d4")
    assert "vLLM (V1 engine) 0.13.0" in script.splitlines()[1] and "not covered" not in script
