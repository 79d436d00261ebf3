"""Expert review set 15: deployments a reviewer wrote (tests/data/review15, each with today's launch
command), and what the advice must now read for the defects it found."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import migrated_script, review_deployment, script_flags, strategy_of

DATA = "review15"


def _checkpoint_block(script: str) -> str:
    """The lines the script runs only while MODEL is today's checkpoint."""
    if 'if [ "$MODEL" = "$MODEL_DEFAULT" ]' not in script:
        return ""
    return script.split('if [ "$MODEL" = "$MODEL_DEFAULT" ]', 1)[1].split("\nfi\n", 1)[0]


def _argv_with(script: str, model: str | None) -> str:
    """What the script would exec, with MODEL set (None: today's checkpoint): bash runs it with
    `exec` replaced by echo."""
    env = {"PATH": "/usr/bin:/bin", **({"MODEL": model} if model else {})}
    done = subprocess.run(["bash", "-c", script.replace("exec ", "echo ", 1)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_d1_a_new_checkpoint_leaves_todays_quantization_flag_behind(pack):
    # Qwen2.5-32B AWQ on vLLM 0.10.2, INT8 W8A8 advised: the script kept --quantization awq_marlin
    # for the new checkpoint, which vLLM refuses (config/__init__.py@0.10.2:1202-1207).
    advice, script = review_deployment(pack, DATA, "d1")
    quantization = strategy_of(advice, "quantization")
    assert quantization is not None and quantization.status == "change" and quantization.key != "quantization[int4]"
    assert "--quantization awq_marlin" in _checkpoint_block(script)
    assert "--quantization awq_marlin" in _argv_with(script, None)
    assert "--quantization" not in _argv_with(script, "org/Qwen2.5-32B-Instruct-W8A8")
    for engine, flag in (("sglang", "--quantization awq_marlin"), ("tgi", "--quantize awq")):
        migrated = migrated_script(advice, DATA, "d1", engine)
        assert flag in _checkpoint_block(migrated), engine
        assert flag.split()[0] not in _argv_with(migrated, "org/Qwen2.5-32B-Instruct-W8A8"), engine


def test_sglang_runs_an_awq_checkpoint_with_marlin_on_nvidia_and_without_on_rocm(pack):
    # --quantization awq forces the dequantize-then-matmul kernels (awq.py@0.5.0rc2:248-254); ROCm has no Marlin.
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    advice, _ = review_deployment(pack, DATA, "d1")
    assert "awq_marlin" in script_flags(migrated_script(advice, DATA, "d1", "sglang"))
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d1-*.json"))
    for gpu, expected in (("NVIDIA A100-SXM4-80GB", "awq_marlin"), ("AMD Instinct MI300X", "awq")):
        advice = advise(load_facts(facts, [f'hardware.gpu_name="{gpu}"', 'serving.quantization="int4_awq"',
                                           'constraints.allowed_precisions=["int4"]']), pack, available_evaluators()[0])
        assert dict(build_launch(advice, "sglang").argv()).get("--quantization") == expected, gpu


def test_d7_tgi_neither_chunks_nor_caches_prefixes_for_gemma3(pack):
    # Gemma 3 under TGI 3.3: built with support_chunking=False (models/__init__.py@v3.3.0:1196), so the
    # router refuses a prefill budget below --max-input-tokens (backends/v3/src/main.rs@v3.3.0:185-186);
    # and the launcher turns the prefix cache off for a vision model (launcher/src/main.rs@v3.3.0:137-139).
    advice, script = review_deployment(pack, DATA, "d7")
    assert advice.derived["derived.prefill_chunks_mixed"] is False
    rejected = {r.id: r.because for r in advice.rejected}
    assert "chunked_prefill" in rejected and "prefix_caching" in rejected
    argv = script_flags(script).split()
    budget = int(argv[argv.index("--max-batch-prefill-tokens") + 1])
    assert budget >= int(argv[argv.index("--max-input-tokens") + 1])
    assert "PREFIX_CACHING" not in script_flags(script)
    assert all(s.id != "prefix_caching" for s in advice.strategies)
    migration = strategy_of(advice, "engine_migration")
    assert migration is not None and migration.params == {"to": "vllm", "lever": "prefix_caching"}
    # the prefill is sized without the 60% of prompt tokens TGI never serves from a cache
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d7-*.json"))
    off = advise(load_facts(facts, ["serving.prefix_caching=false"]), pack, available_evaluators()[0])
    assert advice.derived["derived.prefill_compute_ms"] == off.derived["derived.prefill_compute_ms"]
    on = advise(load_facts(facts, ["workload.engine=\"vllm\""]), pack, available_evaluators()[0])
    assert on.derived["derived.prefill_compute_ms"] < 0.6 * advice.derived["derived.prefill_compute_ms"]


def test_d7_the_move_to_vllm_carries_vllms_own_advice(pack, run_cli):
    # TGI's advice has no chunk budget (it cannot chunk a Gemma 3); the vLLM it moves to can, and its
    # script must size one on the 80 ms ITL objective instead of carrying TGI's 8,192-token prefill batch
    advice, _ = review_deployment(pack, DATA, "d7")
    script = migrated_script(advice, DATA, "d7", "vllm")
    argv = script_flags(script).split()
    assert int(argv[argv.index("--max-num-batched-tokens") + 1]) < 8192
    assert "S-CHUNKED-PREFILL" in script and "R-TGI-CANNOT-CHUNK" not in script
    assert ("the advice behind this script: what-if of workload.engine; left with today's engine (its own settings): "
            "serving.engine_version = 3.3.0 (tgi's)") in script
    assert "kept as measured: " in script and "workload.itl_p99_ms" in script.split("kept as measured: ", 1)[1]
    assert "missed today: ITL p99 310 ms against a 80 ms objective" in script
    assert "on today's deployment moved to vLLM" in script
    assert "--gpu-memory-utilization" not in script          # TGI's fraction is in TGI's own denominator
    # what the user runs says the same
    data = Path(__file__).resolve().parent / "data" / DATA
    code, out, _ = run_cli("advise", "--facts", str(next(data.glob("d7-*.json"))), "--launch", f"@{data / 'd7.launch'}",
                           "--emit", "vllm")
    assert code == 0 and out == script


def test_d4_no_quantization_that_leaves_the_kv_pool_under_one_sequence(pack):
    # Qwen2.5-32B AWQ on one 40 GB A100 under SGLang, prefill-heavy: INT8 W8A8 doubles the weights'
    # bytes and left 13,104 tokens of pool for a 32,768-token context (set 15: action 1 with 944 tokens).
    advice, script = review_deployment(pack, DATA, "d4")
    assert strategy_of(advice, "quantization") is None
    reasons = {r.params.get("scheme"): r.reason for r in advice.rejected if r.id == "quantization"}
    assert "under one sequence of the 32,768 tokens" in reasons["int8"]
    assert "leaves no KV cache" in reasons["fp16"]
    assert "--quantization awq_marlin" in script_flags(script) and "MODEL_DEFAULT" in script


def test_d3_tensor_parallelism_that_cuts_a_quantization_block_gets_expert_parallelism(pack):
    # Qwen3-235B-A22B-FP8 (block FP8, 128-wide) at TP8: each expert's 1,536 width is 192 per GPU,
    # which vLLM and SGLang refuse to load (sglang layers/quantization/fp8.py@0.5.0rc2:538-553);
    # the script re-emitted TP8 as it was. With experts whole on each GPU nothing is cut.
    advice, script = review_deployment(pack, DATA, "d3")
    assert "--tensor-parallel-size 8" in script_flags(script) and "--enable-expert-parallel" in script_flags(script)
    migrated = script_flags(migrated_script(advice, DATA, "d3", "sglang"))
    assert "--tp-size 8" in migrated and "--expert-parallel-size 8" in migrated


def test_expert_parallelism_only_where_the_final_tensor_parallelism_cuts_a_block(pack):
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d3-*.json"))
    # 1,536 / 4 = 384, three blocks; / 8 = 192. On 4 GPUs TP4 stays; on 8 the late first token
    # widens TP4 to TP8 (S-PARALLELISM-TENSOR-TTFT), which needs the experts whole as much as today's TP8.
    for gpus, tp, final, expert in ((4, 4, 4, False), (8, 4, 8, True), (8, 8, 8, True)):
        advice = advise(load_facts(facts, [f"serving.tensor_parallel_size={tp}", f"hardware.gpu_count={gpus}"]), pack,
                        available_evaluators()[0])
        argv = dict(build_launch(advice, "vllm").argv())
        assert argv["--tensor-parallel-size"] == str(final) and ("--enable-expert-parallel" in argv) is expert, (gpus, tp)


def test_d6_a_first_token_out_of_the_gpus_reach_says_so_and_widens_the_split(pack):
    # Llama-3.3-70B at TP4 on 8 NVLink H20s, 8k-token prompts, prefills under half the math: the
    # TTFT objective got no lever (scale-out needs a queue) and no word that a prefill alone misses it.
    advice, script = review_deployment(pack, DATA, "d6")
    assert "W-TTFT-FLOOR-OVER-SLO" in {w.rule for w in advice.warnings}
    widening = strategy_of(advice, "parallelism")
    assert widening is not None and widening.params["tensor_widened"] == 8
    ttft = {g.metric: g for g in widening.expected}["ttft_expected_ms"]
    assert ttft.after < 0.6 * ttft.before                  # the prefill's matmuls split over twice the GPUs
    assert "--tp_size 8" in script_flags(script)


def test_d5_the_service_delivers_no_more_than_the_arrivals_ask_for(pack):
    # 1.85 requests/s of 300 output tokens on a GH200: 555 tokens/s whatever the step; a faster step
    # shortens latency. Set 15 credited the plan with more tokens a second than arrive.
    advice, _ = review_deployment(pack, DATA, "d5")
    offered = 1.85 * 300
    assert advice.derived["derived.service_tokens_per_s"] <= offered + 1e-6
    for strategy in advice.strategies:
        for gain in strategy.expected:
            if gain.metric == "service_tokens_per_s":
                assert gain.after <= offered + 1e-6, strategy.key
    assert all(g.after <= offered + 1e-6 for g in (advice.plan.expected if advice.plan else ())
               if g.metric == "service_tokens_per_s")


def test_a_small_chunk_budget_lengthens_the_wait_for_the_prefill_lane(pack):
    # Set 15 a d4: a 128-token budget left prefill capacity under the prompt load, and the first
    # token's wait was estimated from the unchunked prefill. A chunked prompt holds the lane for
    # every chunk step, each with its decodes: fewer tokens a step, more steps, a longer queue.
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d1-*.json"))
    def waited(budget: int) -> tuple[float, float]:
        advice = advise(load_facts(facts, [f"serving.max_num_batched_tokens={budget}", "serving.max_num_seqs=32",
                                           "workload.arrival_rate_per_s=0.5", "workload.requests_running_mean=16",
                                           "workload.requests_waiting_mean=0"]), pack, available_evaluators()[0])
        return advice.derived["derived.ttft_wait_ms"], advice.derived["derived.prefill_chunk_steps"]
    (small, steps_small), (large, steps_large) = waited(64), waited(2048)
    assert steps_small >= 20 and steps_large == 1
    assert small > 3 * large


def test_a_migration_does_not_call_a_flag_lost_that_travels_as_a_fact(pack):
    # vLLM's --enable-prefix-caching is serving.prefix_caching, which SGLang has on by default and
    # TensorRT-LLM writes as enable_block_reuse; set 15 said the new server would lack it.
    # TGI's --lora-adapters stays lost: the adapters are not a fact any target carries.
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    advice, _ = review_deployment(pack, DATA, "d1")
    command = read_command("vllm serve Qwen/Qwen2.5-32B-Instruct-AWQ --quantization awq_marlin --enable-prefix-caching --port 8000")
    for engine in ("sglang", "trtllm"):
        notes = " ".join(build_launch(advice, engine, command).notes)
        assert "which has no setting kbopt maps them to: none" in notes, engine
    lora = read_command("text-generation-launcher --model-id org/m --lora-adapters a=org/a --port 8080")
    notes = " ".join(build_launch(advice, "vllm", lora).notes)
    assert "kbopt maps them to: --lora-adapters" in notes


def test_sglang_graph_sizes_follow_a_new_cap_only_past_what_it_captures():
    # an MI300X captures up to 512 by default (cuda_graph_runner.py@0.5.0rc2:185-190): a cap of 431
    # needs no --cuda-graph-max-bs, which would shrink the capture; an L4's 8 is raised to a cap of 64
    from kbopt.engine.advice.settings import settings_for, targets
    facts = {"workload.engine": "sglang", "serving.engine_version": "0.5.0rc2"}
    target = targets(facts, "sglang")[0]
    for ceiling, cap, expected in ((512, 431, None), (8, 64, "--cuda-graph-max-bs 64")):
        lines = [s.text for s in settings_for(target, "batch_cap", "batch_cap", {"max_num_seqs": cap}, facts,
                                              {"derived.cuda_graph_max_batch": ceiling})]
        assert f"--max-running-requests {cap}" in lines
        graphs = [line for line in lines if "cuda-graph" in line or "CUDA graphs" in line]
        assert (graphs == [expected]) if expected else (len(graphs) == 1 and "not set" in graphs[0]), graphs


def test_d8_no_replicas_sized_on_an_offline_backlog(pack):
    # 600 requests submitted at once behind 8 running, no arrival rate, a throughput objective:
    # set 15 advised 76 replicas, (8 + 600) / 8, new hardware sized on the batch's length.
    advice, _ = review_deployment(pack, DATA, "d8")
    assert strategy_of(advice, "scale_out") is None
    assert any(r.id == "scale_out" and "R-SCALE-OUT-OFFLINE-BACKLOG" in r.because for r in advice.rejected)
    assert advice.plan is None or advice.plan.replicas is None


def test_d8_tensorrt_llm_admits_by_use_where_requests_wait_beside_kv_room(pack, tmp_path):
    # TensorRT-LLM's default GUARANTEED_NO_EVICT reserves every request's whole output: 8 run and
    # 600 wait while the modelled pool holds 13 at the mean context. MAX_UTILIZATION was never offered.
    advice, script = review_deployment(pack, DATA, "d8")
    admission = strategy_of(advice, "admission_policy")
    assert admission is not None and admission.status == "change"
    assert "capacity_scheduler_policy: MAX_UTILIZATION" in script
    running = {g.metric: g for g in admission.expected}.get("decode_tokens_per_s")
    assert running is not None and running.after > running.before
    # stated today in the YAML file, it is kept, not advised again
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    data = Path(__file__).resolve().parent / "data" / DATA
    options = tmp_path / "extra.yaml"
    options.write_text("scheduler_config:\n  capacity_scheduler_policy: MAX_UTILIZATION\n")
    command = read_command(f"trtllm-serve meta-llama/Llama-3.1-70B-Instruct --backend pytorch --tp_size 2 "
                           f"--extra_llm_api_options {options}")
    kept = advise(load_facts(next(data.glob("d8-*.json")), command.overrides()), pack, available_evaluators()[0])
    assert kept.facts["serving.admission_policy"] == "max_utilization"
    assert (s := strategy_of(kept, "admission_policy")) is None or s.status == "keep"


def test_sglang_on_an_instinct_gpu_is_told_of_aiter_and_keeps_it_when_set(pack):
    # set 15: SGLang on MI300X never heard of AITER (SGLANG_USE_AITER, off by default in 0.5:
    # layers/quantization/fp8_kernel.py@0.5.0rc2:43)
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import facts_from_document
    document = {"kbopt": "facts/1", "hardware": {"gpu_name": "AMD Instinct MI300X", "gpu_count": 1},
                "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "params_billion": 70.6, "num_layers": 80,
                          "num_kv_heads": 8, "head_dim": 128, "num_attention_heads": 64, "hidden_size": 8192,
                          "weight_dtype": "bf16"},
                "workload": {"engine": "sglang", "prompt_len_mean": 1000, "output_len_mean": 300, "requests_running_mean": 32},
                "serving": {"engine_version": "0.5.0rc2"}}
    for today, advised in (("", True), ("SGLANG_USE_AITER=1 ", False)):
        command = read_command(f"{today}python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --port 30000")
        advice = advise(facts_from_document(document, "mi300x", command.overrides()), pack, available_evaluators()[0])
        aiter = strategy_of(advice, "rocm_aiter")
        assert (aiter is not None and aiter.status == "change") is advised
        assert ("SGLANG_USE_AITER", "1") in build_launch(advice, "sglang", command).argv()


def test_a_tensor_parallel_change_that_splits_the_heads_unevenly_is_left_out(pack):
    # Qwen2.5-7B (28 query heads, 4 KV heads) at TP2 on 8 GPUs: the TTFT widening to 8 would be
    # refused at load (sglang layers/linear.py@0.5.0rc2:781-786), so today's 2 stays, saying why.
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import facts_from_document
    document = {"kbopt": "facts/1", "hardware": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "interconnect": "nvlink"},
                "telemetry": {"compute_utilization": 0.55, "bandwidth_utilization": 0.5, "memory_used_ratio": 0.9,
                              "kv_cache_usage_ratio": 0.3},
                "model": {"name": "Qwen/Qwen2.5-7B-Instruct", "params_billion": 7.62, "num_layers": 28, "num_kv_heads": 4,
                          "head_dim": 128, "num_attention_heads": 28, "hidden_size": 3584, "weight_dtype": "bf16"},
                "workload": {"engine": "vllm", "prompt_len_mean": 30000, "output_len_mean": 200, "requests_running_mean": 2,
                             "requests_waiting_mean": 0.1, "arrival_rate_per_s": 0.2, "arrival_rate_peak_per_s": 0.3,
                             "ttft_p99_ms": 9000},
                "serving": {"engine_version": "0.12.0", "tensor_parallel_size": 2}, "constraints": {"ttft_slo_ms": 1500}}
    from dataclasses import replace
    advice = advise(facts_from_document(document, "qwen7b"), pack, available_evaluators()[0])
    # the widening asks for the widest even split (M-TP-WIDEST): 4, not the 8 GPUs
    assert advice.derived["derived.tp_widest"] == 4
    assert (widening := strategy_of(advice, "parallelism")) is not None and widening.params["degree"] == 4
    assert dict(build_launch(advice, "vllm").argv())["--tensor-parallel-size"] == "4"
    # and a degree that splits unevenly, whichever rule asks for it, never reaches the script
    uneven = replace(advice, strategies=tuple(replace(s, params={**s.params, "degree": 8, "tensor_widened": 8})
                                              if s.id == "parallelism" else s for s in advice.strategies))
    launch = build_launch(uneven, "vllm")
    assert dict(launch.argv())["--tensor-parallel-size"] == "2"
    assert any("28 attention heads" in note and "today's 2 stays" in note for note in launch.notes)
    document["model"].update({"num_attention_heads": 32, "num_kv_heads": 8})          # 32 and 8 split over 8
    advice = advise(facts_from_document(document, "even"), pack, available_evaluators()[0])
    assert dict(build_launch(advice, "vllm").argv())["--tensor-parallel-size"] == "8"


def test_d6_the_summary_leads_with_the_missed_objective(pack):
    # an action advised for a late first token showed its decode gains only in the summary
    from kbopt.reports.text import render_text
    advice, _ = review_deployment(pack, DATA, "d6")
    line = next(line for line in render_text(advice).splitlines() if ". parallelism: " in line)
    assert line.split(": ", 1)[1].startswith("ttft expected")


def test_no_vllm_fusion_over_a_block_fp8_checkpoint(pack):
    # vLLM 0.12's fusion passes match static per-tensor and dynamic per-token FP8 only
    # (compilation/fusion.py@0.12.0:340-357): set 15 advised them for a block-FP8 MoE, a no-op.
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).resolve().parent / "data" / DATA).glob("d3-*.json"))
    overrides = ["serving.tensor_parallel_size=4", "hardware.gpu_count=4"]
    blocked = advise(load_facts(facts, overrides), pack, available_evaluators()[0])
    assert strategy_of(blocked, "op_fusion") is None
    assert any(r.id == "op_fusion" and "R-FUSION-BLOCK-FP8" in r.because for r in blocked.rejected)
