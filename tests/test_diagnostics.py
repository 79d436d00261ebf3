"""Diagnostics: one value and one renderer for load errors and lint findings, codes from one registry."""
from __future__ import annotations

import re
from pathlib import Path

from kbopt.codes import CODES, page
from kbopt.diagnostics import SEVERITIES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "capacity-a100-chat.json")
VALID = (ROOT / "tests" / "broken_rules" / "valid.yaml").read_text()


def test_the_codes_page_is_generated_from_the_registry():
    assert (ROOT / "docs" / "lint-codes.md").read_text() == page(), \
        "docs/lint-codes.md is stale: run `python -m kbopt.codes > docs/lint-codes.md`"


def test_every_code_in_the_source_is_registered_and_documented():
    used = {code for path in (ROOT / "engine").rglob("*.py") for code in re.findall(r'"(L\d{3})"', path.read_text())}
    assert used and used <= set(CODES)
    for code in CODES.values():
        assert re.fullmatch(r"L\d{3}", code.code) and code.severity in SEVERITIES
        assert code.title and len(code.explanation) > 60, code.code


def _pack(tmp_path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_the_loader_reports_every_broken_file_of_every_kind_in_one_pass(run_cli, tmp_path):
    pack = _pack(tmp_path, {
        "diagnosis/x-broken-rule.yaml": VALID.replace("telemetry.memory_used_ratio > 0.9", "telemetry.memory_use_ratio > 0.9")
                                             .replace("memory_capacity}", "capacity}"),
        "diagnosis/x-empty.yaml": "",
        "parameters.yaml": "parameters:\n  capacity_threshold: {value: 0.95, why: tighter}\n",
        "disable.yaml": "disable:\n  - {id: R-NOT-A-RULE, why: gone}\n",
        "retired.yaml": "retired: 3\n",
    })
    code, out, _ = run_cli("rules", "lint", pack)
    found = re.findall(r"error\[(L\d+)\]: .*\n +--> (\S+)", out)
    assert code == 2 and sorted(found) == sorted([
        ("L006", f"{pack}/parameters.yaml:2"), ("L004", f"{pack}/retired.yaml:1:1"),
        ("L006", f"{pack}/disable.yaml:2"), ("L005", f"{pack}/diagnosis/x-broken-rule.yaml:4:1"),
        ("L005", f"{pack}/diagnosis/x-broken-rule.yaml:6:14"), ("L003", f"{pack}/diagnosis/x-empty.yaml:1")]), out
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack)
    assert code == 2 and out == "" and err.startswith("kbopt: error[L") and \
        err.rstrip().endswith(f"5 more error(s): run `kbopt rules lint {pack}` to see them all")


def test_advise_runs_only_the_error_checks(monkeypatch, tmp_path):
    from kbopt.engine.authoring import lint
    from kbopt.engine.pack.packs import load_checked_pack
    monkeypatch.setattr(lint, "_ties", lambda *args: (_ for _ in ()).throw(AssertionError("tie check on advise")))
    pack = _pack(tmp_path, {"diagnosis/x-broken-rule.yaml": VALID})
    assert "X-BROKEN-RULE" in load_checked_pack([pack]).by_id()
