"""Expert review set 16 and a newcomer's first hour: deployments they wrote (tests/data/review16,
each with today's launch command; n1 is the newcomer's, with a constraints file), and what the
advice must now read for the defects they found."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import migrated_script, review_deployment, script_flag, script_flags, strategy_of

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import load_facts
from kbopt.reports.emit import render_launch

DATA = "review16"
HERE = Path(__file__).resolve().parent / "data" / DATA


def _facts_only(pack, name: str, *overrides: str):
    """The advice on the deployment's facts file alone, without today's launch command."""
    return advise(load_facts(next(HERE.glob(f"{name}-*.json")), list(overrides)), pack, available_evaluators()[0])


@pytest.mark.parametrize("engine,flag", [("vllm", "--tensor-parallel-size"), ("sglang", "--tp-size"),
                                         ("trtllm", "--tp_size"), ("tgi", "--num-shard")])
def test_d1_a_replica_of_two_gpus_is_relaunched_on_both(pack, engine, flag):
    # the facts give 2 L40S and no serving.tensor_parallel_size; every estimate (a 527,728-token pool)
    # assumes both, so the script must load the model over both, or it starts on one with a fifth of the pool
    advice = _facts_only(pack, "d1")
    assert advice.derived["derived.tensor_parallel"] == 2
    if engine != "vllm":
        from kbopt.engine.advice.migrate import advice_for
        advice = advice_for(advice, engine, pack, available_evaluators()[0])
    script = render_launch(build_launch(advice, engine), advice.bottleneck)
    argv = script_flags(script).split()
    assert argv[argv.index(flag) + 1] == "2", script
    assert "serving.tensor_parallel_size is not in the facts" in script


def test_d4_sglang_speculation_keeps_todays_running_batch(pack):
    # EAGLE/MTP with no --max-running-requests runs 48 (server_args.py@0.5.1:618-620), divided again
    # among the 8 DP-attention ranks: 6 a rank where 128 run today with 850 waiting
    advice = _facts_only(pack, "d4")
    assert strategy_of(advice, "speculative_decoding") is not None
    argv = script_flags(render_launch(build_launch(advice, "sglang"), advice.bottleneck)).split()
    assert "--speculative-algorithm" in argv and "--enable-dp-attention" in argv
    assert int(argv[argv.index("--max-running-requests") + 1]) >= 128


def test_d4_more_replicas_do_not_multiply_the_demand(pack):
    # 2.5 requests/s of 1,500 tokens is 3,750 tokens/s whatever the replicas: the plan credited
    # 8 replicas with 30,000 and asked for 8x the GPUs; the changes on today's GPUs serve the demand
    advice, _ = review_deployment(pack, DATA, "d4")
    assert advice.plan is not None
    service = next(g for g in advice.plan.expected if g.metric == "service_tokens_per_s")
    assert service.after <= 2.5 * 1500 * 1.001
    assert strategy_of(advice, "scale_out") is None


def test_d6_tensorrt_llm_never_refuses_the_workloads_prompts(pack):
    # 14,000-token prompts (p99 30,000) against the 8,192-token default budget: without chunked
    # prefill the PyTorch backend answers HTTP 400 (llm.py _check_arguments)
    advice = _facts_only(pack, "d6")
    script = render_launch(build_launch(advice, "trtllm"), advice.bottleneck)
    assert "enable_chunked_prefill: true" in script
    # where no change of the advice chunks (the chunk budget rejected), the launch itself turns chunking on
    from dataclasses import replace
    plain = replace(advice, strategies=tuple(s for s in advice.strategies if s.id != "chunked_prefill"))
    script = render_launch(build_launch(plain, "trtllm"), plain.bottleneck)
    assert "enable_chunked_prefill: true" in script and "refuses them" in script
    # today's own command turns it on already: carried, not added again
    _, relaunched = review_deployment(pack, DATA, "d6")
    assert relaunched.count("enable_chunked_prefill") == 1


def test_n1_one_running_batch_cap_and_the_graphs_follow_it(pack):
    # the ITL objective's cap (52) and the pool's (225) were printed side by side, SGLang's
    # --cuda-graph-max-bs following the one that lost
    facts = load_facts(HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml")
    constraints = load_facts(HERE / "n1-constraints.yaml")
    from kbopt.kb.facts import Facts
    merged = Facts({**facts.values, **constraints.values}, {**facts.provenance, **constraints.provenance})
    advice = advise(merged, pack, available_evaluators()[0])
    caps = {s.key: v for s in advice.strategies for n, v in s.params.items()
            if (s.id, n) in {("continuous_batching", "max_batch_size"), ("memory_budget", "max_num_seqs"), ("batch_cap", "max_num_seqs")}}
    assert len(caps) >= 2 and len(set(caps.values())) == 1, caps
    from kbopt.engine.advice.migrate import advice_for
    moved = advice_for(advice, "sglang", pack, available_evaluators()[0])
    argv = script_flags(render_launch(build_launch(moved, "sglang"), moved.bottleneck)).split()
    cap = int(argv[argv.index("--max-running-requests") + 1])
    if "--cuda-graph-max-bs" in argv:
        assert int(argv[argv.index("--cuda-graph-max-bs") + 1]) == cap


def test_every_set16_script_relaunches_and_passes_bash(pack):
    for name in ("d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"):
        advice, script = review_deployment(pack, DATA, name)
        assert "exec " in script
        for engine in ("vllm", "sglang"):
            assert "exec " in migrated_script(advice, DATA, name, engine)


def test_n1_report_merges_the_facts_as_advise_does(run_cli, tmp_path):
    # `report --facts mine --facts constraints` kept only the last file: a report with no GPU in it
    mine, constraints = HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml", HERE / "n1-constraints.yaml"
    code, advised, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints), "--format", "md", "--explain")
    assert code == 0
    out = tmp_path / "r.md"
    code, _, err = run_cli("report", "--facts", str(mine), "--facts", str(constraints), "--format", "md", "-o", str(out))
    assert code == 0, err
    assert out.read_text() == advised
    assert "memory capacity" in advised.splitlines()[0]


def test_n1_an_uncovered_version_is_said_beside_the_launch_in_every_format(run_cli):
    mine, constraints = HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml", HERE / "n1-constraints.yaml"
    for fmt in ("text", "md", "html"):
        code, out, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints), "--format", fmt)
        assert code == 0 and "0.10.1 (serving.engine_version) is not covered" in out, fmt


@pytest.mark.parametrize("version", ["banana", "0.11.0; rm -rf /", "../../etc"])
def test_a_malformed_engine_version_is_refused_naming_the_field(run_cli, tmp_path, version):
    import json
    document = json.loads((HERE / "d3-vllm0120-llama33-70b-mi300x-itl.json").read_text())
    document["serving"]["engine_version"] = version
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(document))
    code, out, err = run_cli("advise", "--facts", str(facts), "--emit", "vllm")
    assert code == 2 and out == "" and "$.serving.engine_version" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("version", ["0.11.0", "v3.3.0", "1.1.0rc2", "0.10.1.1", "3.3.4-dev0", "0.9.2+cu128"])
def test_the_versions_engines_report_are_read(run_cli, tmp_path, version):
    import json
    document = json.loads((HERE / "d3-vllm0120-llama33-70b-mi300x-itl.json").read_text())
    document["serving"]["engine_version"] = version
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(document))
    code, _, err = run_cli("advise", "--facts", str(facts))
    assert code == 0, err


def test_d5_the_launch_counts_no_negative_carried_settings(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(next(HERE.glob("d5-*.json"))))
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("Launch ("))
    assert "-1 carried" not in line and " 0 carried unchanged" in line


def test_a_model_name_with_a_leading_dash_names_the_local_path_to_give(run_cli, tmp_path):
    import json
    document = json.loads((HERE / "d3-vllm0120-llama33-70b-mi300x-itl.json").read_text())
    document["model"]["name"] = "-my-model"
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(document))
    code, _, err = run_cli("advise", "--facts", str(facts), "--emit", "vllm")
    assert code == 2 and "(./-my-model for a local folder)" in err


def test_d1_fp8_kv_on_an_l40s_under_vllm_011_leaves_the_attention_backend_to_vllm(pack):
    # 0.11 runs FP8 KV before Hopper on its Triton kernel by itself (platforms/cuda.py@0.11.0:357-362);
    # forcing FlashInfer there fails at start where the vllm[flashinfer] extra is not installed (its
    # backend imports flashinfer at the top, v1/attention/backends/flashinfer.py@0.11.0:11: review
    # set 38 F1), so the script sets no backend; 0.10 would fall back to the V0 engine without it
    advice, script = review_deployment(pack, DATA, "d1")
    assert strategy_of(advice, "kv_cache_quantization") is not None
    assert script_flag(script, "--kv-cache-dtype") == "fp8"
    assert "VLLM_ATTENTION_BACKEND" not in script_flags(script)
    older = _facts_only(pack, "d1", "serving.engine_version=\"0.10.2\"")
    assert "export VLLM_ATTENTION_BACKEND=FLASHINFER" in render_launch(build_launch(older, "vllm"), older.bottleneck)


def test_n1_a_move_to_tensorrt_llm_says_todays_fp8_needs_a_checkpoint(run_cli):
    # vLLM quantizes the BF16 checkpoint to FP8 as it loads; trtllm-serve reads a ModelOpt one, so
    # the same MODEL would load 141 GB of BF16 onto 2x80 GB: the script must say so
    mine, constraints = HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml", HERE / "n1-constraints.yaml"
    code, out, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints), "--emit", "trtllm")
    assert code == 0
    assert "FP8 weights today come from vllm quantizing the 16-bit checkpoint as it loads" in out
    assert "needs an FP8 checkpoint" in out
    code, out, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints), "--emit", "sglang")
    assert code == 0 and "FP8 weights today" not in out and "--quantization fp8" in script_flags(out)


def test_n1_a_spaced_set_gets_advises_usage_and_the_form_it_takes(capsys):
    from kbopt.cli import main
    with pytest.raises(SystemExit) as stopped:
        main(["advise", "--facts", str(HERE / "n1-constraints.yaml"), "--set", "serving.tensor_parallel_size", "4"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("usage: kbopt advise")
    assert "--set takes PATH=VALUE as one word (--set serving.tensor_parallel_size=VALUE)" in err


def test_n1_collected_facts_take_a_constraints_file_over_them(run_cli):
    real = HERE.parent / "real"
    code, out, err = run_cli("advise", "--collect", "--no-nvml", "--metrics", str(real / "dcgm_exporter_L40S_upcloud.prom"),
                             "--facts", str(HERE / "n1-constraints.yaml"), "--format", "json")
    assert code == 0, err
    import json
    facts = json.loads(out)["facts"]
    assert facts["constraints.itl_slo_ms"]["value"] == 40 and "L40S" in facts["hardware.gpu_name"]["value"]
    code, _, err = run_cli("advise")
    assert code == 2 and "advise needs facts" in err


def test_d8_fp8_on_a_kv_starved_l4_is_the_first_action_not_more_gpus(pack):
    # a pool of 4 sequences with 11 waiting: FP8 weights grow it 5x and drain the queue that holds a
    # missed TTFT objective 10x over; the ITL p99 its bigger batch costs is a trade, not harm. The
    # model's TTFT reads 15x today's measurement (the facts break Little's law), so it judges no
    # cost, but its relative move still counts as relief
    advice, _ = review_deployment(pack, DATA, "d8")
    actions = [s.key for s in advice.strategies if s.status != "keep"]
    assert actions[0] == "quantization[fp8]", actions
    assert actions.index("quantization[fp8]") < actions.index("scale_out")
    assert all(r.id != "quantization" or "int8" in str(r.params) for r in advice.rejected)


def test_d3_an_itl_cap_the_plan_leaves_idle_is_not_lowered(pack):
    # after FP8 the largest batch meeting 40 ms is 60, above the 24 running (31 at the busiest arrival
    # rate): 64 -> 60 changed nothing but the peak; today's cap stays, and the rejection says why
    advice, script = review_deployment(pack, DATA, "d3")
    assert strategy_of(advice, "batch_cap") is None
    assert "--max-num-seqs 64 " in script and "--max-num-seqs 60" not in script
    reason = next(r.reason for r in advice.rejected if r.id == "batch_cap")
    assert "would never bind" in reason
    # a raise of a cap that binds today stays (set 14 d5: 64 running against 64, 35 waiting)
    raised, _ = review_deployment(pack, "review14", "d5")
    assert strategy_of(raised, "batch_cap") is not None


def test_n1_no_action_quotes_a_figure_the_symptoms_call_unprojectable(run_cli):
    # the symptoms say the model reads a 12,187 ms TTFT p99 where 2,400 ms is measured: the actions
    # then quote its move, not its figures, in every format
    mine, constraints = HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml", HERE / "n1-constraints.yaml"
    for fmt in ("text", "md", "html"):
        code, out, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints), "--format", fmt)
        assert code == 0
        if fmt == "html":
            import html
            out = html.unescape(out)
        gains = [line for line in out.splitlines() if "ttft p99 expected" in line and "harmful" not in line
                 and "not projected" not in line]
        assert gains and not any("12,187 → " in line for line in gains), (fmt, [g for g in gains if "12,187 → " in g])
        assert "the model's move only: it reads 12,187 ms where 2,400 ms is measured" in out, fmt


def test_n1_continuous_batching_on_vllm_reads_as_its_cap(run_cli):
    # every covered engine batches continuously: a change there is the running cap, not the batching.
    # The ITL objective's cap (57 on the step the plan's FP8 KV cache leaves) would lower today's 128
    # below the 110 in flight at the peak, a trade of the first token, missed 2.4x, for an ITL p99
    # missed 1.1x: the cap stays (set 33 d2's rule, engine/advice/caps.py), and the batching is kept
    mine, constraints = HERE / "n1-vllm0101-llama31-70b-fp8-2xh100.yaml", HERE / "n1-constraints.yaml"
    code, out, _ = run_cli("advise", "--facts", str(mine), "--facts", str(constraints))
    assert code == 0
    actions = out.split("Actions", 1)[1].split("Keep", 1)[0]
    assert "continuous_batching" not in actions
    assert "max_batch_size=128: kept at today's cap (128)" in " ".join(out.split())


def test_d4_a_cap_that_binds_with_kv_room_is_raised_on_what_the_engines_gauge_reads(pack):
    # 128 running fill 58% of the pool (850 waiting): the pool at full length holds 125, but SGLang
    # admits on the blocks in use, so today's mix fills it at 198 (a tenth below full); the raise is
    # the first action, sized again on the pool the plan leaves, and the flag is the replica's total
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.max_batch_kv_seen"] == 198
    actions = [s for s in advice.strategies if s.status != "keep"]
    assert actions[0].id == "memory_budget" and "S-BATCH-CAP-RAISE" in actions[0].recommended_by
    argv = script_flags(script).split()
    assert int(argv[argv.index("--max-running-requests") + 1]) > 198
    # TensorRT-LLM reserves a request's whole length (GUARANTEED_NO_EVICT): no gauge-based bound there
    trtllm, _ = review_deployment(pack, "review3", "d6")
    assert "derived.max_batch_kv_seen" not in trtllm.derived


def test_n1_a_catalog_key_as_model_name_is_said_in_the_script(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(HERE.parents[2] / "examples" / "capacity-a100-chat.json"), "--emit", "vllm")
    assert code == 0 and "model.name 'llama-3-8b' is neither a Hugging Face id (org/name) nor a path" in out
    code, out, _ = run_cli("advise", "--facts", str(next(HERE.glob("d3-*.json"))), "--emit", "vllm")
    assert code == 0 and "is neither a Hugging Face id" not in out


def test_d6_a_chunk_budget_is_judged_beside_the_prefix_cache_the_plan_turns_on(pack):
    # alone, on today's cache-off server, the 768-token budget reads as a 6.5x TTFT; beside the block
    # reuse the plan turns on (55% of prompt tokens cached) it does not work against the objective
    advice, script = review_deployment(pack, DATA, "d6")
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is not None and chunked.status == "change"
    assert strategy_of(advice, "prefix_caching") is not None
    assert all(r.id != "chunked_prefill" for r in advice.rejected)
    argv = script_flags(script).split()
    assert int(argv[argv.index("--max_num_tokens") + 1]) < 8192


def test_d7_a_tensorrt_llm_cap_says_what_its_default_admission_reserves(pack):
    # TensorRT-LLM's GUARANTEED_NO_EVICT starts a request once the pool holds its prompt and its whole
    # max_tokens (base_worker.py _deduce_max_tokens: max_seq_len minus the prompt where none is sent).
    # Raised to 392 at the mean full length (2,000 tokens) of a 784,208-token pool, about 200 would run
    # at 800 + 3,000 reserved; the caveat says so, and a stated limit sizes the cap on it.
    advice, _ = review_deployment(pack, DATA, "d7")
    budget = strategy_of(advice, "memory_budget")
    assert budget is not None and budget.params["max_num_seqs"] == 392
    assert advice.derived["derived.max_batch_reserved"] == 784208 // 3800 == 206
    assert any("about 206 run at once" in c.text and c.rule == "C-TRTLLM-ADMISSION-RESERVES" for c in budget.caveats)
    stated = _facts_only(pack, "d7", "workload.max_tokens_mean=3000", "serving.max_num_seqs=32")
    assert stated.derived["derived.kv_reserved_tokens"] == 3800
    # without today's --max_num_tokens 4096 the pool reads smaller (8,192 tokens of activations)
    assert strategy_of(stated, "memory_budget").params["max_num_seqs"] == stated.derived["derived.kv_pool_tokens"] // 3800 == 199
    assert not any(c.rule == "C-TRTLLM-ADMISSION-RESERVES" for c in strategy_of(stated, "memory_budget").caveats)


def test_d4_the_plans_graph_ceiling_is_each_dp_ranks(pack):
    # SGLang's graph runner compares the largest rank's batch with --cuda-graph-max-bs, not the
    # replica's: the plan's 1,064 running are 133 a rank against 256 captured, so no step runs eagerly
    # and no graph flag is written. (The reviewer's hand check, 64.6 ms a step at 978 running, was of
    # a plan with an FP8 KV cache, which set 29 showed slows SGLang's Hopper MLA path: each step copies
    # the whole cache to 16 bits, R-KV-FP8-MLA-SGLANG-FA3.)
    advice, _ = review_deployment(pack, DATA, "d4")
    assert any(r.id == "kv_cache_quantization" and "R-KV-FP8-MLA-SGLANG-FA3" in r.because for r in advice.rejected)
    budget = strategy_of(advice, "memory_budget")
    per_rank = budget.params["max_num_seqs"]
    assert per_rank <= 256
    assert any("within the batches the engine captures already (up to 256" in line for line in dict(budget.settings)["sglang"])


def test_d4_a_strategys_own_sglang_line_writes_the_ranks_total_as_the_script_does(pack):
    # The plan turns DP attention on over 8 ranks: the cap is 133 a GPU (267 beside the FP8 KV cache
    # set 29 took out of the plan), and SGLang divides --max-running-requests among the ranks, so the
    # strategy's own line must read 1,064 as the script does, not 133 (which alone would run 16 a
    # rank); the graph ceiling stays each rank's.
    advice, script = review_deployment(pack, DATA, "d4")
    budget = strategy_of(advice, "memory_budget")
    per_gpu = budget.params["max_num_seqs"]
    line = dict(budget.settings)["sglang"]
    assert f"--max-running-requests {per_gpu * 8}" in line
    assert f"--cuda-graph-max-bs {per_gpu}" in line or any(f"the cap of {per_gpu} is within" in part for part in line)
    argv = script_flags(script).split()
    assert argv[argv.index("--max-running-requests") + 1] == str(per_gpu * 8)
