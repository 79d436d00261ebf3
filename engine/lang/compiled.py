"""Conditions and value expressions compiled once per pack: the evaluators' fast path.

`evaluate()` and `value_of()` walk the expression tree on every call, dispatching on node types;
a pack's expressions never change, so the walk is done once per pack here. Two forms:

- closures (`compile_condition`, `compile_value`): cheap to build; the specification of the
  other form;
- generated Python functions (`_Generated`, `compile_chaining_value`): each condition as one
  function with its leaves inline, in two readings of the facts (the dict of known facts while
  chaining; the known facts and the derived statuses at the end), read without a call per
  fact. Dearer to build (about 100 us each), so used once a pack is hot (Pack.hot).

Both give the same Kleene truth value as `evaluate()` for every lookup (tests check all forms on
every built-in rule); `and`/`or` stop at the first value that decides them, which changes
nothing since a lookup has no side effects. A compiled value expression returns what
`value_of()` returns and raises the same `Missing` (same paths, same order).
"""
from __future__ import annotations

import math
import operator
import re
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple, assert_never

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
from kbopt.engine.lang.parse import MAX_EXACT

Check = Callable[[Lookup], bool | None]
DERIVED_PREFIX = "derived."              # the section of derived facts
Compute = Callable[[Lookup], Any]         # a value expression's value; raises Missing


# Generating and compiling Python source costs about 100 us a function, which a pack pays once;
# closures cost a microsecond to build and run a few times slower. A pack advises with closures
# first and with generated functions once it is used again and again (Pack.hot): a single cold
# `kbopt advise` compiles nothing, a batch compiles once. Both give the same values (tested).


def compile_condition(node: Condition) -> Check:
    """A condition as nested closures over a Lookup: the specification of the generated forms."""
    return _closure(node)


