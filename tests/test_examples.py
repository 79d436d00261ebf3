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
    """The plan's strategies by id (not a variant a script applies only until the plan's checkpoint exists)."""
    return {s.id: s for s in advice.strategies if not s.stands_in_for}


def _rejected(advice):
    return {(r.id, tuple(r.params.values())): r for r in advice.rejected}


def test_capacity_bound_a100_chat(pack):
    advice = _advise("capacity-a100-chat.json", pack)
    assert advice.bottleneck == "memory_capacity"
    assert advice.bottleneck_rule == "D-BOTTLENECK-CAPACITY"
    chosen = _chosen(advice)
    # At least these; a new rule may add a strategy, but none that the diagnosis rules out.
    assert {"paged_kv_cache", "quantization", "continuous_batching", "chunked_prefill", "kv_cache_quantization"} <= set(chosen)
    # One replica: chunked prefill supersedes bucketing (K4.6) as the cure for long sequences;
    # the methodology's strategy is shown rejected with that reason, not dropped.
    assert "length_bucketing" not in {s.id for s in advice.strategies}
    assert [r.because for r in advice.rejected if r.id == "length_bucketing"] == [("R-LENGTH-BUCKETING-ONE-REPLICA",)]
    assert "static_kv_preallocation" not in chosen                 # excluded by the paged KV cache
    # vLLM's rule by default, on the deployment the plan leaves (FP8 weights, an FP8 KV cache):
    # 80 GiB x 0.9 - 7.45 GiB of FP8 weights - 1.3 GiB of activations (the API server's 2,048 batched
    # tokens on an A100) - 0.13 GiB outside PyTorch = 63.1 GiB, over 16-token pages of 64 KiB per
    # token: 64,634 pages (28,502 today, with 16-bit weights and KV, as the note says).
    assert chosen["paged_kv_cache"].params == {"page_size": 16, "max_pages": 64634}
    assert any("28502 on today's deployment" in note.text for note in chosen["paged_kv_cache"].caveats)
    # FP8 on Ampere is weight-only (Marlin W8A16): decode bytes, no activation quantization, so
    # nothing to keep in mixed precision.
    assert chosen["quantization"].params["scheme"] == "fp8"
    assert chosen["quantization"].params["mode"] == "weight_only"
    assert "C-FP8-WEIGHT-ONLY-AMPERE" in {c.rule for c in chosen["quantization"].caveats}
    assert "mixed_precision" not in chosen
    assert chosen["continuous_batching"].params == {"max_batch_size": 128, "timeout_ms": 50.0}
    # Latency objective on an A100: a 2048-token budget (vLLM's tuning guide; PR #17885 on A100).
    assert chosen["chunked_prefill"].params["max_num_batched_tokens"] == 2048
    assert "S-CHUNKED-PREFILL" in {c.rule for c in chosen["continuous_batching"].caveats}
    kv = {g.metric: g for g in chosen["kv_cache_quantization"].expected}
    assert (kv["kv_pool_tokens"].before, kv["kv_pool_tokens"].after) == (456032, 912064)   # twice the tokens
    assert ("quantization", ("int8",)) in _rejected(advice)      # FP8 keeps more accuracy for the same bytes
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
    # The roofline decides, not the utilizations: 12 sequences of 1,200 tokens do 11 FLOP per byte
    # against the L40S's ridge of 419.
    assert advice.bottleneck_rule == "D-BOTTLENECK-BANDWIDTH-ROOFLINE"
    assert advice.derived["derived.arithmetic_intensity"] == pytest.approx(11.38, abs=0.01)
    chosen = _chosen(advice)
    assert chosen["quantization"].params["scheme"] == "fp8"
    # Mixed precision comes with W8A8, in the model's own bf16; no fusion or layout advice without
    # an engine that exposes the choice.
    assert chosen["mixed_precision"].params["high_precision"] == "bf16"
    assert {"op_fusion", "weight_layout"}.isdisjoint(chosen)
    # Continuous batching and a paged KV cache are already in place: kept, once, not actions.
    assert chosen["continuous_batching"].status == chosen["paged_kv_cache"].status == "keep"
    assert chosen["quantization"].status == "change" and chosen["quantization"].params["mode"] == "w8a8"
    assert "continuous_batching" not in (advice.plan.strategies if advice.plan else ())
    int8 = _rejected(advice)[("quantization", ("int8",))]
    assert "quantization[fp8]" in int8.reason


