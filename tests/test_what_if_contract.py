"""A --set what-if of the deployment says which measured values it kept and which it re-estimated,
and shows the change's gain rather than today's measurement held fixed (issue 29)."""
from __future__ import annotations

import json

EXAMPLE = "examples/l4-8b-bf16-vllm.json"      # BF16 on an L4, ITL measured at 62 ms


def test_a_changed_deployment_drops_todays_measurements_and_carries_the_calibration(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--format", "json")
    today = json.loads(out)
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--set", "model.weight_dtype=fp8", "--format", "json")
    fp8 = json.loads(out)
    assert code == 0
    assert fp8["what_if"]["changed"] == ["model.weight_dtype"]
    assert fp8["what_if"]["re_estimated"] == ["workload.itl_mean_ms"]
    assert fp8["what_if"]["carried"] == ["telemetry.bandwidth_efficiency", "telemetry.kv_gauge_pool_tokens",
                                         "telemetry.kv_gauge_running_batch"]
    assert "workload.requests_running_mean" in fp8["what_if"]["kept"]
    assert "workload.itl_mean_ms" not in fp8["facts"]
    assert fp8["facts"]["telemetry.bandwidth_efficiency"]["value"] == today["derived"]["derived.bandwidth_efficiency"]
    # FP8 halves the weights read each step: the what-if shows the gain, not the BF16 measurement
    assert fp8["derived"]["derived.itl_expected_ms"] < 0.7 * today["derived"]["derived.itl_expected_ms"]
    assert "what_if" not in today


def test_a_what_if_of_the_load_is_not_restated(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--set", "workload.prompt_len_mean=2400", "--format", "json")
    advice = json.loads(out)
    assert code == 0 and "what_if" not in advice and advice["facts"]["workload.itl_mean_ms"]["value"] == 62


def test_a_measurement_set_with_the_change_is_kept(run_cli):
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--set", "model.weight_dtype=fp8", "--set",
                           "workload.itl_mean_ms=40", "--format", "json")
    advice = json.loads(out)
    assert code == 0 and advice["facts"]["workload.itl_mean_ms"]["value"] == 40 and advice["what_if"]["re_estimated"] == []


def test_every_format_says_what_the_what_if_kept(run_cli):
    for fmt, shown in (("text", "--set: what-if of model.weight_dtype"), ("md", "**What-if (--set):** what-if of"),
                       ("html", 'id="what-if-restated"')):
        code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--set", "model.weight_dtype=fp8", "--format", fmt)
        assert code == 0 and shown in out and "re-estimated" in out, fmt
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--set", "model.weight_dtype=fp8", "--format", "md")
    assert "| `itl_expected_ms (ms)` |" in out      # the what-if section shows the estimates that moved
