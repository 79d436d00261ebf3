"""Rule authoring: lint, show, docs, new, graph, custom packs that override or disable rules."""
from __future__ import annotations

import json
import os
from pathlib import Path

from kbopt.diagnostics import render, render_all
from kbopt.engine.authoring.lint import lint_paths
from kbopt.engine.pack.loader import load_pack

HERE = Path(__file__).resolve().parent
EXAMPLE = str(HERE.parent / "examples" / "capacity-a100-chat.json")
LINT_SNAPSHOT = HERE / "golden" / "lint.txt"
# Warnings the built-in pack may carry: a derived fact that reports read before any rule does.
# Ties (L401), rules that cannot fire and examples that never fire or never fail are not allowed.
ALLOWED_BUILTIN_WARNINGS = {"L203"}


def test_builtin_pack_lints_clean(run_cli, pack):
    findings, checked = lint_paths([])
    assert [render(f) for f in findings if f.severity == "error"] == []
    assert [render(f) for f in findings if f.severity == "warning" and f.code not in ALLOWED_BUILTIN_WARNINGS] == []
    assert checked == len(pack.rules)
    code, out, _ = run_cli("rules", "lint")
    assert code == 0 and "0 error(s)" in out


def test_lint_findings_on_the_fixture_pack_match_the_snapshot(monkeypatch):
    """The snapshot pins lint on tests/lint_pack: only that pack's findings, so the built-in rules
    it is layered over may grow without changing it."""
    monkeypatch.chdir(HERE.parent)
    findings, _ = lint_paths(["tests/lint_pack"])
    found = render_all(f for f in findings if f.file.startswith("tests/lint_pack/"))
    if os.environ.get("KBOPT_UPDATE_SNAPSHOTS"):
        LINT_SNAPSHOT.write_text(found)
    assert found == LINT_SNAPSHOT.read_text(), "lint output changed; rerun with KBOPT_UPDATE_SNAPSHOTS=1 if intended"
    for code in ("L101", "L102", "L201", "L202", "L401"):
        assert any(f.code == code for f in findings), code


def test_disabling_every_producer_of_a_fact_leaves_the_rules_needing_it_unable_to_fire(tmp_path, pack):
    # Every producer, found in the pack, so that a new rule deriving the fact changes nothing here.
    producers = pack.producers["derived.launch_bound"]
    needing = {r.file for r in pack.rules if "derived.launch_bound" in r.when_text and r.id not in producers}
    assert producers and needing
    entries = "".join(f"  - {{id: {rule_id}, why: testing}}\n" for rule_id in producers)
    findings, _ = lint_paths([_pack(tmp_path, {"disable.yaml": f"disable:\n{entries}"})])
    unable = {f.file for f in findings if f.code == "L202"}
    assert unable and unable <= needing         # a rule may still fire through another alternative


def test_lint_of_the_fixture_pack_on_the_command_line(run_cli, monkeypatch):
    monkeypatch.chdir(HERE.parent)
    code, out, _ = run_cli("rules", "lint", "tests/lint_pack")
    assert code == 2
    ours = [rule for rule in load_pack(['tests/lint_pack']).rules if rule.pack != "builtin"]
    assert f"in {len(ours)} rule(s)" in out
    assert "tests/lint_pack/diagnosis/x-never-true.yaml:4" in out


def test_lint_reports_every_broken_file_not_just_the_first(run_cli, tmp_path):
    layer = tmp_path / "pack" / "diagnosis"
    layer.mkdir(parents=True)
    for source, rule_id in (("unknown-fact.yaml", "X-UNKNOWN-FACT"), ("ratio-threshold.yaml", "X-RATIO")):
        text = (HERE / "broken_rules" / source).read_text().replace("X-BROKEN-RULE", rule_id)
        (layer / f"{rule_id.lower()}.yaml").write_text(text)
    code, out, _ = run_cli("rules", "lint", str(tmp_path / "pack"))
    assert code == 2 and out.count("error[L005]") == 2
    assert "error[L005]: when: unknown fact 'telemetry.memory_use_ratio'\n  --> " in out
    assert "x-unknown-fact.yaml:4:1\n4 | when: telemetry.memory_use_ratio > 0.9" in out
    assert "= help: did you mean 'telemetry.memory_used_ratio'?" in out
    assert out.rstrip().endswith("2 error(s): the rules did not load, so none was checked further")


