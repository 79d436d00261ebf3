"""The one table of the language's operators and functions.

The parser, both evaluators, lint and the renderer all read it, so that a new operator or
function is one row here rather than an edit in each of them.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbopt.kb.knowledge import builtin_knowledge


@dataclass(frozen=True)
class Operator:
    symbol: str                        # as written in a rule and rendered back; a function's name
    apply: Callable[..., Any] | None   # what it means in Python; only a Function may lack one
    words: str                         # how `describe` says it; for a function, what it computes


@dataclass(frozen=True)
class Comparison(Operator):
    apply: Callable[[Any, Any], bool]
    syntax: type[ast.cmpop]
    negation: str                      # the comparison of `not (a op b)`: the backend has no negation
    converse: str                      # the comparison with its sides swapped: facts go on the left
    durable: str                       # durable_rules' spelling
    equality: bool = False             # the only tests on bools, enums and strings; never on floats


@dataclass(frozen=True)
class Arithmetic(Operator):
    apply: Callable[[Any, Any], Any]   # fact values in, a fact value out
    syntax: type[ast.operator]
    divides: bool = False              # a zero on the right leaves the value undefined, not an error


@dataclass(frozen=True)
class Boolean(Operator):
    """`apply` takes Kleene truth values (None for undecided)."""
    apply: Callable[..., bool | None]  # `and`, `or`: a list of truth values; `not`: one
    syntax: type[ast.boolop] | type[ast.unaryop]


@dataclass(frozen=True)
class Function(Operator):
    # how many arguments it takes (most None: any number): checked when a rule is loaded, not
    # left for an evaluation to fail on
    least: int = 1
    most: int | None = 1

    def takes(self) -> str:
        """Its arguments in words: `one argument`, `one or two arguments`, `two or more arguments`."""
        def count(n: int) -> str:
            return {1: "one", 2: "two", 3: "three"}.get(n, str(n))
        if self.most == self.least:
            return f"{count(self.least)} argument" + ("s" if self.least > 1 else "")
        if self.most is None:
            return f"{count(self.least)} or more arguments"
        return f"{count(self.least)} or {count(self.most)} arguments"

    @property
    def alternatives(self) -> bool:
        """Its arguments are alternatives, tried in order by logic.value_of: the facts of any
        one of them are enough, so it has no Python `apply`."""
        return self.apply is None


def _all(results: list[bool | None]) -> bool | None:
    return False if False in results else (None if None in results else True)


def _any(results: list[bool | None]) -> bool | None:
    return True if True in results else (None if None in results else False)


def _negate(result: bool | None) -> bool | None:
    return None if result is None else not result


MIN_BUCKET = 16      # a bucket edge below this many tokens separates nothing worth separating


def _round(x: float, n: float = 0) -> float:
    return round(x, int(n)) if n else round(x)


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except ValueError:
        # outside the reals (a negative base to a fractional power, zero to a negative one): no
        # value, as an overflow has none; the evaluators then say it could not be computed
        raise OverflowError(f"pow({x}, {y}) has no real value") from None


def _ln(x: float) -> float:
    try:
        return math.log(x)
    except ValueError:
        # zero or below has no logarithm: no value, as pow's outside the reals
        raise OverflowError(f"ln({x}) has no real value") from None


def _pow2ceil(x: float) -> int:
    x = max(1, math.ceil(x))
    return 1 << (x - 1).bit_length()


def _edges(*values: float) -> list[int]:
    """Sorted distinct bucket edges, each rounded up to a power of two except the last (the cap)."""
    *inner, cap = values
    edges = sorted({_pow2ceil(v) for v in inner if MIN_BUCKET <= v < cap})
    return [e for e in edges if e < cap] + [int(cap)]


@functools.cache
def _dtype_bytes(dtype: str) -> float:
    # The sizes are data of the built-in knowledge base (kb/vocabulary.yaml), read once per process
    # (so each is looked up once: the performance model asks for one six times an evaluation).
    return builtin_knowledge().vocabulary.dtype_bytes[dtype]


_TABLE: tuple[Operator, ...] = (
    Comparison("<", operator.lt, "is below", ast.Lt, ">=", ">", "$lt"),
    Comparison("<=", operator.le, "is at most", ast.LtE, ">", ">=", "$lte"),
    Comparison(">", operator.gt, "is above", ast.Gt, "<=", "<", "$gt"),
    Comparison(">=", operator.ge, "is at least", ast.GtE, "<", "<=", "$gte"),
    Comparison("==", operator.eq, "is", ast.Eq, "!=", "==", "$eq", equality=True),
    Comparison("!=", operator.ne, "is not", ast.NotEq, "==", "!=", "$neq", equality=True),
    Arithmetic("+", operator.add, "plus", ast.Add),
    Arithmetic("-", operator.sub, "minus", ast.Sub),
    Arithmetic("*", operator.mul, "times", ast.Mult),
    Arithmetic("/", operator.truediv, "divided by", ast.Div, divides=True),
    Arithmetic("//", operator.floordiv, "divided by, rounded down", ast.FloorDiv, divides=True),
    Boolean("and", _all, "and", ast.And),
    Boolean("or", _any, "or", ast.Or),
    Boolean("not", _negate, "it is not so that", ast.Not),
    Function("min", min, "smallest argument", least=2, most=None),
    Function("max", max, "largest argument", least=2, most=None),
    Function("round", _round, "round(x) to an integer, round(x, n) to n places", most=2),
    Function("floor", math.floor, "round down to an integer"),
    Function("ceil", math.ceil, "round up to an integer"),
    Function("ln", _ln, "natural logarithm (an exponential tail's quantile: ln(1 / (1 - q)) times the mean)"),
    Function("pow2ceil", _pow2ceil, "smallest power of two >= x"),
    Function("pow", _pow, "x raised to the power y (the chance of missing in y independent draws, for MoE)", least=2, most=2),
    Function("edges", _edges, "bucket edges: powers of two >= each value below the last, then the last", most=None),
    Function("dtype_bytes", _dtype_bytes, "bytes per element of a dtype (kb/vocabulary.yaml)"),
    Function("coalesce", None, "first argument whose facts are known", most=None),
)

OPERATORS: dict[str, Operator] = {row.symbol: row for row in _TABLE}
COMPARISONS = {symbol: row for symbol, row in OPERATORS.items() if isinstance(row, Comparison)}
ARITHMETIC = {symbol: row for symbol, row in OPERATORS.items() if isinstance(row, Arithmetic)}
BOOLEAN = {symbol: row for symbol, row in OPERATORS.items() if isinstance(row, Boolean)}
FUNCTIONS = {symbol: row for symbol, row in OPERATORS.items() if isinstance(row, Function)}
