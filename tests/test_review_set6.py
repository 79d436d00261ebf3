"""Expert review set 6: twelve deployments kbopt's authors did not write (tests/data/review6, three
per engine, each with today's launch command), and what the advice must read for them, with the
reviewer's hand figures."""
from __future__ import annotations

from conftest import review_deployment, strategy_of


def _deployment(pack, name: str):
    return review_deployment(pack, "review6", name)


def test_d2_int8_w8a8_is_judged_by_the_missed_p99_not_a_mean_that_meets_its_slo(pack):
    # Qwen2.5-72B AWQ on 2 A100s: ITL p99 420 ms and TTFT p99 5.2 s miss 80 ms and 3 s; the mean
    # ITL (33 ms) meets 80. INT8 W8A8 doubles the weight bytes (mean ITL 33 -> 39.9 ms, still under
    # 80) and the linear layers' prefill math (A100 INT8 624 TOP/s, 2x bf16; attention stays 16-bit):
    # TTFT 422 -> 256 ms. It is advice, not rejected as harmful, and not rejected as "wider than the
    # INT4 weights" on a prefill-heavy GPU.
    advice, _ = _deployment(pack, "d2")
    quant = next(s for s in advice.strategies if s.id == "quantization")
    assert quant.params["scheme"] == "int8" and quant.params["mode"] == "w8a8"
    ttft = next(g for g in quant.expected if g.metric == "ttft_expected_ms")
    assert ttft.after < 0.65 * ttft.before


def test_d2_no_disaggregation_that_halves_the_prefill_gpus_of_a_missed_ttft(pack):
    # Split 1+1, one A100 takes every 72B prefill: at the 2.2/s peak it is 125% busy (the reviewer:
    # TTFT p99 5.2 s -> over 7 s). M-DISAGG-TTFT gives the queue no bound, and S-DISAGGREGATION holds.
    advice, _ = _deployment(pack, "d2")
    assert advice.derived["derived.disagg_prefill_load"] > 1
    assert "disaggregation" not in {s.id for s in advice.strategies}


def test_d12_a_prefill_bound_a10g_on_awq_gets_int8_w8a8(pack):
    # Mistral-Nemo AWQ on an A10G, prefill 71% of the math: W4A16 runs bf16 math; INT8 W8A8 runs
    # at twice that (the reviewer: about 2x throughput on the same GPU).
    advice, _ = _deployment(pack, "d12")
    quant = next(s for s in advice.strategies if s.id == "quantization")
    assert quant.params["scheme"] == "int8" and quant.params["mode"] == "w8a8"


def test_d1_mxfp4_weights_get_no_fusion_pass_and_no_wider_fp8(pack):
    # gpt-oss-20b (MXFP4) on an H100: vLLM's fusion passes match FP8 activation quant ops only
    # (compilation/fusion.py@0.10.2:505-545) and MXFP4 runs W4A16 before Blackwell; FP8 weights
    # would double the bytes of 4-bit ones. The chunk budget is the change.
    advice, script = _deployment(pack, "d1")
    chosen = {s.id for s in advice.strategies if s.status == "change"}
    assert chosen == {"chunked_prefill"}
    assert any(r.id == "op_fusion" and "R-FUSION-WEIGHT-ONLY" in r.because for r in advice.rejected)
    assert any(r.id == "quantization" and "R-QUANT-WIDER-THAN-WEIGHTS" in r.because for r in advice.rejected)
    assert "--compilation-config" not in script.split("args=(")[1]


def test_d3_fp8_kv_does_not_emit_calculate_kv_scales(pack):
    # vLLM computes --calculate-kv-scales once, on the first forward pass (the profiler's dummy
    # batch: attention/layer.py@0.12.0:385-394), so the script asks for a checkpoint's scales instead.
    advice, script = _deployment(pack, "d3")
    assert "kv_cache_quantization" in {s.id for s in advice.strategies}
    body = script.split("args=(")[1]
    assert "--kv-cache-dtype fp8" in body and "\n  --calculate-kv-scales" not in body
    assert "calibrated" in script


def test_d10_tgi_fp8_on_an_l4_runs_w8a8_where_the_first_token_misses_and_the_budget_follows(pack):
    # TGI 3.3 runs FP8 through Marlin (W8A16) on 8.x GPUs, L4 included (layers/fp8.py@v3.3.0:44-72):
    # prefill stays at the bf16 rate, and the ITL p99 budget was the reviewer's 257 today, 352 after
    # the plan. With the TTFT objective missed 7x, the advice sets USE_CUTLASS_W8A8=1 (set 21 d6), so
    # prefill runs at the FP8 rate and the budget that meets the ITL objective is larger (multiples of 32).
    advice, script = _deployment(pack, "d10")
    quant = next(s for s in advice.strategies if s.id == "quantization")
    assert quant.params["mode"] == "w8a8" and quant.params["cutlass_w8a8"] is True and "USE_CUTLASS_W8A8=1" in script
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    budget = chunked.params["max_num_batched_tokens"]
    assert budget > 352 and budget % 32 == 0
    assert f"--max-batch-prefill-tokens {budget}" in script and "H100 and newer" not in script


def test_d10_the_tgi_kv_pool_reads_the_measured_usage(pack):
    # 5.1 requests of about 1,000 tokens fill 90% of the cache: about 5,700 tokens of pool. TGI's
    # warm-up holds one prefill's activations, not vLLM's profiled 0.65 GiB per 1k tokens.
    advice, _ = _deployment(pack, "d10")
    assert 0.7 <= advice.derived["derived.kv_usage_over_model"] <= 1.4


