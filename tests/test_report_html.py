"""The HTML report's structure: it only formats the advice, escapes every input string, fetches nothing."""
from __future__ import annotations

import re
from pathlib import Path

import markupsafe

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.compare import compare
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document, load_facts
from kbopt.reports import render

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _advice(pack, name="capacity-a100-chat.json", overrides=()):
    return advise(load_facts(EXAMPLES / name, list(overrides)), pack, available_evaluators()[0])


def test_every_strategy_rule_rejection_and_missing_fact_appears(pack):
    for name in ("capacity-a100-chat.json", "classification-t4-short.json", "hardware-only.json"):
        advice = _advice(pack, name)
        page = render(advice, "html")
        for strategy in advice.strategies:
            assert f'id="strategy-{strategy.key}"' in page
            for name_ in strategy.params:
                assert f"{name_}=" in page
            for caveat in strategy.caveats:
                assert str(markupsafe.escape(caveat.text)) in page
        for firing in advice.fired:
            assert firing.rule in page and firing.location in page
        for rejection in advice.rejected:
            assert rejection.key in page
            for rule in rejection.because:
                assert rule in page
        for item in advice.not_evaluated:
            assert item.rule in page
            for path in item.missing:
                assert path in page


def test_condition_is_shown_with_the_actual_values(pack):
    page = render(_advice(pack), "html")
    assert "telemetry.memory_used_ratio (0.93) &gt; capacity_threshold=0.9" in page
    assert 'class="bar"' in page and 'style="width: 93.0%"' in page      # the gauge


def test_input_strings_are_escaped(pack):
    facts = facts_from_document({"hardware": {"gpu_name": "<script>alert(1)</script>"},
                                 "model": {"name": "\" onmouseover=\"alert(2)"},
                                 "telemetry": {"memory_used_ratio": 0.95}}, "x")
    page = render(advise(facts, pack, "reference"), "html")
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'onmouseover="alert' not in page


def test_self_contained_no_fetches_no_script(pack):
    page = render(_advice(pack), "html")
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r'\b(src|href)\s*=\s*"(https?:)?//', page)
    assert set(re.findall(r"url\(([^)]*)\)", page)) <= {"#arrow-requires", "#arrow-mitigates", "#arrow-vetoes"}
    assert "default-src 'none'" in page        # the page itself forbids fetching anything


def test_conflict_graph_marks_chosen_and_rejected_differently(pack):
    page = render(_advice(pack), "html")
    conflicts = page[page.index('<section id="conflicts">'):]
    svg = conflicts[conflicts.index("<svg"):conflicts.index("</svg>")]
    assert "<title>quantization[fp8]: chosen</title>" in svg
    assert "<title>quantization[int8]: rejected</title>" in svg
    assert len(re.findall(r'<path d="[^"]+" fill="none"', svg)) == len(_advice(pack).graph)


def test_deterministic(pack):
    assert render(_advice(pack), "html") == render(_advice(pack), "html")


def test_what_if_comparison(pack):
    base = _advice(pack)
    after = _advice(pack, overrides=["telemetry.memory_used_ratio=0.5"])
    comparison = compare(base, after, "base", "what-if")
    # Capacity no longer binds; a static batcher keeps a few of its 32 slots generating, against a
    # KV cache that holds hundreds of sequences: the GPU is underfed, and continuous batching is the
    # cure (not more client concurrency: the client keeps 32 in flight).
    assert comparison.bottleneck.after == "underfed"
    assert "continuous_batching" in {s.id for s in after.strategies}
    assert "client_concurrency" not in {s.id for s in after.strategies}
    for fmt in ("html", "md"):
        page = render(after, fmt, comparison)
        assert "What-if: base" in page and "telemetry.memory_used_ratio" in page
        assert "memory_capacity" in page and "underfed" in page


def test_report_command_with_compare(run_cli, tmp_path):
    out = tmp_path / "report.html"
    code, _, err = run_cli("report", "--facts", str(EXAMPLES / "capacity-a100-chat.json"),
                           "--compare", str(EXAMPLES / "low-utilization-a10g.json"), "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    assert "What-if: capacity-a100-chat.json → low-utilization-a10g.json" in page
    assert "hardware.gpu_name" in page and "NVIDIA A10G" in page


def test_markdown_carries_the_graph(pack):
    page = render(_advice(pack), "md", explain=True)
    assert "## Conflict graph" in page
    assert "| `quantization[fp8]` | excludes | `quantization[int8]` | kb:strategies |" in page


def test_markdown_without_explain_fits_a_ticket(pack):
    # GitHub refuses an issue or comment body over 65,536 characters; the newcomer's md was 101,006
    short, full = render(_advice(pack), "md"), render(_advice(pack), "md", explain=True)
    assert len(short) < 65536 < 2 * len(short) or len(short) < len(full) / 3
    assert "## Conflict graph" not in short and "## Rules fired" not in short and "--explain` adds" in short
    for section in ("## Launch", "## Strategies", "## Rejected", "## Plan"):
        assert (section in short) == (section in full), section


def test_bidirectional_controls_cannot_reverse_the_page(pack):
    facts = facts_from_document({"hardware": {"gpu_name": "A\u202eBC"}, "telemetry": {"memory_used_ratio": 0.95}}, "x")
    advice = advise(facts, pack, "reference")
    for fmt in ("html", "md"):
        page = render(advice, fmt, explain=True)     # the facts table holds the hostile string
        assert "\u202e" not in page and "<U+202E>" in page.replace("&lt;", "<").replace("&gt;", ">")


def test_markdown_escapes_html_in_input_strings(pack):
    facts = facts_from_document({"hardware": {"gpu_name": "<img src=x onerror=alert(1)>"}}, "x")
    page = render(advise(facts, pack, "reference"), "md", explain=True)
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)>" in page     # no `<`, no tag; `>` alone is text


def test_markdown_keeps_an_arrow_and_quotes_nothing(pack):
    # `a -> b` read as `a -&gt; b` where entities are not decoded (a newcomer's walkthrough); a
    # leading `>` would still open a block quote, so it is escaped there.
    from kbopt.reports.escape import markdown_text
    assert markdown_text("goes 2,491 -> 2,919 ms") == "goes 2,491 -> 2,919 ms"
    assert markdown_text("> quoted") == "\\> quoted" and markdown_text("<b>") == "&lt;b>"


def test_a_what_if_page_says_which_side_it_shows(pack):
    base = _advice(pack)
    after = _advice(pack, overrides=["telemetry.memory_used_ratio=0.5"])
    page = render(after, "html", compare(base, after, "run.json", "run.json with --set"))
    assert 'id="what-if-banner"' in page and "the advice for <strong>run.json with --set</strong>" in page


def test_roofline_labels_overlap_no_other_label_and_stay_in_the_plot(pack):
    # a newcomer found kv_cache_quantization[fp8] written over quantization[fp8] (capacity-a100-chat)
    from kbopt.reports.charts import CHAR_PX, HEIGHT, LINE_PX, WIDTH, Roofline, roofline
    advice = advise(load_facts(ROOT / "examples" / "capacity-a100-chat.json"), pack, available_evaluators()[0])
    chart = roofline(advice)
    assert isinstance(chart, Roofline) and chart.now is not None and len(chart.moves) >= 3
    boxes = []
    for p in (chart.now, *chart.moves):
        width = CHAR_PX * len(p.label)
        left = p.label_x if p.anchor == "start" else p.label_x - width
        boxes.append((left, p.label_y - LINE_PX + 3, left + width, p.label_y + 3))
        assert left >= 0 and left + width <= WIDTH and 0 <= p.label_y <= HEIGHT, p.label
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
