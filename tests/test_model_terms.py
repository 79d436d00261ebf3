"""The serving model's terms beyond the pure roofline, each against hand arithmetic on a realistic
deployment (docs/model.md, "Terms"). The hand figures are written out here from the formulas'
sources, not read back from the rules: a rule that drifts from its formula fails."""
from __future__ import annotations

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document

GIB = 2**30


def _derived(pack, document):
    return advise(facts_from_document({"kbopt": "facts/1", **document}, "terms"), pack, available_evaluators()[0]).derived


def _close(found, hand, within=0.05):
    assert found == pytest.approx(hand, rel=within), (found, hand)


LLAMA3_8B = {"params_billion": 8.03, "num_layers": 32, "num_kv_heads": 8, "head_dim": 128, "num_attention_heads": 32,
             "hidden_size": 4096, "vocab_size": 128256}
# a prompt token's matrix products: the embedding is a lookup and the lm_head scores the last token only
LLAMA3_8B_PREFILL_PARAMS = 8.03e9 - 2 * 128256 * 4096
LLAMA3_70B = {"params_billion": 70.6, "num_layers": 80, "num_kv_heads": 8, "head_dim": 128, "num_attention_heads": 64,
              "hidden_size": 8192, "vocab_size": 128256}


def test_awq_int4_weights_keep_16_bit_embeddings_and_group_scales(pack):
    # Qwen2.5-72B AWQ: 72.7B x (4 bits + a 16-bit scale per 128) + embedding and lm_head (152,064 x 8,192, twice) in 16-bit.
    model = {"params_billion": 72.7, "weight_dtype": "int4", "vocab_size": 152064, "hidden_size": 8192}
    embeddings = 2 * 152064 * 8192
    hand = (72.7e9 * (4 + 16 / 128) / 8 + embeddings * (2 - 0.5)) / GIB
    _close(_derived(pack, {"model": model})["derived.weight_gib"], hand)
    # almost 5 GB more than parameters x half a byte: 3.7 GB of 16-bit embeddings, 1.1 GB of scales
    assert hand * GIB - 72.7e9 * 0.5 > 4.5e9