def test_show_explains_a_rule_in_words(run_cli):
    code, out, _ = run_cli("rules", "show", "d-capacity-memory-full")
    assert code == 0
    assert "In words: telemetry.memory_used_ratio is above 0.9 (capacity_threshold) and " \
           "derived.preallocated does not hold." in out
    assert "| `capacity_threshold` | 0.9 |" in out and "rules/diagnosis/d-capacity-memory-full.yaml:1" in out
    code, _, err = run_cli("rules", "show", "D-CAPACITY-MEMORY-FUL")
    assert code == 2 and "did you mean D-CAPACITY-MEMORY-FULL" in err


def test_docs_one_page_per_rule_and_an_index(run_cli, tmp_path, pack):
    code, _, _ = run_cli("rules", "docs", "-o", str(tmp_path / "docs"))
    pages = sorted(p.name for p in (tmp_path / "docs").iterdir())
    assert code == 0 and pages == sorted([f"{r.id}.md" for r in pack.rules] + ["index.md"])
    assert "[D-BOTTLENECK-CAPACITY](D-BOTTLENECK-CAPACITY.md)" in (tmp_path / "docs" / "index.md").read_text()


def test_new_scaffolds_a_rule_that_loads_and_lint_flags_its_todos(run_cli, tmp_path):
    code, out, _ = run_cli("rules", "new", "storage", "s-my-first-rule", "--dir", str(tmp_path))
    path = tmp_path / "storage" / "s-my-first-rule.yaml"
    assert code == 0 and path.is_file()
    code, out, _ = run_cli("rules", "lint", str(tmp_path))
    assert "error[L303]" in out and code == 2
    code, out, _ = run_cli("rules", "test", str(tmp_path))
    assert code == 0 and ", 0 failed" in out                       # the scaffold's examples already run
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--rules", str(tmp_path))
    assert code == 2 and "TODO placeholders" in err                # a scaffold is never used as advice
    code, _, err = run_cli("rules", "new", "storage", "S-PAGED-KV-CAPACITY", "--dir", str(tmp_path))
    assert code == 2 and "is a built-in rule" in err and "overrides: true" in err
    code, _, err = run_cli("rules", "new", "storage", "s-my-first-rule", "--dir", str(tmp_path))
    assert code == 2 and "exists already" in err


def test_graph_links_facts_rules_and_strategies(run_cli):
    _, out, _ = run_cli("rules", "graph", "--format", "json")
    graph = json.loads(out)
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert ("D-CAPACITY-MEMORY-FULL", "derived.capacity_binding", "derives") in edges
    assert ("derived.capacity_binding", "D-BOTTLENECK-CAPACITY", "feeds") in edges
    assert ("S-PAGED-KV-CAPACITY", "paged_kv_cache", "recommends") in edges
    assert ("paged_kv_cache", "static_kv_preallocation", "excludes") in edges
    _, dot, _ = run_cli("rules", "graph")
    assert dot.startswith("digraph kbopt {") and '"R-FP8-NEEDS-AMPERE" -> "quantization[fp8]"' in dot


def _pack(tmp_path, files: dict[str, str]) -> str:
    root = tmp_path / "pack"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return str(root)


def test_a_pack_may_override_a_builtin_rule_explicitly(run_cli, tmp_path):
    original = (HERE.parent / "rules" / "diagnosis" / "d-capacity-memory-full.yaml").read_text()
    stricter = original.replace("telemetry.memory_used_ratio > capacity_threshold", "telemetry.memory_used_ratio > 0.95")
    pack = _pack(tmp_path, {"diagnosis/d-capacity-memory-full.yaml": stricter})
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack)
    assert code == 2 and "duplicate rule id D-CAPACITY-MEMORY-FULL" in err and "overrides: true" in err
    (Path(pack) / "diagnosis" / "d-capacity-memory-full.yaml").write_text("overrides: true\n" + stricter)
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack, "--format", "json")
    assert code == 0, err
    advice = json.loads(out)
    assert advice["bottleneck"] != "memory_capacity"        # 0.93 is no longer over the threshold


def test_a_pack_may_disable_a_builtin_rule(run_cli, tmp_path):
    pack = _pack(tmp_path, {"disable.yaml": "disable:\n  - {id: C-FP8-WEIGHT-ONLY-AMPERE, why: testing}\n"})
    code, out, _ = run_cli("advise", "--facts", EXAMPLE, "--rules", pack, "--format", "json")
    advice = json.loads(out)
    assert code == 0 and "C-FP8-WEIGHT-ONLY-AMPERE" not in {f["rule"] for f in advice["fired"]}
    pack2 = _pack(tmp_path / "b", {"disable.yaml": "disable:\n  - {id: R-NOT-A-RULE, why: testing}\n"})
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack2)
    assert code == 2 and "cannot disable R-NOT-A-RULE" in err


