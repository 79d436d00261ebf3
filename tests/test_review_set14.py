"""Expert review set 14: eight deployments a reviewer wrote (tests/data/review14, two per engine,
each with today's launch command), and what the advice must now read for the defects it found."""
from __future__ import annotations

from conftest import migrated_script, review_deployment, script_flags, strategy_of

DATA = "review14"


def test_d3_data_parallel_copies_are_not_read_as_tensor_parallelism(pack):
    # SGLang --dp-size 2 on 2 H100s: two copies of Llama-3.1-8B, one GPU each. The model read TP 2,
    # and --tp-size 2 added beside --dp-size 2 asked for 4 GPUs (data_parallel_controller.py@0.5.0rc2:125-150).
    advice, script = review_deployment(pack, DATA, "d3")
    assert advice.derived["derived.tensor_parallel"] == 1
    assert strategy_of(advice, "parallelism") is None
    assert "--tp-size" not in script_flags(script) and "--dp-size 2" in script_flags(script)
    migrated = script_flags(migrated_script(advice, DATA, "d3", "vllm"))
    assert "--tensor-parallel-size 2" not in migrated and "--port 30000" in migrated and "--host 0.0.0.0" in migrated


def test_d5_a_raised_batch_cap_takes_the_cuda_graphs_with_it(pack):
    # TensorRT-LLM: --max_batch_size 64 -> 195 left cuda_graph_config.max_batch_size at 64, so the
    # larger batches would step eagerly.
    advice, script = review_deployment(pack, DATA, "d5")
    cap = strategy_of(advice, "batch_cap").params["max_num_seqs"]
    assert f"--max_batch_size {cap}" in script
    assert f"  max_batch_size: {cap}" in script.split("<<'YAML'", 1)[1].split("\nYAML\n", 1)[0]


def test_d1_data_parallel_attention_at_48_running_stalls_every_rank_on_one_ranks_prefill(pack):
    # DeepSeek-V3.1 on 8 H200s at 48 running, 1.4 requests a second: under DP attention a prompt's
    # 2,400 uncached tokens of attention (MLA prefilled as 128 heads of 192, 16-bit over a BF16
    # cache) run on one rank, about 270 ms against 47 ms spread over TP 8, and the ranks step
    # together (the experts' all-to-all), so each such prefill stalls all of them: the step's
    # prefill share goes 2.8 -> 16 ms and the replica serves fewer tokens than arrive. FP8 KV and
    # the memory budget give the pool its room instead.
    advice, _ = review_deployment(pack, DATA, "d1")
    assert strategy_of(advice, "parallelism") is None
    rejected = next(r for r in advice.rejected if r.key == "parallelism")
    assert rejected.reason.startswith("harmful") and "service tokens 1,100 →" in rejected.reason
    assert strategy_of(advice, "kv_cache_quantization") is not None


def test_d1_data_parallel_attention_says_it_splits_the_prefix_cache(pack):
    # The same deployment out of KV (97% used, 10% preempted, 40 waiting): DP attention's 8x latent
    # pool pays, and vLLM places a request by load (v1/engine/core_client.py@0.12.0:1197-1213), so a
    # session's prefix misses on most ranks.
    from pathlib import Path

    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import available_evaluators
    from kbopt.kb.facts import load_facts
    facts = next((Path(__file__).parent / "data" / DATA).glob("d1-*.json"))
    pressed = ["workload.requests_running_mean=64", "workload.requests_waiting_mean=40", "workload.arrival_rate_per_s=2.5",
               "workload.arrival_rate_peak_per_s=3", "workload.generation_tokens_per_s=1400", "workload.preemption_ratio=0.1",
               "telemetry.kv_cache_usage_ratio=0.97", "serving.max_num_seqs=64"]
    advice = advise(load_facts(facts, pressed), pack, available_evaluators()[0])
    reshape = strategy_of(advice, "parallelism")
    assert reshape is not None and reshape.params.get("dp_attention") is True
    assert any(c.rule == "C-DP-ATTENTION-SPLITS-PREFIX-CACHE" for c in reshape.caveats)
