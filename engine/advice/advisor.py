"""Facts + pack -> Advice: run an evaluator, explain what fired, settle conflicts."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbopt.engine.advice.caps import CAP_PARAMS, ITL_CAPS, sized_cap
from kbopt.engine.advice.estimates import Model
from kbopt.engine.advice.explain import FinalFacts
from kbopt.engine.advice.launch import quantizes_as_it_loads
from kbopt.engine.advice.model import Advice, Edge, Firing, Rejection, RuleNote, StrategyAdvice
from kbopt.engine.advice.objectives import (
    Objective,
    as_met_by,
    harm,
    harm_reason,
    leaves_no_room,
    met_on_todays_gpus,
    not_worth_their_gpus,
    objectives,
    overruns_the_prefill_lane,
    relieves_a_missed,
    serves_the_arrivals,
    worsens_everything,
)
from kbopt.engine.advice.settings import differs_from_today, pack_constants, sets_otherwise, settings_map, targets
from kbopt.engine.advice.symptoms import Symptom, symptoms
from kbopt.engine.advice.wanted import facts_to_collect
from kbopt.engine.advice.whatif import (
    Gain,
    Outcome,
    Plan,
    WhatIf,
    adds_too_little,
    bound,
    label,
    negligible_reason,
    number,
    reads_params,
    relative_change,
)
from kbopt.engine.conflicts import Candidate, Resolution, build_graph, resolve
from kbopt.engine.evaluators import make_evaluator
from kbopt.engine.evaluators.closures import catalog_condition
from kbopt.engine.lang import template
from kbopt.engine.lang.logic import KNOWN, Lookup, Missing, evaluate, value_of
from kbopt.engine.lang.nodes import unique_facts
from kbopt.engine.lang.text import fmt, render_template
from kbopt.engine.pack.rule import C, Caveat, Drawn, Mitigate, Pack, Recommend, Reject, Require, Rule, StrategyRef, Warn, refers_to
from kbopt.kb.catalog import Strategy
from kbopt.kb.engines import ENGINES
from kbopt.kb.facts import Facts


@dataclass(frozen=True)
class Explained:
    """What a rule's firing says that does not depend on the facts, prepared once per pack."""
    when_values: Callable[[dict[str, Any]], str]     # the condition with each fact's value beside it
    because: template.Compiled                       # the `because` text, split at its placeholders
    parameters: dict[str, Any]                       # the rule's parameters, for its placeholders
    location: str
    derives: tuple[str, ...]                         # the facts it derives, sorted (as its firing shows them)

    @classmethod
    def of(cls, rule: Rule) -> Explained:
        return cls(render_template(rule.when), template.compile_text(rule.because),
                   {p.name: p.value for p in rule.parameters}, rule.location, tuple(sorted(set(rule.derives))))


def fill_because(explained: Explained, lookup: Lookup) -> str:
    """The rule's `because` text with `{fact}` and `{parameter}` placeholders filled in."""
    return template.fill_compiled(explained.because, _placeholder_values(explained.parameters, lookup))


def fill_text(text: str, rule: Rule, lookup: Lookup) -> str:
    """A caveat's text with its placeholders filled in as a `because` is."""
    return template.fill(text, _placeholder_values({p.name: p.value for p in rule.parameters}, lookup))


def _placeholder_values(parameters: dict[str, Any], lookup: Lookup) -> Callable[[str, str | None], str]:
    def replace(name: str, spec: str | None) -> str:
        if name in parameters:
            value = parameters[name]
        else:
            status, value = lookup(name)
            if status != KNOWN:
                return f"{name}=?"
        if spec:
            try:
                return format(value, spec)
            except (ValueError, TypeError):
                pass
        return fmt(value)
    return replace


class _Texts:
    """A firing's condition with the values beside its facts, and its filled `because`, written
    when first called and kept. One object with slots, not a closure: an advice keeps one per
    fired rule, and a closure over three values is five objects for the garbage collector to
    follow (with a 2,000-rule pack, its collections came nearly twice as often). The texts
    follow from the rule and the facts, which the advice holds, so any two compare equal: a
    Firing's equality is that of its facts, as when the texts were left out of it."""
    __slots__ = ("explained", "lookup", "shown", "written")

    def __init__(self, explained: Explained, shown: dict[str, Any], lookup: Lookup) -> None:
        self.explained, self.shown, self.lookup = explained, shown, lookup
        self.written: tuple[str, str] | None = None

    def __call__(self) -> tuple[str, str]:
        if self.written is None:
            self.written = self.explained.when_values(self.shown), fill_because(self.explained, self.lookup)
        return self.written

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Texts)

    __hash__ = None       # type: ignore[assignment]  # a Firing holds dicts: it was never hashable


def advise(facts: Facts, pack: Pack, evaluator: str = "durable") -> Advice:
    inputs = facts.engine_values(pack.kb.vocabulary)
    derivation = make_evaluator(pack, evaluator).run(inputs)
    final = FinalFacts(pack, inputs, derivation)
    model = Model(pack, inputs, derivation)
    estimates = model.estimates()
    # Without estimates there is nothing to compare: strategies keep advice/1's behaviour.
    whatif = WhatIf(pack, inputs, model) if estimates else None
    rules = pack.by_id()
    shown_values = {**facts.values, **final.derived}
    # The facts the evaluators read otherwise than the user wrote them (a version as a number):
    # a firing shows the user's, and only a firing that read one of these needs its values remapped.
    written = {path: value for path, value in facts.values.items() if inputs.get(path) is not value}

    derived = derivation.derived
    firings = []
    explained = pack.runtime.explained      # each rule's, once it fired
    for rule_id in derivation.fired:
        rule, said = rules[rule_id], explained.get(rule_id)
        if said is None:
            said = explained[rule_id] = Explained.of(rule)
        values, checks = final.witness(rule, written)
        # the facts credited to it (another fired rule earlier in the pack may derive one too)
        made = {path: credit[0] for path in said.derives if (credit := derived.get(path)) is not None and credit[1] == rule_id}
        firings.append(Firing(rule.id, rule.title, rule.layer, values, checks, rule.when_text, rule.sources, said.location,
                              rule.pack, made, _Texts(said, shown_values, final.lookup)))
    not_evaluated = final.with_alternatives(final.not_evaluated())

    strategies_out, rejected, edges, plan = _settle(pack, derivation.fired, final, whatif)
    warnings = tuple(RuleNote(drawn.rule, drawn.conclusion.text) for drawn in _drawn(pack, derivation.fired, Warn))
    bottleneck = final.derived.get("derived.bottleneck", "unknown")
    waiting = {item.rule: item.missing for item in not_evaluated}
    bottleneck_missing = tuple(sorted({path for rule_id in pack.producers.get("derived.bottleneck", ())
                                       for path in waiting.get(rule_id, ())}))
    bottleneck_rule = derivation.derived.get("derived.bottleneck", (None, None))[1]
    return Advice(
        bottleneck=bottleneck, bottleneck_rule=bottleneck_rule, strategies=strategies_out, rejected=rejected,
        fired=tuple(firings), not_evaluated=not_evaluated, facts=dict(facts.values), provenance=dict(facts.provenance),
        derived=dict(sorted(final.derived.items())), graph=edges, pack_version=pack.version, warnings=warnings,
        bottleneck_missing=bottleneck_missing, estimates=estimates, plan=plan,
        symptoms=symptoms(facts.values, final.derived, plan), to_collect=facts_to_collect(pack, not_evaluated, final),
        constants=pack_constants(pack))


