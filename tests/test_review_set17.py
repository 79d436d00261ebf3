"""Expert review set 17: deployments a reviewer wrote (tests/data/review17, each with today's launch
command), and what the advice must now read for the defects it found."""
from __future__ import annotations

import json

from conftest import migrated_script, review_deployment, script_flag, script_flags, strategy_of

DATA = "review17"


def test_d6_a_move_to_vllm_keeps_the_one_gpu_replica_and_leaves_trtllms_budget(pack):
    # TRT-LLM's --max_num_tokens 8192 carried as vLLM's budget reserved 5 GiB of activations on an
    # L4 and asked for TP2 on a one-GPU replica: each engine's budget is its own
    advice, _ = review_deployment(pack, DATA, "d6")
    script = migrated_script(advice, DATA, "d6", "vllm")
    assert script_flag(script, "--tensor-parallel-size") in (None, "1")
    assert script_flag(script, "--max-num-batched-tokens") != "8192"
    assert "serving.max_num_batched_tokens = 8192 (trtllm's)" in script


def test_a_script_that_needs_more_gpus_than_the_replica_has_says_so_first(pack, run_cli, tmp_path):
    facts = tmp_path / "fit.json"
    facts.write_text(json.dumps({"kbopt": "facts/1", "hardware": {"gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_count": 1},
                                 "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "params_billion": 70.6,
                                           "weight_dtype": "bf16", "num_layers": 80, "num_kv_heads": 8, "head_dim": 128,
                                           "num_attention_heads": 64},
                                 "workload": {"engine": "vllm"}}))
    code, out, _ = run_cli("advise", "--facts", str(facts), "--emit", "vllm")
    assert code == 0 and script_flag(out, "--tensor-parallel-size") == "4"
    assert "this script needs 4 GPUs for one replica (tensor x pipeline parallelism) and the facts give 1" in out


def test_d7_a_move_to_tensorrt_llm_says_it_cannot_read_an_autoawq_checkpoint(pack):
    advice, _ = review_deployment(pack, DATA, "d7")
    script = migrated_script(advice, DATA, "d7", "trtllm")
    assert "AWQ INT4 format vllm reads, which TensorRT-LLM" in script and "hf_ptq.py --qformat int4_awq" in script
    # an FP8 checkpoint TensorRT-LLM reads (Qwen3's 128-blocks) gets no such note
    advice, _ = review_deployment(pack, DATA, "d1")
    script = migrated_script(advice, DATA, "d1", "trtllm")
    assert "FP8 weights today" not in script and "does not read" not in script


def test_d4_vllm_data_parallel_ranks_each_take_their_share_of_the_cap(pack):
    # each vLLM DP rank is its own scheduler with the same max_num_seqs (config/scheduler.py@0.12.0:57):
    # the replica's 2,353 is 295 a rank; SGLang's flag is the replica's total, which it divides
    advice, _ = review_deployment(pack, DATA, "d4")
    vllm = migrated_script(advice, DATA, "d4", "vllm")
    ranks, cap = int(script_flag(vllm, "--data-parallel-size") or 1), int(script_flag(vllm, "--max-num-seqs") or 0)
    assert ranks == 8 and 0 < cap * ranks <= 2400
    sglang = migrated_script(advice, DATA, "d4", "sglang")
    assert "SGLang divides it among them" in sglang


def test_an_escape_in_model_name_is_shown_as_its_code_point(run_cli, tmp_path):
    facts = tmp_path / "ansi.json"
    facts.write_text(json.dumps({"kbopt": "facts/1", "hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1},
                                 "model": {"name": "mistralai/Mistral \u001b[31mRED"}, "workload": {"engine": "vllm"}}))
    code, out, err = run_cli("advise", "--facts", str(facts), "--emit", "vllm")
    assert code == 2 and out == "" and "<U+001B>[31mRED" in err


def test_d7_an_itl_cap_never_serves_fewer_requests_than_arrive(pack):
    # 1.4 requests/s of 300 tokens: at a cap of 20 and about 79 ms between tokens the replica serves
    # 0.85/s and the queue grows without bound; the cap stays at what serves the arrivals
    advice, script = review_deployment(pack, DATA, "d7")
    cap = int(script_flag(script, "--max-num-seqs") or 0)
    itl = next((g.after for g in advice.plan.expected if g.metric == "itl_expected_ms"), None) if advice.plan else None
    assert itl is not None and cap * 1000 / (300 * itl) >= 1.4
    # (the chunk budget that met the ITL p99 at the cost of the TTFT, missed 3.9x against the ITL's
    # 1.75x, is no longer taken (set 25): the one server keeps today's cap of 64; a lower cap for one
    # replica says why it serves the arrivals)
    if cap < 64:
        assert "the queue would grow" in script and "sized for what this script applies; with " in script
        assert "the plan's 2 replicas it is" in script
        assert "at the peaks on this replica" in script


def test_a_unique_prefix_is_read_as_the_option_argparse_takes_it_for(run_cli):
    # SGLang's and vLLM's parsers are argparse's, which read --tp as --tp-size and --max-num-seq as
    # --max-num-seqs; TGI's clap and TensorRT-LLM's click do not
    from kbopt.engine.advice.command import read_command
    sglang = read_command("python3 -m sglang.launch_server --model-path m --tp 8 --max-running-req 64")
    assert ("--tp-size", "8") in sglang.args and ("--max-running-requests", "64") in sglang.args
    vllm = read_command("vllm serve m --max-num-seq 64")
    assert ("--max-num-seqs", "64") in vllm.args
    trtllm = read_command("trtllm-serve m --max_batch 64")    # click: no prefixes (carried as given, unread)
    assert all(name != "--max_batch_size" for name, _ in trtllm.args)


