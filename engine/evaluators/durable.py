"""durable_rules backend: compile the intermediate form to rulesets, run them synchronously.

A thin adapter around the traps measured in durable_rules 2.0.28 (docs/evaluators.md lists them):
- numbers are serialized by us, never in bare exponent form (`1e-05` fails to parse);
- no Host and no timer threads: actions are taken synchronously right after each assert;
- one fact asserted at a time ("not handled" is normal); one session per ruleset, kept from one
  evaluation to the next, each evaluation retracting all it asserted (a fresh session per
  evaluation cost more than the matching: see _clear); a marker rule that always fires so that
  `delete_state` is safe, for a session that failed midway and when the ruleset goes;
- an action that fails is abandoned in the engine and its error re-raised, never swallowed;
- a pack is split into rulesets of at most RULESET_SIZE compiled rules, so the fact never meets
  the 64-condition limit;
- rulesets are created once per pack and kept while the pack is among the MAX_LIVE most recently used,
  then deleted (delete_ruleset frees them; measured flat over thousands of packs), never per request.
Negation is pushed to the leaves and conditions expanded to disjunctions (one compiled rule per
alternative).

Each evaluation asserts one flat fact per ruleset, holding the inputs and derived facts its rules
read (each under a short key, FactKeys; durable_rules' cost grows with the fact's size and nesting):
the rulesets run in the rules' dependency order (rule_levels), so a rule's ruleset is asserted
only once all that can derive what it reads has run, and no rule ever joins two facts. A ruleset
none of whose rules can match (each needs a fact that is absent) is not asserted at all.
"""
from __future__ import annotations

import itertools
import json
import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, NamedTuple, NoReturn, TypeAlias, TypedDict, assert_never

from kbopt.engine.evaluators.derivation import Derivation, DerivedFacts, finish
from kbopt.engine.evaluators.reference import ReferenceEvaluator, schedule
from kbopt.engine.evaluators.reference import reads as all_reads
from kbopt.engine.lang.nodes import Cmp, Const, Contains, Known, Leaf, Needs, OneOf, facts_of
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.operators import COMPARISONS
from kbopt.engine.pack.rule import Pack, Rule, RulesetText
from kbopt.errors import EvaluationError

RULESET_SIZE = 60          # compiled rules per ruleset: each tests the one fact (64 is the limit; +1 marker)
FACT, MARKER, MARKER_ALIAS = "f", "marker", "m"
INPUT = "i"                # the kind ("k") of the fact an evaluation asserts
START = "s"                # the kind of the fact that starts a session: the marker rule matches it alone
SESSION = "1"              # the one session of each ruleset
HEAD = f'{{"sid":"{SESSION}","k":"{INPUT}"'     # how every asserted fact begins
START_FACT = f'{{"sid":"{SESSION}","k":"{START}"}}'

# What durable_rules reads (ruleset definitions, their patterns and tests) is JSON; fact values sit at its leaves.
Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None


class CompiledRuleset(TypedDict):
    rules: dict[str, Json]         # compiled rule name -> its `all` of one pattern; the marker rule among them
    level: int                     # rule_levels' level of its rules
    needs: list[list[str]]         # facts one of its rules needs present, one list a rule (supersets dropped)
    feedback: list[str]            # derived facts, produced within its rules' cycle, that call for another round
    fields: list[str]              # the facts its rules read: all the fact asserted into it holds


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


_encode_string = json.encoder.encode_basestring     # the C encoder json.dumps(ensure_ascii=False) uses


def encode(value: Any) -> str:
    """One fact value's JSON, as `dumps` writes it, without its checks for the common kinds."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        return repr(value)
    if kind is str:
        return _encode_string(value)
    if kind is float and value - value == 0:       # finite (inf - inf and NaN - NaN are NaN)
        text = repr(value)
        return text if "e" not in text else dumps(value)
    return dumps(value)


# ---------------------------------------------------------------- compiling


class FactKeys:
    """The short flat key under which each fact a pack's rules read travels in the asserted fact:
    `a0`, `a1`, ... in path order. A list fact travels as `aN: 1` (it is there) beside one boolean
    per item of its vocabulary, `aN_0`, `aN_1`, ... (membership). durable_rules parses nested objects
    about twice as slowly as flat ones, and a fact's cost grows with its text."""

    def __init__(self, pack: Pack) -> None:
        vocabulary = pack.kb.vocabulary
        paths = sorted({p for rule in pack.rules for p in facts_of(rule.fire_condition)})
        self.key = {path: f"a{index}" for index, path in enumerate(paths)}
        self.items = {path: spec.values for path in paths if (spec := vocabulary.facts[path]).type == "list"}

    def item(self, path: str, item: str) -> str:
        # the parser admits only items of the list's vocabulary (`"x" can never be in ...`)
        return f"{self.key[path]}_{self.items[path].index(item)}"


