"""Every rule's inline examples, on both evaluators: one collector, cases as data."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbopt.engine.pack.ir import node_to_data
from kbopt.engine.pack.loader import load_pack
from kbopt.kb.knowledge import seed_claims
from kbopt.kb.vocabulary import load_vocabulary

PACK = load_pack()
# Each example itself runs in the conformance corpus (test_conformance.py), on every evaluator.


def test_every_rule_has_a_firing_and_a_non_firing_example():
    lacking = [r.id for r in PACK.rules
               if True not in {e.fires for e in r.examples} or not {False, "unknown"} & {e.fires for e in r.examples}]
    assert lacking == []


def _only_asks_for_presence(rule) -> bool:
    """The condition holds whenever its facts are given: `known(f)`, or a bound the vocabulary
    already guarantees (e.g. `model.params_billion > 0`). Read from the IR, the backends' contract."""
    vocabulary = load_vocabulary()
    condition = node_to_data(rule.when)
    for leaf in condition["items"] if condition["node"] == "And" else [condition]:
        if leaf["node"] == "Known" and not leaf.get("negated"):
            continue
        if leaf["node"] != "Cmp" or leaf["left"]["node"] != "Fact" or leaf["right"]["node"] != "Const":
            return False
        spec, op, bound = vocabulary.get(leaf["left"]["path"]), leaf["op"], leaf["right"]["value"]
        if spec.min is None or not ((op == ">=" and spec.min >= bound) or
                                    (op == ">" and (spec.min > bound or (spec.min == bound and spec.exclusive_min)))):
            return False
    return True


def test_rules_without_a_decided_false_example_are_those_that_only_wait_on_facts():
    # Their condition only asks that facts be present, so they either fire or wait; every other
    # rule must show a case it decides false.
    only_unknown = sorted(r.id for r in PACK.rules if False not in {e.fires for e in r.examples})
    assert only_unknown == sorted(r.id for r in PACK.rules if _only_asks_for_presence(r))
    assert "D-WEIGHT-GIB" in only_unknown and "D-BOTTLENECK-CAPACITY" not in only_unknown


def test_every_seed_claim_is_cited_by_a_rule():
    cited = {m for r in PACK.rules for s in r.sources for m in re.findall(r"seed (K\d+\.\d+)", s)}
    assert set(seed_claims()) - cited == set()
    assert cited - set(seed_claims()) == set(), "a rule cites a claim the seed does not have"


def test_seed_claim_list_matches_the_seed_document():
    seed = Path(__file__).resolve().parents[2] / "shared" / "seed" / "knowledge.md"
    if not seed.exists():
        pytest.skip("the methodology document (../shared/seed/knowledge.md) is not beside this checkout")
    ids = set(re.findall(r"\[(K\d+\.\d+)\]", seed.read_text(encoding="utf-8")))
    assert ids == set(seed_claims())


def test_thresholds_the_seed_leaves_vague_are_named_parameters_with_reasons():
    by_id = PACK.by_id()
    for rule_id, name in [("D-VARIABLE-LENGTHS", "large_cv"), ("D-FLUCTUATING-LOAD", "fluctuation"),
                          ("D-SYMPTOM-QUEUE-TIMEOUTS", "timeout_noise")]:
        parameter = next(p for p in by_id[rule_id].parameters if p.name == name)
        assert len(parameter.why) > 40