def _settle(pack: Pack, fired: tuple[str, ...], final: FinalFacts, whatif: WhatIf | None
            ) -> tuple[tuple[StrategyAdvice, ...], tuple[Rejection, ...], tuple[Edge, ...], Plan | None]:
    rules = pack.by_id()
    candidates: dict[str, Candidate] = {}
    order = {rule_id: index for index, rule_id in enumerate(fired)}
    recommendations = sorted(_drawn(pack, fired, Recommend), key=lambda d: (-d.conclusion.weight, order[d.rule]))
    for drawn in recommendations:     # strongest rule first: its parameters and gain win
        rule_id, conclusion = drawn.rule, drawn.conclusion
        c = candidates.get(conclusion.key)
        if c is None:
            c = candidates[conclusion.key] = Candidate(conclusion.key, conclusion.strategy, conclusion.variant)
        c.weight = max(c.weight, conclusion.weight)
        c.rules.append(rule_id)
        c.gain = c.gain or (fill_text(conclusion.gain, rules[rule_id], final.lookup) if conclusion.gain else None)
        for name, node in conclusion.params:
            c.params.setdefault(name, (node, rule_id))
    for candidate in candidates.values():
        candidate.rules.sort(key=lambda rule_id: order[rule_id])    # every recommending rule fired
    vetoes = _drawn(pack, fired, Reject)
    requires = _drawn(pack, fired, Require)
    mitigates = _drawn(pack, fired, Mitigate)
    caveats = _drawn(pack, fired, Caveat)
    catalog = pack.kb.strategies
    # Already in place: advice to keep, never an action; a what-if of what is there moves nothing,
    # so it is neither sized nor vetoed as negligible.
    kept = {key for key, c in candidates.items() if in_place(pack, catalog[c.strategy], c.variant, final)}
    trimmed: list[Rejection] = []
    # key -> (what it works against alone, why with its numbers then, the changes it needs beside it)
    harmful_alone: dict[str, tuple[tuple[tuple[Objective, str], ...], str, tuple[str, ...]]] = {}
    # A strategy in place whose parameters the model reads (a chunk budget) may change them, and is
    # judged as a change would be: harmful or not (review set 9: a budget that took a missed TTFT
    # objective 3x further went unjudged because chunking was on already).
    # (A setting the model reads is never vetoed as negligible, and one at today's value moves nothing.)
    changing = {key for key in kept if _effects_read_params(catalog[candidates[key].strategy], candidates[key].variant)}
    if whatif is not None and any(v.conclusion.after_plan for v in vetoes):
        vetoes = _standing_vetoes(vetoes, candidates, kept, catalog, whatif, final, rules)
    partnered = _partners(candidates, requires, catalog, final.lookup)
    partners = {key: effects for key, (effects, _) in partnered.items()}
    # which variant of a strategy serves the objectives best, before a harmful change is judged
    # beside the others (set 35 d1: a chunk budget harmless beside INT8 W8A8, judged beside INT4)
    if whatif is not None:
        _prefer_by_objectives(candidates, kept, catalog, whatif, final, pack.kb.negligible_change)
    outcomes = _what_ifs({k: c for k, c in candidates.items() if k not in kept or k in changing}, catalog, whatif, vetoes, trimmed,
                         harmful_alone, partners) if whatif else {}
    for part in trimmed:     # the gain the candidate states is that of a rule it keeps
        candidates[part.key].gain = next((d.conclusion.gain for d in recommendations if d.conclusion.key == part.key
                                          and d.rule in candidates[part.key].rules and d.conclusion.gain), None)
    graph = build_graph(candidates, vetoes, requires, mitigates, catalog, _runs_together(final))
    resolution = resolve(graph, candidates)
    chosen = set(resolution.chosen)

    evaluated = {key: _params(candidates[key], final.lookup, catalog[candidates[key].strategy]) for key in resolution.chosen}
    # The plan: every change, a strategy in place whose parameters change included, with the values it prints.
    # A strategy in place whose parameters the model reads is a change where its what-if moves an
    # estimate: the setting it prints is not what runs today, even where the facts leave today's
    # value to the engine's default (set 12: vLLM's default 2,048-token budget, sized to 192 for an
    # ITL objective, was printed as "in place, nothing set").
    threshold = pack.kb.negligible_change
    moves_today = {key for key in changing if key in outcomes and any(
        abs(relative_change(before, after)) >= threshold for _, before, after in outcomes[key].moved)}
    constants = pack_constants(pack)
    planned = [key for key in resolution.chosen if key not in kept or key in moves_today or differs_from_today(
        candidates[key].strategy, key, evaluated[key][0], final.inputs, final.derived, constants)]

    def partners_as_printed(key: str) -> tuple[tuple[str, Any], ...]:
        """The partners' effects with the values they print (sized after the plan, as this key's are)."""
        return tuple(effect for other in partnered.get(key, ((), ()))[1] if other in evaluated for effect in
                     bound(catalog[candidates[other].strategy].effects_of(candidates[other].variant), evaluated[other][0]))

    def plan_of() -> Plan | None:
        return whatif.plan([(key, catalog[candidates[key].strategy], candidates[key].variant, evaluated[key][0])
                            for key in planned]) if whatif else None
    def as_sized() -> Plan | None:
        """The plan with its budgets sized after itself, as its script would print them (a chunk
        budget sized for the ITL objective on one replica can spend the TTFT the replicas kept)."""
        first = plan_of()
        if first is None or whatif is None:
            return first
        sized = {}
        for key in resolution.chosen:     # a setting in place the plan moves (a chunk budget) is a change too
            params = dict(evaluated[key][0])
            if _sized_after_plan(candidates[key], params, first, final, catalog[candidates[key].strategy], []) and (
                    key in planned or (key in kept and sets_otherwise(candidates[key].strategy, key, evaluated[key][0],
                                                                      params, final.inputs, final.derived, constants))):
                sized[key] = params
        return first if not sized else whatif.plan([
            (key, catalog[candidates[key].strategy], candidates[key].variant, sized.get(key, evaluated[key][0]))
            for key in [*planned, *(key for key in sized if key not in planned)]])
    plan = plan_of()
    # Hardware last: more replicas the plan's other changes make unneeded are left out, saying why.
    unneeded: dict[str, str] = {}
    if plan is not None and plan.replicas is not None:
        adding = {key for key in planned if any(path == "serving.replicas" for path, _ in
                                                catalog[candidates[key].strategy].effects_of(candidates[key].variant))}
        lean_keys, planned = planned, [key for key in planned if key not in adding]
        # each plan judged with the budgets its script would print (set 28 d1: a chunk budget sized
        # for the ITL objective on one L4 took the TTFT p99 from 1.1 s to 16.5 s, which the second
        # replica keeps near 2 s; set 38 d3: replicas "not needed" at an ITL p99 of 87.6 ms, the
        # budget's own figure, where the plan reads 147.1 against 150)
        lean_plan, lean = plan_of(), as_sized()
        # and only where the rest serves today's load: a plan that serves fewer tokens a second
        # (a lower cap) needs the replicas for the requests it leaves waiting
        serves = lean is not None and all(g.change > -pack.kb.negligible_change for g in lean.expected
                                          if g.metric in ("service_tokens_per_s", "decode_tokens_per_s"))
        lean_symptoms = symptoms(final.inputs, final.derived, lean) if lean is not None else ()
        why = met_on_todays_gpus(lean_symptoms) if lean is not None and serves else None
        if why is None and lean is not None and serves:     # or the rest serves the arrivals with room
            why = serves_the_arrivals(lean, lean_symptoms, final.inputs)
        if why is None and lean is not None:     # or they add too little to be worth their GPUs
            planned = lean_keys
            full = as_sized()
            planned = [key for key in lean_keys if key not in adding]
            if full is not None:
                why = not_worth_their_gpus(full, lean, symptoms(final.inputs, final.derived, full), lean_symptoms)
        if why is None:
            planned = lean_keys
        else:
            unneeded, plan = dict.fromkeys(adding, why), lean_plan
            chosen -= adding
    # A change that costs accuracy (narrower weights or KV) stays only for what it adds to the plan
    # for a client: compared with the plan without it, not alone on today's deployment, where a
    # lever that pays once the batch grows would read as nothing.
    if plan is not None and whatif is not None:
        for key in [k for k in planned if k not in kept and _costs_accuracy(catalog[candidates[k].strategy], candidates[k].variant, whatif)]:
            with_it, full = planned, plan
            planned = [k for k in planned if k != key]
            without = plan_of()
            why = adds_too_little(full, without, pack.kb.negligible_change, final.inputs.get("constraints.objective")) \
                if full is not None and without is not None else None
            if why is None:
                planned = with_it
            else:
                unneeded[key], plan = why, without
                chosen.discard(key)
    # A change harmful alone stays only beside one of the changes it was judged harmless with (the
    # regression review of set 36: INT8 weights, no room for a sequence alone, kept beside an FP8 KV
    # cache the plan then left out as adding too little).
    while plan is not None and whatif is not None and (orphans := [
            key for key in planned if key in harmful_alone and key not in kept
            and not any(other in chosen and other not in unneeded for other in harmful_alone[key][2])]):
        for key in orphans:
            # the part no other rule's harm rests on stays (review set 39 d4: a memory fraction of
            # 0.95 left with the cap of 104 below today's 120 running that made the change harmful)
            c = candidates[key]
            kept_part = _harmless_part(c, catalog[c.strategy], whatif, objectives(whatif.baseline.lookup), threshold,
                                       partners.get(key, ()))
            if kept_part is not None:
                trimmed.append(_trim(c, kept_part[0], harmful_alone.pop(key)[1], (), whatif, catalog))
                outcomes[key] = kept_part[1]
                evaluated[key] = _params(c, final.lookup, catalog[c.strategy])
                c.gain = next((d.conclusion.gain for d in recommendations if d.conclusion.key == key
                               and d.rule in c.rules and d.conclusion.gain), None)
                continue
            unneeded[key] = f"{harmful_alone[key][1]}; the changes it is harmless beside ({', '.join(harmful_alone[key][2])}) are not in the plan"
            chosen.discard(key)
        planned = [key for key in planned if key in chosen]
        plan = plan_of()
    sized_by_key: dict[str, list[tuple[str, str]]] = {key: [] for key in resolution.chosen}
    moved_in_place: list[str] = []
    before_plan: dict[str, dict[str, Any]] = {}
    if plan is not None:     # budgets sized on the deployment after the whole plan (in place or not)
        for key in resolution.chosen:
            c = candidates[key]
            params, notes = evaluated[key]
            today = dict(params)
            sized_by_key[key] = _sized_after_plan(c, params, plan, final, catalog[c.strategy], notes)
            before_plan[key] = {name: today[name] for name, _ in sized_by_key[key] if name in today}
            # A strategy in place whose setting the plan moves (a chunk budget the engine's default
            # sets today, sized down once CUDA graphs shorten the step) is a change, in the plan too.
            if key in kept and key not in planned and sized_by_key[key] and sets_otherwise(
                    c.strategy, key, today, params, final.inputs, final.derived, constants):
                moved_in_place.append(key)
        planned += moved_in_place
        if moved_in_place or any(sized_by_key[key] and _effects_read_params(catalog[candidates[key].strategy],
                                                                             candidates[key].variant) for key in planned):
            plan = plan_of()     # once more with the budgets it sized (what the model evaluates is what is printed)
            plan = _harmless_resizing(plan, plan_of, planned, moved_in_place, evaluated, before_plan, sized_by_key,
                                      outcomes, candidates, catalog, whatif)
            def resized_reads(key: str) -> bool:
                return bool(sized_by_key.get(key)) and _effects_read_params(catalog[candidates[key].strategy], candidates[key].variant)
            for key in planned:  # and each such strategy's own what-if with the values it and its partners print
                strategy = catalog[candidates[key].strategy]
                if (key in outcomes or key in moved_in_place) and (resized_reads(key) or any(
                        resized_reads(other) for other in partnered.get(key, ((), ()))[1] if other in candidates)):
                    outcome = whatif.strategy(strategy, candidates[key].variant, key, evaluated[key][0],
                                              partners_as_printed(key)) if whatif else None
                    if outcome is not None:
                        outcomes[key] = outcome
    ranks = _attention_ranks(final, [evaluated[key][0] for key in planned if candidates[key].strategy == "parallelism"])
    # The plan one server's script applies while MODEL is still today's checkpoint: all but the
    # quantization that needs another and the replicas it cannot start (launch.py prints these
    # budgets and caps until then; set 18 d3: an FP8 KV cache the script sets beside an NVFP4
    # checkpoint it cannot, with the cap sized on today's BF16 pool; d6: a chunk budget sized
    # without the EAGLE-3 verify steps the script turns on; d1: one sized for two replicas).
    as_scripted = None
    outside = [key for key in planned if key not in kept and _outside_a_script(candidates[key], catalog, final.lookup, final.inputs)]
    # A flag before a new checkpoint: the script applies a variant today's checkpoint takes while
    # the plan's waits for its own (set 38 d1: INT8 W8A8 outranked online FP8 on two A100s, and
    # the script, which cannot load an INT8 checkpoint yet, applied neither).
    stand_ins = _stand_ins(outside, [key for key in planned if key not in outside], candidates, resolution, outcomes,
                           harmful_alone, catalog, final, threshold) if whatif is not None else {}
    for key in stand_ins:
        evaluated[key] = _params(candidates[key], final.lookup, catalog[candidates[key].strategy])
    if outside and whatif is not None and (len(outside) < len(planned) or stand_ins):
        # each stand-in where the change it stands in for was: the plan's merge takes the first
        # change that sets a fact, so its place decides whose KV blocks count (review set 41 F7: FP8
        # weights appended after an FP8 cache's doubled block count left the freed weight memory out
        # of the pool, a cap of 27 where the script's changes hold 40)
        with_all, planned = planned, [new for key in planned
                                      for new in ([s for s, replaced in stand_ins.items() if replaced == key] if key in outside else [key])]
        as_scripted = plan_of()
        planned = with_all
    if as_scripted is not None:
        _, on_checkpoint = _after_plan(as_scripted, final)
        for key, values in before_plan.items():
            if values:
                on_today = _params(candidates[key], on_checkpoint, catalog[candidates[key].strategy])[0]
                before_plan[key] = {name: on_today.get(name, value) for name, value in values.items()}
    resized: list[str] = []
    # a strategy in place whose cap the advice changes too (set 28 d4: continuous batching's cap
    # lowered to the 2 sequences today's 16-bit KV pool holds, beside an FP8 cache that holds 4)
    for key in [key for key in resolution.chosen if key not in unneeded and (key not in kept or key in planned)]:
        c = candidates[key]                  # a cap is sized after the whole plan: one number everywhere
        params, notes = evaluated[key]
        for name in [n for n in params if (c.strategy, n) in CAP_PARAMS and isinstance(params[n], int | float)]:
            rules_cap = int(params[name])
            params[name], why = sized_cap(rules_cap, plan, final.derived, final.inputs, c.strategy, ranks)
            if params[name] != rules_cap and ranks == 1:
                resized.append(key)      # the plan is evaluated again with the cap as printed (a rank's would be divided again)
            # the cap a script on today's checkpoint takes (one that cannot apply the whole plan yet prints it)
            today_cap, today_why = sized_cap(rules_cap, as_scripted, final.derived, final.inputs, c.strategy, ranks)
            if today_cap != params[name] and ranks == 1:
                before_plan.setdefault(key, {}).setdefault(name, today_cap)
                resized.append(key)
                if today_why and as_scripted is not None:  # what a script that cannot apply the whole plan
                    # prints, and why: its pool is the one the script's own changes leave; where the
                    # script applies the whole plan there is no such script (set 42 F11: today's pool
                    # of 556 sequences read "after the plan" beside a script that sets the plan's 1,280)
                    scripted_why = today_why.replace("after the plan", "after the script's changes")
                    notes.append(RuleNote(c.params[name][1], f"{name}={today_cap} where the script applies only part of the plan: {scripted_why}"))
            if why:
                sized_by_key[key].append((name, why))
                notes.append(RuleNote(c.params[name][1], f"{name}={params[name]}: {why}"))
    idle = _idle_itl_caps(candidates, evaluated, final.inputs, [key for key in planned if key not in kept])
    if idle and whatif is not None:
        # a cap the requests in flight never reach can still be what the plan's projection rests on
        # (set 13 d4: its chunk budget was sized beside one; without it the ITL p99 read 51.7 ms against 50)
        with_caps, all_planned = plan_of(), planned
        planned = [key for key in planned if key not in idle]
        without_caps = plan_of()
        planned = all_planned
        if _meets_fewer(without_caps, with_caps, final):
            idle = {}
    if idle:
        unneeded.update(idle)
        planned = [key for key in planned if key not in idle]
        resized += [key for key in planned if key in outcomes]
    # One cap among those that stay: an idle ITL cap, left out above, lowers no other (set 23 d2:
    # memory_budget's 81 printed as 71, the cap of a batch_cap the plan had left out as idle). A cap
    # harmless only beside a change no script applies (more replicas) bounds the plan's cap, not the
    # script's (review set 33 d2: continuous batching's 20 lowered to batch_cap's 10, which needs
    # the plan's second replica, and printed as 64 -> 10 in the one server's script)
    beside_outside = {key for key, (_, _, beside) in harmful_alone.items() if any(other in outside for other in beside)}
    resized += _one_cap(candidates, evaluated, sized_by_key, [key for key in resolution.chosen if key not in unneeded
                                                              and (key not in kept or key in planned)],
                        beside_outside, before_plan)
    if whatif is not None and [key for key in resized if key in planned]:
        # once more with the caps as printed (a replica's caps: a rank's would be divided again)
        plan = plan_of()
        for key in dict.fromkeys(resized):
            outcome = whatif.strategy(catalog[candidates[key].strategy], candidates[key].variant, key, evaluated[key][0],
                                      partners_as_printed(key))
            if outcome is not None and key in outcomes:
                outcomes[key] = outcome
    out = []
    # the engines each strategy's settings are written for, with the plan's data-parallel attention ranks
    engines = targets(final.inputs, constants=constants, attention_ranks=ranks)
    for key in [*(key for key in resolution.chosen if key not in unneeded), *stand_ins]:
        c = candidates[key]
        params, notes = evaluated[key]
        sized = sized_by_key.get(key, [])
        because = list(c.rules)
        texts = []
        if key in stand_ins:
            texts.append(RuleNote(c.rules[0], f"applied on today's checkpoint until MODEL names the {stand_ins[key]} checkpoint "
                                  f"(a flag before a new checkpoint); the plan's figures are with {stand_ins[key]}"))
        for caveat in caveats:
            if refers_to(caveat.conclusion.strategy, caveat.conclusion.variant, c.strategy, c.variant):
                lapsed = _lapses_after_plan(rules[caveat.rule], plan, final)
                texts.append(RuleNote(caveat.rule, lapsed or fill_text(caveat.conclusion.text, rules[caveat.rule], final.lookup)))
                because.append(caveat.rule)
        # Several rules may draw the same edge: order by what the edge says.
        for edge in sorted(graph.in_edges(key), key=lambda e: (e.source, e.kind, e.because)):
            if edge.kind == "mitigates" and edge.source in chosen:
                note = next(m for m in mitigates if m.rule == edge.because[0])
                mitigation = next((x for x in rules[note.rule].then if isinstance(x, Mitigate)), None)
                texts.append(RuleNote(note.rule, f"mitigated by {edge.source}"
                                      + (f": {mitigation.text}" if mitigation and mitigation.text else "")))
        settings = settings_map(c.strategy, key, params, final.inputs, final.derived, engines)
        # a default no target engine has a setting for is nothing a user acts on (set 40 d1:
        # "timeout_ms=10 is a default: constraints.ttft_slo_ms not known" on TensorRT-LLM, which
        # admits waiting requests at every step)
        unset = {name for name in params if settings and all(
            any(line.startswith(f"# {name}: ") and line.endswith("not set") for line in lines) for lines in settings.values())}
        texts.extend(n for n in notes if not any(n.text.startswith(f"{name}=") and (" is a default: " in n.text or " keeps today's " in n.text)
                                                 for name in unset))
        alone = _alone(harmful_alone[key], outcomes[key].gains if key in outcomes else ()) if key in harmful_alone else ""
        # only what the plan keeps: a cap it finds idle once the rest is in (unneeded) is never
        # applied, and a script waiting on it would leave this change out for good (set 18 d1)
        beside = tuple(k for k in harmful_alone[key][2] if k in chosen and k not in unneeded) if key in harmful_alone else ()
        if beside:
            texts.append(RuleNote(c.rules[0], f"alone {alone.removeprefix('harmful: ')}; beside {', '.join(beside)} it does "
                                  "not: apply it with them (a launch script that cannot yet leaves it out)"))
        out.append(StrategyAdvice(
            id=c.strategy, layer=catalog[c.strategy].layer, title=catalog[c.strategy].title, params=params,
            because=tuple(dict.fromkeys(because)), caveats=tuple(texts), gain=c.gain, weight=c.weight,
            recommended_by=tuple(c.rules), key=key,
            alone=alone, beside=beside,
            # in place, and with the values the deployment runs: a strategy in place whose parameters change is a change
            status="keep" if key in kept and key not in moved_in_place and key not in moves_today
            and not differs_from_today(c.strategy, key, params, final.inputs, final.derived, constants) else "change",
            expected=outcomes[key].gains if key in outcomes else (),
            together=partnered[key][1] if key in outcomes and key in partnered else (),
            settings=settings, sized=tuple(sized),
            before_plan=tuple(sorted(before_plan.get(key, {}).items())), stands_in_for=stand_ins.get(key, "")))
    # Actions first, those that take more GPUs last of them (a flag before a new checkpoint before
    # new GPUs: set 18 d1 put a second replica above the prefix cache that removed the prefills it
    # was for), then what stays; by weight otherwise (a stable sort).
    adds_gpus = {key for key in chosen if _adds_gpus(candidates[key], catalog)}
    # Where an objective is missed, an action the model says brings it no nearer comes after those
    # it says do, where some do (set 39 d3: SGLang's mixed chunks, +2% on the mean first token and
    # nothing on its missed p99, were action 1 above the FP8 KV cache and host tier that halve that
    # p99); one whose estimates say nothing of it keeps its place.
    judged_by = objectives(final.lookup)
    relief = {s.key: relieves_a_missed(((g.metric, g.before, g.after) for g in s.expected), judged_by, threshold)
              for s in out if s.status == "change"}
    aside = {key for key, relieves in relief.items() if relieves is False} if any(relief.values()) else set()
    out.sort(key=lambda s: (s.status == "keep", s.key in adds_gpus, s.key in aside))
    rejected = [Rejection(id=candidates[key].strategy, params=_variant_param(catalog[candidates[key].strategy], candidates[key].variant),
                          because=tuple(candidates[key].rules), reason=why, key=key)
                for key, why in unneeded.items()] + [r for r in trimmed if r.key in chosen]
    for left in resolution.left_out:
        if left.key in stand_ins:
            continue
        c = candidates[left.key]
        rejected.append(Rejection(id=c.strategy, params=_variant_param(catalog[c.strategy], c.variant),
                                  because=left.because, reason=left.reason, key=left.key))
    edges = tuple(sorted(
        (Edge(e.kind, e.source, e.target, e.because) for e in graph.edges()),
        key=lambda e: (e.kind, e.source, e.target)))
    return tuple(out), tuple(rejected), edges, plan


