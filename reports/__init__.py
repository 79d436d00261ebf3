"""Renderers that only format an Advice value."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the renderers import the engine's types; at run time only the chosen renderer is imported
    from kbopt.engine.advice.command import Command
    from kbopt.engine.advice.compare import AdviceDiff
    from kbopt.engine.advice.model import Advice

FORMATS = ("text", "json", "md", "html")


def render(advice: Advice, fmt: str, comparison: AdviceDiff | None = None, explain: bool = False,
           command: Command | None = None) -> str:
    """Format an Advice; `comparison` (a what-if) is shown by the html and md formats; `explain`
    adds the text and Markdown formats' proof chains and the rest of the record (HTML folds it, JSON
    holds it always)."""
    if fmt == "json":
        from kbopt.engine.advice.launch import launch_dict  # only the chosen renderer loads
        launch = launch_dict(advice, command)
        if launch is None:
            return advice.to_json()
        document = advice.to_dict()
        document["launch"] = launch      # the deployed engine's settings, today -> proposed
        return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "md":
        from kbopt.reports.markdown import render_markdown  # only the chosen renderer loads
        return render_markdown(advice, comparison, command, explain)
    if fmt == "html":
        from kbopt.reports.html import render_html  # only the chosen renderer loads (jinja2)
        return render_html(advice, comparison, command)
    from kbopt.reports.text import render_text  # only the chosen renderer loads
    return render_text(advice, explain, command)
