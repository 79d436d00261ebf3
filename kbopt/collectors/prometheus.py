"""Facts from Prometheus text exposition: dcgm-exporter, vLLM, SGLang, TGI, Triton/TensorRT-LLM.

Parsed with prometheus_client's parser, never by hand. A source is a file or an http(s) URL.
One scrape gives gauges and, for counters and histograms, totals since the exporter started;
two scrapes of the same endpoint (`--duration`) give rates and histogram quantiles over the
window from the differences.
"""
from __future__ import annotations

import itertools
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from kbopt.collectors.collected import Collected
from kbopt.collectors.nvml import SLOWDOWN_REASONS
from kbopt.collectors.web import HttpProblem, exchange
from kbopt.errors import KboptError
from kbopt.kb.provenance import Provenance

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scrape:
    source: str
    samples: dict[str, list[tuple[dict[str, str], float]]]   # sample name -> [(labels, value)]
    at: float | None = None      # time.monotonic() when it was read: two scrapes' difference is the rates' window

    def values(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        return [(labels, value) for labels, value in self.samples.get(name, [])
                if all(labels.get(k) == v for k, v in match.items())]

    def first(self, *names: str) -> tuple[str, list[tuple[dict[str, str], float]]] | None:
        for name in names:
            if name in self.samples:
                return name, self.samples[name]
        return None


def read_exposition(source: str, timeout_s: float = 5.0) -> str:
    if source.startswith(("http://", "https://")):
        try:
            answer = exchange(source, timeout_s, headers={"Accept": "text/plain"})
        except HttpProblem as error:
            raise KboptError(f"--metrics {source}: cannot scrape it: {error}") from None
        if answer.status != 200:
            raise KboptError(f"--metrics {source}: cannot scrape it: HTTP {answer.status} {answer.reason}")
        return answer.body.decode("utf-8", errors="replace")
    if "://" in source:
        raise KboptError(f"--metrics {source}: only files and http(s) URLs are supported")
    try:
        return Path(source).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise KboptError(f"--metrics {source}: cannot read it: {error.strerror}") from None


# ------------------------------------------------------------------ prefilter
# prometheus_client's parser walks label text one character at a time in Python, and a node's
# exposition is mostly families kbopt never reads (Go/Python runtime, per-handler HTTP, unread
# DCGM fields, latency histograms no mapper uses). Dropping their lines before parsing makes a
# 50k-series exposition many times faster (docs/performance.md), with identical facts.

# Families whose samples the mappers below read (a histogram's or counter's base name stands for
# its _bucket/_sum/_count/_created/_total samples). A test checks that every metric name this
# module mentions is in it: add here what a mapper starts to read.
READ_FAMILIES = frozenset({
    "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "vllm:cache_config_info", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_preemptions", "vllm:request_success",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
    "sglang:spec_accept_length",
    "sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs",
    "sglang:time_to_first_token_seconds", "sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds",
    "sglang:prompt_tokens", "sglang:generation_tokens", "sglang:cache_hit_rate", "sglang:gen_throughput",
    "sglang:e2e_request_latency_seconds", "sglang:cached_tokens", "sglang:total_retracted_reqs",
    "tgi_queue_size", "tgi_batch_current_size",
    "nv_trt_llm_kv_cache_block_metrics", "nv_trt_llm_request_metrics", "nv_inference_pending_request_count",
})
# Beyond these samples the collector looks at every sample's name (which exporters are there)
# and at every sample's gpu, GPU_I_ID and modelName labels (which GPUs, MIG, the GPU's name).
ENGINE_PREFIXES = ("DCGM_FI_", "vllm:", "sglang:", "tgi_", "nv_trt_llm_")
_SUFFIXES = frozenset({"total", "bucket", "sum", "count", "created"})
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"')
# The sample names prometheus_client's parser lets a # TYPE'd family have (its own table).
_ALLOWED = {"counter": ("",), "gauge": ("",), "summary": ("_count", "_sum", ""),
            "histogram": ("_count", "_sum", "_bucket")}
# What the collector reads from a sample's labels: (gpu, has GPU_I_ID, modelName).
LabelKey = tuple[str | None, bool, str | None]


def _wanted(name: str) -> bool:
    if name in READ_FAMILIES:
        return True
    base, _, suffix = name.rpartition("_")
    return suffix in _SUFFIXES and base in READ_FAMILIES


def _label_key(rest: str) -> LabelKey | str | None:
    """What the collector reads from the labels in `rest` (a sample line after its `{`):
    (gpu, has GPU_I_ID, modelName), or None when it has none of them. When they cannot be read
    simply (escapes, a label twice) it is `rest` itself, unique, so that the line is kept: a line
    kept in error costs time, one dropped in error would change facts."""
    if "gpu" not in rest and "GPU_I_ID" not in rest and "modelName" not in rest:
        return None
    if "\\" in rest:
        return rest
    pairs = _LABEL.findall(rest)
    found = dict(pairs)
    if len(found) != len(pairs) or ("gpu" not in found and "GPU_I_ID" not in found and "modelName" not in found):
        return rest
    return found.get("gpu"), "GPU_I_ID" in found, found.get("modelName") or None


def prefilter(text: str) -> str:
    """The lines of `text` that can change what the collector extracts, or `text` itself when it
    holds something this reading is not sure of (the parser then sees, and rejects, all of it).

    It follows prometheus_client's parser line by line: a # HELP/# TYPE line opens a family and
    says which sample names it allows; a sample it does not allow is a family of its own and
    closes the open one. A family is kept with all its # HELP/# TYPE lines, so each kept sample
    gets the name it gets in the whole text (a counter's `x` becomes `x_total` under its # TYPE
    only). It also follows the parser reading only the kept lines, and gives up when the two
    would differ (a family declared twice, its declarations now adjacent). A sample of an unread
    family is kept when it is the first sample, the first of an engine's prefix, or brings a new
    (gpu, MIG, modelName), with its family's # HELP/# TYPE lines. Malformed lines of dropped
    families no longer reach the parser, so they are no longer reported."""
    lines = text.split("\n")            # as the parser's StringIO splits them, not splitlines()
    keep = bytearray(len(lines))
    unseen_prefixes: tuple[str, ...] = ENGINE_PREFIXES
    seen_keys: set[LabelKey | str] = set()
    any_sample = False
    allowed: tuple[str, ...]                    # the sample names the open family allows
    kept_allowed: tuple[str, ...]
    name, allowed, wanted = "", (), False       # the parser's state over the whole text
    headers: list[int] = []                     # the current family's # HELP/# TYPE lines
    headers_kept = False
    kept_name, kept_allowed = "", ()            # the parser's state over the kept lines only

    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) < 2 or parts[1] not in ("HELP", "TYPE"):
                continue                 # a comment: the parser skips it too
            if len(parts) < (3 if parts[1] == "HELP" else 4) or not _NAME.fullmatch(parts[2]):
                return text              # truncated, quoted (UTF-8) or invalid: left to the parser
            if parts[2] != name:
                name, allowed, wanted, headers, headers_kept = parts[2], (parts[2],), _wanted(parts[2]), [], False
            if parts[1] == "TYPE":
                allowed = tuple(name + suffix for suffix in _ALLOWED.get(parts[3], ("",)))
            headers.append(index)
            if headers_kept or wanted:
                if not headers_kept and kept_name == name:
                    return text
                keep[index], headers_kept = 1, True
                kept_name, kept_allowed = name, allowed
            continue
        match = _NAME.match(line)
        if match is None or line[match.end():match.end() + 1] not in (" ", "\t", "{"):
            return text                  # `{__name__="x"}` or junk: left to the parser
        sample = match.group()
        own_family = sample not in allowed
        if own_family:
            name, allowed, wanted, headers, headers_kept = "", (), _wanted(sample), [], False
        brace = line.find("{", match.end())
        key = _label_key(line[brace + 1:]) if brace >= 0 else None
        if not (wanted or not any_sample or (key is not None and key not in seen_keys)
                or sample.startswith(unseen_prefixes)):
            continue
        if own_family:
            if sample in kept_allowed:
                return text              # it would join the family kept before it
            kept_name, kept_allowed = "", ()
        elif not headers_kept:
            if headers and kept_name == name:
                return text
            for header in headers:
                keep[header] = 1
            headers_kept = True
            kept_name, kept_allowed = name, allowed
        keep[index] = 1
        any_sample = True
        if key is not None:
            seen_keys.add(key)
        if sample.startswith(unseen_prefixes):
            unseen_prefixes = tuple(p for p in unseen_prefixes if not sample.startswith(p))
    return "\n".join(line for line, kept in zip(lines, keep, strict=True) if kept)


