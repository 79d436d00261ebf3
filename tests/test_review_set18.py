"""Expert review set 18: six deployments a reviewer wrote (tests/data/review18, each with today's
launch command and NOTES.md's hand arithmetic), and what the advice must now read for the defects
it found."""
from __future__ import annotations

import pytest
from conftest import review_deployment, script_flag, script_flags, strategy_of

DATA = "review18"


def test_d3_a_cap_beside_an_fp8_kv_cache_is_sized_on_the_pool_the_script_leaves(pack):
    # Qwen3-235B FP8 on 4 B200s, TensorRT-LLM's default admission reserving 3,000 + 2,048 tokens a
    # request: 2,218,544 / 5,048 = 439 on today's BF16 cache, 878 on the FP8 cache the script sets.
    # The NVFP4 checkpoint the plan also asks for is not in the script until MODEL names one, so the
    # script's cap is the one for today's checkpoint with the FP8 cache, and the note gives the other.
    advice, script = review_deployment(pack, DATA, "d3")
    assert advice.derived["derived.max_batch_kv"] == 439
    cap = strategy_of(advice, "memory_budget")
    assert dict(cap.before_plan)["max_num_seqs"] == 878 and cap.params["max_num_seqs"] > 878
    assert script_flag(script, "--max_batch_size") == "878" and "kv_cache_config" in script and "dtype: fp8" in script
    assert f"with MODEL set to the quantization[nvfp4] checkpoint it is {cap.params['max_num_seqs']}" in script


def test_d2_a_chunk_budget_waits_in_the_script_for_the_int8_checkpoint_and_the_replicas(pack):
    # Llama-3.3-70B bf16 on 4 A100s, 10k-token RAG prompts, TTFT 4.2 s mean (3 s objective) and ITL
    # p99 1.9 s (100 ms): a small budget on today's BF16 replica neither meets the ITL objective
    # nor carries the prompts that arrive; beside INT8 W8A8 weights (twice the prefill math) and a
    # second replica (half the arrivals) 480 tokens do. The script cannot apply either yet, so it
    # takes the least budget that drains today's arrivals and names the one that follows them.
    advice, script = review_deployment(pack, DATA, "d2")
    chunked = strategy_of(advice, "chunked_prefill")
    assert strategy_of(advice, "scale_out") is not None
    budget = chunked.params["max_num_batched_tokens"]
    assert 256 <= budget <= 1024
    assert int(script_flag(script, "--chunked-prefill-size")) >= advice.derived["derived.chunk_budget_drain"]
    assert (f"with MODEL set to the quantization[int8] checkpoint and the plan's 2 replicas it is {budget}" in script)
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    assert itl.model_move is not None and itl.model_move[1] <= 100


def test_d6_int8_w8a8_for_a_missed_ttft_and_a_chunk_budget_per_output_token_under_eagle3(pack):
    # Llama-3.1-8B bf16 on an A100, TTFT p99 450 ms against 300 and prefills 21% of the math: FP8
    # runs weight-only through Marlin there (the same bytes as INT8, prefill at the 16-bit rate), so
    # INT8 W8A8 is the 8-bit scheme (twice the prefill math rate). The model reads today's p99 high, so
    # the plan's p99 is its own after-value, about 430 ms, not the measurement scaled down (285 ms): the
    # reviewer's p99 prompt alone takes 0.39 s of BF16 prefill, about 0.2 s in INT8, before its chunk
    # steps and the queue's tail.
    # Beside the EAGLE-3 head the script turns on (2.53 tokens a verify step), the chunk budget is
    # sized per output token: about 600 tokens, where the plain step left 224 (the reviewer's ~600).
    # Until the INT8 checkpoint exists the script runs online FP8 (W8A16 through Marlin), whose
    # shorter decode step leaves the budget a little more room.
    advice, script = review_deployment(pack, DATA, "d6")
    quantization = strategy_of(advice, "quantization")
    assert quantization.key == "quantization[int8]" and quantization.params["mode"] == "w8a8"
    assert "S-QUANT-INT8-W8A8-PREFILL" in quantization.recommended_by
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    before = next(g for g in advice.plan.expected if g.metric == "ttft_p99_expected_ms")
    assert before.before > ttft.value and ttft.after == pytest.approx(before.after) and ttft.after < ttft.value
    budget = int(script_flag(script, "--max-num-batched-tokens"))
    assert 500 <= budget <= 800 and '"method": "eagle3"' in script
    assert any(s.key == "quantization[fp8]" and s.stands_in_for == "quantization[int8]" for s in advice.strategies)


