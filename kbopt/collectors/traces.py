"""Workload facts from request traces, streamed (memory bounded by distinct lengths and windows).

Sequence length = prompt tokens + generated tokens: what the KV cache holds when the request
ends. Where a trace gives both parts, prompt and output lengths are summarized too (mean, p99).
Formats: Azure LLM inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens), Mooncake JSONL
(timestamp ms,input_length,output_length), BurstGPT CSV, `vllm bench serve` result JSON, and a
generic CSV/JSONL with a column mapping.
"""
from __future__ import annotations

import csv
import datetime
import heapq
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbopt.collectors.collected import Collected
from kbopt.errors import KboptError
from kbopt.kb.provenance import Provenance

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class TraceOptions:
    format: str = "auto"
    long_threshold: int = 2048          # tokens: a request longer than this counts as long
    window_s: float = 60.0              # arrival-rate windows, for the peak rate
    columns: dict[str, str] = field(default_factory=dict)   # generic: timestamp, prompt, output, total, duration
    time_unit: str = "s"                # generic: unit of the timestamp and duration columns


@dataclass
class TraceSummary:
    """Streaming statistics over requests."""
    options: TraceOptions
    lengths: dict[int, int] = field(default_factory=dict)      # total tokens -> requests
    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    longest: int = 0
    long: int = 0
    first_t: float | None = None
    last_t: float | None = None
    windows: dict[int, int] = field(default_factory=dict)      # window index -> arrivals
    ends: list[float] = field(default_factory=list)            # heap of running requests' end times
    concurrency_sum: int = 0
    concurrency_peak: int = 0
    with_duration: int = 0
    unsorted: bool = False
    earliest: float | None = None
    prompts: dict[int, int] = field(default_factory=dict)      # prompt tokens -> requests (when the trace splits them)
    outputs: dict[int, int] = field(default_factory=dict)      # output tokens -> requests
    prompt_blocks: int = 0              # prompt blocks the trace hashes (Mooncake's hash_ids), in all
    blocks_seen_before: int = 0         # of them, those an earlier request's prompt already held

    def add(self, t: float | None, tokens: int, duration: float | None = None, split: tuple[int, int] | None = None) -> None:
        """One request of `tokens` in all; `split`: its (prompt, output) tokens when the trace says."""
        if split is not None:
            self.prompts[split[0]] = self.prompts.get(split[0], 0) + 1
            self.outputs[split[1]] = self.outputs.get(split[1], 0) + 1
        self.n += 1
        self.lengths[tokens] = self.lengths.get(tokens, 0) + 1
        self.total += tokens
        self.total_sq += tokens * tokens
        if tokens > self.longest:
            self.longest = tokens
        if tokens > self.options.long_threshold:
            self.long += 1
        if t is None:
            return
        if not math.isfinite(t):
            raise ValueError(f"timestamp {t}")
        if self.first_t is None or self.last_t is None or self.earliest is None:   # all three are set by the first
            self.first_t = self.earliest = t
        elif t < self.last_t:
            self.unsorted = True
            self.earliest = min(self.earliest, t)
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        index = _window_index(t - self.first_t, self.options.window_s)
        self.windows[index] = self.windows.get(index, 0) + 1
        if duration is not None and not self.unsorted:
            ends = self.ends
            while ends and ends[0] <= t:
                heapq.heappop(ends)
            heapq.heappush(ends, t + duration)
            self.with_duration += 1
            self.concurrency_sum += len(ends)
            if len(ends) > self.concurrency_peak:
                self.concurrency_peak = len(ends)

    def percentile(self, q: float) -> int:
        return _percentile(self.lengths, q)

    def collected(self, source: str, metric: str) -> Collected:
        out = Collected()
        if self.n == 0:
            raise KboptError(f"--workload {source}: no requests in it")
        earliest = self.earliest if self.earliest is not None else self.first_t
        span = (self.last_t - earliest) if self.last_t is not None and earliest is not None else None
        def prov(note: str | None = None, metric_: str = metric, samples: int = self.n) -> Provenance:
            return Provenance(f"trace:{source}", "measured", metric=metric_, samples=samples,
                              window_s=round(span, 3) if span else None, note=note)
        mean = self.total / self.n
        out.put("workload.seq_len_max", self.longest, prov())
        out.put("workload.seq_len_mean", mean, prov())
        out.put("workload.seq_len_std", math.sqrt(max(0.0, self.total_sq / self.n - mean * mean)), prov())
        out.put("workload.seq_len_p99", self.percentile(0.99), prov())
        out.put("workload.long_seq_fraction", self.long / self.n,
                prov(note=f"share longer than {self.options.long_threshold} tokens (--long-threshold)"))
        # Only when every request was split: a mean over some of them would not be the trace's.
        if sum(self.prompts.values()) == self.n:
            for part, counts in (("prompt", self.prompts), ("output", self.outputs)):
                metric_ = metric.split("+")[0 if part == "prompt" else 1] if metric.count("+") == 1 else metric
                out.put(f"workload.{part}_len_mean", sum(k * v for k, v in counts.items()) / self.n, prov(metric_=metric_))
                out.put(f"workload.{part}_len_p99", _percentile(counts, 0.99), prov(metric_=metric_))
        if span and span > 0:
            out.put("workload.arrival_rate_per_s", self.n / span, prov(metric_="arrivals / trace span"))
            if self.unsorted:
                out.notes.append(f"{source}: timestamps are not in order; no peak arrival rate")
            elif span >= 2 * self.options.window_s:
                # Only whole windows: the last one is usually cut short by the end of the trace.
                full = [count for index, count in self.windows.items() if (index + 1) * self.options.window_s <= span]
                peak = max(full) / self.options.window_s if full else None
                out.put("workload.arrival_rate_peak_per_s", max(peak, self.n / span) if peak else None,
                        prov(metric_=f"busiest of the aligned {self.options.window_s:g} s windows (--window)"))
            else:
                out.notes.append(f"{source}: the trace spans {span:.0f} s, under two {self.options.window_s:g} s "
                                 "windows; no peak arrival rate (--window)")
        if self.prompt_blocks:
            reuse = self.blocks_seen_before / self.prompt_blocks
            out.put("workload.prefix_reuse_ratio", reuse, prov(metric_="hash_ids", samples=self.prompt_blocks,
                                                               note="the share of prompt blocks an earlier request held"))
            out.put("workload.prefix_cache_hit_ratio", reuse, Provenance(
                f"trace:{source}", "derived", metric="hash_ids", samples=self.prompt_blocks,
                window_s=round(span, 3) if span else None,
                note="the share of prompt blocks an earlier request held: what a prefix cache that never evicts "
                     "serves (the engine's own hit rate, where its metrics give one, wins)"))
        if self.unsorted and self.with_duration:
            out.notes.append(f"{source}: timestamps are not in order; concurrency was not computed")
        elif self.with_duration and not self.unsorted:
            note = "requests in flight, sampled at each arrival"
            out.put("workload.concurrency_mean", self.concurrency_sum / self.with_duration,
                    prov(note=note, metric_="start + duration"))
            out.put("workload.concurrency_peak", self.concurrency_peak, prov(note=note, metric_="start + duration"))
        return out