def test_kv_bytes_per_token_per_gpu_gqa_mla_and_tp(pack):
    # Llama-3-70B at TP4: 2 (K and V) x 80 layers x 8/4 heads x 128 x 2 bytes = 81,920 B on each GPU
    d = _derived(pack, {"model": {**LLAMA3_70B, "weight_dtype": "bf16", "kv_cache_dtype": "bf16"},
                        "serving": {"tensor_parallel_size": 4}})
    assert d["derived.kv_bytes_per_token_per_gpu"] == 2 * 80 * 2 * 128 * 2
    # DeepSeek-V3's MLA latent: 61 x (512 + 64) x 2 = 70,272 B, the same on every GPU of TP8
    mla = {"params_billion": 671, "active_params_billion": 37, "num_layers": 61, "num_attention_heads": 128, "head_dim": 128,
           "num_kv_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "weight_dtype": "fp8", "kv_cache_dtype": "bf16"}
    d = _derived(pack, {"model": mla, "serving": {"tensor_parallel_size": 8}})
    assert d["derived.kv_bytes_per_token_per_gpu"] == 61 * (512 + 64) * 2


def test_sliding_window_layers_keep_only_their_window(pack):
    # Gemma-3-27B: 62 layers, 52 of them windowed at 1,024 tokens; at 16k prompt + 512 out the mean
    # context is 16,256: full layers keep it all, windowed ones 1,024 -> (10 x 16,256 + 52 x 1,024) / 62.
    model = {"params_billion": 27.4, "num_layers": 62, "num_kv_heads": 16, "head_dim": 128, "weight_dtype": "bf16",
             "sliding_window": 1024, "sliding_window_layers": 52}
    d = _derived(pack, {"model": model, "workload": {"prompt_len_mean": 16000, "output_len_mean": 512}})
    hand = (10 * 16256 + 52 * 1024) / 62
    _close(d["derived.kv_context_tokens_mean"], hand, 1e-9)
    assert d["derived.context_tokens_mean"] / d["derived.kv_context_tokens_mean"] > 4.5    # 4.7x less read


def test_moe_step_reads_the_experts_its_tokens_touch(pack):
    # Mixtral 8x7B (2 of 8 experts), 8 running requests, BF16, TP2: routed parameters (46.7 - 12.9) / (1 - 2/8);
    # each expert is missed by all 8 tokens with probability (6/8)^8.
    routed = (46.7 - 12.9) / (1 - 2 / 8)
    read = 46.7 - routed * (6 / 8) ** 8
    model = {"params_billion": 46.7, "active_params_billion": 12.9, "num_experts": 8, "experts_per_token": 2,
             "weight_dtype": "bf16", "num_layers": 32, "num_kv_heads": 8, "head_dim": 128}
    d = _derived(pack, {"model": model, "workload": {"requests_running_mean": 8}, "serving": {"tensor_parallel_size": 2}})
    _close(d["derived.active_weight_bytes_per_gpu"], read * 1e9 * 2 / 2)
    assert read / 12.9 > 3          # active parameters alone undercount the bytes of this step threefold
    one = _derived(pack, {"model": model, "workload": {"requests_running_mean": 1}, "serving": {"tensor_parallel_size": 2}})
    _close(one["derived.active_weight_bytes_per_gpu"], 12.9e9 * 2 / 2)


def test_a_mig_slice_gets_its_share_of_bandwidth_and_sms(pack):
    # A100-80GB 1g.10gb: one of eight memory slices (2,039 / 8 GB/s) and one compute slice, 14 of the 108 SMs the
    # 312 TFLOP/s count (MIG mode leaves 10 SMs unused, so not 312 / 7)
    d = _derived(pack, {"hardware": {"gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_count": 1, "mig_enabled": True,
                                     "mig_memory_gib": 10, "mig_compute_slices": 1}, "model": {"weight_dtype": "bf16"}})
    _close(d["derived.gpu_bandwidth_gbps"], 2039 / 8)
    _close(d["derived.gpu_tflops"], 312 * 14 / 108, 1e-3)
    assert d["derived.gpu_memory_gib"] == 10


def test_the_step_pays_a_fixed_cost_that_grows_with_tensor_parallelism(pack):
    # BLIS's trained terms and two NVLink all-reduces a layer: 70B on 4 H100s
    d = _derived(pack, {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 4, "interconnect": "nvlink"},
                        "model": {**LLAMA3_70B, "weight_dtype": "bf16"}, "serving": {"tensor_parallel_size": 4}})
    _close(d["derived.step_overhead_ms"], 0.126 + 0.032 * 80 + 2 * 80 * 0.012, 1e-9)
    pcie = _derived(pack, {"hardware": {"gpu_name": "NVIDIA L40S", "gpu_count": 4, "interconnect": "pcie"},
                           "model": {**LLAMA3_70B, "weight_dtype": "bf16"}, "serving": {"tensor_parallel_size": 4}})
    assert pcie["derived.step_overhead_ms"] > d["derived.step_overhead_ms"] + 4


def test_fp8_weights_halve_the_bytes_but_not_the_step(pack):
    # Llama-3-8B on an H100 at batch 1: the byte term halves, the fixed cost does not, so the step
    # gains well under 2x (TensorRT-LLM measured 1.4-1.5x at batch 1-8).
    base = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
            "workload": {"requests_running_mean": 1, "prompt_len_mean": 1024, "output_len_mean": 128}}
    bf16 = _derived(pack, {**base, "model": {**LLAMA3_8B, "weight_dtype": "bf16"}})
    fp8 = _derived(pack, {**base, "model": {**LLAMA3_8B, "weight_dtype": "fp8"}})
    assert bf16["derived.decode_bytes_ms"] / fp8["derived.decode_bytes_ms"] > 1.8
    assert 1.3 < bf16["derived.decode_step_expected_ms"] / fp8["derived.decode_step_expected_ms"] < 1.75


