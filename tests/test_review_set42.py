"""Expert review set 42 (Llama-3.1-8B on an L4 under TGI 3.3, DeepSeek-V2-Lite offline on an H100
under vLLM 0.12, a 70B FP8 summarizer on 4 H100s under SGLang 0.5, gpt-oss-120b on a B200 under
TensorRT-LLM 1.1): what the advice must now read. The deployments and the reviewer's notes are in
tests/data/review42."""
from __future__ import annotations

from conftest import review_deployment, script_flag, script_flags

DATA = "review42"


def test_d3_an_objective_on_the_mean_first_token_is_read_against_the_mean(pack):
    # a 500 ms objective on the mean (900 ms measured) was read against the 2,800 ms p99 (F6)
    advice, _ = review_deployment(pack, DATA, "d3")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.fact == "workload.ttft_mean_ms" and ttft.value == 900


def test_d3_no_mixed_chunks_that_lengthen_the_missed_first_token(pack):
    # SGLang's mixed chunks put the decodes in every prefill step: the mean first token 819 ->
    # 1,007 ms for an ITL nobody asked about (F1; set 41 F2)
    advice, script = review_deployment(pack, DATA, "d3")
    chunked = next(r for r in advice.rejected if r.id == "chunked_prefill")
    assert "works against the TTFT objective" in chunked.reason and "ttft expected" in chunked.reason
    assert "--enable-mixed-chunk" not in script_flags(script)


def test_d2_no_partial_script_cap_where_the_script_applies_the_whole_plan(pack):
    # "max_num_seqs=743 where the script applies only part of the plan: ... the KV pool after the
    # plan holds 556 sequences" beside a script that applies all of it at 1,280 (F11)
    advice, script = review_deployment(pack, DATA, "d2")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    assert not any("only part of the plan" in note.text for note in budget.caveats)
    assert script_flag(script, "--max-num-seqs") == "1280"


def test_d1_a_budget_that_falls_back_to_todays_setting_says_so_not_that_it_is_a_default(pack):
    # "max_num_batched_tokens=4096 is a default" where 4,096 is today's --max-batch-prefill-tokens (F9)
    advice, _ = review_deployment(pack, DATA, "d1")
    notes = [n.text for s in advice.strategies if s.id == "chunked_prefill" for n in s.caveats]
    assert any(t.startswith("max_num_batched_tokens=4096 keeps today's serving.max_num_batched_tokens") for t in notes)
    assert not any(t.startswith("max_num_batched_tokens=") and "is a default" in t for t in notes)


def test_d1_tgi_keeps_its_marlin_fp8_where_the_first_token_waits_for_kv_room(pack):
    # 88% of the first token is a queue for KV room on a full cache: decode speed drains it, and
    # TGI's Marlin W8A16 decodes faster on an L4 than CUTLASS W8A8, chosen for a 15% prefill load (F8)
    advice, script = review_deployment(pack, DATA, "d1")
    quantization = next(s for s in advice.strategies if s.id == "quantization")
    assert quantization.params.get("mode") == "weight_only" and not quantization.params.get("cutlass_w8a8")
    assert "USE_CUTLASS_W8A8" not in script_flags(script) and "--quantize fp8" in script_flags(script)


def test_d2_a_cap_raised_past_512_takes_vllms_cuda_graphs_with_it(pack):
    # vLLM 0.12 captures up to twice --max-num-seqs, at most 512: at 1,280 and about 1,000 running
    # every larger step ran eagerly, and the script said nothing (F4)
    _, script = review_deployment(pack, DATA, "d2")
    assert script_flag(script, "--max-num-seqs") == "1280"
    assert script_flag(script, "--max-cudagraph-capture-size") == "1280"


def test_vllm_011_sizes_its_graphs_with_cuda_graph_sizes(pack):
    _, script = review_deployment(pack, DATA, "d2", "serving.engine_version=0.11.0")
    assert script_flag(script, "--cuda-graph-sizes") == "1280" and "--max-cudagraph-capture-size" not in script_flags(script)


def test_d3_the_floor_names_only_levers_not_in_place(pack):
    # read against its p99, the 70B's first token cannot be met on these GPUs: the verdict named FP8
    # tensor cores and tensor parallelism on four H100s already running FP8 W8A8 at TP4 (F10)
    advice, _ = review_deployment(pack, DATA, "d3", "constraints.ttft_slo_stat=p99")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.floor is not None
    assert "FP8 tensor cores" not in ttft.text() and "tensor parallelism over more than today's 4 GPUs" in ttft.text()


def test_d4_no_cap_raise_past_a_peak_that_never_reaches_todays_cap(pack):
    # --max_batch_size 1024 -> 1364 with 800 in flight at the peak admitted nobody (F3)
    _, script = review_deployment(pack, DATA, "d4")
    assert script_flag(script, "--max_batch_size") == "1024"


def test_d4_tensorrt_llm_graphs_cover_the_batch_that_runs(pack):
    # 360 running against graphs captured to 256: about 3 ms of a 19 ms step launched eagerly, and
    # the script changed nothing (F4)
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.graph_batch_excess"] > 0
    assert "max_batch_size: 1024" in script and "256 -> 1024" in script