class _Generated:
    """Python source generated from a parsed condition, then compiled.

    Only the shape of the condition reaches the source: every fact path, literal and operator
    function is passed in the namespace by a generated name (`k3`, `a1`), never written into the
    text, so no string of a rule can become code. The functions compute exactly the closures'
    Kleene value (`_closure` below; a test checks both and evaluate() on every built-in rule);
    inlining the leaves saves the two Python calls per leaf that the closures cost.
    """

    def __init__(self, reading: Literal["chaining", "final"]) -> None:
        # chaining: the function reads a dict of the known facts, and a fact not in it is absent
        # when derived and missing when an input, as during chaining (nothing is unknown yet):
        # the evaluators' inner loop, without a call per fact. final: it reads the known facts
        # and the statuses of the derived facts no rule produced (absent or unknown), as
        # explaining the final facts does.
        self.reading = reading
        self.arguments = {"chaining": "known", "final": "known, status"}[reading]
        self.namespace: dict[str, Any] = {"KNOWN": KNOWN, "ABSENT": ABSENT, "UNKNOWN": UNKNOWN, "NONE": _NONE}
        # fact path -> the local variable holding its value (or NONE) in a generated chain,
        # which keeps each fact a rule reads in a local, not a dict read for every leaf
        self.locals: dict[str, str] = {}

    def name(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def function(self, node: Condition) -> Check:
        match node:
            case And() | Or():
                decisive = isinstance(node, Or)
                lines = ["    undecided = False"]
                for item in node.items:
                    lines += self.into(item, "r")
                    lines += [f"    if r is {decisive}:", f"        return {decisive}",
                              "    if r is None:", "        undecided = True"]
                lines.append(f"    return None if undecided else {not decisive}")
            case Not():
                lines = self.into(node.item, "r") + ["    return None if r is None else not r"]
            case Cmp() | OneOf() | Contains() | Known() | Needs():
                lines = self.into(node, "r") + ["    return r"]
            case _ as unreachable:
                assert_never(unreachable)
        check: Check = _define(f"def check({self.arguments}):\n" + "\n".join(lines) + "\n", "check", self.namespace)
        return check

    def applied(self, function: Callable[[Any, Any], Any], left: str, right: str) -> str:
        """An expression applying a binary operator: Python's own where it is one, else a call."""
        return _binary(function, left, right, lambda: self.name("a", function))

    def holds(self, node: Condition) -> str | None:
        """While chaining: an expression true exactly when the condition's value is True, or None
        in the final reading (`into` it). See `truth`."""
        return self.truth(node, True) if self.reading == "chaining" and _depth(node) <= _MAX_DEPTH else None

    def truth(self, node: Condition, wanted: bool) -> str:
        """One expression, true exactly when the condition's Kleene value is `wanted` (True or
        False), with every leaf inline and no call: an `and` is true when each item is, false
        when one is; an `or` the converse; a `not` is true when its item is false. Python's
        `and`/`or` stop early, as the functions of `function` do on a decisive value (a lookup
        has no side effects). A leaf whose fact is not known is false when the fact is absent
        (see `absent`), else undecided: neither true nor false."""
        match node:
            case And(items=items) | Or(items=items):
                joined = " and " if isinstance(node, And) == wanted else " or "
                return "(" + joined.join(self.truth(item, wanted) for item in items) + ")" if items else str(
                    isinstance(node, And) == wanted)
            case Not(item=item):
                return self.truth(item, not wanted)
            case Cmp(op=op, left=Fact(path=path), right=right):
                if isinstance(right, Const):
                    threshold, apply = self.name("k", right.value), COMPARISONS[op].apply
                    return self._leaf(path, lambda v: self.compared(apply, v, threshold, wanted), wanted,
                                      unguarded=apply is operator.eq)
                other = right.path
                key, other_key = self.name("k", path), self.name("k", other)
                test = self.compared(COMPARISONS[op].apply, "v", "w", wanted)
                if wanted:
                    return (f"((v := {self.value(path)}) is not NONE and (w := {self.value(other)}) "
                            f"is not NONE and {test})")
                return (f"(((v := {self.value(path)}) is NONE and {self.absent(path, key)}) or "
                        f"((w := {self.value(other)}) is NONE and {self.absent(other, other_key)}) or "
                        f"(v is not NONE and w is not NONE and {test}))")
            case OneOf(fact=Fact(path=path), values=values, negated=negated):
                choices = self.name("k", values)
                inside = " in " if negated != wanted else " not in "
                return self._leaf(path, lambda v: f"({v}{inside}{choices})", wanted, unguarded=inside == " in ")
            case Contains(fact=Fact(path=path), item=item, negated=negated):
                member = self.name("k", item)
                inside = " in " if negated != wanted else " not in "
                return self._leaf(path, lambda v: f"({member}{inside}{v})", wanted)
            case Needs(fact=Fact(path=path)):
                key = self.name("k", path)
                return self.known(path) if wanted else f"(not {self.known(path)} and {self.absent(path, key)})"
            case Known(fact=Fact(path=path), negated=negated):
                key = self.name("k", path)
                absent = self.absent(path, key)
                holds = self.known(path) if negated != wanted else self.not_known(path)
                if absent in ("True", "False"):       # two-valued: an input, or any fact while chaining
                    return holds
                return f"(({self.known(path)} or {absent}) and {holds})"
            case _ as unreachable:
                assert_never(unreachable)

    def _leaf(self, path: str, test: Callable[[str], str], wanted: bool, unguarded: bool = False) -> str:
        """`truth` of a leaf on one fact, `test(v)` an expression true when the leaf is `wanted`
        on the fact's value named `v`: the fact's local where it has one, else `v`, set from
        `known` once. `unguarded`: the test is false on NONE, which equals nothing but itself (an
        equality with a literal, a membership among literals), so that a local needs no test of
        being known first."""
        key = self.name("k", path)
        local = self.locals.get(path)
        if wanted and unguarded and local is not None:
            return test(local)
        value, v = (local, local) if local is not None else (f"(v := known.get({key}, NONE))", "v")
        if wanted:
            return f"({value} is not NONE and {test(v)})"
        absent = self.absent(path, key)
        if absent == "False":          # an input not given is missing: the leaf is undecided, not false
            return f"({value} is not NONE and {test(v)})"
        if absent == "True":           # while chaining a derived fact not there is absent: the leaf is false
            return f"({value} is NONE or {test(v)})"
        return f"(({value} is NONE and {absent}) or ({v} is not NONE and {test(v)}))"

    def compared(self, function: Callable[[Any, Any], Any], left: str, right: str, wanted: bool) -> str:
        """An expression true when the comparison's value is `wanted`. Python's own comparison
        operators give a bool on the values facts hold (numbers, text, booleans, lists), so
        theirs is used as it is or negated with `not` (never the converse operator, which a NaN
        would make false too); another function's value is tested for identity with `wanted`."""
        applied = self.applied(function, left, right)
        if function in _INFIX:
            return applied if wanted else f"(not {applied})"
        return f"({applied} is {wanted})"

    def value(self, path: str) -> str:
        """An expression for the fact's value, or NONE where it is not known."""
        local = self.locals.get(path)
        return local if local is not None else f"known.get({self.name('k', path)}, NONE)"

    def known(self, path: str) -> str:
        """An expression true when the fact is known."""
        local = self.locals.get(path)
        return f"({local} is not NONE)" if local is not None else f"({self.name('k', path)} in known)"

    def not_known(self, path: str) -> str:
        """An expression true when the fact is not known."""
        local = self.locals.get(path)
        return f"({local} is NONE)" if local is not None else f"({self.name('k', path)} not in known)"

    def absent(self, path: str, key: str) -> str:
        """An expression: is `path` (named `key`), not among the known facts, absent? An input not
        given is missing (undecided), never absent; a derived fact not produced is absent while
        chaining, and at the end unless it is unknown."""
        if not path.startswith(DERIVED_PREFIX):
            return "False"
        return "True" if self.reading == "chaining" else f"(status.get({key}) != UNKNOWN)"

    def unset(self, path: str, key: str) -> str:
        """A leaf's value when its fact is not known: false when absent, else undecided."""
        absent = self.absent(path, key)
        return {"True": "False", "False": "None"}.get(absent, f"(False if {absent} else None)")

    def into(self, node: Condition, target: str) -> list[str]:
        """Lines that set `target` to the node's truth value (a nested and/or/not: a call)."""

        def value_or(path: str, test: str) -> list[str]:
            key = self.name("k", path)
            return [f"    v = known.get({key}, NONE)",
                    f"    {target} = ({test}) if v is not NONE else {self.unset(path, key)}"]
        match node:
            case Cmp(op=op, left=Fact(path=path), right=right):
                if isinstance(right, Const):
                    return value_or(path, self.applied(COMPARISONS[op].apply, "v", self.name("k", right.value)))
                other = right.path
                key, other_key = self.name("k", path), self.name("k", other)
                return [f"    v, w = known.get({key}, NONE), known.get({other_key}, NONE)",
                        "    if v is NONE or w is NONE:",
                        f"        {target} = False if (v is NONE and {self.absent(path, key)}) or "
                        f"(w is NONE and {self.absent(other, other_key)}) else None",
                        "    else:",
                        f"        {target} = {self.applied(COMPARISONS[op].apply, 'v', 'w')}"]
            case OneOf(fact=Fact(path=path), values=values, negated=negated):
                return value_or(path, f"(v in {self.name('k', values)}) != {negated}")
            case Contains(fact=Fact(path=path), item=item, negated=negated):
                return value_or(path, f"({self.name('k', item)} in v) != {negated}")
            case Needs(fact=Fact(path=path)):
                key = self.name("k", path)
                return [f"    {target} = True if {key} in known else {self.unset(path, key)}"]
            case Known(fact=Fact(path=path), negated=negated):
                key = self.name("k", path)
                known = f"(({key} in known) != {negated})"
                if self.absent(path, key) in ("True", "False"):
                    return [f"    {target} = {known}"]
                return [f"    {target} = {known} if ({key} in known or {self.absent(path, key)}) else None"]
            case And() | Or() | Not():
                return [f"    {target} = {self.name('f', self.function(node))}({self.arguments})"]
            case _ as unreachable:
                assert_never(unreachable)


_NONE = object()       # what a generated chaining check reads for a fact not known

# The operator functions that are exactly a Python operator: written as the operator (no call).
_INFIX = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.eq: "==",
          operator.ne: "!=", operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
          operator.floordiv: "//"}


