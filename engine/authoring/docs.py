"""Rule authoring: show a rule, write its docs, draw the rule graph, scaffold a new rule."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import assert_never

import networkx as nx

from kbopt.engine.lang.nodes import facts_of
from kbopt.engine.lang.text import describe, fmt, render
from kbopt.engine.pack.rule import Caveat, Conclusion, Derive, Mitigate, Pack, Recommend, Reject, Require, Rule, Warn
from kbopt.errors import KboptError
from kbopt.kb import citations
from kbopt.kb.catalog import LAYERS, strategies
from kbopt.kb.vocabulary import Vocabulary


def _conclusion_text(c: Conclusion) -> str:
    if isinstance(c, Derive):
        return f"derives {c.path} = {render(c.value)}"
    if isinstance(c, Recommend):
        params = ", ".join(f"{n}={render(v)}" for n, v in c.params)
        return f"recommends {c.key} (weight {c.weight:g})" + (f" with {params}" if params else "")
    if isinstance(c, Reject):
        return f"rejects {c.key}: {c.reason}"
    if isinstance(c, Caveat):
        return f"adds a caveat to {c.key}: {c.text}"
    if isinstance(c, Require):
        return f"makes {c.key} require {c.needs}"
    if isinstance(c, Mitigate):
        return f"notes that {c.by} mitigates {c.strategy}" + (f": {c.text}" if c.text else "")
    if isinstance(c, Warn):
        return f"warns: {c.text}"
    assert_never(c)     # a new kind of conclusion says here what it does


def rule_markdown(rule: Rule) -> str:
    out = [f"# {rule.id}: {rule.title}", "",
           f"- layer: {rule.layer}", f"- file: `{rule.location}`" + ("" if rule.pack == "builtin" else f" (pack `{rule.pack}`)"),
           f"- source: {citations.labels(rule.sources)}", "", "## When", "", f"`{rule.when_text}`", "",
           "In words: " + describe(rule.when) + ".", "", "## Then", ""]
    out += [f"- {_conclusion_text(c)}" for c in rule.then]
    out += ["", "## Because", "", rule.because]
    if rule.parameters:
        out += ["", "## Parameters", "", "| name | value | why |", "|---|---|---|"]
        out += [f"| `{p.name}` | {fmt(p.value)} | {p.why} |" for p in rule.parameters]
    if rule.notes:
        out += ["", "## Notes", "", rule.notes]
    out += ["", "## Examples", "", "| example | fires | facts |", "|---|---|---|"]
    out += [f"| {e.name} | {str(e.fires).lower()} | `{json.dumps(e.facts, sort_keys=True)}` |" for e in rule.examples]
    return "\n".join(out) + "\n"


def show(pack: Pack, rule_id: str) -> str:
    rule = pack.by_id().get(rule_id.upper())
    if rule is None:
        import difflib  # only to suggest a name on an error path
        close = difflib.get_close_matches(rule_id.upper(), list(pack.by_id()), n=1)
        raise KboptError(f"no rule {rule_id}" + (f"; did you mean {close[0]}?" if close else "; see `kbopt rules list`"))
    return rule_markdown(rule)


def write_docs(pack: Pack, folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    index = ["# kbopt rules", "", f"Rule pack `{pack.version}`, {len(pack.rules)} rules.", ""]
    for layer in LAYERS:
        rules = [r for r in pack.rules if r.layer == layer]
        index += [f"## {layer}", "", "| rule | title | source |", "|---|---|---|"]
        index += [f"| [{r.id}]({r.id}.md) | {r.title} | {citations.labels(r.sources)} |" for r in rules]
        index.append("")
    for rule in pack.rules:
        (folder / f"{rule.id}.md").write_text(rule_markdown(rule), encoding="utf-8")
    (folder / "index.md").write_text("\n".join(index), encoding="utf-8")
    return len(pack.rules) + 1


def rule_graph(pack: Pack) -> nx.DiGraph[str]:
    """Rules, derived facts and strategies: fact -> rule that reads it -> what it concludes."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    catalog = strategies()
    for rule in pack.rules:
        graph.add_node(rule.id, kind="rule", layer=rule.layer)
        for path in dict.fromkeys(facts_of(rule.fire_condition)):
            if Vocabulary.is_derived(path):
                graph.add_node(path, kind="derived")
                graph.add_edge(path, rule.id, kind="feeds")
        for c in rule.then:
            if isinstance(c, Derive):
                graph.add_node(c.path, kind="derived")
                graph.add_edge(rule.id, c.path, kind="derives")
            elif isinstance(c, (Recommend, Reject, Caveat, Require)):
                graph.add_node(c.key, kind="strategy")
                graph.add_edge(rule.id, c.key, kind={Recommend: "recommends", Reject: "rejects",
                                                     Caveat: "caveats", Require: "requires"}[type(c)])
    for sid, spec in catalog.items():
        for other in spec.excludes:
            if sid < other:
                graph.add_edge(sid, other, kind="excludes")
    return graph


