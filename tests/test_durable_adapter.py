"""The durable_rules adapter's workarounds, each checked against the reference evaluator."""
from __future__ import annotations

import json
import random

import pytest

from kbopt.engine.advisor import advise
from kbopt.engine.durable_backend import RULESET_SIZE, DurableEvaluator, compile_pack, dumps
from kbopt.engine.loader import build_pack, load_rule_text
from kbopt.engine.reference import ReferenceEvaluator
from kbopt.kb.facts import facts_from_document
from kbopt.kb.vocabulary import load_vocabulary


def test_numbers_never_in_bare_exponent_form():
    assert dumps(1e-05) == "1.0e-05"
    assert dumps({"a": [5e-4, 1e20, 0.5, 3]}) == '{"a":[0.0005,1.0e+20,0.5,3]}'
    assert json.loads(dumps(1.5e-07)) == 1.5e-07
    with pytest.raises(ValueError):
        dumps(float("nan"))


def test_tiny_ratios_are_asserted_and_compared(pack):
    facts = facts_from_document({"workload": {"queue_timeout_ratio": 2e-05}}, "x")
    fired = {f.rule for f in advise(facts, pack, "durable").fired}
    assert "D-SYMPTOM-QUEUE-TIMEOUTS" not in fired      # 2e-05 < 0.001
    facts = facts_from_document({"workload": {"queue_timeout_ratio": 0.002}}, "x")
    assert "D-SYMPTOM-QUEUE-TIMEOUTS" in {f.rule for f in advise(facts, pack, "durable").fired}


def test_compiled_patterns_for_a_cross_fact_comparison(pack):
    compiled = compile_pack(pack)
    rules = {name: d for ruleset in compiled for name, d in ruleset["rules"].items()}
    compute = rules["D-BOTTLENECK-COMPUTE#0"]["all"]
    assert compute == [{"i": {"$and": [
        {"k": "i"},
        {"$ex": {"telemetry.memory_used_ratio": 1}}, {"$lte": {"telemetry.memory_used_ratio": 0.9}},
        {"$ex": {"telemetry.compute_utilization": 1}}, {"$ex": {"telemetry.bandwidth_utilization": 1}},
        {"$gt": {"telemetry.compute_utilization": {"$m": "telemetry.bandwidth_utilization"}}}]}}]


def _synthetic_pack(count: int, seed: int = 7):
    """`count` threshold rules with distinct thresholds, chained through a derived fact."""
    rng = random.Random(seed)
    rules = []
    for index in range(count):
        threshold = round(rng.uniform(0.01, 0.99), 4)
        field = rng.choice(["compute_utilization", "bandwidth_utilization", "memory_used_ratio"])
        derive = "derived.low_gpu_utilization: true" if index % 5 == 0 else "derived.queue_timeouts: true"
        when = f"telemetry.{field} > {threshold}" if index % 7 else \
            f"derived.low_gpu_utilization and telemetry.{field} < {threshold}"
        text = (f"id: S-SYNTH-{index:04d}\ntitle: synthetic rule {index}\nlayer: diagnosis\nwhen: {when}\n"
                f"then:\n  - derive: {{{derive}}}\nbecause: synthetic rule for scaling tests\nsource: test\n"
                "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n")
        rules.append(load_rule_text(text, f"synthetic/s-synth-{index:04d}.yaml", pack="synthetic"))
    return build_pack(rules, f"synthetic{count}x{seed}")


def _random_telemetry(rng):
    return {f"telemetry.{k}": round(rng.random(), 3)
            for k in ("compute_utilization", "bandwidth_utilization", "memory_used_ratio") if rng.random() < 0.9}


def test_large_packs_are_split_and_agree_with_the_reference():
    pack = _synthetic_pack(300)
    assert len(compile_pack(pack)) >= 300 // RULESET_SIZE
    durable, reference = DurableEvaluator(pack), ReferenceEvaluator(pack)
    rng = random.Random(1)
    for _ in range(60):
        values = _random_telemetry(rng)
        assert durable.run(values) == reference.run(values), values


def test_sessions_are_cleaned_up_past_the_1024_limit():
    pack = _synthetic_pack(12, seed=3)
    durable = DurableEvaluator(pack)
    values = {"telemetry.compute_utilization": 0.5}
    for _ in range(1100):           # more than durable_rules' 1,024 live sessions per ruleset
        durable.run(values)
    assert durable.run(values) == ReferenceEvaluator(pack).run(values)


def test_evaluators_agree_on_random_facts(pack):
    """Random facts over the whole vocabulary: both evaluators give byte-identical advice."""
    rng = random.Random(20261202)
    vocabulary = load_vocabulary()
    for _ in range(150):
        document: dict = {}
        for spec in vocabulary.facts.values():
            if spec.derived or rng.random() < 0.35:
                continue
            section, name = spec.path.split(".")
            if spec.type == "ratio":
                value = round(rng.random(), 3)
            elif spec.type == "integer":
                value = rng.choice([1, 2, 4, 8, 32, 128, 512, 513, 4096])
            elif spec.type == "number":
                value = round(rng.uniform(0.5, 5000), 1)
            elif spec.type == "bool":
                value = rng.random() < 0.5
            elif spec.type == "enum":
                value = rng.choice(spec.values)
            elif spec.type == "list":
                value = rng.sample(spec.values, rng.randint(0, len(spec.values)))
            elif spec.type == "version":
                value = rng.choice(["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0"])
            else:
                value = rng.choice(["NVIDIA L4", "NVIDIA A100-SXM4-40GB", "Tesla T4", "something else"])
            document.setdefault(section, {})[name] = value
        facts = facts_from_document(document, "random")
        assert advise(facts, pack, "durable").to_json() == advise(facts, pack, "reference").to_json(), document
