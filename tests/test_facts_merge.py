"""`--facts -` reads standard input, and several --facts merge in order (issue 29): the path of
`kbopt collect … | kbopt advise --facts - --facts constraints.yaml`."""
from __future__ import annotations

import io
import json

import pytest

from kbopt.errors import FactsError
from kbopt.kb.facts import load_merged_facts

COLLECTED = {"kbopt": "facts/1",
             "hardware": {"gpu_name": "NVIDIA L4", "gpu_count": 1},
             "telemetry": {"compute_utilization": 0.3, "bandwidth_utilization": 0.75, "memory_used_ratio": 0.6},
             "model": {"params_billion": 8.0, "weight_dtype": "bf16"},
             "provenance": {"telemetry.compute_utilization": {"source": "nvml:0", "quality": "measured"}}}


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def test_standard_input_is_read_as_json_or_yaml(monkeypatch):
    _stdin(monkeypatch, json.dumps(COLLECTED))
    assert load_merged_facts(["-"]).values["hardware.gpu_name"] == "NVIDIA L4"
    _stdin(monkeypatch, "kbopt: facts/1\nhardware: {gpu_name: NVIDIA L4, gpu_count: 2}\n")
    assert load_merged_facts(["-"]).values["hardware.gpu_count"] == 2


def test_later_documents_win_fact_by_fact_with_their_provenance(monkeypatch, tmp_path):
    constraints = tmp_path / "constraints.yaml"
    constraints.write_text("kbopt: facts/1\nconstraints: {allowed_precisions: [int8]}\ntelemetry: {compute_utilization: 0.5}\n")
    _stdin(monkeypatch, json.dumps(COLLECTED))
    facts = load_merged_facts(["-", str(constraints)])
    assert facts.values["constraints.allowed_precisions"] == ["int8"]
    assert facts.values["telemetry.compute_utilization"] == 0.5           # the hand-written value wins
    assert facts.values["telemetry.bandwidth_utilization"] == 0.75        # the rest of the collection stays
    assert facts.provenance["telemetry.compute_utilization"].quality == "user"    # and so does its provenance
    _stdin(monkeypatch, json.dumps(COLLECTED))
    assert load_merged_facts([str(constraints), "-"]).provenance["telemetry.compute_utilization"].quality == "measured"


def test_an_error_names_the_document_it_is_in(monkeypatch, tmp_path):
    bad = tmp_path / "constraints.yaml"
    bad.write_text("kbopt: facts/1\nconstraints: {ttft_slo_ms: -5}\n")
    _stdin(monkeypatch, json.dumps(COLLECTED))
    with pytest.raises(FactsError, match=r"constraints.yaml.*\$\.constraints\.ttft_slo_ms"):
        load_merged_facts(["-", str(bad)])
    with pytest.raises(FactsError, match="standard input can be read once"):
        load_merged_facts(["-", "-"])


def test_advise_merges_standard_input_and_a_file(run_cli, monkeypatch, tmp_path):
    constraints = tmp_path / "constraints.yaml"
    constraints.write_text("kbopt: facts/1\nconstraints: {allowed_precisions: [int8]}\n")
    _stdin(monkeypatch, json.dumps(COLLECTED))
    code, out, _ = run_cli("advise", "--facts", "-", "--facts", str(constraints), "--format", "json")
    advice = json.loads(out)
    assert code == 0
    assert advice["facts"]["constraints.allowed_precisions"]["value"] == ["int8"]
    assert advice["facts"]["hardware.gpu_name"]["value"] == "NVIDIA L4"
    _stdin(monkeypatch, "{not json")
    code, _, err = run_cli("advise", "--facts", "-")
    assert code == 2 and err.startswith("kbopt: error: <stdin>: not valid JSON: line 1") and "Traceback" not in err
