"""The condition language: what parses, what is refused (with hints), and three-valued truth."""
from __future__ import annotations

import pytest

from kbopt.engine.lang.errors import ExprError
from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Missing, evaluate, value_of
from kbopt.engine.lang.nodes import And, Cmp, Const, Fact, Or
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.parse import parse_condition, parse_value
from kbopt.engine.lang.text import render
from kbopt.kb.vocabulary import load_vocabulary

VOCABULARY = load_vocabulary()


def cond(text, parameters=None):
    return parse_condition(text, VOCABULARY, parameters or {})


def refused(text, parameters=None):
    with pytest.raises(ExprError) as caught:
        cond(text, parameters)
    return caught.value


def lookup_from(values, absent=()):
    def lookup(path):
        if path in values:
            return KNOWN, values[path]
        if path.startswith("derived."):
            return (ABSENT if path in absent else UNKNOWN), None
        return MISSING, None
    return lookup


@pytest.mark.parametrize("text,error,hint", [
    ("telemetry.memory_use_ratio > 0.9", "unknown fact", "telemetry.memory_used_ratio"),
    ("telemetry.memory_used_ratio > 90", "ratio in 0..1", "0.9"),
    ("telemetry.memory_used_ratio == 0.9", "'==' on telemetry.memory_used_ratio", "never exactly equal"),
    ("workload.task == 'chat'", "not a value of workload.task", "classification"),
    ("workload.task > 'a'", "'>' on workload.task", None),
    ("workload.seq_len_max > 'long'", "compared with 'long'", None),
    ("not derived.variable_lengths", "'not' over the derived fact", "derived facts only grow"),
    ("missing(derived.bottleneck)", "over a derived fact", None),
    ("threshold > 3", "unknown name 'threshold'", "parameter"),
    ("workload.seq_len_max > limit", "unknown name 'limit'", None),
    ("__import__('os')", "", None),
    ("telemetry.memory_used_ratio.__class__ > 1", "unknown fact", None),
    ("workload.seq_len_max + 1 > 3", "", None),
    ("'tpu' in constraints.allowed_precisions", "can never be in", None),
    ("constraints.allowed_precisions == 'fp8'", "is a list", None),
    ("telemetry.memory_used_ratio >", "cannot parse", None),
    ("true", "constant", None),
])
def test_refused_with_a_reason(text, error, hint):
    problem = refused(text)
    assert error in problem.message
    if hint:
        assert hint in (problem.hint or "")


def test_parameters_are_bare_names_kept_for_explanations():
    node = cond("telemetry.memory_used_ratio > capacity_threshold", {"capacity_threshold": 0.9})
    assert node == Cmp(">", Fact("telemetry.memory_used_ratio"), Const(0.9, "capacity_threshold"))


def test_literal_on_the_left_is_flipped_and_chains_split():
    assert cond("0.9 < telemetry.memory_used_ratio") == cond("telemetry.memory_used_ratio > 0.9")
    assert isinstance(cond("0.1 < telemetry.memory_used_ratio < 0.9"), And)


def test_three_valued_truth():
    node = cond("telemetry.memory_used_ratio > 0.9 or workload.seq_len_max > 512")
    assert evaluate(node, lookup_from({"telemetry.memory_used_ratio": 0.95})) is True
    assert evaluate(node, lookup_from({"telemetry.memory_used_ratio": 0.5})) is None
    assert evaluate(node, lookup_from({"telemetry.memory_used_ratio": 0.5, "workload.seq_len_max": 128})) is False
    both = cond("telemetry.memory_used_ratio > 0.9 and workload.seq_len_max > 512")
    assert evaluate(both, lookup_from({"telemetry.memory_used_ratio": 0.5})) is False


def test_missing_input_is_known_missing_but_an_absent_derived_fact_is_false():
    assert evaluate(cond("missing(constraints.ttft_slo_ms)"), lookup_from({})) is True
    assert evaluate(cond("known(constraints.ttft_slo_ms)"), lookup_from({})) is False
    absent = lookup_from({}, absent={"derived.variable_lengths"})
    assert evaluate(cond("derived.variable_lengths"), absent) is False
    assert evaluate(cond("derived.variable_lengths"), lookup_from({})) is None


