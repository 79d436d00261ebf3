"""Rule text -> nodes: parsed with Python's `ast`, never evaluated by Python.

Names are dotted fact paths checked against the vocabulary, or the rule's own parameters; each
comparison is checked against the types of the facts it tests.
"""
from __future__ import annotations

import ast
import math
from typing import Any

from kbopt.engine.lang.errors import LIMIT, ExprError
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
    Not,
    OneOf,
    Or,
    Value,
    facts_of,
)
from kbopt.engine.lang.operators import ARITHMETIC, COMPARISONS, FUNCTIONS
from kbopt.kb.vocabulary import QUALITY_PREFIX, FactSpec, Vocabulary

# Limits of the language (docs/usage.md, Limits), each refused with an L007 diagnostic at load time, so that
# lint, advise and both evaluators agree and nothing beyond them reaches durable_rules' C core.
MAX_TEXT = 4000             # characters of one condition or value expression
MAX_DEPTH = 32              # nested operators: `not not not ...`, parentheses; the normal forms recurse on them
MAX_MEMBERS = 126           # literals of one `in [..]`: from 127, durable_rules' core was seen to crash (SIGSEGV)
MAX_EXACT = 2 ** 53         # the largest integers both evaluators compare exactly (durable_rules: doubles)

_COMPARISON_SYNTAX = {row.syntax: symbol for symbol, row in COMPARISONS.items()}
_ARITHMETIC_SYNTAX = {row.syntax: symbol for symbol, row in ARITHMETIC.items()}


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

    def lookup(self, path: str) -> FactSpec | None:
        return self.vocabulary.get(path) or self.extra.get(path)

    def spec(self, path: str) -> FactSpec:
        """The spec of a fact `name` has accepted."""
        found = self.lookup(path)
        assert found is not None, path
        return found

    # -- names and literals
    def name(self, node: ast.AST) -> Fact | Const:
        dotted = _dotted(node)
        if dotted is None:
            raise ExprError(f"unsupported expression {ast.unparse(node)!r}")
        if dotted in ("true", "True"):
            return Const(True)
        if dotted in ("false", "False"):
            return Const(False)
        if "." not in dotted:
            if dotted in self.parameters:
                return Const(bounded(self.parameters[dotted], f"the parameter {dotted}"), parameter=dotted)
            import difflib  # only to suggest a name on an error path
            close = difflib.get_close_matches(dotted, list(self.parameters), n=1)
            raise ExprError(f"unknown name {dotted!r}", f"did you mean the parameter '{close[0]}'?" if close else
                            "a bare name is a parameter: declare it under `parameters:` or in rules/parameters.yaml; "
                            "facts are dotted (section.name)")
        if self.lookup(dotted) is None:
            hint = self.vocabulary.suggest(dotted)
            raise ExprError(f"unknown fact {dotted!r}", f"did you mean '{hint}'?" if hint else "see `kbopt schema facts`")
        return Fact(dotted)

    def literal(self, node: ast.AST) -> Const | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return Const(bounded(node.value, ast.unparse(node)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, (int, float)):
            return Const(bounded(-node.operand.value, ast.unparse(node)))
        return None

    def operand(self, node: ast.AST) -> Fact | Const:
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
    def condition(self, node: ast.AST) -> Condition:
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
            for op, right in zip(node.ops, node.comparators, strict=True):
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

    def comparison(self, left_node: ast.expr, op_node: ast.cmpop, right_node: ast.expr) -> Condition:
        if isinstance(op_node, (ast.In, ast.NotIn)):
            return self.membership(left_node, right_node, isinstance(op_node, ast.NotIn))
        op = _COMPARISON_SYNTAX.get(type(op_node))
        if op is None:
            raise ExprError(f"unsupported comparison {type(op_node).__name__}")
        left, right = self.operand(left_node), self.operand(right_node)
        if isinstance(left, Fact):
            fact, other = left, right
        elif isinstance(right, Fact):
            fact, other, op = right, left, COMPARISONS[op].converse
        else:
            raise ExprError("a comparison needs at least one fact")
        self.check_types(fact, op, other)
        return Cmp(op, fact, other)

    def check_types(self, fact: Fact, op: str, other: Fact | Const) -> None:
        spec = self.spec(fact.path)
        if spec.type == "list":
            raise ExprError(f"{fact.path} is a list", f'test membership instead: "fp8" in {fact.path}')
        if COMPARISONS[op].equality and spec.is_float:
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
            if not COMPARISONS[op].equality or spec.type != "version":
                return
        if spec.type == "bool":
            if not isinstance(value, bool) or not COMPARISONS[op].equality:
                raise ExprError(f"{fact.path} is true or false", f"write {fact.path} or not {fact.path}")
            return
        if spec.type in ("enum", "string"):
            if not isinstance(value, str):
                raise ExprError(f"{fact.path} is a {spec.type} fact compared with {value!r}")
            if not COMPARISONS[op].equality:
                raise ExprError(f"'{op}' on {fact.path}, a {spec.type} fact", "use == or != or in [..]")
            if spec.type == "enum" and value not in spec.values:
                raise ExprError(f"{value!r} is not a value of {fact.path}", "one of: " + ", ".join(spec.values))

    def membership(self, left_node: ast.expr, right_node: ast.expr, negated: bool) -> OneOf | Contains:
        left = self.operand(left_node)
        if isinstance(right_node, (ast.List, ast.Tuple)):
            if not isinstance(left, Fact):
                raise ExprError("`x in [..]` needs a fact on the left")
            if len(right_node.elts) > MAX_MEMBERS:
                raise ExprError(f"`in [..]` with {len(right_node.elts)} values; at most {MAX_MEMBERS}",
                                "split it: `x in [..] or x in [..]`, or test a range with < and >", LIMIT)
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
    def value(self, node: ast.AST) -> Value:
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC_SYNTAX:
            return Arith(_ARITHMETIC_SYNTAX[type(node.op)], self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in FUNCTIONS or node.keywords:
                raise ExprError(f"unknown function {node.func.id!r}", "one of: " + ", ".join(sorted(FUNCTIONS)))
            function, given = FUNCTIONS[node.func.id], len(node.args)
            if given < function.least or (function.most is not None and given > function.most):
                raise ExprError(f"{node.func.id}() takes {function.takes()}, not {given}", f"{node.func.id}: {function.words}")
            return Call(node.func.id, tuple(self.value(a) for a in node.args))
        if isinstance(node, (ast.List, ast.Tuple)):
            return ListOf(tuple(self.value(v) for v in node.elts))
        if isinstance(node, ast.IfExp):
            return IfElse(self.condition(node.test), self.value(node.body), self.value(node.orelse))
        return self.operand(node)


def bounded(value: Any, what: str) -> Any:
    """A number both evaluators hold exactly, or ExprError: NaN and infinities cannot be asserted into
    durable_rules, and its integers saturate at 2^63 where Python's do not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"{what} is {value}, not a finite number", code=LIMIT)
    if isinstance(value, int) and abs(value) > MAX_EXACT:
        raise ExprError(f"{what} is beyond ±2^53, the largest integers kbopt compares exactly", code=LIMIT)
    return value


def _depth(tree: ast.AST) -> int:
    """How deeply `tree` nests, found without recursion (the tree may be too deep to recurse on)."""
    deepest, pending = 0, [(tree, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _expression(text: str) -> ast.expr:
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise ExprError(f"the expression is {len(text):,} characters long; at most {MAX_TEXT:,}",
                        "split the rule, or name a long list with a parameter", LIMIT)
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as error:
        shown = text if len(text) <= 200 else text[:200] + "..."
        raise ExprError(f"cannot parse {shown!r}: {error.msg}",
                        "conditions look like: a.b > 0.9 and c.d == \"x\"") from None
    except (RecursionError, MemoryError):       # Python's own parser gives up on deep nesting
        raise ExprError(f"nested more than {MAX_DEPTH} levels deep", "write it flatter", LIMIT) from None
    # The ast module nests each operand of a flat `a and b and c` at one level; each `not` or parenthesis adds one.
    if _depth(tree) > MAX_DEPTH:
        raise ExprError(f"nested more than {MAX_DEPTH} levels deep", "write it flatter: `not not x` is x", LIMIT)
    return tree


def parse_condition(text: str, vocabulary: Vocabulary, parameters: dict[str, Any],
                    extra_facts: dict[str, FactSpec] | None = None) -> Condition:
    return _Parser(vocabulary, parameters, extra_facts or {}).condition(_expression(text))


def parse_value(text: str, vocabulary: Vocabulary, parameters: dict[str, Any],
                extra_facts: dict[str, FactSpec] | None = None) -> Value:
    return _Parser(vocabulary, parameters, extra_facts or {}).value(_expression(text))
