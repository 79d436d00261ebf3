"""Plain-text advice for a terminal."""
from __future__ import annotations

import textwrap
from collections.abc import Iterable

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.model import Advice, StrategyAdvice
from kbopt.engine.advice.whatif import number as shown  # `number` numbers the strategies below
from kbopt.engine.lang.text import fmt
from kbopt.kb import citations
from kbopt.kb.engines import version_text
from kbopt.reports.common import (
    ACTION_ORDER,
    bottleneck_evidence,
    chain,
    check_text,
    deployed,
    engine_settings,
    estimate_text,
    facts_to_collect,
    gain_text,
    gains_text,
    headline,
    key_text,
    missed_metrics,
    model_evidence,
    needs_text,
    origin_detail,
    origin_text,
    params_text,
    plan_label,
    rejection_label,
    shown_params,
    version_warning,
)
from kbopt.reports.escape import terminal_text

WIDTH = 100
TOP = 5           # actions in the summary (the summary stays within about 20 lines)


def _wrap(text: str, indent: str) -> list[str]:
    # Made inert before wrapping: textwrap would turn a CR or a tab into a space, and the reader
    # should see it was there.
    # A flag or a fact path is one word: never broken at its hyphens (a copied flag must stay whole).
    return textwrap.wrap(terminal_text(text), WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False, break_long_words=False) or [indent]


def _proof(advice: Advice, rule_ids: Iterable[str], indent: str) -> list[str]:
    lines = []
    for depth, firing in chain(advice, rule_ids):
        pad = indent + "  " * depth + ("<- " if depth else "")
        lines.append(f"{pad}{firing.rule}  {firing.title}  [{citations.labels(firing.source)}]")
        inner = indent + "  " * depth + ("   " if depth else "") + "  "
        for check in firing.checks:
            lines.append(f"{inner}matched: {check_text(check)}  ({origin_text(advice, check.fact)})")
        lines.extend(_wrap(firing.explanation, inner))
    return lines


def _summary(advice: Advice) -> list[str]:
    """Where the deployment stands in the model's numbers, the actions with their expected gains,
    and what is kept: what a reader needs in about 20 lines."""
    lines = []
    evidence = model_evidence(advice)
    if evidence:
        lines.extend(_wrap("model: " + ", ".join(
            f"{estimate_text(e)} [{e.confidence}{', ±' + format(e.band.median_abs_error, '.0%') if e.band is not None else ''}]"
            for e in evidence), "  "))
    actions = [s for s in advice.strategies if s.status != "keep"]
    kept = [s for s in advice.strategies if s.status == "keep"]
    if actions:
        lines.append("")
        modelled = " — expected by the performance model" if any(s.expected for s in actions) else ""
        lines.append(f"Actions{modelled}")
        for rank, strategy in enumerate(actions[:TOP], 1):
            gains = gains_text(headline(strategy.expected, first=missed_metrics(advice.facts, advice.symptoms)), advice.facts)
            with_ = f" (with {', '.join(strategy.together)})" if strategy.together and gains else ""
            lines.extend(_wrap(f"{rank}. {key_text(strategy, advice.facts)}{with_}: "
                               + (gains or params_text(shown_params(strategy, advice.facts)) or strategy.title), "  "))
        if len(actions) > TOP:
            lines.append(f"  … and {len(actions) - TOP} more below")
        if len(actions) > 1:
            lines.extend(_wrap(f"({ACTION_ORDER})", "  "))
        if advice.plan and advice.plan.expected:
            planned = headline(advice.plan.expected, first=missed_metrics(advice.facts, advice.symptoms))
            lines.extend(_wrap(plan_label(advice.plan) + ": " + gains_text(planned, advice.facts), "  "))
    if kept:
        lines.extend(_wrap("Keep (already in place): " + ", ".join(key_text(s, advice.facts) for s in kept), ""))
    return lines


def _strategy(advice: Advice, number: int, strategy: StrategyAdvice, explain: bool) -> list[str]:
    keep = "  (keep: already in place)" if strategy.status == "keep" else ""
    lines = [f"  {number}. {strategy.id} [{strategy.layer}]  {params_text(shown_params(strategy, advice.facts))}".rstrip() + keep]
    # kb/engines/<engine>.yaml's lines when the facts name the engine (JSON and --emit give all four otherwise)
    for engine, settings in engine_settings(strategy):
        lines.extend(_wrap(f"{engine}: {settings}", "     "))
    if strategy.gain and strategy.status != "keep":
        lines.extend(_wrap(f"expected gain: {strategy.gain}", "     "))
    if strategy.together and strategy.expected:
        lines.extend(_wrap(f"model, together with {', '.join(strategy.together)} (the rules make them one change):", "     "))
    for gain in strategy.expected:
        lines.extend(_wrap(f"model: {gain_text(gain, advice.facts)}  [{gain.confidence}; {', '.join(gain.rules)}]", "     "))
    if explain:
        lines.append("     because:")
        lines.extend(_proof(advice, strategy.recommended_by, "       "))
    else:
        lines.extend(_wrap(f"because: {', '.join(strategy.recommended_by)}", "     "))
    for caveat in strategy.caveats:
        lines.extend(_wrap(f"caveat [{caveat.rule}]: {caveat.text}", "     "))
    return lines


