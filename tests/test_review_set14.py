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


def test_d1_data_parallel_attention_says_it_splits_the_prefix_cache(pack):
    # DeepSeek-V3.1 on 8 H200s, 70% prefix hits on agent prompts: vLLM places a request by load
    # (v1/engine/core_client.py@0.12.0:1197-1213), so a session's prefix misses on most ranks.
    advice, _ = review_deployment(pack, DATA, "d1")
    reshape = strategy_of(advice, "parallelism")
    assert reshape is not None and reshape.params.get("dp_attention") is True
    assert any(c.rule == "C-DP-ATTENTION-SPLITS-PREFIX-CACHE" for c in reshape.caveats)
