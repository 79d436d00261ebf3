"""Explaining rules that were not evaluated: the inputs each one waits on, at any pack size."""
from __future__ import annotations

import json
import random
from pathlib import Path

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.explain import FinalFacts
from kbopt.engine.authoring.synthetic import FIELDS, synthetic_pack
from kbopt.engine.evaluators.reference import ReferenceEvaluator
from kbopt.engine.lang.logic import MISSING, UNKNOWN, evaluate, undecided_by
from kbopt.engine.pack.loader import build_pack, load_rule_text
from kbopt.kb.facts import facts_from_document

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _naive_missing(final: FinalFacts, rule, seen=frozenset()) -> list[str]:
    """The walk as first written: recurse through every undecided producer (exponential)."""
    out = []
    for path in dict.fromkeys(undecided_by(rule.fire_condition, final.lookup)):
        status, _ = final.lookup(path)
        if status == MISSING:
            out.append(path)
        if status != UNKNOWN:
            continue
        for producer in final.pack.producers.get(path, ()):
            if producer not in seen and evaluate(final.rules[producer].fire_condition, final.lookup) is None:
                out.extend(_naive_missing(final, final.rules[producer], seen | {rule.id}))
    return sorted(set(out))


def _final(pack, values):
    return FinalFacts(pack, values, ReferenceEvaluator(pack).run(values))


def _chain_rule(index: int, reads: str, derives: str, field: str) -> str:
    return (f"id: S-CHAIN-{index:03d}\ntitle: chain {index}\nlayer: diagnosis\n"
            f"when: {reads} and telemetry.{field} > 0.5\nthen:\n  - derive: {{{derives}: true}}\n"
            "because: chained rule for the explanation walk\nsource: test\n"
            "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n")


CYCLED = ("derived.low_gpu_utilization", "derived.queue_timeouts", "derived.fluctuating_load")


def _random_cyclic_pack(rng: random.Random, name: str):
    """3 to 9 rules, each reading one of CYCLED and deriving one: cycles are common."""
    rules = [load_rule_text(_chain_rule(i, rng.choice(CYCLED), rng.choice(CYCLED), rng.choice(FIELDS)),
                            f"chain/s-chain-{i:03d}.yaml", pack="chain") for i in range(rng.randint(3, 9))]
    return build_pack(rules, name)


def test_memoized_walk_matches_the_naive_one_on_cyclic_packs():
    """Random packs whose rules read and derive the same few facts (cycles included)."""
    rng = random.Random(5)
    compared = 0
    for trial in range(40):
        pack = _random_cyclic_pack(rng, f"chain{trial}")
        values = {f"telemetry.{f}": 0.9 for f in FIELDS if rng.random() < 0.4}
        final = _final(pack, values)
        listed = {item.rule: item.missing for item in _final(pack, values).not_evaluated()}   # the advice's walk
        for rule in pack.rules:
            if rule.id not in final.fired and evaluate(rule.fire_condition, final.lookup) is None:
                assert list(listed.pop(rule.id)) == _naive_missing(final, rule), (trial, rule.id)
                compared += 1
        assert not listed
    assert compared > 40


def _statuses_to_a_fix_point(final: FinalFacts) -> dict[str, str]:
    """The derived facts' statuses as first computed: every unproduced fact checked again, in
    name order, until none changes (a fact is absent once each producer that did not fire is false)."""
    from kbopt.engine.lang.logic import ABSENT
    status = {path: UNKNOWN for path in sorted(final.pack.producers) if path not in final.derived}

    def lookup(path: str):
        if path in final.known:
            return "known", final.known[path]
        return (status.get(path, ABSENT), None) if path.startswith("derived.") else (MISSING, None)
    changed = True
    while changed:
        changed = False
        for path in list(status):
            if status[path] == UNKNOWN and all(evaluate(final.rules[r].fire_condition, lookup) is False
                                               for r in final.pack.producers[path] if r not in final.fired):
                status[path], changed = ABSENT, True
    return status