def test_the_worked_example_pack_lints_tests_and_advises(run_cli):
    pack = str(HERE.parent / "examples" / "packs" / "vllm-tuning")
    code, out, _ = run_cli("rules", "lint", pack)
    assert code == 0 and "0 error(s)" in out
    code, out, _ = run_cli("rules", "test", pack)
    assert code == 0 and ", 0 failed" in out
    facts = str(HERE.parent / "examples" / "packs" / "vllm-tuning" / "vllm-h100-chat.json")
    code, out, _ = run_cli("advise", "--facts", facts, "--rules", pack, "--format", "json")
    advice = json.loads(out)
    assert code == 0
    fired = {f["rule"] for f in advice["fired"]}
    assert {"V-CHUNKED-PREFILL-BUDGET", "V-FP8-KV-CACHE"} <= fired


def test_advise_refuses_a_pack_that_lint_rejects(run_cli, tmp_path):
    text = (HERE / "lint_pack" / "diagnosis" / "x-never-true.yaml").read_text()
    pack = _pack(tmp_path, {"diagnosis/x-never-true.yaml": text})
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack)
    assert code == 2 and out == ""
    assert err.startswith("kbopt: error[L201]: the condition can never be true\n")
    assert "x-never-true.yaml:4\n" in err


def test_lint_reads_packs_from_the_environment(run_cli, tmp_path, monkeypatch):
    text = (HERE / "lint_pack" / "diagnosis" / "x-never-true.yaml").read_text()
    monkeypatch.setenv("KBOPT_RULES", _pack(tmp_path, {"diagnosis/x-never-true.yaml": text}))
    code, out, _ = run_cli("rules", "lint")
    assert code == 2 and "L201" in out