def test_prefill_shares_the_steps_of_continuous_batching(pack):
    # 32 running requests, 2,048 in / 256 out: each step carries 32/256 of a prefill's math
    document = {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
                "model": {**LLAMA3_8B, "weight_dtype": "bf16"},
                "workload": {"requests_running_mean": 32, "prompt_len_mean": 2048, "output_len_mean": 256}}
    d = _derived(pack, document)
    flops = 2 * LLAMA3_8B_PREFILL_PARAMS * 2048 + 2 * 32 * 32 * 128 * 2048**2
    prefill = flops / (989e12 * 0.55) * 1000          # compute_efficiency 0.55 of the H100's 989 TFLOP/s
    _close(d["derived.prefill_compute_ms"], prefill, 1e-6)
    _close(d["derived.itl_expected_ms"], d["derived.decode_step_expected_ms"] + 32 * prefill / 256, 1e-9)
    _close(d["derived.decode_tokens_per_s"], 32 * 1000 / d["derived.itl_expected_ms"], 1e-9)
    static = _derived(pack, {**document, "workload": {**document["workload"], "batching": "static"}})
    assert static["derived.itl_expected_ms"] == static["derived.decode_step_expected_ms"]


def test_the_running_batch_is_capped_by_what_the_kv_pool_holds(pack):
    # Qwen3-4B on an L4 under vLLM: 82,512 tokens of KV; at 1,024 in and 200 out the mean context is
    # 1,124 tokens, so 73 run and the other 439 clients wait for a slot (and their first token).
    document = {"hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1},
                "model": {"params_billion": 4.02, "weight_dtype": "bf16", "num_layers": 36, "num_kv_heads": 8, "head_dim": 128},
                "workload": {"engine": "vllm", "concurrency_mean": 512, "prompt_len_mean": 1024, "output_len_mean": 200}}
    d = _derived(pack, document)
    assert d["derived.kv_pool_tokens"] == 82_512
    assert d["derived.running_batch"] == 82_512 // 1124
    few = _derived(pack, {**document, "workload": {**document["workload"], "concurrency_mean": 8}})
    assert few["derived.running_batch"] == 8
    assert d["derived.ttft_expected_ms"] > 10 * few["derived.ttft_expected_ms"]


MAVERICK = {"params_billion": 400, "active_params_billion": 17, "num_layers": 48, "num_kv_heads": 8, "head_dim": 128,
            "num_attention_heads": 40, "hidden_size": 5120, "num_experts": 128, "experts_per_token": 1, "weight_dtype": "fp8"}


def test_a_moe_step_reads_every_expert_but_does_the_math_of_its_active_ones(pack):
    # Llama-4-Maverick FP8 on 8 H200s at 512 running: the step reads almost all 400B parameters, but each
    # token multiplies only its 17B active ones: 2 x 17e9 x 512 / 8 GPUs FLOPs each at the FP8 peak (1,979
    # TFLOP/s), plus attention (4 x layers x heads x head dim x cached tokens per sequence / TP) at the 16-bit
    # peak (989), since attention runs on 16-bit activations.
    d = _derived(pack, {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8, "interconnect": "nvlink"},
                        "model": MAVERICK, "serving": {"tensor_parallel_size": 8},
                        "workload": {"requests_running_mean": 512, "prompt_len_mean": 1000, "output_len_mean": 1000}})
    context = d["derived.kv_context_tokens_mean"]
    hand = (2 * 17e9 * 512 / 8 / 1979e12 + 4 * 48 * 40 * 128 * 512 * context / 8 / 989e12) * 1000
    _close(d["derived.decode_compute_ms"], hand, 1e-6)
    assert d["derived.active_weight_bytes_per_gpu"] > 0.95 * 400e9 / 8        # yet nearly every expert is read


