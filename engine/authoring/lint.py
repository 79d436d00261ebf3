"""Static checks on a loaded rule pack, each a Diagnostic with a code from kbopt.codes."""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, assert_never

from kbopt.codes import diagnostic
from kbopt.diagnostics import Diagnostic
from kbopt.engine.evaluators.durable import RULESET_SIZE, compile_pack
from kbopt.engine.lang.errors import ExprError
from kbopt.engine.lang.nodes import Cmp, Condition, Const, Contains, Known, Leaf, Needs, OneOf, Value, facts_of
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.operators import COMPARISONS
from kbopt.engine.pack.files import Retired
from kbopt.engine.pack.loader import read_pack
from kbopt.engine.pack.rule import Derive, Pack, Recommend, Reject, Rule
from kbopt.errors import FactsError
from kbopt.kb.catalog import Strategy, strategies
from kbopt.kb.facts import facts_from_document
from kbopt.kb.knowledge import seed_claims
from kbopt.kb.vocabulary import Vocabulary

OUTPUT_FACTS = {"derived.bottleneck"}          # read by reports, so never "unused"


# ------------------------------------------------------------------ satisfiability (per fact intervals)


def _term_satisfiable(leaves: list[Leaf], possible: dict[str, set[Any]] | None = None) -> bool:
    """Can this conjunction hold? `possible` maps a derived fact to the values rules can give it
    (a fact no rule derives maps to the empty set)."""
    possible = possible or {}
    for leaf in leaves:
        paths = list(facts_of(leaf))
        if any(p in possible and not possible[p] for p in paths):
            return False            # needs a derived fact nobody produces
        if isinstance(leaf, Cmp) and isinstance(leaf.right, Const) and leaf.left.path in possible \
                and None not in possible[leaf.left.path]:
            values = possible[leaf.left.path]
            if not any(COMPARISONS[leaf.op].apply(v, leaf.right.value) for v in values
                       if isinstance(v, type(leaf.right.value)) or isinstance(leaf.right.value, (int, float))):
                return False        # none of the values rules derive satisfies it
    low: dict[str, tuple[float, bool]] = {}
    high: dict[str, tuple[float, bool]] = {}
    allowed: dict[str, set[Any]] = {}
    excluded: dict[str, set[Any]] = {}
    present: set[str] = set()
    absent: set[str] = set()
    for leaf in leaves:
        match leaf:
            case Known(fact=fact, negated=negated):
                (absent if negated else present).add(fact.path)
            case Needs(fact=fact):
                present.add(fact.path)
            case OneOf(fact=fact, values=listed, negated=True):
                excluded.setdefault(fact.path, set()).update(listed)
            case OneOf(fact=fact, values=listed):
                allowed[fact.path] = allowed.get(fact.path, set(listed)) & set(listed)
            case Cmp(op=op, left=left, right=Const(value=value)):
                path = left.path
                present.add(path)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    if op in (">", ">="):
                        bound = (value, op == ">=")
                        if path not in low or bound[0] > low[path][0] or (bound[0] == low[path][0] and not bound[1]):
                            low[path] = bound
                    elif op in ("<", "<="):
                        bound = (value, op == "<=")
                        if path not in high or bound[0] < high[path][0] or (bound[0] == high[path][0] and not bound[1]):
                            high[path] = bound
                    elif op == "==":
                        allowed[path] = allowed.get(path, {value}) & {value}
                    else:
                        excluded.setdefault(path, set()).add(value)
                elif op == "==":
                    allowed[path] = allowed.get(path, {value}) & {value}
                elif op == "!=":
                    excluded.setdefault(path, set()).add(value)
            case Cmp() | Contains():
                pass            # two facts compared, list membership: no bound on one fact
            case _ as unreachable:
                assert_never(unreachable)
    if present & absent:
        return False
    for path in set(low) & set(high):
        (lo, lo_in), (hi, hi_in) = low[path], high[path]
        if lo > hi or (lo == hi and not (lo_in and hi_in)):
            return False
    for path, values in allowed.items():
        values = values - excluded.get(path, set())
        values = {v for v in values if not isinstance(v, (int, float)) or isinstance(v, bool) or (
            (path not in low or v > low[path][0] or (v == low[path][0] and low[path][1])) and
            (path not in high or v < high[path][0] or (v == high[path][0] and high[path][1])))}
        if not values:
            return False
    return True


