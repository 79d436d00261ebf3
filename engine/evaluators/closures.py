"""Conditions and value expressions as closures, built once per pack: the evaluators' one fast path.

`evaluate()` and `value_of()` (engine/lang/logic.py) walk the expression tree on every call,
dispatching on node types; they are the specification. A pack's expressions never change, so the
walk's dispatch is done once here, into nested closures over a Lookup. A closure gives the same
Kleene truth value as `evaluate()` for every lookup, and a compiled value expression returns what
`value_of()` returns and raises the same `Missing` (same paths, same order): the conformance tests
check both on every built-in rule. `and`/`or` stop at the first value that decides them, which
changes nothing since a lookup has no side effects.

(Until issue 27 a second fast path generated Python source per pack and ran it through `exec`;
it bought 1.4x on a warm advice, under the 2x that issue asked of it, and was removed.)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, assert_never

from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Lookup, Missing, label_of, not_held, undecided_by
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
    unique_facts,
)
from kbopt.engine.lang.operators import ARITHMETIC, COMPARISONS, FUNCTIONS
from kbopt.engine.lang.parse import MAX_EXACT, parse_condition
from kbopt.engine.pack.rule import Pack

CompiledCondition = Callable[[Lookup], bool | None]
Compute = Callable[[Lookup], Any]         # a value expression's value; raises Missing
ChainingCheck = Callable[[dict[str, Any]], bool | None]


def compile_condition(node: Condition) -> CompiledCondition:
    """A condition as nested closures over a Lookup."""
    return _closure(node)


def catalog_condition(pack: Pack, text: str) -> CompiledCondition:
    """A condition the knowledge base writes as text (a catalog's `in_place_when`, a fact's
    `applies_when`), parsed on the pack's vocabulary and compiled once per pack."""
    conditions = pack.runtime.conditions
    check = conditions.get(text)
    if check is None:
        check = conditions[text] = _closure(parse_condition(text, pack.kb.vocabulary, {}))
    return check


def compile_chaining_check(node: Condition) -> ChainingCheck:
    """The condition's value during chaining, read from the dict of known facts (inputs and the
    derived facts produced so far): a derived fact not yet produced is absent, an input not
    given is missing (nothing is unknown while chaining)."""
    closure = _closure(node)

    def check_known(known: dict[str, Any]) -> bool | None:
        def lookup(path: str) -> tuple[str, Any]:
            if path in known:
                return KNOWN, known[path]
            return not_held(path)
        return closure(lookup)
    return check_known


class Acceptance(NamedTuple):
    """A quick test of a derived value's type: what value_problem (engine/evaluators/derivation.py)
    accepts without a word. A bool; a text among an enum's `members`; a finite float or an int
    (not a bool) within ±MAX_EXACT; for any other type, nothing (value_problem then says why)."""
    kind: Literal["bool", "enum", "number", "nothing"]
    members: frozenset[str] = frozenset()

    def test(self) -> Callable[[Any], bool]:
        match self.kind:
            case "bool":
                return lambda value: value is True or value is False
            case "enum":
                members = self.members
                return lambda value: isinstance(value, str) and value in members
            case "number":
                def number(value: Any) -> bool:
                    kind = type(value)
                    return (kind is float and math.isfinite(value)) or (kind is int and -MAX_EXACT <= value <= MAX_EXACT)
                return number
            case "nothing":
                return lambda value: False
            case _ as unreachable:
                assert_never(unreachable)


def _closure(node: Condition) -> CompiledCondition:
    """The condition as nested closures (compile_condition)."""
    match node:
        case Cmp():
            return _compare(node)
        case And():
            return _kleene(tuple(_closure(item) for item in node.items), decisive=False)
        case Or():
            return _kleene(tuple(_closure(item) for item in node.items), decisive=True)
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
            inner = _closure(node.item)

            def negation(lookup: Lookup) -> bool | None:
                result = inner(lookup)
                return None if result is None else not result
            return negation
        case _ as unreachable:
            assert_never(unreachable)


def _kleene(parts: tuple[CompiledCondition, ...], decisive: bool) -> CompiledCondition:
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


def _compare(node: Cmp) -> CompiledCondition:
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
            condition, decide = node.condition, _closure(node.condition)     # if-else: rare
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


def plain_value(node: Value) -> bool:
    """A value expression without alternatives (coalesce) or if-else anywhere in it: it computes
    exactly when every fact it reads is known (or raises an error, or passes a zero divisor)."""
    match node:
        case Const() | Fact():
            return True
        case Arith(left=left, right=right):
            return plain_value(left) and plain_value(right)
        case ListOf(items=items):
            return all(plain_value(item) for item in items)
        case Call(fn=fn, args=args):
            return not FUNCTIONS[fn].alternatives and all(plain_value(arg) for arg in args)
        case IfElse():
            return False
        case _ as unreachable:
            assert_never(unreachable)
