"""The engine-neutral intermediate form is the contract between rule files and backends.

One small fixture rule per language construct (tests/fixtures/ir/<name>.yaml) and its golden IR
beside it (tests/golden/ir/<name>.json), as ansible-rulebook keeps a golden AST per example: a
loader or parser change cannot silently change what a construct means, and adding a rule to the
built-in pack changes no golden. KBOPT_UPDATE_SNAPSHOTS=1 rewrites the goldens.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kbopt.engine.pack.files import PackDir, read_parameters
from kbopt.engine.pack.ir import pack_to_data, rule_to_data
from kbopt.engine.pack.loader import build_pack, load_rule_text

HERE = Path(__file__).resolve().parent
FIXTURES = sorted((HERE / "fixtures" / "ir").glob("*.yaml"))
GOLDEN = HERE / "golden" / "ir"
# The fixtures' own shared parameters: retuning rules/parameters.yaml must change no golden.
SHARED = read_parameters(PackDir("fixtures", HERE / "fixtures", "fixtures", ()), problems := [])
assert not problems, problems


def _load(path: Path):
    return load_rule_text(path.read_text(encoding="utf-8"), f"fixtures/ir/{path.name}", shared=SHARED)


def _text(data) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _node_kinds(data) -> set[str]:
    """Every IR node kind, comparison operator and function name in some IR data."""
    found = set()
    if isinstance(data, dict):
        if "node" in data:
            found.add(data["node"])
            if data["node"] in ("Cmp", "Arith"):
                found.add(f"{data['node']} {data['op']}")
            if data["node"] == "Call":
                found.add(f"Call {data['fn']}")
        for value in data.values():
            found |= _node_kinds(value)
    elif isinstance(data, list):
        for value in data:
            found |= _node_kinds(value)
    return found


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture_ir_matches_its_golden_copy(path):
    golden = GOLDEN / f"{path.stem}.json"
    text = _text(rule_to_data(_load(path)))
    if os.environ.get("KBOPT_UPDATE_SNAPSHOTS"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"no golden IR for {path.name}; run with KBOPT_UPDATE_SNAPSHOTS=1 to write it"
    assert text == golden.read_text(), f"the IR of {path.name} changed; rerun with KBOPT_UPDATE_SNAPSHOTS=1 if intended"


def test_every_golden_has_its_fixture():
    # A golden left behind by a renamed fixture would pin nothing.
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(p.stem for p in FIXTURES)


# A golden pins the form but not that the form means what the fixture says: each fixture's own
# examples run in the conformance corpus (test_conformance.py) on every evaluator, in a pack that
# holds that fixture alone (so the built-in pack's rules can neither help nor disturb it).


def test_the_fixtures_cover_every_construct_the_builtin_pack_uses(pack):
    """A construct the built-in pack relies on must have a fixture pinning its IR; the pack may
    grow with rules made of known constructs without touching any golden."""
    pinned = set().union(*(_node_kinds(json.loads((GOLDEN / f"{p.stem}.json").read_text())) for p in FIXTURES))
    used = _node_kinds(pack_to_data(pack)["rules"])
    assert used - pinned == set(), "add a fixture under tests/fixtures/ir/ for these constructs"


def test_ir_of_a_comparison_of_two_facts():
    # Written out once by hand, so that a reader sees the shape the goldens hold.
    rule = rule_to_data(_load(HERE / "fixtures" / "ir" / "cmp-fact.yaml"))
    assert rule["condition"] == {"node": "And", "items": [
        {"node": "Cmp", "op": ">", "left": {"node": "Fact", "path": "telemetry.compute_utilization"},
         "right": {"node": "Fact", "path": "telemetry.bandwidth_utilization"}},
        {"node": "Cmp", "op": ">", "left": {"node": "Fact", "path": "workload.ttft_p99_ms"},
         "right": {"node": "Fact", "path": "constraints.ttft_slo_ms"}}]}
    assert rule["then"] == [{"node": "Warn", "text": "Compute leads and the first token is late."}]


def test_pack_ir_lists_the_producers_of_each_derived_fact():
    rules = [_load(HERE / "fixtures" / "ir" / name) for name in ("derive-literal.yaml", "functions.yaml", "cmp-literal.yaml")]
    data = pack_to_data(build_pack(rules, "fixture"))
    assert [r["id"] for r in data["rules"]] == ["X-DERIVE-LITERAL", "X-FUNCTIONS", "X-CMP-LITERAL"]
    assert data["producers"]["derived.bottleneck"] == ["X-DERIVE-LITERAL"]
    assert data["producers"]["derived.seq_len_cv"] == ["X-FUNCTIONS"]
    assert data["version"] == "fixture"


def test_builtin_pack_ir_is_plain_json(pack):
    # Every backend reads this form; it must survive a JSON round trip unchanged.
    data = pack_to_data(pack)
    assert json.loads(json.dumps(data)) == data
    assert [r["id"] for r in data["rules"]] == [r.id for r in pack.rules]