def test_fp8_math_reaches_a_smaller_share_of_its_peak_than_16_bit(pack):
    # A 2,048-token prefill of Llama-3-8B on an H100: BF16 at 0.55 of 989 TFLOP/s, FP8 at 0.50 of 1,979
    # (best-case matmuls reach 80.3% of the BF16 peak and 73.4% of the FP8 one: 0.55 x 73.4 / 80.3).
    # Attention over the BF16 KV cache runs at the 16-bit rate under FP8 weights: half the FP8 one.
    workload = {"prompt_len_mean": 2048, "requests_running_mean": 1, "output_len_mean": 128}
    linear, attention = 2 * LLAMA3_8B_PREFILL_PARAMS * 2048, 2 * 32 * 32 * 128 * 2048**2
    flops = linear + attention
    hardware = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
    bf16 = _derived(pack, {"hardware": hardware, "model": {**LLAMA3_8B, "weight_dtype": "bf16"}, "workload": workload})
    fp8 = _derived(pack, {"hardware": hardware, "model": {**LLAMA3_8B, "weight_dtype": "fp8"}, "workload": workload})
    _close(bf16["derived.prefill_compute_ms"], flops / (989e12 * 0.55) * 1000, 1e-6)
    _close(fp8["derived.prefill_compute_ms"], (linear / 1979e12 + attention / 989e12) / 0.50 * 1000, 1e-6)
    assert 1.7 < bf16["derived.prefill_compute_ms"] / fp8["derived.prefill_compute_ms"] < 1.8   # not the datasheet's 2x


