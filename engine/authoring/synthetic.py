"""Synthetic rule packs of any size, for scaling tests and benchmarks.

Thresholds are distinct and random (a grid of shared thresholds flatters durable_rules, see the
notes), every rule reads telemetry, and one rule in seven chains through a derived fact.
"""
from __future__ import annotations

import random
from pathlib import Path

from kbopt.engine.pack.loader import build_pack, load_rule_text
from kbopt.engine.pack.rule import Pack

FIELDS = ("compute_utilization", "bandwidth_utilization", "memory_used_ratio")


def synthetic_rule_texts(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """(file name, rule text) of each synthetic rule."""
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        threshold = round(rng.uniform(0.01, 0.99), 4)
        field = rng.choice(FIELDS)
        derive = "derived.low_gpu_utilization: true" if index % 5 == 0 else "derived.queue_timeouts: true"
        when = f"telemetry.{field} > {threshold}" if index % 7 else \
            f"derived.low_gpu_utilization and telemetry.{field} < {threshold}"
        text = (f"id: S-SYNTH-{index:04d}\ntitle: synthetic rule {index}\nlayer: diagnosis\nwhen: {when}\n"
                f"then:\n  - derive: {{{derive}}}\nbecause: synthetic rule for scaling tests\nsource: test\n"
                "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n")
        texts.append((f"s-synth-{index:04d}.yaml", text))
    return texts


def synthetic_pack(count: int, seed: int = 7) -> Pack:
    rules = [load_rule_text(text, f"synthetic/{name}", pack="synthetic") for name, text in synthetic_rule_texts(count, seed)]
    return build_pack(rules, f"synthetic{count}x{seed}")


def write_synthetic_pack(folder: Path, count: int, seed: int = 7) -> Path:
    """The same rules as a pack directory (diagnosis/<id>.yaml), for `advise --rules`."""
    layer = folder / "diagnosis"
    layer.mkdir(parents=True, exist_ok=True)
    for name, text in synthetic_rule_texts(count, seed):
        (layer / name).write_text(text, encoding="utf-8")
    return folder


def random_telemetry(rng: random.Random) -> dict[str, float]:
    return {f"telemetry.{k}": round(rng.random(), 3) for k in FIELDS if rng.random() < 0.9}