def _terms(node: Condition) -> list[list[Leaf]]:
    return to_dnf(to_nnf(node))


def can_be_true(node: Condition, possible: dict[str, set[Any]] | None = None) -> bool:
    return any(_term_satisfiable(term, possible) for term in _terms(node))


def derivable_values(pack: Pack) -> dict[str, set[Any]]:
    """For each derived fact, the values rules can derive (None stands for any: an expression)."""
    out: dict[str, set[Any]] = {path: set() for path in pack.kb.vocabulary.facts if Vocabulary.is_derived(path)}
    for rule in pack.rules:
        if not can_be_true(rule.when):
            continue
        for c in rule.then:
            if isinstance(c, Derive):
                out[c.path].add(c.value.value if isinstance(c.value, Const) else None)
    return out


def can_be_true_together(a: Condition, b: Condition, pack: Pack | None = None) -> bool:
    """Can two conditions hold at once? With a pack, a test on a derived fact is replaced by the
    conditions of the rules that would derive a fitting value (one level deep)."""
    terms_a, terms_b = _terms(a), _terms(b)
    if pack is not None:
        terms_a, terms_b = _expand(terms_a, pack), _expand(terms_b, pack)
    return any(_term_satisfiable(x + y) for x in terms_a for y in terms_b)


EXPANSION_LIMIT = 64


def _expand(terms: list[list[Leaf]], pack: Pack) -> list[list[Leaf]]:
    rules = pack.by_id()
    out: list[list[Leaf]] = []
    for term in terms:
        expanded: list[list[Leaf]] = [[]]
        for leaf in term:
            options: list[list[Leaf]] = [[leaf]]
            if isinstance(leaf, Cmp) and isinstance(leaf.right, Const) and leaf.left.path in pack.producers:
                options = []
                for rule_id in pack.producers[leaf.left.path]:
                    for c in rules[rule_id].then:
                        if isinstance(c, Derive) and c.path == leaf.left.path and (
                                not isinstance(c.value, Const)
                                or COMPARISONS[leaf.op].apply(c.value.value, leaf.right.value)):
                            options.extend([leaf] + producer for producer in _terms(rules[rule_id].when))
                options = options or [[leaf]]
            expanded = [prefix + option for prefix in expanded for option in options]
            if len(expanded) > EXPANSION_LIMIT:
                return terms          # too many alternatives to weigh: stay coarse
        out.extend(expanded)
    return out


# ------------------------------------------------------------------ checks