def _binary(function: Callable[[Any, Any], Any], left: str, right: str, named: Callable[[], str]) -> str:
    """`(left OP right)` where `function` is an operator of _INFIX, else `name(left, right)`."""
    symbol = _INFIX.get(function)
    return f"({left} {symbol} {right})" if symbol is not None else f"{named()}({left}, {right})"


def _define(source: str, name: str, namespace: dict[str, Any]) -> Any:
    """The function `name` that generated `source` defines, its free names bound in `namespace`.

    Rules never run code: the source is built from this module's templates, and everything that
    comes from a rule (fact paths, literals, parameter values) is in `namespace` under a
    generated name, never in the text. As a net under that, the compiled code is refused if it
    holds a text constant (a string or bytes literal: every one becomes a constant of its code
    object) or names anything (a variable, global or attribute) that is neither generated here
    nor one of the few this module writes, so not even a future slip can put a rule's text into
    code. The net reads the code objects rather than walking the syntax tree: the same two
    checks, and compiling a hot pack (about 900 functions, once in each batch worker) costs a
    third of what it did with the walk."""
    code = compile(source, f"<kbopt {name}>", "exec")
    _refuse_foreign(code, namespace)
    scope = dict(namespace)
    exec(code, scope)   # checked above: templates and generated names only
    # taken out of the scope that is its globals: left in, the function and its globals would
    # hold each other, a reference cycle that only the garbage collector frees when a compiled
    # form is let go (a kept answer evicted, a pack turning hot)
    return scope.pop(name)


def _refuse_foreign(code: types.CodeType, namespace: dict[str, Any]) -> None:
    for constant in code.co_consts:
        _refuse_text(constant, namespace)
    for name in (*code.co_names, *code.co_varnames, *code.co_cellvars, *code.co_freevars):
        if not (name in namespace or name in _WRITTEN or _LOCAL.fullmatch(name)):
            raise AssertionError(f"generated source names {name!r}")


def _refuse_text(constant: object, namespace: dict[str, Any]) -> None:
    """A constant of generated code: no text, also where the compiler folded literals into a
    tuple or frozenset (`x in ('a', 'b')`), and a nested function's code is checked whole."""
    if isinstance(constant, (str, bytes)):
        raise AssertionError(f"generated source holds a text literal: {constant!r}")
    if isinstance(constant, (tuple, frozenset)):
        for item in constant:
            _refuse_text(item, namespace)
    elif isinstance(constant, types.CodeType):
        _refuse_foreign(constant, namespace)


_WRITTEN = frozenset({"known", "status", "v", "w", "r", "out", "owns", "undecided", "check", "compute", "chain", "fired",
                      "conclude", "values", "Exception", "c", "map", "decide", "fire", "firings",
                      "get", "add", "append"})       # the methods the templates call: known.get, fired.add, out.append
_LOCAL = re.compile(r"[rux][0-9]+")      # the generated functions' own locals: r0, u1, x2, ...


ChainingCheck = Callable[[dict[str, Any]], bool | None]


