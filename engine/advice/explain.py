"""After chaining: which facts are known, absent or unknown, and why each rule did or did not fire."""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, NamedTuple, assert_never

from kbopt.engine.evaluators.closures import compile_condition
from kbopt.engine.evaluators.derivation import Derivation
from kbopt.engine.evaluators.reference import schedule_order
from kbopt.engine.lang.logic import ABSENT, KNOWN, MISSING, UNKNOWN, Lookup, undecided_ways
from kbopt.engine.lang.nodes import And, Cmp, Condition, Const, Contains, Fact, Known, Needs, Not, OneOf, Or, facts_of
from kbopt.engine.lang.text import render
from kbopt.engine.pack.graph import strongly_connected
from kbopt.engine.pack.kept import Kept
from kbopt.engine.pack.rule import Pack, Rule
from kbopt.kb.vocabulary import Vocabulary


class Check(NamedTuple):
    """One comparison that held: `fact` (value) `op` threshold, or against another fact. (A
    NamedTuple, immutable like the frozen dataclasses: an advice makes about a hundred, and a
    tuple is built in a third of the time.)"""
    fact: str
    value: Any
    op: str
    threshold: Any = None
    parameter: str | None = None
    against: str | None = None


# A rule's own share of what leaves it undecided: the missing inputs it reads, and the unknown
# derived facts it reads (in the order it reads them).
Own = tuple[frozenset[str], tuple[str, ...]]


def own_of(undecided: list[str]) -> Own:
    """Undecided facts (undecided_by's) told apart: missing inputs, unknown derived facts."""
    missing: list[str] = []
    unknown: list[str] = []
    for path in undecided:
        (unknown if Vocabulary.is_derived(path) else missing).append(path)
    return frozenset(missing), tuple(dict.fromkeys(unknown))


class ExplainForm:
    """What explaining a rule uses, made once per pack, each part when first used: its condition
    as the evaluators' closure (a warm advice 1.35x faster than by the tree walk, a cold one the
    same), and the tree walk's undecided facts where it is left undecided."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    @cached_property
    def _check(self) -> Callable[[Lookup], bool | None]:
        return compile_condition(self.rule.fire_condition)

    def check(self, known: dict[str, Any], status: dict[str, str]) -> bool | None:
        """Its fire condition on the final facts (known, statuses)."""
        return self._check(final_lookup(known, status))

    @cached_property
    def _reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(facts_of(self.rule.fire_condition)))

    @cached_property
    def _owns(self) -> Kept[tuple[tuple[str, Any], ...], tuple[Own, tuple[frozenset[str], ...]]]:
        return Kept(OWNS_KEPT)

    def own(self, known: dict[str, Any], status: dict[str, str]) -> tuple[Own, tuple[frozenset[str], ...]]:
        """The facts that leave it undecided, told apart, and the ways to decide it (alternatives).
        They follow from what the facts it reads are (status and value) alone, so they are kept
        per rule under that once it comes back: the lines of a batch, the replicas of a fleet and
        sparse fact sets mostly leave a rule undecided by the same facts."""
        lookup = final_lookup(known, status)
        key = tuple(map(lookup, self._reads))
        try:
            found = self._owns.get(key)
        except TypeError:            # a list value: worked out, not kept
            facts, ways = undecided_ways(self.rule.fire_condition, lookup)
            return own_of(facts), tuple(ways)
        if found is None:
            facts, ways = undecided_ways(self.rule.fire_condition, lookup)
            found = own_of(facts), tuple(ways)
            self._owns.offer(key, found)
        return found

    @cached_property
    def witnesses(self) -> Witnesses:
        """Its condition's witnesses."""
        return _compiled_witnesses(self.rule.when)


class NotEvaluated(NamedTuple):      # about forty an advice: a tuple is built in a third of the time
    """A rule left undecided, and the input facts that, once known, would decide it; where its
    condition leaves a choice, the sets of them any one of which would (`one_of`, else empty)."""
    rule: str
    title: str
    missing: tuple[str, ...]
    one_of: tuple[tuple[str, ...], ...] = ()


WALKS_KEPT = 256       # not-evaluated walks a pack keeps: about 14 KB each, 3.5 MB at most
OWNS_KEPT = 32         # a rule's undecided facts and ways kept per statuses of what it reads: a few hundred bytes each


