"""Advice: the frozen, ordered value every renderer formats, and its canonical JSON (advice/2:
advice/1 plus the performance model's estimates, each strategy's expected gains and the plan;
docs/advice-format.md)."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kbopt.engine.advice.estimates import Estimate
from kbopt.engine.advice.explain import Check, NotEvaluated
from kbopt.engine.advice.restate import Restated
from kbopt.engine.advice.symptoms import Symptom
from kbopt.engine.advice.wanted import Wanted
from kbopt.engine.advice.whatif import Gain, Plan
from kbopt.kb.provenance import USER, Provenance

ADVICE_FORMAT = "advice/2"


@dataclass(frozen=True)
class RuleNote:
    """A line of advice text and the rule behind it: a strategy's caveat, or a warning."""
    rule: str
    text: str


@dataclass(frozen=True)
class StrategyAdvice:
    id: str
    layer: str
    title: str
    params: dict[str, Any]
    because: tuple[str, ...]
    caveats: tuple[RuleNote, ...] = ()
    gain: str | None = None
    weight: float = 0.0
    recommended_by: tuple[str, ...] = ()   # the subset of `because` that recommended it
    key: str = ""                          # node in the conflict graph: `quantization[int8]`
    expected: tuple[Gain, ...] = ()        # what the performance model says applying it moves
    # engine -> the lines that set it there (kb/engines/<engine>.yaml); a note (no such setting) starts with "# "
    settings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    status: str = "change"                 # change: to apply; keep: already in place (not an action)
    sized: tuple[tuple[str, str], ...] = ()  # (parameter, why): a batch cap resized after the whole plan (caps.py)
    # (parameter, value): what a parameter sized after the plan reads on today's deployment, for a
    # script that cannot apply the whole plan yet (a quantization that needs another checkpoint)
    before_plan: tuple[tuple[str, Any], ...] = ()
    # the candidates its `expected` was evaluated with: a change the rules allow only together
    # with them (a Require between two changes), so its gains are theirs too
    together: tuple[str, ...] = ()
    # a change that works against an objective alone and not beside these other changes of the
    # advice: why alone, and them (a script that cannot apply them leaves it out, launch.py)
    alone: str = ""
    beside: tuple[str, ...] = ()
    # a variant one server's script applies on today's checkpoint until the plan's variant, which
    # needs another checkpoint, can be loaded (a flag before a new checkpoint): that variant's key.
    # It is not in the plan's figures, which are the other variant's.
    stands_in_for: str = ""


@dataclass(frozen=True)
class Rejection:
    id: str
    params: dict[str, Any]
    because: tuple[str, ...]
    reason: str
    key: str = ""


def _no_texts() -> tuple[str, str]:
    return "", ""


class Firing(NamedTuple):
    """A rule that fired: the fact values and comparisons that made it fire, and what it
    derived. A NamedTuple, like Check: an advice makes one per fired rule (660 with a 2,000-rule
    pack), and a tuple is built in a third of a frozen dataclass's time and is one object for
    the garbage collector to follow, where the dataclass with its attribute dict was two."""
    rule: str
    title: str
    layer: str
    facts: dict[str, Any]
    checks: tuple[Check, ...]
    when: str
    source: tuple[str, ...]
    location: str
    pack: str
    derived: dict[str, Any]
    # (when_values, explanation), written when a report first reads either and kept by `texts`.
    # The JSON carries neither, and writing them for every firing was a fourteenth of a
    # --facts-jsonl document's cost. They follow from the rule and the facts, which the advice
    # holds: the advisor's texts compare equal to one another (engine/advice/advisor.py).
    texts: Callable[[], tuple[str, str]] = _no_texts

    @property
    def when_values(self) -> str:
        """The condition with each known fact's value beside it."""
        return self.texts()[0]

    @property
    def explanation(self) -> str:
        """The rule's `because` with the values filled in."""
        return self.texts()[1]


@dataclass(frozen=True)
class Edge:
    kind: str                     # excludes | requires | mitigates | vetoes
    source: str
    target: str
    because: tuple[str, ...]      # rule ids, or "kb:strategies" for the catalog's own relations