def test_a_pack_may_retune_a_shared_parameter_explicitly(run_cli, tmp_path):
    pack = _pack(tmp_path, {"parameters.yaml": "parameters:\n  capacity_threshold: {value: 0.95, why: our SLO leaves headroom}\n"})
    code, _, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack)
    assert code == 2 and "already defined" in err and "overrides: true" in err
    Path(pack, "parameters.yaml").write_text(
        "parameters:\n  capacity_threshold: {value: 0.95, why: our SLO leaves headroom, overrides: true}\n")
    code, out, err = run_cli("advise", "--facts", EXAMPLE, "--rules", pack, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["bottleneck"] != "memory_capacity"       # 0.93 is under the retuned 0.95


def test_retired_ids_as_a_list(run_cli, tmp_path):
    text = (HERE / "lint_pack" / "diagnosis" / "x-old-id.yaml").read_text().replace("seed K99.9", "seed K3.8")
    pack = _pack(tmp_path, {"diagnosis/x-old-id.yaml": text, "retired.yaml": "retired: [X-OLD-ID]\n"})
    code, out, _ = run_cli("rules", "lint", pack)
    assert code == 2 and "X-OLD-ID is a retired id" in out


def test_docs_into_a_file_is_exit_2(run_cli, tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    code, _, err = run_cli("rules", "docs", "-o", str(target))
    assert code == 2 and "cannot write there" in err


def test_lint_checks_example_facts_and_expectations(run_cli, tmp_path):
    text = (HERE / "broken_rules" / "valid.yaml").read_text().replace("X-BROKEN-RULE", "X-EXAMPLES") \
        .replace("{memory_used_ratio: 0.95}}\n    fires: true", "{memory_used_ratio: 95}}\n    fires: true\n"
                 "    expect: {chosen: [continous_batching]}")
    pack = _pack(tmp_path, {"diagnosis/x-examples.yaml": text})
    code, out, _ = run_cli("rules", "lint", pack)
    assert code == 2 and "L304" in out and "write 0.95" in out
    assert "L305" in out and "did you mean 'continuous_batching'?" in out


def test_no_tie_warning_when_derived_facts_keep_two_rules_apart(run_cli, tmp_path):
    # S-PAGED-KV-VARIABLE-LENGTHS needs derived.variable_lengths, which needs seq_len_max > 512.
    rule = """id: S-STATIC-SHORT
title: Static slots for short maxima
layer: storage
when: workload.seq_len_max <= 512 and workload.task == "generation"
then:
  - recommend: {strategy: static_kv_preallocation, weight: 2, params: {slot_tokens: "= workload.seq_len_max"}}
because: Short sequences ({workload.seq_len_max} tokens) fit static slots.
source: seed K4.4
examples:
  - {name: short, facts: {workload: {seq_len_max: 256, task: generation}}, fires: true}
  - {name: long, facts: {workload: {seq_len_max: 4096, task: generation}}, fires: false}
"""
    code, out, _ = run_cli("rules", "lint", _pack(tmp_path, {"storage/s-static-short.yaml": rule}))
    assert code == 0 and "L401" not in out


def test_l502_speaks_of_a_level_split_by_size_not_of_levels_alone(pack):
    """Chained rules run in levels, which is no news; L502 says when a level needs several
    durable_rules rulesets (each one more assert per evaluation)."""
    from kbopt.engine.authoring.lint import _limits
    from kbopt.engine.authoring.synthetic import synthetic_pack
    from kbopt.engine.evaluators.durable import RULESET_SIZE, compile_pack
    small = synthetic_pack(50)
    assert len({r["level"] for r in compile_pack(small)}) > 1          # chained: several levels
    assert _limits(small) == []                                         # ... and no level split
    levels: dict = {}
    for ruleset in compile_pack(pack):
        levels.setdefault(ruleset["level"], []).append(len(ruleset["rules"]) - 1)
    split = [sizes for sizes in levels.values() if len(sizes) > 1]
    assert split and all(max(sizes) <= RULESET_SIZE for sizes in split)
    (finding,) = _limits(pack)
    assert finding.code == "L502" and f"{len(split)} level(s) split" in finding.message


ITL_RATIO_PACK = Path(__file__).parent / "data" / "packs" / "itl-ratio"


def test_a_pack_declares_its_own_derived_facts_and_tests_arithmetic_through_them(run_cli, tmp_path):
    """A pack's derived.yaml declares derived.<pack>.<name>: a rule derives it with arithmetic on
    facts (ITL over its objective) and another compares it with a parameter, on both evaluators."""
    code, out, err = run_cli("rules", "test", str(ITL_RATIO_PACK))
    assert code == 0 and ", 0 failed" in out, out + err
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"kbopt": "facts/1", "workload": {"itl_mean_ms": 100}, "constraints": {"itl_slo_ms": 20}}))
    outputs = set()
    for evaluator in ("reference", "durable", "durable"):         # the second durable run reads the pack cache
        code, out, err = run_cli("advise", "--facts", str(facts), "--rules", str(ITL_RATIO_PACK), "--format", "json",
                                 "--evaluator", evaluator)
        assert code == 0, err
        advice = json.loads(out)
        assert advice["derived"]["derived.itl_ratio.itl_over_slo"] == 5
        assert any(w["rule"] == "X-ITL-WARN" for w in advice["warnings"])
        outputs.add(out)
    assert len(outputs) == 1
    # a derived fact the pack does not declare is refused, and the message says where to declare it
    undeclared = tmp_path / "undeclared" / "scheduling"
    undeclared.mkdir(parents=True)
    (undeclared / "x-itl-far-over.yaml").write_text((ITL_RATIO_PACK / "scheduling" / "x-itl-far-over.yaml").read_text()
                                       .replace("derived.itl_ratio.itl_over_slo", "derived.undeclared.ratio"))
    code, out, _ = run_cli("rules", "lint", str(undeclared.parent))
    assert code == 2 and "'derived.undeclared.ratio' is not a derived fact" in out and "derived.yaml" in out, out
    # a malformed declaration names its file and line
    broken = tmp_path / "broken"
    (broken / "scheduling").mkdir(parents=True)
    (broken / "derived.yaml").write_text("derived:\n  ratio: {type: text, description: x}\n")
    (broken / "scheduling" / "x-itl-far-over.yaml").write_text((ITL_RATIO_PACK / "scheduling" / "x-itl-far-over.yaml").read_text())
    code, out, _ = run_cli("rules", "lint", str(broken))
    assert code == 2 and "derived.yaml:2" in out and "needs `type`" in out, out
    (broken / "derived.yaml").write_text("derived:\n  ratio: {type: number, description: x, min: low}\n")
    code, out, _ = run_cli("rules", "lint", str(broken))
    assert code == 2 and "derived.yaml:2" in out and "numbers `min` and `max`" in out, out


def test_lint_of_a_custom_pack_speaks_of_that_pack(run_cli):
    # the built-in rules' own warnings are not the pack author's (a newcomer saw 11 under 2 rules)
    code, out, _ = run_cli("rules", "lint", str(HERE.parent / "examples" / "packs" / "vllm-tuning"))
    assert code == 0 and "rules/diagnosis" not in out
    assert out.rstrip().endswith("0 error(s), 0 warning(s) in 3 rule(s)")
