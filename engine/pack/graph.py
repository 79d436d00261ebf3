"""Strongly connected components of the rule graph (which rule feeds which), without recursion.

Used at pack-build time to run rules in dependency order, and per evaluation to explain what an
undecided rule waits on; both must stay linear however long the chains of a pack grow.
"""
from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Iterable
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


def strongly_connected(roots: Iterable[N], successors: Callable[[N], Iterable[N]],
                       finished: Container[N] = frozenset()) -> list[list[N]]:
    """Tarjan's algorithm: the components reachable from `roots`, each listed after every
    component it reaches (sinks first). Nodes in `finished` count as already listed."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    stack: list[N] = []
    on_stack: set[N] = set()
    out: list[list[N]] = []
    for root in roots:
        if root in index or root in finished:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(successors(root)))]
        while work:
            node, pending = work[-1]
            for successor in pending:
                if successor in finished:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(successors(successor))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[N] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(component)
    return out