def final_lookup(known: dict[str, Any], status: dict[str, str]) -> Lookup:
    """The final facts as a Lookup: a known fact's value; a derived fact no rule produced is
    absent or unknown (`status`); an input not given is missing."""
    def lookup(path: str) -> tuple[str, Any]:
        if path in known:
            return KNOWN, known[path]
        if Vocabulary.is_derived(path):
            return status.get(path, ABSENT), None
        return MISSING, None
    return lookup


def absent_order(pack: Pack) -> tuple[tuple[str, ...], dict[str, int], dict[str, tuple[str, ...]]]:
    """The derived facts in the order their producers run (schedule_order, by the last of them),
    each one's place in it, and for each the facts with a producer that reads it."""
    rank = {rule_id: index for index, component in enumerate(schedule_order(pack)) for rule_id in component}
    order = tuple(sorted(pack.producers, key=lambda path: (max(rank[r] for r in pack.producers[path]), path)))
    readers: dict[str, dict[str, None]] = {}
    rules = pack.by_id()
    for path in order:
        for producer in pack.producers[path]:
            for read in facts_of(rules[producer].fire_condition):
                if read in pack.producers:
                    readers.setdefault(read, {})[path] = None
    return order, {path: index for index, path in enumerate(order)}, {path: tuple(r) for path, r in readers.items()}