def test_d3_more_replicas_are_counted_from_todays(pack):
    # three replicas today were told "replicas=2" (a scale-down) and "2x today's GPUs"
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    data = Path(__file__).resolve().parent / "data" / DATA
    command = read_command(f"@{data / 'd3.launch'}")
    for today in (1, 3):
        facts = load_facts(next(data.glob("d3-*.json")), [*command.overrides(), f"serving.replicas={today}"])
        advice = advise(facts, pack, available_evaluators()[0])
        scale = next((s for s in advice.strategies if s.id == "scale_out"), None)
        assert scale is not None and scale.params["replicas"] > today
        if advice.plan is not None and advice.plan.replicas is not None:
            assert advice.plan.gpus_factor == advice.plan.replicas / today


def test_d2_a_move_to_sglang_keeps_the_missed_itl_objective_and_its_lever(pack):
    # the move dropped today's ITL measurements, and with them the missed 35 ms objective: the
    # SGLang script had no chunk budget and said nothing
    advice, _ = review_deployment(pack, DATA, "d2")
    script = migrated_script(advice, DATA, "d2", "sglang")
    assert "missed today: ITL p99 95 ms against a 35 ms objective" in script
    assert script_flag(script, "--chunked-prefill-size") is not None and "--enable-mixed-chunk" in script_flags(script)


def test_d3_fp8_kv_on_an_mi300x_is_not_told_to_use_cuda_only_kernels(pack):
    advice, _ = review_deployment(pack, DATA, "d3")
    kv = next((s for s in advice.strategies if s.id == "kv_cache_quantization"), None)
    assert kv is not None
    text = " ".join(c.text for c in kv.caveats)
    assert "(FlashInfer or FA3)" not in text and "CUDA only" in text


def test_d2_the_served_model_name_travels_with_a_move(pack):
    # clients ask for "gemma3": a server that does not answer to it returns 404 to every request
    advice, _ = review_deployment(pack, DATA, "d2")
    assert advice.facts.get("serving.served_model_name") == "gemma3"
    assert "--served-model-name gemma3" in script_flags(migrated_script(advice, DATA, "d2", "sglang"))


def test_a_move_leaves_the_kv_blocks_todays_engine_measured(pack):
    # vLLM's num_gpu_blocks is its memory rule's pool; SGLang sizes its own by its rule
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.migrate import advice_for
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    data = Path(__file__).resolve().parent / "data" / DATA
    facts = load_facts(next(data.glob("d2-*.json")), ["serving.num_gpu_blocks=4000", "serving.kv_block_size=16"])
    advice = advise(facts, pack, available_evaluators()[0])
    moved = advice_for(advice, "sglang", pack, available_evaluators()[0])
    assert "serving.num_gpu_blocks" not in moved.facts
    assert moved.restated is not None and "serving.num_gpu_blocks = 4000 (vllm's)" in moved.restated.left_behind


def test_d5_eagle3_is_advised_where_its_stalled_verify_step_is_shared_by_the_tokens_it_yields(pack):
    # gpt-oss-120b on two H100s at 4 running, an EAGLE-3 head named, ITL p99 14 ms against 7: it was
    # vetoed on a p99 of 9.5 -> 18.3 ms that set a plain decode step plus the stall beside a verify
    # step's mean. Per output token the stalled verify step is (10.27 + 8.81) / 2.53 = 7.5 ms.
    advice, script = review_deployment(pack, DATA, "d5")
    spec = strategy_of(advice, "speculative_decoding")
    assert spec is not None and spec.key == "speculative_decoding[eagle3]" and spec.status == "change"
    # Set 25 F2: the verify step routes 4 positions of each sequence through the experts, which
    # touch about 2.2x the weights a decode step of 4 tokens reads (M-SPEC-MOE-READ, with the expert
    # overlap of consecutive tokens Cohere measured): the mean gains about 30%, not 2x, and the
    # stalled verify step is no shorter per token than the plain stalled step.
    gains = {g.metric: g for g in spec.expected}
    assert gains["itl_expected_ms"].after < 0.75 * gains["itl_expected_ms"].before
    assert gains["itl_p99_expected_ms"].after < 1.05 * gains["itl_p99_expected_ms"].before
    # the chunk gaps a streaming benchmark times are stated: the verify step, not the time per token
    gaps = next(c for c in spec.caveats if c.rule == "C-SPEC-CHUNK-GAPS")
    assert "16.6 ms apart" in gaps.text
    assert '"decoding_type": "Eagle"' in script and "nvidia/gpt-oss-120b-Eagle3" in script


def test_d3_sglang_admits_its_queue_by_cached_prefix_where_rag_prompts_share_them(pack):
    # Qwen3-30B-A3B RAG on SGLang 0.5.1 with --schedule-policy fcfs (its default), 6 queued and 38% of
    # prompt tokens cached: LPM sorts the queue by cached prefix and prefills a shared one once
    # (managers/schedule_policy.py@0.5.1), FCFS does neither; the script turns fcfs into lpm.
    advice, script = review_deployment(pack, DATA, "d3")
    order = strategy_of(advice, "schedule_policy")
    assert order is not None and order.params == {"policy": "lpm"} and order.status == "change"
    assert script_flag(script, "--schedule-policy") == "lpm" and script_flags(script).count("--schedule-policy") == 1