def test_d5_the_move_to_sglang_keeps_trust_remote_code_and_reorders_no_queue_for_a_negligible_prefill(pack):
    # DeepSeek-R1 on 8 MI300Xs under vLLM with --trust-remote-code, reasoning outputs: prefills take
    # 0.25% of the math, so LPM's better hit ratio saves nothing anyone waits on; the flag, which
    # every engine has, is carried rather than named as lost.
    from conftest import migrated_script
    advice, _ = review_deployment(pack, DATA, "d5")
    assert advice.facts["serving.trust_remote_code"] is True
    assert strategy_of(advice, "schedule_policy") is None
    moved = migrated_script(advice, DATA, "d5", "sglang")
    assert "--trust-remote-code" in script_flags(moved) and "which has no setting kbopt maps them to: none" in moved
    assert "--schedule-policy" not in moved


def test_d1_more_gpus_rank_after_the_flag_and_the_budget_is_sized_for_one_server(pack):
    # gpt-oss-120b agents on an H200 with --no-enable-prefix-caching and 80% of prompt tokens
    # shareable: the prefix cache ranks above a second replica (a flag before new GPUs), and the
    # chunk budget the script prints is sized for the one server it starts, not the plan's two.
    advice, script = review_deployment(pack, DATA, "d1")
    actions = [s.key for s in advice.strategies if s.status == "change"]
    assert actions.index("prefix_caching") < actions.index("scale_out") == len(actions) - 1
    chunked = strategy_of(advice, "chunked_prefill")
    printed = int(script_flag(script, "--max-num-batched-tokens"))
    assert printed == dict(chunked.before_plan)["max_num_batched_tokens"] != chunked.params["max_num_batched_tokens"]
    assert "sized for what this script applies; with the plan's 2 replicas it is" in script


def test_d4_a_move_is_written_for_the_version_emit_names(run_cli):
    # TGI 3.3.0 on 4 L40S moving to vLLM 0.11.0: --set serving.engine_version set TGI's version (and,
    # a --set, re-estimated the measured ITLs); --emit vllm@0.11.0 names the target's, and keeps them.
    from pathlib import Path
    data = Path(__file__).resolve().parent / "data" / DATA
    facts = str(next(data.glob("d4-*.json")))
    code, out, _ = run_cli("advise", "--facts", facts, "--launch", f"@{data / 'd4.launch'}", "--emit", "vllm@0.11.0")
    assert code == 0 and out.splitlines()[1] == "# kbopt advise --emit vllm: vLLM (V1 engine) 0.11.0"
    assert "kept as measured:" in out and "workload.itl_p99_ms" in out and "serving.engine_version = 3.3.0 (tgi's)" in out
    code, out, _ = run_cli("advise", "--facts", facts, "--emit", "vllm")
    assert code == 0 and "vLLM (V1 engine) 0.13.0" in out.splitlines()[1]      # the latest covered
    # the deployed engine at another version: an upgrade, not a move
    code, out, _ = run_cli("advise", "--facts", str(next(data.glob("d6-*.json"))), "--emit", "vllm@0.12.0")
    assert code == 0 and "vLLM (V1 engine) 0.12.0" in out.splitlines()[1] and "moved to" not in out
    import pytest
    with pytest.raises(SystemExit) as refused:      # argparse's own refusal, exit 2
        run_cli("advise", "--facts", facts, "--emit", "vllm@latest")
    assert refused.value.code == 2