def compile_chaining_check(node: Condition, generated: bool = True) -> ChainingCheck:
    """The condition's value during chaining, read from the dict of known facts (inputs and the
    derived facts produced so far): `compile_condition(node)` with the chaining lookup, faster."""
    if not generated:
        closure = _closure(node)

        def check_known(known: dict[str, Any]) -> bool | None:
            def lookup(path: str) -> tuple[str, Any]:
                if path in known:
                    return KNOWN, known[path]
                return (ABSENT, None) if path.startswith(DERIVED_PREFIX) else (MISSING, None)
            return closure(lookup)
        return check_known
    check: ChainingCheck = _Generated("chaining").function(node)   # type: ignore[assignment]  # takes the dict
    return check


class Acceptance(NamedTuple):
    """A quick test of a derived value's type: what value_problem (engine/evaluators/derivation.py)
    accepts without a word. A bool; a text among an enum's `members`; a finite float or an int
    (not a bool) within ±MAX_EXACT; for any other type, nothing (value_problem then says why).
    Run as a function (`test`) or written inline into a generated chain (`expression`)."""
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

    def expression(self, generated: _Generated, value: str) -> str:
        """`test` as an expression on the variable `value`, without a call of Python code (a
        finite float is one strictly between the infinities, which a NaN is not)."""
        match self.kind:
            case "bool":
                return f"({value} is True or {value} is False)"
            case "enum":
                text, kind = generated.name("k", str), generated.name("k", type)
                return f"({kind}({value}) is {text} and {value} in {generated.name('k', self.members)})"
            case "number":
                kind, real, whole = generated.name("k", type), generated.name("k", float), generated.name("k", int)
                infinity, exact = generated.name("k", math.inf), generated.name("k", MAX_EXACT)
                return (f"(((c := {kind}({value})) is {real} and -{infinity} < {value} < {infinity}) or "
                        f"(c is {whole} and -{exact} <= {value} <= {exact}))")
            case "nothing":
                return "False"
            case _ as unreachable:
                assert_never(unreachable)


# a derived fact, its fast path, a quick type test, its expression, and whether it is the pack's
# only derivation of the fact (no other rule, nor this one twice, derives it)
FastDerive = tuple[str, "FastCompute | None", Acceptance, Value, bool]
ChainStep = tuple[str, Any, Condition, tuple[FastDerive, ...]]   # a rule's id, the rule, its fire condition, what it derives
Conclude = Callable[[Any], Any]                          # DerivedFacts.conclude: derive what a rule derives, exactly
ChainRunner = Callable[[dict[str, Any], dict[str, tuple[Any, str]], set[str], Conclude], None]
CycleRunner = Callable[[dict[str, Any], set[str], Conclude], None]   # rules that feed each other


def compile_chain(components: list[ChainStep | CycleRunner]) -> ChainRunner:
    """A whole schedule (the reference evaluator's) as one generated function `chain(known,
    values, fired, conclude)`: each rule alone in its component in turn, its condition inline
    (as compile_chaining_check reads it), fired when it holds; a component of rules that feed
    each other is called as the function given for it.

    A fired rule's derived facts are computed by their fast paths (compile_chaining_value) and
    set in `known` and `values` (DerivedFacts') when every one computes without trouble, passes
    its quick type test and is new (one already set to an equal value stays as it is; a fact no
    other derivation of the pack sets is not looked for, and a constant its type admits is not
    tested); otherwise `conclude(rule)` derives them exactly, with its errors (it finds those
    already set here equal to its own). The same firings and values, in the same order, as
    checking each rule's compiled condition in turn and concluding it (a test checks both on
    every example), without two calls and a loop step per rule.

    Each fact a condition reads is held in a local (`x0`, `x1`: its value, or NONE), read from
    `known` once at the start and set again wherever the chain sets the fact (its fast path, or
    after `conclude` or a cycle, which set `known` themselves): a leaf reads a local, not the dict."""
    generated = _Generated("chaining")
    read = dict.fromkeys(path for component in components if isinstance(component, tuple) for path in facts_of(component[2]))
    generated.locals = {path: f"x{index}" for index, path in enumerate(read)}
    # one C loop (map over the dict's get) rather than a get per fact
    lines = [f"    {', '.join(generated.locals.values())}, = map(known.get, {generated.name('k', tuple(read))}, "
             f"{generated.name('k', (_NONE,) * len(read))})"] if read else []
    lines.append("    fire = fired.add")
    derived_locals = [(path, local) for path, local in generated.locals.items() if path.startswith(DERIVED_PREFIX)]
    for component in components:
        if not isinstance(component, tuple):
            lines.append(f"    {generated.name('w', component)}(known, fired, conclude)")
            lines += _reloaded(generated, derived_locals)      # what the cycle derived
            continue
        rule_id, rule, condition, derives = component
        # An `and` is true when each item is: its items are tested in turn, each nested in the
        # last, and the first that is not true skips the rest (as the `and` would return).
        items = condition.items if isinstance(condition, And) and 0 < len(condition.items) <= _MAX_NESTED else (condition,)
        depth, present = 0, set[str]()
        for item in items:
            shown = _present_if_true(item)
            if isinstance(item, (Needs, Known)) and shown and shown <= present:
                continue           # a fact an earlier item held true is known: the loader's needs(f) of a compared fact
            present |= shown
            holds = generated.holds(item)
            if holds is None:
                lines += ["    " * depth + line for line in generated.into(item, "r")]
                holds = "r is True"
            lines.append("    " * depth + f"    if {holds}:")
            depth += 1
        key = generated.name("k", rule_id)
        exact = [f"    conclude({generated.name('k', rule)})",
                 *_reloaded(generated, [(path, generated.locals[path]) for path, *_ in derives if path in generated.locals])]
        # A rule alone in its component is checked once a run, and a run's `fired` never holds
        # a rule of the chain beforehand (a Rerun's holds the rules it does not run again): no
        # test of `fired` before adding to it.
        lines.append("    " * depth + f"    fire({key})")
        lines += ["    " * depth + line for line in _fast_derives(generated, key, derives, exact)]
    lines.append("    return None")
    # NONE as a local (a default argument): the chain reads it at nearly every leaf
    chain: ChainRunner = _define("def chain(known, values, fired, conclude, NONE=NONE):\n" + "\n".join(lines) + "\n", "chain",
                                 generated.namespace)
    return chain