def _launch(advice: Advice, command: Command | None = None) -> list[str]:
    """The deployed engine's settings that change, today -> proposed, each with the rule that set it."""
    found = deployed(advice, command)
    if found is None:
        return []
    engine, launch = found
    if isinstance(launch, str):
        return ["", *_wrap(f"Launch ({engine}): not written: {launch}", "")]
    changes = launch.changes()
    carried = [arg.name for arg in launch.args if arg.status == "unchanged"]
    out = ["", f"Launch ({engine} {version_text(launch.target.version)}): {len(changes)} setting(s) change, "
                f"{len(carried)} carried unchanged; `--emit {engine}` prints the script"]
    if (warning := version_warning(launch)) is not None:
        out.extend(_wrap(f"warning: {warning}", "  "))
    for arg in changes:
        out.extend(_wrap(f"{arg.name}: {arg.today_text} -> {arg.value_text}  [{arg.rule}]"
                         + (f" ({arg.why})" if arg.why else ""), "  "))
    if carried:
        out.extend(_wrap(f"carried unchanged: {', '.join(carried)}", "  "))
    for note in launch.dropped:
        out.extend(_wrap(f"left out: {note}", "  "))
    return out


def render_text(advice: Advice, explain: bool = False, command: Command | None = None) -> str:
    """The summary and the strategies; with `explain`, each strategy's proof chain and the rest of
    the record (the plan, rejections, what waits on facts, estimates, facts, rules fired)."""
    # What the facts show going wrong comes first; the bottleneck that explains it follows.
    if advice.symptoms:
        lines = [f"kbopt advice — symptoms ({len(advice.symptoms)})"]
        lines.extend(line for s in advice.symptoms for line in _wrap(f"{s.text()}  ({s.note()})", "  "))
        lines.append(f"bottleneck: {advice.bottleneck}")
    else:
        lines = [f"kbopt advice — bottleneck: {advice.bottleneck}"]
    if advice.bottleneck_rule:
        for firing, check in bottleneck_evidence(advice):
            lines.append(f"  evidence: {check_text(check)}  ({origin_text(advice, check.fact)}; {firing.rule})")
    else:
        lines.extend(_wrap("not identified: the bottleneck rules need " + ", ".join(advice.bottleneck_missing), "  "))
    lines.extend(_summary(advice))
    if advice.restated:
        lines.extend(_wrap(f"--set: {advice.restated.text()}", "  "))
    for warning in advice.warnings:
        lines.extend(_wrap(f"warning [{warning.rule}]: {warning.text}", "  "))
    lines.append("")
    lines.append(f"Strategies ({len(advice.strategies)})")
    if not advice.strategies:
        lines.append("  none: no rule recommended a strategy on these facts")
    for number, strategy in enumerate(advice.strategies, 1):
        lines.extend(_strategy(advice, number, strategy, explain))
    lines.extend(_launch(advice, command))
    if not explain:
        if advice.rejected:
            lines.append("")
            lines.extend(_wrap(f"Rejected ({len(advice.rejected)}): "
                               + ", ".join(rejection_label(r.id, r.params) for r in advice.rejected), ""))
        lines.append("")
        lines.append("--explain adds each strategy's proof chain, why each rejection, what waits on which facts, "
                     "the estimates and the rules fired.")
        return _joined(lines)
    if advice.plan:
        lines.append("")
        lines.append(f"Plan: {' + '.join(advice.plan.strategies)} together, through the model once")
        for gain in advice.plan.expected:
            lines.extend(_wrap(f"{gain_text(gain, advice.facts)}  [{gain.confidence}; {', '.join(gain.rules)}]", "  "))
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
        lines.extend(_wrap(f"collect, most decisive first (rules waiting on each): {collect}", "  "))
    for item in advice.not_evaluated:
        lines.extend(_wrap(f"- {item.rule} ({item.title}): needs {needs_text(item)}", "  "))
    if advice.estimates:
        lines.append("")
        lines.append(f"Estimates ({len(advice.estimates)})")
        for estimate in advice.estimates.values():
            defaults = f", assumed: {', '.join(estimate.defaults)}" if estimate.defaults else ""
            band = f"; measured error {estimate.band.text()}" if estimate.band is not None else ""
            lines.extend(_wrap(f"{estimate.name} = {shown(estimate.value)}{' ' + estimate.unit if estimate.unit else ''}"
                               f"  [{estimate.confidence}{defaults}{band}; {estimate.rule}]", "  "))
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
    return _joined(lines)


def _joined(lines: list[str]) -> str:
    """The report, each line made inert where it holds an input string (a fact's value, a label an
    exporter wrote, a pack's text with the values it fills in): done on the finished lines, so that
    no string reaches the terminal without it."""
    return "\n".join(map(terminal_text, lines)) + "\n"
