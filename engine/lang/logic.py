"""Three-valued evaluation: a condition is true, false, or undecided (None) until facts arrive;
a value expression is computed or names the facts it lacks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, assert_never

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
from kbopt.engine.lang.operators import ARITHMETIC, BOOLEAN, COMPARISONS, FUNCTIONS
from kbopt.kb.vocabulary import Vocabulary

# KNOWN: has a value. MISSING: an input fact not given. ABSENT: a derived fact no rule can
# produce. UNKNOWN: a derived fact whose producing rules could not be decided.
KNOWN, MISSING, ABSENT, UNKNOWN = "known", "missing", "absent", "unknown"
Lookup: TypeAlias = Callable[[str], tuple[str, Any]]   # path -> (status, value)


def not_held(path: str) -> tuple[str, None]:
    """A lookup's answer for a fact it holds no value for, while chaining or after: a derived fact
    not produced is absent, an input not given is missing."""
    return (ABSENT, None) if Vocabulary.is_derived(path) else (MISSING, None)

# evaluate() is hot: the table is read once here rather than per node. The table types a Boolean's
# apply for all three; these say which takes a list of truth values and which takes one.
_ALL: Callable[[list[bool | None]], bool | None] = BOOLEAN["and"].apply
_ANY: Callable[[list[bool | None]], bool | None] = BOOLEAN["or"].apply
_NOT: Callable[[bool | None], bool | None] = BOOLEAN["not"].apply
_COMPARE = {symbol: row.apply for symbol, row in COMPARISONS.items()}


class Missing(Exception):
    """A value expression needs facts that are not known."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = tuple(paths)


def evaluate(node: Condition, lookup: Lookup) -> bool | None:
    """Kleene logic: True, False, or None when unknown facts decide it.

    An input fact not given makes comparisons unknown, but `known()` of it is plainly false.
    A derived fact that no rule could produce is absent: comparisons on it are false.
    """
    # The reference evaluator's inner loop: the most frequent nodes first, and bare class
    # patterns (keyword captures cost more than the attribute reads they replace).
    match node:
        case Cmp():
            statuses: list[str] = []
            values: list[Any] = []
            for side in (node.left, node.right):
                if isinstance(side, Fact):
                    status, value = lookup(side.path)
                else:
                    status, value = KNOWN, side.value
                statuses.append(status)
                values.append(value)
            if ABSENT in statuses:
                return False
            if UNKNOWN in statuses or MISSING in statuses:
                return None
            return _COMPARE[node.op](values[0], values[1])
        case And():
            return _ALL([evaluate(i, lookup) for i in node.items])
        case Or():
            return _ANY([evaluate(i, lookup) for i in node.items])
        case Needs():
            status, _ = lookup(node.fact.path)
            return True if status == KNOWN else (False if status == ABSENT else None)
        case Known():
            status, _ = lookup(node.fact.path)
            if status == UNKNOWN:
                return None
            return (status == KNOWN) != node.negated
        case OneOf() | Contains():
            status, value = lookup(node.fact.path)
            if status != KNOWN:
                return False if status == ABSENT else None
            # `in` always yields a bool; the annotation says so where the fact value is Any
            hit: bool = value in node.values if isinstance(node, OneOf) else node.item in value
            return hit != node.negated
        case Not():
            return _NOT(evaluate(node.item, lookup))
        case _ as unreachable:
            assert_never(unreachable)


def undecided_by(node: Condition, lookup: Lookup) -> list[str]:
    """The facts that leave `node` unknown: those in the leaves that evaluate to None, skipping
    branches already decided (so `missing(x) or x == false` does not ask for x when x is missing)."""
    return _undecided(node, lookup)[1]


def _undecided(node: Condition, lookup: Lookup) -> tuple[bool | None, list[str]]:
    """`node`'s value and, where it is None, the facts that leave it so: one walk, each node
    evaluated once (a decided item contributes nothing, so an undecided and/or concatenates its
    items' facts in order)."""
    match node:
        case And(items=items) | Or(items=items):
            parts = [_undecided(item, lookup) for item in items]
            value = (_ALL if isinstance(node, And) else _ANY)([v for v, _ in parts])
            return value, ([] if value is not None else [p for _, facts in parts for p in facts])
        case Not(item=item):
            inner, facts = _undecided(item, lookup)
            return _NOT(inner), facts
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            value = evaluate(node, lookup)
            return value, ([] if value is not None else [p for p in facts_of(node) if lookup(p)[0] in (MISSING, UNKNOWN)])
        case _ as unreachable:
            assert_never(unreachable)


# More alternatives than this and "one of" stops helping a reader: the facts are then given as one set.
MOST_ALTERNATIVES = 8


def alternatives(node: Condition, lookup: Lookup) -> list[frozenset[str]]:
    """The ways to decide an undecided `node`, as sets of the facts it lacks: knowing every fact of
    any one set decides it (an `or` gives one way per undecided branch, an `and` the combinations of
    its undecided parts). Empty where `node` is decided; one set, all its facts, past
    MOST_ALTERNATIVES."""
    return _ways(node, lookup)[2]


