"""Facts for every replica of a fleet, read from a Prometheus server's HTTP API.

The number of queries is fixed: one instant query per metric family the Prometheus collector
reads (`*_over_time` for gauges, `increase` for counters and histogram buckets, over the window),
whatever the fleet's size; the series are joined to replicas client-side. Each replica's series
are then handed to the same mapping `kbopt collect` uses (prometheus.facts_from_scrapes) as a
pair of scrapes whose differences are the window's: the metric -> fact logic exists once.
"""
from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from kbopt.collectors.prometheus import READ_FAMILIES, Scrape, facts_from_scrapes
from kbopt.collectors.web import HttpProblem, check_url, exchange
from kbopt.errors import KboptError
from kbopt.kb.provenance import Provenance

Kind = Literal["gauge", "info", "counter", "buckets"]
Labels = dict[str, str]
Rows = list[tuple[Labels, float]]
T = TypeVar("T")

# What the Prometheus collector reads (prometheus.READ_FAMILIES), with how each is read over a
# window. A test checks that every READ_FAMILIES entry is here: add a family there, add it here.
FAMILIES: tuple[tuple[str, Kind], ...] = (
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge"), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"), ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"), ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"), ("DCGM_FI_DEV_FB_FREE", "gauge"), ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"), ("DCGM_FI_DEV_MAX_SM_CLOCK", "info"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "info"), ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "info"),
    # A bit mask: averaging it over a window would invent reasons; the last value is read.
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "info"), ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "info"),
    ("vllm:cache_config_info", "info"),
    ("vllm:prompt_tokens_total", "counter"), ("vllm:generation_tokens_total", "counter"),
    ("vllm:prefix_cache_hits_total", "counter"), ("vllm:prefix_cache_queries_total", "counter"),
    ("vllm:external_prefix_cache_hits_total", "counter"),
    ("vllm:gpu_prefix_cache_hit_rate", "gauge"),
    ("vllm:spec_decode_num_drafts_total", "counter"), ("vllm:spec_decode_num_draft_tokens_total", "counter"),
    ("vllm:spec_decode_num_accepted_tokens_total", "counter"), ("sglang:spec_accept_length", "gauge"),
    ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:gpu_cache_usage_perc", "gauge"),
    ("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
    ("vllm:num_preemptions_total", "counter"), ("vllm:request_success_total", "counter"),
    ("vllm:request_prompt_tokens_sum", "counter"), ("vllm:request_prompt_tokens_count", "counter"),
    ("vllm:request_generation_tokens_sum", "counter"), ("vllm:request_generation_tokens_count", "counter"),
    ("vllm:time_to_first_token_seconds", "buckets"), ("vllm:inter_token_latency_seconds", "buckets"),
    ("vllm:time_per_output_token_seconds", "buckets"),
    ("sglang:token_usage", "gauge"), ("sglang:num_running_reqs", "gauge"), ("sglang:num_queue_reqs", "gauge"),
    ("sglang:time_to_first_token_seconds", "buckets"), ("sglang:time_per_output_token_seconds", "buckets"),
    ("sglang:inter_token_latency_seconds", "buckets"), ("sglang:e2e_request_latency_seconds_count", "counter"),
    ("sglang:prompt_tokens_total", "counter"), ("sglang:generation_tokens_total", "counter"),
    ("sglang:cache_hit_rate", "gauge"), ("sglang:gen_throughput", "gauge"),
    ("sglang:cached_tokens_total", "counter"), ("sglang:total_retracted_reqs", "counter"),   # the latter a gauge of a running total
    ("tgi_queue_size", "gauge"), ("tgi_batch_current_size", "gauge"),
    ("nv_trt_llm_kv_cache_block_metrics", "gauge"), ("nv_trt_llm_request_metrics", "gauge"),
    ("nv_inference_pending_request_count", "gauge"),
)
ENGINE_METRIC_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"), ("nv_trt_llm_", "trtllm"), ("nv_inference_", "trtllm"))
EXPORTERS = {"dcgm": "dcgm-exporter", "vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "trtllm": "TensorRT-LLM",
             "triton": "Triton"}
# Labels that say where a series was scraped, not how an engine is configured: left out of a
# deployment's settings (an info metric's other labels are its configuration).
LOCATION_LABELS = frozenset({"__name__", "instance", "job", "pod", "namespace", "container", "endpoint", "service", "node",
                             "engine", "model_name", "model", "Hostname", "prometheus", "prometheus_replica"})