def in_place(pack: Pack, strategy: Strategy, variant: str | None, final: FinalFacts) -> bool:
    """Whether the deployment already has this strategy (variant): its catalog `in_place_when`
    holds on the final facts. Unknown is not in place: advice to change stays advice."""
    text = strategy.in_place_condition(variant)
    if not text:
        return False
    return catalog_condition(pack, text)(final.lookup) is True


def _variant_param(strategy: Strategy, variant: str | None) -> dict[str, Any]:
    """A rejection's parameters: the variant, where its strategy names the parameter that holds it."""
    return {strategy.variant: variant} if variant and strategy.variant else {}


def _costs_accuracy(strategy: Strategy, variant: str | None, whatif: WhatIf) -> bool:
    """Whether this variant costs accuracy and must therefore buy service, not only capacity: the
    catalog's `accuracy_cost`, unless its `capacity_pays_when` holds on today's facts."""
    if variant not in strategy.accuracy_cost:
        return False
    text = strategy.capacity_pays_when
    if not text:
        return True
    return catalog_condition(whatif.pack, text)(whatif.baseline.lookup) is not True


def _partners(candidates: dict[str, Candidate], requires: list[Drawn[Require]], catalog: Mapping[str, Strategy],
              lookup: Lookup) -> dict[str, tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]]:
    """By candidate key, the bound effects of the candidates it is only made together with: where
    a rule requires one change with another and both change facts (speculation off for a mixed
    chunk budget, review set 11), neither is judged alone. Alone, each can read as harmful (the
    mean ITL rises without the drafts; an unmixed budget only splits prefills) where the two
    together meet the objective. The first matching candidate of each requirement is its partner.
    Returns (the partners' effects, their keys)."""
    out: dict[str, tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]] = {}
    for drawn in requires:
        needed = StrategyRef.parse(drawn.conclusion.needs)
        for key, c in sorted(candidates.items()):
            if not refers_to(drawn.conclusion.strategy, drawn.conclusion.variant, c.strategy, c.variant) \
                    or not catalog[c.strategy].effects_of(c.variant):
                continue
            partner = next((p for k, p in sorted(candidates.items()) if k != key and catalog[p.strategy].effects_of(p.variant)
                            and refers_to(needed.strategy, needed.variant, p.strategy, p.variant)), None)
            if partner is not None:
                strategy = catalog[partner.strategy]
                effects, keys = out.get(key, ((), ()))
                out[key] = (effects + bound(strategy.effects_of(partner.variant), _params(partner, lookup, strategy)[0]),
                            (*keys, partner.key))
    return out


