"""Expert review set 27: four deployments a reviewer wrote to see whether the emitted scripts start
(TensorRT-LLM 1.0 with an extra-options YAML on 4 H100s, TGI 3.3 on an MI300X, SGLang 0.5.1 with
DeepSeek-V3 under DP attention and EP on 8 H200s, vLLM 0.10.2 with pipeline parallelism over 2 nodes
of A100s; tests/data/review27, with today's launch commands and hand arithmetic in NOTES.md), and
what the advice must now read for the defects it found."""
from __future__ import annotations

from conftest import changed_deployment, review_deployment, script_flags, strategy_of

DATA = "review27"


def test_d2_tgi_fp8_drops_todays_dtype_which_every_shard_refuses_beside_quantize(pack):
    # TGI's shards raise "Only 1 can be set between `dtype` and `quantize`" for any --quantize but
    # bitsandbytes (server/text_generation_server/cli.py@v3.3.0:110-118), and the launcher passes both
    _, script = review_deployment(pack, DATA, "d2")
    ran = script_flags(script)
    assert "--quantize fp8" in ran and "--dtype" not in ran
    assert "--dtype: bfloat16 -> (removed)" in script


def test_d1_the_worse_missed_itl_may_take_the_first_token_and_says_how_to_keep_it(pack):
    # ITL p99 60 ms against 30 (2.0x) and TTFT p99 1,900 against 1,000 (1.9x): the ITL comes first,
    # the chunk budget is the trade toward it, and the facts can put the first token first instead
    _, script = review_deployment(pack, DATA, "d1")
    assert "--max_num_tokens" in script_flags(script)


def test_d1_with_the_first_token_first_the_budget_is_not_cut(pack, tmp_path):
    advice = changed_deployment(pack, DATA, "d1", tmp_path, constraints__objective_first="ttft")
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked is None or chunked.params.get("max_num_batched_tokens", 8192) >= 2048
    assert any(r.id == "chunked_prefill" and "constraints.objective_first: itl" in r.reason for r in advice.rejected)


def test_d4_a_pipelined_replicas_prefill_load_counts_every_stage(pack):
    # PP2 x TP4 on two A100 nodes: each request's prefill passes both stages in turn, while the stages
    # work on different requests at once: 8 GPUs of math, 44% busy by hand (read 83% on TP4 alone,
    # which named the bottleneck compute and kept FP8 weight-only, which halves the decode reads, out)
    advice, script = review_deployment(pack, DATA, "d4")
    assert 0.35 <= advice.derived["derived.prefill_load"] <= 0.5
    assert advice.bottleneck == "memory_bandwidth"
    assert "--quantization fp8" in script_flags(script)


def test_d4_a_flag_the_version_lacks_sets_no_fact_aside(run_cli):
    # vLLM 0.10.2 spans nodes through Ray, with no --nnodes (the profile has it from 0.12.0): the
    # facts' serving.nodes = 2 was set aside as if vLLM ran a default
    from pathlib import Path
    data = Path(__file__).resolve().parent / "data" / DATA
    code, _, err = run_cli("advise", "--facts", str(next(data.glob("d4-*.json"))), "--launch", f"@{data / 'd4.launch'}")
    assert code == 0 and "--nnodes" not in err