def test_d9_a_budget_sized_for_an_fp8_checkpoint_waits_for_it(pack):
    # Mixtral-8x22B bf16 on 4 H200s (TRT-LLM 1.1): FP8 needs a checkpoint the script cannot make,
    # so MODEL stays bf16; at bf16 math the ITL p99 budget is the reviewer's 512-768, not the 1,792
    # that FP8 weights would allow. The script runs 768 and names 1,792 for the FP8 checkpoint.
    advice, script = _deployment(pack, "d9")
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    today = dict(chunked.before_plan)["max_num_batched_tokens"]
    assert 512 <= today <= 768 and today < chunked.params["max_num_batched_tokens"]
    assert f"--max_num_tokens {today} " in script and f"it is {chunked.params['max_num_batched_tokens']}" in script


def test_d5_a_chunk_budget_that_meets_the_itl_p99_is_weighed_against_the_first_token_it_costs(pack):
    # Qwen3-32B FP8 on one H100 under SGLang: the ITL p99 (95 ms against 30) is prefill stalls; the
    # largest budget that meets 30 ms is about 200 tokens (the reviewer's figure, with the chunk's
    # attention at the FP8 rate; over a BF16 cache it runs at the 16-bit one: 128), with mixed
    # chunks (set 10). Each of its chunk steps also runs the decode step, so the TTFT p99, missed
    # today, grows by about 1.7x: a trade between missed objectives that relieves the ITL one by
    # more, printed with its cost. EAGLE-3 would turn SGLang's mixing off, and is shown rejected.
    advice, script = _deployment(pack, "d5")
    chunked = strategy_of(advice, "chunked_prefill")
    assert 128 <= chunked.params["max_num_batched_tokens"] < 256
    assert f"--chunked-prefill-size {chunked.params['max_num_batched_tokens']}" in script and "--enable-mixed-chunk" in script
    moved = {g.metric: g for g in chunked.expected}
    assert moved["itl_p99_expected_ms"].after <= 30 and moved["ttft_p99_expected_ms"].after > moved["ttft_p99_expected_ms"].before
    assert any(r.key == "speculative_decoding[eagle3]" and r.because[0] == "R-SGLANG-SPECULATION-NO-MIXED-CHUNK"
               for r in advice.rejected)


def test_d3_prefix_caching_keeps_todays_calibration(pack):
    # Qwen3-Coder-30B on an H100, prefix caching off where it would serve 70% of the prompts: turning
    # it on shortens the prefills in the decode steps; the decode step itself does not slow (it read
    # +37% when the what-if re-calibrated bandwidth on today's ITL with the prefills taken out).
    advice, _ = _deployment(pack, "d3")
    cache = next(s for s in advice.strategies if s.id == "prefix_caching")
    moved = {g.metric: g for g in cache.expected}
    assert moved["itl_expected_ms"].after < moved["itl_expected_ms"].before
    assert "decode_step_expected_ms" not in moved or moved["decode_step_expected_ms"].change <= 0.01


def test_d7_the_budget_aims_under_the_objective_by_how_far_the_model_reads_the_p99_low(pack):
    # Qwen3-14B FP8 RAG on an H100 (TRT-LLM 1.0): the model reads 251 ms where 310 ms is measured;
    # a budget that meets 80 ms in the model's terms projected a measured 96.6 ms. Sized to 81% of
    # the objective it was the reviewer's 1,536; priced at the long prompts' late context (set 10)
    # it is 1,280 to 1,536, and the plan's projection meets 80 ms; sized after the plan, whose FP8 KV
    # cache runs the chunks' attention at the FP8 rate on an H100, it is 1,728.
    advice, script = _deployment(pack, "d7")
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    budget = chunked.params["max_num_batched_tokens"]
    assert 1280 <= budget <= 1792 and f"--max_num_tokens {budget}" in script
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after <= 80


def test_a_missed_itl_no_chunk_budget_meets_says_what_it_takes():
    # The plan leaves the modelled p99 where it is and no budget of 64 tokens or more meets the
    # objective: the first screen says it takes prefills apart from the decodes, or more GPUs.
    from kbopt.engine.advice.symptoms import symptoms
    from kbopt.engine.advice.whatif import Plan
    facts = {"constraints.itl_slo_ms": 10, "workload.itl_p99_ms": 40}
    derived = {"derived.itl_p99_expected_ms": 38.0, "derived.chunk_budget_itl": 0}
    itl = next(s for s in symptoms(facts, derived, Plan(("speculative_decoding[ngram]",), ())) if s.kind == "itl")
    assert itl.unprojected.startswith("the plan does not move it: no prefill chunk budget of 64 tokens")
    assert "disaggregation" in itl.unprojected


def test_a_what_if_that_worsens_every_estimate_it_moves_is_harmful_and_one_that_trades_is_not():
    from kbopt.engine.advice.objectives import worsens_everything
    assert worsens_everything((("itl_expected_ms", 20, 24), ("decode_tokens_per_s", 500, 420)), 0.05) == (
        "itl_expected_ms", "decode_tokens_per_s")
    assert worsens_everything((("itl_expected_ms", 20, 24), ("ttft_expected_ms", 400, 200)), 0.05) == ()
    assert worsens_everything((("itl_expected_ms", 20, 20.2),), 0.05) == ()      # under the negligible share