def _what_ifs(candidates: dict[str, Candidate], catalog: Mapping[str, Strategy], whatif: WhatIf,
              vetoes: list[Drawn[Reject]], trimmed: list[Rejection],
              harmful_alone: dict[str, tuple[tuple[tuple[Objective, str], ...], str, tuple[str, ...]]],
              partners: Mapping[str, tuple[tuple[str, Any], ...]]) -> dict[str, Outcome]:
    """Each candidate's what-if, by key. One that the model can evaluate but that moves no
    estimate by the negligible share gets a veto (before resolution, so that whatever requires it
    goes too and an alternative it excluded can take its place); the rule named is the one that
    computed the estimate that moved most. So does one that works against the objectives
    (engine/advice/objectives.py), naming the rule of the estimate it worsens, unless one rule's
    part of its parameters alone makes it so: then that part is left out (into `trimmed`, with the
    reason) and the rest stays a candidate, or unless it does not beside the advice's other changes
    (into `harmful_alone`: why alone, and those changes). A candidate made only together with
    others is judged with them (`partners`)."""
    outcomes: dict[str, Outcome] = {}
    threshold = whatif.pack.kb.negligible_change
    judged_by = objectives(whatif.baseline.lookup)
    met_today = frozenset(o.metric for o in judged_by if not o.missed)   # spent, not traded (objectives.harm)
    for key in sorted(candidates):
        c = candidates[key]
        outcome = whatif.strategy(catalog[c.strategy], c.variant, key, _params(c, whatif.baseline.lookup, catalog[c.strategy])[0]
                                  if _effects_read_params(catalog[c.strategy], c.variant) else None, partners.get(key, ()))
        if outcome is None:
            continue
        outcomes[key] = outcome
        # A setting the model reads (a token budget, `param:`) may show only beside the plan's other
        # changes (chunks change nothing under static batching until continuous batching comes), so
        # it is not vetoed as negligible on its own.
        if outcome.negligible(threshold) and not _effects_read_params(catalog[c.strategy], c.variant):
            moved = sorted(outcome.gains, key=lambda g: -round(abs(g.change), 6))   # float noise is no tie-break
            known_before = [name for name in outcome.reached if name in whatif.before]   # one may appear only after
            rule = moved[0].rules[0] if moved else (whatif.before[known_before[0]].rule if known_before else c.rules[0])
            vetoes.append(Drawn(rule, Reject(c.strategy, c.variant, negligible_reason(outcome, whatif.before))))
        elif no_room := ((room := leaves_no_room(outcome.moved, whatif.baseline.lookup))
                         or overruns_the_prefill_lane(outcome.moved)):
            # where the plan's other changes free the memory it takes, it comes with them (set 35 d2:
            # 24 LoRA slots beside FP8 weights and KV cache and a rank of 16, none of them alone), as
            # where they shorten the step its prompts' chunks ride on
            if beside := _harmless_beside(key, candidates, catalog, whatif, judged_by, threshold, vetoes, partners,
                                          room_only=True):
                harmful_alone[key] = ((), f"harmful: {no_room}", beside)
                continue
            short = "kv_pool_tokens" if room else "prefill_lane_load"
            pool = next((g for g in outcome.gains if g.metric == short), None)
            vetoes.append(Drawn(pool.rules[0] if pool else c.rules[0], Reject(c.strategy, c.variant, no_room)))
        elif outcome.unevaluated is None and (worse := worsens_everything(outcome.moved, threshold)):
            named = [g for g in outcome.gains if g.metric in worse]
            vetoes.append(Drawn(named[0].rules[0] if named else c.rules[0], Reject(
                c.strategy, c.variant, "harmful: it worsens every estimate it moves: " + "; ".join(g.text() for g in named))))
        elif judged_by and outcome.unevaluated is None and (found := harm(outcome.moved, judged_by, threshold, met_today,
                                                                          splits_load=_adds_gpus(c, catalog))):
            why, worst = harm_reason(found, outcome.gains, judged_by)
            beside = _harmless_beside(key, candidates, catalog, whatif, judged_by, threshold, vetoes, partners)
            if beside:
                harmful_alone[key] = (found, why, beside)
                continue
            if not (found := harm(outcome.moved, judged_by, threshold, splits_load=_adds_gpus(c, catalog))):
                continue         # a met objective spent for a worse miss: a trade, where no other change spares it
            why, worst = harm_reason(found, outcome.gains, judged_by)
            kept_part = _harmless_part(c, catalog[c.strategy], whatif, judged_by, threshold, partners.get(key, ()))
            if kept_part is None:
                vetoes.append(Drawn(worst.rules[0], Reject(c.strategy, c.variant, why)))
                continue
            dropped_rule, outcomes[key] = kept_part
            trimmed.append(_trim(c, dropped_rule, why, (worst.rules[0],), whatif, catalog))
    return outcomes


