"""Plain-text advice for a terminal."""
from __future__ import annotations

import textwrap
from collections.abc import Iterable

from kbopt.engine.advice.model import Advice
from kbopt.engine.lang.text import fmt
from kbopt.kb import sources
from kbopt.reports.common import (
    bottleneck_evidence,
    chain,
    check_text,
    facts_to_collect,
    origin_detail,
    origin_text,
    params_text,
    rejection_label,
)

WIDTH = 100


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def _proof(advice: Advice, rule_ids: Iterable[str], indent: str) -> list[str]:
    lines = []
    for depth, firing in chain(advice, rule_ids):
        pad = indent + "  " * depth + ("<- " if depth else "")
        lines.append(f"{pad}{firing.rule}  {firing.title}  [{sources.labels(firing.source)}]")
        inner = indent + "  " * depth + ("   " if depth else "") + "  "
        for check in firing.checks:
            lines.append(f"{inner}matched: {check_text(check)}  ({origin_text(advice, check.fact)})")
        lines.extend(_wrap(firing.explanation, inner))
    return lines


def render_text(advice: Advice) -> str:
    lines = [f"kbopt advice — bottleneck: {advice.bottleneck}"]
    if advice.bottleneck_rule:
        for firing, check in bottleneck_evidence(advice):
            lines.append(f"  evidence: {check_text(check)}  ({origin_text(advice, check.fact)}; {firing.rule})")
    else:
        lines.extend(_wrap("not identified: the bottleneck rules need " + ", ".join(advice.bottleneck_missing), "  "))
    for warning in advice.warnings:
        lines.extend(_wrap(f"warning [{warning.rule}]: {warning.text}", "  "))
    lines.append("")
    lines.append(f"Strategies ({len(advice.strategies)})")
    if not advice.strategies:
        lines.append("  none: no rule recommended a strategy on these facts")
    for number, strategy in enumerate(advice.strategies, 1):
        lines.append(f"  {number}. {strategy.id} [{strategy.layer}]  {params_text(strategy.params)}".rstrip())
        if strategy.gain:
            lines.extend(_wrap(f"expected gain: {strategy.gain}", "     "))
        lines.append("     because:")
        lines.extend(_proof(advice, strategy.recommended_by, "       "))
        for caveat in strategy.caveats:
            lines.extend(_wrap(f"caveat [{caveat.rule}]: {caveat.text}", "     "))
    lines.append("")
    lines.append(f"Rejected ({len(advice.rejected)})")
    if not advice.rejected:
        lines.append("  none")
    for rejection in advice.rejected:
        lines.extend(_wrap(f"- {rejection_label(rejection.id, rejection.params)}: {rejection.reason} "
                           f"[{', '.join(rejection.because)}]", "  "))
    lines.append("")
    lines.append(f"Not evaluated for lack of facts ({len(advice.not_evaluated)})")
    if not advice.not_evaluated:
        lines.append("  none")
    else:
        collect = ", ".join(f"{path} ({count})" for path, count in facts_to_collect(advice))
        lines.extend(_wrap(f"collect (rules waiting on each): {collect}", "  "))
    for item in advice.not_evaluated:
        lines.extend(_wrap(f"- {item.rule} ({item.title}): needs {', '.join(item.missing)}", "  "))
    lines.append("")
    lines.append("Facts")
    for path, value in advice.facts.items():
        lines.extend(_wrap(f"{path} = {fmt(value)}  ({origin_detail(advice, path)})", "  "))
    if advice.derived:
        lines.append("")
        lines.append("Derived facts")
        made_by = {p: f.rule for f in advice.fired for p in f.derived}
        for path, value in advice.derived.items():
            lines.append(f"  {path} = {fmt(value)}  ({made_by.get(path, '?')})")
    lines.append("")
    lines.append(f"Rules fired ({len(advice.fired)})")
    for firing in advice.fired:
        pack = "" if firing.pack == "builtin" else f"  pack {firing.pack}"
        lines.append(f"  {firing.rule:38} {firing.location}{pack}")
    lines.append("")
    lines.append(f"Rule pack {advice.pack_version}.")
    return "\n".join(lines) + "\n"
