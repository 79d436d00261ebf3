"""The engine-neutral intermediate form as plain, sorted data: the contract between the rule
files and any backend. Golden copies under tests/golden/ pin it down."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from kbopt.engine.pack.rule import Pack, Rule


def node_to_data(node: Any) -> Any:
    if is_dataclass(node):
        out = {"node": type(node).__name__}
        for f in fields(node):
            value = getattr(node, f.name)
            if value is None or (value is False and f.name == "negated"):
                continue
            out[f.name] = node_to_data(value)
        return out
    if isinstance(node, (list, tuple)):
        return [node_to_data(v) for v in node]
    return node


def rule_to_data(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "layer": rule.layer,
        "condition": node_to_data(rule.fire_condition),
        "then": [node_to_data(c) for c in rule.then],
        "parameters": {p.name: p.value for p in rule.parameters},
        "sources": list(rule.sources),
    }


def pack_to_data(pack: Pack) -> dict[str, Any]:
    return {"version": pack.version, "rules": [rule_to_data(r) for r in pack.rules],
            "producers": {k: list(v) for k, v in pack.producers.items()}}
