"""Markdown advice, for tickets and pull requests: the same content as the text report."""
from __future__ import annotations

import re
from collections.abc import Iterable

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.compare import Comparison
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.whatif import Gain, number, relative_text
from kbopt.engine.lang.text import fmt
from kbopt.kb import sources
from kbopt.reports.common import (
    bottleneck_evidence,
    chain,
    check_text,
    deployed,
    engine_settings,
    facts_to_collect,
    origin_detail,
    origin_text,
    params_text,
    rejection_label,
    safe_text,
)

# Markdown would act on these in an input string: `[`/`]` make links and, after `!`, images that
# load when the page is shown; backticks open code spans, `*` and `~` emphasis, `\\` escapes the
# next one; `|` splits a table row. `_` is left alone: within a word (`max_num_seqs`) it does nothing.
_ACTIVE = re.compile(r"([\\`*\[\]|~])")


_STATUS = {"change": "change", "keep": "keep (already in place)"}


def _cell(text: object) -> str:
    """An input string (a fact's value, a provenance, a file name, a pack's text with the values it
    fills in) for a table cell or a line: inert Markdown, no raw HTML, no table breaks."""
    escaped = safe_text(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = _ACTIVE.sub(r"\\\1", escaped).replace("\n", " ")
    return "\\" + escaped if escaped.startswith(("#", "+", "-", "=")) else escaped   # not a heading or a list


def _code(text: object) -> str:
    """A code span: Markdown is inert in it, but a backtick would close it (and `|` split a table)."""
    return "`" + safe_text(str(text)).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def _sources(cited) -> str:
    """A rule's sources by label, an external page as a link to it."""
    def one(entry: str) -> str:
        text, url = _cell(sources.label(entry)), sources.url(entry)
        return f"[{text}]({url.replace(' ', '%20').replace(')', '%29')})" if url else text
    return ", ".join(one(entry) for entry in cited)


def render_markdown(advice: Advice, comparison: Comparison | None = None, command: Command | None = None) -> str:
    out = [f"# kbopt advice: {advice.bottleneck.replace('_', ' ')}", ""]
    if advice.symptoms:       # what the facts show going wrong, before the bottleneck that explains it
        out += [f"**Symptoms ({len(advice.symptoms)}):**"]
        out += [f"- {_cell(s.text())} ({_cell(s.note())})" for s in advice.symptoms]
        out.append("")
    if advice.restated:
        out += [f"**What-if (--set):** {_cell(advice.restated.text())}", ""]
    if advice.bottleneck_rule:
        out.append(f"**Bottleneck:** `{advice.bottleneck}`, because:")
        out += [f"- {_code(check_text(c))} ({_cell(origin_text(advice, c.fact))}; {_code(f.rule)}, {_sources(f.source)})"
                for f, c in bottleneck_evidence(advice)]
    else:
        out.append("**Bottleneck:** `unknown`: the bottleneck rules need "
                   + ", ".join(_code(m) for m in advice.bottleneck_missing))
    if advice.warnings:
        out += ["", "**Warnings:**"] + [f"- {_code(w.rule)}: {_cell(w.text)}" for w in advice.warnings]
    out += ["", f"## Strategies ({len(advice.strategies)})", ""]
    if advice.strategies:
        out += ["| # | strategy | status | layer | parameters |", "|---|---|---|---|---|"]
        out += [f"| {i} | {_code(s.key)} | {_STATUS[s.status]} | {_cell(s.layer)} | {_cell(params_text(s.params))} |"
                for i, s in enumerate(advice.strategies, 1)]
    else:
        out.append("No rule recommended a strategy on these facts.")
    for strategy in advice.strategies:
        out += ["", f"### {_code(strategy.id)} — {_cell(strategy.title)}", ""]
        out += [f"Status: {_STATUS[strategy.status]}", ""]
        out += [f"- {_code(engine)}: {_code(settings)}" for engine, settings in engine_settings(strategy)]
        out += [""] if engine_settings(strategy) else []
        if strategy.gain and strategy.status != "keep":
            out += [f"Expected gain: {_cell(strategy.gain)}", ""]
        if strategy.expected:
            out += ["Expected by the performance model:", ""] + _gains(strategy.expected) + [""]
        for depth, firing in chain(advice, strategy.recommended_by):
            pad = "  " * depth
            out.append(f"{pad}- {_code(firing.rule)} {_cell(firing.title)} ({_sources(firing.source)}; {_code(firing.location)})")
            for check in firing.checks:
                out.append(f"{pad}  - matched {_code(check_text(check))} ({_cell(origin_text(advice, check.fact))})")
            out.append(f"{pad}  - {_cell(firing.explanation)}")
        if strategy.caveats:
            out += ["", "Caveats:"]
            out += [f"- **{_cell(c.rule)}**: {_cell(c.text)}" for c in strategy.caveats]
    if advice.plan:
        out += ["", f"## Plan: {' + '.join(_code(k) for k in advice.plan.strategies)}, evaluated together", ""]
        out += _gains(advice.plan.expected)
    out += _launch(advice, command)
    out += ["", f"## Rejected ({len(advice.rejected)})", ""]
    out += [f"- {_code(rejection_label(r.id, r.params))}: {_cell(r.reason)} ({', '.join(_code(b) for b in r.because)})"
            for r in advice.rejected] or ["None."]
    out += ["", f"## Not evaluated for lack of facts ({len(advice.not_evaluated)})", ""]
    if advice.not_evaluated:
        out += ["To close the gap, collect: " + ", ".join(f"{_code(p)} ({n} rules)" for p, n in facts_to_collect(advice)), ""]
    out += [f"- {_code(n.rule)} {_cell(n.title)}: needs {', '.join(_code(m) for m in n.missing)}"
            for n in advice.not_evaluated] or ["None."]
    if advice.graph:
        out += ["", "## Conflict graph", "", "| from | relation | to | because |", "|---|---|---|---|"]
        out += [f"| `{e.source}` | {e.kind} | `{e.target}` | {_cell(', '.join(e.because))} |" for e in advice.graph]
    if comparison:
        out += _comparison(comparison)
    if advice.estimates:
        out += ["", "## Estimates of the performance model", "",
                "| estimate | value | unit | confidence | rule | from |", "|---|---|---|---|---|---|"]
        out += [f"| `{name}` | {_cell(number(e.value))} | {_cell(e.unit or '')} | {e.confidence}"
                f"{'; measured error ' + e.band.text() if e.band is not None else ''}"
                f"{_cell(' (assumed: ' + ', '.join(e.defaults) + ')') if e.defaults else ''} | `{e.rule}` | "
                f"{_cell(', '.join(f'{p}={fmt(v)}' for p, v in e.inputs.items()))} |" for name, e in advice.estimates.items()]
    if advice.derived:
        made_by = {p: f.rule for f in advice.fired for p in f.derived}
        out += ["", "## Derived facts", "", "| fact | value | rule |", "|---|---|---|"]
        out += [f"| `{p}` | {_cell(fmt(v))} | `{made_by.get(p, '?')}` |" for p, v in advice.derived.items()]
    out += ["", "## Facts", "", "| fact | value | origin |", "|---|---|---|"]
    out += [f"| `{p}` | {_cell(fmt(v))} | {_cell(origin_detail(advice, p))} |" for p, v in advice.facts.items()]
    out += ["", f"## Rules fired ({len(advice.fired)})", "", "| rule | title | source | file |", "|---|---|---|---|"]
    out += [f"| `{f.rule}` | {_cell(f.title)} | {_sources(f.source)} | `{f.location}`"
            f"{'' if f.pack == 'builtin' else ' (pack ' + _cell(f.pack) + ')'} |" for f in advice.fired]
    out += ["", f"_Rule pack {advice.pack_version}._", ""]
    return "\n".join(out)


def _launch(advice: Advice, command: Command | None = None) -> list[str]:
    """The deployed engine's settings, today -> proposed, with the rule that set each."""
    found = deployed(advice, command)
    if found is None:
        return []
    engine, launch = found
    if isinstance(launch, str):
        return ["", f"## Launch ({_code(engine)})", "", f"Not written: {_cell(launch)}"]
    version = ".".join(map(str, launch.target.version))
    out = ["", f"## Launch ({_code(engine)} {version}): today → proposed", "",
           f"`kbopt advise --emit {engine}` prints the script.", "",
           "| setting | today | proposed | status | set by |", "|---|---|---|---|---|"]
    out += [f"| {_code(a.name)} | {_cell(a.today_text)} | {_cell(a.value_text)} | {a.status} | "
            f"{_cell(a.rule + (f' ({a.why})' if a.why else ''))} |" for a in launch.args]
    out += [f"- left out: {_cell(note)}" for note in launch.dropped]
    return out


def _gains(gains: Iterable[Gain]) -> list[str]:
    return [f"- {_cell(g.text())} ({g.confidence}; {', '.join(_code(r) for r in g.rules)})" for g in gains]


def _comparison(c: Comparison) -> list[str]:
    out = ["", f"## What-if: {_cell(c.before_label)} → {_cell(c.after_label)}", ""]
    if c.facts:
        out += [f"| fact | {_cell(c.before_label)} | {_cell(c.after_label)} |", "|---|---|---|"]
        out += [f"| {_code(x.name)} | {_cell(fmt(x.before))} | {_cell(fmt(x.after))} |" for x in c.facts]
    else:
        out.append("The facts are the same.")
    out.append("")
    changes = ([f"- Bottleneck: `{c.bottleneck.before}` → `{c.bottleneck.after}`"] if c.bottleneck else []) \
        + [f"- Added: `{k}`" for k in c.added] + [f"- Removed: `{k}`" for k in c.removed] \
        + [f"- Parameter {_code(x.name)}: {_cell(fmt(x.before))} → {_cell(fmt(x.after))}" for x in c.params] \
        + [f"- Now rejected: `{k}`" for k in c.newly_rejected] \
        + [f"- No longer rejected: `{k}`" for k in c.no_longer_rejected]
    moved = ["", "| estimate | " + _cell(c.before_label) + " | " + _cell(c.after_label) + " | change |", "|---|---|---|---|"] \
        + [f"| {_code(x.name)} | {_cell(fmt(x.before))} | {_cell(fmt(x.after))} | {_cell(relative_text(x.before, x.after))} |"
           for x in c.estimates] if c.estimates else []
    return out + (changes or ["The advice is the same."]) + moved
