"""Expert review set 38 (Mixtral on 2 A100s under vLLM 0.11, multi-turn chat on SGLang 0.5.4, TGI
on an L4, a 70B at low load on 8 H100s): what the advice must now read. The deployments and the
reviewer's notes are in tests/data/review38."""
from __future__ import annotations

from conftest import review_deployment, script_flags

DATA = "review38"


def test_d1_vllm_011_picks_its_own_backend_for_an_fp8_cache_before_hopper(pack):
    # forcing VLLM_ATTENTION_BACKEND=FLASHINFER on 0.11 fails at start where the vllm[flashinfer]
    # extra is not installed, and 0.11 reads an FP8 cache on sm80 with its Triton kernel (F1)
    _, script = review_deployment(pack, DATA, "d1")
    assert "--kv-cache-dtype fp8" in script_flags(script)
    assert "VLLM_ATTENTION_BACKEND" not in script_flags(script)


def test_d1_a_change_harmful_alone_is_told_by_figures_that_show_the_harm(pack):
    # the cap was judged at the 143 sequences today's pool holds and printed at the 596 the plan's
    # pool holds: "works against the TTFT objective: ttft expected 8,635 -> 2,475 ms (-71.3%)" (F3)
    advice, _ = review_deployment(pack, DATA, "d1")
    budget = next(s for s in advice.strategies if s.id == "memory_budget")
    assert "works against the TTFT objective" in budget.alone
    figures = budget.alone.split("ttft expected ", 1)[1].split(" ms", 1)[0]
    before, after = (float(x.replace(",", "")) for x in figures.split(" → "))
    assert after > before


def test_d3_replicas_are_judged_on_the_figure_the_plan_prints(pack):
    # "not needed ... ITL p99 420 -> about 87.6 ms" beside a symptom of 147.1 ms after the plan (F4)
    advice, _ = review_deployment(pack, DATA, "d3")
    itl = next(s for s in advice.symptoms if s.kind == "itl")
    rejection = next(r for r in advice.rejected if r.id == "scale_out")
    assert f"ITL p99 420 -> about {itl.after:,.1f} ms" in rejection.reason


def test_d1_the_script_applies_online_fp8_while_the_int8_checkpoint_is_made(pack):
    # INT8 W8A8 outranked online FP8 on two A100s, and the script, which cannot load an INT8
    # checkpoint until one is made, applied neither: a flag before a new checkpoint (F2, F12)
    advice, script = review_deployment(pack, DATA, "d1")
    by_key = {s.key: s for s in advice.strategies}
    assert by_key["quantization[int8]"].status == "change" and not by_key["quantization[int8]"].stands_in_for
    fp8 = by_key["quantization[fp8]"]
    assert fp8.status == "change" and fp8.stands_in_for == "quantization[int8]"
    assert all(r.key != "quantization[fp8]" for r in advice.rejected)
    # the plan's figures are the INT8 checkpoint's; the stand-in is the script's alone
    assert advice.plan is not None and "quantization[fp8]" not in advice.plan.strategies
    assert "quantization[int8]" in advice.plan.strategies
    # set only while MODEL is today's checkpoint: the INT8 one names its own method
    runs = script_flags(script)
    bound = runs.split('if [ "$MODEL" = "$MODEL_DEFAULT" ]; then', 1)
    assert len(bound) == 2 and "--quantization fp8" in bound[1] and "--quantization" not in bound[0]
    assert "until the quantization[int8] one exists" in script
    assert "applied here: quantization[fp8]" in script and "not applied by this script: quantization[int8]" in script
    data = advice.to_dict()
    assert [s["stands_in_for"] for s in data["strategies"] if "stands_in_for" in s] == ["quantization[int8]"]


def test_d4_fp8_weights_for_an_itl_objective_whatever_the_bottleneck_label(pack):
    # labelled overhead at 38% bandwidth use, 5.3 ms of a 12.2 ms step reads 16-bit weights against
    # a 10 ms ITL objective, and no FP8 was advised (F7): the weights' share of the step decides
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.bottleneck == "overhead"
    assert 0.3 <= advice.derived["derived.weight_read_share"] <= 0.6
    fp8 = next(s for s in advice.strategies if s.key == "quantization[fp8]")
    assert fp8.status == "change" and "--quantization fp8" in script_flags(script)
    itl = next(g for g in fp8.expected if g.metric == "itl_expected_ms")
    assert itl.after < itl.before * 0.8


def test_d3_int4_competes_under_an_itl_objective_and_loses_on_the_objectives(pack):
    # INT4 was allowed and never weighed because the label read memory_capacity (F11): it is now a
    # candidate, left out with the figures that decided it
    advice, _ = review_deployment(pack, DATA, "d3")
    int4 = next(r for r in advice.rejected if r.key == "quantization[int4]")
    assert "S-QUANT-INT4-LATENCY" in int4.because or "serves the objectives better" in int4.reason
    assert "ITL p99" in int4.reason


def test_d4_async_scheduling_beside_eagle3_from_vllm_0_12(pack, tmp_path):
    # vLLM 0.13 takes --async-scheduling beside an EAGLE-family method (config/vllm.py@0.13.0:542-563),
    # where the catalog kept the two apart for every version (F8); 0.11 refuses it beside any method
    advice, script = review_deployment(pack, DATA, "d4")
    keys = {s.key for s in advice.strategies}
    assert {"async_scheduling", "speculative_decoding[eagle3]"} <= keys
    flags = script_flags(script)
    assert "--async-scheduling" in flags and '"method": "eagle3"' in flags
    older, _ = review_deployment(pack, DATA, "d4", "serving.engine_version=0.11.0")
    assert not {"async_scheduling", "speculative_decoding[eagle3]"} <= {s.key for s in older.strategies}


def test_d3_the_tgi_fp8_caveat_names_the_trade_the_script_makes(pack):
    # the script set USE_CUTLASS_W8A8=1 (mode w8a8) while the caveat below the strategy said the W8A8
    # math rate "does not apply here (mode weight_only)" (F6)
    advice, script = review_deployment(pack, DATA, "d3")
    fp8 = next(s for s in advice.strategies if s.key == "quantization[fp8]")
    assert fp8.params["mode"] == "w8a8" and "USE_CUTLASS_W8A8=1" in script
    caveat = next(n.text for n in fp8.caveats if n.rule == "C-FP8-WEIGHT-ONLY-TGI-ADA")
    assert "Where the plan sets USE_CUTLASS_W8A8=1 (mode w8a8" in caveat and "does not apply here" not in caveat


def test_d1_a_chunk_budget_whose_prompts_would_outrun_their_lane_waits_for_the_int8_weights(pack):
    # at 1,038 tokens beside today's 16-bit step the prefill lane's load goes 0.98 -> 1.16: prompts
    # arrive faster than the lane starts them, a queue M/D/1's capped wait read as finite (set 37 F3)
    advice, script = review_deployment(pack, DATA, "d1")
    chunked = next(s for s in advice.strategies if s.id == "chunked_prefill")
    assert "prefill lane's load goes" in chunked.alone and "faster than the lane starts them" in chunked.alone
    assert "--max-num-batched-tokens" not in script_flags(script)