Firing = Callable[[dict[str, Any], dict[str, tuple[Any, str]], Conclude], None]


def compile_firings(steps: list[tuple[str, Any, tuple[FastDerive, ...]]]) -> dict[str, Firing]:
    """For each rule (its id, the rule, what it derives) that derives something, a generated
    function `firing(known, values, conclude)` that derives its facts as compile_chain's chain
    does once the rule fired: each by its fast path, set in `known` and `values`, or all of them
    by `conclude(rule)` wherever one falls short. For an evaluator that learns which rules fire
    from elsewhere (durable_rules). All of them are compiled at once, as functions nested in one."""
    generated = _Generated("chaining")
    deriving = [(rule_id, rule, derives) for rule_id, rule, derives in steps if derives]
    lines = ["def firings():"]
    for index, (rule_id, rule, derives) in enumerate(deriving):
        exact = [f"    conclude({generated.name('k', rule)})"]
        lines.append(f"    def r{index}(known, values, conclude, NONE=NONE):")
        lines += ["    " + line for line in _fast_derives(generated, generated.name("k", rule_id), derives, exact)]
        lines.append("        return None")
    lines.append(f"    return ({''.join(f'r{index}, ' for index in range(len(deriving)))})")
    made: Callable[[], tuple[Firing, ...]] = _define("\n".join(lines) + "\n", "firings", generated.namespace)
    return {rule_id: firing for (rule_id, *_), firing in zip(deriving, made(), strict=True)}


def _present_if_true(node: Condition) -> frozenset[str]:
    """The facts a condition's being true while chaining shows known: every leaf's fact (a leaf
    on a fact not known is false or undecided) but missing(f)'s, each item's of an `and`, those
    of every item of an `or`; none under a `not` (false on a fact not known)."""
    match node:
        case And(items=items):
            return frozenset().union(*map(_present_if_true, items))
        case Or(items=items):
            return frozenset.intersection(*map(_present_if_true, items)) if items else frozenset()
        case Not():
            return frozenset()
        case Cmp(left=left, right=right):
            return frozenset((left.path, right.path)) if isinstance(right, Fact) else frozenset((left.path,))
        case OneOf(fact=fact) | Contains(fact=fact) | Needs(fact=fact):
            return frozenset((fact.path,))
        case Known(fact=fact, negated=negated):
            return frozenset() if negated else frozenset((fact.path,))
        case _ as unreachable:
            assert_never(unreachable)


def _reloaded(generated: _Generated, paths: list[tuple[str, str]]) -> list[str]:
    """Lines (at the left margin) that read each fact's local again from `known`."""
    return [f"    {local} = known.get({generated.name('k', path)}, NONE)" for path, local in paths]


def _fast_derives(generated: _Generated, key: str, derives: tuple[FastDerive, ...], exact: list[str]) -> list[str]:
    """Lines (at the left margin) that set each derived fact from its fast path, each nested in
    the last's success, with `exact` (the exact derivation of them all, lines at the margin)
    wherever one falls short."""
    if not derives:
        return []
    path, fast, accepts, node, sole = derives[0]
    if fast is None:
        return exact
    target = generated.name("k", path)
    rest = _fast_derives(generated, key, derives[1:], exact)
    local = generated.locals.get(path)
    assignments = [f"values[{target}] = (v, {key})", f"known[{target}] = v", *([f"{local} = v"] if local is not None else [])]
    # A constant its type admits (most derived flags) needs nothing computed or tested; where no
    # other derivation sets the fact either, it is simply set.
    constant = node if isinstance(node, Const) and accepts.test()(node.value) else None
    if constant is not None and sole:
        return [f"    v = {generated.name('k', constant.value)}", *["    " + line for line in assignments], *rest]
    # A fact an earlier rule set to an equal value stays as it is, as conclude() leaves it; a
    # different value is conclude()'s error to raise. A fact only this derivation sets is not set yet.
    new = "" if sole else f"((w := values.get({target})) is None or w[0] == v)"
    if constant is not None:
        computed, test = [f"    v = {generated.name('k', constant.value)}"], new
    else:
        # The fast path's own expression, inline: the same value or exception without a call.
        inline = _chaining_expression(node, lambda value: generated.name("k", value))
        computed = ["    try:",
                    f"        v = {inline if inline is not None else generated.name('f', fast) + '(known)'}",
                    "    except Exception:",
                    "        v = NONE"]
        test = " and ".join(part for part in (f"v is not NONE and {accepts.expression(generated, 'v')}", new) if part)
    body = ["        " + line for line in assignments] if sole else ["        if w is None:", *["            " + line for line in assignments]]
    return [*computed, f"    if {test}:", *body, *["    " + line for line in rest], "    else:", *["    " + line for line in exact]]


