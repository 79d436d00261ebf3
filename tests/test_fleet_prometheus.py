"""`kbopt fleet` against a real Prometheus (Debian's /usr/bin/prometheus) scraping simulated
replicas that serve the real dumps of tests/data/real/ with changing values (prometheus_harness).

Skipped where no Prometheus is installed, unless KBOPT_REQUIRE_PROMETHEUS=1 (as in .ci/run),
where a missing Prometheus is a failure. One Prometheus serves every test of this module; each
test reads its own simulated fleet through a selector on the `fleet` target label.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from prometheus_harness import Exporter, Prometheus, Sim, prometheus_missing, target_count
from test_report_browser import _open, browser  # noqa: F401 (the browser fixture, shared)

from kbopt.collectors.fleet import FAMILIES, PrometheusClient, read_fleet
from kbopt.collectors.prometheus import histogram_quantile

HOSTILE = '<script>alert(1)</script>\x1b[2J\u202eevil'
# The bucket bounds of vLLM's TTFT histogram in the real dump.
TTFT_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0, 160.0, 640.0, 2560.0, math.inf]
SGLANG_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0,
                 25.0, 30.0, math.inf]

SIMS = [
    # One deployment of three replicas: two idle, one preempting with a full KV cache (routing).
    Sim("qwen-0", "k8s", kv=0.20, gr_active=0.30, dram_active=0.20, success_per_s=4.0),
    Sim("qwen-1", "k8s", kv=0.25, gr_active=0.35, dram_active=0.25, success_per_s=5.0),
    Sim("qwen-2", "k8s", kv=0.96, waiting=6.0, preemptions_per_s=1.5, success_per_s=3.0, ttft_scale_s=2.0,
        gr_active=0.80, dram_active=0.70, gpu="1"),
    Sim("llama-0", "k8s", engine="sglang", model="meta-llama/Llama-3.1-8B-Instruct",
        dcgm="dcgm_exporter_T4_ericsson_ccd.prom", kv=0.6, gr_active=0.9, dram_active=0.2),
    Sim("mistral-0", "k8s", model="mistralai/Mistral-7B-Instruct-v0.3", dcgm=None),      # no GPU series: missing
    Sim("node-a", "plain", namespace=None, dcgm="dcgm_exporter_L40S_upcloud.prom", kv=0.5),  # no Kubernetes labels
    Sim("hostile-0", "hostile", model=HOSTILE),
    *[Sim(f"small-{i}", "small", kv=0.1 * i) for i in range(2)],
    *[Sim(f"large-{i}", "large", kv=0.02 * i, gpu=str(i % 8)) for i in range(16)],
]


@pytest.fixture(scope="module")
def prometheus():
    missing = prometheus_missing()
    if missing:
        if os.environ.get("KBOPT_REQUIRE_PROMETHEUS"):
            pytest.fail(f"Prometheus test required but {missing}")
        pytest.skip(missing)
    with Exporter(SIMS) as exporter, Prometheus(exporter, SIMS) as server:
        for fleet in ("k8s", "plain", "hostile", "small", "large"):
            server.wait_for_scrapes(fleet, target_count(SIMS, fleet), scrapes=4, seconds=40)
        yield server


def _fleet(run_cli, server, fleet: str, tmp_path: Path, *extra: str):
    out = tmp_path / f"fleet-{fleet}"
    code, _, stderr = run_cli("fleet", "--prometheus", server.url, "--window", "1m",
                              "--selector", f'{{fleet="{fleet}"}}', "-o", str(out), *extra)
    assert code == 0, stderr
    records = [json.loads(line) for line in (out / "fleet.jsonl").read_text().splitlines()]
    return out, records, stderr


def _sim(name: str) -> Sim:
    return next(s for s in SIMS if s.name == name)


def _expected_p99(sim: Sim, bounds=TTFT_BOUNDS) -> float:
    return histogram_quantile(0.99, [(b, sim.ttft_cdf(b)) for b in bounds])[0] * 1000


def test_each_replica_gets_what_it_was_fed(prometheus, run_cli, tmp_path):
    out, records, stderr = _fleet(run_cli, prometheus, "k8s", tmp_path)
    by_name = {r["deployment"]: r for r in records}
    assert sorted(by_name) == ["llm/Qwen/Qwen2.5-0.5B-Instruct (vllm, NVIDIA L4)",
                               "llm/meta-llama/Llama-3.1-8B-Instruct (sglang, Tesla T4)",
                               "llm/mistralai/Mistral-7B-Instruct-v0.3 (vllm)"]
    qwen = by_name["llm/Qwen/Qwen2.5-0.5B-Instruct (vllm, NVIDIA L4)"]
    assert [r["id"] for r in qwen["replicas"]] == ["llm/qwen-0", "llm/qwen-1", "llm/qwen-2"]
    for replica in qwen["replicas"]:
        sim, facts = _sim(replica["pod"]), replica["facts"]
        assert replica["device_join"] == "pod" and replica["gpus"] == [sim.gpu]
        assert facts["hardware.gpu_name"] == "NVIDIA L4"
        # gauges alternate by +-0.02 (+-1 running request) between scrapes: their average is the base
        assert facts["telemetry.kv_cache_usage_ratio"] == pytest.approx(sim.kv, abs=0.021)
        assert facts["workload.requests_running_mean"] == pytest.approx(sim.running, abs=1.01)
        assert facts["workload.requests_waiting_mean"] == sim.waiting
        assert facts["telemetry.compute_utilization"] == pytest.approx(sim.gr_active, abs=0.011)
        assert facts["telemetry.bandwidth_utilization"] == pytest.approx(sim.dram_active, abs=0.011)
        assert facts["telemetry.memory_used_ratio"] == pytest.approx(sim.fb_used / (sim.fb_used + sim.fb_free), rel=1e-5)
        # counters grow at fixed rates: ratios of their increases are exact
        assert facts["workload.preemption_ratio"] == pytest.approx(sim.preemptions_per_s / sim.success_per_s, rel=1e-6)
        assert facts["workload.seq_len_mean"] == pytest.approx(sim.prompt_mean + sim.output_mean, rel=1e-6)
        assert facts["workload.ttft_p99_ms"] == pytest.approx(_expected_p99(sim), rel=1e-6)
        assert facts["hardware.gpu_count"] == 1
    # The p99 is interpolated client-side from the buckets' increases, as Prometheus' own
    # histogram_quantile does it:
    theirs = {row["metric"]["pod"]: float(row["value"][1]) * 1000 for row in prometheus.query(
        'histogram_quantile(0.99, sum by (pod, le) (increase(vllm:time_to_first_token_seconds_bucket{fleet="k8s"}[1m])))')}
    for replica in qwen["replicas"]:
        assert replica["facts"]["workload.ttft_p99_ms"] == pytest.approx(theirs[replica["pod"]], rel=1e-6)

    provenance = qwen["facts"]["provenance"]
    assert provenance["telemetry.kv_cache_usage_ratio"]["source"] == "prometheus"
    assert 'avg_over_time(vllm:kv_cache_usage_perc{fleet="k8s"}[1m])' in provenance["telemetry.kv_cache_usage_ratio"]["note"]
    assert "increase(vllm:num_preemptions_total" in provenance["workload.preemption_ratio"]["note"]
    assert "mean of 3 of 3 replicas" in provenance["telemetry.kv_cache_usage_ratio"]["note"]
    assert qwen["advice"]["kbopt"].startswith("advice/")

    # One replica preempting while the others idle: a routing problem, said as such.
    finding = qwen["differences"]["findings"][0]
    assert finding["kind"] == "uneven_load" and finding["pressed"] == ["llm/qwen-2"]
    assert set(finding["idle"]) == {"llm/qwen-0", "llm/qwen-1"} and "routing" in finding["text"]
    assert "routing problem" in stderr
    assert any(f["fact"] == "telemetry.kv_cache_usage_ratio" for f in qwen["differences"]["facts"])

    sglang = by_name["llm/meta-llama/Llama-3.1-8B-Instruct (sglang, Tesla T4)"]
    assert sglang["replicas"][0]["facts"]["telemetry.kv_cache_usage_ratio"] == pytest.approx(0.6, abs=0.021)
    assert sglang["replicas"][0]["facts"]["workload.ttft_p99_ms"] == pytest.approx(_expected_p99(_sim("llama-0"), SGLANG_BOUNDS), rel=1e-6)

    mistral = by_name["llm/mistralai/Mistral-7B-Instruct-v0.3 (vllm)"]
    assert "telemetry.compute_utilization" in mistral["missing"]
    assert any("no dcgm-exporter series" in m for m in mistral["missing"])
    assert mistral["advice"] is not None        # advised on what there is

    for record in records:
        assert (out / record["report"]).is_file()
    assert (out / "index.html").is_file()


def test_plain_node_joins_by_host(prometheus, run_cli, tmp_path):
    _, records, _ = _fleet(run_cli, prometheus, "plain", tmp_path)
    (record,) = records
    (replica,) = record["replicas"]
    assert replica["id"] == "node-a:8000" and replica["host"] == "node-a" and replica["device_join"] == "host"
    assert replica["facts"]["hardware.gpu_name"] == "NVIDIA L40S"
    assert "hardware.gpu_count" not in replica["facts"]      # a node's exporter cannot say GPUs per replica


def test_query_count_does_not_grow_with_replicas(prometheus):
    counts = {}
    for fleet in ("small", "large"):
        client = PrometheusClient(prometheus.url)
        read = read_fleet(client, "1m", f'{{fleet="{fleet}"}}')
        counts[fleet] = (len(read.replicas), client.queries)
    assert counts["small"][0] == 2 and counts["large"][0] == 16
    assert counts["small"][1] == counts["large"][1] == len(FAMILIES)


def test_index_in_a_browser_with_hostile_labels(prometheus, run_cli, tmp_path, browser):  # noqa: F811
    out, records, stderr = _fleet(run_cli, prometheus, "hostile", tmp_path)
    assert "\x1b" not in stderr and "\u202e" not in stderr and "<U+001B>" in stderr
    (record,) = records
    assert record["model"] == HOSTILE                        # the data keeps the value as it is
    assert "/" not in record["report"].removeprefix("deployments/")
    html = (out / "index.html").read_text()
    assert "<script>" not in html and "\u202e" not in html
    context, page, events = _open(browser, html, tmp_path)
    try:
        assert events["dialogs"] == [] and events["errors"] == [] and events["console"] == []
        assert [u for u in events["requests"] if not u.startswith("file:")] == []
        for section in ("#summary", "#bottlenecks", "#actions", "#deployments", "#queries"):
            assert page.locator(section).is_visible(), section
        assert "<script>alert(1)</script>" in page.locator("#deployments").inner_text()
        assert page.locator("#bottlenecks svg rect").count() >= 1
    finally:
        context.close()
    k8s, _, _ = _fleet(run_cli, prometheus, "k8s", tmp_path)
    context, page, events = _open(browser, (k8s / "index.html").read_text(), tmp_path, width=390, javascript=False)
    try:
        assert page.locator("#deployment-count").inner_text() == "3"
        assert page.locator(".finding").count() == 1
        assert page.locator("body").evaluate("b => b.scrollWidth") <= 400
    finally:
        context.close()