def undecided_ways(node: Condition, lookup: Lookup) -> tuple[list[str], list[frozenset[str]]]:
    """undecided_by's facts and alternatives' ways together, from one walk."""
    _, facts, ways = _ways(node, lookup)
    return facts, ways


def _ways(node: Condition, lookup: Lookup) -> tuple[bool | None, list[str], list[frozenset[str]]]:
    """`node`'s value, its undecided facts (_undecided) and its ways (alternatives), in one walk."""
    match node:
        case Or(items=items):
            parts = [_ways(item, lookup) for item in items]
            value = _ANY([v for v, _, _ in parts])
            if value is not None:
                return value, [], []
            ways = [way for _, _, item_ways in parts for way in item_ways]
        case And(items=items):
            parts = [_ways(item, lookup) for item in items]
            value = _ALL([v for v, _, _ in parts])
            if value is not None:
                return value, [], []
            ways = [frozenset()]
            for _, _, item_ways in parts:
                if item_ways:
                    ways = [way | part for way in ways for part in item_ways]
                if len(ways) > MOST_ALTERNATIVES:
                    break
        case Not(item=item):
            inner, facts, ways = _ways(item, lookup)
            return _NOT(inner), facts, ways
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            value, facts = _undecided(node, lookup)
            return value, facts, ([] if value is not None else [frozenset(facts)])
        case _ as unreachable:
            assert_never(unreachable)
    facts = [p for _, item_facts, _ in parts for p in item_facts]
    if len(ways) > MOST_ALTERNATIVES:
        return None, facts, [frozenset(facts)]
    unique = list(dict.fromkeys(ways))
    return None, facts, [way for way in unique if not any(other < way for other in unique)]


def witnesses(node: Condition, lookup: Lookup) -> list[Condition]:
    """The leaves that made a true condition true (first true branch of each `or`)."""
    match node:
        case And(items=items):
            return [leaf for item in items for leaf in witnesses(item, lookup)]
        case Or(items=items):
            for item in items:
                if evaluate(item, lookup) is True:
                    return witnesses(item, lookup)
            return []
        case Not() | Cmp() | OneOf() | Contains() | Known() | Needs():
            return [node]
        case _ as unreachable:
            assert_never(unreachable)


def _values(nodes: tuple[Value, ...], lookup: Lookup) -> list[Any]:
    """Every node's value, or Missing naming what all of them lack together."""
    missing: list[str] = []
    values: list[Any] = []
    for node in nodes:
        try:
            values.append(value_of(node, lookup))
        except Missing as m:
            missing.extend(m.paths)
    if missing:
        raise Missing(missing)
    return values


def value_of(node: Value, lookup: Lookup) -> Any:
    """Compute a value expression; raises Missing naming the facts it lacks."""
    match node:
        case Const(value=value):
            return value
        case Fact(path=path):
            status, value = lookup(path)
            if status != KNOWN:
                raise Missing([path])
            return value
        case ListOf(items=items):
            return [value_of(i, lookup) for i in items]
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            decided = evaluate(condition, lookup)
            if decided is None:
                raise Missing(undecided_by(condition, lookup))
            return value_of(then if decided else otherwise, lookup)
        case Arith(op=op, left=left, right=right):
            a, b = _values((left, right), lookup)
            if ARITHMETIC[op].divides and b == 0:
                raise Missing([f"{label_of(right)} (is zero)"])
            return _finite(node, lambda: ARITHMETIC[op].apply(a, b))
        case Call(fn=fn, args=args):
            function = FUNCTIONS[fn]
            if function.apply is None:          # alternatives: the first that computes
                missing: list[str] = []
                for arg in args:
                    try:
                        return value_of(arg, lookup)
                    except Missing as m:
                        missing.extend(m.paths)
                raise Missing(missing)
            apply, values = function.apply, _values(args, lookup)
            return _finite(node, lambda: apply(*values))
        case _ as unreachable:
            assert_never(unreachable)


def _finite(node: Value, compute: Callable[[], Any]) -> Any:
    """compute(), or Missing when it overflows: extreme inputs (a memory of 1e300 GiB) make floats
    overflow to infinity, and floor/ceil/round of one raise OverflowError. Like a division by zero,
    the value is then not computed, and the caller says so instead of failing. (An infinite float
    that raises nothing stays a value: the derivation refuses it as not finite.)"""
    try:
        return compute()
    except OverflowError:
        raise Missing([f"{', '.join(unique_facts(node)) or label_of(node)} (too large to compute)"]) from None


def label_of(node: Value) -> str:
    """How a message names an operand: its fact, its parameter or literal, else `value`."""
    match node:
        case Fact(path=path):
            return path
        case Const(value=value, parameter=parameter):
            return parameter or repr(value)
        case Arith() | Call() | ListOf() | IfElse():
            return "value"
        case _ as unreachable:
            assert_never(unreachable)
