"""Expert review set 13: eight deployments a reviewer wrote (tests/data/review13, two per engine,
each with today's launch command), and what the advice must now read for the defects it found."""
from __future__ import annotations

from conftest import migrated_script, review_deployment, script_flags, strategy_of

DATA = "review13"


def test_d8_no_fp8_kv_for_mla_where_no_kernel_reads_it_nor_fp8_experts_before_ada(pack):
    # DeepSeek-Coder-V2-Lite on an A100 under TGI 3.3: TGI forces flashdecoding for deepseek_v2
    # (launcher/src/main.rs@v3.3.0:146-172) and its KV cache refuses FP8 there
    # (layers/attention/kv_cache.py@v3.3.0:68-76); vLLM's only MLA backend before Hopper takes no FP8
    # KV (triton_mla.py@0.12.0:31). TGI's FP8 experts run an FP8 Triton kernel (layers/moe/fp8.py).
    advice, script = review_deployment(pack, DATA, "d8")
    rejected = {(r.id, r.because[0]) for r in advice.rejected}
    assert ("kv_cache_quantization", "R-KV-FP8-MLA-NO-KERNEL") in rejected
    assert ("quantization", "R-TGI-FP8-MOE-BEFORE-ADA") in rejected
    assert "--kv-cache-dtype" not in script and "--quantize fp8" not in script_flags(script)
    assert "--kv-cache-dtype" not in migrated_script(advice, DATA, "d8", "vllm")


def test_d1_a_migration_keeps_todays_speculation_in_the_new_engines_words(pack):
    # Qwen3-8B with EAGLE-3 on vLLM moved to SGLang: the script dropped the speculation its own
    # numbers assumed, and named --speculative-config as not carried.
    advice, _ = review_deployment(pack, DATA, "d1")
    script = migrated_script(advice, DATA, "d1", "sglang")
    flags = script_flags(script)
    assert "--speculative-algorithm EAGLE3" in flags and "--speculative-draft-model-path AngelSlim/Qwen3-8B_eagle3" in flags
    assert "--speculative-config" not in next(line for line in script.splitlines() if "NOT carried" in line)


def test_d3_sglang_prices_a_mixed_step_of_a_moe_as_eager(pack):
    # GLM-4.5 on 8 H200s: SGLang runs a mixed step without a CUDA graph
    # (forward_batch_info.py@0.5.0rc2:128-133), 92 MoE layers of eager launches (about 90 ms), so
    # a 256-token mixed chunk budget made every prefill's steps slower than today's stall.
    advice, script = review_deployment(pack, DATA, "d3")
    assert advice.derived["derived.prefill_stall_ms"] > 90          # today's whole prefill, eager too
    assert strategy_of(advice, "chunked_prefill") is None
    assert [r.because[0] for r in advice.rejected if r.id == "chunked_prefill"] == ["R-SGLANG-MIXED-CHUNK-MEETS-NOTHING"]
    assert "--enable-mixed-chunk" not in script
    assert strategy_of(advice, "disaggregation") is not None     # the decode step alone meets 20 ms
    assert strategy_of(advice, "speculative_decoding").key == "speculative_decoding[mtp]"   # NEXTN, the first lever


def test_d6_the_itl_budget_rounds_to_32_tokens_not_256(pack):
    # Mistral-Nemo FP8 on an L4: a 395-token ITL budget was cut to 256, past the TTFT objective. It
    # rounds down to a multiple of 32 (352: the chunks' attention runs at the L4's 16-bit rate).
    advice, script = review_deployment(pack, DATA, "d6")
    budget = strategy_of(advice, "chunked_prefill").params["max_num_batched_tokens"]
    assert budget % 32 == 0 and budget > 256
    assert f"--max_num_tokens {budget}" in script


def test_d8_tgi_caches_an_mla_model_as_full_heads_and_the_advice_moves_it_to_the_latent(pack):
    # TGI builds DeepSeek-V2's cache with 16 heads of 192 for K and V (models/__init__.py@v3.3.0:660-680):
    # 27 x 2 x 16 x 192 x 2 bytes = 331,776 a token, 10.7x the latent kbopt had sized 480 sequences on.
    advice, _ = review_deployment(pack, DATA, "d8")
    assert advice.derived["derived.kv_bytes_per_token"] == 27 * 2 * 16 * 192 * 2
    assert 120_000 < advice.estimates["kv_pool_tokens"].value < 140_000                # the reviewer's ~130,000
    move = strategy_of(advice, "engine_migration")
    assert move is not None and move.params["to"] == "vllm" and "S-MIGRATE-TGI-MLA-LATENT" in move.because