def graph_text(pack: Pack, fmt: str) -> str:
    graph = rule_graph(pack)
    if fmt == "json":
        data = {"nodes": [{"id": n, **graph.nodes[n]} for n in sorted(graph.nodes)],
                "edges": [{"from": u, "to": v, **d} for u, v, d in sorted(graph.edges(data=True))]}
        return json.dumps(data, indent=2) + "\n"
    # a strategy named only by an `excludes` edge has no kind (None): it is drawn as plain text
    shapes: dict[str | None, str] = {"rule": "box", "derived": "ellipse", "strategy": "hexagon"}
    lines = ["digraph kbopt {", "  rankdir=LR;"]
    for node in sorted(graph.nodes):
        lines.append(f'  "{node}" [shape={shapes.get(graph.nodes[node].get("kind"), "plaintext")}];')
    for u, v, d in sorted(graph.edges(data=True)):
        style = ' style=dashed' if d["kind"] in ("excludes", "rejects") else ""
        lines.append(f'  "{u}" -> "{v}" [label="{d["kind"]}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


SCAFFOLD = """id: {id}
title: TODO one line that says what the rule concludes
layer: {layer}
# A condition over facts (`kbopt schema facts` lists them), e.g. workload.seq_len_max > 512
when: workload.seq_len_max > example_threshold
parameters:
  example_threshold:
    value: 1
    why: TODO say where the number comes from (a measurement, a document) or delete this block
then:
  # derive | recommend | reject | caveat | require | mitigate | warn (see docs/rules.md)
  - {conclusion}
because: TODO why, with the facts that matter in braces, e.g. {{workload.seq_len_max}} tokens
source: TODO seed K… or a public reference (URL)
examples:
  - name: TODO a case where it fires
    facts: {{workload: {{seq_len_max: 2048}}}}
    fires: true
  - name: TODO a case where it does not
    facts: {{workload: {{seq_len_max: 1}}}}
    fires: false
"""
CONCLUSIONS = {
    "diagnosis": 'warn: "TODO what a person should know"',
    "compute": 'caveat: {strategy: op_fusion, text: "TODO what a person should know"}',
    "storage": 'caveat: {strategy: paged_kv_cache, text: "TODO what a person should know"}',
    "scheduling": 'caveat: {strategy: continuous_batching, text: "TODO what a person should know"}',
}


def scaffold(pack_dir: str, layer: str, name: str, builtin: Pack | None = None) -> Path:
    rule_id = name.upper().replace("_", "-")
    if not re.fullmatch(r"[A-Z][A-Z0-9]*(-[A-Z0-9]+)+", rule_id):
        raise KboptError(f"rules new {name}: an id is upper-case words joined by dashes, e.g. S-CHUNKED-PREFILL")
    if builtin is not None and rule_id in builtin.by_id():
        raise KboptError(f"rules new {name}: {rule_id} is a built-in rule; to replace it, copy "
                         f"{builtin.by_id()[rule_id].file} into your pack and add `overrides: true`")
    target = Path(pack_dir) / layer / f"{rule_id.lower()}.yaml"
    if target.exists():
        raise KboptError(f"rules new: {target} exists already")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(SCAFFOLD.format(id=rule_id, layer=layer, conclusion=CONCLUSIONS[layer]), encoding="utf-8")
    return target