def test_statuses_in_dependency_order_are_those_of_the_fix_point(pack):
    """FinalFacts settles which derived facts are absent in one pass in dependency order, going
    back only for readers of a fact that turned absent later (a cycle): the same statuses as
    checking every fact again until none changes, on packs whose rules feed each other in
    cycles, the chained synthetic pack and the built-in one."""
    rng = random.Random(23)
    cases = []
    for trial in range(60):
        pack = _random_cyclic_pack(rng, f"absent{trial}")
        for _ in range(4):
            values = {f"telemetry.{f}": rng.choice([0.2, 0.9]) for f in FIELDS if rng.random() < 0.6}
            values.update({path: rng.random() < 0.5 for path in CYCLED if rng.random() < 0.2})
            cases.append((pack, values))
    from kbopt.kb.facts import load_facts
    for path in sorted(EXAMPLES.glob("*.json")):
        values = load_facts(path).engine_values(pack.kb.vocabulary)
        cases += [(pack, values), (pack, {k: v for k, v in values.items() if not k.startswith("telemetry.")})]
    synthetic = synthetic_pack(210)
    cases += [(synthetic, {f"telemetry.{f}": round(rng.random(), 3) for f in FIELDS if rng.random() < 0.7})
              for _ in range(20)]
    absent = 0
    for built, values in cases:
        final = _final(built, values)
        expected = _statuses_to_a_fix_point(final)
        assert final.status == expected, (built.version, values)
        absent += sum(s == "absent" for s in expected.values())
    assert absent > 100


def test_memoized_walk_matches_the_naive_one_on_the_synthetic_pack():
    pack = synthetic_pack(105)       # three rules that read the fact they derive: the naive walk still ends
    values = {"telemetry.compute_utilization": 0.2}
    final = _final(pack, values)
    waiting = [r for r in pack.rules if evaluate(r.fire_condition, final.lookup) is None]
    assert waiting
    listed = {item.rule: item.missing for item in _final(pack, values).not_evaluated()}
    for rule in waiting:
        assert list(listed[rule.id]) == _naive_missing(final, rule)


ATTEMPTS = 80     # fact sets a pack: enough to reuse kept walks and to make new ones (150 took 22 s of the suite)


def test_a_kept_walk_is_the_walk_it_stands_for(pack):
    """not_evaluated keeps each walk per pack under the undecided rules and the facts each lacks
    itself. Over fact sets that share those (kept walks reused) and differ in them, on the
    built-in pack and a chained one with self-feeding rules, every answer is a walk made afresh."""
    rng = random.Random(11)
    examples = [facts_from_document(json.loads(path.read_text()), path.name).engine_values(pack.kb.vocabulary)
                for path in sorted(EXAMPLES.glob("*.json"))]
    chained = synthetic_pack(105)
    for tried in (pack, chained):
        tried.runtime.not_evaluated_walks = None
        for _ in range(ATTEMPTS):
            if tried is pack:
                values = {path: value for path, value in rng.choice(examples).items() if rng.random() > 0.05}
            else:
                values = {f"telemetry.{f}": rng.choice([0.1, 0.9]) for f in FIELDS if rng.random() < 0.5}
            got = _final(tried, values).not_evaluated()
            fresh = _final(tried, values)
            assert [item.missing for item in got] == list(fresh._walk([tried.by_id()[item.rule] for item in got]))
        walks = tried.runtime.not_evaluated_walks
        assert walks is not None
        assert 1 < len(walks.results) < ATTEMPTS, len(walks.results)      # walks were kept, and reused


def test_long_chains_are_explained():
    """420 chained rules (12 self-feeding producers): the naive walk would run for hours."""
    pack = synthetic_pack(420)
    facts = facts_from_document({"model": {"params_billion": 8}}, "no telemetry")
    advice = advise(facts, pack, "reference")
    missing = {item.rule: item.missing for item in advice.not_evaluated}
    chained = [r.id for r in pack.rules if "derived.low_gpu_utilization" in r.when_text]
    assert len(chained) == 60
    for rule_id in chained:
        assert missing[rule_id] == tuple(sorted(f"telemetry.{f}" for f in FIELDS))
    assert len(missing) == len(pack.rules)


