"""Expert review set 23: six deployments a reviewer wrote in areas earlier sets left out (NVFP4 MoE on
B200s, long reasoning outputs, SGLang's EAGLE-3 tree, an MI355X, a host-bound small model, facts
collected from real dumps; tests/data/review23, with today's launch commands and hand arithmetic in
NOTES.md), and what the advice must now read for the defects it found."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import review_deployment, script_flag, strategy_of

DATA = "review23"
HERE = Path(__file__).resolve().parent / "data" / DATA


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "tgi"])
def test_an_idle_replica_with_its_lengths_is_advised_not_an_internal_error(run_cli, tmp_path, engine):
    # An autoscaled pod scraped idle (0 running) with the trace's lengths and a GPU count: the tail
    # prompt's quantile took ln(0) and the advice ended in an internal error, exit 2, on every engine.
    code, out, err = run_cli("advise", "--facts", str(HERE / "d6-crash-min.json"), "--set", f"workload.engine={engine}")
    assert code == 0, err
    assert "bottleneck: underfed" in out


def test_d1_expert_parallelism_for_an_nvfp4_moe_on_vllm_comes_with_flashinfers_fp4_moe(pack):
    # vLLM's CUTLASS FP4 MoE asserts expert_map is None on the first forward (compressed_tensors_moe.py
    # @0.12.0:622-628): --enable-expert-parallel starts only with VLLM_USE_FLASHINFER_MOE_FP4=1. From a
    # launch without it the script sets it; from one with it, it stays as today's.
    for launch, status in (("d1-noenv", "new"), ("d1", "unchanged")):
        script = (review_deployment(pack, DATA, "d1") if launch == "d1" else _with_launch(pack, launch))[1]
        assert "\n  --enable-expert-parallel " in script, launch
        line = next(line for line in script.splitlines() if line.startswith("export VLLM_USE_FLASHINFER_MOE_FP4=1"))
        assert f"# {status};" in line, (launch, line)


def _with_launch(pack, launch: str):
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    from kbopt.reports.emit import render_launch
    command = read_command((HERE / f"{launch}.launch").read_text().strip())
    advice = advise(load_facts(next(HERE.glob("d1-*.json")), list(command.overrides())), pack, available_evaluators()[0])
    return advice, render_launch(build_launch(advice, "vllm", command), advice.bottleneck)


def test_d3_sglangs_eagle3_tree_is_verified_node_by_node(pack):
    # --speculative-num-steps 5 --speculative-eagle-topk 8 --speculative-num-draft-tokens 32 at 48 running:
    # 1,536 tokens a verify step, compute-bound, about 52 ms by hand (the model read a chain of 3 drafts
    # and 12.8 ms); over the measured 4.1 tokens a step, an ITL near the 17.5 ms measured.
    advice, _ = review_deployment(pack, DATA, "d3")
    derived = advice.derived
    assert derived["derived.spec_draft_tokens"] == 5 and derived["derived.spec_verify_tokens"] == 32
    assert 45 < derived["derived.spec_step_ms"] < 60
    assert abs(advice.estimates["itl_expected_ms"].value / 17.5 - 1) < 0.1


def test_d2_long_reasoning_outputs_get_no_chunk_budget_that_only_costs(pack):
    # 600-token prompts and 9,000-token outputs: 0.27% of steps carry a prefill, so the measured ITL
    # p99 is a decode step at a long context, which no budget shortens; a 64-token budget (and a cap
    # clamped to it) made the plan's TTFT and ITL p99 worse by the model's own what-if.
    advice, script = review_deployment(pack, DATA, "d2")
    assert script_flag(script, "--max-num-batched-tokens") is None
    assert advice.derived["derived.itl_p99_fit"] == 1
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is None or chunked.status == "keep"


def test_d5_a_host_bound_front_end_gets_api_servers_and_asynchronous_scheduling(pack):
    # Qwen2.5-1.5B at 1,900 requests a second on an H100: a 900 ms first token where the engine's
    # model reads 40 ms and its queue holds 1.5 requests (under a millisecond by Little's law): the
    # wait is in the one API server process. The script was empty; vLLM 0.11 has --api-server-count
    # (entrypoints/openai/cli_args.py@0.11.0:252) and --async-scheduling (engine/arg_utils.py@0.11.0:915).
    advice, script = review_deployment(pack, DATA, "d5")
    assert advice.derived["derived.ttft_outside_engine_ms"] > 800
    assert strategy_of(advice, "api_servers").params == {"count": 4}
    assert script_flag(script, "--api-server-count") == "4" and "\n  --async-scheduling " in script


def test_asynchronous_scheduling_is_not_planned_beside_speculation(pack):
    # vLLM 0.11 refuses --async-scheduling beside any speculative decoding, 0.12 beside all but EAGLE
    # and MTP (engine/arg_utils.py@0.11.0:1289-1304, config/vllm.py@0.12.0:530-557)
    from kbopt.kb.knowledge import builtin_knowledge
    assert "speculative_decoding" in builtin_knowledge().strategies["async_scheduling"].excludes


def test_d6_telemetry_of_another_gpu_is_named(run_cli):
    # kbopt collect on a real DCGM dump (0 MiB in use) and a real vLLM dump (101,625 blocks, 18.6 GiB
    # of a 22.5 GiB L4), both from different tests: no GPU serving the engine shows that, and the
    # utilization beside it is another GPU's.
    code, out, err = run_cli("advise", "--facts", str(HERE / "d6-collected.json"), "--facts", str(HERE / "d6-hand.yaml"))
    assert code == 0, err
    assert "W-TELEMETRY-NOT-THIS-ENGINE" in out
