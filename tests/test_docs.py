"""The manual stays true: generated pages match the data, the README's commands and example
match what runs, links resolve, and nothing shipped points outside the project."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kbopt import docsgen

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Pages other branches are writing (lint codes, performance figures): links to them may dangle
# until those land, nothing else may.
PENDING: set[str] = set()


@pytest.mark.parametrize("name", sorted(docsgen.PAGES))
def test_generated_page_is_up_to_date(name):
    assert (ROOT / "docs" / name).read_text(encoding="utf-8") == docsgen.PAGES[name](), \
        f"docs/{name} is out of date: run python -m kbopt.docsgen"


def test_readme_example_is_what_kbopt_prints(run_cli):
    block = re.search(r"## Example\n.*?```text\n(.*?)```", README, re.S).group(1)
    shown = block.removesuffix("...\n")
    command = re.search(r"kbopt advise --facts (examples/\S+)", README).group(1)
    code, out, _ = run_cli("advise", "--facts", command)
    assert code == 0 and shown and out.startswith(shown)


def test_readme_test_command_is_the_one_ci_runs():
    command = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q"
    assert command in README and command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _pages():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() and str(path.relative_to(ROOT)) not in PENDING:
            broken.append(target)
    assert broken == []


def test_every_fact_is_documented():
    from kbopt.kb.vocabulary import load_vocabulary
    facts = (ROOT / "docs" / "facts.md").read_text(encoding="utf-8")
    assert [s.path for s in load_vocabulary().facts.values() if s.quality_of is None and f"`{s.path}`" not in facts] == []


def test_nothing_shipped_points_outside_the_project():
    # A fresh clone has no ../shared: what the project cites, it carries (kb/sources.yaml, docs/).
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    outside = re.compile(r"\.\./shared/|(?<![\w.])shared/(seed|durable-rules)")
    offenders = [f for f in files if not f.startswith("tests/") and (ROOT / f).is_file()
                 and outside.search((ROOT / f).read_text(encoding="utf-8", errors="ignore"))]
    assert offenders == []


def test_the_fleet_page_states_the_query_count_kbopt_sends():
    # issue 29: docs/fleet.md said 34 queries where there were 51
    from kbopt.collectors.fleet import FAMILIES
    page = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    stated = re.search(r"whatever the fleet's size: (\d+) today", page)
    assert stated is not None and int(stated.group(1)) == len(FAMILIES)