def _float(value: float) -> float:
    """A sample's value as a float. prometheus_client reads `123` as an int, and one past a
    float's range (a 400-digit count) is the infinity it rounds to, like 1e999: a reading that is
    not finite, left out with a note (an OverflowError, before)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def parse(text: str, source: str, filtered: bool = True, at: float | None = None) -> Scrape:
    """`filtered=False` parses every line (the benchmark's and the filter test's reference); `at`:
    when it was read (time.monotonic()), for rates between two scrapes."""
    from prometheus_client.parser import text_string_to_metric_families  # prometheus_client: only when an exposition is parsed
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(prefilter(text) if filtered else text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), _float(sample.value)))
    except (ValueError, TypeError, IndexError) as error:
        raise KboptError(f"--metrics {source}: not Prometheus text exposition: {error}") from None
    if not samples:
        raise KboptError(f"--metrics {source}: no metrics in it")
    return Scrape(source, samples, at)


def scrape(source: str) -> Scrape:
    text = read_exposition(source)
    return parse(text, source, at=time.monotonic())


# ------------------------------------------------------------------ helpers


def _delta(first: Scrape, second: Scrape | None, name: str, **match: str) -> float | None:
    """A counter's total (one scrape) or its increase over the window (two scrapes)."""
    now = sum(v for _, v in (second or first).values(name, **match)) if (second or first).values(name, **match) else None
    if now is None:
        return None
    if second is None:
        return now
    before = sum(v for _, v in first.values(name, **match))
    return now - before if now >= before else now    # a restart resets counters


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float, bool] | None:
    """Prometheus' interpolation within cumulative buckets [(le, count)]. Returns (value, exact);
    exact is False when the quantile falls in the +Inf bucket (then the value is a lower bound)."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return previous_bound, False
            if count == previous_count:
                return bound, True
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count), True
        previous_bound, previous_count = bound, count
    return previous_bound, False


def _bound(scrape: Scrape, name: str, labels: dict[str, str]) -> float:
    """A bucket's upper bound; a bucket without a numeric `le` is not a histogram the exposition
    format defines, so the file is refused (naming the metric) rather than half read."""
    try:
        bound = float(labels["le"])
    except (KeyError, ValueError):
        raise KboptError(f"--metrics {scrape.source}: {name}_bucket has a sample without a numeric `le` label "
                         f"(le={ascii(labels.get('le'))[:40]})") from None
    if math.isnan(bound):
        raise KboptError(f"--metrics {scrape.source}: {name}_bucket has a sample with le=NaN")
    return bound


def _buckets(first: Scrape, second: Scrape | None, name: str) -> list[tuple[float, float]]:
    by_bound: dict[float, float] = {}
    for labels, value in (second or first).values(f"{name}_bucket"):
        bound = _bound(second or first, name, labels)
        by_bound[bound] = by_bound.get(bound, 0.0) + value
    if second is not None:
        before: dict[float, float] = {}
        for labels, value in first.values(f"{name}_bucket"):
            bound = _bound(first, name, labels)
            before[bound] = before.get(bound, 0.0) + value
        # A restart resets every bucket: then the second scrape's totals are the window's.
        if all(by_bound.get(bound, 0.0) >= count for bound, count in before.items()):
            by_bound = {bound: count - before.get(bound, 0.0) for bound, count in by_bound.items()}
    return list(by_bound.items())


def _window(first: Scrape, second: Scrape | None, window_s: float | None) -> tuple[int, float | None, str]:
    if second is None:
        return 1, None, "since the exporter started"
    return 2, window_s, f"over {window_s:g} s between two scrapes" if window_s else "between two scrapes"


def _mean_gauge(first: Scrape, second: Scrape | None, name: str, scale: float = 1.0, ratio: bool = False,
                **match: str) -> float | None:
    """A gauge over the window: per scrape, the sum over its series (engines, ranks) for counts, or
    their mean for ratios (two engines at 50% KV usage are not at 100%); then the mean of scrapes."""
    readings: list[float] = []
    for s in (first, second):
        rows = [v for _, v in s.values(name, **match)] if s else []
        if rows:
            readings.append(sum(rows) / len(rows) if ratio else sum(rows))
    return sum(readings) / len(readings) * scale if readings else None


def _rate(first: Scrape, second: Scrape | None, name: str) -> tuple[float, float] | None:
    """A counter's increase per second between two scrapes, and their interval. None from one
    scrape: its total counts from an exporter start that the scrape does not say."""
    if second is None or first.at is None or second.at is None or second.at <= first.at:
        return None
    increase = _delta(first, second, name)
    return None if increase is None else (increase / (second.at - first.at), second.at - first.at)


def _counted(value: float) -> bool:
    """A counter's reading a sample count can be made of: finite and not negative (NaN fails too)."""
    return math.isfinite(value) and value >= 0


