"""Static checks on rule packs, each finding with file:line, the offending text and a hint."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import assert_never

from kbopt.engine.lang.errors import ExprError
from kbopt.engine.lang.nodes import Cmp, Const, Contains, Known, Leaf, Needs, OneOf, facts_of
from kbopt.engine.lang.normal_form import to_dnf, to_nnf
from kbopt.engine.lang.operators import COMPARISONS
from kbopt.engine.pack.loader import LAYERS, builtin_root, load_pack
from kbopt.engine.pack.rule import Derive, Pack, Recommend, Reject, Rule
from kbopt.errors import RuleError
from kbopt.kb.catalog import seed_claims, strategies
from kbopt.kb.vocabulary import load_vocabulary
from kbopt.kb.yamlio import read_yaml

OUTPUT_FACTS = {"derived.bottleneck"}          # read by reports, so never "unused"


@dataclass(frozen=True)
class Finding:
    file: str
    line: int | None
    severity: str          # error | warning | info
    code: str
    message: str
    text: str | None = None
    hint: str | None = None

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        out = f"{where}: {self.severity}[{self.code}]: {self.message}"
        if self.text:
            out += f"\n    | {self.text}"
        if self.hint:
            out += f"\n    = help: {self.hint}"
        return out


def _retired(paths=()) -> dict[str, str]:
    """Retired ids of the built-in pack and of each custom pack (its own retired.yaml)."""
    retired = _retired_entries(read_yaml(builtin_root().joinpath("retired.yaml").read_text(encoding="utf-8")), "rules/retired.yaml")
    for path in paths:
        extra = Path(path, "retired.yaml")
        if extra.is_file():
            retired.update(_retired_entries(read_yaml(extra.read_text(encoding="utf-8")), str(extra)))
    return retired


def _retired_entries(data, file: str) -> dict[str, str]:
    """`retired: {ID: reason}` or `retired: [ID, ...]`."""
    entries = data.get("retired") if isinstance(data, dict) else None
    if entries is None:
        return {}
    if isinstance(entries, list) and all(isinstance(e, str) for e in entries):
        return {e: "retired" for e in entries}
    if isinstance(entries, dict) and all(isinstance(k, str) for k in entries):
        return {k: str(v) for k, v in entries.items()}
    raise RuleError(file, 1, "expected `retired: {RULE-ID: reason, ...}` or `retired: [RULE-ID, ...]`")


# ------------------------------------------------------------------ satisfiability (per fact intervals)


def _term_satisfiable(leaves: list[Leaf], possible: dict[str, set] | None = None) -> bool:
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
    allowed: dict[str, set] = {}
    excluded: dict[str, set] = {}
    present, absent = set(), set()
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


def _terms(node) -> list[list[Leaf]]:
    return to_dnf(to_nnf(node))


def can_be_true(node, possible: dict[str, set] | None = None) -> bool:
    return any(_term_satisfiable(term, possible) for term in _terms(node))


def derivable_values(pack: Pack) -> dict[str, set]:
    """For each derived fact, the values rules can derive (None stands for any: an expression)."""
    out: dict[str, set] = {path: set() for path in load_vocabulary().facts if path.startswith("derived.")}
    for rule in pack.rules:
        if not can_be_true(rule.when):
            continue
        for c in rule.then:
            if isinstance(c, Derive):
                out[c.path].add(c.value.value if isinstance(c.value, Const) else None)
    return out


def can_be_true_together(a, b, pack: Pack | None = None) -> bool:
    """Can two conditions hold at once? With a pack, a test on a derived fact is replaced by the
    conditions of the rules that would derive a fitting value (one level deep)."""
    terms_a, terms_b = _terms(a), _terms(b)
    if pack is not None:
        terms_a, terms_b = _expand(terms_a, pack), _expand(terms_b, pack)
    return any(_term_satisfiable(x + y) for x in terms_a for y in terms_b)


EXPANSION_LIMIT = 64


def _expand(terms: list[list], pack: Pack) -> list[list]:
    rules = pack.by_id()
    out = []
    for term in terms:
        expanded = [[]]
        for leaf in term:
            options = [[leaf]]
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


def lint_pack(pack: Pack, paths=()) -> list[Finding]:
    """Findings on every rule of `pack` (a custom pack can break a built-in rule, e.g. by
    disabling the rule that derives what it needs)."""
    findings: list[Finding] = []
    mine = list(pack.rules)
    claims, retired, catalog = seed_claims(), _retired(paths), strategies()
    used = {p for r in pack.rules for node in (r.fire_condition, *_expressions(r)) for p in facts_of(node)
            if p.startswith("derived.")}
    possible = derivable_values(pack)
    for rule in mine:
        def add(severity, code, message, text=None, hint=None, key=None, rule=rule):
            findings.append(Finding(rule.file, rule.lines.get(key, rule.line) if key else rule.line,
                                    severity, code, message, text, hint))
        if rule.id in retired:
            add("error", "K101", f"{rule.id} is a retired id ({retired[rule.id]})", f"id: {rule.id}",
                "choose a new id; retired ids are never reused")
        for source in rule.sources:
            for claim in re.findall(r"seed (K\d+(?:\.\d+)?)", source):
                if claim not in claims:
                    close = [c for c in claims if c.split(".")[0] == claim.split(".")[0]]
                    add("error", "K102", f"cites {claim}, which the seed does not have", f"source: {source}",
                        (f"claims of that section: {', '.join(close)}" if close else "the seed's claims are K1.1 to K4.6")
                        + " (kb/seed.yaml)", key="source")
        if not can_be_true(rule.when):
            add("error", "K201", "the condition can never be true", f"when: {rule.when_text}",
                "in every alternative, two tests contradict each other (a range that is empty, a value that is "
                "excluded, known and missing together)", key="when")
        elif not can_be_true(rule.fire_condition, possible):
            needs = [p for p in dict.fromkeys(facts_of(rule.fire_condition)) if p in possible]
            add("error", "K202", f"can never fire: no rule derives the values of {', '.join(needs)} it needs",
                f"when: {rule.when_text}", "add a rule that derives them, or test input facts instead", key="when")
        for path in rule.derives:
            if path not in used and path not in OUTPUT_FACTS:
                add("warning", "K203", f"derives {path}, which no rule uses", None,
                    "use it in a condition, or drop the derivation", key="then")
        outcomes = {e.fires for e in rule.examples}
        if True not in outcomes:
            add("warning", "K301", "no example fires the rule", None, "add an example with `fires: true`", key="examples")
        if False not in outcomes and "unknown" not in outcomes:
            add("warning", "K302", "no example where the rule does not fire", None,
                "add one with `fires: false` (decided false) or `fires: unknown` (waits for facts)", key="examples")
        if "TODO" in " ".join([rule.title, rule.because, rule.when_text, " ".join(rule.sources)]
                              + [getattr(c, "text", "") or "" for c in rule.then]):
            add("error", "K303", "still has TODO placeholders from `kbopt rules new`", None, "fill them in")
        findings.extend(_example_findings(rule, catalog))
    findings.extend(_ties(pack, mine, catalog))
    return findings


def _example_findings(rule: Rule, catalog) -> list[Finding]:
    """Example facts that are not facts v1, and expectations naming strategies that do not exist."""
    import difflib
    from kbopt.errors import FactsError
    from kbopt.kb.facts import facts_from_document
    out = []
    names = set(catalog) | {f"{s}[{v}]" for s, spec in catalog.items() for v in spec.variants}
    for example in rule.examples:
        try:
            facts_from_document(example.facts, "facts")
        except FactsError as error:
            out.append(Finding(rule.file, example.line, "error", "K304", f"example {example.name!r}: {error}"))
        for key in ("chosen", "rejected"):
            for name in example.expect.get(key, ()):
                if name not in names:
                    close = difflib.get_close_matches(name, sorted(names), n=1)
                    out.append(Finding(rule.file, example.line, "error", "K305",
                                       f"example {example.name!r} expects {key} {name!r}, which is no strategy",
                                       None, f"did you mean '{close[0]}'?" if close else "see kb/strategies.yaml"))
    return out


def _expressions(rule: Rule) -> list:
    """The value expressions of a rule's conclusions (derived values, recommended parameters)."""
    out = []
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