@dataclass(frozen=True)
class Advice:
    bottleneck: str
    bottleneck_rule: str | None
    strategies: tuple[StrategyAdvice, ...]
    rejected: tuple[Rejection, ...]
    fired: tuple[Firing, ...]
    not_evaluated: tuple[NotEvaluated, ...]
    facts: dict[str, Any]
    provenance: dict[str, Provenance]
    derived: dict[str, Any]
    graph: tuple[Edge, ...]
    pack_version: str
    warnings: tuple[RuleNote, ...] = ()
    bottleneck_missing: tuple[str, ...] = ()   # input facts the bottleneck rules wait on, when unknown
    estimates: dict[str, Estimate] = field(default_factory=dict)   # name (path without `derived.`) -> estimate
    plan: Plan | None = None                   # the chosen strategies' effects together, evaluated once
    symptoms: tuple[Symptom, ...] = ()         # what the facts show going wrong, before any rule (symptoms.py)
    to_collect: tuple[Wanted, ...] = ()        # the facts to collect next, heaviest first (wanted.py)
    restated: Restated | None = None           # a --set what-if of the deployment: what it kept and re-estimated (restate.py)
    # the pack's values of the engines' memory-rule parameters (settings.pack_constants): the launch
    # scripts written from this advice size a memory fraction on them, as the advice did (not in advice/2)
    constants: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kbopt": ADVICE_FORMAT,
            "bottleneck": self.bottleneck,
            "strategies": [
                {"id": s.id, "status": s.status, "layer": s.layer, "params": s.params, "because": list(s.because),
                 "caveats": [{"rule": c.rule, "text": c.text} for c in s.caveats],
                 **({"gain": s.gain} if s.gain else {}),
                 **({"expected": [g.to_dict() for g in s.expected]} if s.expected else {}),
                 **({"together": list(s.together)} if s.together else {}),
                 **({"harmful_alone": {"reason": s.alone, "beside": list(s.beside)}} if s.beside else {}),
                 **({"stands_in_for": s.stands_in_for} if s.stands_in_for else {}),
                 **({"settings": {engine: list(lines) for engine, lines in s.settings.items()}} if s.settings else {})}
                for s in self.strategies
            ],
            "rejected": [{"id": r.id, **({"params": r.params} if r.params else {}), "because": list(r.because),
                          "reason": r.reason} for r in self.rejected],
            "fired": [_firing(f) for f in self.fired],
            "not_evaluated": [{"rule": n.rule, "missing": list(n.missing),
                               **({"one_of": [list(way) for way in n.one_of]} if n.one_of else {})}
                              for n in self.not_evaluated],
            "warnings": [{"rule": w.rule, "text": w.text} for w in self.warnings],
            "symptoms": [s.to_dict() for s in self.symptoms],     # after advice/1's keys, which keep their order
            "to_collect": [w.to_dict() for w in self.to_collect],
            **({"what_if": self.restated.to_dict()} if self.restated else {}),
            "facts": {path: _fact(value, self.provenance.get(path)) for path, value in self.facts.items()},
            "derived": self.derived,
            "estimates": {name: e.to_dict() for name, e in self.estimates.items()},
            "plan": self.plan.to_dict() if self.plan else None,
            "conflicts": [{"kind": e.kind, "from": e.source, "to": e.target, "because": list(e.because)} for e in self.graph],
            "rules": {"pack": self.pack_version, "bottleneck_rule": self.bottleneck_rule},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# The parts written for every fired rule, check and fact: plain statements, each key set where
# it belongs, rather than dicts unpacked into dicts (a tenth of the cost of an advice's JSON).

def _firing(firing: Firing) -> dict[str, Any]:
    out: dict[str, Any] = {"rule": firing.rule}
    if firing.pack != "builtin":
        out["pack"] = firing.pack
    out["facts"] = firing.facts
    out["checks"] = [_check(check) for check in firing.checks]
    if firing.derived:
        out["derived"] = firing.derived
    return out


def _fact(value: Any, provenance: Provenance | None) -> dict[str, Any]:
    return {"value": value, **(provenance or USER).in_advice}


def _check(check: Check) -> dict[str, Any]:
    fact, value, op, threshold, parameter, against = check
    out: dict[str, Any] = {"fact": fact, "value": value, "op": op}
    if threshold is not None:
        out["threshold"] = threshold
    if parameter:
        out["parameter"] = parameter
    if against:
        out["against"] = against
    return out
