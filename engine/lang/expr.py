"""The rule expression language: parsed with `ast`, never evaluated by Python.

Conditions (`when`) are boolean: comparisons of a fact with a literal, a named parameter or
another fact; `and`, `or`, `not`; `x in [..]` and `"v" in list_fact`; `known(f)`, `missing(f)`;
a bool fact on its own; `quality(f) == "measured"` (where the fact came from). Values (`derive`, recommended `params`, written `= expr`) add arithmetic
and a few pure functions. Names are dotted fact paths checked against the vocabulary, or the
rule's own parameters.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from kbopt.kb.vocabulary import QUALITY_PREFIX, FactSpec, Vocabulary
from kbopt.kb.vocabulary import load_vocabulary as _vocabulary

# ---------------------------------------------------------------- nodes (the engine-neutral form)


@dataclass(frozen=True)
class Fact:
    path: str


@dataclass(frozen=True)
class Const:
    value: Any
    parameter: str | None = None   # the rule parameter this literal came from, for explanations


@dataclass(frozen=True)
class Cmp:
    op: str                        # < <= > >= == !=
    left: Any
    right: Any


@dataclass(frozen=True)
class OneOf:
    """`fact in [a, b]` (negated: `not in`)."""
    fact: Fact
    values: tuple
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
    items: tuple


@dataclass(frozen=True)
class Or:
    items: tuple


@dataclass(frozen=True)
class Not:
    item: Any


@dataclass(frozen=True)
class Arith:
    op: str                        # + - * / //
    left: Any
    right: Any


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple


@dataclass(frozen=True)
class ListOf:
    items: tuple


@dataclass(frozen=True)
class IfElse:
    """`a if condition else b` in a value expression."""
    condition: Any
    then: Any
    otherwise: Any


NEGATED_OP = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
FLIPPED_OP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_CMP_AST = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_ARITH_AST = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//"}
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}
_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "//": lambda a, b: a // b,
}


MIN_BUCKET = 16      # a bucket edge below this many tokens separates nothing worth separating


def _pow2ceil(x):
    x = max(1, int(math.ceil(x)))
    return 1 << (x - 1).bit_length()


def _edges(*values):
    """Sorted distinct bucket edges, each rounded up to a power of two except the last (the cap)."""
    *inner, cap = values
    edges = sorted({_pow2ceil(v) for v in inner if MIN_BUCKET <= v < cap})
    return [e for e in edges if e < cap] + [int(cap)]


VALUE_FUNCTIONS: dict[str, tuple[Callable, str]] = {
    "min": (min, "smallest argument"),
    "max": (max, "largest argument"),
    "round": (lambda x, n=0: round(x, int(n)) if n else int(round(x)), "round(x) to an integer, round(x, n) to n places"),
    "floor": (lambda x: int(math.floor(x)), "round down to an integer"),
    "ceil": (lambda x: int(math.ceil(x)), "round up to an integer"),
    "pow2ceil": (_pow2ceil, "smallest power of two >= x"),
    "edges": (_edges, "bucket edges: powers of two >= each value below the last, then the last"),
    "dtype_bytes": (lambda d: _vocabulary().dtype_bytes[d], "bytes per element of a dtype (kb/vocabulary.yaml)"),
    "coalesce": (None, "first argument whose facts are known"),
}

# ---------------------------------------------------------------- parsing


class ExprError(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Parser:
    def __init__(self, vocabulary: Vocabulary, parameters: dict[str, Any], extra_facts: dict[str, FactSpec]):
        self.vocabulary = vocabulary
        self.parameters = parameters
        self.extra = extra_facts

    def spec(self, path: str) -> FactSpec | None:
        return self.vocabulary.get(path) or self.extra.get(path)

    # -- names and literals
    def name(self, node: ast.AST):
        dotted = _dotted(node)
        if dotted is None:
            raise ExprError(f"unsupported expression {ast.unparse(node)!r}")
        if dotted in ("true", "True"):
            return Const(True)
        if dotted in ("false", "False"):
            return Const(False)
        if "." not in dotted:
            if dotted in self.parameters:
                return Const(self.parameters[dotted], parameter=dotted)
            import difflib
            close = difflib.get_close_matches(dotted, list(self.parameters), n=1)
            raise ExprError(f"unknown name {dotted!r}", f"did you mean the parameter '{close[0]}'?" if close else
                            "a bare name is a parameter: declare it under `parameters:` or in rules/parameters.yaml; "
                            "facts are dotted (section.name)")
        if self.spec(dotted) is None:
            hint = self.vocabulary.suggest(dotted)
            raise ExprError(f"unknown fact {dotted!r}", f"did you mean '{hint}'?" if hint else "see `kbopt schema facts`")
        return Fact(dotted)

    def literal(self, node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return Const(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, (int, float)):
            return Const(-node.operand.value)
        return None

    def operand(self, node: ast.AST):
        lit = self.literal(node)
        if lit is not None:
            return lit
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "quality":
            # quality(fact) reads where the fact came from: measured, proxy, derived, user, catalog.
            fact = self.name(node.args[0]) if len(node.args) == 1 else None
            if not isinstance(fact, Fact) or self.spec(fact.path).derived:
                raise ExprError("quality() takes one input fact", 'e.g. quality(telemetry.compute_utilization) == "measured"')
            return Fact(QUALITY_PREFIX + fact.path)
        return self.name(node)

    # -- conditions
    def condition(self, node: ast.AST):
        if isinstance(node, ast.BoolOp):
            items = tuple(self.condition(v) for v in node.values)
            return And(items) if isinstance(node.op, ast.And) else Or(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.condition(node.operand)
            derived = sorted(p for p in facts_of(inner) if self.spec(p).derived)
            if derived:
                raise ExprError(f"'not' over the derived fact {derived[0]!r}",
                                "derived facts only grow during chaining, so negating one is not supported; "
                                "write the positive condition on the input facts")
            return Not(inner)
        if isinstance(node, ast.Compare):
            parts = []
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                parts.append(self.comparison(left, op, right))
                left = right
            return parts[0] if len(parts) == 1 else And(tuple(parts))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("known", "missing"):
            if len(node.args) != 1:
                raise ExprError(f"{node.func.id}() takes one fact")
            fact = self.name(node.args[0])
            if not isinstance(fact, Fact):
                raise ExprError(f"{node.func.id}() takes a fact, got {ast.unparse(node.args[0])!r}")
            if node.func.id == "missing" and self.spec(fact.path).derived:
                raise ExprError(f"missing({fact.path}) over a derived fact", "derived facts only grow; test the inputs instead")
            return Known(fact, negated=node.func.id == "missing")
        operand = self.operand(node)
        if isinstance(operand, Fact) and self.spec(operand.path).type == "bool":
            return Cmp("==", operand, Const(True))
        if isinstance(operand, Const) and isinstance(operand.value, bool):
            raise ExprError("a condition cannot be a constant")
        raise ExprError(f"{ast.unparse(node)!r} is not a condition",
                        "compare a fact with a value, e.g. telemetry.memory_used_ratio > 0.9")

    def comparison(self, left_node, op_node, right_node):
        if isinstance(op_node, (ast.In, ast.NotIn)):
            return self.membership(left_node, right_node, isinstance(op_node, ast.NotIn))
        op = _CMP_AST.get(type(op_node))
        if op is None:
            raise ExprError(f"unsupported comparison {type(op_node).__name__}")
        left, right = self.operand(left_node), self.operand(right_node)
        if not isinstance(left, Fact) and not isinstance(right, Fact):
            raise ExprError("a comparison needs at least one fact")
        if not isinstance(left, Fact):
            left, right, op = right, left, FLIPPED_OP[op]
        self.check_types(left, op, right)
        return Cmp(op, left, right)

    def check_types(self, fact: Fact, op: str, other) -> None:
        spec = self.spec(fact.path)
        if spec.type == "list":
            raise ExprError(f"{fact.path} is a list", f'test membership instead: "fp8" in {fact.path}')
        if op in ("==", "!=") and spec.is_float:
            raise ExprError(f"'{op}' on {fact.path}, a {spec.type} fact",
                            "floats are never exactly equal; compare with < or > and a threshold")
        if isinstance(other, Fact):
            other_spec = self.spec(other.path)
            if spec.is_numeric != other_spec.is_numeric or (not spec.is_numeric and spec.type != other_spec.type):
                raise ExprError(f"{fact.path} ({spec.type}) compared with {other.path} ({other_spec.type})")
            return
        value = other.value
        if spec.is_numeric:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ExprError(f"{fact.path} is a {spec.type} fact compared with {value!r}", "compare it with a number")
            if spec.type == "ratio" and not 0 <= value <= 1:
                raise ExprError(f"{fact.path} is a ratio in 0..1 compared with {value!r}",
                                f"write {value / 100:g} for {value:g}%" if 1 < value <= 100 else None)
            if op not in ("==", "!=") or spec.type != "version":
                return
        if spec.type == "bool":
            if not isinstance(value, bool) or op not in ("==", "!="):
                raise ExprError(f"{fact.path} is true or false", f"write {fact.path} or not {fact.path}")
            return
        if spec.type in ("enum", "string"):
            if not isinstance(value, str):
                raise ExprError(f"{fact.path} is a {spec.type} fact compared with {value!r}")
            if op not in ("==", "!="):
                raise ExprError(f"'{op}' on {fact.path}, a {spec.type} fact", "use == or != or in [..]")
            if spec.type == "enum" and value not in spec.values:
                raise ExprError(f"{value!r} is not a value of {fact.path}", "one of: " + ", ".join(spec.values))

    def membership(self, left_node, right_node, negated: bool):
        left = self.operand(left_node)
        if isinstance(right_node, (ast.List, ast.Tuple)):
            if not isinstance(left, Fact):
                raise ExprError("`x in [..]` needs a fact on the left")
            values = []
            for element in right_node.elts:
                item = self.operand(element)
                if not isinstance(item, Const):
                    raise ExprError(f"`in [..]` takes literal values, got {ast.unparse(element)!r}")
                self.check_types(left, "==", item)
                values.append(item.value)
            return OneOf(left, tuple(values), negated)
        right = self.operand(right_node)
        if isinstance(right, Fact) and self.spec(right.path).type == "list":
            if not isinstance(left, Const) or not isinstance(left.value, str):
                raise ExprError(f"`in {right.path}` needs a quoted value on the left")
            if left.value not in self.spec(right.path).values:
                raise ExprError(f"{left.value!r} can never be in {right.path}",
                                "one of: " + ", ".join(self.spec(right.path).values))
            return Contains(right, left.value, negated)
        raise ExprError("`in` needs a list literal or a list fact on the right")

    # -- values
    def value(self, node: ast.AST):
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_AST:
            return Arith(_ARITH_AST[type(node.op)], self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in VALUE_FUNCTIONS or node.keywords:
                raise ExprError(f"unknown function {node.func.id!r}", "one of: " + ", ".join(sorted(VALUE_FUNCTIONS)))
            return Call(node.func.id, tuple(self.value(a) for a in node.args))
        if isinstance(node, (ast.List, ast.Tuple)):
            return ListOf(tuple(self.value(v) for v in node.elts))
        if isinstance(node, ast.IfExp):
            return IfElse(self.condition(node.test), self.value(node.body), self.value(node.orelse))
        return self.operand(node)


def _parse(text: str, mode: str, vocabulary: Vocabulary, parameters: dict[str, Any],
           extra_facts: dict[str, FactSpec] | None = None):
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise ExprError(f"cannot parse {text.strip()!r}: {error.msg}", "conditions look like: a.b > 0.9 and c.d == \"x\"") from None
    parser = _Parser(vocabulary, parameters, extra_facts or {})
    return parser.condition(tree.body) if mode == "condition" else parser.value(tree.body)


def parse_condition(text, vocabulary, parameters, extra_facts=None):
    return _parse(text, "condition", vocabulary, parameters, extra_facts)


def parse_value(text, vocabulary, parameters, extra_facts=None):
    return _parse(text, "value", vocabulary, parameters, extra_facts)


# ---------------------------------------------------------------- walking


def facts_of(node) -> Iterator[str]:
    """Every fact path a node refers to, in order of appearance (may repeat)."""
    if isinstance(node, Fact):
        yield node.path
    elif isinstance(node, (Cmp, Arith)):
        yield from facts_of(node.left)
        yield from facts_of(node.right)
    elif isinstance(node, (OneOf, Contains, Known, Needs)):
        yield node.fact.path
    elif isinstance(node, (And, Or, ListOf)):
        for item in node.items:
            yield from facts_of(item)
    elif isinstance(node, Not):
        yield from facts_of(node.item)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from facts_of(arg)
    elif isinstance(node, IfElse):
        for part in (node.condition, node.then, node.otherwise):
            yield from facts_of(part)


def unique_facts(node) -> tuple[str, ...]:
    return tuple(dict.fromkeys(facts_of(node)))


def to_nnf(node, negate: bool = False):
    """Push `not` to the leaves (De Morgan, flipped comparisons); the backend has no negation."""
    if isinstance(node, Not):
        return to_nnf(node.item, not negate)
    if isinstance(node, (And, Or)):
        items = tuple(to_nnf(i, negate) for i in node.items)
        flip = isinstance(node, And) == negate
        return Or(items) if flip else And(items)
    if not negate:
        return node
    if isinstance(node, Cmp):
        return Cmp(NEGATED_OP[node.op], node.left, node.right)
    if isinstance(node, (OneOf, Contains, Known)):
        return type(node)(*[getattr(node, f) for f in node.__dataclass_fields__ if f != "negated"], negated=not node.negated)
    raise TypeError(node)


def to_dnf(node, limit: int = 64) -> list[list]:
    """Conjunctions of leaves whose disjunction is `node` (already in NNF)."""
    if isinstance(node, And):
        terms = [[]]
        for item in node.items:
            terms = [a + b for a in terms for b in to_dnf(item, limit)]
            if len(terms) > limit:
                raise ExprError(f"condition expands to more than {limit} alternatives", "split the rule in two")
        return terms
    if isinstance(node, Or):
        return [t for item in node.items for t in to_dnf(item, limit)]
    return [[node]]


# ---------------------------------------------------------------- evaluation (three-valued)

# KNOWN: has a value. MISSING: an input fact not given. ABSENT: a derived fact no rule can
# produce. UNKNOWN: a derived fact whose producing rules could not be decided.
KNOWN, MISSING, ABSENT, UNKNOWN = "known", "missing", "absent", "unknown"
Lookup = Callable[[str], tuple[str, Any]]   # path -> (status, value)


class Missing(Exception):
    """A value expression needs facts that are not known."""

    def __init__(self, paths):
        super().__init__(", ".join(paths))
        self.paths = tuple(paths)


def evaluate(node, lookup: Lookup) -> bool | None:
    """Kleene logic: True, False, or None when unknown facts decide it.

    An input fact not given makes comparisons unknown, but `known()` of it is plainly false.
    A derived fact that no rule could produce is absent: comparisons on it are false.
    """
    if isinstance(node, And):
        results = [evaluate(i, lookup) for i in node.items]
        return False if False in results else (None if None in results else True)
    if isinstance(node, Or):
        results = [evaluate(i, lookup) for i in node.items]
        return True if True in results else (None if None in results else False)
    if isinstance(node, Not):
        result = evaluate(node.item, lookup)
        return None if result is None else not result
    if isinstance(node, Known):
        status, _ = lookup(node.fact.path)
        if status == UNKNOWN:
            return None
        return (status == KNOWN) != node.negated
    if isinstance(node, Needs):
        status, _ = lookup(node.fact.path)
        return True if status == KNOWN else (False if status == ABSENT else None)
    if isinstance(node, Cmp):
        statuses, values = [], []
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
    if isinstance(node, (OneOf, Contains)):
        status, value = lookup(node.fact.path)
        if status != KNOWN:
            return False if status == ABSENT else None
        hit = value in node.values if isinstance(node, OneOf) else node.item in value
        return hit != node.negated
    raise TypeError(f"not a condition: {node!r}")


def undecided_by(node, lookup: Lookup) -> list[str]:
    """The facts that leave `node` unknown: those in the leaves that evaluate to None, skipping
    branches already decided (so `missing(x) or x == false` does not ask for x when x is missing)."""
    if evaluate(node, lookup) is not None:
        return []
    if isinstance(node, (And, Or)):
        return [p for item in node.items for p in undecided_by(item, lookup)]
    if isinstance(node, Not):
        return undecided_by(node.item, lookup)
    return [p for p in facts_of(node) if lookup(p)[0] in (MISSING, UNKNOWN)]


def witnesses(node, lookup: Lookup) -> list:
    """The leaves that made a true condition true (first true branch of each `or`)."""
    if isinstance(node, And):
        return [leaf for item in node.items for leaf in witnesses(item, lookup)]
    if isinstance(node, Or):
        for item in node.items:
            if evaluate(item, lookup) is True:
                return witnesses(item, lookup)
        return []
    return [node]


def value_of(node, lookup: Lookup):
    """Compute a value expression; raises Missing naming the facts it lacks."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Fact):
        status, value = lookup(node.path)
        if status != KNOWN:
            raise Missing([node.path])
        return value
    if isinstance(node, ListOf):
        return [value_of(i, lookup) for i in node.items]
    if isinstance(node, IfElse):
        decided = evaluate(node.condition, lookup)
        if decided is None:
            raise Missing(undecided_by(node.condition, lookup))
        return value_of(node.then if decided else node.otherwise, lookup)
    if isinstance(node, Arith):
        missing, operands = [], []
        for side in (node.left, node.right):
            try:
                operands.append(value_of(side, lookup))
            except Missing as m:
                missing.extend(m.paths)
        if missing:
            raise Missing(missing)
        a, b = operands
        if node.op in ("/", "//") and b == 0:
            raise Missing([f"{_label(node.right)} (is zero)"])
        return _ARITH[node.op](a, b)
    if isinstance(node, Call):
        if node.fn == "coalesce":
            missing = []
            for arg in node.args:
                try:
                    return value_of(arg, lookup)
                except Missing as m:
                    missing.extend(m.paths)
            raise Missing(missing)
        missing, args = [], []
        for arg in node.args:
            try:
                args.append(value_of(arg, lookup))
            except Missing as m:
                missing.extend(m.paths)
        if missing:
            raise Missing(missing)
        return VALUE_FUNCTIONS[node.fn][0](*args)
    raise TypeError(node)