def test_two_rules_requiring_the_same_thing_of_one_strategy(pack):
    """Two `require` edges between the same pair of strategies once crashed the explanation."""
    text = ("id: S-REQUIRE-{n}\ntitle: weight layout needs quantization ({n})\nlayer: compute\n"
            "when: telemetry.compute_utilization > 0.5\nthen:\n"
            "  - require: {{strategy: weight_layout, needs: quantization}}\n"
            "because: weight layout needs quantization in this test\nsource: test\n"
            "examples:\n  - {{name: a, facts: {{}}, fires: true}}\n  - {{name: b, facts: {{}}, fires: false}}\n")
    extra = [load_rule_text(text.format(n=n), f"test/compute/s-require-{n}.yaml", pack="test") for n in (1, 2)]
    both = build_pack(list(pack.rules) + extra, "require-twice")
    facts = facts_from_document({"hardware": {"gpu_name": "NVIDIA H100 80GB HBM3"},
                                 "telemetry": {"compute_utilization": 0.95, "bandwidth_utilization": 0.3,
                                               "memory_used_ratio": 0.5},
                                 "workload": {"engine": "other"}}, "require")
    advice = advise(facts, both, "reference")
    requires = [e for e in advice.graph if e.kind == "requires" and e.source == "weight_layout"]
    assert [(e.target, e.because) for e in requires] == [
        ("quantization[fp16]", ("S-REQUIRE-1",)), ("quantization[fp16]", ("S-REQUIRE-2",))]
    assert {s.key for s in advice.strategies} >= {"weight_layout", "quantization[fp16]"}


def test_compiled_conditions_agree_with_the_tree_walk(pack):
    """The evaluators' closures give evaluate()'s Kleene value for every built-in condition, read
    from any lookup and from the dict of known facts while chaining."""
    from kbopt.engine.evaluators.closures import compile_chaining_check, compile_condition
    from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, evaluate
    from kbopt.engine.lang.nodes import facts_of

    rng = random.Random(3)
    conditions = [rule.fire_condition for rule in pack.rules] + [rule.when for rule in pack.rules]
    checked = chained = 0
    for condition in conditions:
        paths = sorted(set(facts_of(condition)))
        check = compile_condition(condition)
        chaining = compile_chaining_check(condition)
        for _ in range(40):
            table = {}
            for path in paths:
                status = rng.choice([KNOWN, KNOWN, KNOWN, MISSING, ABSENT, UNKNOWN])
                value = rng.choice([0, 0.2, 0.5, 0.95, 1, 8.9, 64, 4096, True, False, "fp8", "vllm", "compute_capacity",
                                    ["fp8", "int8"], []]) if status == KNOWN else None
                table[path] = (status, value)

            def lookup(path, table=table):
                return table[path]
            try:
                expected = evaluate(condition, lookup)
            except TypeError:
                continue            # a value of the wrong type for its fact: the tree walk fails too
            assert check(lookup) == expected, (condition, table)
            if UNKNOWN not in (status for status, _ in table.values()):    # chaining knows no unknown facts
                known = {path: value for path, (status, value) in table.items() if status == KNOWN}
                chaining_status = {path: status for path, (status, _) in table.items()
                                   if status != KNOWN and (status == ABSENT) != path.startswith("derived.")}
                if not chaining_status:     # absent exactly where derived: the chaining lookup's reading
                    assert chaining(known) == expected, (condition, table)
                    chained += 1
            checked += 1
    assert checked > 2000 and chained > 200


def test_compiled_values_agree_with_the_tree_walk(pack):
    """A compiled derive or parameter expression returns value_of()'s value, or raises the same
    Missing (same paths, same order) or the same error, for every built-in expression; its
    compiled trace is the tree walk's (what the estimates' confidence rests on)."""
    from kbopt.engine.advice.estimates import compile_trace, trace
    from kbopt.engine.evaluators.closures import compile_value
    from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Missing, value_of
    from kbopt.engine.lang.nodes import facts_of
    from kbopt.engine.pack.rule import Derive, Recommend

    def outcome(compute, lookup):
        try:
            return "value", repr(compute(lookup))    # repr: a NaN equals itself
        except Missing as missing:
            return "missing", missing.paths
        except (ArithmeticError, ValueError, TypeError, KeyError) as error:
            return "error", type(error).__name__

    rng = random.Random(5)
    vocabulary = pack.kb.vocabulary

    def typed_value(path):
        spec = vocabulary.get(path)
        if spec.type == "bool":
            return rng.choice([True, False])
        if spec.type == "enum":
            return rng.choice(spec.values)
        if spec.is_numeric:
            return rng.choice([0, 0.5, 1, 2, 8.9, 64, 4096, 1e300])
        return rng.choice([[], ["fp8"], ["fp8", "int8"]])
    expressions = [c.value for rule in pack.rules for c in rule.then if isinstance(c, Derive)]
    expressions += [node for rule in pack.rules for c in rule.then if isinstance(c, Recommend) for _, node in c.params]
    kinds = set()
    for node in expressions:
        paths = sorted(set(facts_of(node)))
        compiled, traced = compile_value(node), compile_trace(node)
        for _ in range(40):
            table = {}
            for path in paths:
                status = rng.choice([KNOWN] * 6 + [MISSING, ABSENT, UNKNOWN])
                table[path] = (status, typed_value(path) if status == KNOWN else None)

            def lookup(path, table=table):
                return table[path]
            expected = outcome(lambda lk, node=node: value_of(node, lk), lookup)
            assert outcome(compiled, lookup) == expected, (node, table)
            ours, walked = traced(lookup), trace(node, lookup)
            assert (list(ours.read.items()), ours.fell_back, ours.parameters) == \
                (list(walked.read.items()), walked.fell_back, walked.parameters), (node, table)     # in order
            kinds.add(expected[0])
    assert len(expressions) > 100 and kinds >= {"value", "missing"}