def _histogram_facts(first: Scrape, second: Scrape | None, out: Collected, source: str, name: str,
                     mean_path: str | None = None, p99_path: str | None = None, scale: float = 1.0,
                     per: str = "") -> None:
    """A histogram's mean (its _sum over its _count) and its p99 (interpolated in the buckets, as
    Prometheus' histogram_quantile does), over the window or since the exporter started; `per`
    names what the scale divides by, where it is more than a unit."""
    _, _, when = _window(first, second, None)
    total, count = _delta(first, second, f"{name}_sum"), _delta(first, second, f"{name}_count")
    if mean_path and total is not None and count is not None and not _counted(count):
        out.notes.append(f"{source} {name}_count: {count:g} is not a count of observations; {mean_path} left out")
    elif mean_path and total is not None and count:
        out.put(mean_path, total / count * scale, Provenance(
            source, "measured", metric=f"{name}_sum / {name}_count{per}", samples=int(count), note=when))
    buckets = _buckets(first, second, name)
    counts = [count for _, count in sorted(buckets)]
    if p99_path and buckets and not (all(map(_counted, counts)) and all(a <= b for a, b in itertools.pairwise(counts))):
        # Cumulative buckets never decrease: an interpolation in these would be a made-up p99.
        out.notes.append(f"{source} {name}_bucket: the cumulative counts are not whole, finite and "
                         f"non-decreasing; {p99_path} left out")
        return
    result = histogram_quantile(0.99, buckets) if p99_path else None
    if p99_path and result is not None:
        value, exact = result
        out.put(p99_path, value * scale, Provenance(
            source, "derived", metric=f"{name} (p99 from histogram buckets){per}", samples=int(max(c for _, c in buckets)),
            note=when + ("" if exact else "; in the +Inf bucket: at least this much")))


def _token_rates(first: Scrape, second: Scrape | None, out: Collected, source: str, prompt: str, generation: str) -> None:
    """Prompt and generated tokens per second from the engine's token counters."""
    for path, name in (("workload.prompt_tokens_per_s", prompt), ("workload.generation_tokens_per_s", generation)):
        found = _rate(first, second, name)
        if found is not None:
            out.put(path, found[0], Provenance(source, "measured", metric=f"rate({name})", samples=2,
                                               window_s=round(found[1], 3), note="increase between two scrapes"))
    if second is None and first.values(generation):
        out.notes.append(f"{first.source}: {generation} is a total since the engine started: token rates need two "
                         "scrapes (pass the endpoint's URL; collect reads it at both ends of --duration)")


# ------------------------------------------------------------------ dcgm-exporter