def _window_index(offset: float, window_s: float) -> int:
    """Which --window an arrival falls in; ValueError when the offset is beyond any float (a timestamp
    of 1e308 after one of -1e308), which int() would raise as OverflowError."""
    index = offset // window_s
    if not math.isfinite(index):
        raise ValueError(f"timestamp offset {offset}")
    return int(index)


def _percentile(counts: dict[int, int], q: float) -> int:
    """The smallest length with at least q of the requests at or under it (nearest rank)."""
    rank, seen = q * sum(counts.values()), 0
    ordered = sorted(counts)
    for length in ordered:
        seen += counts[length]
        if seen >= rank:
            return length
    return ordered[-1]


# ------------------------------------------------------------------ readers


def _minute_start(text: str) -> float:
    """`2023-11-16 18:15` -> seconds since day 1 (the trace's fractional seconds follow it)."""
    day = datetime.date(int(text[:4]), int(text[5:7]), int(text[8:10])).toordinal()
    return day * 86400 + int(text[11:13]) * 3600 + int(text[14:16]) * 60


def _offset_seconds(stamp: str) -> float:
    moment = datetime.datetime.fromisoformat(stamp.strip())
    utc_offset = moment.utcoffset()     # None without a time zone
    offset = utc_offset.total_seconds() if utc_offset is not None else 0.0
    naive = moment.replace(tzinfo=None)
    return naive.toordinal() * 86400 + naive.hour * 3600 + naive.minute * 60 + naive.second \
        + naive.microsecond / 1e6 - offset