def test_h100_with_debug_breakpoints(pack):
    # SM 88% over DRAM 41% made this "compute-bound" by the methodology's order; decoding 64 sequences
    # of 2,600 tokens of a 70B model on TP4 does 46 FLOP per byte against the H100's ridge of 295,
    # so the roofline calls it bandwidth-bound (DCGM counts warps stalled on memory as SM-active).
    advice = _advise("compute-h100-debug.json", pack)
    assert advice.bottleneck == "memory_bandwidth"
    assert advice.derived["derived.arithmetic_intensity"] == pytest.approx(46.17, abs=0.01)
    chosen = _chosen(advice)
    assert "parallelism" not in chosen
    assert "op_fusion" not in chosen
    assert chosen["debug_mode"].params == {"cuda_graphs": False}        # eager mode for breakpoints
    assert chosen["quantization"].params["scheme"] == "fp8"


def test_classification_gets_no_kv_cache_advice(pack):
    # An encoder classifier keeps no KV cache: neither paging nor pre-allocating one is advice.
    advice = _advise("classification-t4-short.json", pack)
    chosen = _chosen(advice)
    assert {"static_kv_preallocation", "paged_kv_cache", "continuous_batching"}.isdisjoint(chosen)
    assert _rejected(advice)[("static_kv_preallocation", ())].because == ("R-KV-CACHE-ENCODER-TASK",)
    assert "derived.kv_bytes_per_token" not in advice.derived
    assert chosen["encoder_batching"].params == {"max_tokens_per_batch": 16384}   # tokens, not padded slots
    assert _chosen(advice)["quantization"].params["scheme"] == "int8"    # T4 (7.5) has no FP8 kernels


def test_low_utilization_static_batching(pack):
    # SM 24% and DRAM 37% with requests in flight: neither roof is near, so the call is overhead
    # (it was memory_bandwidth, the larger of two low readings); no quantization is advised.
    advice = _advise("low-utilization-a10g.json", pack)
    assert advice.bottleneck == "overhead"
    assert "W-GPU-MOSTLY-IDLE" in {w.rule for w in advice.warnings}
    chosen = _chosen(advice)
    assert {"continuous_batching", "chunked_prefill"} <= set(chosen)
    assert "quantization" not in chosen
    cb_rules = set(chosen["continuous_batching"].because)
    assert {"S-CONTINUOUS-BATCHING-SYMPTOMS", "S-CONTINUOUS-BATCHING-FLUCTUATING"} <= cb_rules


def test_requirement_carries_a_rejection_over(pack):
    advice = _advise("only-8bit-allowed.yaml", pack)
    # No 16-bit precision allowed rules out keeping layers in 16-bit, not the quantization: the
    # list governs stored and multiplied data, not the engine's internal accumulation.
    rejected = _rejected(advice)
    assert ("quantization", ("int8",)) not in rejected
    assert {s.id for s in advice.strategies} >= {"quantization"}


def test_missing_telemetry_gives_unknown_and_says_what_to_collect(pack):
    advice = _advise("hardware-only.json", pack)
    assert advice.bottleneck == "unknown"
    # Nothing that needs a diagnosed bottleneck (nothing at all, with the built-in pack today); a rule
    # recommending from hardware and workload facts alone would be a legitimate addition.
    assert {s.id for s in advice.strategies}.isdisjoint(
        {"paged_kv_cache", "quantization", "mixed_precision", "op_fusion", "parallelism"})
    missing = {n.rule: n.missing for n in advice.not_evaluated}
    assert "telemetry.memory_used_ratio" in missing["D-BOTTLENECK-CAPACITY"]
    assert "telemetry.memory_used_ratio" in missing["S-PAGED-KV-CAPACITY"]