def _one_gpu(scrape: Scrape, gpu: int | None, out: Collected) -> Scrape:
    """The DCGM series of one GPU (`--gpu`) when the exporter reports several."""
    gpus = sorted({labels["gpu"] for rows in scrape.samples.values() for labels, _ in rows
                   if "gpu" in labels and "GPU_I_ID" not in labels})
    if len(gpus) <= 1:
        return scrape
    chosen = str(gpu if gpu is not None else 0)
    if chosen not in gpus:
        raise KboptError(f"--metrics {scrape.source}: no GPU {chosen} in it (it has {', '.join(gpus)}); pass --gpu")
    out.notes.append(f"{scrape.source}: {len(gpus)} GPUs on this exporter; facts are GPU {chosen}'s (--gpu)")
    return Scrape(scrape.source, {name: [(labels, v) for labels, v in rows if labels.get("gpu", chosen) == chosen]
                                  for name, rows in scrape.samples.items()}, scrape.at)


def _dcgm(first: Scrape, second: Scrape | None, out: Collected, gpu: int | None = None) -> bool:
    if not any(name.startswith("DCGM_FI_") for name in first.samples):
        return False
    first = _one_gpu(first, gpu, out)
    second = _one_gpu(second, gpu, Collected()) if second else None
    scrapes = [s for s in (first, second) if s]

    # In MIG mode the work runs in GPU instances. With one instance exported it is the one that
    # serves, and its readings describe it, as the MIG facts below do (the whole GPU's are an
    # aggregate over instances: a newcomer found a 1g.5gb slice's facts beside the card's readings).
    # With several, which one serves is not in the dump: the whole GPU's readings stand.
    instances = {labels["GPU_I_ID"] for rows in first.samples.values() for labels, _ in rows if "GPU_I_ID" in labels}
    one_instance = len(instances) == 1

    def series(name: str) -> tuple[list[float], bool]:
        """Per-GPU readings of a field: the one MIG instance's where it exports them, else the
        whole GPUs', else the instances'."""
        readings: list[float] = []
        mig = False
        for s in scrapes:
            rows = s.values(name)
            whole = [v for labels, v in rows if "GPU_I_ID" not in labels]
            sliced = [v for labels, v in rows if "GPU_I_ID" in labels]
            if sliced and (one_instance or not whole):
                readings.extend(sliced)
                mig = True
            elif whole:
                readings.extend(whole)
        return readings, mig

    def mean(values: list[float]) -> float:         # of readings the caller has checked there are
        return sum(values) / len(values)

    def put(path: str, name: str, quality: str, scale: float = 1.0, note: str | None = None) -> bool:
        readings, mig = series(name)
        if readings:
            out.put(path, mean(readings) * scale, Provenance(
                "dcgm", quality, metric=name, samples=len(readings),
                note="; ".join(n for n in (note, "from a MIG instance" if mig else None) if n) or None))
            return True
        return False

    if not put("telemetry.compute_utilization", "DCGM_FI_PROF_SM_ACTIVE", "measured"):
        put("telemetry.compute_utilization", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "proxy",
            note="graphics-engine busy time, not SM activity (SM_ACTIVE is not exported); finer than NVML's")
    put("telemetry.bandwidth_utilization", "DCGM_FI_PROF_DRAM_ACTIVE", "measured")
    put("telemetry.tensor_active_ratio", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "measured")
    put("telemetry.kernel_time_ratio", "DCGM_FI_DEV_GPU_UTIL", "measured", scale=0.01,
        note="share of time a kernel ran: a proxy for compute activity, exact for this fact")
    # Without profiling fields, fall back to the busy-time counters, marked as proxies.
    put("telemetry.compute_utilization", "DCGM_FI_DEV_GPU_UTIL", "proxy", scale=0.01,
        note="kernel busy time, not SM activity")
    put("telemetry.bandwidth_utilization", "DCGM_FI_DEV_MEM_COPY_UTIL", "proxy", scale=0.01,
        note="memory busy time, not DRAM bandwidth")
    put("telemetry.power_watts", "DCGM_FI_DEV_POWER_USAGE", "measured")
    put("telemetry.sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "measured")
    put("hardware.max_sm_clock_mhz", "DCGM_FI_DEV_MAX_SM_CLOCK", "measured")
    # The limit the board enforces is the one that binds; the management limit is what was asked for.
    for name in ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT"):
        limits, _ = series(name)
        if limits and min(limits) > 0:
            put("hardware.power_limit_watts", name, "measured")
            break
    for name in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):   # new name, old name
        reasons, _ = series(name)
        masks = [int(r) for r in reasons if math.isfinite(r) and 0 <= r < 2**64]
        if masks:
            out.put("telemetry.throttle_ratio", sum(1 for m in masks if m & SLOWDOWN_REASONS) / len(masks),
                    Provenance("dcgm", "measured", metric=name, samples=len(masks),
                               note="share of readings with a power, thermal or hardware slowdown reason"))
            break
    used, _ = series("DCGM_FI_DEV_FB_USED")
    free, _ = series("DCGM_FI_DEV_FB_FREE")
    reserved, _ = series("DCGM_FI_DEV_FB_RESERVED")
    held = mean(reserved) if reserved else 0.0     # no FB_RESERVED series: nothing reserved
    total = mean(used) + mean(free) + held if used and free else 0.0
    if used and free and not (min(used + free + reserved) >= 0 and total > 0):
        # A negative or empty frame buffer is a broken reading (NaN fails the test too): like a
        # non-finite one, it costs its facts, not the whole collection.
        out.notes.append("dcgm DCGM_FI_DEV_FB_USED/FB_FREE/FB_RESERVED: negative, non-finite or all zero; "
                         "telemetry.memory_used_ratio and hardware.memory_total_gib left out")
    elif used and free:
        out.put("telemetry.memory_used_ratio", (mean(used) + held) / total,
                Provenance("dcgm", "measured", metric="DCGM_FI_DEV_FB_USED/(FB_USED+FB_FREE+FB_RESERVED)",
                           samples=len(used)))
        out.put("hardware.memory_total_gib", total / 1024, Provenance("dcgm", "measured", metric="FB_USED+FB_FREE+FB_RESERVED"))
    # (hardware.gpu_count is GPUs per replica, which a node's exporter cannot know.)
    names = {labels["modelName"] for rows in first.samples.values() for labels, _ in rows if labels.get("modelName")}
    if names:
        out.put("hardware.gpu_name", sorted(names)[0], Provenance("dcgm", "measured", metric="modelName label"))
    else:
        out.notes.append(f"{first.source}: no modelName label on the DCGM series, so the GPU is not named: give "
                         "hardware.gpu_name as nvidia-smi reports it (the performance model needs the GPU's roofs)")
    if instances:
        out.put("hardware.mig_enabled", True, Provenance("dcgm", "measured", metric="GPU_I_ID labels"))
        _mig_memory(first, out)
        if one_instance:
            _slice_memory_used(used, held, out)
    return True


