"""Expert review set 40 (TensorRT-LLM 1.1 serving a 70B FP8 on 4 H100s, TGI 3.3.4 on an A10G, vLLM 0.12
with 32k contexts on an H200, a 1B model at 300 requests a second on vLLM 0.13): what the advice must
now read. The deployments and the reviewer's notes are in tests/data/review40."""
from __future__ import annotations

from conftest import review_deployment, script_flag

DATA = "review40"


def test_d1_no_max_utilization_where_the_batch_cap_is_what_queues_requests(pack):
    # 126 running under --max_batch_size 128: the cap queues them, not the admission policy, and
    # pausing requests under MAX_UTILIZATION has crashed the PyTorch backend (F1)
    advice, script = review_deployment(pack, DATA, "d1")
    assert all(s.id != "admission_policy" for s in advice.strategies)
    assert "MAX_UTILIZATION" not in script


def test_d4_more_api_servers_where_most_of_the_first_token_is_spent_outside_the_engine(pack):
    # 90 of 110 ms outside the engine's model at 300 requests a second, a 620 ms p99 against 250:
    # the absolute 100 ms gate left --api-server-count out (F3)
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.ttft_outside_engine_share"] > 0.5
    assert "--api-server-count 4" in script


def test_d2_the_ttft_miss_says_the_p99_prompts_own_prefill_is_past_the_objective(pack):
    # a 6,000-token p99 prompt on an A10G (70 TFLOP/s) takes about 1.5 s to prefill, at the 1,500 ms
    # objective before any wait; the advice left the miss with no verdict (F5)
    advice, _ = review_deployment(pack, DATA, "d2")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.floor is not None and 1_500 < ttft.floor < 2_000 and ttft.floor <= ttft.value
    assert "the plan's settings cannot meet it on these GPUs" in ttft.text()
    assert ttft.to_dict()["prefill_after_plan"] == ttft.floor


def test_a_prefill_modelled_past_the_measured_first_token_is_no_floor(pack):
    # set 11 d2: the model prices the p99 prompt's prefill at 1,418 ms where the TTFT p99 measured
    # 1,400 ms: the model's error, not a floor the plan cannot beat
    advice, _ = review_deployment(pack, "review11", "d2")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert ttft.floor is None and "cannot meet it" not in ttft.text()


def test_d4_a_cap_that_binds_at_no_load_is_not_raised(pack):
    # 108 run under vLLM's 256 and 260 are in flight at the peak on a host-bound 1B model: the raise
    # to 325 was action 1, above the API servers that treat the bottleneck (F2)
    advice, script = review_deployment(pack, DATA, "d4")
    batching = next(s for s in advice.strategies if s.id == "continuous_batching")
    assert batching.status == "keep" and batching.params["max_batch_size"] == 256
    assert script_flag(script, "--max-num-seqs") == "256"
    assert next(s for s in advice.strategies if s.status == "change").id == "api_servers"


def test_d4_a_host_bound_engine_streaming_thousands_of_tokens_a_second_gets_a_stream_interval(pack):
    # 12,000 output tokens a second at 300 requests a second on a host-bound vLLM 0.13: kbopt did not
    # know --stream-interval (config/scheduler.py@0.12.0:138), a one-flag host lever (F8)
    advice, script = review_deployment(pack, DATA, "d4")
    stream = next(s for s in advice.strategies if s.id == "stream_interval")
    assert stream.status == "change" and stream.params["tokens"] == 10
    assert script_flag(script, "--stream-interval") == "10"


def test_d4_the_plan_keeps_async_schedulings_overlap_beside_the_batching_in_place(pack):
    # continuous batching's restated host step (= derived.host_step_ms) overrode async scheduling's
    # overlap in the plan: the symptom read "the plan does not move it" beside an action that moved
    # the TTFT p99 26% (F11)
    advice, _ = review_deployment(pack, DATA, "d4")
    ttft = next(s for s in advice.symptoms if s.kind == "ttft")
    assert "the plan does not move it" not in ttft.text() and "not projected" in ttft.text()
    plan = {g.metric: g for g in advice.plan.expected}
    assert plan["ttft_p99_expected_ms"].after < plan["ttft_p99_expected_ms"].before * 0.8


def test_d1_no_default_is_noted_for_a_parameter_no_engine_sets(pack):
    # "timeout_ms=10 is a default: constraints.ttft_slo_ms not known" on TensorRT-LLM, which has no
    # batching timeout (kbopt itself prints "no equivalent"): noise (F12)
    advice, _ = review_deployment(pack, DATA, "d1")
    notes = [n.text for s in advice.strategies for n in s.caveats]
    assert not any(t.startswith("timeout_ms=") and "is a default" in t for t in notes)
    assert any("timeout_ms: no equivalent" in line for s in advice.strategies for lines in s.settings.values() for line in lines)