def _trim(c: Candidate, dropped_rule: str, why: str, worst: tuple[str, ...], whatif: WhatIf,
          catalog: Mapping[str, Strategy]) -> Rejection:
    """Leave out of a candidate the parameters one rule gave it, whose part alone made it harmful
    (`why`); the rejection that says so."""
    dropped = {name: entry for name, entry in c.params.items() if entry[1] == dropped_rule}
    dropped_values = _params(Candidate(c.key, c.strategy, c.variant, params=dropped), whatif.baseline.lookup,
                             catalog[c.strategy])[0]
    c.params = {name: entry for name, entry in c.params.items() if entry[1] != dropped_rule}
    c.rules.remove(dropped_rule)
    return Rejection(id=c.strategy, params=dropped_values, because=(dropped_rule, *worst),
                     reason=why.replace("harmful:", f"{dropped_rule}'s part left out as harmful:", 1), key=c.key)


def _adds_gpus(candidate: Candidate, catalog: Mapping[str, Strategy]) -> bool:
    """Whether the change takes more GPUs: its effects add replicas."""
    return any(path == "serving.replicas" for path, _ in catalog[candidate.strategy].effects_of(candidate.variant))


def _outside_a_script(candidate: Candidate, catalog: Mapping[str, Strategy], lookup: Lookup, facts: Mapping[str, Any]) -> bool:
    """Whether one server's launch script cannot apply the change by itself: more GPUs, or weights
    that need another checkpoint, unless the deployed engine quantizes today's as it loads (set 22
    d4: SGLang's online FP8 was left out of the plan its script applies, and the chunk budget printed
    beside --quantization fp8 was sized for 16-bit math)."""
    if _adds_gpus(candidate, catalog):
        return True
    if candidate.strategy != "quantization":
        return False
    params = _params(candidate, lookup, catalog[candidate.strategy])[0]
    return not quantizes_as_it_loads(str(facts.get("workload.engine")), candidate.variant, params, facts)


def _runs_together(final: FinalFacts) -> Callable[[Candidate, Candidate], bool]:
    """Whether the deployed engine, at its version, runs two candidates the catalog keeps apart
    (review set 38 d4: vLLM 0.13 takes --async-scheduling beside EAGLE-3)."""
    if final.inputs.get("workload.engine") not in ENGINES:
        return lambda a, b: False
    target = targets(final.inputs)[0]
    allowed = target.spec.together
    return lambda a, b: any(t.allows((a.strategy, a.variant), (b.strategy, b.variant), target.version) for t in allowed)


