"""Expert review set 16 and a newcomer's first hour: deployments they wrote (tests/data/review16,
each with today's launch command; n1 is the newcomer's, with a constraints file), and what the
advice must now read for the defects they found."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import migrated_script, review_deployment, script_flags, strategy_of

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
    assert "refuses them" in script
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