def test_a_rendered_template_reads_as_render_with_values(pack):
    """The firing's `when_values` text, pre-rendered per rule, is render()'s for any values."""
    from kbopt.engine.lang.nodes import facts_of
    from kbopt.engine.lang.text import render, render_template
    rng = random.Random(8)
    for rule in pack.rules:
        filled = render_template(rule.when)
        paths = sorted(set(facts_of(rule.when)))
        for _ in range(5):
            values = {p: rng.choice([0.5, 3, True, "fp8", ["a", "b"], 1e7]) for p in paths if rng.random() < 0.7}
            assert filled(values) == render(rule.when, values)


def test_compiled_witnesses_agree_with_the_tree_walk(pack):
    """A firing's facts and checks, from witnesses compiled per rule, are those of the tree walk
    (logic.witnesses: the first true branch of each or) on every built-in rule."""
    from kbopt.engine.advice.explain import Check, _check, _compiled_witnesses, witness_of, witnesses_on
    from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, evaluate, witnesses
    from kbopt.engine.lang.nodes import facts_of

    rng = random.Random(9)
    compared = 0
    for rule in pack.rules:
        compiled = _compiled_witnesses(rule.when)
        paths = sorted(set(facts_of(rule.when)))
        for _ in range(60):
            table = {p: (KNOWN, rng.choice([0, 0.5, 0.95, 1, 64, 4096, True, False, "fp8", "vllm", ["fp8"]]))
                     if rng.random() < 0.8 else (rng.choice([MISSING, ABSENT]), None) for p in paths}

            def lookup(path, table=table):
                return table[path]
            try:
                if evaluate(rule.when, lookup) is not True:
                    continue
            except TypeError:
                continue
            facts, checks = {}, []
            for leaf in witnesses(rule.when, lookup):
                facts.update((p, table[p][1]) for p in facts_of(leaf) if table[p][0] == KNOWN)
                checks.append(_check(leaf, lookup))
            ours: dict = {}
            assert [make(lookup, ours) for make in witnesses_on(compiled, lookup)] == checks, rule.id
            assert list(ours.items()) == list(facts.items()), rule.id
            # What FinalFacts.witness returns, comparisons with a literal read inline.
            known = {p: value for p, (status, value) in table.items() if status == KNOWN}
            got_facts, got_checks = witness_of(compiled, known, lookup, None)
            assert list(got_facts.items()) == list(facts.items()) and got_checks == tuple(checks), rule.id
            assert all(type(check) is Check for check in got_checks), rule.id
            compared += 1
    assert compared > 100


