"""Fleet benchmarks, called from bench.py: (g) `kbopt advise --facts-jsonl` over many facts
documents, (h) `kbopt fleet` against a real Prometheus scraping simulated replicas."""
from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _facts_lines(count: int, path: Path) -> None:
    """`count` facts documents, the examples' with their telemetry varied, one per line."""
    rng = random.Random(count)
    examples = [json.loads(p.read_text()) for p in sorted((ROOT / "examples").glob("*.json"))]
    with open(path, "w") as handle:
        for index in range(count):
            document = json.loads(json.dumps(examples[index % len(examples)]))
            for name, value in (document.get("telemetry") or {}).items():
                if isinstance(value, float) and 0 <= value <= 1:
                    document["telemetry"][name] = round(min(1.0, max(0.0, value + rng.uniform(-0.05, 0.05))), 4)
            handle.write(json.dumps(document) + "\n")


def jsonl_throughput(count: int, measured, verdict) -> None:
    """Wall time and peak RSS of the whole command, against a tenth of the lines in the same run."""
    python = sys.executable
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for lines in (count // 10, count):
            path = Path(folder) / f"facts{lines}.jsonl"
            _facts_lines(lines, path)
            command = [python, "-m", "kbopt", "advise", "--facts-jsonl", str(path), "-o", str(Path(folder) / "out.jsonl")]
            start = time.perf_counter()
            cpu, rss, _ = measured(command)
            results[lines] = (time.perf_counter() - start, cpu, rss)
            written = (Path(folder) / "out.jsonl").read_text().count("\n")
            assert written == lines, f"{written} advice lines for {lines} facts lines"
    (small_wall, _, small_rss), (wall, cpu, rss) = results[count // 10], results[count]
    print("(g) advise --facts-jsonl, in a fresh process, peak RSS standalone:")
    print(f"    {count // 10:>6,} documents {small_wall:5.2f} s wall, peak RSS {small_rss:5.1f} MiB")
    # The time target is for 10,000 documents: a shorter run (--quick) says so instead of a verdict.
    time_target = verdict(wall <= 10, "<= 10 s") if count >= 10_000 else "(the 10 s target is for 10,000 documents)"
    print(f"    {count:>6,} documents {wall:5.2f} s wall ({cpu:5.2f} s CPU, {count / wall:5.0f}/s), peak RSS {rss:5.1f} MiB "
          f"(x{rss / small_rss:.2f} for 10x the lines) {time_target} "
          f"{verdict(rss / small_rss <= 1.2, 'memory flat: <= 1.2x')}")


def fleet_against_prometheus(replicas: int, verdict) -> None:
    """Query count and wall time of a fleet read, for `replicas` and a tenth of them, from one
    Prometheus (each fleet selected by its target label)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from prometheus_harness import Exporter, Prometheus, Sim, prometheus_missing, target_count

    from kbopt.collectors.fleet import PrometheusClient, read_fleet
    from kbopt.engine.pack.packs import load_checked_pack
    from kbopt.fleet import build_fleet

    missing = prometheus_missing()
    if missing:
        print(f"(h) kbopt fleet against Prometheus: skipped, {missing}")
        return
    sizes = {"tenth": max(1, replicas // 10), "all": replicas}
    sims = [Sim(f"{name}-{i}", name, kv=(i % 10) / 10, gpu=str(i % 8)) for name, n in sizes.items() for i in range(n)]
    pack = load_checked_pack([])
    print("(h) kbopt fleet against a real Prometheus (2 s scrapes) of simulated vLLM + dcgm-exporter replicas:")
    with Exporter(sims) as exporter, Prometheus(exporter, sims, interval_s=2.0) as server:
        for name in sizes:
            server.wait_for_scrapes(name, target_count(sims, name), scrapes=3, seconds=90)
        rows = {}
        for name, n in sizes.items():
            client = PrometheusClient(server.url)
            start = time.perf_counter()
            read = read_fleet(client, "1m", f'{{fleet="{name}"}}')
            queried = time.perf_counter() - start
            fleet = build_fleet(read, pack, "reference", server.url, None)
            whole = time.perf_counter() - start
            assert len(read.replicas) == n, (len(read.replicas), n)
            rows[name] = (n, client.queries, queried, whole, len(fleet.deployments))
    for n, queries, queried, whole, deployments in rows.values():
        print(f"    {n:4} replicas: {queries} queries, {queried:5.2f} s reading, {whole:5.2f} s with advice "
              f"({deployments} deployment(s))")
    same = rows["tenth"][1] == rows["all"][1]
    print(f"    queries do not grow with replicas: {'yes' if same else 'NO'} {verdict(same, 'fixed query count')}")
