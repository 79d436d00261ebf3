"""Markdown advice, for tickets and pull requests: the same content as the text report."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.compare import AdviceDiff
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.whatif import Gain, number, relative_text
from kbopt.engine.lang.text import fmt
from kbopt.kb import citations
from kbopt.reports.common import (
    ACTION_ORDER,
    bottleneck_evidence,
    chain,
    check_text,
    deployed,
    engine_settings,
    facts_to_collect,
    gain_text,
    key_text,
    needs_text,
    origin_detail,
    origin_text,
    params_text,
    plan_label,
    rejection_label,
    shown_params,
    version_warning,
)
from kbopt.reports.escape import markdown_code, markdown_text

_STATUS = {"change": "change", "keep": "keep (already in place)"}


def _sources(cited) -> str:
    """A rule's sources by label, an external page as a link to it."""
    def one(entry: str) -> str:
        text, url = markdown_text(citations.label(entry)), citations.url(entry)
        return f"[{text}]({url.replace(' ', '%20').replace(')', '%29')})" if url else text
    return ", ".join(one(entry) for entry in cited)


def render_markdown(advice: Advice, comparison: AdviceDiff | None = None, command: Command | None = None,
                    explain: bool = True) -> str:
    """The advice as Markdown: symptoms, bottleneck, plan, launch, strategies and rejections, and with
    `explain` the record behind them (proof chains, what waits on facts, the conflict graph, estimates,
    facts, rules fired); without it the page fits an issue or a ticket (GitHub takes 65,536 characters)."""
    out = [f"# kbopt advice: {advice.bottleneck.replace('_', ' ')}", ""]
    if advice.symptoms:       # what the facts show going wrong, before the bottleneck that explains it
        out += [f"**Symptoms ({len(advice.symptoms)}):**"]
        out += [f"- {markdown_text(s.text())} ({markdown_text(s.note())})" for s in advice.symptoms]
        out.append("")
    if advice.restated:
        out += [f"**What-if (--set):** {markdown_text(advice.restated.text())}", ""]
    if advice.bottleneck_rule:
        out.append(f"**Bottleneck:** `{advice.bottleneck}`, because:")
        out += [f"- {markdown_code(check_text(c))} ({markdown_text(origin_text(advice, c.fact))}; {markdown_code(f.rule)}, {_sources(f.source)})"
                for f, c in bottleneck_evidence(advice)]
    else:
        out.append("**Bottleneck:** `unknown`: the bottleneck rules need "
                   + ", ".join(markdown_code(m) for m in advice.bottleneck_missing))
    if advice.warnings:
        out += ["", "**Warnings:**"] + [f"- {markdown_code(w.rule)}: {markdown_text(w.text)}" for w in advice.warnings]
    if advice.plan:
        out += ["", f"## Plan: {' + '.join(markdown_code(k) for k in advice.plan.strategies)}, evaluated together", ""]
        if advice.plan.replicas is not None:
            out += [f"{markdown_text(plan_label(advice.plan))}: the service rate counts the new GPUs.", ""]
        out += _gains(advice.plan.expected, advice.facts)
    out += _launch(advice, command)
    if sum(s.status != "keep" for s in advice.strategies) > 1:
        out += ["", f"The actions are {markdown_text(ACTION_ORDER)}."]
    out += ["", f"## Strategies ({len(advice.strategies)})", ""]
    if advice.strategies:
        out += ["| # | strategy | status | layer | parameters |", "|---|---|---|---|---|"]
        out += [f"| {i} | {markdown_code(key_text(s, advice.facts))} | {_STATUS[s.status]} | {markdown_text(s.layer)} "
                f"| {markdown_text(params_text(shown_params(s, advice.facts)))} |"
                for i, s in enumerate(advice.strategies, 1)]
    else:
        out.append("No rule recommended a strategy on these facts.")
    for strategy in advice.strategies:
        out += ["", f"### {markdown_code(strategy.id)} — {markdown_text(strategy.title)}", ""]
        out += [f"Status: {_STATUS[strategy.status]}", ""]
        out += [f"- {markdown_code(engine)}: {markdown_code(settings)}" for engine, settings in engine_settings(strategy)]
        out += [""] if engine_settings(strategy) else []
        if strategy.gain and strategy.status != "keep":
            out += [f"Expected gain: {markdown_text(strategy.gain)}", ""]
        if strategy.expected:
            together = f", together with {', '.join(markdown_code(k) for k in strategy.together)} (the rules make them one change)" \
                if strategy.together else ""
            out += [f"Expected by the performance model{together}:", ""] + _gains(strategy.expected, advice.facts) + [""]
        for depth, firing in chain(advice, strategy.recommended_by) if explain else ():
            pad = "  " * depth
            out.append(f"{pad}- {markdown_code(firing.rule)} {markdown_text(firing.title)} "
                       f"({_sources(firing.source)}; {markdown_code(firing.location)})")
            for check in firing.checks:
                out.append(f"{pad}  - matched {markdown_code(check_text(check))} ({markdown_text(origin_text(advice, check.fact))})")
            out.append(f"{pad}  - {markdown_text(firing.explanation)}")
        if strategy.caveats:
            out += ["", "Caveats:"]
            out += [f"- **{markdown_text(c.rule)}**: {markdown_text(c.text)}" for c in strategy.caveats]
    out += ["", f"## Rejected ({len(advice.rejected)})", ""]
    out += [f"- {markdown_code(rejection_label(r.id, r.params))}: {markdown_text(r.reason)} ({', '.join(markdown_code(b) for b in r.because)})"
            for r in advice.rejected] or ["None."]
    if not explain:
        if comparison:
            out += _comparison(comparison)
        out += ["", "_`--explain` adds each strategy's proof chain, what waits on which facts, the conflict graph, "
                "the estimates, the facts and the rules fired._", "", f"_Rule pack {advice.pack_version}._", ""]
        return "\n".join(out)
    out += ["", f"## Not evaluated for lack of facts ({len(advice.not_evaluated)})", ""]
    if advice.not_evaluated:
        out += ["To close the gap, collect: " + ", ".join(f"{markdown_code(p)} ({n} rules)" for p, n in facts_to_collect(advice)), ""]
    out += [f"- {markdown_code(n.rule)} {markdown_text(n.title)}: needs {needs_text(n, markdown_code)}"
            for n in advice.not_evaluated] or ["None."]
    if advice.graph:
        out += ["", "## Conflict graph", "", "| from | relation | to | because |", "|---|---|---|---|"]
        out += [f"| `{e.source}` | {e.kind} | `{e.target}` | {markdown_text(', '.join(e.because))} |" for e in advice.graph]
    if comparison:
        out += _comparison(comparison)
    if advice.estimates:
        out += ["", "## Estimates of the performance model", "",
                "| estimate | value | unit | confidence | rule | from |", "|---|---|---|---|---|---|"]
        out += [f"| `{name}` | {markdown_text(number(e.value))} | {markdown_text(e.unit or '')} | {e.confidence}"
                f"{'; measured error ' + e.band.text() if e.band is not None else ''}"
                f"{markdown_text(' (assumed: ' + ', '.join(e.defaults) + ')') if e.defaults else ''} | `{e.rule}` | "
                f"{markdown_text(', '.join(f'{p}={fmt(v)}' for p, v in e.inputs.items()))} |" for name, e in advice.estimates.items()]
    if advice.derived:
        made_by = {p: f.rule for f in advice.fired for p in f.derived}
        out += ["", "## Derived facts", "", "| fact | value | rule |", "|---|---|---|"]
        out += [f"| `{p}` | {markdown_text(fmt(v))} | `{made_by.get(p, '?')}` |" for p, v in advice.derived.items()]
    out += ["", "## Facts", "", "| fact | value | origin |", "|---|---|---|"]
    out += [f"| `{p}` | {markdown_text(fmt(v))} | {markdown_text(origin_detail(advice, p))} |" for p, v in advice.facts.items()]
    out += ["", f"## Rules fired ({len(advice.fired)})", "", "| rule | title | source | file |", "|---|---|---|---|"]
    out += [f"| `{f.rule}` | {markdown_text(f.title)} | {_sources(f.source)} | `{f.location}`"
            f"{'' if f.pack == 'builtin' else ' (pack ' + markdown_text(f.pack) + ')'} |" for f in advice.fired]
    out += ["", f"_Rule pack {advice.pack_version}._", ""]
    return "\n".join(out)