def test_membership():
    node = cond('"fp8" not in constraints.allowed_precisions')
    assert evaluate(node, lookup_from({"constraints.allowed_precisions": ["int8"]})) is True
    assert evaluate(node, lookup_from({"constraints.allowed_precisions": ["fp8"]})) is False
    assert evaluate(node, lookup_from({})) is None
    one_of = cond('workload.task in ["classification", "embedding"]')
    assert evaluate(one_of, lookup_from({"workload.task": "embedding"})) is True


def test_negation_is_pushed_to_the_leaves():
    node = cond("not (telemetry.memory_used_ratio > 0.9 and workload.task == 'generation')")
    assert to_nnf(node) == Or((
        Cmp("<=", Fact("telemetry.memory_used_ratio"), Const(0.9)),
        Cmp("!=", Fact("workload.task"), Const("generation"))))
    lookup = lookup_from({"telemetry.memory_used_ratio": 0.95, "workload.task": "generation"})
    assert evaluate(node, lookup) == evaluate(to_nnf(node), lookup) is False


def test_dnf_expansion():
    node = to_nnf(cond("(telemetry.compute_utilization < 0.4 or workload.queue_timeout_ratio > 0.01) "
                            "and workload.batching == 'static'"))
    assert len(to_dnf(node)) == 2


def test_values_and_their_missing_facts():
    value = parse_value("floor(derived.kv_budget_gib * 1073741824 / (16 * derived.kv_bytes_per_token))", VOCABULARY, {})
    lookup = lookup_from({"derived.kv_budget_gib": 57.098838806152344, "derived.kv_bytes_per_token": 131072})
    assert value_of(value, lookup) == 29234
    with pytest.raises(Missing) as missing:
        value_of(value, lookup_from({"derived.kv_budget_gib": 10.0}))
    assert missing.value.paths == ("derived.kv_bytes_per_token",)
    fallback = parse_value("coalesce(constraints.ttft_slo_ms * 0.1, 10)", VOCABULARY, {})
    assert value_of(fallback, lookup_from({})) == 10
    assert value_of(parse_value("edges(900, 3800, 4096)", VOCABULARY, {}), lookup_from({})) == [1024, 4096]
    with pytest.raises(ExprError, match="unknown function"):
        parse_value("open('x')", VOCABULARY, {})


@pytest.mark.parametrize("text, refused", [
    ("floor(telemetry.memory_used_ratio, 2)", "floor() takes one argument, not 2"),
    ("ceil()", "ceil() takes one argument, not 0"),
    ("min(telemetry.memory_used_ratio)", "min() takes two or more arguments, not 1"),
    ("round(telemetry.memory_used_ratio, 1, 2)", "round() takes one or two arguments, not 3"),
    ("coalesce()", "coalesce() takes one or more arguments, not 0"),
    ("dtype_bytes()", "dtype_bytes() takes one argument, not 0"),
    ("max(1, 2, telemetry.memory_used_ratio)", None),
    ("round(telemetry.memory_used_ratio, 2)", None),
    ("edges(4096)", None),
])
def test_a_function_given_the_wrong_number_of_arguments_is_refused_when_parsed(text, refused):
    """A call's argument count is checked against the function's row in the operators table,
    so that a rule cannot load and then fail at every evaluation that fires it."""
    if refused is None:
        parse_value(text, VOCABULARY, {})
        return
    with pytest.raises(ExprError) as error:
        parse_value(text, VOCABULARY, {})
    assert error.value.message == refused


def test_render_substitutes_values():
    node = cond("telemetry.memory_used_ratio > capacity_threshold", {"capacity_threshold": 0.9})
    assert render(node, {"telemetry.memory_used_ratio": 0.93}) == \
        "telemetry.memory_used_ratio (0.93) > capacity_threshold=0.9"


def test_ln_is_the_natural_logarithm_and_has_no_value_at_zero(pack):
    from kbopt.engine.evaluators.closures import compile_value
    from kbopt.engine.lang.logic import KNOWN, Missing
    vocabulary = load_vocabulary()
    value = compile_value(parse_value("ln(100 * workload.prompt_len_mean)", vocabulary, {}))
    assert value(lambda path: (KNOWN, 1.0)) == pytest.approx(4.60517, abs=1e-5)
    with pytest.raises(Missing):
        value(lambda path: (KNOWN, 0.0))
