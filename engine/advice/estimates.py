"""The performance model's numbers: every derived fact the vocabulary marks `estimate: true`, with
the rule that computed it, the facts its expression read, and how far it can be trusted.

Confidence follows the inputs, transitively through derived ones, and the lowest wins:
  high    measured (or collector-derived) facts, and configuration the user states (model shape,
          hardware, serving settings, constraints: it is what it is)
  medium  catalog values, proxy telemetry, and workload or telemetry numbers a user typed in
          (kbopt did not see them measured)
  low     a default stood in: the expression fell back past a fact that is not known
          (`coalesce(workload.concurrency_mean, default_batch_size)` without the concurrency), or
          it used a rule parameter named `default_*` (the pack's convention for a value assumed
          when a fact is missing, rules/parameters.yaml)
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple, assert_never

from kbopt.engine.evaluators.closures import compile_condition, compile_value, plain_value
from kbopt.engine.evaluators.derivation import Derivation
from kbopt.engine.lang.logic import KNOWN, Lookup, Missing, evaluate, not_held, value_of
from kbopt.engine.lang.nodes import Arith, Call, Const, Fact, IfElse, ListOf, Value, facts_of, unique_facts
from kbopt.engine.lang.operators import FUNCTIONS
from kbopt.engine.pack.rule import Derive, Pack
from kbopt.kb.catalog import ErrorBand
from kbopt.kb.vocabulary import DERIVED_SECTION, QUALITY_PREFIX, Vocabulary

Confidence = Literal["low", "medium", "high"]
LEVELS: tuple[Confidence, ...] = ("low", "medium", "high")    # weakest first: min() by index
DEFAULT_PARAMETER = "default_"                                 # a parameter assumed for a missing fact
CONFIGURATION = ("model", "hardware", "serving", "constraints")  # sections a user states, not measures


def weakest(levels: list[Confidence]) -> Confidence:
    """The lowest of the levels (LEVELS order), "high" for none."""
    return "low" if "low" in levels else "medium" if "medium" in levels else "high"


def input_confidence(path: str, quality: str | None) -> Confidence:
    """How far an input fact of this quality can be trusted (module docstring)."""
    if quality in ("measured", "derived"):
        return "high"
    if quality == "user" or quality is None:
        return "high" if path.split(".", 1)[0] in CONFIGURATION else "medium"
    return "medium"        # proxy, catalog


@functools.lru_cache(maxsize=4096)      # bounded: qualities come with the facts
def _input_level(path: str, quality: str | None) -> Confidence:
    """input_confidence, once per fact and quality (an advice asks about a hundred times)."""
    return input_confidence(path, quality)


@functools.lru_cache(maxsize=4096)      # bounded: a long-lived process may see many packs
def _guessed(parameters: tuple[str, ...]) -> tuple[str, ...]:
    """The `default_*` parameters among those a trace used: each assumed for a fact not seen."""
    return tuple(p for p in parameters if p.startswith(DEFAULT_PARAMETER))


class Trace(NamedTuple):
    """What one derive expression read on the way to its value, following only the branches
    taken: the known facts with their values, the facts it fell back past, the parameters used.
    (A NamedTuple: an advice traces about fifty, and a tuple is built in a third of the time.)"""
    read: dict[str, Any]
    fell_back: tuple[str, ...]
    parameters: tuple[str, ...]


Noter = Callable[[str], None]      # what a trace does with each fact it meets


def _noter(lookup: Lookup, read: dict[str, Any], fell_back: dict[str, None]) -> Noter:
    """What a trace does with each fact it meets: its value when known, else it fell back past it."""
    def note(path: str) -> None:
        status, value = lookup(path)
        if status == KNOWN:
            read[path] = value
        else:
            fell_back[path] = None
    return note


def trace(node: Value, lookup: Lookup) -> Trace:
    read: dict[str, Any] = {}
    fell_back: dict[str, None] = {}
    parameters: dict[str, None] = {}
    _walk(node, lookup, _noter(lookup, read, fell_back), parameters, fell_back)
    return Trace(read, tuple(fell_back), tuple(parameters))


def _walk(item: Value, lookup: Lookup, note: Noter, parameters: dict[str, None], fell_back: dict[str, None]) -> None:
    """trace's walk. A function of its own, not a closure in trace: a recursive closure holds
    itself, a reference cycle left for the garbage collector at every trace."""
    match item:
        case Const(parameter=parameter):
            if parameter:
                parameters[parameter] = None
        case Fact(path=path):
            note(path)
        case Arith(left=left, right=right):
            _walk(left, lookup, note, parameters, fell_back)
            _walk(right, lookup, note, parameters, fell_back)
        case ListOf(items=items):
            for each in items:
                _walk(each, lookup, note, parameters, fell_back)
        case Call(fn=fn, args=args) if FUNCTIONS[fn].alternatives:
            for arg in args:      # coalesce: the first alternative that computes is the one used
                try:
                    value_of(arg, lookup)
                except Missing:
                    fell_back.update((p, None) for p in unique_facts(arg) if lookup(p)[0] != KNOWN)
                    continue
                _walk(arg, lookup, note, parameters, fell_back)
                break
        case Call(args=args):
            for arg in args:
                _walk(arg, lookup, note, parameters, fell_back)
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            for path in dict.fromkeys(facts_of(condition)):
                note(path)
            _walk(then if evaluate(condition, lookup) else otherwise, lookup, note, parameters, fell_back)
        case _ as unreachable:
            assert_never(unreachable)


# A traced expression compiled once per pack: each step notes a fact, notes a parameter, or (for
# coalesce and if-else, whose path depends on the facts) runs a closure over the same state.
Step = tuple[Literal["fact", "parameter"], str] | Callable[[Lookup, Noter, dict[str, None], dict[str, None]], None]


def compile_trace(node: Value) -> Callable[[Lookup], Trace]:
    """`trace` compiled: the same Trace for every lookup (a test checks it on the built-in
    expressions), without walking the tree on every call."""
    steps = tuple(_steps(node))
    if all(isinstance(step, tuple) for step in steps):
        # No coalesce or if-else: the same facts and parameters every time, only their values vary.
        facts = tuple(dict.fromkeys(step[1] for step in steps if isinstance(step, tuple) and step[0] == "fact"))
        fixed = tuple(dict.fromkeys(step[1] for step in steps if isinstance(step, tuple) and step[0] == "parameter"))

        def straight(lookup: Lookup) -> Trace:
            read: dict[str, Any] = {}
            fell_back: list[str] = []
            for path in facts:
                status, value = lookup(path)
                if status == KNOWN:
                    read[path] = value
                else:
                    fell_back.append(path)
            return Trace(read, tuple(fell_back), fixed)
        return straight

    def traced(lookup: Lookup) -> Trace:
        read: dict[str, Any] = {}
        fell_back: dict[str, None] = {}
        parameters: dict[str, None] = {}
        _run(steps, lookup, _noter(lookup, read, fell_back), parameters, fell_back)
        return Trace(read, tuple(fell_back), tuple(parameters))
    return traced


def _run(steps: tuple[Step, ...], lookup: Lookup, note: Noter, parameters: dict[str, None],
         fell_back: dict[str, None]) -> None:
    for step in steps:
        if isinstance(step, tuple):
            if step[0] == "fact":
                note(step[1])
            else:
                parameters[step[1]] = None
        else:
            step(lookup, note, parameters, fell_back)


def _steps(node: Value) -> list[Step]:
    """What `trace`'s walk does at `node`, in order (see trace())."""
    match node:
        case Const(parameter=parameter):
            return [("parameter", parameter)] if parameter else []
        case Fact(path=path):
            return [("fact", path)]
        case Arith(left=left, right=right):
            return _steps(left) + _steps(right)
        case ListOf(items=items):
            return [step for item in items for step in _steps(item)]
        case Call(fn=fn, args=args) if FUNCTIONS[fn].alternatives and all(isinstance(a, (Fact, Const)) for a in args):
            # Facts and literals only (the usual `coalesce(fact, default_x)`): the first known fact
            # or the first literal is the one used, and the facts before it were fallen back past.
            simple = tuple((a.path, None) if isinstance(a, Fact) else (None, a.parameter)
                           for a in args if isinstance(a, (Fact, Const)))

            def first_of(lookup: Lookup, note: Noter, parameters: dict[str, None], fell_back: dict[str, None]) -> None:
                for path, parameter in simple:
                    if path is None:
                        if parameter:
                            parameters[parameter] = None
                        return
                    if lookup(path)[0] == KNOWN:
                        note(path)
                        return
                    fell_back[path] = None
            return [first_of]
        case Call(fn=fn, args=args) if FUNCTIONS[fn].alternatives:
            # A plain alternative (no coalesce or if-else in it) cannot compute while one of its
            # facts is not known: it is passed over without computing it and catching Missing.
            alternatives = tuple((compile_value(arg), unique_facts(arg), tuple(_steps(arg)), plain_value(arg))
                                 for arg in args)

            def first_known(lookup: Lookup, note: Noter, parameters: dict[str, None], fell_back: dict[str, None]) -> None:
                for compute, facts, steps, plain in alternatives:
                    if plain and any(lookup(p)[0] != KNOWN for p in facts):
                        fell_back.update((p, None) for p in facts if lookup(p)[0] != KNOWN)
                        continue
                    try:
                        compute(lookup)
                    except Missing:
                        fell_back.update((p, None) for p in facts if lookup(p)[0] != KNOWN)
                        continue
                    _run(steps, lookup, note, parameters, fell_back)
                    break
            return [first_known]
        case Call(args=args):
            return [step for arg in args for step in _steps(arg)]
        case IfElse(condition=condition, then=then, otherwise=otherwise):
            decide, branches = compile_condition(condition), (tuple(_steps(otherwise)), tuple(_steps(then)))
            noted: list[Step] = [("fact", path) for path in dict.fromkeys(facts_of(condition))]

            def branch(lookup: Lookup, note: Noter, parameters: dict[str, None], fell_back: dict[str, None]) -> None:
                _run(branches[decide(lookup) is True], lookup, note, parameters, fell_back)
            return [*noted, branch]
        case _ as unreachable:
            assert_never(unreachable)