def lint_pack(pack: Pack, retired: Mapping[str, Retired] | None = None, errors_only: bool = False) -> list[Diagnostic]:
    """Findings on every rule of `pack` (a custom pack can break a built-in rule, e.g. by
    disabling the rule that derives what it needs). `errors_only` skips the checks that can only
    warn, the pairwise tie check among them: advise refuses on errors and would drop the rest."""
    findings: list[Diagnostic] = []
    mine = list(pack.rules)
    claims, retired, catalog = seed_claims(), retired or {}, strategies()
    used = {p for r in pack.rules for node in (r.fire_condition, *_expressions(r)) for p in facts_of(node)
            if Vocabulary.is_derived(p)}
    possible = derivable_values(pack)
    for rule in mine:
        def add(code: str, message: str, snippet: str | None = None, help: str | None = None, key: str | None = None,
                rule: Rule = rule) -> None:
            findings.append(diagnostic(code, rule.file, rule.lines.get(key, rule.line) if key else rule.line,
                                       message, snippet=snippet, help=help))
        if rule.id in retired:
            add("L101", f"{rule.id} is a retired id ({retired[rule.id].reason})", f"id: {rule.id}",
                f"choose a new id; retired ids are never reused (retired at {retired[rule.id].location})")
        for source in rule.sources:
            for claim in re.findall(r"seed (K\d+(?:\.\d+)?)", source):
                if claim not in claims:
                    close = [c for c in claims if c.split(".")[0] == claim.split(".")[0]]
                    add("L102", f"cites {claim}, which the methodology does not have", f"source: {source}",
                        (f"claims of that section: {', '.join(close)}" if close else "the methodology's claims are K1.1 to K4.6")
                        + " (kb/sources.yaml)", key="source")
        if not can_be_true(rule.when):
            add("L201", "the condition can never be true", f"when: {rule.when_text}",
                "in every alternative, two tests contradict each other (a range that is empty, a value that is "
                "excluded, known and missing together)", key="when")
        elif not can_be_true(rule.fire_condition, possible):
            needs = [p for p in dict.fromkeys(facts_of(rule.fire_condition)) if p in possible]
            add("L202", f"can never fire: no rule derives the values of {', '.join(needs)} it needs",
                f"when: {rule.when_text}", "add a rule that derives them, or test input facts instead", key="when")
        if not errors_only:
            for path in rule.derives:
                if path not in used and path not in OUTPUT_FACTS:
                    add("L203", f"derives {path}, which no rule uses", None,
                        "use it in a condition, or drop the derivation", key="then")
            outcomes = {e.fires for e in rule.examples}
            if True not in outcomes:
                add("L301", "no example fires the rule", None, "add an example with `fires: true`", key="examples")
            if False not in outcomes and "unknown" not in outcomes:
                add("L302", "no example where the rule does not fire", None,
                    "add one with `fires: false` (decided false) or `fires: unknown` (waits for facts)", key="examples")
        if "TODO" in " ".join([rule.title, rule.because, rule.when_text, " ".join(rule.sources)]
                              + [getattr(c, "text", "") or "" for c in rule.then]):
            add("L303", "still has TODO placeholders from `kbopt rules new`", None, "fill them in")
        findings.extend(_example_findings(rule, catalog))
    if not errors_only:
        findings.extend(_ties(pack, mine, catalog))
    return findings


def _example_findings(rule: Rule, catalog: Mapping[str, Strategy]) -> list[Diagnostic]:
    """Example facts that are not facts v1, and expectations naming strategies that do not exist."""
    import difflib  # only to suggest a name for a misspelt one
    out: list[Diagnostic] = []
    names = set(catalog) | {f"{s}[{v}]" for s, spec in catalog.items() for v in spec.variants}
    for example in rule.examples:
        try:
            facts_from_document(example.facts, "facts")
        except FactsError as error:
            out.append(diagnostic("L304", rule.file, example.line, f"example {example.name!r}: {error}"))
        for key in ("chosen", "rejected"):
            for name in example.expect.get(key, ()):
                if name not in names:
                    close = difflib.get_close_matches(name, sorted(names), n=1)
                    out.append(diagnostic("L305", rule.file, example.line,
                                          f"example {example.name!r} expects {key} {name!r}, which is no strategy",
                                          help=f"did you mean '{close[0]}'?" if close else "see kb/strategies.yaml"))
    return out


def _expressions(rule: Rule) -> list[Value]:
    """The value expressions of a rule's conclusions (derived values, recommended parameters)."""
    out: list[Value] = []
    for c in rule.then:
        if isinstance(c, Derive):
            out.append(c.value)
        elif isinstance(c, Recommend):
            out.extend(node for _, node in c.params)
    return out


def _vetoes(rule: Rule, recommend: Recommend) -> bool:
    """The rule itself rejects the other candidate: a declared resolution."""
    return any(isinstance(c, Reject) and c.strategy == recommend.strategy and c.variant in (None, recommend.variant)
               for c in rule.then)


