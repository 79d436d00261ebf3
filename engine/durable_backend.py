"""durable_rules backend: compile the intermediate form to rulesets, run them synchronously.

A thin adapter around the traps measured in shared/durable-rules-notes.md:
- numbers are serialized by us, never in bare exponent form (`1e-05` fails to parse);
- a quiet Host with no timer threads, so every action runs inside `assert_fact`;
- one fact asserted at a time ("not handled" is normal), one fresh session per evaluation,
  a marker fact first so that `delete_state` is safe, and the session deleted afterwards;
- exceptions inside actions are caught by our wrapper and re-raised after the assert returns;
- a pack is split into rulesets of at most RULESET_SIZE compiled rules, each asserted only the
  facts it reads, so no fact meets the 64-sibling-condition limit;
- rulesets are compiled once per process and pack, never per request.
Negation is pushed to the leaves and conditions expanded to disjunctions (one compiled rule per
alternative); derived facts travel as separate facts joined to the input fact.
"""
from __future__ import annotations

import itertools
import json
import math
from typing import Any

from kbopt.engine import expr
from kbopt.engine.derivation import Derivation, DerivedFacts, finish
from kbopt.engine.rule import Pack, Rule

RULESET_SIZE = 40          # compiled rules per ruleset (plus the marker); well under 64
INPUT, DERIVED, MARKER = "i", "d", "marker"


def dumps(value: Any) -> str:
    """JSON with floats durable_rules can parse: `1.0e-05`, never `1e-05`."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} cannot be asserted")
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"cannot serialize {type(value).__name__}")


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}; lists become membership maps ({"fp8": true, ...})."""
    from kbopt.kb.vocabulary import load_vocabulary
    vocabulary = load_vocabulary()
    out: dict[str, Any] = {}
    for path, value in flat.items():
        spec = vocabulary.get(path)
        if spec is not None and spec.type == "list":
            value = {item: item in value for item in spec.values}
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


# ---------------------------------------------------------------- compiling


class _TermCompiler:
    """One conjunction of leaves -> an ordered list of durable_rules patterns."""

    def __init__(self, vocabulary):
        self.vocabulary = vocabulary
        self.aliases: dict[str, str] = {}        # carrier (INPUT or a derived path) -> alias
        self.tests: dict[str, list] = {}

    def carrier(self, path: str) -> str:
        return path if self.vocabulary.get(path).derived else INPUT

    def alias(self, carrier: str) -> str:
        if carrier not in self.aliases:
            self.aliases[carrier] = "i" if carrier == INPUT else f"d{len(self.aliases)}"
            kind = INPUT if carrier == INPUT else DERIVED
            self.tests[carrier] = [{"k": kind}]
        return self.aliases[carrier]

    def exists(self, path: str) -> None:
        carrier = self.carrier(path)
        self.alias(carrier)
        test = {"$ex": {path: 1}}
        if test not in self.tests[carrier]:
            self.tests[carrier].append(test)

    def add(self, path: str, test: dict) -> None:
        self.exists(path)
        self.tests[self.carrier(path)].append(test)

    def leaf(self, node) -> None:
        if isinstance(node, expr.Needs):
            carrier = self.carrier(node.fact.path)
            self.alias(carrier)
            self.tests[carrier].append({"$ex": {node.fact.path: 1}})
        elif isinstance(node, expr.Known):
            carrier = self.carrier(node.fact.path)
            self.alias(carrier)
            self.tests[carrier].append({"$nex" if node.negated else "$ex": {node.fact.path: 1}})
        elif isinstance(node, expr.Contains):
            self._contains(node)
        elif isinstance(node, expr.OneOf):
            path = node.fact.path
            if node.negated:
                self.add(path, {"$and": [{"$neq": {path: v}} for v in node.values]})
            else:
                self.add(path, {"$or": [{path: v} for v in node.values]})
        elif isinstance(node, expr.Cmp):
            self._compare(node)
        else:
            raise TypeError(node)

    def _contains(self, node: expr.Contains) -> None:
        field = f"{node.fact.path}.{node.item}"
        carrier = self.carrier(node.fact.path)
        self.alias(carrier)
        self.tests[carrier].append({"$ex": {field: 1}})
        self.tests[carrier].append({field: not node.negated})

    def _compare(self, node: expr.Cmp) -> None:
        op = {"<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte", "==": "$eq", "!=": "$neq"}[node.op]
        left = node.left.path
        if isinstance(node.right, expr.Const):
            self.add(left, {op: {left: node.right.value}})
            return
        right = node.right.path
        self.exists(left)
        self.exists(right)
        left_carrier, right_carrier = self.carrier(left), self.carrier(right)
        if left_carrier == right_carrier:
            self.tests[left_carrier].append({op: {left: {"$m": right}}})
            return
        order = list(self.aliases)
        if order.index(left_carrier) > order.index(right_carrier):
            self.tests[left_carrier].append({op: {left: {self.aliases[right_carrier]: right}}})
        else:
            flipped = {"$lt": "$gt", "$lte": "$gte", "$gt": "$lt", "$gte": "$lte", "$eq": "$eq", "$neq": "$neq"}[op]
            self.tests[right_carrier].append({flipped: {right: {self.aliases[left_carrier]: left}}})

    def patterns(self) -> list[dict]:
        return [{self.aliases[c]: {"$and": tests}} for c, tests in self.tests.items()]


