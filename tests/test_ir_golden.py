"""The engine-neutral intermediate form is the contract between rule files and backends:
a golden copy pins it down, so a loader change cannot silently change what rules mean."""
from __future__ import annotations

import json
import os
from pathlib import Path

from kbopt.engine.pack.ir import pack_to_data

GOLDEN = Path(__file__).resolve().parent / "golden" / "ir.json"


def test_builtin_pack_ir_matches_the_golden_copy(pack):
    data = pack_to_data(pack)
    data.pop("version")     # a content hash of the files, covered by the IR itself
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if os.environ.get("KBOPT_UPDATE_SNAPSHOTS"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "the IR changed; rerun with KBOPT_UPDATE_SNAPSHOTS=1 if intended"


def test_ir_of_a_bottleneck_rule(pack):
    rule = next(r for r in pack_to_data(pack)["rules"] if r["id"] == "D-BOTTLENECK-COMPUTE")
    assert rule["condition"] == {"node": "And", "items": [
        {"node": "Cmp", "op": "==", "left": {"node": "Fact", "path": "derived.capacity_binding"},
         "right": {"node": "Const", "value": False}},
        {"node": "Cmp", "op": ">", "left": {"node": "Fact", "path": "telemetry.compute_utilization"},
         "right": {"node": "Fact", "path": "telemetry.bandwidth_utilization"}}]}
    assert rule["then"] == [{"node": "Derive", "path": "derived.bottleneck",
                             "value": {"node": "Const", "value": "compute_capacity"}}]
