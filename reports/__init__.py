"""Renderers that only format an Advice value."""
from __future__ import annotations

FORMATS = ("text", "json", "md", "html")


def render(advice, fmt: str, comparison=None) -> str:
    """Format an Advice; `comparison` (a what-if) is shown by the html and md formats."""
    if fmt == "json":
        return advice.to_json()
    if fmt == "md":
        from kbopt.reports.markdown import render_markdown
        return render_markdown(advice, comparison)
    if fmt == "html":
        from kbopt.reports.html import render_html
        return render_html(advice, comparison)
    from kbopt.reports.text import render_text
    return render_text(advice)