def _ties(pack: Pack, mine: list[Rule], catalog) -> list[Finding]:
    """Two rules that can fire together and recommend exclusive candidates at the same weight:
    the conflict graph then decides by name, which is no declared resolution."""
    findings = []
    recommends = [(r, c) for r in pack.rules for c in r.then if isinstance(c, Recommend)]
    mine_ids = {r.id for r in mine}
    seen = set()
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
            findings.append(Finding(rule.file, rule.line, "warning", "K401",
                                    f"{a.id} ({ca.key}) and {b.id} ({cb.key}) can fire together, exclude each other "
                                    f"and weigh the same ({ca.weight:g}): the choice falls to their names",
                                    None, "give one a higher weight, or make their conditions exclusive"))
    return findings


def _limits(pack: Pack) -> list[Finding]:
    from kbopt.engine.evaluators.durable import RULESET_SIZE, compile_pack
    try:
        rulesets = compile_pack(pack)
    except ExprError as error:
        return [Finding("(pack)", None, "error", "K501", error.message, None, error.hint)]
    if len(rulesets) > 1:
        sizes = ", ".join(str(len(r["rules"]) - 1) for r in rulesets)
        return [Finding("(pack)", None, "info", "K502",
                        f"compiled into {len(rulesets)} durable_rules rulesets ({sizes} compiled rules), so that no "
                        f"fact meets more than {RULESET_SIZE} conditions of one (durable_rules allows 64)")]
    return []