def _launch(advice: Advice, command: Command | None = None) -> list[str]:
    """The deployed engine's settings, today -> proposed, with the rule that set each."""
    found = deployed(advice, command)
    if found is None:
        return []
    engine, launch = found
    if isinstance(launch, str):
        return ["", f"## Launch ({markdown_code(engine)})", "", f"Not written: {markdown_text(launch)}"]
    version = ".".join(map(str, launch.target.version))
    out = ["", f"## Launch ({markdown_code(engine)} {version}): today → proposed", "",
           f"`kbopt advise --emit {engine}` prints the script.", "",
           *((f"**Warning:** {markdown_text(warning)}", "") if (warning := version_warning(launch)) else ()),
           "| setting | today | proposed | status | set by |", "|---|---|---|---|---|"]
    out += [f"| {markdown_code(a.name)} | {markdown_text(a.today_text)} | {markdown_text(a.value_text)} | {a.status} | "
            f"{markdown_text(a.rule + (f' ({a.why})' if a.why else ''))} |" for a in launch.args]
    out += [f"- left out: {markdown_text(note)}" for note in launch.dropped]
    return out


def _gains(gains: Iterable[Gain], facts: Mapping[str, object]) -> list[str]:
    return [f"- {markdown_text(gain_text(g, facts))} ({g.confidence}; {', '.join(markdown_code(r) for r in g.rules)})" for g in gains]


def _comparison(c: AdviceDiff) -> list[str]:
    out = ["", f"## What-if: {markdown_text(c.before_label)} → {markdown_text(c.after_label)}", ""]
    if c.facts:
        out += [f"| fact | {markdown_text(c.before_label)} | {markdown_text(c.after_label)} |", "|---|---|---|"]
        out += [f"| {markdown_code(x.name)} | {markdown_text(fmt(x.before))} | {markdown_text(fmt(x.after))} |" for x in c.facts]
    else:
        out.append("The facts are the same.")
    out.append("")
    changes = ([f"- Bottleneck: `{c.bottleneck.before}` → `{c.bottleneck.after}`"] if c.bottleneck else []) \
        + [f"- Added: `{k}`" for k in c.added] + [f"- Removed: `{k}`" for k in c.removed] \
        + [f"- Parameter {markdown_code(x.name)}: {markdown_text(fmt(x.before))} → {markdown_text(fmt(x.after))}" for x in c.params] \
        + [f"- Now rejected: `{k}`" for k in c.newly_rejected] \
        + [f"- No longer rejected: `{k}`" for k in c.no_longer_rejected]
    moved = ["", f"| estimate | {markdown_text(c.before_label)} | {markdown_text(c.after_label)} | change |", "|---|---|---|---|"] \
        + [f"| {markdown_code(x.name)} | {markdown_text(fmt(x.before))} | {markdown_text(fmt(x.after))} | "
           f"{markdown_text(relative_text(x.before, x.after))} |" for x in c.estimates] if c.estimates else []
    return out + (changes or ["The advice is the same."]) + moved