def test_each_witness_leaf_kind_is_checked_as_the_tree_walk_checks_it():
    """A witness leaf's Check, made by the maker compiled for its kind, is the one `_check`
    writes, for every kind and negation (the built-in rules use only some of them), with the
    leaf's facts noted where known."""
    from kbopt.engine.advice.explain import _check, _witness_maker
    from kbopt.engine.lang.logic import KNOWN, MISSING
    from kbopt.engine.lang.nodes import And, Cmp, Const, Contains, Fact, Known, Not, OneOf, Or, facts_of

    gpu, dtype, used = Fact("hardware.gpu_count"), Fact("model.weight_dtype"), Fact("telemetry.compute_utilization")
    allowed = Fact("constraints.allowed_precisions")
    leaves = [Cmp(">", used, Const(0.5, "busy")), Cmp("<", used, Fact("telemetry.bandwidth_utilization")),
              OneOf(dtype, ("bf16", "fp16")), OneOf(dtype, ("bf16",), negated=True),
              Contains(allowed, "fp8"), Contains(allowed, "fp8", negated=True),
              Known(gpu), Known(gpu, negated=True),
              Not(Cmp(">", used, Const(0.5))), Not(OneOf(dtype, ("fp8",))), Not(Known(gpu)),
              Not(And((Cmp(">", used, Const(0.9)), Known(gpu)))), Not(Or((Known(dtype), Known(gpu))))]
    tables = [{"hardware.gpu_count": 2, "model.weight_dtype": "bf16", "telemetry.compute_utilization": 0.7,
               "telemetry.bandwidth_utilization": 0.9, "constraints.allowed_precisions": ["fp8"]},
              {"model.weight_dtype": "fp8", "telemetry.compute_utilization": 0.2}]
    for table in tables:
        def lookup(path, table=table):
            return (KNOWN, table[path]) if path in table else (MISSING, None)
        for leaf in leaves:
            noted: dict = {}
            assert _witness_maker(leaf)(lookup, noted) == _check(leaf, lookup), leaf
            assert noted == {path: table[path] for path in dict.fromkeys(facts_of(leaf)) if path in table}, leaf


def _chained(pack, values):
    """(fired, derived) of one reference evaluation, or the error it raised."""
    from kbopt.engine.evaluators.reference import ReferenceEvaluator
    from kbopt.errors import EvaluationError
    try:
        result = ReferenceEvaluator(pack).run(values)
    except EvaluationError as error:
        return str(error)
    return result.fired, result.derived


def _durable(pack, values):
    """(fired, derived) of one durable_rules evaluation, or the error it raised."""
    from kbopt.engine.evaluators.durable import DurableEvaluator
    from kbopt.errors import EvaluationError
    try:
        result = DurableEvaluator(pack).run(values)
    except EvaluationError as error:
        return str(error)
    return result.fired, result.derived


def _same_both_ways(pack, values):
    """The reference's chain and durable_rules' evaluation alike: the same firings, values, errors."""
    from kbopt.engine.evaluators import durable_available
    reference = _chained(pack, values)
    if durable_available() is None:
        assert _durable(pack, values) == reference, str(values)[:300]
    return reference


def test_an_evaluation_s_result_credits_each_fact_to_its_first_rule(pack):
    """finish keeps, per set of fired rules, which rule each derived fact is credited to: over
    the examples and variations of them (sets fired again, with other values), the result is
    the one worked out afresh: fired rules in pack order, each fact with its value and the
    first fired rule in pack order that derives it."""
    from kbopt.engine.evaluators.derivation import DerivedFacts, finish
    from kbopt.engine.evaluators.reference import make_chain
    from kbopt.errors import EvaluationError
    pack.runtime.finish_plans = None
    rng = random.Random(3)
    examples = [facts_from_document(json.loads(path.read_text()), path.name).engine_values(pack.kb.vocabulary)
                for path in sorted(EXAMPLES.glob("*.json"))]
    chain = make_chain(pack)
    compared = 0
    for _ in range(200):
        values = {path: (value * rng.choice([0.5, 1, 2]) if type(value) is float else value)
                  for path, value in rng.choice(examples).items() if rng.random() > 0.05}
        derived, fired = DerivedFacts(values, pack), set()
        try:
            chain.run(derived, fired)
        except EvaluationError:
            continue
        order = sorted(fired, key=pack.order.__getitem__)
        expected = {}
        for rule_id in order:
            for path in pack.by_id()[rule_id].derives:
                if path not in expected and path in derived.values:
                    expected[path] = (derived.values[path][0], rule_id)
        result = finish(pack, fired, derived)
        assert result.fired == tuple(order)
        assert result.derived == expected          # in no particular order
        compared += 1
    plans = pack.runtime.finish_plans
    assert plans is not None
    assert compared > 150 and 0 < len(plans.results) < compared      # plans were kept, and reused