def _label(node) -> str:
    if isinstance(node, Fact):
        return node.path
    if isinstance(node, Const):
        return node.parameter or repr(node.value)
    return "value"


# ---------------------------------------------------------------- display


def render(node, values: dict[str, Any] | None = None) -> str:
    """Source-like text; with `values`, each known fact is followed by its value: `x (0.93) > 0.9`."""
    def fact(path):
        if values is not None and path in values:
            return f"{path} ({fmt(values[path])})"
        return path

    def side(n):
        if isinstance(n, Fact):
            return fact(n.path)
        if isinstance(n, Const):
            shown = fmt(n.value, quote=True)
            return f"{n.parameter}={shown}" if n.parameter else shown
        return render(n, values)

    if isinstance(node, And):
        return " and ".join(_group(i, render(i, values)) for i in node.items)
    if isinstance(node, Or):
        return " or ".join(_group(i, render(i, values)) for i in node.items)
    if isinstance(node, Not):
        return f"not {_group(node.item, render(node.item, values))}"
    if isinstance(node, Cmp):
        if node.op == "==" and node.right == Const(True):     # a bool fact on its own
            return side(node.left)
        return f"{side(node.left)} {node.op} {side(node.right)}"
    if isinstance(node, OneOf):
        return f"{fact(node.fact.path)} {'not in' if node.negated else 'in'} [{', '.join(fmt(v, True) for v in node.values)}]"
    if isinstance(node, Contains):
        return f"{fmt(node.item, True)} {'not in' if node.negated else 'in'} {fact(node.fact.path)}"
    if isinstance(node, Known):
        return f"{'missing' if node.negated else 'known'}({fact(node.fact.path)})"
    if isinstance(node, Arith):
        return f"{side(node.left)} {node.op} {side(node.right)}"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(side(a) for a in node.args)})"
    if isinstance(node, ListOf):
        return "[" + ", ".join(side(a) for a in node.items) + "]"
    if isinstance(node, IfElse):
        return f"{side(node.then)} if {render(node.condition, values)} else {side(node.otherwise)}"
    return side(node)


