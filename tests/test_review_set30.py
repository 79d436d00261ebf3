"""Expert review set 30: three deployments a reviewer wrote, two of them built by `kbopt collect`
from a vLLM or SGLang /metrics dump and a real request trace (vLLM 0.12 serving a coding agent with
Qwen2.5-Coder-32B on 2 H100s, prefix caching off; vLLM 0.11 with Qwen3-30B-A3B on 4 H100s as TP4
with expert parallelism under a throughput objective; SGLang 0.5.1 with Qwen2.5-72B on 8 A100s for
long multi-turn chats from the Mooncake trace; tests/data/review30, with today's launch commands,
the dumps and hand arithmetic in NOTES.md), and what the advice must now read for the defects it found."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import review_deployment, script_flag, strategy_of

from kbopt.collectors.run import CollectOptions, collect
from kbopt.collectors.traces import TraceOptions, summarize_trace

DATA = "review30"
HERE = Path(__file__).resolve().parent
FOLDER = HERE / "data" / DATA
REAL = HERE / "data" / "real"


def test_d2_a_cap_full_at_the_peak_is_raised_before_any_replica_is_added(pack):
    # 208 run on average against --max-num-seqs 256 while 300 are in flight at the peak (28 req/s x
    # 10.4 s): the cap binds in the busy windows (a TTFT p99 of 3.5 s) with the KV cache 19% used.
    # The raise waited for a mean within 10% of the cap, and the advice doubled the GPUs instead.
    advice, script = review_deployment(pack, DATA, "d2")
    assert strategy_of(advice, "memory_budget") is not None
    assert strategy_of(advice, "scale_out") is None
    assert any(r.id == "scale_out" and "S-BATCH-CAP-RAISE" in r.because for r in advice.rejected)
    assert int(script_flag(script, "--max-num-seqs")) >= 300       # at least what is in flight at the peak
    assert (advice.plan.replicas or 1) == 1
    # the 44 past the cap at the peak wait for slots (M-SLOT-WAIT-PEAK: 44 x 400 tokens x 25 ms / 256),
    # and the raise removes that wait from the first token's tail
    assert advice.derived["derived.slot_wait_peak_ms"] == pytest.approx(44 * 400 * 25 / 256, rel=0.05)
    tail = next(g for g in strategy_of(advice, "memory_budget").expected if g.metric == "ttft_p99_expected_ms")
    assert tail.after < 0.5 * tail.before


def test_d1_an_exact_trace_percentile_beats_one_interpolated_in_histogram_buckets():
    # vLLM's token histograms have 1-2-5 buckets: the p99 prompt interpolated in the 5,000-10,000
    # bucket read 9,078 where the Azure code trace's 2,000 requests give exactly 7,436 (+22%), and
    # the first reading won the tie (both "measured")
    metrics = str(FOLDER / "d1-metrics.prom")
    alone = collect(CollectOptions(metrics=(metrics,), nvml=False))
    value, provenance = alone.facts["workload.prompt_len_p99"]
    assert value == pytest.approx(9078, rel=0.01)
    assert provenance.quality == "derived" and "histogram buckets" in (provenance.metric or "")
    both = collect(CollectOptions(metrics=(metrics,), workloads=(str(REAL / "azure_llm_2023_code_first2000.csv"),), nvml=False))
    assert both.facts["workload.prompt_len_p99"][0] == 7436
    assert both.facts["workload.output_len_p99"][0] == 287
    assert both.facts["workload.prompt_len_p99"][1].source.startswith("trace:")
    # a mean from the engine's _sum / _count is exact: it stays the engine's, measured
    assert both.facts["workload.ttft_mean_ms"][1].quality == "measured"


def test_d3_mooncake_block_hashes_give_the_share_a_prefix_cache_would_serve(tmp_path):
    # hash_ids chain each 512-token block over its prefix: a hash seen before is a prefix an
    # earlier request computed. The reviewer's count: 17.1% over the trace's 610-request head, 7.3%
    # in every 8th request.
    for name, share in ((REAL / "mooncake_fast25_conversation_first610.jsonl", 0.171), (FOLDER / "mooncake_conv_1in8.jsonl", 0.073)):
        facts = summarize_trace(str(name), TraceOptions()).facts
        value, provenance = facts["workload.prefix_cache_hit_ratio"]
        assert value == pytest.approx(share, abs=0.001)
        assert provenance.quality == "derived" and provenance.metric == "hash_ids"
        # and as the reuse itself, which an engine's hit ratio below it shows lost to eviction
        assert facts["workload.prefix_reuse_ratio"][0] == value
    # the engine's own hit rate, where its metrics give one, wins (SGLang's cache_hit_rate gauge)
    collected = collect(CollectOptions(metrics=(str(FOLDER / "d3-metrics.prom"),),
                                       workloads=(str(FOLDER / "mooncake_conv_1in8.jsonl"),), nvml=False))
    assert collected.facts["workload.prefix_cache_hit_ratio"][0] == 0.12
    # a row whose hashes are not a list of hashes is named by its line
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}) + "\n"
                   + json.dumps({"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [1.5]}) + "\n")
    from kbopt.errors import KboptError
    with pytest.raises(KboptError, match=r"bad.jsonl:2: hash_ids"):
        summarize_trace(str(bad), TraceOptions(format="mooncake"))


def test_d1_a_chunk_budget_is_judged_beside_the_plan_that_meets_the_first_token(pack):
    # Alone, on today's deployment, a smaller budget takes a missed TTFT p99 further (1,670 -> 1,823
    # ms): it was kept out as a trade between missed objectives. After FP8 weights and the prefix
    # cache, the plan's TTFT p99 is about 200 ms against 1,000, and the ITL p99 stays over 50 ms
    # without the budget: beside the plan it costs no objective and meets the other.
    advice, script = review_deployment(pack, DATA, "d1")
    assert strategy_of(advice, "chunked_prefill") is not None
    assert 1024 <= int(script_flag(script, "--max-num-batched-tokens")) <= 2048      # hand: about 1,536-1,605
    after = {s.kind: s for s in advice.symptoms if s.objective is not None}
    assert all(s.after is not None and s.after <= s.objective for s in after.values()), after
    assert script_flag(script, "--no-enable-prefix-caching") is None


def test_d3_an_accuracy_cost_is_weighed_by_what_the_stated_objective_judges(pack):
    # A100s, the pool 21% used: alone an FP8 cache moves the ITL 4.8% and the first token 0.2%, and
    # decode tokens 5%. A latency objective is judged by the times, a throughput objective by the
    # tokens a second: 5.4% more tokens does not pay an accuracy cost under the first.
    from kbopt.engine.advice.whatif import Gain, Plan, adds_too_little

    def plan(itl: float, ttft: float, tokens: float) -> Plan:
        return Plan(("x",), tuple(Gain(metric, 1.0, value, None, (), "medium") for metric, value in (
            ("itl_expected_ms", itl), ("ttft_expected_ms", ttft), ("decode_tokens_per_s", tokens))))
    with_it, without = plan(61.9, 4963, 146.0), plan(65.0, 4975, 138.5)
    assert adds_too_little(with_it, without, 0.05, "latency") is not None
    assert adds_too_little(with_it, without, 0.05, "throughput") is None
    assert adds_too_little(with_it, without, 0.05) is None          # no objective: any of them counts
    # On the deployment itself the cache stays: beside the plan's 480-token chunk budget each chunk
    # step is shorter, and the plan's mean first token falls about a tenth with it.
    advice, _ = review_deployment(pack, DATA, "d3")
    assert strategy_of(advice, "kv_cache_quantization") is not None
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is not None and chunked.params["max_num_batched_tokens"] <= 512


def test_a_traces_block_hashes_are_held_up_to_a_bound(monkeypatch):
    # a million-request trace, or a hostile one, does not hold every hash it names: past the bound
    # the reuse is the share over the requests read until then
    from kbopt.collectors import traces
    monkeypatch.setattr(traces, "MAX_HASHED_BLOCKS", 100)
    value, provenance = summarize_trace(str(REAL / "mooncake_fast25_conversation_first610.jsonl"),
                                        TraceOptions()).facts["workload.prefix_reuse_ratio"]
    assert 100 <= provenance.samples < 400 and 0 <= value < 1