def test_both_evaluators_fire_and_derive_alike(pack):
    """The reference evaluator (its schedule, each rule checked in turn) and durable_rules' Rete
    network give the same firings, values and errors on the examples and random variations of
    them, the chained synthetic pack, packs whose rules feed each other in cycles, and rules that
    go wrong on purpose."""
    from pathlib import Path

    from kbopt.engine.evaluators.reference import make_chain
    from kbopt.kb.facts import load_facts
    rng = random.Random(11)
    cases = []
    for path in sorted((Path(__file__).parent.parent / "examples").glob("*.json")):
        values = load_facts(path).engine_values(pack.kb.vocabulary)
        cases.append(values)
        for _ in range(8):      # facts dropped, numbers scaled (zero included: divisions by zero, coalesce)
            varied = {}
            for name, value in values.items():
                if rng.random() < 0.15:
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.3:
                    value = type(value)(value * rng.choice([0, 0.5, 2, 1000]))
                varied[name] = value
            cases.append(varied)
    outcomes = [_same_both_ways(pack, values) for values in cases]
    assert len(cases) > 100 and len(set(map(str, outcomes))) > 50
    synthetic = synthetic_pack(300)
    for _ in range(40):
        _same_both_ways(synthetic, {f"telemetry.{f}": round(rng.random(), 3) for f in FIELDS if rng.random() < 0.8})
    cycles = 0
    for trial in range(30):
        cyclic = _random_cyclic_pack(rng, f"cycle{trial}")
        cycles += any(len(component) > 1 for component in make_chain(cyclic).schedule)
        for _ in range(5):
            values = {f"telemetry.{f}": 0.9 for f in FIELDS if rng.random() < 0.6}
            values.update({path: True for path in CYCLED if rng.random() < 0.2})
            _same_both_ways(cyclic, values)
    assert cycles > 10
    # Errors: a value that is not finite, and two rules deriving different values for one fact.
    def rule(index: int, when: str, derive: str) -> str:
        return load_rule_text(f"id: S-ERR-{index}\ntitle: error {index}\nlayer: diagnosis\nwhen: {when}\nthen:\n"
                              f"  - derive: {{derived.arrival_fluctuation: '= {derive}'}}\nbecause: a rule that goes wrong on purpose\nsource: test\n"
                              "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n",
                              f"err/s-err-{index}.yaml", pack="err")
    broken = build_pack([rule(1, f"telemetry.{FIELDS[0]} > 0.5", f"telemetry.{FIELDS[0]} * 1e308 * 10"),
                         rule(2, f"telemetry.{FIELDS[1]} > 0.5", f"telemetry.{FIELDS[1]} * 2"),
                         rule(3, f"telemetry.{FIELDS[2]} > 0.5", f"telemetry.{FIELDS[2]} * 3")], "errors")
    said = [_same_both_ways(broken, {f"telemetry.{FIELDS[i]}": 0.9 for i in on}) for on in ([0], [1, 2], [1])]
    assert sum("not a finite number" in str(o) for o in said) == 1 and sum("derive different values" in str(o) for o in said) == 1
    # A rule whose expressions read facts it derives itself: each sees those derived before it.
    def reading_own(index: int, *derives: str) -> str:
        return load_rule_text(f"id: S-OWN-{index}\ntitle: own {index}\nlayer: diagnosis\nwhen: telemetry.{FIELDS[0]} > 0.5\nthen:\n"
                              + "".join(f"  - derive: {{{d}}}\n" for d in derives)
                              + "because: a rule that reads what it derives\nsource: test\n"
                              "examples:\n  - {name: a, facts: {}, fires: true}\n  - {name: b, facts: {}, fires: false}\n",
                              f"own/s-own-{index}.yaml", pack="own")
    later = build_pack([reading_own(1, "derived.seq_len_cv: '= coalesce(derived.weight_gib, 1) * 2'", "derived.weight_gib: '= 1.5'",
                                    f"derived.arrival_fluctuation: '= coalesce(telemetry.{FIELDS[0]} / telemetry.{FIELDS[1]}, 5)'")],
                       "reads-later")
    itself = build_pack([reading_own(2, "derived.seq_len_cv: '= coalesce(derived.seq_len_cv, 1) * 2'",
                                     f"derived.weight_gib: '= telemetry.{FIELDS[0]} * 1e308 * 10'")], "reads-itself")
    assert _same_both_ways(later, {f"telemetry.{FIELDS[0]}": 0.9, f"telemetry.{FIELDS[1]}": 0.0})[1] == {
        "derived.seq_len_cv": (2, "S-OWN-1"), "derived.weight_gib": (1.5, "S-OWN-1"), "derived.arrival_fluctuation": (5, "S-OWN-1")}
    assert "derived.weight_gib = inf: not a finite number" in _same_both_ways(itself, {f"telemetry.{FIELDS[0]}": 0.9})


