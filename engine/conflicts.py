"""The conflict graph among candidate strategies, and its deterministic resolution.

Nodes are candidate strategies (`quantization[int8]`) and vetoes (`veto:<rule id>`). Edges:
  excludes   two candidates that cannot both be applied (catalog, or variants of one strategy)
  requires   a candidate that is only safe or useful with another (INT8 -> mixed precision, K4.3);
             requirements on several variants of one strategy are alternatives
  mitigates  a candidate that softens another's side effect (bucketing for continuous batching)
  vetoes     a rule that rules a candidate out (FP8 without FP8 tensor cores, K3.11)
Resolution keeps the compatible set of highest total weight (a candidate weighs as much as the
strongest rule that recommends it), closed under `requires`; ties go to the set found first in
(-weight, id) order.
Every candidate left out gets the rules and the reason that removed it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from kbopt.engine.pack.rule import Drawn, Mitigate, Reject, Require, StrategyRef
from kbopt.kb.catalog import Strategy

CATALOG = "kb:strategies"
EXACT_LIMIT = 22          # candidates above this are resolved greedily (still deterministic)


@dataclass
class Candidate:
    key: str
    strategy: str
    variant: str | None
    weight: float = 0.0
    rules: list[str] = field(default_factory=list)
    params: dict[str, tuple[Any, str]] = field(default_factory=dict)   # name -> (expression, rule id)
    gain: str | None = None


@dataclass(frozen=True)
class Left:
    key: str
    because: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Resolution:
    chosen: tuple[str, ...]
    left_out: tuple[Left, ...]
    graph: nx.MultiDiGraph[str]


def build_graph(candidates: dict[str, Candidate], vetoes: Sequence[Drawn[Reject]],
                requires: Sequence[Drawn[Require]], mitigates: Sequence[Drawn[Mitigate]],
                catalog: Mapping[str, Strategy]) -> nx.MultiDiGraph[str]:
    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    for key in sorted(candidates):
        c = candidates[key]
        graph.add_node(key, kind="candidate", strategy=c.strategy, weight=c.weight)

    def matching(strategy: str, variant: str | None) -> list[str]:
        wanted = StrategyRef(strategy, variant)
        return [k for k in sorted(candidates) if wanted.matches(candidates[k].strategy, candidates[k].variant)]

    keys = sorted(candidates)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            ca, cb = candidates[a], candidates[b]
            if ca.strategy == cb.strategy or cb.strategy in catalog[ca.strategy].excludes \
                    or ca.strategy in catalog[cb.strategy].excludes:
                graph.add_edge(a, b, kind="excludes", because=(CATALOG,))
    for requirement in requires:
        require = requirement.conclusion
        needed = StrategyRef.parse(require.needs)
        for source in matching(require.strategy, require.variant):
            for target in matching(needed.strategy, needed.variant) or [require.needs]:
                if target not in graph:
                    graph.add_node(target, kind="absent", strategy=needed.strategy, weight=0.0)
                graph.add_edge(source, target, kind="requires", because=(requirement.rule,))
    for mitigation in mitigates:
        for target in matching(mitigation.conclusion.strategy, None):
            for source in matching(mitigation.conclusion.by, None):
                graph.add_edge(source, target, kind="mitigates", because=(mitigation.rule,))
    for veto in vetoes:
        for target in matching(veto.conclusion.strategy, veto.conclusion.variant):
            node = f"veto:{veto.rule}"
            graph.add_node(node, kind="veto", rule=veto.rule)
            graph.add_edge(node, target, kind="vetoes", because=(veto.rule,), reason=veto.conclusion.reason)
    return graph


# An edge as networkx hands it out: (source, target, attributes); `kind` and `because` are always set.
Edge = tuple[str, str, dict[str, Any]]


def _edges(graph: nx.MultiDiGraph[str], node: str, kind: str, outgoing: bool = True) -> list[Edge]:
    edges = graph.out_edges(node, data=True) if outgoing else graph.in_edges(node, data=True)
    return [(u, v, d) for u, v, d in edges if d["kind"] == kind]


def _excluded_pairs(graph: nx.MultiDiGraph[str]) -> set[frozenset[str]]:
    return {frozenset((u, v)) for u, v, d in graph.edges(data=True) if d["kind"] == "excludes"}


def resolve(graph: nx.MultiDiGraph[str], candidates: dict[str, Candidate]) -> Resolution:
    left: dict[str, Left] = {}
    # 1. Vetoes are hard.
    for key in sorted(candidates):
        vetoes = _edges(graph, key, "vetoes", outgoing=False)
        if vetoes:
            rules = tuple(d["because"][0] for _, _, d in vetoes)
            left[key] = Left(key, rules, " ".join(d["reason"] for _, _, d in vetoes))
    # 2. A candidate whose requirement cannot be met goes too (repeat until stable).
    changed = True
    while changed:
        changed = False
        for key in sorted(candidates):
            if key in left:
                continue
            for needs, targets in _requirements(graph, key).items():
                alive = [t for t in targets if t in candidates and t not in left]
                if not alive:
                    gone = [left[t] for t in targets if t in left]
                    because = tuple(dict.fromkeys(r for lost in gone for r in lost.because)) or \
                        tuple(d["because"][0] for _, v, d in _edges(graph, key, "requires") if v in targets)
                    why = f"it requires {needs}, which " + ("was rejected: " + gone[0].reason if gone else "no rule recommended")
                    left[key] = Left(key, because, why)
                    changed = True
                    break
    # 3. The best compatible set among the rest.
    alive = sorted((k for k in candidates if k not in left), key=lambda k: (-candidates[k].weight, k))
    exclusions = _excluded_pairs(graph)
    chosen = _best_set(graph, alive, candidates, exclusions)
    for key in alive:
        if key in chosen:
            continue
        winners = sorted((w for w in chosen if frozenset((key, w)) in exclusions), key=lambda w: (-candidates[w].weight, w))
        if winners:
            winner = winners[0]
            because = tuple(candidates[winner].rules)
            reason = (f"excluded by {winner}, which the rules weigh higher "
                      f"({candidates[winner].weight:g} vs {candidates[key].weight:g})"
                      if candidates[winner].weight > candidates[key].weight else
                      f"excluded by {winner}, chosen as part of a set of higher total weight")
        else:
            unmet = [n for n, targets in _requirements(graph, key).items() if not set(targets) & chosen]
            because = tuple(d["because"][0] for _, _, d in _edges(graph, key, "requires"))
            reason = f"it requires {', '.join(unmet)}, which the best compatible set leaves out"
        left[key] = Left(key, because, reason)
    order = sorted(chosen, key=lambda k: (-candidates[k].weight, k))
    return Resolution(tuple(order), tuple(left[k] for k in sorted(left)), graph)


def _requirements(graph: nx.MultiDiGraph[str], key: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _, target, _ in _edges(graph, key, "requires"):
        out.setdefault(graph.nodes[target]["strategy"], []).append(target)
    return out


def _closed(graph: nx.MultiDiGraph[str], chosen: set[str]) -> bool:
    return all(set(targets) & chosen for key in chosen for targets in _requirements(graph, key).values())


def _best_set(graph: nx.MultiDiGraph[str], order: list[str], candidates: dict[str, Candidate],
              exclusions: set[frozenset[str]]) -> set[str]:
    if len(order) > EXACT_LIMIT:
        chosen: set[str] = set()
        for key in order:
            if all(frozenset((key, c)) not in exclusions for c in chosen):
                chosen.add(key)
        while not _closed(graph, chosen):
            chosen = {k for k in chosen if all(set(t) & chosen for t in _requirements(graph, k).values())}
        return chosen
    best: tuple[float, set[str]] = (-1.0, set())
    remaining_weight = [sum(candidates[k].weight for k in order[i:]) for i in range(len(order) + 1)]

    def search(index: int, current: set[str], weight: float) -> None:
        nonlocal best
        if weight + remaining_weight[index] <= best[0]:
            return
        if index == len(order):
            if _closed(graph, current):
                best = (weight, set(current))
            return
        key = order[index]
        if all(frozenset((key, c)) not in exclusions for c in current):
            current.add(key)
            search(index + 1, current, weight + candidates[key].weight)
            current.remove(key)
        search(index + 1, current, weight)

    search(0, set(), 0.0)
    return best[1]
