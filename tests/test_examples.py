"""The bundled facts files and the advice each one must give."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import needs_durable

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import load_facts

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _advise(name, pack, evaluator=None):
    return advise(load_facts(EXAMPLES / name), pack, evaluator or available_evaluators()[0])


def _chosen(advice):
    return {s.id: s for s in advice.strategies}


def _rejected(advice):
    return {(r.id, tuple(r.params.values())): r for r in advice.rejected}


def test_capacity_bound_a100_chat(pack):
    advice = _advise("capacity-a100-chat.json", pack)
    assert advice.bottleneck == "memory_capacity"
    assert advice.bottleneck_rule == "D-BOTTLENECK-CAPACITY"
    chosen = _chosen(advice)
    # At least these; a new rule may add a strategy, but none that the diagnosis rules out.
    assert {"paged_kv_cache", "quantization", "mixed_precision", "continuous_batching", "length_bucketing"} <= set(chosen)
    assert "static_kv_preallocation" not in chosen                 # excluded by the paged KV cache
    # 80 GiB x 0.9 - 14.9 GiB of fp16 weights, over 16-token pages of 128 KiB per token.
    assert chosen["paged_kv_cache"].params == {"page_size": 16, "max_pages": 29234}
    assert chosen["quantization"].params["scheme"] == "int8"
    assert set(chosen["mixed_precision"].params["keep_high_precision"]) == {"softmax", "attention_scores"}
    assert chosen["continuous_batching"].params == {"max_batch_size": 128, "timeout_ms": 50.0}
    assert chosen["length_bucketing"].params == {"bucket_edges": [1024, 4096]}
    assert "S-LENGTH-BUCKETING" in {c.rule for c in chosen["continuous_batching"].caveats}
    fp8 = _rejected(advice)[("quantization", ("fp8",))]
    assert fp8.because == ("R-FP8-NEEDS-TENSOR-CORES",)
    assert "FP8 tensor cores" in fp8.reason
    # The queue-backlog check waits: a static KV cache reports no usage. Nothing behind the advice
    # waits (a new rule reading a fact this file lacks may wait too: that is not this advice's concern).
    waiting = {n.rule: n.missing for n in advice.not_evaluated}
    assert waiting["W-QUEUE-BACKLOG-WITH-KV-ROOM"] == (
        "telemetry.kv_cache_usage_ratio", "workload.requests_running_mean", "workload.requests_waiting_mean")
    behind = {advice.bottleneck_rule} | {rule for s in advice.strategies for rule in s.because}
    assert behind.isdisjoint(waiting)


def test_bandwidth_bound_l40s_prefers_fp8(pack):
    advice = _advise("bandwidth-l40s-decode.json", pack)
    assert advice.bottleneck == "memory_bandwidth"
    chosen = _chosen(advice)
    assert chosen["quantization"].params["scheme"] == "fp8"
    assert chosen["op_fusion"].params == {"fused_ops": 5, "precision": "bf16"}     # a bf16 model
    assert "C-FUSION-REGISTER-SPILL" in {c.rule for c in chosen["op_fusion"].caveats}
    assert "C-CONTINUOUS-BATCHING-IN-PLACE" in {c.rule for c in chosen["continuous_batching"].caveats}
    assert "C-CONTINUOUS-BATCHING-INTERFERENCE" in {c.rule for c in chosen["continuous_batching"].caveats}
    int8 = _rejected(advice)[("quantization", ("int8",))]
    assert "quantization[fp8]" in int8.reason


def test_compute_bound_h100_with_debug_breakpoints(pack):
    advice = _advise("compute-h100-debug.json", pack)
    assert advice.bottleneck == "compute_capacity"
    chosen = _chosen(advice)
    assert chosen["parallelism"].params == {"pattern": "tensor", "degree": 4}
    assert "op_fusion" not in chosen
    assert _rejected(advice)[("op_fusion", ())].because == ("R-FUSION-DEBUG-BREAKPOINTS",)
    assert chosen["quantization"].params["scheme"] == "fp8"


def test_classification_gets_static_kv_not_paging(pack):
    advice = _advise("classification-t4-short.json", pack)
    chosen = _chosen(advice)
    assert chosen["static_kv_preallocation"].params == {"slot_tokens": 128}
    assert "paged_kv_cache" not in chosen
    paged = _rejected(advice)[("paged_kv_cache", ())]
    assert set(paged.because) == {"S-STATIC-KV-FIXED-SHORT", "R-PAGED-KV-SHORT-MAX-LEN"}
    assert ("quantization", ("fp8",)) in _rejected(advice)        # T4 is compute capability 7.5


def test_low_utilization_static_batching(pack):
    advice = _advise("low-utilization-a10g.json", pack)
    chosen = _chosen(advice)
    assert {"continuous_batching", "length_bucketing"} <= set(chosen)
    cb_rules = set(chosen["continuous_batching"].because)
    assert {"S-CONTINUOUS-BATCHING-SYMPTOMS", "S-CONTINUOUS-BATCHING-FLUCTUATING"} <= cb_rules
    # int8 is not allowed, so there is nothing for mixed precision to protect.
    rejected = _rejected(advice)
    assert rejected[("quantization", ("int8",))].because == ("R-INT8-NOT-ALLOWED",)
    assert "requires quantization" in rejected[("mixed_precision", ())].reason


def test_requirement_carries_a_rejection_over(pack):
    advice = _advise("only-8bit-allowed.yaml", pack)
    rejected = _rejected(advice)
    assert "requires mixed_precision" in rejected[("quantization", ("int8",))].reason
    assert rejected[("quantization", ("int8",))].because == ("R-MIXED-PRECISION-NO-16BIT",)


def test_missing_telemetry_gives_unknown_and_says_what_to_collect(pack):
    advice = _advise("hardware-only.json", pack)
    assert advice.bottleneck == "unknown"
    # Nothing that needs a diagnosed bottleneck (nothing at all, with the built-in pack today); a rule
    # recommending from hardware and workload facts alone would be a legitimate addition.
    assert {s.id for s in advice.strategies}.isdisjoint(
        {"paged_kv_cache", "quantization", "mixed_precision", "op_fusion", "parallelism"})
    missing = {n.rule: n.missing for n in advice.not_evaluated}
    assert missing["D-BOTTLENECK-CAPACITY"] == ("telemetry.memory_used_ratio",)
    assert "telemetry.memory_used_ratio" in missing["S-PAGED-KV-CAPACITY"]


@needs_durable
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".json", ".yaml")))
def test_both_evaluators_give_identical_advice(name, pack):
    assert _advise(name, pack, "durable").to_json() == _advise(name, pack, "reference").to_json()
