"""Expert review set 11: eight deployments a reviewer wrote (tests/data/review11, two per engine,
each with today's launch command), and what the advice must now read for the defects the review
found."""
from __future__ import annotations

import math

from conftest import review_deployment, strategy_of

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document


def test_d7_tgi_on_a_t4_with_head_dim_96_gets_no_chunk_budget_its_router_refuses(pack):
    # Phi-3.5-mini on a T4: paged attention (launcher/src/main.rs@v3.3.0:146-188) does not chunk
    # (models/model.py@v3.3.0:83-90), and without chunking the router refuses a
    # --max-batch-prefill-tokens below --max-input-tokens: the 160-token budget did not start.
    advice, script = review_deployment(pack, "review11", "d7")
    assert advice.derived["derived.prefill_chunks_mixed"] is False
    assert strategy_of(advice, "chunked_prefill") is None
    assert [r.because[0] for r in advice.rejected if r.id == "chunked_prefill"] == ["R-TGI-CANNOT-CHUNK"]
    assert "--max-batch-prefill-tokens 160" not in script and "--max-batch-prefill-tokens 4096" in script   # today's


def test_d8_tgi_under_speculation_stalls_decodes_with_whole_prefills(pack):
    # Qwen2.5-Coder-32B with --speculate 3 on two A100s: TGI turns chunking off under speculation,
    # so the p99 step carries a whole prefill; with 1.8 tokens a step, a request's prefill comes
    # every OSL / 1.8 steps. The model read 18.5 ms where 1,100 ms is measured; the stalled verify
    # step (the gap a client that times streamed chunks sees) is now within 1.6x of it, and the p99
    # time per output token is that step over the tokens it yields (M-ITL-P99-EXPECTED).
    advice, _ = review_deployment(pack, "review11", "d8")
    d = advice.derived
    assert d["derived.prefill_chunks_mixed"] is False
    stalled = d["derived.spec_step_ms"] + d["derived.prefill_stall_ms"]
    assert 1100 / 1.6 <= stalled <= 1100 * 1.6
    assert abs(d["derived.itl_p99_expected_ms"] - stalled / d["derived.spec_tokens_per_step"]) < 1e-6
    assert d["derived.prefill_step_share"] > advice.facts["workload.requests_running_mean"] / advice.facts["workload.output_len_mean"]


def test_d4_sglang_trades_eagle3_for_a_mixed_chunk_budget_as_one_change(pack):
    # Llama-3.3-70B FP8 on 4 H100s with EAGLE-3, ITL p99 260 ms against 50: SGLang turns
    # --enable-mixed-chunk off under EAGLE (server_args.py@0.5.0rc2:590-603), so a chunk budget alone
    # only adds unmixed passes to each prefill, and speculation off alone only lengthens the step.
    # The two are one change (S-SPECULATION-OFF-FOR-CHUNKS), judged by one what-if of both.
    advice, script = review_deployment(pack, "review11", "d4")
    off, chunks = strategy_of(advice, "speculative_decoding"), strategy_of(advice, "chunked_prefill")
    assert off.params["method"] == "none" and off.status == "change" and off.together == ("chunked_prefill",)
    assert chunks.status == "change" and chunks.together == ("speculative_decoding[none]",)
    assert "R-SGLANG-CHUNKS-UNDER-SPECULATION" not in {r.because[0] for r in advice.rejected}
    assert {g.metric: g.after for g in off.expected} == {g.metric: g.after for g in chunks.expected}
    itl_p99 = next(g for g in advice.plan.expected if g.metric == "itl_p99_expected_ms")
    assert itl_p99.after < 50 < itl_p99.before             # the model's p99 under the objective
    flags = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "--speculative-" not in flags and "--enable-mixed-chunk" in flags
    assert f"--chunked-prefill-size {chunks.params['max_num_batched_tokens']}" in script
    assert chunks.params["max_num_batched_tokens"] < 4096


def test_d8_tgi_trades_speculate_for_a_chunk_budget_as_one_change(pack):
    # Qwen2.5-Coder-32B with --speculate 3 on two A100s, ITL p99 1,100 ms against 100: TGI chunks
    # only without --speculate (models/model.py@v3.3.0:73-90), so the budget comes with it removed.
    advice, script = review_deployment(pack, "review11", "d8")
    off, chunks = strategy_of(advice, "speculative_decoding"), strategy_of(advice, "chunked_prefill")
    assert off.params["method"] == "none" and chunks.together == ("speculative_decoding[none]",)
    assert "R-TGI-CANNOT-CHUNK" not in {r.because[0] for r in advice.rejected}
    itl_p99 = next(g for g in advice.plan.expected if g.metric == "itl_p99_expected_ms")
    assert itl_p99.after < 100 < itl_p99.before
    flags = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "--speculate" not in flags and f"--max-batch-prefill-tokens {chunks.params['max_num_batched_tokens']}" in script


def test_vllm_speculative_tokens_take_their_share_of_the_step_budget(pack):
    # vLLM V1 schedules each running request's 1 + k tokens from the same budget
    # (v1/core/sched/scheduler.py@0.10.2:208-218): a prompt chunk gets budget - B(1 + k).
    document = {"hardware": {"gpu_name": "NVIDIA A10G", "gpu_count": 1},
                "model": {"params_billion": 7.25, "num_layers": 32, "num_kv_heads": 8, "head_dim": 128,
                          "num_attention_heads": 32, "hidden_size": 4096, "weight_dtype": "bf16"},
                "workload": {"engine": "vllm", "prompt_len_mean": 1125, "output_len_mean": 250, "requests_running_mean": 7.3},
                "serving": {"max_num_batched_tokens": 64}}
    evaluator = available_evaluators()[0]
    plain = advise(facts_from_document(document, "plain"), pack, evaluator).derived
    speculating = advise(facts_from_document({**document, "serving": {**document["serving"], "speculative_method": "ngram",
                                                                      "num_speculative_tokens": 3}}, "ngram"), pack, evaluator).derived
    assert plain["derived.prefill_chunk_steps"] == math.ceil(1125 / (64 - 7.3))
    drafts = speculating.get("derived.spec_draft_tokens", 3)      # the method's, else --speculative-config's 3
    assert speculating["derived.prefill_chunk_steps"] == math.ceil(1125 / (64 - 7.3 * (1 + drafts)))


def test_d1_vllm_counts_a_sliding_window_layer_at_its_window_when_it_counts_requests(pack):
    # Gemma-3-27B on an MI300X, 52 of 62 layers on a 1,024-token window: vLLM's hybrid KV cache
    # manager keeps only the window there, so the pool holds about twice the requests of full
    # length that every layer at full length would (the reviewer's ~98 with group padding; 54 before).
    advice, _ = review_deployment(pack, "review11", "d1")
    d = advice.derived
    full_length = advice.facts["workload.prompt_len_mean"] + advice.facts["workload.output_len_mean"]
    assert d["derived.max_batch_kv"] >= 1.8 * d["derived.kv_pool_tokens"] // full_length
    assert 90 <= d["derived.max_batch_kv"] <= 125
