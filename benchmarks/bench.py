"""kbopt benchmark: prints figures measured in one run, each beside a baseline from the same run.

    python benchmarks/bench.py [--quick]

(a) cold `kbopt advise` wall time against `python -c pass` (and against importing the
    dependencies alone, the floor kbopt cannot go under);
(b) evaluations per second in-process on the built-in rules, for both evaluators;
(c) per-evaluation time for synthetic packs of 50, 500 and 2,000 rules (distinct thresholds);
(d) collect's own overhead per NVML sample, with a fake NVML module, against the NVML calls alone;
(e) summarizing a 1,000,000-request trace (Azure format): time, and peak memory against 100,000.
Targets: cold advise <= 250 ms; >= 2,000 evaluations/s per core; 2,000 rules <= 15 ms;
1,000,000-request trace < 3 s with memory bounded (streamed).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def wall(command: list[str], runs: int) -> float:
    """Median wall time of a command, in ms (one warm-up run first, for the page cache)."""
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def cold_start(runs: int) -> None:
    python = sys.executable
    baseline = wall([python, "-c", "pass"], runs)
    floor = wall([python, "-c", "import durable.engine, jsonschema, networkx, yaml"], runs)
    advise = wall([python, "-m", "kbopt", "advise", "--facts", str(EXAMPLES[0])], runs)
    print(f"(a) cold advise, median of {runs}:")
    print(f"    python -c pass                      {baseline:7.0f} ms   1.0x")
    print(f"    import the dependencies only        {floor:7.0f} ms   {floor / baseline:4.1f}x")
    print(f"    kbopt advise (bundled example)      {advise:7.0f} ms   {advise / baseline:4.1f}x"
          f"   (target <= 250 ms: {'met' if advise <= 250 else 'NOT met'})")


def throughput(seconds: float) -> None:
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import make_evaluator
    from kbopt.engine.pack.loader import load_pack
    from kbopt.kb.facts import load_facts

    pack = load_pack()
    facts = [load_facts(path) for path in EXAMPLES]
    values = [f.engine_values() for f in facts]
    print(f"(b) built-in rules ({len(pack.rules)}), in-process, cycling over {len(values)} example facts files:")
    rates = {}
    for name in ("reference", "durable"):
        evaluator = make_evaluator(pack, name)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for v in values:
                evaluator.run(v)
            count += len(values)
        rates[name] = count / (time.perf_counter() - start)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for f in facts:
                advise(f, pack, name)
            count += len(facts)
        full = count / (time.perf_counter() - start)
        print(f"    {name:9} chaining {rates[name]:7.0f} evaluations/s ({1e6 / rates[name]:5.0f} us each); "
              f"whole advice (explanations, conflicts) {full:6.0f}/s")
    print(f"    durable / reference: {rates['durable'] / rates['reference']:.2f}x   "
          f"(target >= 2,000/s: {'met' if rates['durable'] >= 2000 else 'NOT met'})")


def scaling(sizes: list[int], evaluations: int) -> None:
    from kbopt.engine.advice.advisor import advise
    from kbopt.engine.evaluators import make_evaluator
    from kbopt.engine.authoring.synthetic import random_telemetry, synthetic_pack
    from kbopt.kb.facts import facts_from_document

    print(f"(c) synthetic packs, mean of {evaluations} random fact sets:")
    for size in sizes:
        start = time.perf_counter()
        pack = synthetic_pack(size)
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        durable = make_evaluator(pack, "durable")
        compiled = time.perf_counter() - start
        rng = random.Random(size)
        inputs = [random_telemetry(rng) for _ in range(evaluations)]
        per = {}
        for name, evaluator in (("reference", make_evaluator(pack, "reference")), ("durable", durable)):
            start = time.perf_counter()
            for v in inputs:
                evaluator.run(v)
            per[name] = (time.perf_counter() - start) / evaluations * 1000
        # The whole advise() (explanations of what was not evaluated included), with telemetry and
        # without: facts with no telemetry leave every chained rule waiting, the explanation's worst case.
        documents = [{"telemetry": {k.split(".")[1]: v for k, v in values.items()}} for values in inputs]
        documents[::4] = [{"model": {"params_billion": 8}}] * len(documents[::4])
        facts = [facts_from_document(document, "synthetic") for document in documents]
        start = time.perf_counter()
        for f in facts:
            advise(f, pack, "reference")
        whole = (time.perf_counter() - start) / evaluations * 1000
        verdict = f"   (target <= 15 ms: {'met' if per['durable'] <= 15 else 'NOT met'})" if size == 2000 else ""
        print(f"    {size:5} rules: load {loaded:5.2f} s, compile {compiled:5.2f} s; per evaluation "
              f"reference {per['reference']:6.2f} ms, durable {per['durable']:6.2f} ms "
              f"({per['durable'] / per['reference']:.1f}x){verdict}; whole advise() {whole:6.2f} ms")


def nvml_overhead(samples: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_nvml import FakeClock, FakeNVML

    from kbopt.kb.collectors.nvml import Progress, sample_nvml

    fake = FakeNVML(readings=[(55, 30, 70.0)])
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    start = time.perf_counter()
    for _ in range(samples):        # the calls one sample makes, and nothing else
        fake.nvmlDeviceGetUtilizationRates(handle)
        fake.nvmlDeviceGetMemoryInfo(handle)
        fake.nvmlDeviceGetPowerUsage(handle)
        fake.nvmlDeviceGetClockInfo(handle, fake.NVML_CLOCK_SM)
    calls = (time.perf_counter() - start) / samples
    fake = FakeNVML(readings=[(55, 30, 70.0)])
    clock = FakeClock()
    with open(os.devnull, "w") as quiet:
        start = time.perf_counter()
        sample_nvml(fake, 0, duration_s=samples * 0.5 - 0.25, interval_s=0.5, clock=clock, sleep=clock.sleep,
                    progress=Progress(1, stream=quiet))
    whole = (time.perf_counter() - start) / samples
    print(f"(d) NVML sampling, {samples} samples with a fake NVML module:")
    print(f"    the NVML calls alone {calls * 1e6:6.1f} us/sample; kbopt's sampling {whole * 1e6:6.1f} us/sample; "
          f"overhead {(whole - calls) * 1e6:5.1f} us/sample (at the default 0.5 s interval: "
          f"{(whole - calls) / 0.5 * 100:.4f}% of one core)")


_TRACE_CHILD = """
import resource, sys, time
from kbopt.kb.collectors.traces import TraceOptions, summarize_trace
start = time.perf_counter()
summarize_trace(sys.argv[1], TraceOptions())
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def trace_scaling(rows: int) -> None:
    import tempfile
    rng = random.Random(7)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for count in (rows // 10, rows):
            path = Path(folder) / f"trace{count}.csv"
            with open(path, "w") as handle:
                handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
                t = 0.0
                for _ in range(count):
                    t += rng.expovariate(40)
                    day, rest = divmod(t, 86400)
                    handle.write(f"2023-11-{16 + int(day):02d} {int(rest // 3600):02d}:{int(rest // 60 % 60):02d}:"
                                 f"{rest % 60:010.7f},{rng.randint(10, 8000)},{rng.randint(1, 800)}\n")
            output = subprocess.run([sys.executable, "-c", _TRACE_CHILD, str(path)], capture_output=True,
                                    text=True, check=True).stdout.split()
            results[count] = (float(output[0]), int(output[1]) / 1024)
    small, large = results[rows // 10], results[rows]
    print(f"(e) trace summary (Azure CSV), in a fresh process:")
    print(f"    {rows // 10:>9,} requests {small[0]:5.2f} s, peak RSS {small[1]:6.1f} MiB")
    print(f"    {rows:>9,} requests {large[0]:5.2f} s, peak RSS {large[1]:6.1f} MiB   "
          f"(target < 3 s: {'met' if large[0] < 3 else 'NOT met'}; memory x{large[1] / small[1]:.2f} for 10x the rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (for a smoke test)")
    args = parser.parse_args()
    cold_start(runs=3 if args.quick else 15)
    throughput(seconds=0.3 if args.quick else 2.0)
    scaling([50, 500] if args.quick else [50, 500, 2000], evaluations=20 if args.quick else 200)
    nvml_overhead(samples=200 if args.quick else 5000)
    trace_scaling(rows=20_000 if args.quick else 1_000_000)


if __name__ == "__main__":
    main()
