"""Symptoms: computed from the facts, carried by the Advice and its JSON, and shown first (before
the bottleneck) in the text, Markdown and HTML reports."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.symptoms import ESTIMATED, MEASURED, Symptom, symptoms
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import load_facts
from kbopt.reports import render

ROOT = Path(__file__).resolve().parents[1]
MISSED = ROOT / "tests" / "data" / "symptoms" / "ttft-missed.json"
MET = ROOT / "examples" / "bandwidth-l40s-decode.json"      # TTFT p99 350 ms against 800 ms, nothing queued
TTFT_LINE = "TTFT p99 1,350 ms against a 1,000 ms objective (+35%)"


def _advice(pack, path, overrides=()):
    return advise(load_facts(path, list(overrides)), pack, available_evaluators()[0])


def test_measured_miss_prefers_p99_and_states_the_relative_miss():
    found = symptoms({"constraints.ttft_slo_ms": 1000, "workload.ttft_p99_ms": 1350, "workload.ttft_mean_ms": 600}, {})
    assert found == (Symptom("ttft", "workload.ttft_p99_ms", 1350, "ms", MEASURED, 1000, "constraints.ttft_slo_ms",
                             pytest.approx(0.35), label="TTFT p99"),)
    assert found[0].text() == TTFT_LINE
    mean = symptoms({"constraints.itl_slo_ms": 40, "workload.itl_mean_ms": 50}, {"derived.itl_expected_ms": 10})
    assert [(s.fact, s.source, s.text()) for s in mean] == [
        ("workload.itl_mean_ms", MEASURED, "ITL mean 50 ms against a 40 ms objective (+25%)")]


def test_a_measurement_that_meets_the_objective_hides_the_estimate():
    # measured and met: the model's (missed) estimate is not a symptom
    assert symptoms({"constraints.itl_slo_ms": 40, "workload.itl_mean_ms": 30}, {"derived.itl_expected_ms": 90}) == ()
    estimated = symptoms({"constraints.itl_slo_ms": 40}, {"derived.itl_expected_ms": 90})
    assert [(s.fact, s.source) for s in estimated] == [("derived.itl_expected_ms", ESTIMATED)]
    assert "estimated" in estimated[0].note()


def test_timeouts_preemptions_queueing_and_prefill_share_in_a_fixed_order():
    facts = {"workload.queue_timeout_ratio": 0.03, "workload.preemption_ratio": 0.08,
             "workload.requests_waiting_mean": 12, "workload.requests_running_mean": 40}
    found = symptoms(facts, {"derived.prefill_load": 0.4})
    assert [s.kind for s in found] == ["queue_timeouts", "preemptions", "queueing", "prefill_share"]
    assert [s.text() for s in found] == [
        "3% of requests time out in the queue", "0.08 KV-cache preemptions per finished request",
        "12 requests wait on average against 40 running (0.3 per running request)", "prefills take 40% of the GPU's math"]
    assert found[-1].source == ESTIMATED
    quiet = {"workload.queue_timeout_ratio": 0, "workload.preemption_ratio": 0, "workload.requests_waiting_mean": 0.2}
    assert symptoms(quiet, {"derived.prefill_load": 0.1}) == ()


def test_advice_and_json_carry_the_symptoms(pack):
    advice = _advice(pack, MISSED)
    assert [(s.kind, s.source) for s in advice.symptoms] == [("ttft", MEASURED), ("itl", ESTIMATED)]
    document = json.loads(render(advice, "json"))
    ttft, itl = document["symptoms"]
    projected = ttft.pop("after_plan", None)
    # a p99 moves as the modelled p99 (the long prompt after the queue's tail), and only where the
    # model reads today's p99 within 1.5x; here it reads 520.5 ms against 1,350 measured
    unprojected = ttft.pop("after_plan_not_projected", None)
    assert ttft == {"kind": "ttft", "fact": "workload.ttft_p99_ms", "value": 1350, "unit": "ms", "source": "measured",
                    "objective": 1000, "objective_fact": "constraints.ttft_slo_ms", "miss": 0.35,
                    **({"after_plan_basis": "derived.ttft_p99_expected_ms", "meets_after_plan": projected <= 1000} if projected else {})}
    move = next(g for g in advice.plan.expected if g.metric == "ttft_p99_expected_ms")
    if projected is not None:      # the measurement scaled as the plan moves the modelled p99
        assert projected == pytest.approx(1350 * move.after / move.before)
    else:
        assert unprojected.startswith("after the plan the model's derived.ttft_p99_expected_ms goes ")
        assert not 1 / 1.5 <= move.before / 1350 <= 1.5
    assert itl["fact"] == "derived.itl_expected_ms" and itl["source"] == "estimated" and itl["miss"] > 0
    assert json.loads(render(_advice(pack, MET), "json"))["symptoms"] == []


def _first_screen(advice, fmt):
    """What a reader sees before the bottleneck, in each format."""
    out = render(advice, fmt)
    marker = {"text": "\nbottleneck: ", "md": "**Bottleneck:**", "html": 'id="bottleneck"'}[fmt]
    assert marker in out, fmt
    return out[:out.index(marker)]


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_missed_objective_heads_every_format(pack, fmt):
    head = _first_screen(_advice(pack, MISSED), fmt)
    assert TTFT_LINE in head
    assert re.search(r"ITL expected [\d.,]+ ms against a 20 ms objective", head)
    assert "estimated" in head and "measured" in head
    assert len(head.splitlines()) < 100 if fmt == "html" else len(head.splitlines()) <= 8


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_no_symptoms_when_nothing_is_missed(pack, fmt):
    advice = _advice(pack, MET)
    assert advice.symptoms == ()
    out = render(advice, fmt)
    assert "objective (+" not in out
    assert {"text": not out.startswith("kbopt advice — bottleneck: "), "md": "**Symptoms" in out,
            "html": 'id="symptoms"' in out}[fmt] is False


def test_cli_text_first_lines(run_cli):
    code, out, _ = run_cli("advise", "--facts", str(MISSED))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "kbopt advice — symptoms (2)" and lines[1].startswith(f"  {TTFT_LINE}")
    first = " ".join(line.strip() for line in lines[1:lines.index(next(x for x in lines[2:] if x.startswith("  ITL")))])
    assert first.endswith("(measured: workload.ttft_p99_ms)") and "after the plan" in first