# Facts a replica is expected to have from Prometheus, by which exporter gives them: what the
# fleet lists as missing when a replica lacks them.
EXPECTED = {"dcgm": ("telemetry.compute_utilization", "telemetry.bandwidth_utilization", "telemetry.memory_used_ratio",
                     "hardware.gpu_name"),
            "engine": ("telemetry.kv_cache_usage_ratio", "workload.requests_running_mean", "workload.requests_waiting_mean")}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def family_kind(name: str) -> Kind | None:
    return dict(FAMILIES).get(name)


def window_seconds(text: str) -> float:
    """`30m`, `1h30m`, `90s` as Prometheus writes durations."""
    matches = list(_DURATION.finditer(text))
    if not text or "".join(m.group() for m in matches) != text:
        raise KboptError(f"--window {text}: not a duration; write it as Prometheus does (30s, 5m, 1h30m)")
    seconds = sum(float(m.group(1)) * _UNITS[m.group(2)] for m in matches)
    if seconds <= 0:
        raise KboptError(f"--window {text}: must be longer than zero")
    return seconds


def selector_matchers(text: str | None) -> str:
    """The matchers inside `{namespace="llm"}`, to be put into every query's own braces."""
    if not text:
        return ""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise KboptError(f"--selector {text}: write label matchers in braces, e.g. '{{namespace=\"llm\"}}'")
    return inner[1:-1].strip().rstrip(",")


def promql(name: str, kind: Kind, window: str, matchers: str) -> str:
    selector = f"{{{matchers}}}" if matchers else ""
    if kind == "gauge":
        return f"avg_over_time({name}{selector}[{window}])"
    if kind == "info":
        return f"last_over_time({name}{selector}[{window}])"
    if kind == "counter":
        return f"increase({name}{selector}[{window}])"
    return f"increase({name}_bucket{selector}[{window}])"


# ------------------------------------------------------------------ the HTTP API


class PrometheusError(KboptError):
    """The server cannot be used: unreachable, refusing, timing out, or not answering as Prometheus."""