def _azure(path: Path, summary: TraceSummary) -> str:
    # The hot loop of a million-row trace: plain splits (the format has no quoting), a cache of
    # minute starts instead of parsing every timestamp, and the statistics kept in locals.
    minutes: dict[str, float] = {}
    lengths = summary.lengths
    threshold = summary.options.long_threshold
    window = summary.options.window_s
    windows = summary.windows
    prompts, outputs = summary.prompts, summary.outputs
    n = long = longest = 0
    total = total_sq = 0.0
    first_t: float | None = None
    last_t = -math.inf      # a float from the start (set with first_t by the first request): no None test per row
    ordered = True
    with open(path, encoding="utf-8") as handle:
        header = handle.readline()
        if [h.strip() for h in header.split(",")[:3]] != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            raise KboptError(f"--workload {path}: not an Azure LLM trace (header TIMESTAMP,ContextTokens,GeneratedTokens)")
        for line, text in enumerate(handle, 2):
            try:
                stamp, context, generated = text.split(",")
                minute = minutes.get(stamp[:16])
                if minute is None:
                    minute = minutes[stamp[:16]] = _minute_start(stamp)
                try:
                    t = minute + float(stamp[17:])
                except ValueError:          # 2024 traces: `2024-05-10 00:00:00.009930+00:00`
                    t = _offset_seconds(stamp)
                # _lengths, inline: a CSV field is text, which int() reads only as a whole number
                prompt, output = int(context), int(generated)
                if prompt < 0 or output < 0 or prompt > MAX_TOKENS or output > MAX_TOKENS:
                    raise ValueError("a negative or impossibly long length")
                tokens = prompt + output
            except ValueError:
                if not text.strip():
                    continue
                raise KboptError(f"--workload {path}:{line}: cannot read {text.strip()!r} as "
                                 "TIMESTAMP,ContextTokens,GeneratedTokens") from None
            n += 1
            lengths[tokens] = lengths.get(tokens, 0) + 1
            prompts[prompt] = prompts.get(prompt, 0) + 1
            outputs[output] = outputs.get(output, 0) + 1
            total += tokens
            total_sq += tokens * tokens
            if tokens > longest:
                longest = tokens
            if tokens > threshold:
                long += 1
            if first_t is None:
                first_t = last_t = t
            elif t < last_t:
                ordered = False
            else:
                last_t = t
            try:        # _window_index, inline: int() refuses an offset that is not finite
                index = int((t - first_t) // window)
            except (ValueError, OverflowError):
                raise KboptError(f"--workload {path}:{line}: timestamp {stamp!r} is too far from the first one") from None
            windows[index] = windows.get(index, 0) + 1
    summary.n, summary.long, summary.longest = n, long, longest
    summary.total, summary.total_sq = total, total_sq
    summary.first_t, summary.last_t, summary.unsorted = first_t, (last_t if first_t is not None else None), not ordered
    summary.earliest = min(minutes.values()) if not ordered and minutes else first_t
    return "ContextTokens+GeneratedTokens"


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, 1):
            if text.strip():
                try:
                    yield line, json.loads(text)
                except json.JSONDecodeError as error:
                    raise KboptError(f"--workload {path}:{line}: not JSON: {error.msg}") from None
                except RecursionError:      # json nests without a bound; a trace row is flat
                    raise KboptError(f"--workload {path}:{line}: JSON nested too deeply") from None


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        yield from enumerate(csv.DictReader(handle), 2)  # line 1 is the header


# A request's length in tokens, far above any model's context: beyond it a count is a broken row, and
# sums of squares of such counts would overflow a float.
MAX_TOKENS = 2**40


def _lengths(prompt: object, output: object) -> tuple[int, int]:
    """A request's (prompt, output) tokens; ValueError unless both are whole numbers in 0..MAX_TOKENS."""
    for value in (prompt, output):      # int() would read true as 1, and 2.7 as 2
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("a length that is not a whole number")
    pair = (int(prompt), int(output))   # type: ignore[call-overload]   # a row's value: int() says what it cannot read
    if min(pair) < 0 or max(pair) > MAX_TOKENS:
        raise ValueError("a negative or impossibly long length")
    return pair


# Distinct prompt blocks a trace's reuse is counted over: about 100 MiB of hashes. Past them the
# reuse is the share over the requests read until then (a million-request trace, or a hostile one,
# does not hold every hash it names in memory).
MAX_HASHED_BLOCKS = 2_000_000


