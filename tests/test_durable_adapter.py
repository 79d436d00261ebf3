"""The durable_rules adapter's workarounds, each checked against the reference evaluator."""
from __future__ import annotations

import json
import random

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.authoring.synthetic import random_telemetry, synthetic_pack
from kbopt.engine.evaluators import durable_available
from kbopt.engine.evaluators.durable import RULESET_SIZE, DurableEvaluator, compile_pack, dumps
from kbopt.engine.evaluators.reference import ReferenceEvaluator
from kbopt.errors import FactsError
from kbopt.kb.facts import facts_from_document
from kbopt.kb.vocabulary import load_vocabulary

pytestmark = pytest.mark.skipif(durable_available() is not None, reason="durable_rules does not import here")


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
    assert compute[0] == {"i": {"$and": [{"k": "i"}, {"$ex": {"telemetry.compute_utilization": 1}},
                                         {"$ex": {"telemetry.bandwidth_utilization": 1}},
                                         {"$gt": {"telemetry.compute_utilization": {"$m": "telemetry.bandwidth_utilization"}}}]}}
    assert {"d2": {"$and": [{"k": "d"}, {"$ex": {"derived.capacity_binding": 1}},
                            {"$eq": {"derived.capacity_binding": False}}]}} in compute[1:]


def test_large_packs_are_split_and_agree_with_the_reference():
    pack = synthetic_pack(300)
    assert len(compile_pack(pack)) >= 300 // RULESET_SIZE
    durable, reference = DurableEvaluator(pack), ReferenceEvaluator(pack)
    rng = random.Random(1)
    extremes = [{f"telemetry.{k}": x for k in ("compute_utilization", "bandwidth_utilization", "memory_used_ratio")}
                for x in (0.999, 0.0001)]      # a fact meeting nearly every condition of its ruleset
    for values in extremes + [random_telemetry(rng) for _ in range(60)]:
        assert durable.run(values) == reference.run(values), values


def test_sessions_are_cleaned_up_past_the_1024_limit():
    pack = synthetic_pack(12, seed=3)
    durable = DurableEvaluator(pack)
    values = {"telemetry.compute_utilization": 0.5}
    for _ in range(1100):           # more than durable_rules' 1,024 live sessions per ruleset
        durable.run(values)
    assert durable.run(values) == ReferenceEvaluator(pack).run(values)


def test_evaluators_agree_on_random_facts(pack):
    """Random facts over the whole vocabulary: both evaluators give byte-identical advice."""
    rng = random.Random(20261202)
    vocabulary = load_vocabulary()
    checked = 0
    for _ in range(300):
        document: dict = {}
        for spec in vocabulary.facts.values():
            if spec.derived or spec.quality_of or rng.random() < 0.35:
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
        workload = document.get("workload", {})
        for low, high in (("seq_len_mean", "max_seq_len"), ("seq_len_p99", "max_seq_len"),
                          ("concurrency_mean", "concurrency_peak"), ("arrival_rate_per_s", "arrival_rate_peak_per_s")):
            if low in workload and high in workload and workload[low] > workload[high]:
                workload[low], workload[high] = workload[high], workload[low]
        try:
            facts = facts_from_document(document, "random")
        except FactsError:
            continue        # e.g. a mean above the maximum: refused before any rule runs
        checked += 1
        assert advise(facts, pack, "durable").to_json() == advise(facts, pack, "reference").to_json(), document
    assert checked >= 100


def test_fact_serialization_takes_the_careful_path_only_when_needed():
    from kbopt.engine.evaluators.durable import dumps_fact
    assert dumps_fact({"a": 0.5, "b": "1e-05"}, [0.5, "1e-05"]) == '{"a":0.5,"b":"1e-05"}'
    assert dumps_fact({"a": 2e-05}, [2e-05]) == '{"a":2.0e-05}'


_SHAPE = ("hardware: {gpu_name: NVIDIA L4, gpu_count: 1}, model: {params_billion: 8, weight_dtype: bf16, num_layers: 32, "
          "num_kv_heads: 8, head_dim: 128}")
CROSS_FACT_RULE = f"""id: X-CROSS-FACT
title: KV pool smaller than the peak concurrency
layer: diagnosis
when: derived.max_batch_kv < workload.concurrency_peak
then:
  - warn: The KV pool holds fewer sequences than the peak concurrency.
because: KV holds {{derived.max_batch_kv}} against a peak of {{workload.concurrency_peak}}.
source: seed K2.4
examples:
  - {{name: small pool, facts: {{{_SHAPE}, workload: {{concurrency_mean: 32, concurrency_peak: 500, prompt_len_mean: 800, output_len_mean: 200}}}},
     fires: true}}
  - {{name: big pool, facts: {{{_SHAPE}, workload: {{concurrency_mean: 3, concurrency_peak: 4, prompt_len_mean: 800, output_len_mean: 200}}}},
     fires: false}}
"""


def test_a_derived_fact_compared_with_an_input_fact_over_many_sessions(tmp_path):
    """durable_rules' core segfaulted on a join between a derived and an input fact once its
    ruleset had seen earlier sessions; the comparison is now confirmed in Python, on both
    evaluators alike. A crash shows as a failed test (the run is a child process), not as a dead
    test runner."""
    import subprocess
    import sys
    pack = tmp_path / "pack" / "diagnosis"
    pack.mkdir(parents=True)
    (pack / "x-cross-fact.yaml").write_text(CROSS_FACT_RULE)
    # `rules test` runs every example of the pack, hundreds of sessions on the same rulesets: where
    # the core crashed (deterministically, at the second session that reached the join).
    result = subprocess.run([sys.executable, "-m", "kbopt", "rules", "test", str(pack.parent)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and ", 0 failed" in result.stdout, (result.returncode, result.stderr[-2000:])