def test_compiled_forms_of_empty_and_or():
    """An `and` or `or` of no items (built in code; no rule text parses to one) is true or false
    in every compiled form, as in the tree walk."""
    from kbopt.engine.evaluators.closures import compile_chaining_check, compile_condition
    from kbopt.engine.lang.logic import MISSING, evaluate
    from kbopt.engine.lang.nodes import And, Cmp, Const, Fact, Not, Or

    leaf = Cmp(">", Fact("telemetry.compute_utilization"), Const(0.5))
    for node in (And(()), Or(()), Not(Or(())), And((Or(()), leaf)), Or((And(()), leaf)), And((leaf, Not(And(()))))):
        for known in ({}, {"telemetry.compute_utilization": 0.9}):
            def lookup(path, known=known):
                return ("known", known[path]) if path in known else (MISSING, None)
            expected = evaluate(node, lookup)
            assert compile_condition(node)(lookup) == expected, node
            assert compile_chaining_check(node)(known) == expected, node


def test_a_derived_value_s_quick_type_test_accepts_only_what_value_problem_accepts(pack):
    """conclude() tests a derived value's type quickly (Acceptance.test) and asks value_problem
    only when that fails: it accepts only what value_problem accepts without a word; a NaN, an
    infinity, a bool as a number, an int past 2^53 or a text outside an enum go to value_problem,
    which says why."""
    from kbopt.engine.evaluators.closures import Acceptance
    from kbopt.engine.evaluators.derivation import value_problem
    from kbopt.engine.lang.parse import MAX_EXACT

    vocabulary = pack.kb.vocabulary
    facts = {kind: next(path for path, spec in vocabulary.facts.items() if spec.derived and test(spec))
             for kind, test in (("bool", lambda s: s.type == "bool"), ("enum", lambda s: s.type == "enum"),
                                ("number", lambda s: s.is_numeric))}
    values = [True, False, 0, 1, -3, 1.5, -0.0, float("nan"), float("inf"), -float("inf"), MAX_EXACT, MAX_EXACT + 1,
              -MAX_EXACT - 1, 2.0 ** 60, "", "memory_capacity", "fp8", None, [], [1], {"a": 1}]
    for kind, path in facts.items():
        spec = vocabulary.facts[path]
        acceptance = Acceptance(kind, frozenset(spec.values) if kind == "enum" else frozenset())
        test = acceptance.test()
        accepted = 0
        for value in values + list(spec.values or ()):
            if test(value):
                accepted += 1
                assert value_problem(vocabulary, path, value) is None, (kind, value)
        assert accepted >= 2, kind
    nothing = Acceptance("nothing")
    assert not any(nothing.test()(value) for value in values)


def test_a_kept_result_is_kept_from_its_key_s_second_time_and_within_its_bound():
    """engine/pack/kept.py: a key offered once costs a hash and keeps nothing; offered again, its
    result is kept; past `most` results all are let go, and so are the seen keys past 4 x most."""
    from kbopt.engine.pack.kept import Kept
    kept: Kept[str, int] = Kept(3)
    kept.offer("a", 1)
    assert kept.get("a") is None
    kept.offer("a", 1)
    assert kept.get("a") == 1
    for key in "bcd":
        kept.offer(key, 2)
        kept.offer(key, 2)
    assert len(kept.results) <= 3 and kept.get("d") == 2
    kept.offer("e", 5)
    for index in range(12):
        kept.offer(f"x{index}", index)
    kept.offer("e", 5)             # the seen keys were let go at 12: "e" is new again
    assert kept.get("e") is None
    kept.offer("e", 5)
    assert kept.get("e") == 5


