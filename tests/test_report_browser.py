"""The HTML report in a real headless browser (Debian's chromium, driven by Playwright).

Skipped where no chromium is installed, unless KBOPT_REQUIRE_BROWSER=1 (as in .ci/run), where a
missing browser is a failure.
"""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document, load_facts
from kbopt.reports import render

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = ("#summary", "#evidence", "#strategies", "#rejected", "#not-evaluated", "#conflicts", "#facts")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the playwright package is not installed"
    if CHROMIUM is None:
        missing = missing or "no chromium on PATH (apt-get install chromium)"
    if missing:
        if os.environ.get("KBOPT_REQUIRE_BROWSER"):
            pytest.fail(f"browser test required but {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def _open(browser, html: str, tmp_path: Path, width=1280, javascript=True):
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    context = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=javascript)
    page = context.new_page()
    events = {"console": [], "requests": [], "dialogs": [], "errors": []}
    page.on("console", lambda m: events["console"].append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: events["errors"].append(str(e)))
    page.on("request", lambda r: events["requests"].append(r.url))
    page.on("dialog", lambda d: (events["dialogs"].append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return context, page, events


def _advice(pack, name):
    return advise(load_facts(EXAMPLES / name), pack, available_evaluators()[0])


@pytest.mark.parametrize("name", ["capacity-a100-chat.json", "compute-h100-debug.json", "hardware-only.json"])
def test_loads_offline_with_no_errors_and_shows_every_section(browser, pack, tmp_path, name):
    context, page, events = _open(browser, render(_advice(pack, name), "html"), tmp_path)
    try:
        assert events["console"] == [] and events["errors"] == []
        assert [u for u in events["requests"] if not u.startswith("file:")] == []
        for section in SECTIONS:
            if section == "#evidence" and name == "hardware-only.json":
                continue     # no bottleneck, so no evidence section
            assert page.locator(section).is_visible(), section
        from PIL import Image
        image = Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("RGB")
        colours = image.getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50, "the screenshot is blank"
        non_white = sum(count for count, rgb in (colours or []) if rgb != (255, 255, 255))
        assert colours is None or non_white > 0.02 * image.width * image.height
    finally:
        context.close()


def test_readable_at_phone_width_without_javascript(browser, pack, tmp_path):
    context, page, _ = _open(browser, render(_advice(pack, "capacity-a100-chat.json"), "html"), tmp_path,
                             width=390, javascript=False)
    try:
        assert page.locator("#bottleneck").inner_text() == "memory capacity"
        overflow = page.locator("body").evaluate("b => b.scrollWidth")
        assert overflow <= 400, f"the page is {overflow}px wide at a 390px viewport"
        assert page.locator("#strategy-paged_kv_cache").is_visible()
    finally:
        context.close()


def test_hostile_strings_stay_text(browser, pack, tmp_path):
    facts = facts_from_document({"hardware": {"gpu_name": "<script>alert(1)</script><img src=x onerror=alert(2)>"},
                                 "telemetry": {"memory_used_ratio": 0.95}}, "x")
    context, page, events = _open(browser, render(advise(facts, pack, "reference"), "html"), tmp_path)
    try:
        assert events["dialogs"] == [] and events["errors"] == []
        assert [u for u in events["requests"] if not u.startswith("file:")] == []
        assert "<script>alert(1)</script>" in page.locator("#facts").text_content()   # folded: in the DOM as text
    finally:
        context.close()


# Any element whose content is wider than its box: a table cut off, or a scroll bar inside the page.
_CLIPPED = """() => [...document.querySelectorAll('main *')]
  .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 2)
  .map(e => e.tagName + '.' + e.className + ' ' + e.scrollWidth + '>' + e.clientWidth)"""


@pytest.mark.parametrize("width", [1400, 390])
def test_a_report_with_a_launch_fits_the_screen_and_leads_with_the_changes(browser, pack, tmp_path, width):
    """The newcomer's complaints: the model table cut at 1,400 px, the launch table clipped at
    390 px, and a page over 60,000 px long with the changes near the bottom and no contents."""
    from conftest import review_deployment

    from kbopt.engine.advice.command import read_command
    advice, _ = review_deployment(pack, "review14", "d5")
    command = read_command(f"@{Path(__file__).parent / 'data' / 'review14' / 'd5.launch'}")
    context, page, events = _open(browser, render(advice, "html", command=command), tmp_path, width=width)
    try:
        assert events["errors"] == []
        assert page.locator("body").evaluate("b => b.scrollWidth") <= width
        assert page.evaluate(_CLIPPED) == []
        tops = {name: page.locator(f"#{name}").bounding_box()["y"] for name in ("changes", "launch", "evidence", "strategies")}
        assert tops["changes"] < tops["evidence"] < tops["strategies"] and tops["launch"] < tops["evidence"]
        targets = page.evaluate("() => [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'))")
        assert "#changes" in targets and all(page.locator(t).count() == 1 for t in targets)
        height = page.evaluate("() => document.body.scrollHeight")
        assert height < (15_000 if width == 1400 else 30_000), f"the page is {height}px long"
    finally:
        context.close()
