"""Render the example reports and screenshot them for the README (needs chromium and playwright).

    python docs/screenshots.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
REPORTS = [("capacity-a100-chat", []), ("classification-t4-short", []), ("l4-8b-bf16-vllm", [])]
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def main() -> None:
    from playwright.sync_api import sync_playwright
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("docs/screenshots.py: no chromium on PATH (apt-get install chromium)")
    for name, extra in REPORTS:
        html = DOCS / f"report-{name}.html"
        subprocess.run([sys.executable, "-m", "kbopt", "report", "--facts", str(ROOT / "examples" / f"{name}.json"),
                        "-o", str(html), *extra], check=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto(html.as_uri())
            page.screenshot(path=str(DOCS / f"report-{name}.png"))
            page.locator("#conflicts .graph").screenshot(path=str(DOCS / f"report-{name}-graph.png"))
            if page.locator("#roofline svg").count():       # the performance model's charts, where drawn
                page.locator("#model").screenshot(path=str(DOCS / f"report-{name}-model.png"))
            browser.close()
        print(f"wrote {html.name} and its screenshots")


if __name__ == "__main__":
    main()
