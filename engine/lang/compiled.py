"""Conditions compiled once into Python closures: the reference evaluator's fast path.

`evaluate()` walks the condition tree on every call, dispatching on node types; a pack's
conditions never change, so the walk is done once per pack here and each evaluation only calls
closures. The result is the same Kleene truth value as `evaluate()` for every lookup (a test
checks both on every built-in rule); `and`/`or` stop at the first value that decides them, which
changes nothing since a lookup has no side effects.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import assert_never

from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Lookup
from kbopt.engine.lang.nodes import And, Cmp, Condition, Const, Contains, Known, Needs, Not, OneOf, Or
from kbopt.engine.lang.operators import COMPARISONS

Check = Callable[[Lookup], bool | None]


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