class _TermCompiler:
    """One conjunction of leaves -> the tests of one durable_rules pattern on the one fact."""

    def __init__(self, keys: FactKeys) -> None:
        self.keys = keys
        # Tests begin with the fact's kind, as in the form with a fact per kind: a pattern made only
        # of `$nex` tests was measured to match a fact that holds the key.
        self.tests: list[Json] = [{"k": INPUT}]
        self.required: set[str] = set()          # paths the fact must hold for the term to match

    def exists(self, path: str) -> str:
        self.required.add(path)
        key = self.keys.key[path]
        test: Json = {"$ex": {key: 1}}
        if test not in self.tests:
            self.tests.append(test)
        return key

    def leaf(self, node: Leaf) -> None:
        match node:
            case Known(fact=fact, negated=True):
                self.tests.append({"$nex": {self.keys.key[fact.path]: 1}})
            case Needs(fact=fact) | Known(fact=fact):
                self.exists(fact.path)
            case Contains(fact=fact, item=item, negated=negated):
                self.exists(fact.path)
                self.tests.append({self.keys.item(fact.path, item): not negated})
            case OneOf(fact=fact, values=values, negated=True):
                key = self.exists(fact.path)
                self.tests.append({"$and": [{COMPARISONS["!="].durable: {key: v}} for v in values]})
            case OneOf(fact=fact, values=values):
                key = self.exists(fact.path)
                self.tests.append({"$or": [{key: v} for v in values]})
            case Cmp():
                self._compare(node)
            case _ as unreachable:
                assert_never(unreachable)

    def _compare(self, node: Cmp) -> None:
        op = COMPARISONS[node.op].durable
        left = self.exists(node.left.path)
        if isinstance(node.right, Const):
            self.tests.append({op: {left: node.right.value}})
            return
        # Input and derived facts travel in one fact, so a comparison of two facts is a reference
        # within that fact ($m), never a join between facts (durable_rules' core crashed on joins
        # between a derived and an input fact once a ruleset had seen earlier sessions).
        right = self.exists(node.right.path)
        self.tests.append({op: {left: {"$m": right}}})


def compile_rule(rule: Rule, keys: FactKeys) -> list[tuple[dict[str, Json], frozenset[str]]]:
    """A rule -> one durable_rules `all` per alternative of its condition, with the paths each
    alternative needs present in the fact."""
    out: list[tuple[dict[str, Json], frozenset[str]]] = []
    for term in to_dnf(to_nnf(rule.fire_condition)):
        compiler = _TermCompiler(keys)
        for leaf in term:
            compiler.leaf(leaf)
        out.append(({"all": [{FACT: {"$and": compiler.tests}}]}, frozenset(compiler.required)))
    return out


def rule_levels(pack: Pack) -> tuple[dict[str, int], dict[str, frozenset[str]]]:
    """Each rule's level: 0 when it reads no derived fact, else one more than the highest level of
    a rule (outside its own cycle) producing a fact it reads. Rules of one level cannot feed each
    other, except within a cycle of rules; so running the levels in order, each over the facts all
    lower levels derived, reaches the reference's fix-point. Also, for each rule in a cycle of
    several rules, the facts it reads that its cycle produces: their appearance calls for another
    round of its level."""
    level: dict[str, int] = {}
    feedback: dict[str, frozenset[str]] = {}
    for component in schedule(pack):
        members = {rule.id for rule in component}
        reads = {rule.id: set(facts_of(rule.fire_condition)) for rule in component}
        # ordered by every fact a rule reads, a coalesce()'s alternatives too, as the reference's schedule
        level_of_component = max((level[producer] + 1 for rule in component for path in all_reads(rule)
                                  for producer in pack.producers.get(path, ()) if producer not in members), default=0)
        for rule in component:
            level[rule.id] = level_of_component
            if len(component) > 1:      # a lone rule cannot enable itself: it derives only once it fired
                feedback[rule.id] = frozenset(path for path in reads[rule.id]
                                              if any(p in members for p in pack.producers.get(path, ())))
    return level, feedback


