"""The durable_rules adapter's workarounds, each checked against the reference evaluator."""
from __future__ import annotations

import json
import random

import pytest

from kbopt.engine.advice.advisor import advise
from kbopt.engine.authoring.synthetic import random_telemetry, synthetic_pack
from kbopt.engine.evaluators import durable_available
from kbopt.engine.evaluators.durable import RULESET_SIZE, START_FACT, DurableEvaluator, FactKeys, compile_pack, dumps
from kbopt.engine.evaluators.reference import ReferenceEvaluator
from kbopt.engine.lang.nodes import facts_of
from kbopt.kb.facts import facts_from_document

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
    """Input and derived facts travel in one flat fact under short keys: a comparison of two facts
    is a reference within it ($m), never a join between facts."""
    keys = FactKeys(pack).key
    compiled = compile_pack(pack)
    rules = {name: d for ruleset in compiled for name, d in ruleset["rules"].items()}
    compute = rules["D-BOTTLENECK-COMPUTE#0"]["all"]
    assert len(compute) == 1
    tests = compute[0]["f"]["$and"]
    assert tests[0] == {"k": "i"}
    compute_key, bandwidth_key = keys["telemetry.compute_utilization"], keys["telemetry.bandwidth_utilization"]
    assert {"$gt": {compute_key: {"$m": bandwidth_key}}} in tests
    assert {"$ex": {compute_key: 1}} in tests and {"$ex": {bandwidth_key: 1}} in tests
    assert {"$eq": {keys["derived.capacity_binding"]: False}} in tests


def test_rulesets_run_after_every_ruleset_that_derives_what_they_read(pack):
    compiled = compile_pack(pack)
    levels = [ruleset["level"] for ruleset in compiled]
    assert levels == sorted(levels) and levels[-1] > 0
    level_of = {name.split("#")[0]: ruleset["level"] for ruleset in compiled for name in ruleset["rules"] if name != "marker"}
    for rule in pack.rules:
        for path in set(facts_of(rule.fire_condition)):
            for producer in pack.producers.get(path, ()):
                assert level_of[producer] < level_of[rule.id], (producer, rule.id)


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


def test_the_marker_rule_fires_once_a_session_and_never_for_an_evaluation(monkeypatch):
    """durable_rules frees a session's action context on delete_state, and only an action sets
    it: each session starts with the fact only the marker rule matches, and an evaluation's facts
    then start no action but their own rules', also where none matches."""
    pack = synthetic_pack(40, seed=11)
    durable, reference = DurableEvaluator(pack), ReferenceEvaluator(pack)
    durable._close()                  # sessions made afresh below, whatever ran before
    started: list[tuple[int, str, list[str]]] = []
    real = durable._assert

    def recording(handle: int, text: str) -> list[str]:
        names = real(handle, text)
        started.append((handle, text, names))
        return names
    monkeypatch.setattr(durable, "_assert", recording)
    cases = [{}, {"telemetry.compute_utilization": 0.0001}, {"telemetry.compute_utilization": 0.999},
             *(random_telemetry(random.Random(seed)) for seed in range(20))]
    for values in cases * 2:
        assert durable.run(values) == reference.run(values), values
    starts = [(handle, names) for handle, text, names in started if text == START_FACT]
    assert starts and all(names == ["marker"] for _, names in starts)
    assert len({handle for handle, _ in starts}) == len(starts)        # once a session
    assert {handle for handle, _ in starts} == {handle for handle, *_ in started}
    evaluations = [names for _, text, names in started if text != START_FACT]
    assert all("marker" not in names for names in evaluations)
    assert any(not names for names in evaluations) and any(names for names in evaluations)
    durable._close()                  # every session deleted, including those whose facts matched nothing
    assert durable.run(cases[3]) == reference.run(cases[3])


def _rule(rule_id: str, when: str, derive: str) -> str:
    return (f"id: {rule_id}\ntitle: a rule for the session test\nlayer: diagnosis\nwhen: {when}\nthen:\n  - derive: {{{derive}}}\n"
            "because: a rule for the session test\nsource: test\nexamples:\n"
            "  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n")


