"""Expert review set 10: eight deployments a reviewer wrote (tests/data/review10, two per engine,
each with today's launch command), and what the advice must now read for the defects the review
found."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import review_deployment, strategy_of

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.command import read_command
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import load_facts

DATA = Path(__file__).resolve().parent / "data" / "review10"


def _deployment(pack, name: str):
    return review_deployment(pack, "review10", name)


def test_d4_sglang_chunks_stall_the_decodes_whole_unless_mixed(pack):
    # Qwen2.5-14B AWQ on an L4 under SGLang 0.5.0: without --enable-mixed-chunk the scheduler runs a
    # waiting prompt's chunks before any decode (managers/scheduler.py@0.5.0rc2:1488-1491, 1648-1658),
    # so a 128-token budget alone promised ITL p99 488 -> 97 ms and delivered a longer stall. The
    # budget now comes with mixing on, and its cost to the first token (a decode step per chunk) is
    # shown beside it: a trade between two missed objectives that relieves the ITL one by more than
    # it costs the TTFT one. No n-gram speculation, which SGLang 0.5 lacks, stands in.
    advice, script = _deployment(pack, "d4")
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is not None and chunked.status == "change"
    assert "--enable-mixed-chunk" in chunked.settings["sglang"] and "--enable-mixed-chunk" in script
    moved = {g.metric: g for g in chunked.expected}
    assert moved["itl_p99_expected_ms"].after <= 150 < moved["itl_p99_expected_ms"].before
    assert moved["ttft_p99_expected_ms"].after > 1.3 * moved["ttft_p99_expected_ms"].before
    assert strategy_of(advice, "speculative_decoding") is None
    assert [r.because[0] for r in advice.rejected if r.id == "speculative_decoding"] == ["R-SGLANG-NO-NGRAM"]


def test_sglang_prefill_stall_is_the_whole_prompt_until_mixing_is_on_and_the_script_turns_it_on(pack):
    today = read_command(f"@{DATA / 'd4.launch'}").overrides()
    evaluator = available_evaluators()[0]
    def stall(*changes: str) -> float:
        advice = advise(load_facts(next(DATA.glob("d4-*.json")), [*today, "serving.max_num_batched_tokens=128", *changes]),
                        pack, evaluator)
        return advice.derived["derived.prefill_stall_ms"]
    assert stall("serving.mixed_chunk=true") < stall() / 3      # one 128-token chunk, not the whole prompt
    # speculation turns mixing off: the whole prompt again, and more of them (a request ends in fewer steps)
    assert stall("serving.mixed_chunk=true", "serving.speculative_method=mtp") >= stall()


@pytest.mark.parametrize("launch", ["d3.launch", "d3-alias.launch"])
def test_d3_sglang_expert_parallel_aliases_read_the_same(pack, launch):
    # --ep-size is an alias of --expert-parallel-size (server_args.py@0.5.0rc2:1439-1441); it was
    # refused as a misspelt --tp-size.
    command = read_command(f"@{DATA / launch}")
    assert dict(command.facts)["serving.expert_parallel"] is True and not {"--ep-size", "--ep"} & set(command.unmodelled)


def test_d2_an_explicit_enable_prefix_caching_is_read_and_chunk_steps_cost_the_first_token(pack):
    # vLLM 0.10.2 Llama-3.3-70B on 4 H100s with --enable-prefix-caching and a 30 ms ITL objective:
    # the flag stated prefix caching on; a chunk budget's steps each run the decode step beside the
    # chunk, so the first token comes after the prefill math plus a decode step per chunk.
    advice, script = _deployment(pack, "d2")
    assert advice.facts["serving.prefix_caching"] is True
    assert strategy_of(advice, "prefix_caching") is None or strategy_of(advice, "prefix_caching").status == "keep"
    d = advice.derived
    assert d["derived.ttft_expected_ms"] >= d["derived.prefill_ms"] + d["derived.prefill_chunk_steps"] * d["derived.decode_step_expected_ms"] - 1e-6
    chunked = strategy_of(advice, "chunked_prefill")
    ttft = next(g for g in chunked.expected if g.metric == "ttft_expected_ms")
    assert ttft.after > ttft.before                                    # a smaller budget spends first-token time
    assert "--enable-prefix-caching" in script and script.count("prefix-caching") == 1


def test_d5_a_long_context_chunk_is_priced_at_its_late_context_and_the_spent_ttft_is_shown(pack):
    # Llama-3.1-8B FP8 on an H200, 60k-token prompts (p99 118k), a 50 ms ITL p99 objective and a
    # 10 s TTFT p99 one: attention over 60k tokens costs about twice the linear layers per chunk
    # token, so the budget that meets the ITL objective is priced there; the TTFT objective the
    # plan moves toward its SLO is shown beside the missed ITL one.
    advice, _ = _deployment(pack, "d5")
    d = advice.derived
    linear_only = (advice.facts["constraints.itl_slo_ms"] * d["derived.itl_p99_fit"] - d["derived.decode_step_expected_ms"]) \
        * d["derived.compute_efficiency"] * d["derived.gpu_tflops"] / 2 / 8.03
    assert d["derived.chunk_budget_itl"] < linear_only / 2
    assert d["derived.chunk_budget_itl"] <= 768
    # sized after the plan, whose n-gram verify steps share a stall among the tokens they yield
    # (M-CHUNK-BUDGET-ITL per output token): a larger budget, and the plan's p99 still meets 50 ms
    chunked = strategy_of(advice, "chunked_prefill")
    assert strategy_of(advice, "speculative_decoding") is not None
    assert chunked.params["max_num_batched_tokens"] > d["derived.chunk_budget_itl"]
    assert next(g for g in advice.plan.expected if g.metric == "itl_p99_expected_ms").after <= 50
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.miss is not None and ttft.miss < 0 and ttft.after is not None and ttft.after > ttft.value
    assert "within a 10,000 ms objective; the plan spends its room" in ttft.text()


def test_d6_block_reuse_is_not_switched_on_where_the_traces_show_nothing_shared(pack):
    # Qwen3-32B FP8 summarizing unique documents on TensorRT-LLM: enable_block_reuse changes nothing.
    facts = load_facts(next(DATA.glob("d6-*.json")), [*read_command(f"@{DATA / 'd6.launch'}").overrides(),
                                                      "workload.prefix_cache_hit_ratio=0.01"])
    advice = advise(facts, pack, available_evaluators()[0])
    assert strategy_of(advice, "prefix_caching") is None
    assert [r.because[0] for r in advice.rejected if r.id == "prefix_caching"] == ["R-PREFIX-CACHING-NOTHING-SHARED"]


def test_d7_a_deployment_that_meets_its_objectives_is_left_as_it_is(pack):
    advice, script = _deployment(pack, "d7")
    assert all(s.status == "keep" for s in advice.strategies)
    assert "# changes: none; this is today's deployment" in script