def _minimal(sets: Iterable[frozenset[str]]) -> list[frozenset[str]]:
    """The sets none of the others is a subset of: one of them held means one of all of them held."""
    out: list[frozenset[str]] = []
    for candidate in sorted(set(sets), key=lambda s: (len(s), sorted(s))):
        if not any(kept <= candidate for kept in out):
            out.append(candidate)
    return out


def compile_pack(pack: Pack) -> list[CompiledRuleset]:
    """The engine-neutral rules -> durable_rules ruleset definitions (without actions), in the
    order they run: by level (rule_levels), within a level by the facts their rules need.

    Compiled rule names are `<rule id>#<alternative>`.
    """
    keys = FactKeys(pack)
    level, feedback = rule_levels(pack)
    # level -> (facts needed, compiled rule name, definition, rule)
    by_level: dict[int, list[tuple[frozenset[str], str, dict[str, Json], Rule]]] = {}
    for rule in pack.rules:
        for index, (definition, required) in enumerate(compile_rule(rule, keys)):
            by_level.setdefault(level[rule.id], []).append((required, f"{rule.id}#{index}", definition, rule))
    rulesets: list[CompiledRuleset] = []
    for at in sorted(by_level):
        # Rules that need the same facts share rulesets: fewer facts in each asserted fact, and a
        # ruleset none of whose rules can match (a fact they need is absent) more often skipped whole.
        entries = sorted(by_level[at], key=lambda entry: sorted(entry[0]))
        # All rules test the one fact, which may meet at most 64 conditions of a ruleset
        # (docs/evaluators.md): RULESET_SIZE rules and the marker rule per ruleset.
        for start in range(0, len(entries), RULESET_SIZE):
            chunk = entries[start:start + RULESET_SIZE]
            # Every session must see an action before delete_state (docs/evaluators.md): the marker
            # rule matches the fact that starts a session (DurableEvaluator._start), and no other.
            rules: dict[str, Json] = {MARKER: {"all": [{MARKER_ALIAS: {"k": START}}]}}
            for _, name, definition, _ in chunk:
                rules[name] = definition
            rulesets.append({
                "rules": rules, "level": at,
                "needs": [sorted(needs) for needs in _minimal(needs for needs, *_ in chunk)],
                "feedback": sorted({p for *_, rule in chunk for p in feedback.get(rule.id, ())}),
                "fields": sorted({p for *_, rule in chunk for p in facts_of(rule.fire_condition)}),
            })
    return rulesets


# (JSON definition, level, needs, feedback, fields, rule names): see CompiledRuleset


def ruleset_texts(pack: Pack) -> tuple[RulesetText, ...]:
    """compile_pack's rulesets as the JSON text the C core takes, computed once per pack and kept
    with it, so the compiled-pack cache spares a cold start the compilation too."""
    compiled = pack.compiled
    if compiled.durable_rulesets is None:
        compiled.durable_rulesets = tuple(
            (dumps(c["rules"]), c["level"], tuple(tuple(needs) for needs in c["needs"]), tuple(c["feedback"]),
             tuple(c["fields"]), tuple(c["rules"]))
            for c in compile_pack(pack))
    return compiled.durable_rulesets


# ---------------------------------------------------------------- running


def _say_as_the_reference(pack: Pack, values: dict[str, Any], error: EvaluationError) -> NoReturn:
    """Raise the error the reference evaluator raises on the same facts. Where several fired rules
    cannot derive their facts, the one an evaluation stops at depends on the order it runs them:
    durable_rules runs them by level, the reference in its schedule. Both evaluators say the same
    (the reference's); should the reference find no error at all, durable_rules' own is raised."""
    ReferenceEvaluator(pack).run(values)
    raise error


MAX_LIVE = 8      # packs whose rulesets stay created; a long-lived process may see any number of packs
FRAGMENTS_KEPT = 4096    # fact texts an evaluator keeps (a few hundred KB at most)
_live: OrderedDict[str, DurableEvaluator] = OrderedDict()     # least recently used first