def _ties(pack: Pack, mine: list[Rule], catalog: Mapping[str, Strategy]) -> list[Diagnostic]:
    """Two rules that can fire together and recommend exclusive candidates at the same weight:
    the conflict graph then decides by name, which is no declared resolution."""
    findings: list[Diagnostic] = []
    recommends = [(r, c) for r in pack.rules for c in r.then if isinstance(c, Recommend)]
    mine_ids = {r.id for r in mine}
    seen: set[tuple[str, str, str, str]] = set()
    for i, (a, ca) in enumerate(recommends):
        for b, cb in recommends[i + 1:]:
            if a.id == b.id or (a.id not in mine_ids and b.id not in mine_ids) or ca.weight != cb.weight:
                continue
            exclusive = (ca.strategy == cb.strategy and ca.variant != cb.variant) or \
                cb.strategy in catalog[ca.strategy].excludes
            if not exclusive or _vetoes(a, cb) or _vetoes(b, ca):
                continue
            key = (a.id, b.id, ca.key, cb.key)
            if key in seen or not can_be_true_together(a.fire_condition, b.fire_condition, pack):
                continue
            seen.add(key)
            rule = a if a.pack != "builtin" else b
            findings.append(diagnostic("L401", rule.file, rule.line,
                                       f"{a.id} ({ca.key}) and {b.id} ({cb.key}) can fire together, exclude each other "
                                       f"and weigh the same ({ca.weight:g}): the choice falls to their names",
                                       help="give one a higher weight, or make their conditions exclusive"))
    return findings


def _limits(pack: Pack) -> list[Diagnostic]:
    try:
        rulesets = compile_pack(pack)
    except ExprError as error:
        return [diagnostic("L501", "(pack)", None, error.message, help=error.hint)]
    per_level: dict[int, list[int]] = {}
    for ruleset in rulesets:
        per_level.setdefault(ruleset["level"], []).append(len(ruleset["rules"]) - 1)
    split = {level: sizes for level, sizes in per_level.items() if len(sizes) > 1}
    if split:
        # Levels alone (rules that read what others derive run after them) are no news; a level
        # split by size is: it costs one more assert per evaluation.
        sizes = "; ".join(f"level {level}: {', '.join(map(str, counts))}" for level, counts in sorted(split.items()))
        return [diagnostic("L502", "(pack)", None,
                           f"compiled into {len(rulesets)} durable_rules rulesets over {len(per_level)} level(s) of "
                           f"chained rules; {len(split)} level(s) split so that no fact meets more than {RULESET_SIZE} "
                           f"conditions of one ruleset (durable_rules allows 64): compiled rules per ruleset {sizes}")]
    return []


def lint_paths(paths: list[str], builtin: Pack | None = None) -> tuple[list[Diagnostic], int]:
    """Lint custom packs (layered over the built-in one, which `builtin` may hold already), or
    the built-in pack when none given. Returns the findings and how many rules were checked: the
    loader's problems alone when the packs do not load (lint cannot reason about rules that are
    not there)."""
    loaded = read_pack(paths, builtin)
    if loaded.diagnostics:
        return list(loaded.diagnostics), 0
    assert loaded.pack is not None      # read_pack leaves the pack out only together with diagnostics
    findings = lint_pack(loaded.pack, loaded.retired) + _limits(loaded.pack)
    if not paths:
        return findings, len(loaded.pack.rules)
    # A custom pack's lint is about that pack: the built-in rules' own warnings are the project's
    # (a newcomer saw 11 of them under his 2-rule pack); an error anywhere still stops `advise`.
    ours = [str(Path(p).resolve()) for p in paths]
    def in_packs(file: str) -> bool:
        return any(str(Path(file).resolve()).startswith(root) for root in ours)
    kept = [f for f in findings if f.severity == "error" or in_packs(f.file)]
    return kept, sum(1 for rule in loaded.pack.rules if rule.pack != "builtin")
