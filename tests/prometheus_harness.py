"""A real Prometheus (Debian's /usr/bin/prometheus) scraping simulated replicas on loopback.

An HTTP exporter in a thread serves the real dumps of tests/data/real/ (dcgm-exporter, vLLM,
SGLang) once per simulated target, with per-replica values that change between scrapes: gauges
alternate around a base, counters and histogram buckets grow at a fixed rate. Prometheus runs
with a generated config (1 s scrapes, static targets whose labels play Kubernetes' pod and
namespace, or a node's host) and a temporary storage folder, on a free loopback port, and is
stopped at the end. Used by tests/test_fleet_prometheus.py and benchmarks/bench.py.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REAL = Path(__file__).resolve().parent / "data" / "real"
PROMETHEUS = os.environ.get("KBOPT_PROMETHEUS", "/usr/bin/prometheus")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)\s*$")
_LE = re.compile(r'le="([^"]+)"')


def prometheus_missing() -> str | None:
    """Why the Prometheus tests cannot run here, or None."""
    if not (os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)):
        return f"no Prometheus at {PROMETHEUS} (apt-get install prometheus)"
    return None


@dataclass
class Sim:
    """One simulated replica: an engine target and, optionally, a dcgm-exporter target."""
    name: str                       # the pod name (Kubernetes) or the node's host name (plain)
    fleet: str                      # a target label: each test selects its own fleet with it
    engine: str = "vllm"            # vllm | sglang
    model: str = "Qwen/Qwen2.5-0.5B-Instruct"
    namespace: str | None = "llm"   # None: a plain node, joined by the host part of `instance`
    dcgm: str | None = "dcgm_exporter_L4_kops.prom"
    gpu: str = "0"
    kv: float = 0.3                 # KV cache usage, 0..1
    running: float = 4.0
    waiting: float = 0.0
    success_per_s: float = 5.0
    preemptions_per_s: float = 0.0
    prompt_mean: float = 400.0
    output_mean: float = 120.0
    ttft_scale_s: float = 0.2       # TTFT ~ exponential with this mean
    gr_active: float = 0.5
    dram_active: float = 0.4
    fb_used: float = 20000.0
    fb_free: float = 2000.0
    fed: dict[str, float] = field(default_factory=dict)   # what it served, for the test to compare

    @property
    def instance(self) -> str:
        return f"{self.name}:8000" if self.namespace is None else f"10.1.{len(self.name)}.{sum(map(ord, self.name)) % 250}:8000"

    def ttft_cdf(self, bound: float) -> float:
        return 1.0 if math.isinf(bound) else 1.0 - math.exp(-bound / self.ttft_scale_s)


class _Template:
    """A real dump split once into lines; a sample line's value can be replaced per scrape."""

    def __init__(self, path: Path):
        self.lines: list[tuple[str, str | None, str, str]] = []     # (name, labels text, value, raw line)
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _SAMPLE.match(line)
            if line.startswith("#") or match is None:
                self.lines.append(("", None, "", line))
            else:
                self.lines.append((match.group(1), match.group(2) or "", match.group(3), line))


def _with_labels(labels: str, extra: str) -> str:
    if not extra:
        return labels
    return "{" + extra + "}" if not labels or labels == "{}" else labels[:-1] + "," + extra + "}"


