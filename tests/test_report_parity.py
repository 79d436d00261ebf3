"""Markdown and HTML carry what the text has (issue 29): every strategy with its keep/change status
and the deployed engine's settings, and the symptoms first. Structure, not figures."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document
from kbopt.reports import render
from kbopt.reports.common import engine_settings

ROOT = Path(__file__).resolve().parents[1]


def _advice(pack, name, engine):
    document = json.loads((ROOT / "examples" / name).read_text(encoding="utf-8"))
    document.setdefault("workload", {})["engine"] = engine
    return advise(facts_from_document(document, name), pack, available_evaluators()[0])


def _flat(out: str, fmt: str) -> str:
    """A report as words: tags gone and entities read (HTML), escapes read (Markdown), wrapping undone."""
    if fmt == "html":
        out = html.unescape(re.sub(r"<[^>]+>", " ", out))
    if fmt == "md":
        out = re.sub(r"(?<!\\)`", "", out)              # code spans' backticks
        out = re.sub(r"\\([\\`*\[\]|~])", r"\1", out).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return " ".join(out.split())


KEEP = {"text": "(keep: already in place)", "md": "| keep (already in place) |", "html": 'class="pill status">keep: already in place'}


@pytest.mark.parametrize("name,engine", [("bandwidth-l40s-decode.json", "vllm"), ("l4-8b-bf16-vllm.json", "vllm"),
                                         ("capacity-a100-chat.json", "sglang")])
def test_every_format_carries_the_strategies_statuses_and_engine_settings(pack, name, engine):
    advice = _advice(pack, name, engine)
    kept = [s for s in advice.strategies if s.status == "keep"]
    assert kept and any(s.status == "change" for s in advice.strategies)
    settings = [f"{e}: {line}" for s in advice.strategies for e, line in engine_settings(s)]
    assert settings and any("in place, nothing set" in line for line in settings)
    for fmt in ("text", "md", "html"):
        out = render(advice, fmt)
        assert out.count(KEEP[fmt]) == len(kept), fmt
        flat = _flat(out, fmt)
        for strategy in advice.strategies:
            assert strategy.id in flat, (fmt, strategy.id)
        for line in settings:
            assert " ".join(line.split()) in flat, (fmt, line)


def test_a_kept_strategy_sets_nothing_in_any_report(pack):
    advice = _advice(pack, "bandwidth-l40s-decode.json", "vllm")
    kept = next(s for s in advice.strategies if s.id == "continuous_batching" and s.status == "keep")
    flag = kept.settings["vllm"][0]            # what it would set, were it a change
    assert flag.startswith("--max-num-seqs")
    for fmt in ("text", "md", "html"):
        assert flag not in render(advice, fmt), fmt


def test_the_16_bit_variant_reads_as_the_weights_dtype():
    # the catalog's 16-bit quantization variant is fp16; kept over bf16 weights, the reports say bf16
    from kbopt.engine.advice.model import StrategyAdvice
    from kbopt.reports.common import key_text
    kept = StrategyAdvice(id="quantization", layer="compute", title="Quantization", status="keep",
                          params={"scheme": "fp16"}, because=("S-QUANT-FP16-COMPUTE",), key="quantization[fp16]")
    from kbopt.reports.common import shown_params
    assert key_text(kept, {"model.weight_dtype": "bf16"}) == "quantization[bf16]"
    assert shown_params(kept, {"model.weight_dtype": "bf16"}) == {"scheme": "bf16"}
    assert key_text(kept, {"model.weight_dtype": "fp16"}) == "quantization[fp16]"
    assert shown_params(kept, {"model.weight_dtype": "fp16"}) == {"scheme": "fp16"}