def _slice_memory_used(used: list[float], held: float, out: Collected) -> None:
    """The one MIG instance's memory in use, where the exporter gives the frame buffer of the whole
    GPU only: in MIG mode every byte in use is some instance's, so with one instance its use over
    its own memory (hardware.mig_memory_gib), not over the card's."""
    slice_gib = out.facts.get("hardware.mig_memory_gib")
    if not used or slice_gib is None or not isinstance(slice_gib[0], int | float) or slice_gib[0] <= 0:
        return
    ratio = round(min(1.0, (sum(used) / len(used) + held) / 1024 / slice_gib[0]), 6)
    # replaces the card's ratio, a measurement put above, which put() would keep over a derived value
    out.facts["telemetry.memory_used_ratio"] = (ratio, Provenance(
        "dcgm", "derived", metric="DCGM_FI_DEV_FB_USED / hardware.mig_memory_gib", samples=len(used),
        note="the whole GPU's frame buffer in use, all of it the one MIG instance's, over that instance's memory"))


# GPU-instance memory, GiB, as `nvidia-smi mig -lgip` lists it for A100-40GB (1g.5gb .. 7g.40gb) and
# A100/H100-80GB (1g.10gb .. 7g.80gb) in the NVIDIA MIG User Guide
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/): a little under the profile name's
# figure, which is what the model's weights and KV cache must fit in.
MIG_PROFILE_GIB = {"1g.5gb": 4.75, "1g.10gb": 9.75, "2g.10gb": 9.75, "3g.20gb": 19.62, "4g.20gb": 19.62,
                   "7g.40gb": 39.38, "1g.20gb": 19.62, "2g.20gb": 19.62, "3g.40gb": 39.5, "4g.40gb": 39.5,
                   "7g.80gb": 79.25}
_MIG_PROFILE = re.compile(r"([1-7])g\.([0-9]{1,4})gb")


def _mig_memory(scrape: Scrape, out: Collected) -> None:
    """hardware.mig_memory_gib from the GPU_I_PROFILE label (`1g.5gb`, `3g.40gb+me`), when the
    exporter reports one profile: with several, which instance serves the model is not known."""
    profiles = {labels["GPU_I_PROFILE"] for rows in scrape.samples.values() for labels, _ in rows if "GPU_I_PROFILE" in labels}
    matched = {m.group(0): m for m in (_MIG_PROFILE.match(p) for p in profiles) if m}
    if len(profiles) > 1 or len(matched) != len(profiles):
        shown = ", ".join(ascii(p) for p in sorted(profiles)[:4])
        out.notes.append(f"{scrape.source}: MIG profiles {shown}: give hardware.mig_memory_gib, the memory of "
                         "the instance that serves the model")
        return
    if not matched:
        return
    name, found = next(iter(matched.items()))
    known = MIG_PROFILE_GIB.get(name)
    out.put("hardware.mig_memory_gib", known if known is not None else float(found.group(2)), Provenance(
        "dcgm", "derived", metric="GPU_I_PROFILE label",
        note=f"the one MIG profile exported ({name}): " + (
            "its memory as nvidia-smi mig -lgip lists it" if known is not None else
            "the nominal size in its name; the usable memory is a little less")))


# ------------------------------------------------------------------ serving engines


def _engine(out: Collected, engine: str, note: str) -> None:
    derived = Provenance(engine, "derived", note=note)
    out.put("workload.engine", engine, Provenance(engine, "measured", metric="metric names"))
    out.put("workload.memory_preallocated", True, derived)
    out.put("workload.batching", "continuous", Provenance(engine, "derived", note=f"{engine} always batches continuously"))


# vLLM's cache_dtype values (its --kv-cache-dtype choices) in the vocabulary's terms; "auto" is the
# model's own dtype, which the cache_config_info labels do not say.
VLLM_CACHE_DTYPES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32",
                     "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8", "fp8_ds_mla": "fp8"}
_COUNT = re.compile(r"[0-9]{1,12}")      # a block count or size: digits, and few enough to be real