_MAX_NESTED = 40     # an `and` of more items is called as one function: Python nests at most 100 blocks
_MAX_DEPTH = 20      # a condition nested deeper goes through `into` (Python's parser nests at most 200 brackets)


def _depth(node: Condition) -> int:
    match node:
        case And(items=items) | Or(items=items):
            return 1 + max((_depth(item) for item in items), default=0)
        case Not(item=item):
            return 1 + _depth(item)
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            return 1
        case _ as unreachable:
            assert_never(unreachable)


FinalCheck = Callable[[dict[str, Any], dict[str, str]], bool | None]
# A rule's own share of what leaves it undecided: the missing inputs it reads, and the unknown
# derived facts it reads (in the order it reads them).
Own = tuple[frozenset[str], tuple[str, ...]]
# decide(known, status, fired) -> ({rule id: True, False or None} for every rule not fired,
# [(rule id, *its Own) for every one of them undecided, in the order given])
FinalDecisions = Callable[[dict[str, Any], dict[str, str], set[str]],
                          tuple[dict[str, bool | None], list[tuple[str, frozenset[str], tuple[str, ...]]]]]


def compile_final_decisions(conditions: list[tuple[str, Condition]]) -> FinalDecisions:
    """Each rule's condition on the final facts (as compile_final_check reads them), for every
    rule not in `fired`, by one generated function `decide(known, status, fired)`: each
    condition inline as two expressions (is it false; else is it true; else undecided),
    without a call per rule, and for each rule left undecided its Own (compile_final_own; for a
    condition on one fact, that fact, without a call). A
    condition nested deeper than Python's parser allows in one expression is called as its own
    function."""
    generated = _Generated("final")
    # Each fact an inline condition reads is held in a local, read from `known` once at the start
    # by one C loop, as compile_chain does: a leaf reads a local, not the dict. Nothing changes
    # `known` while deciding, and a rule that fired costs only the loop's share of its facts.
    read = dict.fromkeys(path for _, condition in conditions if _depth(condition) <= _MAX_DEPTH
                         for path in facts_of(condition))
    generated.locals = {path: f"x{index}" for index, path in enumerate(read)}
    lines = ["    out = {}", "    owns = []"]
    if read:
        lines.append(f"    {', '.join(generated.locals.values())}, = map(known.get, {generated.name('k', tuple(read))}, "
                     f"{generated.name('k', (_NONE,) * len(read))})")
    for rule_id, condition in conditions:
        key = generated.name("k", rule_id)
        if _depth(condition) <= _MAX_DEPTH:
            # false first: most rules that did not fire are false, and so tested once
            value = (f"False if {generated.truth(condition, False)} else "
                     f"(True if {generated.truth(condition, True)} else None)")
        else:
            value = f"{generated.name('f', compile_final_check(condition))}(known, status)"
        paths = set(facts_of(condition))
        if len(paths) == 1:
            # One fact: undecided only while that fact is, so its Own is known beforehand.
            path = paths.pop()
            fixed = (rule_id, *((_NO_FACTS, (path,)) if path.startswith(DERIVED_PREFIX) else (frozenset((path,)), ())))
            owned = generated.name("k", fixed)
        else:
            owned = f"({key}, *{generated.name('f', compile_final_own(condition))}(known, status))"
        lines += [f"    if {key} not in fired:", f"        out[{key}] = r = {value}",
                  "        if r is None:", f"            owns.append({owned})"]
    lines.append("    return out, owns")
    decide: FinalDecisions = _define("def decide(known, status, fired):\n" + "\n".join(lines) + "\n", "decide",
                                     generated.namespace)
    return decide


def compile_final_own(node: Condition, generated: bool = True) -> Callable[[dict[str, Any], dict[str, str]], Own]:
    """The undecided facts of `node` (compile_final_undecided) told apart: the missing inputs as
    a set, the unknown derived facts in order without repeats."""
    undecided = compile_final_undecided(node, generated)
    paths = set(facts_of(node))
    if not any(path.startswith(DERIVED_PREFIX) for path in paths):      # inputs only: all missing
        return lambda known, status: (frozenset(undecided(known, status)), ())
    if all(path.startswith(DERIVED_PREFIX) for path in paths):          # derived only: all unknown
        return lambda known, status: (_NO_FACTS, tuple(dict.fromkeys(undecided(known, status))))
    return lambda known, status: own_of(undecided(known, status))


