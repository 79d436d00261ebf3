"""The performance model against published measurements: `python benchmarks/validate.py`.

Every row under benchmarks/validation/rows/ is one public measurement (a benchmark table's row, an
engine's log line) with the facts document of the deployment measured and its source. The rows
are evaluated by the built-in rules, exactly as `kbopt advise` evaluates a facts file, and each
estimate is set against what was measured:

  step     derived.decode_step_expected_ms (a static or batch-1 run: `tpot_scope: decode_only`) or
           derived.itl_expected_ms (prefills share the steps) against the measured time per token
  tput     derived.decode_tokens_per_s against the measured output tokens per second
  ttft     derived.ttft_expected_ms against the measured mean time to first token
  kv_pool  derived.kv_pool_tokens against the tokens the engine's log says its KV cache holds
  gain     the ratio of an estimate after the row's `after` change to before (output tokens/s, or
           the inverse of the step) against the measured speed-up

Error is (predicted - measured) / measured. Per metric it prints the rows, the median |error|, the
worst error, the share of rows where the model is optimistic (a faster step or first token, more
throughput, a larger pool or gain than measured) and, with --loso, the leave-one-source-out median
|error|: the model's efficiency factors refitted without each source in turn and that source's rows
predicted by the refit, so a figure that holds there does not rest on the rows it is checked on.

  --write      store the per-metric figures in kb/model_errors.yaml, which the advice shows as each
               estimate's error band and tests/test_model_validation.py holds the model to, and
               their table in docs/model.md
  --rows DIR   another folder of rows (the same layout); --json prints every row's error
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROWS = HERE / "validation" / "rows"
ERRORS_FILE = HERE.parent / "kb" / "model_errors.yaml"
MODEL_DOC = HERE.parent / "docs" / "model.md"
TABLE_START, TABLE_END = "<!-- validation table: written by benchmarks/validate.py --loso --write -->", "<!-- end of validation table -->"

# metric -> (derived fact compared, measured key, optimistic when the prediction is below the measurement)
METRICS: dict[str, tuple[str, str, bool]] = {
    "step": ("derived.decode_step_expected_ms", "tpot_ms", True),
    "tput": ("derived.decode_tokens_per_s", "output_tokens_per_s", False),
    "ttft": ("derived.ttft_expected_ms", "ttft_ms", True),
    "kv_pool": ("derived.kv_pool_tokens", "kv_pool_tokens", False),
    "gain": ("derived.decode_tokens_per_s", "speedup", False),
}
OFFLINE_CONCURRENCY = 100_000      # an offline run's clients: more than any engine runs at once
# The factors refitted for the leave-one-source-out figure, each over a grid around public values
# (rules/parameters.yaml says where each comes from); everything else stays as written.
FITTED: dict[str, tuple[float, ...]] = {
    "bandwidth_efficiency_default": (0.7, 0.75, 0.8, 0.85),
    "compute_efficiency": (0.45, 0.55, 0.65),
}


@dataclass(frozen=True)
class Row:
    id: str
    source_id: str
    facts: dict[str, Any]
    measured: dict[str, Any]
    compare: tuple[str, ...]
    tpot_scope: str | None
    after: dict[str, Any]
    gain_metric: str
    load: str | None = None          # offline_max: every request queued at once (trtllm-bench's max-load runs)


@dataclass(frozen=True)
class Error:
    row: str
    source_id: str
    metric: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    @property
    def optimistic(self) -> bool:
        below = METRICS[self.metric][2]
        return self.predicted < self.measured if below else self.predicted > self.measured


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def load_rows(folder: Path = ROWS) -> list[Row]:
    rows = []
    for path in sorted(folder.rglob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        measured = dict(raw["measured"])
        after = dict(raw.get("after") or {})
        compare = tuple(raw["compare"])
        if "gain_fp8" in compare:      # the first published set's spelling: FP8 weights against 16-bit
            compare = tuple("gain" if c == "gain_fp8" else c for c in compare)
            measured.setdefault("speedup", measured.get("speedup_fp8_vs_fp16"))
            after = after or {"model.weight_dtype": "fp8"}
        facts = raw["facts"]
        if raw.get("load") == "offline_max":
            # the whole dataset is queued at the start: the clients' concurrency is unbounded and the
            # engine's caps and KV pool decide the running batch, as in the run
            facts = _set(facts, {"workload.concurrency_mean": OFFLINE_CONCURRENCY})
        rows.append(Row(raw["id"], raw.get("source_id") or _slug(raw["source"]), facts, measured, compare,
                        raw.get("tpot_scope"), after, str(raw.get("gain_metric") or measured.get("gain_metric") or "output_tokens_per_s"),
                        raw.get("load")))
    return rows


class Model:
    """The built-in pack (its parameters overridden where asked) evaluating facts documents."""

    def __init__(self, overrides: dict[str, float] | None = None):
        from kbopt.engine.evaluators import make_evaluator
        from kbopt.engine.pack.loader import load_pack
        if overrides:
            with tempfile.TemporaryDirectory() as folder:
                text = "parameters:\n" + "".join(
                    f"  {name}:\n    value: {value}\n    why: refitted by benchmarks/validate.py\n    overrides: true\n"
                    for name, value in overrides.items())
                Path(folder, "parameters.yaml").write_text(text, encoding="utf-8")
                self.pack = load_pack([folder])
        else:
            self.pack = load_pack()
        self.evaluator = make_evaluator(self.pack, "reference")

    def derived(self, document: dict[str, Any], changes: dict[str, Any] | None = None) -> dict[str, Any]:
        from kbopt.kb.facts import facts_from_document
        facts = facts_from_document({"kbopt": "facts/1", **document}, "validation")
        values = facts.engine_values(self.pack.kb.vocabulary)
        for path, value in (changes or {}).items():
            values[path] = value
        return {path: value for path, (value, _rule) in self.evaluator.run(values).derived.items()}


def _set(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The document with dotted paths set (a what-if as the row's source made it)."""
    out = json.loads(json.dumps(document))
    for path, value in changes.items():
        section, name = path.split(".", 1)
        out.setdefault(section, {})[name] = value
    return out