def _vllm_cache_config(source: str, rows: list[tuple[dict[str, str], float]], out: Collected) -> None:
    """The engine's own settings from cache_config_info's labels. Label values are the exporter's
    strings: each is checked against what it may be, and shown only through ascii() in notes."""
    def label(key: str) -> str | None:
        values = {labels.get(key) for labels, _ in rows}
        if len(values) > 1:
            out.notes.append(f"{source}: vllm:cache_config_info's {key} differs between engines; left out")
        value = values.pop() if len(values) == 1 else None
        return None if value in (None, "None") else value

    def put(path: str, key: str, value: object) -> None:
        out.put(path, value, Provenance("vllm", "measured", metric=f"vllm:cache_config_info{{{key}}}"))

    def bad(key: str, value: str) -> None:
        out.notes.append(f"{source}: vllm:cache_config_info {key}={ascii(value)[:60]} is not understood; left out")

    for path, key, least in (("serving.num_gpu_blocks", "num_gpu_blocks", 0), ("serving.kv_block_size", "block_size", 1)):
        value = label(key)
        if value is not None:
            if _COUNT.fullmatch(value) and int(value) >= least:
                put(path, key, int(value))
            else:
                bad(key, value)
    fraction = label("gpu_memory_utilization")
    if fraction is not None:
        try:
            number = float(fraction)
        except ValueError:
            number = math.nan
        if 0 < number <= 1:
            put("serving.memory_fraction", "gpu_memory_utilization", number)
        else:
            bad("gpu_memory_utilization", fraction)
    dtype = label("cache_dtype")
    if dtype is not None and dtype != "auto":
        if dtype in VLLM_CACHE_DTYPES:
            put("model.kv_cache_dtype", "cache_dtype", VLLM_CACHE_DTYPES[dtype])
        else:
            bad("cache_dtype", dtype)
    prefix = label("enable_prefix_caching")
    if prefix is not None:
        if prefix in ("True", "False"):
            put("serving.prefix_caching", "enable_prefix_caching", prefix == "True")
        else:
            bad("enable_prefix_caching", prefix)


def _hit_ratio(first: Scrape, second: Scrape | None, out: Collected, source: str, hits: str, queries: str,
               external: str | None = None) -> None:
    """Share of looked-up prompt tokens found in the prefix cache, from two token counters, with
    the tokens a KV connector's tier (a host-memory offload) served beside the GPU's where it counts them."""
    found, asked = _delta(first, second, hits), _delta(first, second, queries)
    more = _delta(first, second, external) if external else None
    if found is not None and asked and 0 <= found <= asked:
        _, _, when = _window(first, second, None)
        tier = more is not None and 0 < more <= asked - found
        out.put("workload.prefix_cache_hit_ratio", (found + more if tier and more else found) / asked, Provenance(
            source, "measured", metric=f"({hits} + {external}) / {queries}" if tier else f"{hits} / {queries}", samples=int(asked),
            note=("prompt tokens found in the GPU's prefix cache or the KV connector's tier / prompt tokens looked up"
                  if tier else "prompt tokens found in the prefix cache / prompt tokens looked up") + f", {when}"))