class FinalFacts:
    """Facts at the fix-point, with three-valued status for derived ones.

    A derived fact no rule produced is *absent* when every rule that could produce it is false
    on known facts, and *unknown* when one of them could not be evaluated for lack of facts.
    """

    def __init__(self, pack: Pack, inputs: dict[str, Any], derivation: Derivation):
        self.pack, self.inputs = pack, inputs
        self.derived = {path: value for path, (value, _) in derivation.derived.items()}
        self.known = {**inputs, **self.derived}        # one dict read per lookup (the two never share a path)
        self.fired = set(derivation.fired)
        self.rules = pack.by_id()
        runtime = pack.runtime
        if runtime.explain_forms is None:
            runtime.explain_forms = {rule.id: ExplainForm(rule) for rule in pack.rules}
        if runtime.absent_order is None:
            runtime.absent_order = absent_order(pack)
        self.compiled = runtime.explain_forms
        self.status: dict[str, str] = {}
        # A Lookup (status, value) over the two dicts alone: what an advice's texts keep of this.
        self.lookup: Lookup = final_lookup(self.known, self.status)
        self._owns: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
        self._ways: dict[str, tuple[frozenset[str], ...]] = {}      # each undecided rule's, with its own facts
        self._producers: dict[str, tuple[str, ...]] = {}
        self._by_path: dict[str, frozenset[str]] = {}
        self._decision: dict[str, bool | None] = {}
        self._reachable: dict[str, frozenset[str]] = {}
        status, known, fired, compiled = self.status, self.known, self.fired, self.compiled
        order, position, readers = runtime.absent_order
        queue = [path for path in order if path not in self.derived]
        for path in sorted(queue):
            status[path] = UNKNOWN
        # A derived fact no rule produced is absent once every producer that did not fire is
        # false. In dependency order each fact's producers are checked after the facts they
        # read, so one pass settles an acyclic pack; a fact that turns absent after a reader of
        # it was checked (within a cycle, or in a second round) sends that reader round again.
        # The statuses are those of checking every fact again until none changes: a check,
        # three-valued, only goes from unknown to true or false as facts turn absent, never back.
        first, index = len(queue), 0
        while index < len(queue):
            path = queue[index]
            index += 1
            if status[path] == UNKNOWN and all(
                    compiled[r].check(known, status) is False for r in pack.producers[path] if r not in fired):
                status[path] = ABSENT
                for reader in readers.get(path, ()):
                    if status.get(reader) == UNKNOWN and (index > first or position[reader] <= position[path]):
                        queue.append(reader)

    def not_evaluated(self) -> tuple[NotEvaluated, ...]:
        """Every rule left undecided, in pack order, with the input facts that, once known, would
        decide it (what to collect): its own missing inputs and those of every rule reachable from
        it through the undecided producers of the unknown derived facts it reads. Each rule's and
        each unknown fact's share is computed once, and a cycle of rules shares one set (strongly
        connected components), so the walk is linear in the pack where a naive recursion is
        exponential in its chains.

        The walk reads nothing but the undecided rules and what each reads itself (`_own`), so
        its result is kept per pack under exactly that, once it comes back (engine/pack/kept.py):
        replicas of one deployment, or the lines of a batch, mostly lack the same facts, and all
        but the first two skip the walk (and take the same tuple)."""
        for rule in self.pack.rules:
            if rule.id not in self.fired:
                self.decision(rule.id)
        # A rule that fired held: absent from the decisions, it is not among the undecided.
        undecided = [rule for rule in self.pack.rules if self._decision.get(rule.id, False) is None]
        key: tuple[object, ...] = tuple((rule.id, *self._own(rule.id)) for rule in undecided)
        runtime = self.pack.runtime
        walks = runtime.not_evaluated_walks
        if walks is None:
            walks = runtime.not_evaluated_walks = Kept(WALKS_KEPT)
        found = walks.get(key)
        if found is None:
            found = tuple(NotEvaluated(rule.id, rule.title, missing)
                          for rule, missing in zip(undecided, self._walk(undecided), strict=True))
            walks.offer(key, found)
        return found

    def with_alternatives(self, waiting: tuple[NotEvaluated, ...]) -> tuple[NotEvaluated, ...]:
        """`waiting` (not_evaluated's) with `one_of` where a rule's condition can be decided in
        more than one way: `x > 1 or y > 1` needs x or y, not both. A derived fact it waits on
        stands for everything its undecided producers wait on."""
        missing_of = {item.rule: item.missing for item in waiting}
        out = []
        for item in waiting:
            ways: list[frozenset[str]] = []
            self._own(item.rule)          # its ways come with its own facts
            for way in self._ways[item.rule]:
                facts: set[str] = set()
                for path in way:
                    if Vocabulary.is_derived(path):
                        facts.update(*(missing_of.get(p, ()) for p in self._waited_on(path)))
                    else:
                        facts.add(path)
                ways.append(frozenset(facts))
            unique = [way for way in dict.fromkeys(ways) if way]
            unique = [way for way in unique if not any(other < way for other in unique)]
            out.append(item._replace(one_of=tuple(sorted(tuple(sorted(way)) for way in unique)))
                       if len(unique) > 1 else item)
        return tuple(out)

    def _walk(self, undecided: list[Rule]) -> tuple[tuple[str, ...], ...]:
        """not_evaluated's missing inputs of each undecided rule, in the order given."""
        waiting = {rule.id for rule in undecided}
        done = self._reachable
        # In dependency order a rule comes after the producers it can wait on: a rule alone in
        # its component takes their sets as they are; a cycle goes through the general walk.
        for component in schedule_order(self.pack):
            if len(component) > 1:
                self._reachable_missing([rule_id for rule_id in component if rule_id in waiting])
                continue
            rule_id = component[0]
            if rule_id not in waiting or rule_id in done:
                continue
            own, unknown = self._own(rule_id)
            if any(rule_id in self._waited_on(path) for path in unknown):     # it waits on itself
                self._reachable_missing([rule_id])
                continue
            done[rule_id] = own.union(*(self._path_missing(path) for path in unknown))
        return tuple(tuple(sorted(done[rule.id])) for rule in undecided)

    def _own(self, rule_id: str) -> tuple[frozenset[str], tuple[str, ...]]:
        """The missing inputs `rule_id` reads itself, and the unknown derived facts it reads."""
        own = self._owns.get(rule_id)
        if own is None:
            own, self._ways[rule_id] = self.compiled[rule_id].own(self.known, self.status)
            self._owns[rule_id] = own
        return own

    def _waited_on(self, path: str) -> tuple[str, ...]:
        """The undecided producers of an unknown derived fact (once per fact, however many wait)."""
        producers = self._producers.get(path)
        if producers is None:
            producers = self._producers[path] = tuple(p for p in self.pack.producers.get(path, ()) if self._undecided(p))
        return producers

    def _path_missing(self, path: str) -> frozenset[str]:
        """What an unknown derived fact waits for: the union over its undecided producers, whose
        sets are done (they come before its readers); once per fact, however many read it."""
        missing = self._by_path.get(path)
        if missing is None:
            missing = self._by_path[path] = frozenset().union(*(self._reachable[p] for p in self._waited_on(path)))
        return missing

    def _step(self, rule_id: str) -> tuple[frozenset[str], tuple[str, ...]]:
        """The missing inputs `rule_id` reads itself, and the undecided rules it waits on."""
        own, unknown = self._own(rule_id)
        return own, tuple(dict.fromkeys(p for path in unknown for p in self._waited_on(path)))

    def decision(self, rule_id: str) -> bool | None:
        """The rule's condition on the final facts: True, False, or None (not evaluated)."""
        decided = self._decision
        if rule_id not in decided:
            decided[rule_id] = self.compiled[rule_id].check(self.known, self.status)
        return decided[rule_id]

    def _undecided(self, rule_id: str) -> bool:
        return self.decision(rule_id) is None

    def _reachable_missing(self, starts: list[str]) -> dict[str, frozenset[str]]:
        """Union of `_step(r)[0]` over every rule r reachable from each start: components come
        sinks first, so each one's successors outside it are already done."""
        done = self._reachable
        for component in strongly_connected(starts, lambda rule_id: self._step(rule_id)[1], finished=done):
            members = set(component)
            missing: set[str] = set()
            for member in component:
                own, waits_on = self._step(member)
                missing |= own
                for successor in waits_on:
                    if successor not in members:
                        missing |= done[successor]
            shared = frozenset(missing)
            for member in component:
                done[member] = shared
        return done

    def witness(self, rule: Rule, shown: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], tuple[Check, ...]]:
        """The fact values that made `rule` fire, and the comparisons that held; a fact's value
        is as `shown` gives it, where it does (the facts as the user wrote them)."""
        return witness_of(self.compiled[rule.id].witnesses, self.known, self.lookup, shown)


