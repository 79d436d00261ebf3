"""Nodes and values as text: source-like (`render`), in words (`describe`), and single values (`fmt`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

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
    Node,
    Not,
    OneOf,
    Or,
)
from kbopt.engine.lang.operators import BOOLEAN, COMPARISONS


def render(node: Node, values: dict[str, Any] | None = None) -> str:
    """Source-like text; with `values`, each known fact is followed by its value: `x (0.93) > 0.9`."""
    def fact(path: str) -> str:
        if values is not None and path in values:
            return f"{path} ({fmt(values[path])})"
        return path
    return _render(node, fact)


_SLOT = "\x00"        # marks a fact's place in a rendered template; never in a rendered node's own text


def render_template(node: Node) -> Callable[[dict[str, Any]], str]:
    """`lambda values: render(node, values)`, with the text that does not depend on the values
    rendered once: what changes per advice is only each fact's value after its name."""
    if _SLOT in render(node):      # a literal holding the marker (never in practice): render each time
        return lambda values: render(node, values)
    segments = tuple(_render(node, lambda path: _SLOT + path + _SLOT).split(_SLOT))
    slots = tuple(range(1, len(segments), 2))      # odd segments are fact paths

    def filled(values: dict[str, Any]) -> str:
        parts = list(segments)
        for index in slots:
            path = segments[index]
            if path in values:
                parts[index] = f"{path} ({fmt(values[path])})"
        return "".join(parts)
    return filled


def _render(node: Node, fact: Callable[[str], str]) -> str:
    """Source-like text, each fact written as `fact(path)` says."""
    def nested(n: Node) -> str:
        return _render(n, fact)

    def side(n: Node) -> str:
        match n:
            case Fact(path=path):
                return fact(path)
            case Const(value=value, parameter=parameter):
                shown = fmt(value, quote=True)
                return f"{parameter}={shown}" if parameter else shown
            case _:
                return nested(n)

    match node:
        case And(items=items) | Or(items=items):
            joiner = BOOLEAN["and" if isinstance(node, And) else "or"].symbol
            return f" {joiner} ".join(_group(i, nested(i)) for i in items)
        case Not(item=item):
            return f"{BOOLEAN['not'].symbol} {_group(item, nested(item))}"
        case Cmp(op=op, left=left, right=right):
            if op == "==" and right == Const(True):     # a bool fact on its own
                return side(left)
            return f"{side(left)} {COMPARISONS[op].symbol} {side(right)}"
        case OneOf(fact=f, values=items, negated=negated):
            return f"{fact(f.path)} {'not in' if negated else 'in'} [{', '.join(fmt(v, True) for v in items)}]"
        case Contains(fact=f, item=item, negated=negated):
            return f"{fmt(item, True)} {'not in' if negated else 'in'} {fact(f.path)}"
        case Known(fact=f, negated=negated):
            return f"{'missing' if negated else 'known'}({fact(f.path)})"
        case Needs(fact=f):             # added by the loader, never written: it reads as known()
            return f"known({fact(f.path)})"
        case Arith(op=op, left=left, right=right):
            return f"{side(left)} {op} {side(right)}"
        case Call(fn=fn, args=args):
            return f"{fn}({', '.join(side(a) for a in args)})"
        case ListOf(items=items):
            return "[" + ", ".join(side(a) for a in items) + "]"
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            return f"{side(then)} if {nested(condition)} else {side(otherwise)}"
        case Fact() | Const():
            return side(node)
        case _ as unreachable:
            assert_never(unreachable)


def _group(node: Condition, text: str) -> str:
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


def describe(node: Node) -> str:
    """A condition in words: `telemetry.memory_used_ratio is above 0.9 (capacity_threshold)`."""
    def side(n: Node) -> str:
        match n:
            case Fact(path=path):
                return path
            case Const(value=value, parameter=parameter):
                return fmt(value, quote=isinstance(value, str)) + (f" ({parameter})" if parameter else "")
            case _:
                return render(n)

    match node:
        case And(items=items):
            return f" {BOOLEAN['and'].words} ".join(_group(i, describe(i)) for i in items)
        case Or(items=items):
            return "either " + f" {BOOLEAN['or'].words} ".join(_group(i, describe(i)) for i in items)
        case Not(item=item):
            return f"{BOOLEAN['not'].words} {describe(item)}"
        case Cmp(op=op, left=left, right=right):
            if op == "==" and right == Const(True):
                return f"{side(left)} holds"
            if op == "==" and right == Const(False):
                return f"{side(left)} does not hold"
            return f"{side(left)} {COMPARISONS[op].words} {side(right)}"
        case OneOf(fact=f, values=items, negated=negated):
            return f"{f.path} is {'none' if negated else 'one'} of {', '.join(fmt(v, True) for v in items)}"
        case Contains(fact=f, item=item, negated=negated):
            return f"{f.path} {'does not include' if negated else 'includes'} {fmt(item, True)}"
        case Known(fact=f, negated=negated):
            return f"{f.path} is {'not given' if negated else 'known'}"
        case Needs(fact=f):
            return f"{f.path} is known"
        case Fact() | Const() | Arith() | Call() | ListOf() | IfElse():
            return render(node)
        case _ as unreachable:
            assert_never(unreachable)