def own_of(undecided: list[str]) -> Own:
    """Undecided facts (undecided_by's, compile_final_undecided's) told apart: missing inputs,
    unknown derived facts."""
    missing: list[str] = []
    unknown: list[str] = []
    for path in undecided:
        (unknown if path.startswith(DERIVED_PREFIX) else missing).append(path)
    return frozenset(missing), tuple(dict.fromkeys(unknown))


_NO_FACTS: frozenset[str] = frozenset()


def compile_final_check(node: Condition, generated: bool = True) -> FinalCheck:
    """The condition's value on the final facts: the known facts, and the status (absent or
    unknown) of each derived fact no rule produced: `compile_condition(node)` with the final
    facts' lookup, without a call per fact."""
    if not generated:
        closure = _closure(node)

        def check_final(known: dict[str, Any], status: dict[str, str]) -> bool | None:
            def lookup(path: str) -> tuple[str, Any]:
                if path in known:
                    return KNOWN, known[path]
                return (status.get(path, ABSENT), None) if path.startswith(DERIVED_PREFIX) else (MISSING, None)
            return closure(lookup)
        return check_final
    check: FinalCheck = _Generated("final").function(node)   # type: ignore[assignment]  # takes the dicts
    return check


def _closure(node: Condition) -> Check:
    """The condition as nested closures: the generated functions' specification."""
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


FinalUndecided = Callable[[dict[str, Any], dict[str, str]], tuple[bool | None, list[str]]]


def compile_final_undecided(node: Condition, generated: bool = True) -> Callable[[dict[str, Any], dict[str, str]], list[str]]:
    """`logic.undecided_by` compiled, on the final facts (known facts and derived statuses, as
    compile_final_check reads them): the facts that leave `node` unknown, skipping branches
    already decided. Each leaf is evaluated once, and each and/or/not takes its value from its
    items' (an undecided `and` has no false item and an undecided `or` no true one, so every
    item counts, as in undecided_by)."""
    if generated:
        top: Callable[[dict[str, Any], dict[str, str]], list[str]] = _generated_final_undecided(node, top=True)
        return top
    walk = _final_undecided(node, generated)
    return lambda known, status: walk(known, status)[1]


_LEAVES = (Cmp, OneOf, Contains, Known, Needs)


def _generated_final_undecided(node: Condition, top: bool) -> Any:
    """_final_undecided as one generated function per and/or/not: each leaf inline, a nested
    and/or/not a call of its own generated function, the same facts in the same order (a test
    checks it on every built-in rule). `top`: it returns the facts alone (compile_final_undecided),
    else (value, facts) as _final_undecided's parts do."""
    generated = _Generated("final")

    def decided(value: str) -> str:
        return "        return []" if top else f"        return {value}, []"
    items = node.items if isinstance(node, (And, Or)) else (node.item,) if isinstance(node, Not) else (node,)
    lines: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, _LEAVES):
            lines += generated.into(item, f"r{index}")
        else:
            nested = generated.name("w", _generated_final_undecided(item, top=False))
            lines.append(f"    r{index}, u{index} = {nested}(known, status)")
        if isinstance(node, (And, Or)):         # the first decisive item settles it
            decisive = isinstance(node, Or)
            lines += [f"    if r{index} is {decisive}:", decided(str(decisive))]
    if isinstance(node, (And, Or)):          # no item decisive: decided when none is undecided (an empty one always)
        lines += ["    if " + " and ".join([f"r{index} is not None" for index in range(len(items))] or ["True"]) + ":",
                  decided(str(not isinstance(node, Or)))]
    else:                                       # a leaf, or not: decided whenever its item is
        lines += ["    if r0 is not None:", decided("(not r0)" if isinstance(node, Not) else "r0")]
    lines.append("    out = []")
    for index, item in enumerate(items):
        lines.append(f"    if r{index} is None:")
        if not isinstance(item, _LEAVES):
            lines.append(f"        out += u{index}")
            continue
        for path in facts_of(item):        # missing inputs, and unknown derived facts
            key = generated.name("k", path)
            unknown = f" and status.get({key}) == UNKNOWN" if path.startswith(DERIVED_PREFIX) else ""
            lines += [f"        if {key} not in known{unknown}:", f"            out.append({key})"]
        lines.append("        pass")
    lines.append("    return out" if top else "    return None, out")
    return _define("def undecided(known, status):\n" + "\n".join(lines) + "\n", "undecided", generated.namespace)


