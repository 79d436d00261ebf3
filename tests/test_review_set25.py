"""Expert review set 25: six deployments a reviewer wrote (vLLM 0.13 with Qwen2.5-VL on an L40S,
SGLang 0.5.1 with DeepSeek-V3 and MTP on 8 H200s, TensorRT-LLM 1.0 offline on an L40S, vLLM 0.11 with
Mixtral for 24k-token RAG on 2 A100s, TGI 3.3 with Llama-70B AWQ on 2 L40S, vLLM 0.12 with JSON-schema
output on an H100; tests/data/review25, with today's launch commands and hand arithmetic in NOTES.md),
and what the advice must now read for the defects it found."""
from __future__ import annotations

from conftest import changed_deployment, review_deployment, strategy_of

DATA = "review25"


def test_d2_a_moe_verify_step_reads_the_experts_its_positions_touch(pack):
    # DeepSeek-V3 with MTP at 32 running: 4 positions a sequence route through the experts, which
    # touch 98% of them independently (64% for a decode step's 32 tokens), about 1.43x a decode step's
    # reads with the overlap of consecutive tokens (Cohere); the verify step was priced at 1x, and the
    # time per token read 10.6 ms where 16 is measured (the reviewer's arithmetic: about 12.8).
    advice, _ = review_deployment(pack, DATA, "d2")
    assert 1.35 <= advice.derived["derived.spec_weight_read_scale"] <= 1.55
    assert 12.5 <= advice.derived["derived.itl_expected_ms"] <= 15.0


def test_d2_no_chunk_size_is_offered_where_sglang_runs_a_prompts_chunks_back_to_back(pack):
    # The reviewer's --chunked-prefill-size 2048 rests on one chunk a stall. SGLang 0.5's scheduler
    # runs a prefill batch whenever one can be formed, a chunked request's next chunk included, before
    # any decode (managers/scheduler.py, get_next_batch_to_run: "Run prefill first if possible"), so
    # unmixed chunks of one prompt stall the decodes whole: a smaller size alone moves no ITL tail.
    advice, script = review_deployment(pack, DATA, "d2")
    assert "--chunked-prefill-size" not in script
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is None or chunked.status != "change"


def test_d4_a_chunk_budget_does_not_take_the_worse_missed_ttft_further_to_meet_the_itl(pack):
    # Mixtral RAG, 24k-token prompts: TTFT p99 6.5 s against 3 s (2.2x over), ITL p99 180 ms against
    # 100 (1.8x). A 704-token budget met the ITL p99 and took the TTFT p99 to about 7.8 s; the worse
    # miss comes first, so the budget stays the engine's and the trade is offered, with the fact that
    # takes it. FP8 weights and FP8 KV, which shorten both, stay.
    advice, script = review_deployment(pack, DATA, "d4")
    assert "--max-num-batched-tokens" not in script and "--quantization fp8" in script
    rejected = next(r for r in advice.rejected if r.id == "chunked_prefill")
    assert "works against the TTFT objective" in rejected.reason and "constraints.objective_first: itl" in rejected.reason
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.after is not None and ttft.after < ttft.value and not ttft.traded_for
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert not itl.traded_for


def test_d4_the_user_may_put_the_itl_objective_first(pack, tmp_path):
    advice = changed_deployment(pack, DATA, "d4", tmp_path, constraints__objective_first="itl")
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is not None and chunked.status == "change" and chunked.params["max_num_batched_tokens"] < 2048
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.traded_for == "ITL p99"


def test_d4_a_host_tier_for_rag_prefixes_whose_eviction_the_gauge_hides(pack):
    # 11 running 24k-token documents hold 61% of the pool while vLLM's gauge reads 60%: it counts the
    # cached blocks no running request uses as free (v1/core/block_pool.py@0.11.0:385-404), so the
    # trigger at 80% never saw the prefixes being evicted. vLLM 0.11 has the OffloadingConnector.
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.kv_live_share"] >= 0.5 and advice.derived["derived.kv_load_ratio"] < 0.8
    assert strategy_of(advice, "kv_offload") is not None
    assert '"kv_connector": "OffloadingConnector"' in script


def test_d2_a_measured_accept_length_is_not_asked_for_again(pack):
    # sglang:spec_accept_length 2.6 is in the facts: the gap to the measured 16 ms is the verify step's
    advice, _ = review_deployment(pack, DATA, "d2")
    warned = {w.rule for w in advice.warnings}
    assert "W-SPEC-ITL-ABOVE-MODEL" not in warned


def test_d1_a_vision_models_images_are_in_its_stalls_and_its_decode_reads_leave_the_encoder_out(pack, tmp_path):
    # Qwen2.5-VL-7B on an L40S: vLLM runs an image's encoder whole in the step whose chunk reaches it
    # (v1/core/encoder_cache_manager.py@0.13.0:342-347), so a 1,196-token image (4,784 patches of a
    # 0.67B ViT) adds about 32 ms at the 16-bit rate to that step, and a token budget does not bound
    # it; a decode step reads the language model alone (the reviewer's floor: 17.6 ms, kbopt's 19.2).
    advice, _ = review_deployment(pack, DATA, "d1")
    assert "W-VISION-IMAGES-UNKNOWN" in {w.rule for w in advice.warnings}
    # the TTFT p99 is missed by more (2.5x against 2.3x): a budget for the ITL p99 only where it comes first
    blind = changed_deployment(pack, DATA, "d1", tmp_path, constraints__objective_first="itl")
    budget_blind = strategy_of(blind, "chunked_prefill").params["max_num_batched_tokens"]
    advice = changed_deployment(pack, DATA, "d1", tmp_path, constraints__objective_first="itl",
                                model__vision_params_billion=0.67, workload__image_tokens_mean=1196)
    assert 25 <= advice.derived["derived.vision_encoder_ms"] <= 40
    assert 16.5 <= advice.derived["derived.decode_step_floor_ms"] <= 18.5
    assert "W-VISION-IMAGES-UNKNOWN" not in {w.rule for w in advice.warnings}
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is None or chunked.params["max_num_batched_tokens"] < budget_blind


def test_d4_a_plan_the_model_says_shortens_a_tail_does_not_project_it_above_today(pack):
    # The ITL p99 is measured at 180 ms and read at 261.5; the plan takes the model's to 246: the
    # symptom read "after the plan about 246.4 ms", worse than today, for a plan that shortens it.
    advice, _ = review_deployment(pack, DATA, "d4")
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.after is not None and itl.after <= itl.value