def test_attention_runs_at_the_fp8_rate_only_over_an_fp8_cache_on_hopper(pack):
    # FlashAttention 3 quantizes the queries over an FP8 KV cache (vLLM's quantized-KV docs): the
    # prefill's attention then runs at the FP8 rate on an H100; on an L4 the cache is read back to 16 bits.
    workload = {"prompt_len_mean": 2048, "requests_running_mean": 1, "output_len_mean": 128, "engine": "vllm"}
    linear, attention = 2 * LLAMA3_8B_PREFILL_PARAMS * 2048, 2 * 32 * 32 * 128 * 2048**2
    model = {**LLAMA3_8B, "weight_dtype": "fp8", "kv_cache_dtype": "fp8"}
    h100 = _derived(pack, {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "model": model, "workload": workload})
    l4 = _derived(pack, {"hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1}, "model": model, "workload": workload})
    _close(h100["derived.prefill_compute_ms"], (linear + attention) / (1979e12 * 0.50) * 1000, 1e-6)
    _close(l4["derived.prefill_compute_ms"], (linear / 242e12 + attention / 121e12) / 0.50 * 1000, 1e-6)


def test_sglang_runs_a_moe_prefill_without_cuda_graphs(pack):
    # DeepSeek-R1 on 8 H200s: SGLang runs prefill batches eagerly, about 0.98 ms of launches per layer
    # (a one-token DeepSeek-V3 prefill: 82.6 ms eager, 23.1 ms graphed, 61 layers), which vLLM's
    # compiled prefill does not pay in this model.
    model = {"params_billion": 671, "active_params_billion": 37, "num_layers": 61, "num_attention_heads": 128,
             "head_dim": 128, "hidden_size": 7168, "num_experts": 256, "experts_per_token": 8, "kv_lora_rank": 512,
             "qk_rope_head_dim": 64, "weight_dtype": "fp8"}
    document = {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8, "interconnect": "nvlink"}, "model": model,
                "serving": {"tensor_parallel_size": 8},
                "workload": {"concurrency_mean": 8, "prompt_len_mean": 1024, "output_len_mean": 1024}}
    sglang = _derived(pack, {**document, "workload": {**document["workload"], "engine": "sglang"}})
    vllm = _derived(pack, {**document, "workload": {**document["workload"], "engine": "vllm"}})
    _close(sglang["derived.prefill_ms"] - vllm["derived.prefill_ms"], 61 * 0.98, 1e-6)


DEEPSEEK_V3 = {"params_billion": 671, "active_params_billion": 37, "num_layers": 61, "num_attention_heads": 128,
               "hidden_size": 7168, "num_experts": 256, "experts_per_token": 8, "kv_lora_rank": 512,
               "qk_rope_head_dim": 64, "weight_dtype": "fp8", "kv_cache_dtype": "bf16", "attention_params_billion": 11.41}


def test_data_parallel_attention_keeps_one_latent_per_request_and_whole_attention_weights(pack):
    # DeepSeek-R1 on 8 H200s, TensorRT-LLM, max_batch_size 128 per rank, 1,024 clients: under TP8 every GPU
    # keeps each token's 61 x 576 x 2-byte latent and 128 requests run; with attention data-parallel each
    # GPU keeps its own requests' latents (1/8), holds the 11.41B attention parameters whole (7/8 of them
    # more than its TP share) and runs 128 requests of its own, 1,024 in all.
    document = {"hardware": {"gpu_name": "NVIDIA H200", "gpu_count": 8, "interconnect": "nvlink"}, "model": DEEPSEEK_V3,
                "serving": {"tensor_parallel_size": 8, "expert_parallel": True, "max_num_seqs": 128},
                "workload": {"engine": "trtllm", "concurrency_mean": 1024, "prompt_len_mean": 1024, "output_len_mean": 2048}}
    tp = _derived(pack, document)
    dp = _derived(pack, {**document, "serving": {**document["serving"], "dp_attention": True}})
    assert tp["derived.kv_bytes_per_token_per_gpu"] == 61 * 576 * 2
    assert dp["derived.kv_bytes_per_token_per_gpu"] == 61 * 576 * 2 / 8
    _close(dp["derived.weights_gib_per_gpu"] - tp["derived.weights_gib_per_gpu"], 11.41e9 * 1 * 7 / 8 / GIB, 1e-9)
    assert tp["derived.running_batch"] == 128 and dp["derived.running_batch"] == 1024


def test_attention_is_its_own_kernel_with_its_own_roof(pack):
    # Llama-3-70B FP8 on 2 H100s at 256 running, 4k context: the GEMMs are compute-bound and attention is
    # bound by reading the KV cache; each kernel waits on its own roof, so the step is the sum of the two,
    # not the larger of the summed bytes and the summed FLOPs.
    d = _derived(pack, {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "interconnect": "nvlink"},
                        "model": {**LLAMA3_70B, "weight_dtype": "fp8", "kv_cache_dtype": "fp8"},
                        "serving": {"tensor_parallel_size": 2},
                        "workload": {"requests_running_mean": 256, "prompt_len_mean": 4000, "output_len_mean": 200}})
    bw, ce = d["derived.bandwidth_efficiency"], d["derived.compute_efficiency"]
    weights, kv = d["derived.decode_bytes_ms"] - d["derived.decode_kv_bytes_ms"], d["derived.decode_kv_bytes_ms"]
    gemm, attention = d["derived.decode_compute_ms"] - d["derived.decode_attention_ms"], d["derived.decode_attention_ms"]
    kernels = max(weights / bw, gemm / ce) + max(kv / bw, attention / ce)
    # each request: 4 us of bookkeeping and its token's share of two all-reduces a layer over NVLink,
    # 2 x 80 layers x 2 (2 - 1) / 2 x 8,192 x 2 bytes at 300 GB/s
    per_request = 0.004 + 2 * 80 * 1 * 8192 * 2 / 300e9 * 1000
    _close(d["derived.decode_step_expected_ms"], kernels + d["derived.step_overhead_ms"] + per_request * 256, 1e-9)
    assert kernels > max((weights + kv) / bw, (gemm + attention) / ce) * 1.05
    # the KV read: 256 sequences x 4,100 tokens x 80 layers x 8/2 heads x 128 x 2 (K, V) x 1 byte at 3,350 GB/s
    _close(kv, 256 * 4100 * 80 * 4 * 128 * 2 / 3350e9 * 1000, 1e-6)


