"""Expert review set 9: eight deployments a reviewer wrote (tests/data/review9, two per engine,
each with today's launch command, TensorRT-LLM's with its options file), and what the advice must
now read for the defects the review found."""
from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from conftest import review_deployment, strategy_of


def _deployment(pack, name: str):
    return review_deployment(pack, "review9", name)


def test_d4_a_multi_lora_sglang_command_is_read_and_relaunched_with_every_adapter(pack):
    # --lora-paths takes several values (nargs="*", server_args.py@0.5.0rc2:1299-1305): the second
    # adapter was read as a second model and a command that starts was refused with exit 2.
    advice, script = _deployment(pack, "d4")
    line = next(line for line in script.splitlines() if line.strip().startswith("--lora-paths"))
    assert shlex.split(line.split("#", 1)[0])[1:] == ["support=/loras/support", "sql=/loras/sql", "summarize=/loras/summarize"]
    assert strategy_of(advice, "memory_budget") is not None


def test_d7_a_chunk_budget_that_would_take_the_missed_ttft_objective_further_keeps_todays(pack):
    # Llama-3.1-8B on an L4 under TGI, TTFT p99 6 s against 2 s and ITL p99 1 s against 80 ms: the
    # budget sized after the plan for the ITL objective (96 tokens) tripled the modelled first
    # token; the model reads today's TTFT low, so the objective had been dropped from the judgment.
    advice, script = _deployment(pack, "d7")
    chunked = strategy_of(advice, "chunked_prefill")
    assert chunked.status == "keep" and chunked.params["max_num_batched_tokens"] == 4096
    assert any("stays: the value sized after the plan" in c.text and "TTFT objective" in c.text for c in chunked.caveats)
    assert "--max-batch-prefill-tokens 96" not in script


def test_d7_tgi_gets_no_batch_cap_it_ignores_while_chunking_and_no_prefix_caching_it_has(pack):
    # backends/v3/src/backend.rs@v3.3.0:175-184: no batch-size bound while chunking; the launcher
    # turns prefix caching on by default (launcher/src/main.rs@v3.3.0:133-199).
    advice, script = _deployment(pack, "d7")
    assert strategy_of(advice, "batch_cap") is None
    assert [r.because for r in advice.rejected if r.id == "batch_cap"] == [("R-TGI-BATCH-CAP-CHUNKING",)]
    assert strategy_of(advice, "prefix_caching").status == "keep"
    assert "PREFIX_CACHING" not in script.split("set -euo pipefail", 1)[0]


def test_d3_no_data_parallel_attention_under_a_latency_objective(pack):
    # DeepSeek-V3 on 8 H200s at about 5 requests a rank, a 50 ms ITL p99 objective: the gather among
    # ranks and the slowest rank take back the KV reads data-parallel attention saves.
    advice, script = _deployment(pack, "d3")
    assert strategy_of(advice, "parallelism") is None
    assert "--enable-dp-attention" not in script
    # SGLang runs a mixed step without a CUDA graph (set 13): 61 MoE layers of eager launches,
    # about 60 ms, leave no chunk budget under the 50 ms objective, so no mixed chunks, and MTP
    # (which turns mixing off) is free to take the mean ITL down
    assert [r.because[0] for r in advice.rejected if r.id == "chunked_prefill"] == ["R-SGLANG-MIXED-CHUNK-MEETS-NOTHING"]
    assert "--enable-mixed-chunk" not in script
    assert strategy_of(advice, "speculative_decoding").key == "speculative_decoding[mtp]"


def test_d5_d6_todays_trtllm_options_file_is_carried_into_the_script(pack):
    for name in ("d5", "d6"):
        _, script = _deployment(pack, name)
        written = yaml.safe_load(script.split("<<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0])
        today = yaml.safe_load((Path(__file__).resolve().parent / "data" / "review9" / f"{name}-extra.yaml").read_text())
        for key, value in today.items():
            if key == "cuda_graph_config":
                continue     # the plan may size its batch to the new cap
            if isinstance(value, dict):   # today's keys stay; the advice may add its own beside them
                assert value.items() <= written.get(key, {}).items(), (name, key)
            else:
                assert written.get(key) == value, (name, key)
        assert f"{name}-extra.yaml" not in script


def test_d4_a_throughput_cap_goes_to_what_the_pool_holds_up_to_the_engines_default(pack):
    # Qwen2.5-7B with LoRA on an L40S, a throughput objective, 16 running against a cap of 16: the
    # cap followed the requests in flight (16 -> 38) while the pool held about 340 sequences; under
    # a throughput objective it goes to the engine's default (256 on GPUs under 70 GiB, vLLM's
    # arg_utils.py@0.12.0:1836-1845) where the pool holds that many.
    advice, script = _deployment(pack, "d4")
    budget = strategy_of(advice, "memory_budget")
    assert budget.params["max_num_seqs"] == 256
    assert advice.derived["derived.max_batch_kv"] >= 256
    assert "--max-running-requests 256" in script


def test_d5_trtllm_chunking_that_would_split_no_prompt_is_not_advised(pack):
    # gpt-oss-120b on a B200, prompt p99 2,500 tokens under an 8,192-token max_num_tokens and no
    # ITL objective: enable_chunked_prefill changes nothing. (Under its throughput objective the
    # seed's default TTFT budget no longer fires a chunk budget at all (set 12); where it is
    # recommended, R-CHUNKING-SPLITS-NOTHING rejects it, as its examples hold.)
    advice, script = _deployment(pack, "d5")
    assert strategy_of(advice, "chunked_prefill") is None
    assert {r.because[0] for r in advice.rejected if r.id == "chunked_prefill"} <= {"R-CHUNKING-SPLITS-NOTHING"}
    assert "enable_chunked_prefill" not in script


def test_d3_mtp_on_sglang_pays_the_host_time_its_overlap_scheduler_no_longer_hides(pack):
    # DeepSeek-V3 FP8 on 8 H200s: the reviewer's hand arithmetic gave 21-22 ms with MTP (overlap
    # scheduler off under EAGLE/NEXTN, server_args.py@0.5.0rc2:591-596), where kbopt said 19 ms; its
    # verify step also reads the experts its 4 positions a sequence touch (set 25 F2, M-SPEC-MOE-READ),
    # which that arithmetic left out: about a ms more.
    advice, _ = _deployment(pack, "d3")
    assert 20.5 <= advice.derived["derived.spec_itl_ms"] <= 24.0
    assert advice.derived["derived.spec_weight_read_scale"] > 1.05
    mtp = Path(__file__).resolve().parent.parent / "rules" / "scheduling" / "s-speculative-mtp.yaml"
    assert "--speculative-num-steps 3" in mtp.read_text()


def test_d8_a_bf16_native_model_is_not_told_fp16_is_not_allowed_and_the_ignored_flag_is_named(pack):
    # Qwen2.5-32B AWQ on an A100 with bf16 allowed: the 16-bit checkpoint is judged on its numbers,
    # and --max-waiting-tokens, which TGI's v3 router ignores while chunking, gets a note.
    advice, script = _deployment(pack, "d8")
    assert not any(r.because == ("R-FP16-NOT-ALLOWED",) for r in advice.rejected)
    sixteen = next(r for r in advice.rejected if r.key == "quantization[fp16]")
    assert sixteen.reason.startswith("harmful")
    assert "# --max-waiting-tokens: ignored wherever the model chunks prefills" in script