def errors(model: Model, rows: Iterable[Row]) -> list[Error]:
    out = []
    for row in rows:
        derived = model.derived(row.facts)
        for metric in row.compare:
            fact, key, _ = METRICS[metric]
            measured = row.measured.get(key)
            if not isinstance(measured, (int, float)) or measured <= 0:
                continue
            if metric == "step" and row.tpot_scope == "with_prefill_share":
                fact = "derived.itl_expected_ms"
            if metric == "gain":
                after = model.derived(_set(row.facts, row.after))
                fact = "derived.decode_step_expected_ms" if row.gain_metric == "tpot_ms" else fact
                before_value, after_value = derived.get(fact), after.get(fact)
                if not before_value or not after_value:
                    continue
                predicted = before_value / after_value if row.gain_metric == "tpot_ms" else after_value / before_value
            else:
                predicted = derived.get(fact)
            if isinstance(predicted, (int, float)) and math.isfinite(predicted):
                out.append(Error(row.id, row.source_id, metric, float(predicted), float(measured)))
    return out


@dataclass(frozen=True)
class Summary:
    metric: str
    rows: int
    median_abs: float
    worst: float
    optimistic: float
    loso_median_abs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": self.rows, "median_abs_error": round(self.median_abs, 4),
                               "worst_error": round(self.worst, 4), "optimistic_share": round(self.optimistic, 4)}
        if self.loso_median_abs is not None:
            out["loso_median_abs_error"] = round(self.loso_median_abs, 4)
        return out


def summarize(found: Sequence[Error], loso: Sequence[Error] = ()) -> list[Summary]:
    out = []
    for metric in METRICS:
        mine = [e for e in found if e.metric == metric]
        if not mine:
            continue
        held = [abs(e.error) for e in loso if e.metric == metric]
        out.append(Summary(metric, len(mine), statistics.median(abs(e.error) for e in mine),
                           max((e.error for e in mine), key=abs), sum(e.optimistic for e in mine) / len(mine),
                           statistics.median(held) if held else None))
    return out


def _score(found: Sequence[Error]) -> float:
    """What a fit minimizes: the sum over metrics of the median |log(predicted / measured)|, so that
    every metric weighs the same however many rows it has."""
    by_metric: dict[str, list[float]] = {}
    for e in found:
        by_metric.setdefault(e.metric, []).append(abs(math.log(e.predicted / e.measured)))
    return sum(statistics.median(v) for v in by_metric.values())