@dataclass
class PrometheusClient:
    url: str
    timeout_s: float = 10.0
    retries: int = 2
    sleep: Callable[[float], None] = time.sleep
    queries: int = 0                # HTTP requests sent, retries included
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if check_url(self.url) is not None:
            raise PrometheusError(f"--prometheus {self.url}: give the server's http(s) address, e.g. http://127.0.0.1:9090")
        self.url = self.url.rstrip("/")

    def query(self, expr: str, at: float) -> list[tuple[Labels, float]]:
        """An instant query's vector: [(labels, value)], NaN and infinite values left out. Every
        field is checked for its type: the server is untrusted (a label that is null is left out,
        a value must be a number or its text, never true)."""
        body = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}", "timeout": f"{self.timeout_s:g}s"}).encode()
        answer = self._post("/api/v1/query", body, expr)
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(f"--prometheus {self.url}: {expr}: the answer is not an instant vector")
        warnings = answer.get("warnings")
        if warnings is not None and not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
            raise PrometheusError(f"--prometheus {self.url}: {expr}: the answer's `warnings` field is "
                                  f"{type(warnings).__name__}, not a list of texts: is this a Prometheus server?")
        self.warnings.extend(f"{expr}: {warning}" for warning in warnings or ())
        rows: list[tuple[Labels, float]] = []
        for index, item in enumerate(data["result"]):
            sample = _sample(item)
            if isinstance(sample, str):
                raise PrometheusError(f"--prometheus {self.url}: {expr}: a malformed sample in the answer "
                                      f"(result[{index}]: {sample})")
            if sample is not None:
                rows.append(sample)
        return rows

    def _post(self, path: str, body: bytes, expr: str) -> dict[str, Any]:
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(min(0.25 * 2 ** attempt, 2.0))
            self.queries += 1
            try:
                answer = exchange(self.url + path, self.timeout_s, body,
                                  {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
            except HttpProblem as error:
                problem = str(error)
                if not error.retry:     # past the deadline, not HTTP, off the origin: another try is the same
                    raise PrometheusError(f"--prometheus {self.url}: {expr}: {problem}") from None
                continue
            if answer.status == 200:
                return self._decode(answer.body, expr)
            detail = _error_text(answer.body)
            problem = f"HTTP {answer.status} {answer.reason}" + (f": {detail}" if detail else "")
            if answer.status < 500 and answer.status != 429:
                # A query Prometheus refuses (400 bad_data, 422 execution) will be refused again.
                raise PrometheusError(f"--prometheus {self.url}: {expr}: {problem}")
        raise PrometheusError(f"--prometheus {self.url}: {problem} (after {self.retries + 1} tries)")

    def _decode(self, raw: bytes, expr: str) -> dict[str, Any]:
        try:
            answer = json.loads(raw)
        except RecursionError:
            raise PrometheusError(f"--prometheus {self.url}: {expr}: the answer's JSON is nested too deeply") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise PrometheusError(f"--prometheus {self.url}: the answer is not JSON ({str(error)[:120]}): "
                                  "is this a Prometheus server?") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            detail = answer.get("error") if isinstance(answer, dict) else None
            raise PrometheusError(f"--prometheus {self.url}: {expr}: " + (str(detail) if detail else "not a Prometheus answer"))
        return answer


def _sample(item: object) -> tuple[Labels, float] | str | None:
    """One element of an instant vector: (labels, value); None for a NaN or infinite value (left
    out); what is wrong with it as text. Labels must be texts (null ones are left out); the value
    is [time, text], as Prometheus writes it, or a number (never a boolean)."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) or not isinstance(item.get("value"), list):
        return "not {metric: {...}, value: [time, value]}"
    labels: Labels = {}
    for name, text in item["metric"].items():
        if isinstance(text, str):
            labels[name] = text
        elif text is not None:
            return f"label {str(name)[:60]!r} is {type(text).__name__}, not text"
    pair = item["value"]
    raw = pair[1] if len(pair) == 2 else None
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        return f"its value is {type(raw).__name__}, not a number"
    try:
        value = float(raw)
    except OverflowError:           # an integer past a float's range: infinite
        return None
    except ValueError:
        return f"its value {str(raw)[:40]!r} is not a number"
    return (labels, value) if math.isfinite(value) else None


def _error_text(raw: bytes) -> str:
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return raw[:200].decode("utf-8", errors="replace").strip()
    return str(answer.get("error", ""))[:1000] if isinstance(answer, dict) else ""


# ------------------------------------------------------------------ replicas


@dataclass(frozen=True)
class Replica:
    id: str                         # namespace/pod, or the scrape's instance
    instance: str
    host: str
    pod: str | None = None
    namespace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "instance": self.instance, "host": self.host}
        if self.pod:
            out.update(pod=self.pod, namespace=self.namespace or "")
        return out


@dataclass
class ReplicaFacts:
    replica: Replica
    engine: str
    model: str
    settings: dict[str, str]
    document: dict[str, Any] | None            # facts/1, or None when the series gave no facts
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    device_join: str = "none"                  # pod | host | none: how dcgm-exporter's series were matched

    @property
    def deployment_key(self) -> tuple[str, str, str, str, tuple[tuple[str, str], ...]]:
        gpu = str(((self.document or {}).get("hardware") or {}).get("gpu_name", ""))
        return (self.replica.namespace or "", self.engine, self.model, gpu, tuple(sorted(self.settings.items())))


@dataclass
class FleetFacts:
    replicas: list[ReplicaFacts]
    queries: int
    expressions: list[str]
    warnings: list[str]
    window: str
    at: float
    unmatched_gpus: int = 0            # dcgm-exporter series no replica claimed (idle or other GPUs)


def host_of(instance: str) -> str:
    """`10.0.0.5:8000` -> `10.0.0.5`, `[fe80::1]:9400` -> `fe80::1`, `node-a` -> `node-a`."""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    head, sep, port = instance.rpartition(":")
    return head if sep and port.isdigit() and ":" not in head else instance


def replica_of(labels: Labels) -> Replica:
    instance = labels.get("instance", "")
    pod = labels.get("pod") or None
    namespace = labels.get("namespace") or None
    ident = f"{namespace}/{pod}" if pod and namespace else pod or instance or "(no instance label)"
    return Replica(ident, instance, host_of(instance), pod, namespace if pod else None)


def _engine_of(name: str) -> str | None:
    return next((engine for prefix, engine in ENGINE_METRIC_PREFIXES if name.startswith(prefix)), None)


def read_fleet(client: PrometheusClient, window: str = "30m", selector: str | None = None,
               at: float | None = None, workers: int = 4) -> FleetFacts:
    """Query every family once, join the series to replicas, map each replica's to facts."""
    window_s = window_seconds(window)
    matchers = selector_matchers(selector)
    at = time.time() if at is None else at       # one evaluation time for every query: a consistent join
    expressions = [promql(name, kind, window, matchers) for name, kind in FAMILIES]
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    futures = [pool.submit(client.query, expr, at) for expr in expressions]
    try:
        results = [future.result() for future in as_completed_in_order(futures)]
    except BaseException:
        # An unusable server (or Ctrl-C): the queries not yet sent are not sent at all, and those
        # under way are not waited for (each ends at its own deadline): the first failure ends
        # the read, not the slowest query after it.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    by_family = {name: rows for (name, _), rows in zip(FAMILIES, results, strict=True)}
    queries = dict(zip((name for name, _ in FAMILIES), expressions, strict=True))

    # Engine series name the replicas; dcgm-exporter's are joined to them afterwards.
    engine_rows: dict[Replica, dict[str, Rows]] = {}
    for name, rows in by_family.items():
        if name.startswith("DCGM_FI_"):
            continue
        for labels, value in rows:
            engine_rows.setdefault(replica_of(labels), {}).setdefault(name, []).append((labels, value))
    by_pod = {(r.namespace or "", r.pod): r for r in engine_rows if r.pod}
    by_host: dict[str, list[Replica]] = {}
    for r in engine_rows:
        by_host.setdefault(r.host, []).append(r)
    device_rows: dict[Replica, dict[str, Rows]] = {}
    joined: dict[Replica, str] = {}
    unmatched: set[tuple[str, str]] = set()
    for name, rows in by_family.items():
        if not name.startswith("DCGM_FI_"):
            continue
        for labels, value in rows:
            # dcgm-exporter names the pod a GPU is allocated to (Kubernetes); on a plain node the
            # engine and the exporter share the host part of their scrape addresses.
            # (exported_pod when Prometheus' own pod label, the exporter's, took the name).
            pod = labels.get("exported_pod") or labels.get("pod")
            namespace = labels.get("exported_namespace") or labels.get("namespace", "")
            owner = by_pod.get((namespace, pod)) if pod else None
            targets = [owner] if owner else [] if pod else by_host.get(host_of(labels.get("instance", "")), [])
            if not targets:
                unmatched.add((labels.get("Hostname") or host_of(labels.get("instance", "")), labels.get("gpu", "")))
            for target in targets:
                device_rows.setdefault(target, {}).setdefault(name, []).append((labels, value))
                joined[target] = "pod" if owner else "host"

    replicas = [_replica_facts(replica, rows, device_rows.get(replica, {}), joined.get(replica, "none"),
                               len(by_host.get(replica.host, ())), queries, window, window_s)
                for replica, rows in sorted(engine_rows.items(), key=lambda item: item[0].id)]
    return FleetFacts(replicas, client.queries, expressions, list(client.warnings), window, at, len(unmatched))


def as_completed_in_order(futures: list[Future[T]]) -> Iterable[Future[T]]:
    """The futures in their order once all are done, or the first that failed as soon as it does
    (Future.result() in order would wait on an earlier, slower one first)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_EXCEPTION)
        for future in done:
            if future.exception() is not None:
                yield future
    yield from futures


def _scrapes(source: str, families: Mapping[str, Rows]) -> tuple[Scrape, Scrape]:
    """Two scrapes whose differences are what Prometheus computed over the window: a gauge's
    average in both, a counter's or bucket's increase in the second over zero in the first."""
    first: dict[str, Rows] = {}
    second: dict[str, Rows] = {}
    for name, rows in families.items():
        kind = family_kind(name)
        if kind in ("gauge", "info"):
            first[name], second[name] = list(rows), list(rows)
        elif kind == "counter":
            first[name], second[name] = [(labels, 0.0) for labels, _ in rows], list(rows)
        elif kind == "buckets":
            bucket_rows = [(labels, value) for labels, value in rows if "le" in labels]
            first[f"{name}_bucket"] = [(labels, 0.0) for labels, _ in bucket_rows]
            second[f"{name}_bucket"] = bucket_rows
            # The mapper tells a histogram is there by its _count, which is its +Inf bucket.
            count = [({k: v for k, v in labels.items() if k != "le"}, value) for labels, value in bucket_rows
                     if labels["le"] in ("+Inf", "Inf", "inf")]
            first[f"{name}_count"], second[f"{name}_count"] = [(labels, 0.0) for labels, _ in count], count
    return Scrape(source, first), Scrape(source, second)


def _replica_facts(replica: Replica, rows: dict[str, Rows], device: dict[str, Rows], join: str, on_host: int,
                   queries: Mapping[str, str], window: str, window_s: float) -> ReplicaFacts:
    engine = next((e for name in sorted(rows) if (e := _engine_of(name))), "other")
    model = next((labels.get("model_name") or labels.get("model") or "" for name in sorted(rows)
                  for labels, _ in rows[name] if labels.get("model_name") or labels.get("model")), "") or "unknown model"
    settings = {k: v for labels, _ in rows.get("vllm:cache_config_info", []) for k, v in labels.items()
                if k not in LOCATION_LABELS}
    gpus = sorted({labels.get("gpu", "") for family in device.values() for labels, _ in family if "GPU_I_ID" not in labels}
                  - {""}, key=lambda g: (len(g), g))
    result = ReplicaFacts(replica, engine, model, settings, None, gpus=gpus, device_join=join)
    first, second = _scrapes(f"prometheus {replica.id}", {**rows, **device})
    try:
        collected = facts_from_scrapes(first, second, gpu=int(gpus[0]) if gpus and gpus[0].isdigit() else None)
    except KboptError as error:
        result.notes.append(str(error))
        return result
    if join == "pod" and gpus:
        collected.put("hardware.gpu_count", len(gpus), Provenance(
            "prometheus", "derived", metric="gpu label", note="GPUs dcgm-exporter attributes to this pod"))
    if join == "host" and on_host > 1:
        result.notes.append(f"{on_host} replicas on host {replica.host} without pod labels: its GPUs' facts "
                            "cannot be told apart and are shared by them")
    collected.facts = {path: (value, _fleet_provenance(provenance, queries, window, window_s))
                       for path, (value, provenance) in collected.facts.items()}
    result.notes.extend(note.replace(" (--gpu)", "") for note in collected.notes)
    result.document = collected.document()
    if not device:
        result.missing.append("no dcgm-exporter series for this replica (none with its pod label, none on its host)")
    result.missing.extend(path for group in ("dcgm", "engine") for path in EXPECTED[group] if path not in collected.facts)
    return result


def _stripped(name: str) -> Iterable[str]:
    """A family's name and the short forms the collector's metric texts use (FB_USED, request_prompt_tokens)."""
    yield name
    for prefix in ("DCGM_FI_DEV_", "DCGM_FI_PROF_"):
        if name.startswith(prefix):
            yield name[len(prefix):]
    for suffix in ("_sum", "_count", "_total"):
        if name.endswith(suffix):
            yield name.partition(":")[2][: -len(suffix)] if ":" in name else name[: -len(suffix)]


def _fleet_provenance(provenance: Provenance, queries: Mapping[str, str], window: str, window_s: float) -> Provenance:
    """The collector's provenance, as read through Prometheus: source `prometheus`, the PromQL
    and the exporter in the note, the window's length; a count of samples only where it counts
    requests (a histogram's or counter's increase), since a gauge's average does not say how
    many scrapes it had."""
    used = [name for name in queries if any(short in (provenance.metric or "") for short in _stripped(name))]
    exporter = EXPORTERS.get(provenance.source, provenance.source)
    # The collector words its windows as scrapes of one endpoint; here the window is Prometheus'.
    note = (provenance.note or "").replace("between two scrapes", f"over the last {window}").strip("; ") or None
    parts = [f"{exporter} via Prometheus" + (": " + "; ".join(queries[name] for name in used) if used else "")]
    if note:
        parts.append(note)
    counted = any(family_kind(name) in ("counter", "buckets") for name in used)
    measured = provenance.quality in ("measured", "proxy")
    return replace(provenance, source="prometheus", samples=provenance.samples if counted else None,
                   window_s=window_s if measured else provenance.window_s, note=" — ".join(parts))


def missing_families() -> set[str]:
    """READ_FAMILIES entries this module does not query (a test keeps it empty)."""
    covered = {name for name, _ in FAMILIES}
    covered |= {name.rpartition("_")[0] for name in covered if name.endswith(("_total", "_sum", "_count"))}
    return set(READ_FAMILIES) - covered
