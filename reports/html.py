"""The HTML explanation report: one self-contained page (inline CSS and SVG, no script, no fetch)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbopt.engine.advice.command import Command
from kbopt.engine.advice.compare import AdviceDiff
from kbopt.engine.advice.explain import Check
from kbopt.engine.advice.launch import deployed_launch
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.whatif import number, relative_text
from kbopt.engine.lang.text import fmt
from kbopt.kb import citations
from kbopt.reports.charts import MemoryBar, Roofline, memory_bar, roofline
from kbopt.reports.common import (
    ACTION_ORDER,
    bottleneck_evidence,
    chain,
    check_text,
    engine_settings,
    facts_to_collect,
    firings,
    gain_text,
    origin_detail,
    origin_text,
    params_text,
    plan_label,
    shown_params,
    version_warning,
)
from kbopt.reports.escape import safe_text
from kbopt.reports.graph_layout import layout

if TYPE_CHECKING:  # jinja2 itself is imported only when an HTML report is rendered
    from markupsafe import Markup


@dataclass(frozen=True)
class Gauge:
    """A bar for a numeric check: the value and the threshold on one scale (percent of width)."""
    value_pct: float
    threshold_pct: float


def gauge(check: Check) -> Gauge | None:
    value, threshold = check.value, check.threshold
    numbers = (int, float)
    if isinstance(value, bool) or isinstance(threshold, bool) or not isinstance(value, numbers) \
            or not isinstance(threshold, numbers):
        return None
    top = 1.0 if 0 <= value <= 1 and 0 <= threshold <= 1 else max(value, threshold) * 1.25
    if top <= 0:
        return None
    return Gauge(round(100 * value / top, 1), round(100 * threshold / top, 1))


def _sources_of(cited: Iterable[str]) -> Markup:
    """A rule's sources by label; an external page's address in the label's tooltip, not as a
    link: the page stays free of outgoing addresses (see test_self_contained_no_fetches_no_script)."""
    from markupsafe import Markup, escape  # jinja2's markupsafe: only for an HTML report
    def one(entry: str) -> Markup:
        text, url = escape(safe_text(citations.label(entry))), citations.url(entry)
        return Markup(f'<cite title="{escape(url)}">{text}</cite>') if url else Markup(f"<cite>{text}</cite>")
    return Markup(", ").join(one(entry) for entry in cited)


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape  # jinja2: only for an HTML report
    env = Environment(loader=PackageLoader("kbopt.reports", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(fmt=fmt, check_text=check_text, params_text=params_text)
    # Every rendered string passes here: drop bidirectional controls before escaping.
    env.finalize = lambda value: safe_text(value) if isinstance(value, str) else value
    env.globals.update(gauge=gauge, sources_of=_sources_of, engine_settings=engine_settings, relative_text=relative_text,
                       plan_label=plan_label, shown_params=shown_params, version_warning=version_warning, gain_text=gain_text)
    return env


def render_html(advice: Advice, comparison: AdviceDiff | None = None, command: Command | None = None) -> str:
    template = _environment().get_template("report.html.j2")
    roof, memory = roofline(advice), memory_bar(advice)
    return template.render(
        roof=roof if isinstance(roof, Roofline) else None,
        roof_missing=roof if isinstance(roof, tuple) else (),
        memory=memory if isinstance(memory, MemoryBar) else None,
        memory_missing=memory if isinstance(memory, tuple) else (),
        number=number,
        advice=advice,
        comparison=comparison,
        by_rule=firings(advice),
        chain=lambda rule_ids: chain(advice, rule_ids),
        origin=lambda path: origin_text(advice, path),
        origin_detail=lambda path: origin_detail(advice, path),
        collect=facts_to_collect(advice),
        evidence=bottleneck_evidence(advice),
        picture=layout(advice),
        made_by={p: f.rule for f in advice.fired for p in f.derived},
        launch=deployed_launch(advice, command),
        actions=[s for s in advice.strategies if s.status != "keep"],
        order_note=ACTION_ORDER[0].upper() + ACTION_ORDER[1:] + ".",
    )