def _stand_ins(outside: list[str], script: list[str], candidates: Mapping[str, Candidate], resolution: Resolution,
               outcomes: Mapping[str, Outcome], harmful_alone: Mapping[str, object], catalog: Mapping[str, Strategy],
               final: FinalFacts, negligible: float) -> dict[str, str]:
    """For each quantization of the plan that waits for another checkpoint, the variant one
    server's script applies on today's checkpoint meanwhile (key -> the waiting variant's key):
    one the waiting variant excluded and no veto removed, that the engine makes as it loads, that moves an
    estimate and works against no objective alone, and that excludes and needs nothing else the
    script applies. The heaviest such, where several are."""
    left = {entry.key: entry for entry in resolution.left_out}
    graph = resolution.graph
    excluded = {frozenset((edge.source, edge.target)) for edge in graph.edges() if edge.kind == "excludes"}
    found: dict[str, str] = {}
    for waiting in outside:
        c = candidates[waiting]
        if c.strategy != "quantization" or _adds_gpus(c, catalog):
            continue
        options = [key for key, other in candidates.items()
                   if other.strategy == c.strategy and key in left and frozenset((key, waiting)) in excluded
                   and not any(edge.kind == "vetoes" for edge in graph.in_edges(key))
                   and key in outcomes and not outcomes[key].negligible(negligible) and key not in harmful_alone
                   and not _outside_a_script(other, catalog, final.lookup, final.inputs)
                   and not any(frozenset((key, other_key)) in excluded for other_key in script)
                   and not any(edge.kind == "requires" for edge in graph.out_edges(key))]
        if options:
            found[max(options, key=lambda key: (candidates[key].weight, key))] = waiting
    return found


def _alone(judged: tuple[tuple[tuple[Objective, str], ...], str, tuple[str, ...]], gains: tuple[Gain, ...]) -> str:
    """What a change works against alone, with the figures of its own what-if as advised (its
    parameters may have been sized since it was judged), else those it was judged on."""
    found, why, _ = judged
    by_metric = {g.metric: g for g in gains}
    # the figures as advised only where they still show the harm (set 38 d1: a cap judged at the 143
    # sequences today's pool holds, printed at the 596 the plan's pool holds, read "works against the
    # TTFT objective: ttft expected 8,635 -> 2,475 ms (-71.3%)")
    still = found and all(metric in by_metric and (by_metric[metric].after > by_metric[metric].before if objective.better == "lower"
                                                   else by_metric[metric].after < by_metric[metric].before)
                          for objective, metric in found)
    return harm_reason(found, gains)[0] if still else why


def _harmless_beside(key: str, candidates: dict[str, Candidate], catalog: Mapping[str, Strategy], whatif: WhatIf,
                     judged_by: tuple[Objective, ...], threshold: float, vetoes: list[Drawn[Reject]],
                     partners: Mapping[str, tuple[tuple[str, Any], ...]], room_only: bool = False) -> tuple[str, ...]:
    """The other changes beside which a candidate that works against an objective alone does not
    (empty where it does beside them too): the prefix cache a plan turns on shortens the prompts a
    chunk budget splits (set 16 d6: a 768-token budget on TensorRT-LLM read as a 10 s TTFT with the
    cache off today, 2.2 s with it on). Judged as the plan's other candidates with it against them
    without it; those are the ones not vetoed so far, one per strategy, each on its own a change
    the model judges no harm (the strongest first). Where none is, the judgement alone stands.
    With `room_only`, for a candidate that leaves no KV cache alone: those beside which it leaves room."""
    met_today = frozenset(o.metric for o in judged_by if not o.missed)
    vetoed = {(v.conclusion.strategy, v.conclusion.variant) for v in vetoes}
    by_strategy: dict[str, Candidate] = {}
    for other in sorted(candidates.values(), key=lambda c: -c.rank):
        if other.key == key or other.strategy == candidates[key].strategy or (other.strategy, other.variant) in vetoed \
                or other.strategy in by_strategy:
            continue
        alone = whatif.strategy(catalog[other.strategy], other.variant, other.key,
                                _params(other, whatif.baseline.lookup, catalog[other.strategy])[0], partners.get(other.key, ()))
        if alone is None or alone.unevaluated is not None or harm(alone.moved, judged_by, threshold,
                                                                  splits_load=_adds_gpus(other, catalog)) \
                or worsens_everything(alone.moved, threshold):
            continue
        by_strategy[other.strategy] = other
    if not by_strategy:
        return ()
    c = candidates[key]
    this = (key, catalog[c.strategy], c.variant, _params(c, whatif.baseline.lookup, catalog[c.strategy])[0])

    def harmless_beside(others: list[Candidate]) -> bool:
        chosen: list[tuple[str, Strategy, str | None, Mapping[str, Any]]] = [
            (o.key, catalog[o.strategy], o.variant, _params(o, whatif.baseline.lookup, catalog[o.strategy])[0]) for o in others]
        without = whatif.plan(chosen)
        if without is None:
            return False
        # its budgets sized on the deployment those others leave, as the plan sizes them (set 35 d1:
        # a chunk budget of 128 on today's 16-bit step, 288 beside INT8 W8A8)
        after = {f"derived.{g.metric}": g.after for g in without.expected}

        def beside_them(path: str) -> tuple[str, Any]:
            return (KNOWN, after[path]) if path in after else whatif.baseline.lookup(path)
        resized = _params(c, beside_them, catalog[c.strategy])[0]
        params = {**this[3], **{name: value for name, value in resized.items()
                                if name in this[3] and catalog[c.strategy].params[name].after_plan}}
        with_it = whatif.plan([(key, catalog[c.strategy], c.variant, params), *chosen])
        if with_it is None:
            return False
        if room_only:
            moves = [(g.metric, g.before, g.after) for g in with_it.expected]
            return not (leaves_no_room(moves, whatif.baseline.lookup) or overruns_the_prefill_lane(moves))
        before = {g.metric: g.after for g in without.expected}
        return not harm([(g.metric, before.get(g.metric, g.before), g.after) for g in with_it.expected],
                        as_met_by(judged_by, before), threshold, met_today)
    needed = list(by_strategy.values())
    if not harmless_beside(needed):
        return ()
    # The fewest it needs, those that take new GPUs or a new checkpoint given up first: a script
    # applies it as soon as what it needs is applied (set 16 d6: the prefix cache the plan turns on
    # suffices for its chunk budget; a second replica is not needed for it).
    for other in sorted(needed, key=lambda o: (not _outside_a_script(o, catalog, whatif.baseline.lookup, whatif.inputs), o.weight)):
        rest = [o for o in needed if o.key != other.key]
        if rest and harmless_beside(rest):
            needed = rest
    return tuple(sorted(o.key for o in needed))


def _harmless_part(c: Candidate, strategy: Strategy, whatif: WhatIf, judged_by: tuple[Objective, ...], threshold: float,
                   partners: tuple[tuple[str, Any], ...]) -> tuple[str, Outcome] | None:
    """Where a harmful candidate's parameters come from several rules (a cap from one, a memory
    fraction from another), the rule whose part alone makes it harmful: without that part the
    rest moves an estimate and works against no objective. Returns that rule and the rest's
    what-if, or None (the whole candidate is harmful, or no part can be left out)."""
    givers = list(dict.fromkeys(rule_id for _, rule_id in c.params.values()))
    if len(givers) < 2:
        return None
    for rule_id in givers:
        rest = Candidate(c.key, c.strategy, c.variant,
                         params={name: entry for name, entry in c.params.items() if entry[1] != rule_id})
        outcome = whatif.strategy(strategy, c.variant, c.key, _params(rest, whatif.baseline.lookup, strategy)[0], partners)
        if (outcome is not None and outcome.unevaluated is None and not outcome.negligible(threshold)
                and not harm(outcome.moved, judged_by, threshold,
                             splits_load=any(path == "serving.replicas" for path, _ in strategy.effects_of(c.variant)))):
            return rule_id, outcome
    return None


def _effects_read_params(strategy: Strategy, variant: str | None) -> bool:
    return any(reads_params(raw) for _, raw in strategy.effects_of(variant))


def _drawn(pack: Pack, fired: tuple[str, ...], kind: type[C]) -> list[Drawn[C]]:
    """Every conclusion of `kind` the fired rules drew, in firing order."""
    rules = pack.by_id()
    return [Drawn(rule_id, c) for rule_id in fired for c in rules[rule_id].then if isinstance(c, kind)]