def _group(node, text: str) -> str:
    return f"({text})" if isinstance(node, (And, Or)) else text


def fmt(value: Any, quote: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    if isinstance(value, str):
        return f'"{value}"' if quote else value
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v, quote) for v in value) + "]"
    return str(value)


_WORDS = {"<": "is below", "<=": "is at most", ">": "is above", ">=": "is at least", "==": "is", "!=": "is not"}


def describe(node) -> str:
    """A condition in words: `telemetry.memory_used_ratio is above 0.9 (capacity_threshold)`."""
    def side(n):
        if isinstance(n, Fact):
            return n.path
        if isinstance(n, Const):
            return fmt(n.value, quote=isinstance(n.value, str)) + (f" ({n.parameter})" if n.parameter else "")
        return render(n)

    if isinstance(node, And):
        return " and ".join(_group(i, describe(i)) for i in node.items)
    if isinstance(node, Or):
        return "either " + " or ".join(_group(i, describe(i)) for i in node.items)
    if isinstance(node, Not):
        return f"it is not so that {describe(node.item)}"
    if isinstance(node, Cmp):
        if node.op == "==" and node.right == Const(True):
            return f"{side(node.left)} holds"
        if node.op == "==" and node.right == Const(False):
            return f"{side(node.left)} does not hold"
        return f"{side(node.left)} {_WORDS[node.op]} {side(node.right)}"
    if isinstance(node, OneOf):
        return f"{node.fact.path} is {'none' if node.negated else 'one'} of {', '.join(fmt(v, True) for v in node.values)}"
    if isinstance(node, Contains):
        return f"{node.fact.path} {'does not include' if node.negated else 'includes'} {fmt(node.item, True)}"
    if isinstance(node, Known):
        return f"{node.fact.path} is {'not given' if node.negated else 'known'}"
    if isinstance(node, Needs):
        return f"{node.fact.path} is known"
    return render(node)
