"""Expert review set 12: eight deployments a reviewer wrote (tests/data/review12, two per engine,
each with today's launch command), and what the advice must now read for the defects it found."""
from __future__ import annotations

import pytest
from conftest import migrated_script, review_deployment, script_flags, strategy_of

from kbopt.engine.advice.command import read_command

DATA = "review12"


def test_d8_tgi_never_turns_prefix_caching_on_beside_lora_adapters(pack):
    # Llama-3.1-8B with four LoRA adapters on an L40S: TGI's radix cache keys on token ids alone
    # (backends/v3/src/radix.rs@v3.3.0:81-95), which is why its launcher turns caching off under
    # --lora-adapters (launcher/src/main.rs@v3.3.0:156-158); PREFIX_CACHING=1 served one adapter's
    # prompts from another's KV blocks.
    advice, script = review_deployment(pack, DATA, "d8")
    assert advice.facts["serving.lora"] is True
    assert strategy_of(advice, "prefix_caching") is None
    assert [r.because[0] for r in advice.rejected if r.id == "prefix_caching"] == ["R-TGI-PREFIX-CACHING-LORA"]
    assert "PREFIX_CACHING=1" not in script and "--lora-adapters" in script_flags(script)


def test_d8_a_migration_names_the_flags_it_does_not_carry(pack):
    # --emit vllm from TGI's command: the LoRA adapters have no fact to travel by, and the script
    # said nothing of losing them.
    advice, _ = review_deployment(pack, DATA, "d8")
    script = migrated_script(advice, DATA, "d8", "vllm")
    header = next(line for line in script.splitlines() if "NOT carried to vLLM" in line)
    assert "--lora-adapters" in header and "--port" not in header and "--num-shard" not in header
    assert "--tensor-parallel-size 1" in script and "--port 8080" in script     # what a fact carries does travel (set 14: the port too)


def test_d2_a_budget_sized_under_vllms_default_is_a_change_with_its_itl_gain(pack):
    # Qwen3-32B-AWQ on two RTX 4090s, no --max-num-batched-tokens: today's budget is vLLM's default
    # (2,048 below 70 GiB, arg_utils.py@0.10.2:1669-1684). The 192-token budget the ITL objective
    # needs was shown as "in place, nothing set" and the script said "changes: none".
    advice, script = review_deployment(pack, DATA, "d2")
    chunks = strategy_of(advice, "chunked_prefill")
    assert chunks.status == "change" and chunks.params["max_num_batched_tokens"] < 2048
    assert f"--max-num-batched-tokens {chunks.params['max_num_batched_tokens']}" in script_flags(script)
    applied = next(line for line in script.splitlines() if line.startswith("#   applied here: chunked_prefill"))
    assert "itl p99 expected" in applied                 # the gain it exists for, not only its TTFT cost
    gain = next(g for g in chunks.expected if g.metric == "itl_p99_expected_ms")
    assert gain.after < 0.5 * gain.before


def test_d7_no_batch_cap_raise_tgi_ignores_while_it_chunks(pack):
    # Mixtral-8x7B on two H100s under TGI: its router ignores --max-batch-size while it chunks
    # (backends/v3/src/backend.rs@v3.3.0:175-184); 48 -> 584 came back through memory_budget.
    advice, script = review_deployment(pack, DATA, "d7")
    assert advice.derived["derived.prefill_chunks_mixed"] is True
    assert "S-BATCH-CAP-RAISE" not in {f.rule for f in advice.fired}
    assert "--max-batch-size 48" in script_flags(script)       # today's, carried
    assert strategy_of(advice, "quantization").params["scheme"] == "fp8"