def _prefer_by_objectives(candidates: Mapping[str, Candidate], kept: set[str], catalog: Mapping[str, Strategy],
                          whatif: WhatIf, final: FinalFacts, negligible: float) -> None:
    """Of a strategy's variants, which exclude one another, the one whose change alone serves the
    objectives better outranks the one the rules weigh higher: more objectives met, else the missed
    ones nearer (set 22 d6: INT4 weight-only, weighed above FP8 for its bytes, left a missed TTFT
    objective further off than FP8 W8A8 on the 4090s' FP8 tensor cores, one flag on today's checkpoint)."""
    groups: dict[str, list[str]] = {}
    for key, c in candidates.items():
        if c.variant is not None and key not in kept:
            groups.setdefault(c.strategy, []).append(key)
    for keys in groups.values():
        if len(keys) < 2:
            continue
        scores: dict[str, tuple[int, float, str]] = {}
        for key in keys:
            c = candidates[key]
            plan = whatif.plan([(key, catalog[c.strategy], c.variant, _params(c, final.lookup, catalog[c.strategy])[0])])
            score = _objective_score(symptoms(final.inputs, final.derived, plan)) if plan is not None else None
            if score is not None:
                scores[key] = score
        heaviest = max(keys, key=lambda k: (candidates[k].weight, k))
        if heaviest not in scores:
            continue
        best = max(scores, key=lambda k: scores[k][:2])
        base, top = scores[heaviest], scores[best]
        if top[0] > base[0] or (top[0] == base[0] and top[1] - base[1] >= negligible):
            winner = candidates[best]
            winner.lift = candidates[heaviest].weight - winner.weight + 0.01
            winner.preferred = (f"serves the objectives better alone: {top[2]}, where {heaviest} leaves {base[2]}")


def _objective_score(found: tuple[Symptom, ...] | list[Symptom]) -> tuple[int, float, str] | None:
    """(objectives met after the change, minus the missed ones' after / objective summed, in words);
    None where an objective's after is not projected (nothing to compare it on). An after the
    advice does not project because the model reads today's measurement otherwise is taken as the
    measurement moved by the model's ratio: every candidate is judged by the same model (set 35 d1:
    INT4, weighed above INT8 W8A8, moved a missed ITL p99 made of prefill stalls 3%)."""
    judged = [(s.label, s.unit, s.after if s.after is not None or s.model_move is None
               else s.value * s.model_move[1] / s.model_move[0], s.objective) for s in found if s.objective]
    pairs = [(label, unit, after, objective) for label, unit, after, objective in judged if after is not None and objective]
    if len(pairs) < len(judged):
        return None
    met = sum(1 for *_, after, objective in pairs if after <= objective)
    missed = sum(after / objective for *_, after, objective in pairs if after > objective)
    words = ", ".join(f"{label} {after:,.{0 if after >= 100 else 1}f} {unit} against {objective:g}"
                      for label, unit, after, objective in pairs) or "no objective"
    return met, -missed, words


def _meets_fewer(without: Plan | None, with_them: Plan | None, final: FinalFacts) -> bool:
    """Whether a plan without some changes leaves missed an objective the plan with them meets."""
    if without is None or with_them is None:
        return False
    def met(plan: Plan) -> set[str]:
        return {s.kind for s in symptoms(final.inputs, final.derived, plan)
                if s.objective is not None and s.after is not None and s.after <= s.objective}
    return bool(met(with_them) - met(without))


def _idle_itl_caps(candidates: Mapping[str, Candidate], evaluated: Mapping[str, tuple[dict[str, Any], list[RuleNote]]],
                   facts: Mapping[str, Any], keys: list[str]) -> dict[str, str]:
    """ITL caps the plan leaves idle, with why: sized after the plan, the largest batch that meets
    the objective is above what is in flight at the busiest arrival rate, so the cap never binds and
    lowering the engine's would change nothing but its peak (set 16 d3: 64 -> 60 with 24 running)."""
    running, waiting = facts.get("workload.requests_running_mean"), facts.get("workload.requests_waiting_mean") or 0
    mean, peak = facts.get("workload.arrival_rate_per_s"), facts.get("workload.arrival_rate_peak_per_s")
    if not isinstance(running, int | float) or isinstance(running, bool):
        return {}
    burst = peak / mean if isinstance(peak, int | float) and isinstance(mean, int | float) and mean > 0 else 1.0
    busiest = math.ceil((running + waiting) * max(1.0, burst))
    idle = {}
    for key in keys:
        strategy, params = candidates[key].strategy, evaluated[key][0]
        cap = params.get("max_num_seqs")
        today_cap = facts.get("serving.max_num_seqs")
        lowers = not isinstance(today_cap, int | float) or cap is None or cap <= today_cap   # not a raise of a cap that binds
        if strategy in ITL_CAPS and isinstance(cap, int | float) and cap >= busiest and lowers:
            idle[key] = (f"not needed after the plan: the largest batch that meets the ITL objective once the plan's "
                         f"other changes are in ({cap:,.0f}) is above the {busiest:,} requests in flight at the busiest "
                         "arrival rate, so the cap would never bind")
    return idle


def _one_cap(candidates: Mapping[str, Candidate], evaluated: Mapping[str, tuple[dict[str, Any], list[RuleNote]]],
             sized_by_key: Mapping[str, list[tuple[str, str]]], keys: list[str], beside_outside: set[str],
             before_plan: dict[str, dict[str, Any]]) -> list[str]:
    """The server runs one running-batch cap: where several changes size one (an ITL objective's and
    the KV pool's), each takes the tightest, which meets them all, so that the flag and the settings
    that follow it (SGLang's --cuda-graph-max-bs, TensorRT-LLM's graph batch) agree (a newcomer's
    2026-12 try: --max-running-requests 52 beside --cuda-graph-max-bs 225). The keys it lowered."""
    caps = [(key, name, evaluated[key][0][name]) for key in keys for name in evaluated[key][0]
            if (candidates[key].strategy, name) in CAP_PARAMS and isinstance(evaluated[key][0][name], int | float)]
    if len({value for _, _, value in caps}) < 2:
        return []
    tightest_key, _, tightest = min(caps, key=lambda cap: cap[2])
    lowered = []
    for key, name, value in caps:
        if value != tightest:
            params, notes = evaluated[key]
            why = (f"lowered from {value:,} to {tightest:,}, the cap {tightest_key} sizes: the server runs one cap, "
                   "and the tightest meets every change's bound")
            params[name] = tightest
            if tightest_key in beside_outside:      # what a script that cannot apply the plan's replicas prints
                before_plan.setdefault(key, {}).setdefault(name, value)
            sized_by_key[key].append((name, why))
            notes.append(RuleNote(candidates[key].params[name][1], f"{name}={tightest}: {why}"))
            lowered.append(key)
    return lowered


def _attention_ranks(final: FinalFacts, parallelism: list[dict[str, Any]]) -> int:
    """The data-parallel attention ranks a replica has after the plan (1 without DP attention):
    each schedules its own requests, so an engine's batch cap counts one rank's, while the model's
    caps count the replica's. Today's setting, or the parallelism the plan turns on; none where the
    plan turns it off (set 34 d1: a rank's 16 written as the replica's cap once DP attention went)."""
    if any(p.get("dp_attention") is False for p in parallelism):
        return 1
    planned = next((p for p in parallelism if p.get("dp_attention") is True), None)
    if planned is None and final.lookup("serving.dp_attention") != (KNOWN, True):
        return 1
    # the ranks are the data-parallel degree where the plan states one (vLLM writes DP attention as
    # --data-parallel-size 8 beside --tensor-parallel-size 1, each rank its own scheduler and cap:
    # set 17 d4's 2,353 was a rank's cap, 8x the pool), else the tensor-parallel degree (SGLang's)
    data = (planned or {}).get("data")
    tensor = data if isinstance(data, int) and not isinstance(data, bool) and data >= 2 else (planned or {}).get("tensor")
    if not isinstance(tensor, int) or isinstance(tensor, bool):
        status, tensor = final.lookup("derived.tensor_parallel")
        if status != KNOWN or not isinstance(tensor, int | float) or isinstance(tensor, bool):
            return 1
    return max(1, int(tensor))


def _after_plan(plan: Plan, final: FinalFacts) -> tuple[dict[str, Any], Lookup]:
    """The estimates the whole plan leaves (derived path -> value), and a lookup of the final
    facts with them in place of today's."""
    after = {f"derived.{gain.metric}": gain.after for gain in plan.expected}

    def planned(path: str) -> tuple[str, Any]:
        return (KNOWN, after[path]) if path in after else final.lookup(path)
    return after, planned


