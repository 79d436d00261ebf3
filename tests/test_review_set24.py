"""Expert review set 24: five deployments a reviewer wrote (vLLM with LoRA adapters, TensorRT-LLM 1.1
with long prompts, SGLang data-parallel attention on Qwen3, TGI on an A100, vLLM 0.10.2 with AWQ on
an A10G; tests/data/review24, with today's launch commands and hand arithmetic in NOTES.md), and what
the advice must now read for the defects it found."""
from __future__ import annotations

from pathlib import Path

from conftest import review_deployment, script_flag, strategy_of

DATA = "review24"


def test_d1b_more_lora_slots_bring_the_host_cache_of_adapters_with_them(pack):
    # today: --max-loras 2 --max-cpu-loras 4 with 6 adapters; the slots go to 6, and vLLM refuses
    # --max-cpu-loras below --max-loras at start (config/lora.py@0.12.0:80-88): it comes up to 6.
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    from kbopt.reports.emit import render_launch
    data = Path(__file__).resolve().parent / "data" / DATA
    command = read_command((data / "d1b.launch").read_text().strip())
    advice = advise(load_facts(next(data.glob("d1-*.json")), list(command.overrides())), pack, available_evaluators()[0])
    script = render_launch(build_launch(advice, "vllm", command), advice.bottleneck)
    slots = int(script_flag(script, "--max-loras") or 0)
    assert slots >= 6 and int(script_flag(script, "--max-cpu-loras") or 0) >= slots


def test_d5_a_script_without_the_plans_replicas_caps_the_batch_for_the_load_it_serves(pack):
    # vLLM on one A10G: the plan adds 3 replicas and an ITL cap of 4-5; the script starts one server,
    # which at that cap serves 255 of the 260 tokens a second that arrive (400 at the peaks). It keeps
    # a cap that serves the peaks on one replica, and says the plan's cap needs the replicas.
    # (With Marlin in the plan the one server's step is short enough that 12 meet the ITL objective;
    # set 17 d7 holds the script's own cap beside the plan's replicas, with its why.)
    advice, script = review_deployment(pack, DATA, "d5")
    printed = int(script_flag(script, "--max-num-seqs") or 0)
    itl = next(g.after for g in advice.plan.expected if g.metric == "itl_expected_ms")
    replicas = advice.plan.replicas or 1
    assert printed >= 8 and printed * 1000 / (200 * itl) >= 2.0 / replicas


def test_d3_todays_total_under_data_parallel_attention_is_shown_as_given(pack):
    # --max-running-requests 1024 over 8 attention ranks is SGLang's total (128 a rank); the change to
    # 2,640 (330 a rank) is a raise, not a cut from 8,192.
    _, script = review_deployment(pack, DATA, "d3")
    line = next(line for line in script.splitlines() if line.startswith("#   --max-running-requests:"))
    assert line.startswith("#   --max-running-requests: 1024 -> ")


def test_d5_an_awq_checkpoint_forced_onto_the_slow_kernel_gets_marlin(pack):
    # --quantization awq makes vLLM run its AWQ kernel where it would pick Marlin ("you specified
    # quantization=awq explicitly, so forcing awq": awq_marlin.py@0.11.0:110-127): a 21.5 ms step
    # against a 9.2 ms read floor. One flag on the same checkpoint, ranked before more GPUs.
    advice, script = review_deployment(pack, DATA, "d5")
    assert advice.facts["serving.slow_int4_kernel"] is True
    marlin = strategy_of(advice, "marlin_kernels")
    assert marlin is not None and marlin.params == {"kernel": "awq_marlin"}
    itl = next(g for g in marlin.expected if g.metric == "itl_expected_ms")
    assert itl.after < 0.7 * itl.before
    assert script_flag(script, "--quantization") == "awq_marlin"
    actions = [s.key for s in advice.strategies if s.status == "change"]
    assert actions.index("marlin_kernels") < actions.index("scale_out")


def test_d4_a_budget_leaves_the_running_decodes_and_a_chunk(pack):
    # TGI's v3 router takes the running batch's tokens out of --max-batch-prefill-tokens before a
    # prompt's chunk (backends/v3/src/backend.rs@v3.3.0:175-180), as vLLM and SGLang do: the smallest
    # budget worth printing is the decodes and 64 prompt tokens, and the one printed is at least that.
    advice, script = review_deployment(pack, DATA, "d4")
    derived = advice.derived
    assert derived["derived.chunk_budget_min"] >= int(derived["derived.running_batch"]) + 64
    printed = script_flag(script, "--max-batch-prefill-tokens")
    assert printed is None or int(printed) >= derived["derived.chunk_budget_min"]