def test_sessions_are_clean_after_an_evaluation_that_failed():
    """Sessions are kept from one evaluation to the next and emptied by retracting: an evaluation
    that stops on an error must leave them empty too, or the same facts later match nothing."""
    from kbopt.engine.pack.loader import build_pack, load_rule_text
    from kbopt.errors import EvaluationError
    texts = [_rule("S-A", "telemetry.compute_utilization > 0.5", "derived.low_gpu_utilization: true"),
             _rule("S-B", "telemetry.compute_utilization > 0.6", "derived.low_gpu_utilization: false"),
             _rule("S-C", "derived.low_gpu_utilization", "derived.queue_timeouts: true")]
    pack = build_pack([load_rule_text(t, f"x/{i}.yaml", pack="x") for i, t in enumerate(texts)], "clean-after-error")
    durable, reference = DurableEvaluator(pack), ReferenceEvaluator(pack)
    for _ in range(3):
        with pytest.raises(EvaluationError):
            durable.run({"telemetry.compute_utilization": 0.7})
        for value in (0.55, 0.7 - 0.1, 0.2):
            assert durable.run({"telemetry.compute_utilization": value}) == reference.run({"telemetry.compute_utilization": value})


def test_several_rules_that_cannot_derive_are_said_alike_by_both_evaluators():
    """Where two fired rules cannot derive their facts, the evaluation stops at the first it runs:
    durable_rules runs rules by level, the reference in its schedule. Both say the reference's."""
    from kbopt.engine.pack.loader import build_pack, load_rule_text
    from kbopt.errors import EvaluationError

    def rule(index: int, when: str, path: str, expression: str):
        return load_rule_text(f"id: S-TWO-{index}\ntitle: two {index}\nlayer: diagnosis\nwhen: {when}\nthen:\n"
                              f"  - derive: {{{path}: '= {expression}'}}\nbecause: a rule that fails on purpose\nsource: test\n"
                              "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n",
                              f"two/s-two-{index}.yaml", pack="two")
    pack = build_pack([rule(0, "telemetry.power_watts >= 0.1", "derived.seq_len_cv", "telemetry.power_watts / telemetry.bandwidth_utilization"),
                       rule(1, "telemetry.compute_utilization > 0.1", "derived.weight_gib", "telemetry.power_watts * 1e308 * 10")], "two")
    both = {"telemetry.compute_utilization": 0.9, "telemetry.bandwidth_utilization": 0.0, "telemetry.power_watts": 0.5}
    said = []
    for evaluator in (DurableEvaluator(pack), ReferenceEvaluator(pack)):
        with pytest.raises(EvaluationError) as raised:
            evaluator.run(both)
        said.append(str(raised.value))
    assert said[0] == said[1]
    for one in ({**both, "telemetry.compute_utilization": 0.0}, {**both, "telemetry.bandwidth_utilization": 0.5}):
        with pytest.raises(EvaluationError) as raised:          # one rule fails: durable_rules' own error, the same
            DurableEvaluator(pack).run(one)
        with pytest.raises(EvaluationError) as expected:
            ReferenceEvaluator(pack).run(one)
        assert str(raised.value) == str(expected.value)
    assert DurableEvaluator(pack).run({"telemetry.power_watts": 0.0}) == ReferenceEvaluator(pack).run({"telemetry.power_watts": 0.0})


def test_an_input_that_names_a_derived_fact_gives_way_once_a_rule_derives_it():
    """Facts documents cannot set a derived fact, but the evaluators' own callers can: the input
    stands until a rule derives the fact, and rules that read it after see the derived value,
    on both evaluators (the final facts say the same)."""
    from kbopt.engine.pack.loader import build_pack, load_rule_text
    texts = [_rule("S-N-A", "derived.seq_len_cv > 0.5", "derived.low_gpu_utilization: false"),
             _rule("S-N-B", "derived.low_gpu_utilization", "derived.queue_timeouts: true")]
    pack = build_pack([load_rule_text(t, f"n/{i}.yaml", pack="n") for i, t in enumerate(texts)], "inputs-name-derived")
    for seq_len_cv in (0.7, 0.2):
        for low in (True, False):
            values = {"derived.seq_len_cv": seq_len_cv, "derived.low_gpu_utilization": low}
            result = DurableEvaluator(pack).run(values)
            assert result == ReferenceEvaluator(pack).run(values), values
            assert ("S-N-B" in result.fired) == (low and seq_len_cv <= 0.5), values


# GPUs whose name, vendor and compute capability agree, so that random documents are not
# refused as inconsistent hardware before any rule runs (that refusal has its own tests).
# Random documents over the whole vocabulary give byte-identical advice on both evaluators: the
# conformance corpus's random cases (test_conformance.py).


def test_fact_values_are_encoded_as_dumps_writes_them():
    from kbopt.engine.evaluators.durable import encode
    for value in (0.5, 2e-05, 1e20, 1e16, 1e22, -0.0, 5e-324, 3, -7, True, False, "1e-05", "ünïcode \"q\"", None, 5e-4):
        assert encode(value) == dumps(value), value
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValueError):
            encode(value)


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