def test_the_itl_tail_is_a_step_stalled_by_a_full_prefill_chunk(pack):
    # Llama-3-8B on an L4 under vLLM (2,048-token budget below 70 GiB), 16 running, 2,048 in / 256 out:
    # a step carries 16 decodes and a 2,032-token chunk; 16 / 256 prompts start a step, each needing
    # 2,048 / 2,032 chunks, so 6.3% of the steps are stalled and p99 is the step plus a full chunk's math.
    document = {"hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1}, "model": {**LLAMA3_8B, "weight_dtype": "bf16"},
                "workload": {"engine": "vllm", "prompt_len_mean": 2048, "output_len_mean": 256, "requests_running_mean": 16}}
    d = _derived(pack, document)
    # a chunk of C tokens at the end of a P-token prompt: 2 FLOPs per parameter and token, and causal
    # attention over the context before it, 2·L·heads·head_dim·C·(2P - C) (set 10)
    def chunk_math(c: float, p: float = 2048) -> float:
        attention = 2 * LLAMA3_8B["num_layers"] * LLAMA3_8B["num_attention_heads"] * LLAMA3_8B["head_dim"]
        return c * (2 * LLAMA3_8B_PREFILL_PARAMS + attention * (2 * p - c))
    per_flop = d["derived.prefill_compute_ms"] / chunk_math(2048)       # the whole prompt is its own last chunk
    _close(d["derived.prefill_stall_ms"], chunk_math(2032) * per_flop, 1e-9)
    _close(d["derived.prefill_step_share"], 16 * 2048 / (256 * 2032), 1e-9)
    _close(d["derived.itl_p99_expected_ms"], d["derived.decode_step_expected_ms"] + d["derived.prefill_stall_ms"], 1e-9)
    assert d["derived.itl_p99_expected_ms"] > 4 * d["derived.itl_expected_ms"]        # the tail, not the mean
    # a 256-token budget cuts the stall to 240 tokens' math
    small = _derived(pack, {**document, "serving": {"max_num_batched_tokens": 256}})
    _close(small["derived.prefill_stall_ms"], chunk_math(240) * per_flop, 1e-9)
    assert small["derived.prefill_stall_ms"] > small["derived.prefill_compute_ms"] * 240 / 2048   # a late chunk costs more than the mean
    # TensorRT-LLM without chunked context stalls a step by a whole prefill
    whole = _derived(pack, {**document, "workload": {**document["workload"], "engine": "trtllm"}})
    assert whole["derived.prefill_stall_ms"] == whole["derived.prefill_compute_ms"]


def test_a_verify_step_puts_each_kernel_on_its_own_roof(pack):
    # EAGLE-3 on Llama-3.1-8B, an H100 at 128 running: the verify step's weight GEMMs over 4 positions
    # are compute-bound (2 x 8e9 x 512 tokens) while attention still waits on the KV read; each kernel
    # on its own roof, as in a decode step, not the larger of the summed bytes and the summed math
    # (set 16 d4's hand check: that read the step about 30% short at a large batch).
    d = _derived(pack, {"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
                        "model": {**LLAMA3_8B, "weight_dtype": "bf16", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                        "workload": {"task": "generation", "engine": "vllm", "prompt_len_mean": 800, "output_len_mean": 400,
                                     "requests_running_mean": 128, "itl_mean_ms": 22},
                        "serving": {"speculative_method": "eagle3"}})
    k, bw, ce = d["derived.spec_draft_tokens"], d["derived.bandwidth_efficiency"], d["derived.compute_efficiency"]
    weights, kv = d["derived.decode_bytes_ms"] - d["derived.decode_kv_bytes_ms"], d["derived.decode_kv_bytes_ms"]
    gemm, attention = d["derived.decode_compute_ms"] - d["derived.decode_attention_ms"], d["derived.decode_attention_ms"]
    kernels = max(weights / bw, (k + 1) * gemm / ce) + max(kv / bw, (k + 1) * attention / ce)
    drafts = k * d["derived.decode_step_expected_ms"] / LLAMA3_8B["num_layers"]      # an EAGLE head: about a layer each
    _close(d["derived.spec_step_ms"], kernels + d["derived.step_overhead_ms"] + 0.004 * 128 + drafts, 1e-9)
    assert kernels > max((weights + kv) / bw, (k + 1) * (gemm + attention) / ce) * 1.2
