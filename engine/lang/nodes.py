"""The engine-neutral form of a parsed expression: frozen dataclasses, and unions of them that
`match` statements check for exhaustiveness.

Class and field names are part of the intermediate form (tests/golden/ir.json is keyed on them).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias, assert_never


@dataclass(frozen=True)
class Fact:
    path: str


@dataclass(frozen=True)
class Const:
    value: Any
    parameter: str | None = None   # the rule parameter this literal came from, for explanations


@dataclass(frozen=True)
class Cmp:
    op: str                        # a comparison of operators.COMPARISONS
    left: Fact                     # the parser puts the fact on the left
    right: Fact | Const


@dataclass(frozen=True)
class OneOf:
    """`fact in [a, b]` (negated: `not in`)."""
    fact: Fact
    values: tuple[Any, ...]        # literal fact values
    negated: bool = False


@dataclass(frozen=True)
class Contains:
    """`"fp8" in constraints.allowed_precisions` (negated: `not in`)."""
    fact: Fact
    item: str
    negated: bool = False


@dataclass(frozen=True)
class Known:
    fact: Fact
    negated: bool = False          # missing(f)


@dataclass(frozen=True)
class Needs:
    """A fact a derived value is computed from: the rule cannot be decided without it."""
    fact: Fact


@dataclass(frozen=True)
class And:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    item: Condition


@dataclass(frozen=True)
class Arith:
    op: str                        # an operator of operators.ARITHMETIC
    left: Value
    right: Value


@dataclass(frozen=True)
class Call:
    fn: str                        # a function of operators.FUNCTIONS
    args: tuple[Value, ...]


@dataclass(frozen=True)
class ListOf:
    items: tuple[Value, ...]


@dataclass(frozen=True)
class IfElse:
    """`a if condition else b` in a value expression."""
    condition: Condition
    then: Value
    otherwise: Value


Leaf: TypeAlias = Cmp | OneOf | Contains | Known | Needs
Condition: TypeAlias = Leaf | And | Or | Not
Value: TypeAlias = Fact | Const | Arith | Call | ListOf | IfElse
Node: TypeAlias = Condition | Value


def leaves(node: Condition) -> list[Leaf]:
    """The comparisons and tests of a condition, in order, under any and/or/not."""
    match node:
        case And(items=items) | Or(items=items):
            return [leaf for item in items for leaf in leaves(item)]
        case Not(item=item):
            return leaves(item)
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            return [node]
        case _ as unreachable:
            assert_never(unreachable)


def facts_of(node: Node) -> Iterator[str]:
    """Every fact path a node refers to, in order of appearance (may repeat)."""
    match node:
        case Fact(path=path):
            yield path
        case Const():
            pass
        case Cmp(left=left, right=right) | Arith(left=left, right=right):
            yield from facts_of(left)
            yield from facts_of(right)
        case OneOf(fact=fact) | Contains(fact=fact) | Known(fact=fact) | Needs(fact=fact):
            yield fact.path
        case And(items=items) | Or(items=items) | ListOf(items=items) | Call(args=items):
            for item in items:
                yield from facts_of(item)
        case Not(item=item):
            yield from facts_of(item)
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            yield from facts_of(condition)
            yield from facts_of(then)
            yield from facts_of(otherwise)
        case _ as unreachable:
            assert_never(unreachable)


def unique_facts(node: Node) -> tuple[str, ...]:
    return tuple(dict.fromkeys(facts_of(node)))