def _final_undecided(node: Condition, generated: bool) -> FinalUndecided:
    match node:
        case And() | Or():
            decisive = isinstance(node, Or)
            parts = tuple(_final_undecided(item, generated) for item in node.items)

            def branches(known: dict[str, Any], status: dict[str, str]) -> tuple[bool | None, list[str]]:
                facts: list[str] = []
                undecided = False
                for part in parts:
                    value, below = part(known, status)
                    if value is decisive:
                        return decisive, []
                    if value is None:
                        undecided = True
                        facts += below
                return (None, facts) if undecided else (not decisive, [])
            return branches
        case Not():
            inner = _final_undecided(node.item, generated)

            def negation(known: dict[str, Any], status: dict[str, str]) -> tuple[bool | None, list[str]]:
                value, below = inner(known, status)
                return (None, below) if value is None else (not value, [])
            return negation
        case Cmp() | OneOf() | Contains() | Known() | Needs():
            decide, paths = compile_final_check(node, generated), tuple(facts_of(node))
            derived = frozenset(p for p in paths if p.startswith(DERIVED_PREFIX))

            def leaf(known: dict[str, Any], status: dict[str, str]) -> tuple[bool | None, list[str]]:
                value = decide(known, status)
                if value is not None:
                    return value, []
                # missing inputs, and unknown derived facts
                return None, [p for p in paths if p not in known and (p not in derived or status.get(p) == UNKNOWN)]
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


FastCompute = Callable[[dict[str, Any]], Any]


def _undecided() -> Any:
    raise LookupError("an if-else condition is undecided")      # the fast path's caller asks the closure


def _first_computed(known: Mapping[str, Any], *alternatives: tuple[tuple[str, ...], Callable[[], Any]]) -> Any:
    """A coalesce on the fast path: the first alternative that computes. One that stops on a
    missing fact or an undecided if-else (a LookupError while one of its facts is unknown) gives
    way, as the closure's Missing does; anything else raises, and the caller asks the closure."""
    for facts, compute in alternatives:
        try:
            return compute()
        except LookupError:
            if all(path in known for path in facts):
                raise
    raise LookupError("no alternative computes")


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


def compile_chaining_value(node: Value) -> FastCompute | None:
    """A value expression as one generated Python expression over the dict of known facts: the
    fast path of a derivation while chaining. It raises (KeyError, ZeroDivisionError, ...)
    wherever the exact `compile_value` closure would raise Missing or an error (and where a
    coalesce's alternative divides by zero, which the closure passes over), and the caller then
    asks that closure, so only values computed without any trouble come from here. None
    where the expression has a shape the fast path does not cover (none of the built-in pack's:
    a coalesce with an if-else inside tries each alternative in turn). As in `_Generated`, only the shape
    reaches the source, never a rule's string."""
    namespace: dict[str, Any] = {}

    def name(value: Any) -> str:
        key = f"k{len(namespace)}"
        namespace[key] = value
        return key

    text = _chaining_expression(node, name)
    if text is None:
        return None
    compute: FastCompute = _define(f"def compute(known):\n    return {text}\n", "compute", namespace)
    return compute


def _chaining_expression(node: Value, name: Callable[[Any], str]) -> str | None:
    """compile_chaining_value's expression over `known`, each path, literal and function passed
    by the generated name `name` gives it; None for a shape the fast path does not cover."""
    return _expression(node, name)


def _expression(item: Value, name: Callable[[Any], str]) -> str | None:
    """_chaining_expression of one node: a module function, not a closure that calls itself, which
    would be a reference cycle (its cell holding it) left for the garbage collector each compile."""
    match item:
        case Const(value=value):
            return name(value)
        case Fact(path=path):
            return f"known[{name(path)}]"
        case Arith(op=op, left=left, right=right):
            a, b = _expression(left, name), _expression(right, name)
            function = ARITHMETIC[op].apply
            return None if a is None or b is None else _binary(function, a, b, lambda: name(function))
        case ListOf(items=items):
            parts = [_expression(i, name) for i in items]
            return None if None in parts else "[" + ", ".join(p for p in parts if p) + "]"
        case Call(fn=fn, args=args) if FUNCTIONS[fn].alternatives:
            # The first alternative whose facts are all known: one without alternatives or an
            # if-else inside computes exactly when they are (or raises, like the closure, and
            # the caller asks it); a division by zero, which the closure passes over, raises here.
            if not all(isinstance(arg, (Fact, Const)) or plain_value(arg) for arg in args[:-1]):
                # An alternative with an if-else or a coalesce inside: each is tried in turn,
                # and one that stops on a fact it lacks (or an undecided condition) gives way.
                parts = [_expression(arg, name) for arg in args]
                if None in parts:
                    return None
                tries = ", ".join(f"({name(unique_facts(arg))}, lambda: {part})" for arg, part in zip(args, parts, strict=True))
                return f"{name(_first_computed)}(known, {tries})"
            text = _expression(args[-1], name)
            for arg in reversed(args[:-1]):
                this, facts = _expression(arg, name), unique_facts(arg)
                if this is None or text is None:
                    return None
                text = f"({this} if {' and '.join(f'{name(p)} in known' for p in facts)} else {text})" if facts else this
            return text
        case Call(fn=fn, args=args):
            parts = [_expression(a, name) for a in args]
            return None if None in parts else f"{name(FUNCTIONS[fn].apply)}({', '.join(p for p in parts if p)})"
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            # The condition as while chaining (compile_chaining_check); undecided raises, and
            # the closure says what is missing.
            yes, no = _expression(then, name), _expression(otherwise, name)
            if yes is None or no is None:
                return None
            decide = name(compile_chaining_check(condition))
            return f"({yes} if (c := {decide}(known)) is True else {no} if c is False else {name(_undecided)}())"
        case _ as unreachable:
            assert_never(unreachable)

