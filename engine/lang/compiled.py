"""Conditions and value expressions compiled once into Python closures: the evaluators' fast path.

`evaluate()` walks the condition tree on every call, dispatching on node types; a pack's
conditions never change, so the walk is done once per pack here and each evaluation only calls
closures. The result is the same Kleene truth value as `evaluate()` for every lookup (a test
checks both on every built-in rule); `and`/`or` stop at the first value that decides them, which
changes nothing since a lookup has no side effects. A compiled value expression returns what
`value_of()` returns and raises the same `Missing` (same paths, same order).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Lookup, Missing, label_of, undecided_by
from kbopt.engine.lang.nodes import (
    And,
    Arith,
    Call,
    Cmp,
    Condition,
    Const,
    Contains,
    Fact,
    IfElse,
    Known,
    ListOf,
    Needs,
    Not,
    OneOf,
    Or,
    Value,
    facts_of,
    unique_facts,
)
from kbopt.engine.lang.operators import ARITHMETIC, COMPARISONS, FUNCTIONS

Check = Callable[[Lookup], bool | None]
Compute = Callable[[Lookup], Any]         # a value expression's value; raises Missing


def compile_condition(node: Condition) -> Check:
    match node:
        case Cmp():
            return _compare(node)
        case And():
            return _kleene(tuple(compile_condition(item) for item in node.items), decisive=False)
        case Or():
            return _kleene(tuple(compile_condition(item) for item in node.items), decisive=True)
        case Needs():
            path = node.fact.path

            def needs(lookup: Lookup) -> bool | None:
                status = lookup(path)[0]
                return True if status == KNOWN else (False if status == ABSENT else None)
            return needs
        case Known():
            path, negated = node.fact.path, node.negated

            def known(lookup: Lookup) -> bool | None:
                status = lookup(path)[0]
                return None if status == UNKNOWN else (status == KNOWN) != negated
            return known
        case OneOf():
            path, members, negated = node.fact.path, node.values, node.negated

            def one_of(lookup: Lookup) -> bool | None:
                status, value = lookup(path)
                if status != KNOWN:
                    return False if status == ABSENT else None
                return (value in members) != negated
            return one_of
        case Contains():
            path, item, negated = node.fact.path, node.item, node.negated

            def contains(lookup: Lookup) -> bool | None:
                status, value = lookup(path)
                if status != KNOWN:
                    return False if status == ABSENT else None
                return (item in value) != negated
            return contains
        case Not():
            inner = compile_condition(node.item)

            def negation(lookup: Lookup) -> bool | None:
                result = inner(lookup)
                return None if result is None else not result
            return negation
        case _ as unreachable:
            assert_never(unreachable)


def compile_undecided(node: Condition) -> Callable[[Lookup], list[str]]:
    """`logic.undecided_by` compiled: the facts that leave `node` unknown, skipping branches
    already decided. Each level decides with its own compiled closure."""
    decide = compile_condition(node)
    match node:
        case And() | Or():
            parts = tuple(compile_undecided(item) for item in node.items)

            def branches(lookup: Lookup) -> list[str]:
                return [] if decide(lookup) is not None else [p for part in parts for p in part(lookup)]
            return branches
        case Not():
            inner = compile_undecided(node.item)
            return lambda lookup: [] if decide(lookup) is not None else inner(lookup)
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            paths = tuple(facts_of(node))

            def leaf(lookup: Lookup) -> list[str]:
                return [] if decide(lookup) is not None else [p for p in paths if lookup(p)[0] in (MISSING, UNKNOWN)]
            return leaf
        case _ as unreachable:
            assert_never(unreachable)


def _kleene(parts: tuple[Check, ...], decisive: bool) -> Check:
    """`and` (decisive False) or `or` (decisive True): the first part that yields the decisive
    value settles it; else undecided if any part was, else the other value."""
    def combined(lookup: Lookup) -> bool | None:
        undecided = False
        for part in parts:
            result = part(lookup)
            if result is decisive:
                return decisive
            undecided = undecided or result is None
        return None if undecided else not decisive
    return combined


def _compare(node: Cmp) -> Check:
    apply = COMPARISONS[node.op].apply
    path, right = node.left.path, node.right
    if isinstance(right, Const):
        constant = right.value

        def against_constant(lookup: Lookup) -> bool | None:
            status, value = lookup(path)
            if status == KNOWN:
                return apply(value, constant)
            return False if status == ABSENT else None
        return against_constant
    other = right.path

    def against_fact(lookup: Lookup) -> bool | None:
        (status, value), (other_status, other_value) = lookup(path), lookup(other)
        if ABSENT in (status, other_status):
            return False
        if status in (UNKNOWN, MISSING) or other_status in (UNKNOWN, MISSING):
            return None
        return apply(value, other_value)
    return against_fact


def compile_value(node: Value) -> Compute:
    match node:
        case Const():
            constant = node.value
            return lambda lookup: constant
        case Fact():
            path = node.path

            def fact(lookup: Lookup) -> Any:
                status, value = lookup(path)
                if status != KNOWN:
                    raise Missing([path])
                return value
            return fact
        case ListOf():
            items = tuple(compile_value(item) for item in node.items)
            return lambda lookup: [item(lookup) for item in items]
        case IfElse():
            condition, decide = node.condition, compile_condition(node.condition)
            then, otherwise = compile_value(node.then), compile_value(node.otherwise)

            def if_else(lookup: Lookup) -> Any:
                decided = decide(lookup)
                if decided is None:
                    raise Missing(undecided_by(condition, lookup))
                return then(lookup) if decided else otherwise(lookup)
            return if_else
        case Arith():
            return _arithmetic(node)
        case Call():
            return _call(node)
        case _ as unreachable:
            assert_never(unreachable)


def _all_of(parts: tuple[Compute, ...], lookup: Lookup) -> list[Any]:
    """Every part's value, or Missing naming what all of them lack together (as logic._values)."""
    missing: list[str] = []
    values: list[Any] = []
    for part in parts:
        try:
            values.append(part(lookup))
        except Missing as m:
            missing.extend(m.paths)
    if missing:
        raise Missing(missing)
    return values


def _too_large(node: Value) -> Missing:
    """What an overflow raises (as logic._finite): the value is not computed, not an error."""
    return Missing([f"{', '.join(unique_facts(node)) or label_of(node)} (too large to compute)"])


def _arithmetic(node: Arith) -> Compute:
    row = ARITHMETIC[node.op]
    apply, divides = row.apply, row.divides
    left, right = compile_value(node.left), compile_value(node.right)
    zero = f"{label_of(node.right)} (is zero)"

    def arithmetic(lookup: Lookup) -> Any:
        try:
            a = left(lookup)
        except Missing as m:
            try:
                right(lookup)
            except Missing as n:
                raise Missing([*m.paths, *n.paths]) from None
            raise
        b = right(lookup)
        if divides and b == 0:
            raise Missing([zero])
        try:
            return apply(a, b)
        except OverflowError:
            raise _too_large(node) from None
    return arithmetic


def _call(node: Call) -> Compute:
    function = FUNCTIONS[node.fn]
    args = tuple(compile_value(arg) for arg in node.args)
    apply = function.apply
    if apply is None:          # alternatives: the first that computes

        def first_known(lookup: Lookup) -> Any:
            missing: list[str] = []
            for arg in args:
                try:
                    return arg(lookup)
                except Missing as m:
                    missing.extend(m.paths)
            raise Missing(missing)
        return first_known

    def call(lookup: Lookup) -> Any:
        values = _all_of(args, lookup)
        try:
            return apply(*values)
        except OverflowError:
            raise _too_large(node) from None
    return call
