"""Normal forms for backends without negation or nesting: `not` pushed to the leaves (NNF),
then alternatives of conjunctions (DNF), one compiled rule per alternative."""
from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from kbopt.engine.lang.errors import LIMIT, ExprError
from kbopt.engine.lang.nodes import And, Cmp, Condition, Contains, Known, Leaf, Needs, Not, OneOf, Or
from kbopt.engine.lang.operators import COMPARISONS


def to_nnf(node: Condition, negate: bool = False) -> Condition:
    """Push `not` to the leaves (De Morgan, flipped comparisons); the backend has no negation."""
    match node:
        case Not(item=item):
            return to_nnf(item, not negate)
        case And(items=items) | Or(items=items):
            nnf = tuple(to_nnf(i, negate) for i in items)
            return Or(nnf) if isinstance(node, And) == negate else And(nnf)
        case Cmp() | OneOf() | Contains() | Known() | Needs() if not negate:
            return node
        case Cmp(op=op, left=left, right=right):
            return Cmp(COMPARISONS[op].negation, left, right)
        case OneOf() | Contains() | Known():
            return replace(node, negated=not node.negated)
        case Needs():
            raise TypeError(node)
        case _ as unreachable:
            assert_never(unreachable)


def to_dnf(node: Condition, limit: int = 64) -> list[list[Leaf]]:
    """Conjunctions of leaves whose disjunction is `node` (already in NNF)."""
    match node:
        case And(items=items):
            terms: list[list[Leaf]] = [[]]
            for item in items:
                terms = [a + b for a in terms for b in to_dnf(item, limit)]
                if len(terms) > limit:
                    raise ExprError(f"condition expands to more than {limit} alternatives", "split the rule in two", LIMIT)
            return terms
        case Or(items=items):
            alternatives = [t for item in items for t in to_dnf(item, limit)]
            if len(alternatives) > limit:      # a long flat `or` explodes as surely as nested ones
                raise ExprError(f"condition expands to more than {limit} alternatives", "split the rule in two", LIMIT)
            return alternatives
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            return [[node]]
        case Not():
            raise TypeError(f"not in negation normal form: {node!r}")
        case _ as unreachable:
            assert_never(unreachable)