def test_d6_a_ttft_p99_is_not_projected_under_the_long_prompts_own_prefill(pack):
    # Llama-3.1-8B on an A100 with 24k-token RAG prompts (p99 60k): the model's TTFT p99 read 116 s
    # where 12 s is measured, and its ratio projected 683 ms after the plan, under a mean prompt's
    # prefill. It reads 31.5 s now (the busiest window's mean wait, not 4.6 times it), within 3x; a
    # model that reads today's value high claims no margin from it (its own after-value stands), and
    # the projection is at least the p99 prompt's own prefill after the plan: 2.5 x the mean's.
    advice, _ = review_deployment(pack, DATA, "d6")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    prefill_after = next(g.after for g in advice.plan.expected if g.metric == "prefill_ms")
    model_after = next(g.after for g in advice.plan.expected if g.metric == "ttft_p99_expected_ms")
    assert ttft.after == pytest.approx(max(model_after, prefill_after * 60000 / 24000)) and ttft.after > ttft.objective


def test_d5_mtp_is_not_vetoed_for_a_p99_the_model_reads_four_times_low(pack):
    # DeepSeek-R1 FP8 on 8 H200s, ITL 25 ms against 20: MTP takes the mean to 13.8 ms; it was
    # rejected for a p99 modelled at 25 ms (95 ms measured) that rose past its 1% step-share threshold.
    advice, script = review_deployment(pack, DATA, "d5")
    mtp = strategy_of(advice, "speculative_decoding")
    assert mtp is not None and mtp.key == "speculative_decoding[mtp]" and mtp.status == "change"
    itl = next(g for g in mtp.expected if g.metric == "itl_expected_ms")
    assert itl.after < 20 < itl.before
    assert '"decoding_type": "MTP"' in script


def test_d5_data_parallel_attention_goes_under_a_latency_objective(pack):
    # DeepSeek-R1 at 3 requests a rank: each rank read its whole attention a step (about 10 GB
    # more than a TP8 slice, M-ACTIVE-WEIGHT-BYTES-MOE), and nothing turned the throughput
    # recipe's enable_attention_dp off.
    advice, script = review_deployment(pack, DATA, "d5")
    assert 54e9 < advice.derived["derived.active_weight_bytes_per_gpu"] < 57e9     # 45.6 GB slice + 9.9 GB replicated
    reshape = strategy_of(advice, "parallelism")
    assert reshape.params["dp_attention"] is False and reshape.status == "change"
    assert "enable_attention_dp: false" in script_flags(script)
    itl = next(g for g in reshape.expected if g.metric == "itl_expected_ms")
    assert itl.after < itl.before


def test_d3_a_queued_offline_job_gets_no_chunk_budget_for_its_ttft(pack):
    # gpt-oss-120b on an H200 under a throughput objective: a TTFT of queue wait fired the seed's
    # 500 ms default budget, and with it a chunk budget at SGLang's own default and mixed chunks.
    advice, script = review_deployment(pack, DATA, "d3")
    assert "derived.slow_first_token" not in advice.derived
    assert strategy_of(advice, "chunked_prefill") is None
    assert "--enable-mixed-chunk" not in script and "--chunked-prefill-size" not in script_flags(script)
    cap = strategy_of(advice, "memory_budget")
    assert cap.params["max_num_seqs"] > 128                                     # the cap that binds is raised


def test_d7_tgi_captures_graphs_up_to_the_running_batch(pack):
    # TGI 3.3 captures batch sizes 1 to 32 by default (launcher/src/main.rs@v3.3.0:2158-2173): 58
    # running requests stepped eagerly, which nothing modelled.
    advice, script = review_deployment(pack, DATA, "d7")
    assert advice.derived["derived.cuda_graph_max_batch"] == 32
    graphs = strategy_of(advice, "cuda_graphs")
    assert graphs.status == "change" and graphs.params["max_batch"] >= 58
    line = next(line for line in script_flags(script).splitlines() if "--cuda-graphs" in line)
    sizes = [int(s) for s in line.split()[1].split(",")]
    assert sizes[:6] == [1, 2, 4, 8, 16, 32] and sizes == sorted(sizes) and sizes[-1] >= 58


def test_a_tgi_graph_list_in_todays_command_states_its_largest_batch():
    command = read_command("text-generation-launcher --model-id m --cuda-graphs 1,2,4,8,16,32,64")
    assert dict(command.facts)["serving.cuda_graph_max_batch"] == 64
    assert "serving.cuda_graph_max_batch" not in dict(read_command("text-generation-launcher --model-id m --cuda-graphs 0").facts)
