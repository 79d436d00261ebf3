"""Expert review set 32: SGLang 0.5.1 deployments a reviewer wrote (Llama-3.3-70B FP8 on 4 H100s for
multi-turn agent sessions with long shared prefixes; Qwen3-235B-A22B FP8 on 8 H200s with data-parallel
attention and expert parallelism under a throughput objective; Llama-3.1-8B on an L40S where EAGLE-3
is the first lever; Llama-3.1-8B on an H100 built by `kbopt collect` from an SGLang /metrics dump and
the Azure conversation trace; tests/data/review32, with hand arithmetic in NOTES.md), and what the
advice must now read for the defects it found."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import changed_deployment, review_deployment, script_flag, strategy_of

from kbopt.collectors.run import CollectOptions, collect
from kbopt.engine.advice.settings import sglang_capture_top

DATA = "review32"
FOLDER = Path(__file__).resolve().parent / "data" / DATA


def test_d2_the_graph_batch_is_one_sglang_captures():
    # past its default list SGLang adds capture sizes 16 apart from the list's top
    # (cuda_graph_runner.py@0.5.1:205-210): --cuda-graph-max-bs 177 captured up to 176, so the
    # cap's own batch of 177 stepped eagerly
    assert [sglang_capture_top(n) for n in (5, 12, 32, 33, 176, 177, 192)] == [5, 16, 32, 48, 176, 192, 192]


def test_d2_the_raised_cap_is_captured(pack):
    _, script = review_deployment(pack, DATA, "d2")
    top = int(script_flag(script, "--cuda-graph-max-bs"))
    assert top >= 177 and top % 16 == 0


def test_d4_collect_reads_sglangs_retractions_and_its_lifetime_cache_hits():
    # sglang:total_retracted_reqs is SGLang's preemption (managers/scheduler.py@0.5.1:1705), and
    # cached_tokens_total / prompt_tokens_total the hit ratio over the window, where the
    # cache_hit_rate gauge covers the last log interval only
    collected = collect(CollectOptions(metrics=(str(FOLDER / "d4-metrics-probe.prom"),), nvml=False))
    ratio, provenance = collected.facts["workload.preemption_ratio"]
    assert ratio > 0 and provenance.metric.startswith("sglang:total_retracted_reqs")
    hit, provenance = collected.facts["workload.prefix_cache_hit_ratio"]
    assert hit == pytest.approx(2248366 / 18736380, abs=1e-4)
    assert provenance.metric == "sglang:cached_tokens_total / sglang:prompt_tokens_total"


def test_d1_prefixes_evicted_before_their_reuse_call_for_a_host_tier_whatever_the_gauge(pack, tmp_path):
    # SGLang's token_usage leaves evictable radix tokens out (scheduler_metrics_mixin.py@0.5.1:88,
    # 118-119): a pool full of other sessions' prefixes read 0.30, and the host tier never fired.
    # A trace's reuse above the engine's hit ratio shows the evictions.
    today, _ = review_deployment(pack, DATA, "d1")
    assert strategy_of(today, "kv_offload") is None
    advice = changed_deployment(pack, DATA, "d1", tmp_path, workload__prefix_reuse_ratio=0.9)
    assert advice.derived["derived.prefix_evicted_share"] == pytest.approx(0.9 - 0.68, abs=0.01)
    assert strategy_of(advice, "kv_offload") is not None
