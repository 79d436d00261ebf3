"""Expert review set 36 (SGLang 0.5.4 agents with EAGLE-3, vLLM on MI300X, a MoE reasoning model,
structured outputs): what the advice must now read. The deployments and the reviewer's notes are
in tests/data/review36."""
from __future__ import annotations

from conftest import review_deployment, script_flag, strategy_of

DATA = "review36"


def test_d2_an_overhead_bound_step_made_of_kv_reads_takes_an_fp8_kv_cache_and_with_it_the_cap_raise(pack):
    # Llama-3.3-70B FP8 on 8 MI300X at 36% of peak bandwidth, KV 71% of the step's bytes, 80 waiting
    # at the cap of 256 with the KV cache 14% used, ITL p99 95 ms against 60: the cap raise alone takes
    # the ITL p99 further; beside the chunk budget and an FP8 KV cache (the checkpoint's scales) it meets it
    advice, script = review_deployment(pack, DATA, "d2")
    assert strategy_of(advice, "kv_cache_quantization") is not None
    raise_ = strategy_of(advice, "memory_budget")
    assert raise_ is not None and int(script_flag(script, "--max-num-seqs")) > 256
    assert script_flag(script, "--kv-cache-dtype") == "fp8"
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after <= 60


def test_d2_no_trade_is_offered_toward_an_objective_the_deployment_has_not(pack):
    # a throughput objective with an ITL SLO alone: a rejection may not ask for objective_first: ttft
    advice, _ = review_deployment(pack, DATA, "d2")
    assert all("objective_first: ttft" not in r.reason for r in advice.rejected)


def test_regression_review_a_change_harmful_alone_goes_with_the_changes_that_spared_it(pack):
    # set 17 d7 (70B AWQ on 2 A100-40GB): INT8 W8A8 leaves 5,456 KV tokens a GPU, under the 8,192
    # max-model-len (vLLM refuses to start); it was kept beside an FP8 KV cache the plan then left out
    advice, _ = review_deployment(pack, "review17", "d7")
    assert all(s.key != "quantization[int8]" for s in advice.strategies)
    assert any(r.id == "quantization" and "not in the plan" in r.reason for r in advice.rejected)


def test_regression_review_a_change_that_brings_nothing_for_a_missed_objective_is_left_out(pack):
    # set 21 d3 (DeepSeek-R1 on SGLang, ITL p99 190 ms against 80): attention DP turned off lengthened
    # the mean ITL 16% and served 14% fewer tokens, for nothing 5% better
    advice, _ = review_deployment(pack, "review21", "d3")
    assert strategy_of(advice, "parallelism") is None


def test_regression_review_a_chunk_budget_spending_room_the_plan_made_is_a_trade(pack):
    # set 28 d2: the TTFT p99, missed today and met by the plan's other changes, may be spent toward
    # the ITL p99 where that shrinks the worst miss: the budget stays, and the ITL p99 is met
    advice, _ = review_deployment(pack, "review28", "d2")
    assert strategy_of(advice, "chunked_prefill") is not None
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after <= 30
