"""Renderers that only format an Advice value."""
from __future__ import annotations

FORMATS = ("text", "json", "md")


def render(advice, fmt: str) -> str:
    if fmt == "json":
        return advice.to_json()
    if fmt == "md":
        from kbopt.reports.markdown import render_markdown
        return render_markdown(advice)
    from kbopt.reports.text import render_text
    return render_text(advice)