def test_70b_on_4_h100_with_vllm(pack):
    advice = _advise("vllm-70b-4xh100.json", pack)
    assert advice.bottleneck == "memory_bandwidth" and advice.bottleneck_rule == "D-BOTTLENECK-BANDWIDTH-ROOFLINE"
    d = advice.derived
    assert d["derived.weights_gib_per_gpu"] == pytest.approx(32.88, abs=0.01)        # 70.6e9 x 2 B / 4 GPUs
    assert d["derived.kv_bytes_per_token_per_gpu"] == 81920                           # 2 x 80 x 2 heads x 128 x 2 B
    assert d["derived.kv_pool_tokens"] == 432720
    assert d["derived.decode_step_floor_ms"] == pytest.approx(12.49, abs=0.01)
    # 40 running requests of 1,440 uncached prompt tokens and 400 output tokens: each step carries
    # 40/400 of a 95.3 ms prefill (2 x 70.6e9 x 1,440 FLOPs and attention at 55% of 4 x 989 TFLOP/s)
    assert d["derived.prefill_share_ms"] == pytest.approx(9.53, abs=0.01)
    assert d["derived.achieved_bandwidth_ratio"] == pytest.approx(0.677, abs=0.001)  # 12.49 / (28 ms measured - 9.53)
    # the reads take what is left after the fixed cost (4.61 ms) and, for each of 40 requests, 4 us of
    # bookkeeping and 13.1 us of its token's share of the all-reduces (2 x 80 layers x 2 x 3/4 x 8,192 x 2 B
    # at 300 GB/s): 12.49 / 13.18
    assert d["derived.bandwidth_efficiency"] == pytest.approx(0.948, abs=0.001)
    assert d["derived.itl_expected_ms"] == pytest.approx(28)              # calibrated: the model reproduces the measurement
    assert d["derived.max_batch_itl"] == 79          # 80 before each request's share of the all-reduces was counted
    assert "quantization" in _chosen(advice)


def test_one_request_where_the_kv_cache_holds_hundreds(pack):
    advice = _advise("one-request-l4.json", pack)
    assert advice.bottleneck == "underfed"
    assert advice.derived["derived.kv_pool_sequences"] == 206
    assert "D-BOTTLENECK-UNDERFED" in {w.rule for w in advice.warnings}
    # The client is told to send more: 64 in flight (the pool holds hundreds), and the model sizes it.
    chosen = _chosen(advice)
    assert set(chosen) == {"client_concurrency"}
    assert chosen["client_concurrency"].params == {"target_in_flight": 64}
    tokens = {g.metric: g for g in chosen["client_concurrency"].expected}["decode_tokens_per_s"]
    assert tokens.after > 20 * tokens.before


def test_idle_gpu_says_collect_under_load_and_recommends_nothing(pack):
    advice = _advise("idle-l40s.json", pack)
    assert advice.derived["derived.no_load"] is True and advice.bottleneck == "underfed"
    assert any("collect again under" in w.text for w in advice.warnings)
    assert not advice.strategies
    assert "derived.low_gpu_utilization" not in advice.derived


def test_mixtral_tp8_at_low_activity_is_overhead(pack):
    advice = _advise("mixtral-8xh100-tp8.json", pack)
    assert advice.bottleneck == "overhead"
    d = advice.derived
    # 64 tokens a step, each to 2 of 8 experts, touch all but (6/8)^64 of them: every weight is read
    routed = (46.7 - 12.9) / (1 - 2 / 8)
    assert d["derived.active_weight_bytes_per_gpu"] == pytest.approx((46.7 - routed * 0.75**64) * 1e9 * 2 / 8)
    assert d["derived.weights_gib_per_gpu"] == pytest.approx(46.7e9 * 2 / 8 / 2**30)   # total parameters in memory
    assert d["derived.achieved_bandwidth_ratio"] < 0.25
    # 87 GiB of bf16 weights fit in 2 H100s; SM 31% and DRAM 27% on 8: four replicas of TP2.
    parallelism = _chosen(advice)["parallelism"]
    assert parallelism.params["pattern"] == "reshape"
    assert (parallelism.params["tensor"], parallelism.params["data"]) == (2, 4)


@needs_durable
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".json", ".yaml")))
def test_both_evaluators_give_identical_advice(name, pack):
    assert _advise(name, pack, "durable").to_json() == _advise(name, pack, "reference").to_json()


def _gain(strategy, metric):
    return {g.metric: g for g in strategy.expected}[metric]


