"""Expert review set 39 (DeepSeek-V2-Lite under vLLM 0.13 on an H100, Qwen2.5-14B under vLLM 0.11 on
an L40S, Qwen3-32B FP8 under SGLang 0.5.3 for agents, Mistral-Nemo under vLLM 0.12 on an A100 with
preemptions): what the advice must now read. The deployments and the reviewer's notes are in
tests/data/review39."""
from __future__ import annotations

from conftest import review_deployment, script_flag

DATA = "review39"


def test_d4_the_memory_fraction_stays_when_the_cap_beside_it_is_harmful(pack):
    # S-MEMORY-BUDGET-RAISE's 0.95 and S-MEMORY-BUDGET-PREEMPTION's cap of 104 (under the 120 running
    # today) made one candidate, left out whole as harmful, where 0.95 alone took the TTFT mean from
    # 3.4 s to 0.36 s by kbopt's own model (F1)
    advice, script = review_deployment(pack, DATA, "d4")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    assert budget.params.get("memory_fraction") == 0.95 and "max_num_seqs" not in budget.params
    assert script_flag(script, "--gpu-memory-utilization") == "0.95"
    cap = next(r for r in advice.rejected if r.id == "memory_budget")
    assert cap.params.get("max_num_seqs", 0) < 120 and "S-MEMORY-BUDGET-PREEMPTION's part left out as harmful" in cap.reason
    ttft = next(g for g in budget.expected if g.metric == "ttft_expected_ms")
    assert ttft.after < ttft.before / 2


def test_d1_a_cap_alone_leaves_the_measured_pool_as_it_is(pack):
    # a --max-num-seqs change was read as shrinking the measured pool 1,369,600 -> 1,279,552 tokens,
    # the measured block count forgotten for every memory budget (F3)
    advice, _ = review_deployment(pack, DATA, "d1")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    assert "memory_fraction" not in budget.params
    assert all(g.metric not in ("kv_pool_tokens", "kv_pool_gib_per_gpu") for g in budget.expected)


def test_d4_a_higher_memory_fraction_grows_the_measured_pool_by_the_memory_it_adds(pack):
    # 0.90 -> 0.95 of an 80 GB A100 is 4 GiB more for the KV cache: about 26,000 tokens of
    # Mistral-Nemo's 160 KiB a token (40 layers, 8 KV heads of 128, 16-bit) on top of the measured pool
    advice, _ = review_deployment(pack, DATA, "d4")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    pool = next(g for g in budget.expected if g.metric == "kv_pool_tokens")
    assert 24_000 <= pool.after - pool.before <= 28_000


def test_d3_the_host_tier_has_an_estimate_from_the_prefixes_the_pool_evicted(pack):
    # 22% of prompt tokens are evicted prefixes, recomputed; HiCache had "no estimate of its own"
    # (F2): the tier (twice the pool) brings the hit ratio to the reuse the trace holds, and the
    # first token follows (the reviewer's what-if at a 0.90 hit ratio: TTFT 508 -> 184 ms)
    advice, script = review_deployment(pack, DATA, "d3")
    offload = next(s for s in advice.strategies if s.id == "kv_offload")
    by_metric = {g.metric: g for g in offload.expected}
    ttft = by_metric["ttft_expected_ms"]
    assert ttft.after < ttft.before * 0.5
    assert by_metric["ttft_p99_expected_ms"].after < by_metric["ttft_p99_expected_ms"].before
    assert "kv_offload (no estimate of its own)" not in script


def test_d1_a_raised_cap_stops_a_quarter_past_the_clients_peak(pack):
    # 256 -> 1,089 on the pool FP8 weights and KV leave, with 320 in flight at the peak: the cap
    # admits nothing more at today's load, and preempts if the FP8 cache is rolled back (F4)
    advice, script = review_deployment(pack, DATA, "d1")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    assert budget.params["max_num_seqs"] == 400
    assert script_flag(script, "--max-num-seqs") == "400"
    assert any("a quarter past today's peak concurrency (320)" in why for _, why in budget.sized)


def test_d3_the_actions_that_shorten_the_missed_first_token_come_first(pack):
    # mixed chunks (+2% on the mean first token, nothing on its p99) were action 1 on a deployment
    # that misses a TTFT p99 objective 2.2x, above the FP8 KV cache and the host tier that halve it (F2)
    advice, _ = review_deployment(pack, DATA, "d3")
    actions = [s.key for s in advice.strategies if s.status == "change"]
    assert actions.index("chunked_prefill") > max(actions.index("kv_cache_quantization[fp8]"), actions.index("kv_offload"))
    assert actions[-1] == "chunked_prefill"


def test_d1_a_second_replica_is_not_called_harmful_for_one_replicas_smaller_batch(pack):
    # "harmful: it works against the throughput objective: decode tokens 4,310 -> 3,452" was one
    # replica's rate once the load is split; the service's 4,250 tokens a second (17 requests a
    # second of 250 tokens) does not fall (F5). The reason that stands: raise the cap first.
    advice, _ = review_deployment(pack, DATA, "d1")
    scale_out = next(r for r in advice.rejected if r.id == "scale_out")
    assert "Raise the cap first" in scale_out.reason and "harmful" not in scale_out.reason


def test_d3_the_host_tier_says_sglang_decodes_off_flashattention_3_on_hopper(pack):
    # --enable-hierarchical-cache with the default kernel I/O makes SGLang decode with FlashInfer
    # where FA3 would (Hopper), beside FP8-KV estimates that rest on FA3; the advice said nothing (F6)
    advice, _ = review_deployment(pack, DATA, "d3")
    offload = next(s for s in advice.strategies if s.id == "kv_offload")
    assert any(n.rule == "C-KV-OFFLOAD-HICACHE-DECODE-SGLANG" and "--decode-attention-backend fa3" in n.text
               for n in offload.caveats)


def test_d1_the_fp8_kv_note_of_an_mla_model_names_flashmla(pack):
    # vLLM's FlashAttention MLA backend refuses an FP8 cache; the note sent a user to FA3 (F8)
    _, script = review_deployment(pack, DATA, "d1")
    assert "FlashMLA on Hopper" in script
