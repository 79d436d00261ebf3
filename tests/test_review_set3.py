"""Expert review set 3: eight deployments kbopt's authors did not write (tests/data/review3, each
with today's launch command), and the defects the reviewer found, as the advice must now read.
Hand figures are the reviewer's, from the engines' sources and the formulas' own papers."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.command import read_command
from kbopt.engine.advice.launch import build_launch
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import load_facts
from kbopt.reports.emit import render_launch

DATA = Path(__file__).resolve().parent / "data" / "review3"


def _deployment(pack, name: str, *overrides: str):
    """The advice on deployment `name` (d1 … d8) read with today's launch command, and that command."""
    facts_file = next(DATA.glob(f"{name}-*.json"))
    command = read_command((DATA / f"{name}.launch").read_text().strip())
    facts = load_facts(facts_file, [*command.overrides(), *overrides])
    return advise(facts, pack, available_evaluators()[0]), command


def _script(pack, name: str) -> str:
    advice, command = _deployment(pack, name)
    script = render_launch(build_launch(advice, command.engine, command), advice.bottleneck)
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    return script


def _strategy(advice, sid: str):
    return next((s for s in advice.strategies if s.id == sid), None)


def test_d6_a_cap_that_binds_with_the_kv_pool_nearly_empty_is_raised_before_any_hardware(pack):
    # TRT-LLM 1.1, Qwen3-30B-A3B on one B200: --max_batch_size 64 runs 63.6 with 140 waiting and the
    # KV cache 11% used. The pool holds 1,132,800 tokens / 2,400 = 472 requests at full length; in
    # flight 203.6 x 9.5/7.5 (peak over mean arrivals) = 257.9 -> 258.
    advice, _ = _deployment(pack, "d6")
    raise_cap = _strategy(advice, "memory_budget")
    assert raise_cap is not None and raise_cap.status == "change" and raise_cap.params["max_num_seqs"] == 258
    assert "S-BATCH-CAP-RAISE" in raise_cap.recommended_by
    assert advice.strategies[0].id == "memory_budget"       # first: one flag on the same GPUs
    assert "scale_out" not in {s.id for s in advice.strategies}
    assert any(r.id == "scale_out" and "S-BATCH-CAP-RAISE" in r.because for r in advice.rejected)
    gain = next(g for g in raise_cap.expected if g.metric == "decode_tokens_per_s")
    assert 1.8 <= gain.after / gain.before <= 2.6            # the reviewer's what-if: 2.15x at batch 200
    script = _script(pack, "d6")
    assert "--max_batch_size 258" in script and "64 -> 258" in script
