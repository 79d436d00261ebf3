"""kbopt benchmark: prints figures measured in one run, each beside a baseline from the same run.

    python benchmarks/bench.py [--quick]

(a) cold `kbopt advise` wall time against `python -c pass` (and against importing the
    dependencies alone, the floor kbopt cannot go under);
(b) evaluations per second in-process on the built-in rules, for both evaluators;
(c) per-evaluation time for synthetic packs of 50, 500 and 2,000 rules (distinct thresholds).
Targets (issue 2): cold advise <= 250 ms; >= 2,000 evaluations/s per core; 2,000 rules <= 15 ms.
"""
from __future__ import annotations

import argparse
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
    from kbopt.engine.advisor import advise, make_evaluator
    from kbopt.engine.loader import load_pack
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
    from kbopt.engine.advisor import make_evaluator
    from kbopt.engine.synthetic import random_telemetry, synthetic_pack

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
        verdict = f"   (target <= 15 ms: {'met' if per['durable'] <= 15 else 'NOT met'})" if size == 2000 else ""
        print(f"    {size:5} rules: load {loaded:5.2f} s, compile {compiled:5.2f} s; per evaluation "
              f"reference {per['reference']:6.2f} ms, durable {per['durable']:6.2f} ms "
              f"({per['durable'] / per['reference']:.1f}x){verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (for a smoke test)")
    args = parser.parse_args()
    cold_start(runs=3 if args.quick else 15)
    throughput(seconds=0.3 if args.quick else 2.0)
    scaling([50, 500] if args.quick else [50, 500, 2000], evaluations=20 if args.quick else 200)


if __name__ == "__main__":
    main()