def _mooncake(path: Path, summary: TraceSummary) -> str:
    # hash_ids: each prompt block's hash, chained over the blocks before it (Mooncake's traces), so a
    # hash seen before is a prefix an earlier request already computed.
    seen: set[int | str] = set()
    for line, row in _jsonl_rows(path):
        try:
            prompt, output = _lengths(row["input_length"], row["output_length"])
            if isinstance(row["timestamp"], bool):
                raise TypeError("a timestamp that is true or false")
            summary.add(row["timestamp"] / 1000, prompt + output, split=(prompt, output))
        except (KeyError, TypeError, ValueError, OverflowError):
            raise KboptError(f"--workload {path}:{line}: expected timestamp, input_length, output_length") from None
        blocks = row.get("hash_ids")
        if blocks is None or len(seen) >= MAX_HASHED_BLOCKS:
            continue
        if not isinstance(blocks, list) or not all(type(block) in (int, str) for block in blocks):
            raise KboptError(f"--workload {path}:{line}: hash_ids is a list of block hashes (whole numbers or text)")
        summary.prompt_blocks += len(blocks)
        before = len(seen)
        seen.update(blocks)
        summary.blocks_seen_before += len(blocks) - (len(seen) - before)
    return "input_length+output_length"


def _burstgpt(path: Path, summary: TraceSummary) -> str:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = csv.DictReader(handle)
        for line, row in enumerate(rows, 2):
            try:
                prompt, output = _lengths(row["Request tokens"], row["Response tokens"])
                summary.add(float(row["Timestamp"]), prompt + output, split=(prompt, output))
            except (KeyError, TypeError, ValueError, OverflowError):
                raise KboptError(f"--workload {path}:{line}: expected Timestamp, Request tokens, Response tokens") from None
    return "Request tokens+Response tokens"


def _generic(path: Path, summary: TraceSummary, options: TraceOptions, jsonl: bool) -> str:
    columns = options.columns
    if not ("total" in columns or {"prompt", "output"} <= set(columns)):
        raise KboptError(f"--workload {path}: say which columns hold the lengths: "
                         "--columns prompt=NAME,output=NAME (or total=NAME), plus timestamp=NAME and duration=NAME if present")
    unit = TIME_UNITS[options.time_unit]
    rows = _jsonl_rows(path) if jsonl else _csv_rows(path)
    for line, row in rows:
        try:
            split = None if "total" in columns else (int(float(row[columns["prompt"]])), int(float(row[columns["output"]])))
            tokens = int(float(row[columns["total"]])) if split is None else split[0] + split[1]
            t = float(row[columns["timestamp"]]) * unit if "timestamp" in columns else None
            duration = float(row[columns["duration"]]) * unit if "duration" in columns else None
        except KeyError as error:
            raise KboptError(f"--workload {path}:{line}: no column {error.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError):
            raise KboptError(f"--workload {path}:{line}: a mapped column is not a finite number") from None
        if tokens < 0 or min(split or (0,)) < 0 or (duration is not None and duration < 0):
            raise KboptError(f"--workload {path}:{line}: a length or duration is negative")
        if tokens > MAX_TOKENS:
            raise KboptError(f"--workload {path}:{line}: a length beyond {MAX_TOKENS} tokens")
        if (t is not None and not math.isfinite(t)) or (duration is not None and not math.isfinite(duration)):
            raise KboptError(f"--workload {path}:{line}: a timestamp or duration is not a finite number")
        try:
            summary.add(t, tokens, duration, split)
        except ValueError:
            raise KboptError(f"--workload {path}:{line}: the timestamp is too far from the first one") from None
    return columns["total"] if "total" in columns else f"{columns['prompt']}+{columns['output']}"


def _vllm_bench(path: Path, options: TraceOptions) -> Collected:
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KboptError(f"--workload {path}: not a vllm bench serve result: {error}") from None
    except RecursionError:          # json nests without a bound; a result is a few levels deep
        raise KboptError(f"--workload {path}: not a vllm bench serve result: JSON nested too deeply") from None
    try:
        return _vllm_bench_facts(path, result, options)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise KboptError(f"--workload {path}: not a vllm bench serve result ({type(error).__name__}: {error}); "
                         "expected completed, duration, total_input_tokens, total_output_tokens, p99_ttft_ms, ...") from None


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} is {value!r}, not a non-negative number")
    return value