def _harmless_resizing(plan: Plan | None, plan_of: Callable[[], Plan | None], planned: list[str], moved_in_place: list[str],
                       evaluated: dict[str, tuple[dict[str, Any], list[RuleNote]]], before_plan: dict[str, dict[str, Any]],
                       sized_by_key: dict[str, list[tuple[str, str]]], outcomes: dict[str, Outcome],
                       candidates: dict[str, Candidate], catalog: Mapping[str, Strategy], whatif: WhatIf | None) -> Plan | None:
    """A budget re-sized after the plan is judged as a change: against the same plan with today's
    value, where it works against an objective (objectives.harm) today's value stays, saying why,
    and the plan is the one with it (review set 9: a 96-token chunk budget sized for an ITL
    objective took a missed 2 s TTFT p99 objective three times further, unjudged)."""
    if plan is None or whatif is None:
        return plan
    judged = objectives(whatif.baseline.lookup)
    threshold = whatif.pack.kb.negligible_change
    for key in list(planned):
        strategy = catalog[candidates[key].strategy]
        today = before_plan.get(key)
        if not judged or not today or not sized_by_key.get(key) or not _effects_read_params(strategy, candidates[key].variant):
            continue
        params, notes = evaluated[key]
        sized = {name: params[name] for name in today}
        params.update(today)
        with_today = plan_of()
        params.update(sized)
        if with_today is None:
            continue
        kept_after = {g.metric: g.after for g in with_today.expected}
        moved = [(g.metric, kept_after[g.metric], g.after) for g in plan.expected if g.metric in kept_after]
        # a budget sized to meet one objective may spend another's room: it is harm only where the
        # estimate (moved as the measurement would be) ends past that objective's SLO
        after_of = {name: after for name, _, after in moved}
        found = tuple((o.name, m) for o, m in harm(moved, judged, threshold)
                      if o.slo is not None and after_of[m] * (o.scale or 1) > o.slo)
        # or where it buys nothing: every estimate it moves is worse (set 23 d2: a 64-token budget
        # for long reasoning outputs, whose short prompts it had nothing to split, took the plan's
        # TTFT and ITL p99 both further off, each still inside its objective)
        found = found or tuple(("every estimate it moves", m) for m in worsens_everything(moved, threshold))[:1]
        if not found:
            continue
        objective, metric = found[0]
        before, after = kept_after[metric], after_of[metric]
        unit = next((f" {g.unit}" for g in plan.expected if g.metric == metric and g.unit), "")
        params.update(today)
        notes[:] = [n for n in notes if not any(n.text.startswith(f"{name}={fmt(value)}: sized after the plan")
                                                for name, value in sized.items())]
        rule = candidates[key].params[next(iter(today))][1]
        notes.append(RuleNote(rule, "; ".join(f"{name}={fmt(value)} stays" for name, value in today.items())
                              + f": the value sized after the plan ({', '.join(f'{n}={fmt(v)}' for n, v in sized.items())}) "
                              f"works against {objective}: {label(metric)} {number(before)} -> {number(after)}{unit} in the plan"))
        sized_by_key[key], before_plan[key] = [], {}
        if key in moved_in_place:
            moved_in_place.remove(key)
            planned.remove(key)
            outcomes.pop(key, None)
        plan = with_today
    return plan


def _sized_after_plan(candidate: Candidate, params: dict[str, Any], plan: Plan, final: FinalFacts, strategy: Strategy,
                      notes: list[RuleNote]) -> list[tuple[str, str]]:
    """Re-evaluate the budgets of the running server (parameters marked `after_plan` in
    kb/strategies.yaml) on the estimates as the whole plan leaves them: a chunk budget computed on
    today's 16-bit step is not printed beside FP8 weights that shorten it. Updates `params` and `notes`; returns what moved, and why."""
    after, planned = _after_plan(plan, final)
    if not after:
        return []
    replanned, _ = _params(candidate, planned, strategy)
    sized = []
    for name, value in replanned.items():
        if not strategy.params[name].after_plan or name not in params or value == params[name]:
            continue
        node, rule_id = candidate.params[name]
        moved = [f"{path} {fmt(final.lookup(path)[1])} -> {fmt(after[path])}" for path in unique_facts(node) if path in after]
        why = f"sized after the plan ({', '.join(plan.strategies)}): {fmt(params[name])} on today's deployment; {'; '.join(moved)}"
        params[name] = value
        sized.append((name, why))
        notes.append(RuleNote(rule_id, f"{name}={fmt(value)}: {why}"))
    return sized


def _standing_vetoes(vetoes: list[Drawn[Reject]], candidates: dict[str, Candidate], kept: set[str],
                     catalog: Mapping[str, Strategy], whatif: WhatIf, final: FinalFacts,
                     rules: Mapping[str, Rule]) -> list[Drawn[Reject]]:
    """The rejections that stand: a rejection marked `after_plan` is judged on the deployment the
    other changes leave (their plan, strongest first, without the vetoed ones), and lapses where its
    rule's condition is false there (set 20 d3: no SGLang mixed-chunk budget met the ITL objective
    on today's BF16 Gemma 3, and 208 tokens do beside the FP8 weights the advice also gives)."""
    vetoed = {v.conclusion.key for v in vetoes if not v.conclusion.after_plan}
    others = sorted((c for key, c in candidates.items() if key not in kept and key not in vetoed), key=lambda c: -c.weight)
    out = []
    for veto in vetoes:
        if veto.conclusion.after_plan:
            rest = [c for c in others if not refers_to(veto.conclusion.strategy, veto.conclusion.variant, c.strategy, c.variant)]
            plan = whatif.plan([(c.key, catalog[c.strategy], c.variant, _params(c, final.lookup, catalog[c.strategy])[0])
                                for c in rest]) if rest else None
            if _lapses_after_plan(rules[veto.rule], plan, final) is not None:
                continue
        out.append(veto)
    return out


def _lapses_after_plan(rule: Rule, plan: Plan | None, final: FinalFacts) -> str | None:
    """Why a caveat drawn on today's estimates no longer holds once the whole plan is applied
    (its condition is false on the estimates the plan leaves), or None where it still holds."""
    if plan is None:
        return None
    after, planned = _after_plan(plan, final)
    moved = [path for path in unique_facts(rule.when) if path in after and after[path] != final.lookup(path)[1]]
    if not moved or evaluate(rule.when, planned) is not False:
        return None
    return (f"holds on today's deployment, not after the plan ({', '.join(plan.strategies)}): "
            + "; ".join(f"{path} {fmt(final.lookup(path)[1])} -> {fmt(after[path])}" for path in moved))


def _params(candidate: Candidate, facts: Lookup, strategy: Strategy) -> tuple[dict[str, Any], list[RuleNote]]:
    """Evaluate each parameter on the facts; say so when facts were missing or the value
    falls outside the parameter's range (then it is not given)."""
    params: dict[str, Any] = {}
    notes: list[RuleNote] = []
    for name, (node, rule_id) in candidate.params.items():
        looked_up_unknown: list[str] = []

        def lookup(path: str, looked_up_unknown: list[str] = looked_up_unknown) -> tuple[str, Any]:
            status, value = facts(path)
            if status != KNOWN:
                looked_up_unknown.append(path)
            return status, value
        try:
            params[name] = value_of(node, lookup)
        except Missing as missing:
            notes.append(RuleNote(rule_id, f"{name} not computed: needs {', '.join(dict.fromkeys(missing.paths))}"))
            continue
        problem = strategy.params[name].violated_by(params[name])
        if problem:
            used = ", ".join(f"{p}={fmt(facts(p)[1])}" for p in unique_facts(node) if facts(p)[0] == KNOWN)
            notes.append(RuleNote(rule_id, f"{name} not given: it computes to {fmt(params.pop(name))}, "
                                         f"{problem}" + (f" (from {used})" if used else "")))
            continue
        if looked_up_unknown:
            # a fallback to today's setting is today's value, not a default (set 42 F9: a 4,096-token
            # --max-batch-prefill-tokens from the launch read "is a default")
            today = next((path for path in unique_facts(node) if path.startswith("serving.")
                          and facts(path) == (KNOWN, params[name])), None)
            kind = f"keeps today's {today}" if today else "is a default"
            notes.append(RuleNote(rule_id, f"{name}={fmt(params[name])} {kind}: "
                                         f"{', '.join(dict.fromkeys(looked_up_unknown))} not known"))
    return params, notes
