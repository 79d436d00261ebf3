"""Expert review set 31: four deployments a reviewer wrote (vLLM 0.12 serving Llama-3.1-8B FP8 on an
H100 already tuned, meeting both objectives with margin; TGI 3.3 with Llama-3.1-8B on an L40S for
JSON-schema extraction; TensorRT-LLM 1.1 with Llama-3.3-70B FP8 on an H200 with EAGLE-3 under an
ITL objective; vLLM 0.12 with gpt-oss-120b on an H200 whose cap of 64 queues its peaks;
tests/data/review31, with today's launch commands and hand arithmetic in NOTES.md), and what the
advice must now read for the defects it found."""
from __future__ import annotations

import pytest
from conftest import review_deployment, script_flag, strategy_of

DATA = "review31"


def test_d1_a_cap_that_does_not_bind_is_not_lowered_on_a_deployment_meeting_its_objectives(pack):
    # 14 run on average and 24 at the peak against --max-num-seqs 128, both objectives met (ITL p99
    # 22 ms against 40, TTFT p99 190 against 500): the fluctuating-load rule sized the cap to 32,
    # which only queues the bursts past it
    advice, script = review_deployment(pack, DATA, "d1")
    assert script_flag(script, "--max-num-seqs") == "128"
    assert "--max-num-seqs: 128 ->" not in script
    batching = strategy_of(advice, "continuous_batching")
    assert batching is None or batching.status == "keep"


def test_d3_an_itl_cap_under_todays_running_batch_goes_to_the_peak_not_the_mean(pack):
    # 12 run on average and 22 at the peak: no cap meets the 20 ms ITL p99 without queueing what
    # runs today, and a cap of 12 (the mean) queues about 10 requests at every peak for a whole
    # request's decode each
    _, script = review_deployment(pack, DATA, "d3")
    # (today's 64 stays: the peak of 22 is under it, so no lower cap would bind at a load measured)
    assert int(script_flag(script, "--max_batch_size")) >= 22


def test_d4_a_cap_full_at_the_peak_prices_the_wait_for_a_slot_in_the_first_tokens_tail(pack):
    # 150 in flight at the peak against --max-num-seqs 64: the 86 past it wait for slots that free
    # as requests finish (M-SLOT-WAIT-PEAK); the TTFT p99 read 340 ms where 6.5 s is measured, and
    # the raise that removes the wait read as +1.4%
    advice, script = review_deployment(pack, DATA, "d4")
    assert advice.derived["derived.slot_wait_peak_ms"] > 3000
    raise_ = strategy_of(advice, "memory_budget")
    assert raise_ is not None and int(script_flag(script, "--max-num-seqs")) >= 150
    tail = next(g for g in raise_.expected if g.metric == "ttft_p99_expected_ms")
    assert tail.after < 0.2 * tail.before


def test_d2_the_hosts_share_of_a_step_is_not_priced_as_bandwidth(pack):
    # TGI builds each request's grammar mask in a Python loop every step (logits_process.py@v3.3.0:
    # 575-594): kernels run 55% of the time at 38 running, so 45% of the 70 ms between tokens is
    # host time. Absorbed into the calibrated bandwidth efficiency, it priced every byte saved at
    # that rate (FP8 weights -27.5%; the reviewer's hand figure about -19%).
    advice, _ = review_deployment(pack, DATA, "d2")
    assert advice.derived["derived.host_step_ms"] == pytest.approx(70 * 0.45, rel=0.01)
    fp8 = next(g for g in strategy_of(advice, "quantization").expected if g.metric == "itl_expected_ms")
    assert -0.23 < fp8.change < -0.15
    # and the graphs a batch past TGI's 32 lacks take the launches off, not the host's grammar work
    graphs = next(g for g in strategy_of(advice, "cuda_graphs").expected if g.metric == "itl_expected_ms")
    assert -0.1 < graphs.change < 0


def test_d2_leaving_tgi_is_argued_by_the_host_time_it_measures(pack):
    # the only argument for leaving TGI had been its maintenance mode; 31 ms of each 70 ms step on
    # the host is the one an engine with GPU-side grammar masks and asynchronous scheduling answers
    advice, _ = review_deployment(pack, DATA, "d2")
    move = strategy_of(advice, "engine_migration")
    assert move is not None and move.params["to"] == "vllm"
    assert "S-MIGRATE-TGI-HOST-BOUND" in move.because


def test_measured_host_time_sizes_asynchronous_scheduling(pack):
    # set 29 d2: Qwen2.5-1.5B at 300 requests a second, kernels 34% of the time at 80 running, about
    # 7.9 ms of each 12 ms step on the host. --async-scheduling overlaps the host's work with the GPU's
    # step (review set 33: it was offered only under an "overhead" label, with no estimate)
    advice, script = review_deployment(pack, "review29", "d2")
    assert advice.derived["derived.host_step_ms"] > 5
    overlap = strategy_of(advice, "async_scheduling")
    assert overlap is not None and "--async-scheduling" in script
    step = next(g for g in overlap.expected if g.metric == "decode_step_expected_ms")
    host = advice.derived["derived.host_step_ms"]
    # the step becomes the longer of the GPU's part and the host's: at most the host time comes off
    assert step.before - host - 0.01 <= step.after < step.before