def _vllm_bench_facts(path: Path, result: dict[str, Any], options: TraceOptions) -> Collected:
    source = f"trace:{path.name}"
    completed = int(_number(result["completed"], "completed"))
    if not completed:
        raise KboptError(f"--workload {path}: no completed requests in this vllm bench serve result")
    out = Collected()
    if isinstance(result.get("input_lens"), list) and isinstance(result.get("output_lens"), list):
        summary = TraceSummary(options)
        # strict=False: as far as both lists go, as before (a mismatch is not reported)
        for prompt, output in zip(result["input_lens"], result["output_lens"], strict=False):
            split = (int(_number(prompt, "input_lens[]")), int(_number(output, "output_lens[]")))
            summary.add(None, split[0] + split[1], split=split)
        out.merge(summary.collected(path.name, "input_lens+output_lens (per request)"))
    else:
        prompts = _number(result["total_input_tokens"], "total_input_tokens")
        outputs = _number(result["total_output_tokens"], "total_output_tokens")
        # The totals count the completed requests only (vllm bench adds a request's lengths when it succeeds).
        for path_, value, metric in (("workload.seq_len_mean", prompts + outputs, "(total_input_tokens+total_output_tokens)/completed"),
                                     ("workload.prompt_len_mean", prompts, "total_input_tokens/completed"),
                                     ("workload.output_len_mean", outputs, "total_output_tokens/completed")):
            out.put(path_, value / completed, Provenance(source, "measured", metric=metric, samples=completed))
        out.notes.append(f"{path.name}: aggregates only (saved without --save-detailed): no length spread or p99")
    duration = _number(result["duration"], "duration") if result.get("duration") is not None else None
    rate = result.get("request_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0:
        out.put("workload.arrival_rate_per_s", rate, Provenance(source, "user", metric="request_rate",
                                                                note="the rate the benchmark was asked to send"))
    elif duration:
        out.put("workload.arrival_rate_per_s", completed / duration, Provenance(
            source, "derived", metric="completed/duration", samples=completed, window_s=duration,
            note="requests sent as fast as possible: this is the served rate, not an arrival rate"))
    if result.get("max_concurrent_requests"):
        out.put("workload.concurrency_peak", int(_number(result["max_concurrent_requests"], "max_concurrent_requests")),
                Provenance(source, "measured", metric="max_concurrent_requests", window_s=duration))
    for path_, key in (("workload.ttft_p99_ms", "p99_ttft_ms"), ("workload.itl_p99_ms", "p99_itl_ms"),
                       ("workload.ttft_mean_ms", "mean_ttft_ms"), ("workload.itl_mean_ms", "mean_itl_ms")):
        if result.get(key) is not None:
            out.put(path_, _number(result[key], key), Provenance(source, "measured", metric=key, samples=completed))
    # Token rates at the load the benchmark sent, over its whole run.
    if result.get("output_throughput") is not None:
        out.put("workload.generation_tokens_per_s", _number(result["output_throughput"], "output_throughput"),
                Provenance(source, "measured", metric="output_throughput", samples=completed, window_s=duration,
                           note="at the benchmark's load"))
    if duration and result.get("total_input_tokens") is not None:
        out.put("workload.prompt_tokens_per_s", _number(result["total_input_tokens"], "total_input_tokens") / duration,
                Provenance(source, "derived", metric="total_input_tokens/duration", samples=completed, window_s=duration,
                           note="at the benchmark's load"))
    if result.get("failed"):
        out.notes.append(f"{path.name}: {result['failed']} of {completed + result['failed']} requests failed")
    return out


def _detect(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        head = handle.readline().strip()
    if head.startswith("TIMESTAMP,ContextTokens,GeneratedTokens"):
        return "azure"
    if head.startswith("Timestamp,Model,Request tokens"):
        return "burstgpt"
    if head.startswith("{"):
        try:
            row = json.loads(head)
        except (json.JSONDecodeError, RecursionError):
            row = None
        if isinstance(row, dict) and {"timestamp", "input_length", "output_length"} <= set(row):
            return "mooncake"
        if path.suffix == ".json" or row is None:
            return "vllm-bench"
        return "jsonl"
    return "csv"


def summarize_trace(path: str, options: TraceOptions) -> Collected:
    trace = Path(path)
    if not trace.is_file():
        raise KboptError(f"--workload {path}: no such file")
    kind = _detect(trace) if options.format == "auto" else options.format
    if kind == "vllm-bench":
        return _vllm_bench(trace, options)
    if not (math.isfinite(options.window_s) and options.window_s > 0):
        raise KboptError(f"--window {options.window_s:g}: the arrival-rate window is a positive number of seconds")
    summary = TraceSummary(options)
    try:
        if kind == "azure":
            metric = _azure(trace, summary)
        elif kind == "mooncake":
            metric = _mooncake(trace, summary)
        elif kind == "burstgpt":
            metric = _burstgpt(trace, summary)
        else:
            metric = _generic(trace, summary, options, jsonl=(kind == "jsonl"))
    except UnicodeDecodeError:
        raise KboptError(f"--workload {path}: not UTF-8 text") from None
    return summary.collected(trace.name, metric)
