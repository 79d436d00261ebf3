"""Expert review set 34 (TensorRT-LLM 1.0/1.1 and TGI 3.3): what the advice must now read.
The deployments and the reviewer's notes are in tests/data/review34."""
from __future__ import annotations

from conftest import review_deployment, script_flag, strategy_of

DATA = "review34"


def test_d1_a_cap_is_the_replicas_once_the_plan_turns_dp_attention_off(pack):
    # Qwen3-235B on 8 H100s under attention DP (--max_batch_size 64 a rank), 96 in flight at the
    # peak: the plan turns attention DP off, so the engine's cap is the replica's, not 128 / 8 = 16
    # (which would serve about 1.2 requests a second against 1.8 arriving)
    _, script = review_deployment(pack, DATA, "d1")
    assert "enable_attention_dp: false" in script
    assert int(script_flag(script, "--max_batch_size")) >= 96


def test_d1_a_cap_raise_beside_dp_attention_turned_off_is_modelled_as_the_replicas(pack):
    # with a cap that binds (8 a rank), S-BATCH-CAP-RAISE sizes the replica's cap: its effect was
    # divided by today's 8 ranks in the plan although the plan turns DP attention off, and the plan
    # read a TTFT p99 of 78.8 s (slots for 12 requests); counted on the plan's shape, it meets 2 s
    advice, script = review_deployment(pack, DATA, "d1", "serving.max_num_seqs=8")
    assert "enable_attention_dp: false" in script
    assert int(script_flag(script, "--max_batch_size")) >= 96
    after = {g.metric: g.after for g in advice.plan.expected}
    assert after["ttft_p99_expected_ms"] < 2000


def test_d3_tgi_does_not_speculate_where_the_first_token_misses_and_reuse_lost_to_routing_is_named(pack):
    # four TGI replicas behind round robin, 8k-token RAG prompts, TTFT p99 3.8 s against 2 s: --speculate
    # turns TGI's chunking off (and with it the router's prefill gate), so it is no lever for the first
    # token; the reuse the caches miss (0.79 against 0.31) is the router's, not evictions a host tier
    # TGI does not have would recover
    advice, script = review_deployment(pack, DATA, "d3")
    assert "--speculate" not in script
    assert any(r.id == "speculative_decoding" and "R-TGI-SPECULATE-TTFT" in r.because for r in advice.rejected)
    assert "derived.prefix_evicted_share" not in advice.derived
    assert all(s.id != "kv_offload" for s in advice.strategies)
    assert any(w.rule == "W-PREFIX-SPLIT-BY-ROUTING" for w in advice.warnings)


def test_d2_a_paged_cache_keeps_the_engines_own_block_size(pack):
    # TensorRT-LLM pages its KV cache in blocks of 32: the seed's 16 was written over it for no
    # modelled gain, with a key (kv_cache_config.tokens_per_block) its 1.0 options may refuse
    advice, script = review_deployment(pack, DATA, "d2", "serving.kv_block_size=32")
    paged = next((s for s in advice.strategies if s.id == "paged_kv_cache"), None)
    assert paged is None or (paged.status == "keep" and paged.params["page_size"] == 32)
    assert "tokens_per_block" not in script


def test_d2_no_replicas_where_the_plans_fp8_kv_cache_serves_the_arrivals(pack):
    # Llama-3.3-70B FP8 on 2 H100s, 300 waiting, throughput objective: the FP8 KV cache serves about
    # 3,500 output tokens a second against 2.8 x 900 = 2,520 arriving at the peak; four replicas
    # sized on today's queue were asked for
    advice, _ = review_deployment(pack, DATA, "d2")
    assert strategy_of(advice, "scale_out") is None and advice.plan.replicas is None
    assert any(r.id == "scale_out" and r.reason.startswith("not needed") for r in advice.rejected)
