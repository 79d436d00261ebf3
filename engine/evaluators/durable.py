"""durable_rules backend: compile the intermediate form to rulesets, run them synchronously.

A thin adapter around the traps measured in durable_rules 2.0.28 (docs/evaluators.md lists them):
- numbers are serialized by us, never in bare exponent form (`1e-05` fails to parse);
- no Host and no timer threads: actions are taken synchronously right after each assert;
- one fact asserted at a time ("not handled" is normal), one fresh session per evaluation,
  a marker rule that always fires so that `delete_state` is safe, and the session deleted after;
- an action that fails is abandoned in the engine and its error re-raised, never swallowed;
- a pack is split into rulesets in which at most RULESET_SIZE compiled rules test any one kind
  of fact, each asserted only the facts it reads, so no fact meets the 64-condition limit;
- rulesets are created once per pack and kept while the pack is among the MAX_LIVE most recently used,
  then deleted (delete_ruleset frees them; measured flat over thousands of packs), never per request.
Negation is pushed to the leaves and conditions expanded to disjunctions (one compiled rule per
alternative); derived facts travel as separate facts joined to the input fact.
"""
from __future__ import annotations

import itertools
import json
import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, TypeAlias, TypedDict, assert_never

from kbopt.engine.evaluators.derivation import Derivation, DerivedFacts, finish
from kbopt.engine.lang.nodes import Cmp, Const, Contains, Fact, Known, Leaf, Needs, OneOf, facts_of, leaves
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.operators import COMPARISONS
from kbopt.engine.pack.rule import PERSISTENT, Pack, Rule
from kbopt.kb.vocabulary import Vocabulary

RULESET_SIZE = 60          # compiled rules testing one kind of fact, per ruleset (64 is the limit; +1 marker)
RULESET_MAX = 240          # compiled rules per ruleset in all, well below the 512-entry test table
INPUT, DERIVED, MARKER = "i", "d", "marker"

# What durable_rules reads (ruleset definitions, their patterns and tests) is JSON; fact values sit at its leaves.
Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None


class CompiledRuleset(TypedDict):
    rules: dict[str, Json]         # compiled rule name -> its `all` of patterns; the marker rule among them
    reads: list[str]               # the kinds of fact its rules test: INPUT, derived paths


def dumps(value: object) -> str:
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


def _exponent_prone(value: object) -> bool:
    """Floats Python's json writes in exponent form (|x| < 1e-4 or >= 1e16)."""
    return isinstance(value, float) and value != 0.0 and not 1e-4 <= abs(value) < 1e16


