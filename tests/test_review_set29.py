"""Expert review set 29: five deployments a reviewer wrote (vLLM 0.12 offline batch of Llama-3.3-70B
FP8 on 8 H100s as TP8, vLLM 0.11 with Qwen2.5-1.5B at 300 requests a second on one H100, SGLang
0.5.1 reasoning with Qwen3-32B on 2 H100s, SGLang 0.5.1 with DeepSeek-V3 FP8 on 8 H20s, TensorRT-LLM
1.1 with Llama-3.1-8B FP8 on an L40S; tests/data/review29, with today's launch commands and hand
arithmetic in NOTES.md), and what the advice must now read for the defects it found."""
from __future__ import annotations

import pytest
from conftest import review_deployment, script_flag, script_flags, strategy_of

DATA = "review29"


def test_d4_an_mla_prefill_counts_its_attention(pack):
    # DeepSeek-V3's prefill attends over decompressed heads of 192 (keys) and 128 (values): 2 x 61 x
    # 128 x 160 x the prompt's square, about 20 TFLOP at the 16-bit rate for a mean prompt, which
    # counted zero (no head_dim for MLA); the reviewer's mean prefill on 8 H20s is 159 ms
    advice, _ = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.prefill_head_dim"] == 160
    assert advice.derived["derived.prefill_attention_weighted_flops"] > 3e13
    assert advice.derived["derived.prefill_replica_ms"] == pytest.approx(159, rel=0.1)


def test_d4_no_fp8_kv_cache_on_sglangs_hopper_mla_path(pack):
    # fa3's absorbed MLA casts the layer's whole KV buffer to 16 bits each step
    # (layers/attention/flashattention_backend.py@0.5.1:826-830, 1087-1089): the step slows
    advice, script = review_deployment(pack, DATA, "d4")
    assert strategy_of(advice, "kv_cache_quantization") is None
    assert any(r.id == "kv_cache_quantization" and "R-KV-FP8-MLA-SGLANG-FA3" in r.because for r in advice.rejected)
    assert script_flag(script, "--kv-cache-dtype") is None


def test_d4_speculation_beside_a_pinned_memory_fraction_keeps_sglangs_draft_reserve(pack):
    # today's --mem-fraction-static 0.92 leaves 7.65 GiB of an H20 outside the static pool; SGLang's
    # own default keeps 2 GiB more for a draft (server_args.py@0.5.1:387-389): 0.92 - 2 / 95.6
    advice, script = review_deployment(pack, DATA, "d4")
    assert script_flag(script, "--speculative-algorithm") == "EAGLE"
    assert float(script_flag(script, "--mem-fraction-static")) == pytest.approx(0.92 - 2 / advice.derived["derived.gpu_memory_gib"], abs=0.001)
    # and the model's pool gives the reserve up with it
    pool = next(g for g in strategy_of(advice, "speculative_decoding").expected if g.metric == "kv_pool_gib_per_gpu")
    assert pool.before - pool.after == pytest.approx(2, abs=0.05)


def test_d2_short_prompts_share_a_step_and_the_api_server_is_the_lever(pack):
    # 110-token prompts at 300 a second on an H100: each took a whole 10 ms step of the prefill lane
    # (a lane 95% busy, a 100 ms wait); they share one, and the engine's TTFT is about 25 ms by hand,
    # so the 125 ms measured are spent before the engine: more API servers
    advice, script = review_deployment(pack, DATA, "d2")
    assert advice.derived["derived.ttft_expected_ms"] == pytest.approx(25, rel=0.3)
    assert strategy_of(advice, "api_servers") is not None
    assert script_flag(script, "--api-server-count") is not None


def test_d5_tensorrt_llms_graph_ceiling_is_read_from_the_options_and_moves_with_the_cap(pack):
    # cuda_graph_config.max_batch_size: 16 in today's options beside 20 running (40 at the peak): the
    # larger steps launch eagerly; the script's running cap takes the graphs with it
    advice, script = review_deployment(pack, DATA, "d5")
    assert advice.facts["serving.cuda_graph_max_batch"] == 16
    assert advice.derived["derived.graph_batch_excess"] > 0
    cap = int(script_flag(script, "--max_batch_size"))
    graphs = int(script_flags(script).split("cuda_graph_config:", 1)[1].split("max_batch_size: ", 1)[1].split()[0])
    assert graphs >= cap      # every batch the cap lets run replays a graph


def test_d3_replicas_are_sized_on_the_deployment_the_plans_other_changes_leave(pack):
    # today's ITL cap is 2 requests (a 20 ms objective on a 29 ms step), so today's load asked for 23
    # replicas; beside the plan's FP8 weights and KV cache 72 meet it, and the plan asked for 23x the
    # GPUs its own figures did not need
    advice, _ = review_deployment(pack, DATA, "d3")
    assert advice.plan is not None and (advice.plan.replicas or 1) <= 2


def test_d3_a_latency_cap_is_the_itl_batch_the_plan_leaves(pack):
    # continuous batching's cap for the 20 ms objective was 2 on today's 16-bit step, raised to the
    # 44 that run today (80 at the peak, where the queue waited minutes); beside FP8 weights and KV
    # cache 72 meet the objective
    _, script = review_deployment(pack, DATA, "d3")
    assert int(script_flag(script, "--max-running-requests")) >= 70


def test_d5_a_zero_graph_ceiling_in_the_options_is_tensorrt_llms_default_not_an_error(run_cli, tmp_path):
    # CudaGraphConfig's max_batch_size 0 leaves the sizes to the engine: a command that starts is not
    # refused for it, and no step is read as eager
    from pathlib import Path
    data = Path(__file__).resolve().parent / "data" / DATA
    options = tmp_path / "d5-extra.yaml"
    options.write_text((data / "d5-extra.yaml").read_text().replace("max_batch_size: 16", "max_batch_size: 0"))
    command = (data / "d5.launch").read_text().replace("d5-extra.yaml", str(options))
    code, out, err = run_cli("advise", "--facts", str(next(data.glob("d5-*.json"))), "--launch", command, "--format", "json")
    assert code == 0, err
    import json
    assert "derived.graph_batch_excess" not in json.loads(out)["derived"]