def compile_rule(rule: Rule, vocabulary) -> list[dict]:
    """A rule -> one durable_rules `all` per alternative of its condition."""
    out = []
    for term in expr.to_dnf(expr.to_nnf(rule.fire_condition)):
        compiler = _TermCompiler(vocabulary)
        # The input pattern comes first so derived patterns can refer to it.
        if any(compiler.carrier(p) == INPUT for leaf in term for p in expr.facts_of(leaf)):
            compiler.alias(INPUT)
        for leaf in term:
            compiler.leaf(leaf)
        out.append({"all": compiler.patterns()})
    return out


def compile_pack(pack: Pack) -> list[dict[str, Any]]:
    """The engine-neutral rules -> durable_rules ruleset definitions (without actions).

    Returns one entry per ruleset: {"rules": {name: definition}, "reads": facts it consumes}.
    Compiled rule names are `<rule id>#<alternative>`.
    """
    from kbopt.kb.vocabulary import load_vocabulary
    vocabulary = load_vocabulary()
    compiled = []
    for rule in pack.rules:
        for index, definition in enumerate(compile_rule(rule, vocabulary)):
            reads = sorted({p for p in expr.facts_of(rule.fire_condition)})
            compiled.append((f"{rule.id}#{index}", definition, reads))
    rulesets = []
    for start in range(0, len(compiled), RULESET_SIZE):
        chunk = compiled[start:start + RULESET_SIZE]
        rules = {MARKER: {"all": [{"m": {"k": MARKER}}]}}
        reads: set[str] = set()
        for name, definition, paths in chunk:
            rules[name] = definition
            reads.update(INPUT if not vocabulary.get(p).derived else p for p in paths)
        rulesets.append({"rules": rules, "reads": sorted(reads)})
    return rulesets


# ---------------------------------------------------------------- running

_compiled_cache: dict[str, "DurableEvaluator"] = {}


class DurableEvaluator:
    name = "durable"

    def __new__(cls, pack: Pack):
        # Rulesets are created once per process and pack: durable_rules leaks and crashes when
        # rulesets are created and dropped per request.
        key = pack.version + ":" + ",".join(r.id for r in pack.rules)
        if key not in _compiled_cache:
            instance = super().__new__(cls)
            instance._setup(pack)
            _compiled_cache[key] = instance
        return _compiled_cache[key]

    def _setup(self, pack: Pack) -> None:
        import durable_rules_engine
        from durable import engine

        class QuietHost(engine.Host):
            def _run(self):           # no dispatch threads: everything runs inside assert_fact
                pass

        class Ruleset(engine.Ruleset):
            def __init__(self, name, host, definition, actions):
                self._name, self._host, self._definition = name, host, definition
                self._actions = {rule: engine.Promise(action) for rule, action in actions.items()}
                self._handle = durable_rules_engine.create_ruleset(name, dumps(definition))

            def assert_fact(self, fact):
                return self._handle_result(durable_rules_engine.assert_fact(self._handle, dumps(fact)), fact)

        self._engine = engine
        self.pack = pack
        self.rules = pack.by_id()
        self.host = QuietHost()
        self.rulesets: list[tuple[str, set[str]]] = []
        self._sids = itertools.count(1)
        self._hits: list[str] = []
        self._errors: list[BaseException] = []
        prefix = f"kbopt_{pack.version}_{id(self)}"
        for index, compiled in enumerate(compile_pack(pack)):
            name = f"{prefix}_{index}"
            actions = {rule: self._action(rule) for rule in compiled["rules"]}
            ruleset = Ruleset(name, self.host, compiled["rules"], actions)
            self.host._ruleset_directory[name] = ruleset
            self.host._ruleset_list.append(ruleset)
            self.rulesets.append((name, set(compiled["reads"])))

    def _action(self, compiled_name: str):
        rule_id = compiled_name.split("#", 1)[0]

        def run(c):
            try:
                if compiled_name != MARKER:
                    self._hits.append(rule_id)
            except BaseException as error:       # never let durable_rules swallow it
                self._errors.append(error)
        return run

    def _assert(self, ruleset: str, fact: dict) -> None:
        try:
            self.host.assert_fact(ruleset, fact)
        except self._engine.MessageNotHandledException:
            pass                                   # a fact no rule matches: normal
        except self._engine.MessageObservedException:
            pass                                   # identical content asserted twice
        if self._errors:
            error, self._errors[:] = self._errors[0], []
            raise error

    def run(self, values: dict[str, Any]) -> Derivation:
        sid = str(next(self._sids))
        derived = DerivedFacts(values)
        fired: set[str] = set()
        self._hits.clear()
        started = []
        try:
            for name, reads in self.rulesets:
                started.append(name)
                self._assert(name, {"sid": sid, "k": MARKER})
            pending = [(None, {"sid": sid, "k": INPUT, **nest(values)})]
            while pending:
                path, fact = pending.pop(0)
                for name, reads in self.rulesets:
                    if (INPUT if path is None else path) in reads:
                        self._assert(name, fact)
                    for rule_id in self._drain_hits(fired):
                        for new_path, value in derived.conclude(self.rules[rule_id]):
                            pending.append((new_path, {"sid": sid, "k": DERIVED, **nest({new_path: value})}))
        finally:
            for name in started:
                self.host.delete_state(name, sid)
        return finish(self.pack, fired, derived)

    def _drain_hits(self, fired: set[str]) -> list[str]:
        new = [rule_id for rule_id in dict.fromkeys(self._hits) if rule_id not in fired]
        self._hits.clear()
        fired.update(new)
        return new