def _naive_undecided_by(node, lookup):
    """undecided_by as first written: each node evaluated again at every level of the walk."""
    from kbopt.engine.lang.logic import MISSING, UNKNOWN, evaluate
    from kbopt.engine.lang.nodes import And, Not, Or, facts_of
    if evaluate(node, lookup) is not None:
        return []
    if isinstance(node, (And, Or)):
        return [p for item in node.items for p in _naive_undecided_by(item, lookup)]
    if isinstance(node, Not):
        return _naive_undecided_by(node.item, lookup)
    return [p for p in facts_of(node) if lookup(p)[0] in (MISSING, UNKNOWN)]


def _naive_alternatives(node, lookup):
    """alternatives as first written (the definition the one-walk version must keep)."""
    from kbopt.engine.lang.logic import MOST_ALTERNATIVES, evaluate
    from kbopt.engine.lang.nodes import And, Not, Or
    if evaluate(node, lookup) is not None:
        return []
    if isinstance(node, Or):
        ways = [way for item in node.items for way in _naive_alternatives(item, lookup)]
    elif isinstance(node, And):
        ways = [frozenset()]
        for item in node.items:
            parts = _naive_alternatives(item, lookup)
            if parts:
                ways = [way | part for way in ways for part in parts]
            if len(ways) > MOST_ALTERNATIVES:
                break
    elif isinstance(node, Not):
        ways = _naive_alternatives(node.item, lookup)
    else:
        ways = [frozenset(_naive_undecided_by(node, lookup))]
    if len(ways) > MOST_ALTERNATIVES:
        return [frozenset(_naive_undecided_by(node, lookup))]
    unique = list(dict.fromkeys(ways))
    return [way for way in unique if not any(other < way for other in unique)]


def test_undecided_facts_and_alternatives_in_one_walk_are_those_of_the_definition(pack):
    """undecided_by and alternatives walk a condition once (each node evaluated once, where the
    definition evaluated every subtree again at each level, quadratic in its depth): on every
    built-in condition and random statuses, the same facts in the same order, and the same ways."""
    from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, alternatives, undecided_by
    from kbopt.engine.lang.nodes import facts_of
    rng = random.Random(7)
    compared = undecided = 0
    for condition in [rule.fire_condition for rule in pack.rules] + [rule.when for rule in pack.rules]:
        paths = sorted(set(facts_of(condition)))
        for _ in range(30):
            table = {}
            for path in paths:
                status = rng.choice([KNOWN, KNOWN, MISSING, MISSING, ABSENT, UNKNOWN])
                table[path] = (status, rng.choice([0, 0.5, 1, 64, 4096, True, "fp8", "vllm", ["fp8"]]) if status == KNOWN else None)

            def lookup(path, table=table):
                return table[path]
            try:
                expected = _naive_undecided_by(condition, lookup), _naive_alternatives(condition, lookup)
            except TypeError:
                continue            # a value of the wrong type for its fact: the tree walk fails too
            assert (undecided_by(condition, lookup), alternatives(condition, lookup)) == expected, (condition, table)
            compared += 1
            undecided += bool(expected[0])
    assert compared > 5000 and undecided > 1000


def test_a_rule_s_kept_undecided_facts_and_ways_are_those_worked_out_afresh(pack):
    """An undecided rule's own facts and ways are kept per rule under the status and value of
    each fact it reads: over fact sets that share those (kept results taken) and differ in them,
    every answer is the one undecided_by and alternatives give afresh."""
    from kbopt.engine.advice.explain import final_lookup, own_of
    from kbopt.engine.lang.logic import alternatives, undecided_by
    rng = random.Random(5)
    examples = [facts_from_document(json.loads(path.read_text()), path.name).engine_values(pack.kb.vocabulary)
                for path in sorted(EXAMPLES.glob("*.json"))]
    pack.runtime.explain_forms = None
    compared = 0
    for _ in range(60):
        values = {path: value for path, value in rng.choice(examples).items() if rng.random() > 0.3}
        final = _final(pack, values)
        final.not_evaluated()
        lookup = final_lookup(final.known, final.status)
        for rule in pack.rules:
            if rule.id in final.fired or final.decision(rule.id) is not None:
                continue
            got = final.compiled[rule.id].own(final.known, final.status)
            condition = rule.fire_condition
            assert got == (own_of(undecided_by(condition, lookup)), tuple(alternatives(condition, lookup))), rule.id
            compared += 1
    kept = sum(len(compiled._owns.results) for compiled in (pack.runtime.explain_forms or {}).values() if "_owns" in vars(compiled))
    assert compared > 3000 and kept > 500, (compared, kept)