def test_l4_8b_bf16_vllm_gets_fp8_weights_and_kv(pack):
    # An 8B model in bf16 on a 24 GB L4 under vLLM: 15 GiB of weights leave about 5 GiB of KV
    # cache, 97% used with preemptions. FP8 weights (W8A8 on Ada's FP8 tensor cores) halve the
    # decode step; an FP8 KV cache doubles the tokens the pool holds.
    advice = _advise("l4-8b-bf16-vllm.json", pack)
    assert advice.bottleneck == "memory_capacity"
    chosen = _chosen(advice)
    quant = chosen["quantization"]
    assert quant.key == "quantization[fp8]" and quant.status == "change"
    assert (quant.params["mode"], quant.params["method"]) == ("w8a8", "fp8")
    step = _gain(quant, "decode_step_expected_ms")
    # the weight reads halve, the fixed cost (1.15 ms) and the bookkeeping do not (31.5 ms at today's
    # 6 running, not 29.1); and the 7 GiB the weights free grow the full KV pool, which admits the 3
    # requests that waited for room: 9 run, and the step is 33.3 ms
    assert step.before == pytest.approx(58.25, abs=0.01) and step.after == pytest.approx(33.26, abs=0.01)
    tokens_per_s, itl = _gain(quant, "decode_tokens_per_s"), _gain(quant, "itl_expected_ms")
    assert tokens_per_s.after == pytest.approx(9 * 1000 / itl.after, rel=1e-6)
    kv = chosen["kv_cache_quantization"]
    assert kv.key == "kv_cache_quantization[fp8]"
    tokens = _gain(kv, "kv_pool_tokens")
    assert (tokens.before, tokens.after) == (40848, 81712)
    assert chosen["mixed_precision"].params["high_precision"] == "bf16"    # never fp16 for a bf16 model
    # Nothing that is a no-op: what vLLM does already is kept, once; no fusion, layout or bucketing.
    assert chosen["paged_kv_cache"].status == "keep"
    assert {"op_fusion", "weight_layout", "length_bucketing", "continuous_batching"}.isdisjoint(
        s.id for s in advice.strategies if s.status == "change")
    assert len({s.key for s in advice.strategies}) == len(advice.strategies)
    assert advice.plan and "paged_kv_cache" not in advice.plan.strategies


def test_sglang_fp8_70b_keeps_its_weights_and_gets_fp8_kv_and_replicas(pack):
    advice = _advise("sglang-2xh100-70b-fp8.json", pack)
    chosen = _chosen(advice)
    # The weights are FP8 already: kept, never recommended again.
    assert chosen["quantization"].key == "quantization[fp8]" and chosen["quantization"].status == "keep"
    kv = chosen["kv_cache_quantization"]
    assert kv.status == "change" and "C-KV-CACHE-FP8-SGLANG" in {c.rule for c in kv.caveats}
    # Twelve requests wait on a 93%-full KV cache, and prompts share prefixes: a cache-aware router.
    assert chosen["scale_out"].params["routing"] == "cache_aware"
    assert "prefix_caching" not in chosen                     # RadixAttention is on by default


def test_trtllm_latency_small_batch_gets_speculative_decoding(pack):
    advice = _advise("trtllm-h100-8b-latency.json", pack)
    assert advice.bottleneck == "memory_bandwidth"
    chosen = _chosen(advice)
    assert chosen["speculative_decoding"].params["num_speculative_tokens"] == 3
    assert chosen["quantization"].params["mode"] == "w8a8"
    assert {"op_fusion", "weight_layout"}.isdisjoint(chosen)   # TRT-LLM fuses on its own


def test_tgi_long_prompts_get_chunked_prefill_not_buckets(pack):
    advice = _advise("tgi-a10g-7b-long-prompts.json", pack)
    chosen = _chosen(advice)
    assert chosen["chunked_prefill"].params["max_num_batched_tokens"] == 2048     # latency objective
    assert "length_bucketing" not in chosen     # one replica: nothing to route, and it says so
    assert any(r.id == "length_bucketing" and "one replica" in r.reason for r in advice.rejected)
    assert chosen["prefix_caching"].params == {"enabled": True}
    quant = chosen["quantization"]
    # A10G is Ampere: FP8 would be weight-only, and with prefill at about half of the GPU's math INT8
    # W8A8 (its INT8 tensor cores) is the 8-bit scheme that speeds it up (S-QUANT-INT8-W8A8-PREFILL)
    assert quant.key == "quantization[int8]" and quant.params["mode"] == "w8a8"
    # FP8 weight-only is no longer a rejection: TGI makes it as it loads, so the script runs it until
    # the INT8 checkpoint exists (a flag before a new checkpoint); the plan's figures are INT8's
    fp8 = next(s for s in advice.strategies if s.key == "quantization[fp8]")
    assert fp8.stands_in_for == "quantization[int8]" and "quantization[fp8]" not in advice.plan.strategies


def test_every_in_place_condition_parses_against_the_vocabulary(pack):
    from kbopt.engine.lang.parse import parse_condition
    for strategy in pack.kb.strategies.values():
        for text in (strategy.in_place_when, *strategy.variant_in_place_when.values(), strategy.capacity_pays_when):
            if text:
                parse_condition(text, pack.kb.vocabulary, {})
        assert set(strategy.variant_in_place_when) <= set(strategy.variants), strategy.id
        assert set(strategy.accuracy_cost) <= set(strategy.variants), strategy.id