class _Ruleset(NamedTuple):
    handle: int
    needs: tuple[frozenset[str], ...]    # one of these sets of facts must be present; () when none need be
    feedback: frozenset[str]             # derived facts whose appearance calls for another round
    fields: tuple[str, ...]              # the facts the fact asserted into it holds, when present


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
        # once MAX_LIVE other packs were used since: each copy of the built-in pack's would otherwise
        # hold about 22 MiB (79 packs, 1.7 GiB of peak RSS; tests/test_hostile.py).
        key = pack.version + ":" + ",".join(r.id for r in pack.rules)
        instance = _live.get(key)
        if instance is None:
            instance = super().__new__(cls)
            instance._setup(pack, key)
        instance._open()
        return instance

    def _setup(self, pack: Pack, key: str) -> None:
        import durable_rules_engine  # durable_rules' C core: optional (absent on 3.13), loaded with an evaluator

        self._core = durable_rules_engine
        self.pack = pack
        self.key = key
        self.rules = pack.by_id()
        keys = FactKeys(pack)
        # What each fact some rule reads looks like in the asserted fact, worked out once per pack:
        # the text before its value (`,"a3":`), and for a list fact the text before each item's boolean.
        self.prefix = {path: f',"{key}":' for path, key in keys.key.items()}
        self.item_prefixes = {path: tuple((f',"{keys.item(path, item)}":', item) for item in items)
                              for path, items in keys.items.items()}
        self.read = frozenset(keys.key)
        # what each rule derives that some rule reads: the facts its firing may add to the fact asserted
        self.feeds = {rule.id: feeds for rule in pack.rules if (feeds := tuple(p for p in dict.fromkeys(rule.derives) if p in self.read))}
        self._fragments: dict[tuple[str, type, Any], str] = {}     # (fact, type, value) -> _fragment's text
        self.rule_of: dict[str, str] = {}        # compiled rule name -> rule id
        self.rulesets: list[list[_Ruleset]] = []     # the rulesets of each level, lowest level first
        self._sessions: set[int] = set()         # rulesets whose session exists
        self._generation = itertools.count()     # ruleset names must be new each time they are created

    def _open(self) -> None:
        """Create the rulesets if they are not (or no longer) there, and mark the pack as just used."""
        if not self.rulesets:
            prefix = f"kbopt_{self.pack.version}_{id(self)}_{next(self._generation)}"
            levels: dict[int, list[_Ruleset]] = {}
            for index, (text, level, needs, feedback, fields, names) in enumerate(ruleset_texts(self.pack)):
                self.rule_of.update((name, name.split("#", 1)[0]) for name in names if name != MARKER)
                handle = self._core.create_ruleset(f"{prefix}_{index}", text)
                always = any(not n for n in needs)
                levels.setdefault(level, []).append(
                    _Ruleset(handle, () if always else tuple(frozenset(n) for n in needs), frozenset(feedback), fields))
            self.rulesets = [levels[level] for level in sorted(levels)]
        _live[self.key] = self
        _live.move_to_end(self.key)
        while len(_live) > MAX_LIVE:
            _, evicted = _live.popitem(last=False)
            evicted._close()

    def _close(self) -> None:
        """Delete the rulesets; a later run creates them again (_open)."""
        levels, self.rulesets = self.rulesets, []
        sessions, self._sessions = self._sessions, set()
        for rulesets in levels:
            for ruleset in rulesets:
                if ruleset.handle in sessions:       # deleted before its ruleset, as sessions always were
                    self._core.delete_state(ruleset.handle, SESSION)
                self._core.delete_ruleset(ruleset.handle)

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

    def _start(self, handle: int) -> None:
        """Open the ruleset's session with the fact only the marker rule matches, and retract it.
        durable_rules sets a session's action context when an action starts, and deleting a
        session whose context was never set frees whatever its allocator left there (docs/
        evaluators.md): with one action taken first, the session may be deleted whatever its
        evaluations' facts matched, and those facts start no action but their rules'."""
        self._sessions.add(handle)
        self._assert(handle, START_FACT)
        self._core.retract_fact(handle, START_FACT)

    def _fragment(self, path: str, value: Any) -> str:
        """A fact's part of the asserted fact's text: `,"a3":0.5`; a list's `,"a4":1,"a4_0":true,...`.
        Kept per fact and value (with its type: 1, 1.0 and True are told apart), bounded: most of
        the facts of one deployment's evaluations come back unchanged (-0.0 may travel as 0.0,
        which every test reads the same)."""
        items = self.item_prefixes.get(path)
        if items is None:
            key = (path, type(value), value)
            try:
                text = self._fragments.get(key)
            except TypeError:        # a value that cannot be a key: not kept
                return self.prefix[path] + encode(value)
            if text is None:
                if len(self._fragments) >= FRAGMENTS_KEPT:
                    self._fragments.clear()
                text = self._fragments[key] = self.prefix[path] + encode(value)
            return text
        return self.prefix[path] + "1" + "".join(prefix + ("true" if item in value else "false") for prefix, item in items)

    def run(self, values: dict[str, Any]) -> Derivation:
        self._open()
        derived = DerivedFacts(values, self.pack)
        fired: set[str] = set()
        asserted: list[tuple[int, str]] = []      # (ruleset, fact text), to retract afterwards
        failed: int | None = None                 # a ruleset whose assert raised: its session state is unknown
        # The facts some rule reads, input or derived so far -> their text in the asserted fact.
        # An input that names a derived fact stands until a rule derives the fact: the derived
        # value then replaces it, as it does in the reference's known facts and in the final facts.
        fragments = {path: self._fragment(path, values[path]) for path in self.read & values.keys()}
        present = fragments.keys()
        derived_values, conclude = derived.values, derived.conclude
        stopped: EvaluationError | None = None     # a fired rule that could not derive its facts
        try:
            for rulesets in self.rulesets:
                new: set[str] | None = None       # None: the level's first round, where every ruleset runs
                while new is None or new:
                    produced: set[str] = set()
                    for ruleset in rulesets:
                        if new is not None and ruleset.feedback.isdisjoint(new):
                            continue
                        # A rule tests `$ex` on each fact it needs: with one absent it cannot match.
                        if ruleset.needs and not any(present >= needs for needs in ruleset.needs):
                            continue
                        text = HEAD + "".join(map(fragments.get, ruleset.fields, itertools.repeat(""))) + "}"
                        asserted.append((ruleset.handle, text))
                        try:
                            if ruleset.handle not in self._sessions:
                                self._start(ruleset.handle)
                            names = self._assert(ruleset.handle, text)
                        except BaseException:
                            failed = ruleset.handle
                            raise
                        for name in names:
                            rule_id = self.rule_of.get(name)
                            if rule_id is None or rule_id in fired:
                                continue
                            fired.add(rule_id)
                            conclude(self.rules[rule_id])
                            for path in self.feeds.get(rule_id, ()):
                                # set now (a fact another rule derived earlier is in fragments already)
                                if (path not in fragments or path in values) and (credit := derived_values.get(path)) is not None:
                                    text = self._fragment(path, credit[0])
                                    if fragments.get(path) != text:
                                        fragments[path] = text
                                        produced.add(path)
                    new = produced
        except EvaluationError as error:
            stopped = error
        finally:
            self._clear(asserted, failed)
        if stopped is not None:
            _say_as_the_reference(self.pack, values, stopped)
        return finish(self.pack, fired, derived)

    def _clear(self, asserted: list[tuple[int, str]], failed: int | None) -> None:
        """Leave every session empty for the next evaluation: retract the facts asserted into it
        (a fact left there would make the same fact of a later evaluation "already observed", and
        match nothing). Retracting is cheap; deleting and re-creating a session per evaluation was
        not: its state is large, and glibc gave the freed heap back to the system each time only
        to fault it in again, up to 90% of an evaluation. A session whose assert raised (an action
        abandoned) or whose retract failed is deleted instead, and starts afresh."""
        broken = set() if failed is None else {failed}
        error: BaseException | None = None
        for handle, text in asserted:
            if handle in broken:
                continue
            try:
                self._core.retract_fact(handle, text)
            except BaseException as raised:     # re-raised below, once every session is clean
                error = error or raised
                broken.add(handle)
        for handle in broken:
            self._sessions.discard(handle)
            self._core.delete_state(handle, SESSION)
        if error is not None:
            raise error