def _file_errors(paths: list[str]) -> list[Finding]:
    from kbopt.engine.pack.loader import _read_text, _rule_files, load_rule_text, pack_parameters
    try:
        shared = pack_parameters([Path(p) for p in paths])
    except RuleError as error:
        return [Finding(error.file, error.line, "error", "K000", error.message, None, error.hint)]
    findings = []
    for root, shown in [(builtin_root(), "rules")] + [(Path(p), p) for p in paths]:
        for layer, file in _rule_files(root):
            name = f"{shown}/{layer}/{file.name}"
            try:
                load_rule_text(_read_text(file, name), name, layer, shown, shared=shared)
            except RuleError as error:
                findings.append(Finding(error.file, error.line, "error", "K000", error.message,
                                        _offending_line(file, error.line), error.hint))
    return findings


def _offending_line(file, line: int | None) -> str | None:
    try:
        return file.read_text(encoding="utf-8").splitlines()[line - 1].strip() if line else None
    except (OSError, UnicodeDecodeError, IndexError):
        return None


def lint_paths(paths: list[str]) -> tuple[list[Finding], int]:
    """Lint custom packs (layered over the built-in one), or the built-in pack when none given.
    Returns the findings and how many rules were checked."""
    files_findings: list[Finding] = []
    for path in paths:
        if not Path(path).is_dir():
            files_findings.append(Finding(path, None, "error", "K001", "not a rules directory",
                                          None, "a pack is a directory: <dir>/<layer>/<id>.yaml, layers: " + ", ".join(LAYERS)))
    if files_findings:
        return files_findings, 0
    files_findings = _file_errors(paths)      # every broken file, not just the first
    if files_findings:
        return files_findings, 0
    try:
        pack = load_pack(paths)
    except RuleError as error:
        return [Finding(error.file, error.line, "error", "K000", error.message, None, error.hint)], 0
    return lint_pack(pack, paths) + _limits(pack), len(pack.rules)