class Estimate(NamedTuple):
    """One estimate of the model (a NamedTuple, like Gain: an advice makes a dozen or more)."""
    name: str                      # the derived fact's path without `derived.`
    value: Any
    unit: str | None
    rule: str                      # the rule that derived it
    confidence: Confidence
    inputs: dict[str, Any]         # fact path -> value its derive expression read
    defaults: tuple[str, ...] = ()  # what made it low: facts fallen back past, `default_*` parameters
    band: ErrorBand | None = None  # how far the model was off for this metric on benchmarks/validation

    @property
    def path(self) -> str:
        return DERIVED_SECTION + self.name

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "rule": self.rule,
                "confidence": self.confidence, "inputs": self.inputs,
                **({"defaults": list(self.defaults)} if self.defaults else {}),
                **({"error_band": self.band.to_dict()} if self.band is not None else {})}


def model_lookup(inputs: Mapping[str, Any], derived: Mapping[str, tuple[Any, str]]) -> Lookup:
    """The facts as chaining left them, as a Lookup: a derived fact no rule produced is absent.
    A closure over the two mappings, not a method of the Model: a model that held its own bound
    method would be a reference cycle, left for the garbage collector to find (with the what-ifs'
    models, about a third of what an advice left it)."""
    def lookup(path: str) -> tuple[str, Any]:
        if path in inputs:
            return KNOWN, inputs[path]
        if path in derived:
            return KNOWN, derived[path][0]
        return not_held(path)
    return lookup