class Exporter:
    """Serves every simulated target at /<sim>/<engine|dcgm> on 127.0.0.1:<port>."""

    def __init__(self, sims: list[Sim]):
        self.sims = {sim.name: sim for sim in sims}
        self.templates: dict[str, _Template] = {}
        self.started = time.monotonic()
        self.scrapes: dict[str, int] = {}
        self.server = loopback_server(lambda method, path, body: (200, "text/plain; version=0.0.4", data.encode())
                                      if (data := self.render(path)) is not None else (404, "text/plain", b""))
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, sims: list[Sim]) -> None:
        self.sims.update({sim.name: sim for sim in sims})

    def template(self, name: str) -> _Template:
        if name not in self.templates:
            self.templates[name] = _Template(REAL / name)
        return self.templates[name]

    def render(self, path: str) -> str | None:
        _, name, kind = (path.split("/") + ["", ""])[:3]
        sim = self.sims.get(name)
        if sim is None or kind not in ("engine", "dcgm") or (kind == "dcgm" and not sim.dcgm):
            return None
        key = f"{name}/{kind}"
        count = self.scrapes[key] = self.scrapes.get(key, 0) + 1
        t = time.monotonic() - self.started
        wobble = 1 if count % 2 else -1          # gauges alternate around their base between scrapes
        if kind == "dcgm":
            return self._dcgm(sim, wobble)
        return self._engine(sim, t, wobble)

    def _engine(self, sim: Sim, t: float, wobble: int) -> str:
        if sim.engine == "vllm":
            dump, prefix = "vllm_v1_metrics_qwen05b_kops.prom", "vllm:"
            gauges = {"vllm:kv_cache_usage_perc": sim.kv + 0.02 * wobble, "vllm:num_requests_running": sim.running + wobble,
                      "vllm:num_requests_waiting": sim.waiting}
            ttft = "vllm:time_to_first_token_seconds"
        else:
            dump, prefix = "sglang_metrics_llama31_8b_overloaded_docs.prom", "sglang:"
            gauges = {"sglang:token_usage": sim.kv + 0.02 * wobble, "sglang:num_running_reqs": sim.running + wobble,
                      "sglang:num_queue_reqs": sim.waiting}
            ttft = "sglang:time_to_first_token_seconds"
        done = sim.success_per_s * t
        counters = {"vllm:num_preemptions_total": sim.preemptions_per_s * t,
                    "vllm:request_prompt_tokens_sum": sim.prompt_mean * done, "vllm:request_prompt_tokens_count": done,
                    "vllm:request_generation_tokens_sum": sim.output_mean * done,
                    "vllm:request_generation_tokens_count": done, f"{ttft}_count": done}
        out = []
        for name, labels, value, raw in self.template(dump).lines:
            if not name:
                out.append(raw)
                continue
            labels = labels.replace('model_name="Qwen/Qwen2.5-0.5B-Instruct"', f'model_name="{sim.model}"') \
                .replace('model_name="meta-llama/Llama-3.1-8B-Instruct"', f'model_name="{sim.model}"')
            if name in gauges:
                value = repr(gauges[name])
            elif name in counters:
                value = repr(counters[name])
            elif name == "vllm:request_success_total":
                value = repr(done if 'finished_reason="stop"' in labels else 0.0)
            elif name == f"{ttft}_bucket":
                bound = float(_LE.search(labels).group(1))
                value = repr(sim.ttft_cdf(bound) * done)
            elif name.startswith(prefix) and name.endswith(("_total", "_sum", "_count", "_bucket")):
                value = "0.0"             # other counters: idle, so that no reset is ever seen
            out.append(f"{name}{labels} {value}")
        sim.fed.update({k: v for k, v in gauges.items()})
        return "\n".join(out) + "\n"

    def _dcgm(self, sim: Sim, wobble: int) -> str:
        values = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": sim.gr_active + 0.01 * wobble,
                  "DCGM_FI_PROF_DRAM_ACTIVE": sim.dram_active + 0.01 * wobble,
                  "DCGM_FI_DEV_FB_USED": sim.fb_used, "DCGM_FI_DEV_FB_FREE": sim.fb_free,
                  "DCGM_FI_DEV_FB_RESERVED": 0.0}
        # dcgm-exporter names the pod that holds a GPU (its Kubernetes pod mapping)
        extra = f'pod="{sim.name}",namespace="{sim.namespace}",container="engine"' if sim.namespace else ""
        out = []
        for name, labels, value, raw in self.template(sim.dcgm or "").lines:
            if not name:
                out.append(raw)
                continue
            if "GPU_I_ID" in labels:
                continue                  # MIG instance series: one whole GPU per simulated replica
            labels = re.sub(r'gpu="\d+"', f'gpu="{sim.gpu}"', labels)
            out.append(f"{name}{_with_labels(labels, extra)} {repr(values[name]) if name in values else value}")
        return "\n".join(out) + "\n"


