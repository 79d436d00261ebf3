"""Expert review set 21: six deployments a reviewer wrote (tests/data/review21, with today's launch
commands and hand arithmetic in NOTES.md), and what the advice must now read for the defects it found."""
from __future__ import annotations

import pytest
from conftest import review_deployment, strategy_of

DATA = "review21"


def test_d1_attention_dp_ranks_keep_every_kv_head_of_their_own_requests(pack):
    # Qwen3-235B-A22B FP8 (4 KV heads) on 8 H100s with TensorRT-LLM attention DP: each rank keeps all
    # 4 heads of its own requests (resource_manager.py: tp_size 1 under attention DP), so a token costs
    # 94 x 2 x 4 x 128 x 2 B = 192,512 B on one GPU, 24,064 averaged over the 8: the pool 1.64M tokens,
    # 268 requests at GUARANTEED_NO_EVICT's 6,096 reserved, where one replicated head read half of both.
    advice, _ = review_deployment(pack, DATA, "d1")
    assert advice.derived["derived.kv_bytes_per_token_per_gpu"] == 94 * 2 * 4 * 128 * 2 / 8
    assert 1_600_000 < advice.estimates["kv_pool_tokens"].value < 1_700_000


def test_trtllm_max_utilization_reads_the_cap_per_rank_and_a_queue_by_its_wait(pack):
    # d1: 248 running against --max_batch_size 64 a rank over 8 ranks (512): the cap does not bind,
    # the admission's reservation does. d2: 3.6 waiting are 1.5 s of a 1.65 s TTFT (Little's law):
    # few requests, but the queue is what the client waits on. Both get MAX_UTILIZATION.
    for name in ("d1", "d2"):
        advice, script = review_deployment(pack, DATA, name)
        policy = strategy_of(advice, "admission_policy")
        assert policy is not None and policy.params["policy"] == "max_utilization", name
        assert "capacity_scheduler_policy: MAX_UTILIZATION" in script, name


def test_d4_gpt_oss_hybrid_kv_pool_counts_a_block_as_one_group_of_layers(pack):
    # gpt-oss-120b on an H100 under vLLM 0.11 with 10,740 blocks of 16: the hybrid manager groups 18
    # sliding-window and 18 full layers, each block one page of a group (kv_cache_utils.py@0.11.0:977),
    # so the pool is 10,740 x 16 x 36,864 B = 5.9 GiB, about 50 sequences of 3,300 tokens (the reviewer's
    # 49.7), not 11.8 GiB and 92. An FP8 cache doubles the blocks in the same memory.
    advice, _ = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.kv_pool_gib_per_gpu"] == 10740 * 16 * 36864 / 2**30
    assert 44 <= advice.derived["derived.kv_pool_sequences"] <= 52
    fp8 = strategy_of(advice, "kv_cache_quantization")
    seqs = next(g for g in fp8.expected if g.metric == "kv_pool_sequences")
    assert seqs.after == pytest.approx(2 * seqs.before, abs=1)
    # 131,072 tokens need about 69,700 of the pool (the window on sliding layers): vLLM starts
    assert advice.derived["derived.max_len_kv_tokens"] < advice.derived["derived.kv_pool_tokens"]
    assert not any(w.rule == "W-POOL-BELOW-MAX-MODEL-LEN" for w in advice.warnings)


def test_d3_mtp_chained_three_steps_is_modelled_with_three_drafts(pack):
    # DeepSeek-R1 on 8 H200s under SGLang with --speculative-num-steps 3: each verify step carries
    # four positions and yields the measured 2.4 tokens, impossible at one draft (the model read one,
    # an ITL of 14.9 ms where 21 is measured, and asked for the acceptance the facts give).
    advice, _ = review_deployment(pack, DATA, "d3")
    assert advice.derived["derived.spec_draft_tokens"] == 3
    assert not any(w.rule == "W-SPEC-ITL-ABOVE-MODEL" for w in advice.warnings)
    assert 15 < advice.estimates["itl_expected_ms"].value < 21


def test_d2_an_options_file_kv_cache_config_carries_the_commands_memory_fraction(pack):
    # trtllm-serve merges the options file over the arguments it builds at the top level, so a YAML
    # kv_cache_config replaces the one --kv_cache_free_gpu_memory_fraction built: the fraction the
    # command gives goes into the section the script writes (here 0.9; a 0.8 would have become 0.9).
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.advice.command import read_command
    from kbopt.engine.advice.launch import build_launch
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    from kbopt.reports.emit import render_launch
    data = Path(__file__).resolve().parent / "data" / DATA
    for fraction in ("0.9", "0.8"):
        text = (data / "d2.launch").read_text().replace("--kv_cache_free_gpu_memory_fraction 0.9",
                                                         f"--kv_cache_free_gpu_memory_fraction {fraction}")
        command = read_command(text.replace("d2-extra.yaml", str(data / "d2-extra.yaml")))
        advice = advise(load_facts(next(data.glob("d2-*.json")), command.overrides()), pack, available_evaluators()[0])
        script = render_launch(build_launch(advice, "trtllm", command), advice.bottleneck)
        yaml = script.split("<<'YAML'", 1)[1].split("\nYAML\n", 1)[0]
        section = yaml.split("kv_cache_config:", 1)[1].split("\n\n", 1)[0]
        assert f"  free_gpu_memory_fraction: {fraction}" in section, fraction


def test_d6_tgi_on_ada_runs_fp8_w8a8_where_prefill_decides_the_first_token(pack):
    # Qwen2.5-7B on an L40S under TGI 3.3, TTFT p99 560 ms against 350 and prefills 30% of the math:
    # Marlin W8A16 (TGI's default on 8.x) keeps prefill at the 16-bit rate and the chunk budget then
    # took the TTFT p99 to about 680 ms; USE_CUTLASS_W8A8=1 runs it at the FP8 rate
    # (layers/fp8.py@v3.3.0:44-72), and the plan brings the TTFT p99 down instead.
    advice, script = review_deployment(pack, DATA, "d6")
    fp8 = strategy_of(advice, "quantization")
    assert fp8.params["mode"] == "w8a8" and fp8.params["cutlass_w8a8"] is True
    assert "export USE_CUTLASS_W8A8=1" in script and "--quantize fp8" in script
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.after is not None and ttft.after < ttft.value