def dumps_fact(fact: dict[str, Any], flat_values: Iterable[Any]) -> str:
    """A fact's JSON: the C encoder when no value needs the careful float form, else `dumps`."""
    if any(_exponent_prone(v) for v in flat_values):
        return dumps(fact)
    return json.dumps(fact, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def nest(flat: dict[str, Any], list_facts: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}; lists become membership maps ({"fp8": true, ...})."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        if path in list_facts:
            value = {item: item in value for item in list_facts[path]}
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


# ---------------------------------------------------------------- compiling


class _TermCompiler:
    """One conjunction of leaves -> an ordered list of durable_rules patterns."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.aliases: dict[str, str] = {}        # carrier (INPUT or a derived path) -> alias
        self.tests: dict[str, list[Json]] = {}

    def carrier(self, path: str) -> str:
        return _carrier(self.vocabulary, path)

    def alias(self, carrier: str) -> str:
        if carrier not in self.aliases:
            self.aliases[carrier] = "i" if carrier == INPUT else f"d{len(self.aliases)}"
            kind = INPUT if carrier == INPUT else DERIVED
            self.tests[carrier] = [{"k": kind}]
        return self.aliases[carrier]

    def exists(self, path: str) -> None:
        carrier = self.carrier(path)
        self.alias(carrier)
        test: Json = {"$ex": {path: 1}}
        if test not in self.tests[carrier]:
            self.tests[carrier].append(test)

    def add(self, path: str, test: Json) -> None:
        self.exists(path)
        self.tests[self.carrier(path)].append(test)

    def leaf(self, node: Leaf) -> None:
        match node:
            case Needs(fact=fact) | Known(fact=fact):
                carrier = self.carrier(fact.path)
                self.alias(carrier)
                absent = isinstance(node, Known) and node.negated
                self.tests[carrier].append({"$nex" if absent else "$ex": {fact.path: 1}})
            case Contains():
                self._contains(node)
            case OneOf(fact=fact, values=values, negated=True):
                self.add(fact.path, {"$and": [{COMPARISONS["!="].durable: {fact.path: v}} for v in values]})
            case OneOf(fact=fact, values=values):
                self.add(fact.path, {"$or": [{fact.path: v} for v in values]})
            case Cmp():
                self._compare(node)
            case _ as unreachable:
                assert_never(unreachable)

    def _contains(self, node: Contains) -> None:
        field = f"{node.fact.path}.{node.item}"
        carrier = self.carrier(node.fact.path)
        self.alias(carrier)
        self.tests[carrier].append({"$ex": {field: 1}})
        self.tests[carrier].append({field: not node.negated})

    def _compare(self, node: Cmp) -> None:
        comparison = COMPARISONS[node.op]
        op = comparison.durable
        left = node.left.path
        if isinstance(node.right, Const):
            self.add(left, {op: {left: node.right.value}})
            return
        right = node.right.path
        self.exists(left)
        self.exists(right)
        left_carrier, right_carrier = self.carrier(left), self.carrier(right)
        if left_carrier == right_carrier:
            self.tests[left_carrier].append({op: {left: {"$m": right}}})
            return
        # Two facts of different carriers (a derived fact against an input): durable_rules' core
        # crashes on such a join reference once a ruleset has seen earlier sessions (a segfault in
        # assert_fact). The rule only waits here for both facts to exist; the evaluator checks the
        # comparison itself before it counts the rule as fired (see cross_fact_rules). Both values
        # are fixed once both facts exist, so a comparison false then stays false.

    def patterns(self) -> list[Json]:
        return [{self.aliases[c]: {"$and": tests}} for c, tests in self.tests.items()]


def _carrier(vocabulary: Vocabulary, path: str) -> str:
    """The kind of fact a path travels in: the input fact, or its own derived fact."""
    # facts[], not get(): the loader admits only facts the vocabulary declares
    return path if vocabulary.facts[path].derived else INPUT


def compile_rule(rule: Rule, vocabulary: Vocabulary) -> list[dict[str, Json]]:
    """A rule -> one durable_rules `all` per alternative of its condition."""
    out: list[dict[str, Json]] = []
    for term in to_dnf(to_nnf(rule.fire_condition)):
        compiler = _TermCompiler(vocabulary)
        # The input pattern comes first so derived patterns can refer to it.
        if any(compiler.carrier(p) == INPUT for leaf in term for p in facts_of(leaf)):
            compiler.alias(INPUT)
        for leaf in term:
            compiler.leaf(leaf)
        out.append({"all": compiler.patterns()})
    return out


def cross_fact_rules(pack: Pack) -> frozenset[str]:
    """Rules that compare facts of different carriers: their durable match is confirmed in Python."""
    vocabulary = pack.kb.vocabulary
    out = set()
    for rule in pack.rules:
        for leaf in leaves(rule.fire_condition):
            if isinstance(leaf, Cmp) and isinstance(leaf.right, Fact) \
                    and _carrier(vocabulary, leaf.left.path) != _carrier(vocabulary, leaf.right.path):
                out.add(rule.id)
    return frozenset(out)


def compile_pack(pack: Pack) -> list[CompiledRuleset]:
    """The engine-neutral rules -> durable_rules ruleset definitions (without actions).

    Returns one entry per ruleset: {"rules": {name: definition}, "reads": facts it consumes}.
    Compiled rule names are `<rule id>#<alternative>`.
    """
    vocabulary = pack.kb.vocabulary
    compiled: list[tuple[str, dict[str, Json], list[str]]] = []
    for rule in pack.rules:
        for index, definition in enumerate(compile_rule(rule, vocabulary)):
            paths = sorted({p for p in facts_of(rule.fire_condition)})
            compiled.append((f"{rule.id}#{index}", definition, paths))
    # A fact may meet at most 64 conditions of one ruleset (docs/evaluators.md): count, per kind of
    # fact (the input, each derived fact), the compiled rules that test it, and start a new
    # ruleset before any count passes RULESET_SIZE (the marker rule takes one more on the input).
    chunks: list[list[tuple[str, dict[str, Json], set[str]]]] = [[]]
    counts: dict[str, int] = {}
    for name, definition, paths in compiled:
        carriers = {_carrier(vocabulary, p) for p in paths}
        if chunks[-1] and (len(chunks[-1]) >= RULESET_MAX or any(counts.get(c, 0) >= RULESET_SIZE for c in carriers)):
            chunks.append([])
            counts = {}
        chunks[-1].append((name, definition, carriers))
        for carrier in carriers:
            counts[carrier] = counts.get(carrier, 0) + 1
    rulesets: list[CompiledRuleset] = []
    for chunk in chunks:
        # Every session must see at least one action before delete_state (docs/evaluators.md): this
        # rule matches the input fact, which every ruleset is asserted.
        rules: dict[str, Json] = {MARKER: {"all": [{"m": {"k": INPUT}}]}}
        reads: set[str] = set()
        for name, definition, carriers in chunk:
            rules[name] = definition
            reads.update(carriers)
        rulesets.append({"rules": rules, "reads": sorted(reads)})
    return rulesets


RulesetText = tuple[str, tuple[str, ...], tuple[str, ...]]    # (JSON definition, facts it reads, rule names)


def ruleset_texts(pack: Pack) -> list[RulesetText]:
    """compile_pack's rulesets as the JSON text the C core takes, computed once per pack and kept
    with it, so the compiled-pack cache spares a cold start the compilation too."""
    key = PERSISTENT + "durable-rulesets"
    texts = pack.artefacts.get(key)
    if texts is None:
        texts = pack.artefacts[key] = [(dumps(c["rules"]), tuple(c["reads"]), tuple(c["rules"])) for c in compile_pack(pack)]
    return texts  # type: ignore[return-value]  # artefacts holds what this function put there


# ---------------------------------------------------------------- running

MAX_LIVE = 8      # packs whose rulesets stay created; a long-lived process may see any number of packs
_live: OrderedDict[str, DurableEvaluator] = OrderedDict()     # least recently used first


class DurableEvaluator:
    """Runs a compiled pack on durable_rules' Rete core (`durable_rules_engine`).

    durable_rules' own Python layer (Host, Ruleset, Closure) spends most of each evaluation
    re-encoding JSON and session state; we call its C core directly instead, which also means
    no dispatch threads at all. Actions here only record which rule matched.
    """

    name = "durable"

    def __new__(cls, pack: Pack) -> DurableEvaluator:
        # One evaluator per pack content, shared by every copy of the pack loaded in this process
        # (creating rulesets per request leaks and crashes durable_rules), and its rulesets deleted
        # once MAX_LIVE other packs were used since: 300 packs would otherwise hold 400 MB.
        key = pack.version + ":" + ",".join(r.id for r in pack.rules)
        instance = _live.get(key)
        if instance is None:
            instance = super().__new__(cls)
            instance._setup(pack, key)
        instance._open()
        return instance

    def _setup(self, pack: Pack, key: str) -> None:
        import durable_rules_engine

        self._core = durable_rules_engine
        self.pack = pack
        self.key = key
        self.rules = pack.by_id()
        # Only the facts some rule reads are worth serializing and asserting.
        self.list_facts = {spec.path: spec.values for spec in pack.kb.vocabulary.facts.values() if spec.type == "list"}
        self.read_paths = frozenset(p for rule in pack.rules for p in facts_of(rule.fire_condition))
        self.confirm = cross_fact_rules(pack)
        self.rule_of: dict[str, str] = {}        # compiled rule name -> rule id
        self.rulesets: list[tuple[int, frozenset[str]]] = []
        self._sids = itertools.count(1)
        self._generation = itertools.count()     # ruleset names must be new each time they are created

    def _open(self) -> None:
        """Create the rulesets if they are not (or no longer) there, and mark the pack as just used."""
        if not self.rulesets:
            prefix = f"kbopt_{self.pack.version}_{id(self)}_{next(self._generation)}"
            for index, (text, reads, names) in enumerate(ruleset_texts(self.pack)):
                self.rule_of.update((name, name.split("#", 1)[0]) for name in names if name != MARKER)
                handle = self._core.create_ruleset(f"{prefix}_{index}", text)
                self.rulesets.append((handle, frozenset(reads)))
        _live[self.key] = self
        _live.move_to_end(self.key)
        while len(_live) > MAX_LIVE:
            _, evicted = _live.popitem(last=False)
            evicted._close()

    def _close(self) -> None:
        """Delete the rulesets; a later run creates them again (_open)."""
        rulesets, self.rulesets = self.rulesets, []
        for handle, _ in rulesets:
            self._core.delete_ruleset(handle)

    def _assert(self, handle: int, text: str) -> list[str]:
        """Assert one fact (JSON text); return the compiled rules whose actions it started."""
        result = self._core.assert_fact(handle, text)
        if result[0] in (1, 2, 3):     # not handled / already observed / queued: nothing to run
            return []
        state_handle = result[1]
        started: list[str] = []
        action = self._core.start_action_for_state(handle, state_handle)
        message = action[1] if action else None
        while message:
            # The message is {"<compiled rule name>": {bindings}}; only the name matters here.
            started.append(message[2:message.index('"', 2)])
            try:
                message = self._core.complete_and_start_action(handle, state_handle)
            except BaseException:
                self._core.abandon_action(handle, state_handle)
                raise
        return started

    def run(self, values: dict[str, Any]) -> Derivation:
        self._open()
        sid = str(next(self._sids))
        derived = DerivedFacts(values, self.pack)
        fired: set[str] = set()
        started: list[int] = []
        try:
            asserted = {p: v for p, v in values.items() if p in self.read_paths}
            pending = [(INPUT, dumps_fact({"sid": sid, "k": INPUT, **nest(asserted, self.list_facts)}, asserted.values()))]
            while pending:
                carrier, text = pending.pop(0)
                for handle, reads in self.rulesets:
                    if carrier == INPUT:
                        started.append(handle)      # the input goes to every ruleset (marker rule)
                    elif carrier not in reads:
                        continue
                    for name in self._assert(handle, text):
                        rule_id = self.rule_of.get(name)
                        if rule_id is None or rule_id in fired:
                            continue
                        if rule_id in self.confirm and self.pack.check(rule_id)(derived.lookup) is not True:
                            continue
                        fired.add(rule_id)
                        for path, value in derived.conclude(self.rules[rule_id]):
                            section, name = path.split(".", 1)
                            pending.append((path, dumps_fact({"sid": sid, "k": DERIVED, section: {name: value}}, [value])))
        finally:
            for handle in started:
                self._core.delete_state(handle, sid)
        return finish(self.pack, fired, derived)
