"""Conflict resolution: deterministic, principled, and every exclusion explained."""
from __future__ import annotations

from kbopt.engine.conflicts import Candidate, GraphEdge, build_graph, resolve
from kbopt.engine.pack.rule import Drawn, Mitigate, Reject, Require, StrategyRef
from kbopt.kb.knowledge import builtin_knowledge


def _graph(candidates, vetoes, requires, mitigates):
    return build_graph(candidates, vetoes, requires, mitigates, builtin_knowledge().strategies)


def _candidates(*specs):
    out = {}
    for key, weight, rule in specs:
        ref = StrategyRef.parse(key)
        out[key] = Candidate(key, ref.strategy, ref.variant, weight, [rule])
    return out


def test_catalog_exclusion_keeps_the_heavier_strategy():
    candidates = _candidates(("paged_kv_cache", 3, "A"), ("static_kv_preallocation", 2, "B"))
    result = resolve(_graph(candidates, [], [], []), candidates)
    assert result.chosen == ("paged_kv_cache",)
    (left,) = result.left_out
    assert left.key == "static_kv_preallocation" and left.because == ("A",)
    assert "excluded by paged_kv_cache" in left.reason and "3 vs 2" in left.reason


def test_variants_of_one_strategy_exclude_each_other():
    candidates = _candidates(("quantization[int8]", 3, "A"), ("quantization[fp8]", 3.5, "B"))
    result = resolve(_graph(candidates, [], [], []), candidates)
    assert result.chosen == ("quantization[fp8]",)


def test_veto_beats_any_weight_and_cites_its_rule():
    candidates = _candidates(("quantization[fp8]", 9, "A"), ("quantization[int8]", 1, "B"))
    graph = _graph(candidates, [Drawn("VETO", Reject("quantization", "fp8", "no FP8 tensor cores"))], [], [])
    result = resolve(graph, candidates)
    assert result.chosen == ("quantization[int8]",)
    assert result.left_out[0].because == ("VETO",) and result.left_out[0].reason == "no FP8 tensor cores"


def test_a_rejected_requirement_takes_its_dependants_along():
    candidates = _candidates(("quantization[int8]", 3, "A"), ("mixed_precision", 2, "B"), ("op_fusion", 2, "C"))
    graph = _graph(candidates, [Drawn("V", Reject("mixed_precision", None, "no 16-bit allowed"))],
                        [Drawn("R", Require("quantization", "int8", "mixed_precision"))], [])
    result = resolve(graph, candidates)
    assert result.chosen == ("op_fusion",)
    left = {gone.key: gone for gone in result.left_out}
    assert left["quantization[int8]"].because == ("V",)
    assert "requires mixed_precision, which was rejected: no 16-bit allowed" in left["quantization[int8]"].reason


def test_best_total_weight_not_greedy():
    # Greedy would take X (5) and lose Y and Z (4 + 4); the best compatible set is {Y, Z}.
    candidates = _candidates(("paged_kv_cache", 5, "X"), ("static_kv_preallocation", 4, "Y"), ("op_fusion", 4, "Z"))
    graph = _graph(candidates, [], [], [])
    graph.add_edge(GraphEdge("excludes", "op_fusion", "paged_kv_cache", ("TEST",)))
    result = resolve(graph, candidates)
    assert set(result.chosen) == {"static_kv_preallocation", "op_fusion"}
    assert "set of higher total weight" in result.left_out[0].reason


def test_resolution_does_not_depend_on_insertion_order():
    specs = [("quantization[int8]", 3, "A"), ("quantization[fp8]", 3, "B"), ("paged_kv_cache", 2, "C"),
             ("static_kv_preallocation", 2, "D"), ("mixed_precision", 1, "E")]
    results = set()
    for ordering in (specs, list(reversed(specs)), specs[2:] + specs[:2]):
        candidates = _candidates(*ordering)
        graph = _graph(candidates, [], [Drawn("R", Require("quantization", None, "mixed_precision"))], [])
        results.add(resolve(graph, candidates).chosen)
    assert results == {("quantization[fp8]", "paged_kv_cache", "mixed_precision")}


def test_mitigation_is_an_edge_not_a_constraint():
    candidates = _candidates(("continuous_batching", 3, "A"), ("length_bucketing", 2, "B"))
    graph = _graph(candidates, [], [], [Drawn("B", Mitigate("continuous_batching", "length_bucketing"))])
    result = resolve(graph, candidates)
    assert set(result.chosen) == {"continuous_batching", "length_bucketing"}
    assert [(e.source, e.target, e.kind) for e in graph.edges()] == \
        [("length_bucketing", "continuous_batching", "mitigates")]


def test_edges_come_out_in_networkx_order():
    """Neighbours in the order they were first linked, then parallel edges in insertion order:
    the order the explanations were written with when the graph was a networkx MultiDiGraph."""
    candidates = _candidates(("quantization[int8]", 3, "A"), ("mixed_precision", 2, "B"), ("op_fusion", 2, "C"))
    requires = [Drawn("R1", Require("quantization", "int8", "mixed_precision")),
                Drawn("R2", Require("quantization", "int8", "op_fusion")),
                Drawn("R3", Require("quantization", "int8", "mixed_precision"))]
    graph = _graph(candidates, [], requires, [])
    out = [(e.target, e.because) for e in graph.out_edges("quantization[int8]") if e.kind == "requires"]
    assert out == [("mixed_precision", ("R1",)), ("mixed_precision", ("R3",)), ("op_fusion", ("R2",))]
