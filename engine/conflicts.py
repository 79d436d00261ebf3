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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kbopt.engine.pack.rule import Drawn, Mitigate, Reject, Require, StrategyRef, refers_to
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
    # Where a variant serves the objectives better than one the rules weigh higher (both alone, on
    # today's deployment), it outranks that one by `lift`, and `preferred` says why.
    lift: float = 0.0
    preferred: str = ""

    @property
    def rank(self) -> float:
        """The weight the resolution maximizes: the rules' weight, lifted for the objectives."""
        return self.weight + self.lift


EdgeKind = Literal["excludes", "requires", "mitigates", "vetoes"]
NodeKind = Literal["candidate", "absent", "veto"]


@dataclass(frozen=True)
class GraphEdge:
    kind: EdgeKind
    source: str
    target: str
    because: tuple[str, ...]      # rule ids, or CATALOG for the catalog's own relations
    reason: str | None = None     # a veto's reason


@dataclass(frozen=True)
class GraphNode:
    kind: NodeKind
    strategy: str | None = None
    weight: float = 0.0


class ConflictGraph:
    """A directed multigraph of the few candidates one advice weighs.

    It is rebuilt for every advice and holds a handful of edges, so it is plain dictionaries rather
    than networkx (whose import alone costs more than the whole evaluation). Edges come out in the
    order networkx would give them: nodes in insertion order, then each neighbour in the order it
    was first linked, then the parallel edges in insertion order, so explanations read the same.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, GraphNode] = {}
        self._out: dict[str, dict[str, list[GraphEdge]]] = {}
        self._in: dict[str, dict[str, list[GraphEdge]]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self.nodes

    def add_node(self, key: str, node: GraphNode) -> None:
        self.nodes[key] = node
        self._out.setdefault(key, {})
        self._in.setdefault(key, {})

    def add_edge(self, edge: GraphEdge) -> None:
        assert edge.source in self.nodes and edge.target in self.nodes, edge
        self._out[edge.source].setdefault(edge.target, []).append(edge)
        self._in[edge.target].setdefault(edge.source, []).append(edge)

    def out_edges(self, key: str) -> list[GraphEdge]:
        return [edge for parallel in self._out[key].values() for edge in parallel]

    def in_edges(self, key: str) -> list[GraphEdge]:
        return [edge for parallel in self._in[key].values() for edge in parallel]

    def edges(self) -> Iterator[GraphEdge]:
        for key in self.nodes:
            yield from self.out_edges(key)


@dataclass(frozen=True)
class Left:
    key: str
    because: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Resolution:
    chosen: tuple[str, ...]
    left_out: tuple[Left, ...]
    graph: ConflictGraph


def build_graph(candidates: dict[str, Candidate], vetoes: Sequence[Drawn[Reject]],
                requires: Sequence[Drawn[Require]], mitigates: Sequence[Drawn[Mitigate]],
                catalog: Mapping[str, Strategy],
                together: Callable[[Candidate, Candidate], bool] = lambda a, b: False) -> ConflictGraph:
    """The graph of the candidates; `together`: two of different strategies the catalog excludes
    that the deployed engine runs together at its version (its profile's `together`)."""
    graph = ConflictGraph()
    for key in sorted(candidates):
        c = candidates[key]
        graph.add_node(key, GraphNode("candidate", c.strategy, c.weight))

    def matching(strategy: str, variant: str | None) -> list[str]:
        return [k for k in sorted(candidates) if refers_to(strategy, variant, candidates[k].strategy, candidates[k].variant)]

    keys = sorted(candidates)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            ca, cb = candidates[a], candidates[b]
            if ca.strategy == cb.strategy or ((cb.strategy in catalog[ca.strategy].excludes
                                               or ca.strategy in catalog[cb.strategy].excludes) and not together(ca, cb)):
                graph.add_edge(GraphEdge("excludes", a, b, (CATALOG,)))
    for requirement in requires:
        require = requirement.conclusion
        needed = StrategyRef.parse(require.needs)
        for source in matching(require.strategy, require.variant):
            for target in matching(needed.strategy, needed.variant) or [require.needs]:
                if target not in graph:
                    graph.add_node(target, GraphNode("absent", needed.strategy))
                graph.add_edge(GraphEdge("requires", source, target, (requirement.rule,)))
    for mitigation in mitigates:
        for target in matching(mitigation.conclusion.strategy, None):
            for source in matching(mitigation.conclusion.by, None):
                graph.add_edge(GraphEdge("mitigates", source, target, (mitigation.rule,)))
    for veto in vetoes:
        for target in matching(veto.conclusion.strategy, veto.conclusion.variant):
            node = f"veto:{veto.rule}"
            graph.add_node(node, GraphNode("veto"))
            graph.add_edge(GraphEdge("vetoes", node, target, (veto.rule,), veto.conclusion.reason))
    return graph


def _edges(graph: ConflictGraph, node: str, kind: EdgeKind, outgoing: bool = True) -> list[GraphEdge]:
    edges = graph.out_edges(node) if outgoing else graph.in_edges(node)
    return [edge for edge in edges if edge.kind == kind]


def _excluded_pairs(graph: ConflictGraph) -> set[frozenset[str]]:
    return {frozenset((edge.source, edge.target)) for edge in graph.edges() if edge.kind == "excludes"}


def resolve(graph: ConflictGraph, candidates: dict[str, Candidate]) -> Resolution:
    left: dict[str, Left] = {}
    # 1. Vetoes are hard.
    for key in sorted(candidates):
        vetoes = _edges(graph, key, "vetoes", outgoing=False)
        if vetoes:
            rules = tuple(edge.because[0] for edge in vetoes)
            left[key] = Left(key, rules, " ".join(edge.reason or "" for edge in vetoes))
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
                        tuple(edge.because[0] for edge in _edges(graph, key, "requires") if edge.target in targets)
                    # the variant it needs, where it names one (quantization[nvfp4], not quantization)
                    wanted = " or ".join(dict.fromkeys(targets)) or needs
                    why = f"it requires {wanted}, which " + ("was rejected: " + gone[0].reason if gone else "no rule recommended")
                    left[key] = Left(key, because, why)
                    changed = True
                    break
    # 3. The best compatible set among the rest.
    alive = sorted((k for k in candidates if k not in left), key=lambda k: (-candidates[k].rank, k))
    exclusions = _excluded_pairs(graph)
    chosen = _best_set(graph, alive, candidates, exclusions)
    for key in alive:
        if key in chosen:
            continue
        winners = sorted((w for w in chosen if frozenset((key, w)) in exclusions), key=lambda w: (-candidates[w].rank, w))
        if winners:
            winner = winners[0]
            because = tuple(candidates[winner].rules)
            reason = (f"excluded by {winner}, which {candidates[winner].preferred}" if candidates[winner].preferred
                      and candidates[winner].weight <= candidates[key].weight else
                      f"excluded by {winner}, which the rules weigh higher "
                      f"({candidates[winner].weight:g} vs {candidates[key].weight:g})"
                      if candidates[winner].weight > candidates[key].weight else
                      f"excluded by {winner}, chosen as part of a set of higher total weight")
        else:
            unmet = [n for n, targets in _requirements(graph, key).items() if not set(targets) & chosen]
            because = tuple(edge.because[0] for edge in _edges(graph, key, "requires"))
            reason = f"it requires {', '.join(unmet)}, which the best compatible set leaves out"
        left[key] = Left(key, because, reason)
    order = sorted(chosen, key=lambda k: (-candidates[k].rank, k))
    return Resolution(tuple(order), tuple(left[k] for k in sorted(left)), graph)


def _requirements(graph: ConflictGraph, key: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for edge in _edges(graph, key, "requires"):
        out.setdefault(graph.nodes[edge.target].strategy or edge.target, []).append(edge.target)
    return out


def _closed(graph: ConflictGraph, chosen: set[str]) -> bool:
    return all(set(targets) & chosen for key in chosen for targets in _requirements(graph, key).values())


def _best_set(graph: ConflictGraph, order: list[str], candidates: dict[str, Candidate],
              exclusions: set[frozenset[str]]) -> set[str]:
    if len(order) > EXACT_LIMIT:
        chosen: set[str] = set()
        for key in order:
            if all(frozenset((key, c)) not in exclusions for c in chosen):
                chosen.add(key)
        while not _closed(graph, chosen):
            chosen = {k for k in chosen if all(set(t) & chosen for t in _requirements(graph, k).values())}
        return chosen
    search = _Search(graph, order, candidates, exclusions)
    search.run(0, set(), 0.0)
    return search.best[1]


class _Search:
    """_best_set's branch and bound over the candidates in `order`. An object, not a recursive
    closure, which would hold itself: a reference cycle left for the garbage collector at
    every advice."""
    __slots__ = ("best", "candidates", "exclusions", "graph", "order", "remaining_weight")

    def __init__(self, graph: ConflictGraph, order: list[str], candidates: dict[str, Candidate],
                 exclusions: set[frozenset[str]]) -> None:
        self.graph, self.order, self.candidates, self.exclusions = graph, order, candidates, exclusions
        self.best: tuple[float, set[str]] = (-1.0, set())
        self.remaining_weight = [sum(candidates[k].rank for k in order[i:]) for i in range(len(order) + 1)]

    def run(self, index: int, current: set[str], weight: float) -> None:
        if weight + self.remaining_weight[index] <= self.best[0]:
            return
        if index == len(self.order):
            if _closed(self.graph, current):
                self.best = (weight, set(current))
            return
        key = self.order[index]
        if all(frozenset((key, c)) not in self.exclusions for c in current):
            current.add(key)
            self.run(index + 1, current, weight + self.candidates[key].rank)
            current.remove(key)
        self.run(index + 1, current, weight)
