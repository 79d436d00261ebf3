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
    # (with the arrivals' prompt tokens in the chunk budget, the FP8 KV cache stays in the plan, and
    # with it the INT8 weights it spares)
    advice, _ = review_deployment(pack, "review17", "d7")
    keys = {s.key for s in advice.strategies}
    assert "quantization[int8]" not in keys or "kv_cache_quantization[fp8]" in keys
    assert "quantization[int8]" in keys or any(r.id == "quantization" and "not in the plan" in r.reason
                                               for r in advice.rejected)


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


def test_d3_a_plan_that_grows_the_kv_pool_reads_the_gauge_on_the_new_pool(pack):
    # Qwen3-30B-A3B reasoning on one H100, KV 96% full, 40 in flight at the peak: FP8 weights, an
    # FP8 cache and a larger memory share grow the pool 8.7x, and the plan kept today's 96% gauge,
    # so 4.2 s of slot wait stayed in its TTFT p99; on the new pool the wait is gone (F1)
    advice, _ = review_deployment(pack, DATA, "d3")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.model_move is not None
    today, after = ttft.model_move
    assert after <= 0.5 * 3000          # the plan's TTFT p99 meets the 3 s objective with room
    # today's slots: the 22 the gauge says run (vLLM admits on the blocks in use), not the 12 that fit
    # at prompt plus full output: (40 - 22) x 7,000 x 24 ms / 22 = 137 s, not 392 s (F2)
    assert advice.derived["derived.engine_slots"] == 22
    assert 120_000 <= today <= 160_000


def test_the_gauge_is_read_in_proportion_where_a_set_changes_the_pool(pack):
    # a --set what-if of FP8 weights is restated with what today's gauge was read on, so the 96%
    # gauge reads on the larger pool the FP8 weights leave (0.96 x 103k / ~407k tokens)
    from pathlib import Path

    from kbopt.commands.common import what_if
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d3-*.json"))
    evaluator = available_evaluators()[0]
    today = advise(load_facts(facts), pack, evaluator)
    assert today.derived["derived.kv_usage_ratio"] == 0.96
    advice = what_if(today, load_facts(facts, ["model.weight_dtype=fp8"]), ["model.weight_dtype=fp8"], pack, evaluator)
    assert "telemetry.kv_gauge_pool_tokens" in advice.restated.carried
    assert 0.2 <= advice.derived["derived.kv_usage_ratio"] <= 0.3


def test_regression_review_replicas_are_judged_beside_the_budgets_each_plan_prints(pack):
    # set 28 d1 (Llama-3.1-8B AWQ on one L4, TTFT p99 3.5 s against 2 s, ITL p99 450 ms against 50):
    # the chunk budget sized for the ITL objective on one replica takes the TTFT p99 to 16.5 s;
    # beside the second replica it is about 2.2 s: the replicas shorten the miss 7x and stay
    advice, _ = review_deployment(pack, "review28", "d1")
    assert strategy_of(advice, "scale_out") is not None
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.after is not None and ttft.after < 3500


def test_regression_review_a_cap_left_out_as_idle_lowers_no_other(pack):
    # set 23 d2: batch_cap's ITL cap (71) was left out as idle, and memory_budget's 81, sized on the
    # pool the plan leaves, was printed as 71 with the note of 81
    advice, script = review_deployment(pack, "review23", "d2")
    budget = strategy_of(advice, "memory_budget")
    assert budget is not None and strategy_of(advice, "batch_cap") is None
    cap = budget.params["max_num_seqs"]
    assert script_flag(script, "--max-num-seqs") == str(cap)
    line = next(line for line in script.splitlines() if line.strip().startswith("--max-num-seqs"))
    assert f"-> {cap} sequences" in line
