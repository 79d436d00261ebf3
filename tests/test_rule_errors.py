"""Broken rule files give clear errors naming the file and line; the texts are snapshot-tested."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbopt.diagnostics import render_all
from kbopt.engine.pack.loader import load_rule_text
from kbopt.errors import RuleError

HERE = Path(__file__).resolve().parent
BROKEN = sorted(p for p in (HERE / "broken_rules").glob("*.yaml") if p.name != "valid.yaml")
SNAPSHOT = HERE / "golden" / "rule_errors.txt"


def _message(path: Path) -> str:
    try:
        load_rule_text(path.read_text(), f"broken_rules/{path.name}")
    except RuleError as error:
        return render_all(error.diagnostics)
    return "(loaded without error)\n\n"


def test_the_valid_base_loads():
    rule = load_rule_text((HERE / "broken_rules" / "valid.yaml").read_text(), "valid.yaml")
    assert rule.id == "X-BROKEN-RULE"


def test_error_messages_match_the_snapshot():
    found = "".join(_message(p) for p in BROKEN)
    if os.environ.get("KBOPT_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(found)
    assert found == SNAPSHOT.read_text(), "rule error messages changed; rerun with KBOPT_UPDATE_SNAPSHOTS=1 if intended"


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_every_broken_file_is_refused_with_its_location(path):
    message = _message(path)
    assert f"--> broken_rules/{path.name}:" in message, message
    assert message.startswith("error[L00"), message
    assert "Traceback" not in message


def test_a_broken_custom_pack_makes_advise_exit_2(run_cli, tmp_path):
    layer = tmp_path / "pack" / "diagnosis"
    layer.mkdir(parents=True)
    (layer / "x-broken-rule.yaml").write_text((HERE / "broken_rules" / "unknown-fact.yaml").read_text())
    examples = HERE.parent / "examples" / "capacity-a100-chat.json"
    code, out, err = run_cli("advise", "--facts", str(examples), "--rules", str(tmp_path / "pack"))
    assert code == 2 and out == ""
    assert err.startswith("kbopt: error[L005]: when: unknown fact 'telemetry.memory_use_ratio'\n")
    assert "x-broken-rule.yaml:4:1\n4 | when: telemetry.memory_use_ratio > 0.9\n" in err


def test_a_custom_pack_adds_rules_and_is_cited(run_cli, tmp_path):
    layer = tmp_path / "pack" / "diagnosis"
    layer.mkdir(parents=True)
    (layer / "x-broken-rule.yaml").write_text((HERE / "broken_rules" / "valid.yaml").read_text()
                                             .replace("derived.bottleneck: memory_capacity", "derived.queue_timeouts: true"))
    examples = HERE.parent / "examples" / "capacity-a100-chat.json"
    code, out, _ = run_cli("advise", "--facts", str(examples), "--rules", str(tmp_path / "pack"), "--format", "md", "--explain")
    assert code == 0 and "X-BROKEN-RULE" in out


def test_duplicate_ids_across_packs(run_cli, tmp_path):
    layer = tmp_path / "pack" / "diagnosis"
    layer.mkdir(parents=True)
    text = (Path(__file__).resolve().parents[1] / "rules" / "diagnosis" / "d-bottleneck-capacity.yaml").read_text()
    (layer / "d-bottleneck-capacity.yaml").write_text(text)
    code, _, err = run_cli("rules", "list", "--rules", str(tmp_path / "pack"))
    assert code == 2 and "duplicate rule id D-BOTTLENECK-CAPACITY" in err


def test_invalid_example_facts_fail_that_example_with_its_location(pack):
    from kbopt.engine.authoring.examples import check_example
    rule = load_rule_text((HERE / "data" / "bad-example-facts.yaml").read_text(), "data/bad-example-facts.yaml")
    result = check_example(rule, rule.examples[0], pack, "reference")
    assert result.location == "data/bad-example-facts.yaml:10"
    assert "write 0.95" in result.failures[0]


def _pack_with(tmp_path, name: str, text: str | bytes) -> Path:
    layer = tmp_path / "pack" / "diagnosis"
    layer.mkdir(parents=True)
    target = layer / name
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return tmp_path / "pack"


def test_a_rule_file_that_is_not_utf8_is_exit_2(run_cli, tmp_path):
    pack = _pack_with(tmp_path, "x-broken-rule.yaml", b"id: X-BROKEN-RULE\ntitle: caf\xe9\n")
    code, _, err = run_cli("rules", "list", "--rules", str(pack))
    assert code == 2 and "not UTF-8" in err


def test_a_derived_value_of_the_wrong_type_is_exit_2(run_cli, tmp_path):
    text = (HERE / "broken_rules" / "valid.yaml").read_text().replace(
        "derive: {derived.bottleneck: memory_capacity}", "derive: {derived.long_sequence_heavy: '= telemetry.memory_used_ratio * 2'}")
    pack = _pack_with(tmp_path, "x-broken-rule.yaml", text)
    examples = HERE.parent / "examples" / "capacity-a100-chat.json"
    code, _, err = run_cli("advise", "--facts", str(examples), "--rules", str(pack), "--evaluator", "reference")
    assert code == 2 and "computes derived.long_sequence_heavy = 1.86: not true or false" in err


def test_conflicting_derivations_name_both_rules_in_pack_order(run_cli, tmp_path):
    text = (HERE / "broken_rules" / "valid.yaml").read_text().replace(
        "derive: {derived.bottleneck: memory_capacity}", "derive: {derived.bottleneck: compute_capacity}")
    pack = _pack_with(tmp_path, "x-broken-rule.yaml", text)
    examples = HERE.parent / "examples" / "capacity-a100-chat.json"
    messages = set()
    from kbopt.engine.evaluators import available_evaluators
    for engine in available_evaluators():
        code, _, err = run_cli("advise", "--facts", str(examples), "--rules", str(pack), "--evaluator", engine)
        assert code == 2
        messages.add(err)
    assert messages == {"kbopt: error: rules D-BOTTLENECK-CAPACITY and X-BROKEN-RULE derive different values for "
                        "derived.bottleneck (memory_capacity vs compute_capacity); make their conditions exclusive\n"}