def loopback_server(respond) -> ThreadingHTTPServer:
    """An HTTP server on a free loopback port: respond(method, path, body) -> (status, type, bytes)."""
    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length", 0) or 0)
            status, content_type, data = respond(self.command, self.path, self.rfile.read(length) if length else b"")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            # A scraper or client that hangs up early (Prometheus on shutdown, a timed-out test
            # client) is not an error of the simulated exporter: say nothing rather than a traceback.
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    return Server(("127.0.0.1", 0), Handler)


def target_count(sims: list[Sim], fleet: str) -> int:
    return sum(1 + bool(sim.dcgm) for sim in sims if sim.fleet == fleet)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(exporter: Exporter, sims: list[Sim], interval_s: float = 1.0) -> str:
    """Prometheus' YAML (JSON is YAML): the labels of a static target play service discovery's."""
    engines, dcgms = [], []
    for sim in sims:
        base = {"fleet": sim.fleet}
        if sim.namespace:
            engines.append({"targets": [f"127.0.0.1:{exporter.port}"], "labels": {
                **base, "__metrics_path__": f"/{sim.name}/engine", "instance": sim.instance,
                "pod": sim.name, "namespace": sim.namespace}})
        else:
            engines.append({"targets": [f"127.0.0.1:{exporter.port}"], "labels": {
                **base, "__metrics_path__": f"/{sim.name}/engine", "instance": f"{sim.name}:8000"}})
        if sim.dcgm:
            dcgms.append({"targets": [f"127.0.0.1:{exporter.port}"], "labels": {
                **base, "__metrics_path__": f"/{sim.name}/dcgm",
                "instance": f"dcgm-{sim.name}:9400" if sim.namespace else f"{sim.name}:9400"}})
    interval = f"{int(interval_s * 1000)}ms"
    return json.dumps({
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": "1m"},
        "scrape_configs": [{"job_name": "engines", "honor_labels": True, "static_configs": engines},
                           {"job_name": "dcgm", "honor_labels": True, "static_configs": dcgms}]})


class Prometheus:
    """/usr/bin/prometheus on a free loopback port, with a temporary config and storage."""

    def __init__(self, exporter: Exporter, sims: list[Sim], interval_s: float = 0.5):
        self.folder = Path(tempfile.mkdtemp(prefix="kbopt-prometheus-"))
        (self.folder / "prometheus.yml").write_text(config(exporter, sims, interval_s))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = self.folder / "prometheus.log"

    def __enter__(self) -> Prometheus:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        try:
            self.wait(lambda: self._get("/-/ready") is not None, 20, "Prometheus to start")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as response:
                return response.read()
        except OSError:
            return None

    def query(self, expr: str) -> list[dict]:
        raw = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return json.loads(raw)["data"]["result"] if raw else []

    def wait(self, ready, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"Prometheus exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {seconds:g} s for {what}")
            time.sleep(0.2)

    def wait_for_scrapes(self, fleet: str, targets: int, scrapes: int = 4, seconds: float = 30) -> None:
        """Until every target of `fleet` is up and has `scrapes` samples (a bounded wait)."""
        def ready() -> bool:
            rows = self.query(f'count_over_time(up{{fleet="{fleet}"}}[5m])')
            ups = self.query(f'up{{fleet="{fleet}"}} == 1')
            return len(rows) == targets and len(ups) == targets and min(float(r["value"][1]) for r in rows) >= scrapes
        self.wait(ready, seconds, f"{scrapes} scrapes of the {targets} targets of fleet {fleet}")
