"""Expert review set 33: vLLM deployments a reviewer wrote (Llama-3.1-405B FP8 on 8 MI300X; a
128k-context RAG on one H100 with a CPU KV tier; the prefill and decode instances of a NixlConnector
pair serving Llama-3.3-70B FP8 on 2x2 H100s; Llama-3.3-70B NVFP4 on 2 B200s with an offline queue;
tests/data/review33, with today's launch commands and hand arithmetic in NOTES.md), and what the
advice must now read for the defects it found."""
from __future__ import annotations

import json

from conftest import changed_deployment, review_deployment, script_flag, strategy_of

DATA = "review33"


def test_d3b_no_kv_dtype_is_changed_on_one_instance_of_a_nixl_pair(pack):
    # vLLM's NixlConnector asserts at the first handshake that both instances' blocks are the same
    # length, "same dtype" (nixl_connector.py@0.12.0:1576-1582): an FP8 cache on the decode instance
    # alone, beside a 16-bit prefill instance, moves no KV at all
    advice, script = review_deployment(pack, DATA, "d3b")
    assert advice.facts.get("serving.kv_peer_transfer") is True          # read from the NixlConnector
    assert strategy_of(advice, "kv_cache_quantization") is None
    assert any(r.id == "kv_cache_quantization" and "R-KV-DTYPE-DISAGG-ONE-SIDE" in r.because for r in advice.rejected)
    assert script_flag(script, "--kv-cache-dtype") is None
    assert "NixlConnector" in script                                   # the connector is kept as given


def test_d3_a_prefill_instance_is_given_no_decode_levers(pack):
    # the proxy sends the prefill instance max_tokens=1: n-gram drafts had been advised for an "ITL"
    # of 501.7 ms, an artefact of the one-token output
    advice, script = review_deployment(pack, DATA, "d3")
    assert strategy_of(advice, "speculative_decoding") is None
    assert any(r.id == "speculative_decoding" and "R-DISAGG-PREFILL-NO-DECODE" in r.because for r in advice.rejected)
    assert script_flag(script, "--speculative-config") is None


def test_d2_the_cap_is_not_lowered_for_the_itl_past_a_first_token_missed_worse(pack):
    # TTFT p99 11 s against 4 s (2.75x) beside an ITL p99 70 ms against 50 (1.4x): the ITL-sized cap
    # of 10 (batch_cap's trade, left out alone, needs the plan's second replica) had lowered
    # continuous batching's 64; the pool after the plan's FP8 cache holds about 20 of these 48k-token
    # requests, so the cap goes no lower than that
    _, script = review_deployment(pack, DATA, "d2")
    assert int(script_flag(script, "--max-num-seqs")) >= 20


def test_d2_the_cpu_kv_tier_is_sized_at_the_plans_kv_dtype(pack):
    # vLLM keeps the CPU tier in the GPU cache's dtype (v1/kv_offload/worker/cpu_gpu.py@0.12.0:115-119):
    # beside the plan's FP8 cache, 120 GiB of host memory is 120 x 2^30 / (16 x 65,536) = 122,880
    # blocks, where 61,440 (sized at 16 bits) held 60 GiB, and the printed GiB matches the blocks
    advice, script = review_deployment(pack, DATA, "d2")
    offload = strategy_of(advice, "kv_offload")
    assert offload is not None and script_flag(script, "--kv-cache-dtype") == "fp8"
    blocks = offload.params["host_blocks"]
    assert abs(blocks - offload.params["host_cache_gib"] * 2**30 / (16 * 65536)) <= 16
    line = next(line for line in script.splitlines() if line.lstrip().startswith("--kv-transfer-config"))
    config = json.loads(line.split("'")[1])
    assert config["kv_connector_extra_config"]["num_cpu_blocks"] == blocks


def test_d1_infinity_fabric_is_an_interconnect(pack, tmp_path):
    # MI300X boxes link their GPUs over xGMI; the facts refused "xgmi" (nvlink or pcie only)
    advice = changed_deployment(pack, DATA, "d1", tmp_path, hardware__interconnect="xgmi")
    assert advice.facts.get("hardware.interconnect") == "xgmi"


def test_d4_a_larger_batch_prices_its_bytes_at_an_ordinary_efficiency(pack):
    # NVFP4 Llama-3.3-70B on 2 B200s, offline, 4,000 waiting against --max-num-seqs 256: the measured
    # 38 ms step reaches 34% of peak bandwidth once its fixed costs and prefills are out. Priced at
    # that rate, the 845-sequence cap's extra KV reads took the step 29 -> 75.9 ms (+18.6% tokens);
    # at half of peak (bandwidth_efficiency_floor) with the rest kept as a fixed cost, about 68 ms.
    advice, _ = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.bandwidth_efficiency_measured"] < 0.4
    assert advice.derived["derived.bandwidth_efficiency"] == 0.5
    assert advice.derived["derived.step_unexplained_ms"] > 5
    cap = strategy_of(advice, "memory_budget")
    gains = {g.metric: g for g in cap.expected}
    step = gains["decode_step_expected_ms"]
    floor = gains["decode_step_floor_ms"]
    # the KV reads the floor adds at 50% (21.7 ms), the requests' bookkeeping (7.5 ms) and the weight
    # GEMMs turning compute-bound at 845 tokens: about 39 ms more, where the ratio gave 47
    assert floor.after / floor.before > 2.4
    assert step.after < 70 and step.after / step.before < floor.after / floor.before
    assert gains["decode_tokens_per_s"].after > 1.25 * gains["decode_tokens_per_s"].before