_new_check = functools.partial(tuple.__new__, Check)    # Check((...)) without NamedTuple's Python-level __new__


def witness_of(witnesses: Witnesses, known: dict[str, Any], lookup: Lookup,
               shown: Mapping[str, Any] | None) -> tuple[dict[str, Any], tuple[Check, ...]]:
    """FinalFacts.witness on the final facts (`known`, and `lookup` over them): a comparison
    with a literal, the commonest leaf, is made here; any other leaf by its maker."""
    facts: dict[str, Any] = {}
    checks: list[Check] = []
    for make in (witnesses if isinstance(witnesses, tuple) else witnesses(lookup)):
        if type(make) is LiteralWitness:
            path = make.path
            if path in known:
                value = facts[path] = known[path]
            else:
                value = None
            checks.append(_new_check((path, value, make.op, make.threshold, make.parameter, None)))
        else:
            checks.append(make(lookup, facts))
    if shown and not shown.keys().isdisjoint(facts):
        facts = {path: shown.get(path, value) for path, value in facts.items()}
    return facts, tuple(checks)


WitnessMaker = Callable[[Lookup, dict[str, Any]], Check]    # adds the leaf's known facts, returns its Check
# Witnesses: fixed where no `or` chooses them, else chosen on the facts.
Witnesses = tuple[WitnessMaker, ...] | Callable[[Lookup], tuple[WitnessMaker, ...]]


def witnesses_on(witnesses: Witnesses, lookup: Lookup) -> tuple[WitnessMaker, ...]:
    return witnesses if isinstance(witnesses, tuple) else witnesses(lookup)


def _compiled_witnesses(node: Condition) -> Witnesses:
    """logic.witnesses compiled: the leaves that made a true condition true (the first true
    branch of each `or`), each as what `witness` does with it."""
    match node:
        case And(items=items):
            parts = tuple(_compiled_witnesses(item) for item in items)
            if all(isinstance(part, tuple) for part in parts):
                return tuple(make for part in parts if isinstance(part, tuple) for make in part)
            return lambda lookup: tuple(make for part in parts for make in witnesses_on(part, lookup))
        case Or(items=items):
            branches = tuple((compile_condition(item), _compiled_witnesses(item)) for item in items)

            def first_true(lookup: Lookup) -> tuple[WitnessMaker, ...]:
                for holds, leaves in branches:
                    if holds(lookup) is True:
                        return witnesses_on(leaves, lookup)
                return ()
            return first_true
        case Not() | Cmp() | OneOf() | Contains() | Known() | Needs():
            return (_witness_maker(node),)
        case _ as unreachable:
            assert_never(unreachable)