class Model:
    """The estimates of one evaluation, and the confidence of every derived fact behind them."""

    def __init__(self, pack: Pack, inputs: Mapping[str, Any], derivation: Derivation,
                 levels: Mapping[str, Confidence] | None = None,
                 earlier: Model | None = None, recomputed: frozenset[str] = frozenset()) -> None:
        """`earlier`: the model of an evaluation this one re-ran (a what-if's baseline), which
        differs from it only in the derived facts `recomputed`; every other derived fact read
        the same facts with the same values, so its trace, confidence and estimate are taken
        over from `earlier` instead of traced again."""
        self.pack, self.inputs, self.derivation = pack, inputs, derivation
        self.levels = levels or {}      # input facts whose confidence the caller decides (a what-if's changes)
        self.traces: dict[str, Trace] = {}
        self._confidence: dict[str, tuple[Confidence, tuple[str, ...]]] = {}
        self._estimates: dict[str, Estimate] | None = None
        self._depends_anew: dict[str, frozenset[str]] = {}
        self.earlier, self.recomputed = earlier, recomputed
        self.lookup: Lookup = model_lookup(inputs, derivation.derived)
        # each derive expression's compile_trace, by (rule, fact), made once per pack
        self._compiled = pack.runtime.traces

    def _borrows(self, path: str) -> Model | None:
        """The earlier model, where it already knows all about `path`."""
        return self.earlier if self.earlier is not None and path not in self.recomputed else None

    def rule_of(self, path: str) -> str:
        return self.derivation.derived[path][1]

    def trace_of(self, path: str) -> Trace:
        done = self.traces.get(path)
        if done is not None:
            return done
        if self.earlier is not None and path not in self.recomputed:
            done = self.traces[path] = self.earlier.trace_of(path)
            return done
        rule_id = self.derivation.derived[path][1]
        traced = self._compiled.get((rule_id, path))
        if traced is None:
            traced = self._compiled[rule_id, path] = compile_trace(
                next(c.value for c in self.pack.by_id()[rule_id].then if isinstance(c, Derive) and c.path == path))
        done = self.traces[path] = traced(self.lookup)
        return done

    def confidence(self, path: str) -> tuple[Confidence, tuple[str, ...]]:
        """A derived fact's confidence and the defaults behind it (its own and its inputs')."""
        done = self._confidence.get(path)
        if done is not None:
            return done
        if self.earlier is not None and path not in self.recomputed:
            done = self._confidence[path] = self.earlier.confidence(path)
            return done
        self._confidence[path] = ("high", ())        # a cycle of rules adds nothing to itself
        t = self.trace_of(path)
        # An engine's own default standing in for a setting not given (no pipeline stages, the
        # default memory fraction) is likely right: medium. A default_* parameter assumed for a
        # quantity kbopt did not see (an efficiency, a batch size) is a guess: low.
        guessed = _guessed(t.parameters)
        # a fact whose absence means the feature is not there (no MIG slice, no sliding window) is
        # no assumption when absent: only the others lower the confidence and are named
        facts = self.pack.kb.vocabulary.facts
        assumed = [fact for fact in t.fell_back if not (fact in facts and facts[fact].absent_means_none)]
        low, medium = bool(guessed), bool(assumed)
        defaults = [*assumed, *guessed]
        for fact in t.read:
            if Vocabulary.is_derived(fact):
                level, behind = self.confidence(fact)
                defaults.extend(behind)
            elif fact in self.levels:
                level = self.levels[fact]
            else:
                quality = self.inputs.get(QUALITY_PREFIX + fact)
                level = _input_level(fact, quality if isinstance(quality, str) else None)
            if level == "low":
                low = True
            elif level == "medium":
                medium = True
        # weakest() of the levels met, in one pass
        result: tuple[Confidence, tuple[str, ...]] = (
            "low" if low else "medium" if medium else "high", tuple(dict.fromkeys(defaults)) if defaults else ())
        self._confidence[path] = result
        return result

    def estimates(self) -> dict[str, Estimate]:
        """Every `estimate: true` fact this evaluation derived, by name, in vocabulary order
        (computed once; callers do not change it)."""
        if self._estimates is not None:
            return self._estimates
        out: dict[str, Estimate] = {}
        earlier = self.earlier.estimates() if self.earlier is not None else {}
        for path in self.pack.kb.vocabulary.estimate_paths:
            if path not in self.derivation.derived:
                continue
            name = path.removeprefix(DERIVED_SECTION)
            if name in earlier and self._borrows(path) is not None:
                out[name] = earlier[name]
                continue
            spec = self.pack.kb.vocabulary.facts[path]
            level, defaults = self.confidence(path)
            rule = self.rule_of(path)
            # the band measures the built-in rules: a custom pack's rule for the same fact has none
            band = self.pack.kb.error_band(path) if self.pack.by_id()[rule].pack == "builtin" else None
            out[path.removeprefix(DERIVED_SECTION)] = Estimate(
                name=path.removeprefix(DERIVED_SECTION), value=self.derivation.derived[path][0], unit=spec.unit,
                rule=rule, confidence=level, inputs=dict(self.trace_of(path).read), defaults=defaults, band=band)
        self._estimates = out
        return out

    def depends_anew(self, path: str) -> frozenset[str]:
        """What a re-derived fact rests on through re-derived facts only: every fact read by the
        trace of `path` or of a re-derived fact it reads, transitively. It holds every changed
        input and every re-derived fact that `path` rests on: a fact taken over from the earlier
        model read nothing that changed, so the walk stops there."""
        done = self._depends_anew.get(path)
        if done is not None:
            return done
        seen: set[str] = set()
        stack = [path]
        while stack:
            for fact in self._read_by(stack.pop()):
                if fact not in seen:
                    seen.add(fact)
                    if fact in self.recomputed and fact in self.derivation.derived:
                        stack.append(fact)
        result = self._depends_anew[path] = frozenset(seen)
        return result

    def _read_by(self, path: str) -> list[str]:
        t = self.trace_of(path)
        return [*t.read, *t.fell_back]