def _vllm(first: Scrape, second: Scrape | None, out: Collected) -> bool:
    if not any(name.startswith("vllm:") for name in first.samples):
        return False
    _engine(out, "vllm", "vLLM reserves gpu_memory_utilization (default 0.9) of device memory at start")
    info = first.values("vllm:cache_config_info")
    if info:
        out.put("workload.kv_cache", "paged", Provenance("vllm", "measured", metric="vllm:cache_config_info"))
        _vllm_cache_config(first.source, info, out)
    found = (second or first).first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    if found:
        name = found[0]
        out.put("telemetry.kv_cache_usage_ratio", _mean_gauge(first, second, name, ratio=True),   # 0..1 despite its name
                Provenance("vllm", "measured", metric=name, samples=2 if second else 1))
    for path, name in (("workload.requests_running_mean", "vllm:num_requests_running"),
                       ("workload.requests_waiting_mean", "vllm:num_requests_waiting")):
        value = _mean_gauge(first, second, name)
        if value is not None:
            out.put(path, value, Provenance("vllm", "measured", metric=name, samples=2 if second else 1))
    preemptions = _delta(first, second, "vllm:num_preemptions_total")
    finished = _delta(first, second, "vllm:request_success_total")
    _, _, when = _window(first, second, None)
    if preemptions is not None and finished:
        out.put("workload.preemption_ratio", preemptions / finished,
                Provenance("vllm", "measured", metric="vllm:num_preemptions_total / vllm:request_success_total", note=when))
    prompt_sum, prompt_n = _delta(first, second, "vllm:request_prompt_tokens_sum"), _delta(first, second, "vllm:request_prompt_tokens_count")
    gen_sum, gen_n = _delta(first, second, "vllm:request_generation_tokens_sum"), _delta(first, second, "vllm:request_generation_tokens_count")
    if (prompt_n and gen_n and _counted(prompt_n) and _counted(gen_n)
            and prompt_sum is not None and gen_sum is not None):    # a histogram may lack its _sum
        out.put("workload.seq_len_mean", prompt_sum / prompt_n + gen_sum / gen_n, Provenance(
            "vllm", "measured", metric="request_prompt_tokens + request_generation_tokens (means)",
            samples=int(prompt_n), note=when))
    _histogram_facts(first, second, out, "vllm", "vllm:request_prompt_tokens", "workload.prompt_len_mean", "workload.prompt_len_p99")
    _histogram_facts(first, second, out, "vllm", "vllm:request_generation_tokens",
                     "workload.output_len_mean", "workload.output_len_p99")
    _histogram_facts(first, second, out, "vllm", "vllm:time_to_first_token_seconds",
                     "workload.ttft_mean_ms", "workload.ttft_p99_ms", scale=1000)
    accept_length = _vllm_speculation(first, second, out)
    itl = "vllm:inter_token_latency_seconds" if (second or first).values("vllm:inter_token_latency_seconds_count") \
        else "vllm:time_per_output_token_seconds"
    # Under speculation vLLM observes one gap an output for each request, however many tokens it
    # carries (v1/metrics/stats.py@0.11.0, update_from_output): over the tokens a verify step yields
    # it is the time per output token the facts mean, as the model reads a verify step (M-ITL-P99-EXPECTED).
    _histogram_facts(first, second, out, "vllm", itl, "workload.itl_mean_ms", "workload.itl_p99_ms",
                     scale=1000 / (accept_length or 1),
                     per=f" / {accept_length:.3g} tokens a verify step (1 + accepted / drafts)" if accept_length else "")
    # A KV connector's hits (a host-memory tier: OffloadingConnector, LMCache) count apart, over the
    # same looked-up tokens (v1/core/sched/scheduler.py@0.12.0:1474-1482, v1/metrics/loggers.py:493-510):
    # with the GPU's alone a host tier's prompts read as computed (set 22 d3: 0.30 where 0.88 is served).
    _hit_ratio(first, second, out, "vllm", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
               "vllm:external_prefix_cache_hits_total")
    if (second or first).values("vllm:gpu_prefix_cache_hit_rate"):        # V0 engines: a gauge of their own
        out.put("workload.prefix_cache_hit_ratio", _mean_gauge(first, second, "vllm:gpu_prefix_cache_hit_rate", ratio=True),
                Provenance("vllm", "measured", metric="vllm:gpu_prefix_cache_hit_rate", samples=2 if second else 1))
    _token_rates(first, second, out, "vllm", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    return True


def _vllm_speculation(first: Scrape, second: Scrape | None, out: Collected) -> float | None:
    """Today's speculative decoding, from vLLM's counters (vllm/v1/spec_decode/metrics.py@0.10.2-0.12.0):
    accepted / drafted tokens is the acceptance rate; 1 + accepted / drafts the tokens a verify step
    yields, which it returns (None where no drafts are counted)."""
    accepted = _delta(first, second, "vllm:spec_decode_num_accepted_tokens_total")
    drafted = _delta(first, second, "vllm:spec_decode_num_draft_tokens_total")
    drafts = _delta(first, second, "vllm:spec_decode_num_drafts_total")
    if accepted is None or accepted < 0:
        return None
    _, _, when = _window(first, second, None)
    if drafted and 0 <= accepted <= drafted:
        out.put("telemetry.spec_acceptance_rate", accepted / drafted, Provenance(
            "vllm", "measured", metric="vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total",
            samples=int(drafted), note=when))
    if drafts and drafts > 0 and (drafted is None or accepted <= drafted):
        out.put("telemetry.spec_accept_length", 1 + accepted / drafts, Provenance(
            "vllm", "measured", metric="1 + vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_drafts_total",
            samples=int(drafts), note=when))
        return 1 + accepted / drafts
    return None


def _sglang(first: Scrape, second: Scrape | None, out: Collected) -> bool:
    if not any(name.startswith("sglang:") for name in first.samples):
        return False
    _engine(out, "sglang", "SGLang reserves mem_fraction_static of device memory at start")
    out.put("workload.kv_cache", "paged", Provenance("sglang", "derived", note="SGLang's radix cache is paged"))
    for path, name in (("telemetry.kv_cache_usage_ratio", "sglang:token_usage"),
                       ("workload.requests_running_mean", "sglang:num_running_reqs"),
                       ("workload.requests_waiting_mean", "sglang:num_queue_reqs")):
        value = _mean_gauge(first, second, name, ratio=path.startswith("telemetry."))
        if value is not None:
            out.put(path, value, Provenance("sglang", "measured", metric=name, samples=2 if second else 1))
    _histogram_facts(first, second, out, "sglang", "sglang:time_to_first_token_seconds",
                     "workload.ttft_mean_ms", "workload.ttft_p99_ms", scale=1000)
    # Newer SGLang exports inter_token_latency_seconds beside time_per_output_token_seconds (a
    # request's mean gap); the older one only the latter, observed per streamed chunk.
    itl = "sglang:inter_token_latency_seconds" if (second or first).values("sglang:inter_token_latency_seconds_count") \
        else "sglang:time_per_output_token_seconds"
    _histogram_facts(first, second, out, "sglang", itl, "workload.itl_mean_ms", "workload.itl_p99_ms", scale=1000)
    accept = _mean_gauge(first, second, "sglang:spec_accept_length")       # 0 while no speculation runs
    if accept is not None and accept >= 1:
        out.put("telemetry.spec_accept_length", accept, Provenance(
            "sglang", "measured", metric="sglang:spec_accept_length", samples=2 if second else 1,
            note="tokens a verify step yields per request (python/sglang/srt/metrics/collector.py@0.5.1:209)"))
    # The prompt tokens found cached over the window (or since start), ahead of the gauge, which
    # covers SGLang's last log interval only (scheduler_metrics_mixin.py@0.5.1:112-121; review set 32)
    cached, prompted = _delta(first, second, "sglang:cached_tokens_total"), _delta(first, second, "sglang:prompt_tokens_total")
    _, _, when = _window(first, second, None)
    if cached is not None and prompted and _counted(cached) and _counted(prompted) and cached <= prompted:
        out.put("workload.prefix_cache_hit_ratio", cached / prompted, Provenance(
            "sglang", "measured", metric="sglang:cached_tokens_total / sglang:prompt_tokens_total", note=when))
    cache = _mean_gauge(first, second, "sglang:cache_hit_rate", ratio=True)
    if cache is not None and 0 <= cache <= 1:
        out.put("workload.prefix_cache_hit_ratio", cache, Provenance(
            "sglang", "measured", metric="sglang:cache_hit_rate", samples=2 if second else 1,
            note="the radix cache's share of prompt tokens found cached"))
    # Tokens are counted, with the end-to-end latency, when a request finishes: per finished request,
    # the counters give mean lengths (derived: that pairing is SGLang's code, not its metric's name).
    finished = _delta(first, second, "sglang:e2e_request_latency_seconds_count")
    # requests retracted (their KV freed, to be prefilled again) when the pool fills: SGLang's
    # preemption, a running total each rank keeps (managers/scheduler.py@0.5.1:1705)
    retracted = _delta(first, second, "sglang:total_retracted_reqs")
    if retracted is not None and finished and _counted(retracted) and _counted(finished):
        out.put("workload.preemption_ratio", retracted / finished, Provenance(
            "sglang", "measured", metric="sglang:total_retracted_reqs / sglang:e2e_request_latency_seconds_count", note=when))
    means = []
    for path, name in (("workload.prompt_len_mean", "sglang:prompt_tokens_total"),
                       ("workload.output_len_mean", "sglang:generation_tokens_total")):
        tokens = _delta(first, second, name)
        if tokens is not None and finished and _counted(finished):
            means.append(tokens / finished)
            out.put(path, tokens / finished, Provenance("sglang", "derived", samples=int(finished), note=when,
                                                        metric=f"{name} / sglang:e2e_request_latency_seconds_count"))
    if len(means) == 2:
        out.put("workload.seq_len_mean", sum(means), Provenance(
            "sglang", "derived", metric="(prompt_tokens_total + generation_tokens_total) / finished requests",
            samples=int(finished or 0), note=when))
    _token_rates(first, second, out, "sglang", "sglang:prompt_tokens_total", "sglang:generation_tokens_total")
    throughput = _mean_gauge(first, second, "sglang:gen_throughput")
    if throughput is not None and throughput >= 0:
        out.put("workload.generation_tokens_per_s", throughput, Provenance(
            "sglang", "proxy", metric="sglang:gen_throughput", samples=2 if second else 1,
            note="SGLang's own gauge over its last decode-log interval (a few dozen steps): a point reading"))
    return True


def _tgi(first: Scrape, second: Scrape | None, out: Collected) -> bool:
    if not any(name.startswith("tgi_") for name in first.samples):
        return False
    _engine(out, "tgi", "TGI reserves its KV cache (max_batch_total_tokens) during warm-up")
    for path, name in (("workload.requests_waiting_mean", "tgi_queue_size"),
                       ("workload.requests_running_mean", "tgi_batch_current_size")):
        value = _mean_gauge(first, second, name)
        if value is not None:
            out.put(path, value, Provenance("tgi", "measured", metric=name, samples=2 if second else 1))
    return True


def _triton_trtllm(first: Scrape, second: Scrape | None, out: Collected) -> bool:
    if not any(name.startswith("nv_trt_llm_") for name in first.samples):
        return False
    _engine(out, "trtllm", "TensorRT-LLM reserves kv_cache_free_gpu_mem_fraction (default 0.9) of free memory")
    out.put("workload.kv_cache", "paged", Provenance("trtllm", "derived", note="TensorRT-LLM's KV cache is paged (blocks)"))
    used = _mean_gauge(first, second, "nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="used")
    most = _mean_gauge(first, second, "nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max")
    if used is not None and most:
        out.put("telemetry.kv_cache_usage_ratio", used / most,
                Provenance("trtllm", "measured", metric="nv_trt_llm_kv_cache_block_metrics used/max"))
    active = _mean_gauge(first, second, "nv_trt_llm_request_metrics", request_type="active")
    if active is not None:
        out.put("workload.requests_running_mean", active,
                Provenance("trtllm", "measured", metric='nv_trt_llm_request_metrics{request_type="active"}'))
    pending = _mean_gauge(first, second, "nv_inference_pending_request_count")
    if pending is not None:
        out.put("workload.requests_waiting_mean", pending,
                Provenance("triton", "measured", metric="nv_inference_pending_request_count"))
    return True


MAPPERS = (_vllm, _sglang, _tgi, _triton_trtllm)


def facts_from_scrapes(first: Scrape, second: Scrape | None = None, gpu: int | None = None) -> Collected:
    out = Collected()
    recognised = (["dcgm"] if _dcgm(first, second, out, gpu) else []) + \
        [mapper.__name__.strip("_") for mapper in MAPPERS if mapper(first, second, out)]
    if not recognised:
        raise KboptError(f"--metrics {first.source}: no dcgm-exporter, vLLM, SGLang, TGI or Triton metrics in it")
    return out