class LiteralWitness:
    """The witness maker of a comparison with a literal: what its Check holds but the value,
    which `witness_of` reads inline (a call per leaf saved); called, it is any other maker."""
    __slots__ = ("op", "parameter", "path", "threshold")

    def __init__(self, path: str, op: str, threshold: Any, parameter: str | None) -> None:
        self.path, self.op, self.threshold, self.parameter = path, op, threshold, parameter

    def __call__(self, lookup: Lookup, facts: dict[str, Any]) -> Check:
        status, value = lookup(self.path)
        if status == KNOWN:
            facts[self.path] = value
        return Check(self.path, value, self.op, self.threshold, self.parameter)


def _witness_maker(leaf: Condition) -> WitnessMaker:
    """`witness` for one leaf: a comparison with a literal directly, any other through _check."""
    if isinstance(leaf, Cmp) and isinstance(leaf.right, Const):
        return LiteralWitness(leaf.left.path, leaf.op, leaf.right.value, leaf.right.parameter)
    paths = tuple(facts_of(leaf))
    check = _checker(leaf)

    def other(lookup: Lookup, facts: dict[str, Any]) -> Check:
        for path in paths:
            status, value = lookup(path)
            if status == KNOWN:
                facts[path] = value
        return check(lookup)
    return other


def _checker(leaf: Condition) -> Callable[[Lookup], Check]:
    """`_check` for one leaf, its kind matched (and any text rendered) once, not per advice."""
    match leaf:
        case Cmp(op=op, left=Fact(path=left), right=Fact(path=right)):
            return lambda lookup: _new_check((left, lookup(left)[1], op, lookup(right)[1], None, right))
        case Cmp(op=op, left=Fact(path=left), right=Const(value=threshold, parameter=parameter)):
            return lambda lookup: _new_check((left, lookup(left)[1], op, threshold, parameter, None))
        case Not(item=And() | Or() as item):
            path, text = next(facts_of(leaf)), render(item)
            return lambda lookup: _new_check((path, lookup(path)[1], "not", text, None, None))
        case Not(item=item):
            inner = _checker(item)

            def negation(lookup: Lookup) -> Check:
                fact, value, op, threshold, parameter, against = inner(lookup)
                return _new_check((fact, value, "not " + op, threshold, parameter, against))
            return negation
        case OneOf(fact=Fact(path=path), values=values, negated=negated):
            word = "not in" if negated else "in"
            return lambda lookup: _new_check((path, lookup(path)[1], word, list(values), None, None))
        case Contains(fact=Fact(path=path), item=item, negated=negated):
            word = "lacks" if negated else "has"
            return lambda lookup: _new_check((path, lookup(path)[1], word, item, None, None))
        case Known(fact=Fact(path=path), negated=negated):
            word = "missing" if negated else "known"
            return lambda lookup: _new_check((path, lookup(path)[1], word, None, None, None))
        case _:                 # and, or, needs: not witness leaves (and a comparison of other shape)
            return lambda lookup: _check(leaf, lookup)


def _check(leaf: Condition, lookup: Lookup) -> Check:
    """The comparison a witness leaf made, with the values it compared."""
    match leaf:
        case Cmp(op=op, left=left, right=right):
            value = lookup(left.path)[1]
            if isinstance(right, Fact):
                return Check(left.path, value, op, lookup(right.path)[1], against=right.path)
            return Check(left.path, value, op, right.value, parameter=right.parameter)
        case Not(item=And() | Or() as item):
            path = next(facts_of(leaf))
            return Check(path, lookup(path)[1], "not", render(item))
        case Not(item=item):
            inner = _check(item, lookup)
            return Check(inner.fact, inner.value, "not " + inner.op, inner.threshold, inner.parameter, inner.against)
        case OneOf(fact=fact, values=values, negated=negated):
            return Check(fact.path, lookup(fact.path)[1], "not in" if negated else "in", list(values))
        case Contains(fact=fact, item=item, negated=negated):
            return Check(fact.path, lookup(fact.path)[1], "lacks" if negated else "has", item)
        case Known(fact=fact, negated=negated):
            return Check(fact.path, lookup(fact.path)[1], "missing" if negated else "known")
        case And() | Or() | Needs():
            raise TypeError(f"not a witness leaf: {leaf!r}")
        case _ as unreachable:
            assert_never(unreachable)
