"""Expert review set 37 (a 70B RAG on 4 H100s, a 1.5B model at 120 requests a second, Gemma 3
under SGLang on A100s, TensorRT-LLM 1.1 on L40S): what the advice must now read. The deployments
and the reviewer's notes are in tests/data/review37."""
from __future__ import annotations

from conftest import review_deployment, script_flag, strategy_of

DATA = "review37"


def test_d2_a_chunk_budget_carries_the_prompts_that_arrive(pack):
    # Qwen2.5-1.5B at 120 requests a second (201 uncached prompt tokens each), 255 running: a 320-token
    # budget left 65 tokens a step for prompts against about 250 a step arriving, and the script
    # lowered --max-num-seqs to 320 to fit it, under the 390 in flight at the peak (F1)
    advice, script = review_deployment(pack, DATA, "d2")
    arrivals = advice.derived["derived.chunk_budget_arrivals"]
    assert 200 <= arrivals <= 400
    budget = script_flag(script, "--max-num-batched-tokens")
    assert budget is None or int(budget) >= 255 + arrivals
    assert int(script_flag(script, "--max-num-seqs")) >= 390


def test_d3_an_int8_checkpoint_on_an_a100_under_sglang_is_served_with_its_flag(pack):
    # read from its config alone, an llm-compressor W8A8 checkpoint picks SGLang's compressed-tensors
    # INT8 scheme, which needs sm89 and refuses to load on an A100; --quantization w8a8_int8 runs
    # from sm75 (F2)
    advice, script = review_deployment(pack, DATA, "d3")
    assert strategy_of(advice, "quantization").key == "quantization[int8]"
    note = next(line for line in script.splitlines() if line.startswith("# quantization[int8]: needs"))
    assert "--quantization w8a8_int8 added to args" in note


def test_d4_a_cap_raise_stops_at_the_batch_that_meets_the_itl_objective(pack):
    # TensorRT-LLM 1.1 on an L40S, throughput objective with a 50 ms ITL SLO: the cap was raised
    # 128 -> 284 on the pool an FP8 cache leaves, a step of about 62 ms at 284, where 79 meet the
    # objective (F5); today's 128 stays
    _, script = review_deployment(pack, DATA, "d4")
    assert int(script_flag(script, "--max_batch_size")) <= 128


def test_d3_online_fp8_stands_in_for_the_int8_checkpoint_with_what_it_needs_on_an_a100(pack):
    # FP8 W8A16 through Marlin was rejected on a 0.1 weight difference, and the script's only
    # change, an FP8 KV cache, moved the ITL p99 1% (F9): now it applies online FP8 until the INT8
    # W8A8 checkpoint exists, saying that SGLang takes Marlin from vLLM's ops before sm89
    advice, script = review_deployment(pack, DATA, "d3")
    fp8 = next(s for s in advice.strategies if s.key == "quantization[fp8]")
    assert fp8.stands_in_for == "quantization[int8]"
    bound = script.split('if [ "$MODEL" = "$MODEL_DEFAULT" ]; then', 1)[1]
    assert "args+=(--quantization fp8)" in bound and "vLLM's custom ops" in bound


def test_d4_a_budget_kept_names_the_estimate_the_sized_one_worsens_most(pack):
    # "works against every estimate it moves: KV pool tokens 526,032 -> 524,864" named a 0.2% move,
    # the ITL p99 it lengthens 14% unnamed (F6)
    advice, _ = review_deployment(pack, DATA, "d4")
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    kept = next(n.text for n in chunked.caveats if " stays: " in n.text)
    assert "works against every estimate it moves: itl p99 expected" in kept


def test_d2_the_chunk_budget_shows_how_busy_it_leaves_the_prefill_lane(pack):
    # 255 decodes take most of a 634-token budget: 120 prompts a second of 201 uncached tokens keep
    # the lane 94% busy, which the capped M/D/1 wait alone did not show (F3)
    advice, _ = review_deployment(pack, DATA, "d2")
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    lane = next(g for g in chunked.expected if g.metric == "prefill_lane_load")
    assert lane.before < 0.2 and 0.9 < lane.after < 1