def fit(rows: Sequence[Row]) -> dict[str, float]:
    """The grid point of FITTED that scores best on these rows."""
    best: tuple[float, dict[str, float]] | None = None
    for point in _grid():
        score = _score(errors(Model(point), rows))
        if best is None or score < best[0]:
            best = (score, point)
    assert best is not None
    return best[1]


def _grid() -> list[dict[str, float]]:
    points: list[dict[str, float]] = [{}]
    for name, values in FITTED.items():
        points = [{**p, name: v} for p in points for v in values]
    return points


def _held_out(args: tuple[list[Row], str]) -> list[Error]:
    rows, source = args
    fitted = fit([r for r in rows if r.source_id != source])
    return errors(Model(fitted), [r for r in rows if r.source_id == source])


def leave_one_source_out(rows: Sequence[Row], jobs: int = 2) -> list[Error]:
    sources = sorted({r.source_id for r in rows})
    work = [(list(rows), s) for s in sources]
    if jobs <= 1:
        return [e for chunk in map(_held_out, work) for e in chunk]
    with ProcessPoolExecutor(jobs) as pool:
        return [e for chunk in pool.map(_held_out, work) for e in chunk]


def table(summaries: Sequence[Summary]) -> str:
    lines = ["| metric | rows | median abs error | worst error | optimistic | leave-one-source-out median |",
             "|---|---|---|---|---|---|"]
    for s in summaries:
        loso = f"{s.loso_median_abs:.1%}" if s.loso_median_abs is not None else "-"
        lines.append(f"| {s.metric} | {s.rows} | {s.median_abs:.1%} | {s.worst:+.1%} | {s.optimistic:.0%} | {loso} |")
    return "\n".join(lines)


def documented_table(errors_yaml: dict[str, Any]) -> str:
    """The table of kb/model_errors.yaml as docs/model.md shows it."""
    summaries = [Summary(metric, int(m["rows"]), float(m["median_abs_error"]), float(m["worst_error"]),
                         float(m["optimistic_share"]), m.get("loso_median_abs_error"))
                 for metric, m in errors_yaml["metrics"].items()]
    return f"{errors_yaml['rows']} rows from {errors_yaml['sources']} sources.\n\n" + table(summaries)


def write_doc_table(errors_yaml: dict[str, Any]) -> None:
    text = MODEL_DOC.read_text(encoding="utf-8")
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    MODEL_DOC.write_text(text[:start] + "\n" + documented_table(errors_yaml) + "\n" + text[end:], encoding="utf-8")


def write_errors(summaries: Sequence[Summary], rows: int, sources: int) -> None:
    import yaml
    header = ("# The performance model's error on benchmarks/validation (written by `python benchmarks/validate.py\n"
              "# --loso --write`; do not edit by hand). Each estimate's error band in the advice comes from here, and\n"
              "# tests/test_model_validation.py fails when a change makes a median error worse than written.\n")
    body = {"rows": rows, "sources": sources, "metrics": {s.metric: s.to_dict() for s in summaries}}
    ERRORS_FILE.write_text(header + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    write_doc_table(yaml.safe_load(ERRORS_FILE.read_text(encoding="utf-8")))


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, default=ROWS)
    parser.add_argument("--loso", action="store_true", help="also the leave-one-source-out error (refits per source)")
    parser.add_argument("--write", action="store_true", help="store the figures in kb/model_errors.yaml")
    parser.add_argument("--json", action="store_true", help="every row's error as JSON lines")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    rows = load_rows(args.rows)
    found = errors(Model(), rows)
    loso = leave_one_source_out(rows, args.jobs) if args.loso else []
    summaries = summarize(found, loso)
    if args.json:
        for e in found:
            out(json.dumps({"row": e.row, "source": e.source_id, "metric": e.metric, "predicted": e.predicted,
                            "measured": e.measured, "error": round(e.error, 4)}))
    sources = len({r.source_id for r in rows})
    out(f"{len(rows)} rows from {sources} sources; error = (predicted - measured) / measured")
    out(table(summaries))
    if args.write:
        write_errors(summaries, len(rows), sources)
        out(f"wrote {ERRORS_FILE.relative_to(HERE.parent)} and the table of {MODEL_DOC.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
