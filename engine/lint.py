"""Static checks on rule packs, each finding with file:line, the offending text and a hint."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kbopt.engine import expr
from kbopt.engine.loader import LAYERS, builtin_root, load_pack
from kbopt.engine.rule import Derive, Pack, Recommend, Reject, Rule
from kbopt.errors import RuleError
from kbopt.kb.catalog import seed_claims, strategies
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
    retired = dict(read_yaml(builtin_root().joinpath("retired.yaml").read_text(encoding="utf-8")).get("retired") or {})
    for path in paths:
        extra = Path(path, "retired.yaml")
        if extra.is_file():
            retired.update((read_yaml(extra.read_text(encoding="utf-8")) or {}).get("retired") or {})
    return retired


# ------------------------------------------------------------------ satisfiability (per fact intervals)


def _term_satisfiable(leaves) -> bool:
    low: dict[str, tuple[float, bool]] = {}
    high: dict[str, tuple[float, bool]] = {}
    allowed: dict[str, set] = {}
    excluded: dict[str, set] = {}
    present, absent = set(), set()
    for leaf in leaves:
        if isinstance(leaf, expr.Known):
            (absent if leaf.negated else present).add(leaf.fact.path)
        elif isinstance(leaf, expr.Needs):
            present.add(leaf.fact.path)
        elif isinstance(leaf, expr.OneOf):
            target = excluded if leaf.negated else allowed
            if leaf.negated:
                excluded.setdefault(leaf.fact.path, set()).update(leaf.values)
            else:
                allowed[leaf.fact.path] = allowed.get(leaf.fact.path, set(leaf.values)) & set(leaf.values)
        elif isinstance(leaf, expr.Cmp) and isinstance(leaf.right, expr.Const):
            path, value, op = leaf.left.path, leaf.right.value, leaf.op
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


def _terms(node) -> list[list]:
    return expr.to_dnf(expr.to_nnf(node))


def can_be_true(node) -> bool:
    return any(_term_satisfiable(term) for term in _terms(node))


def can_be_true_together(a, b) -> bool:
    return any(_term_satisfiable(x + y) for x in _terms(a) for y in _terms(b))


# ------------------------------------------------------------------ checks


def lint_pack(pack: Pack, paths=()) -> list[Finding]:
    """Findings on every rule of `pack` (a custom pack can break a built-in rule, e.g. by
    disabling the rule that derives what it needs)."""
    findings: list[Finding] = []
    mine = list(pack.rules)
    claims, retired, catalog = seed_claims(), _retired(paths), strategies()
    used = {p for r in pack.rules for node in (r.fire_condition, *_expressions(r)) for p in expr.facts_of(node)
            if p.startswith("derived.")}
    for rule in mine:
        add = lambda severity, code, message, text=None, hint=None: findings.append(   # noqa: E731
            Finding(rule.file, rule.line, severity, code, message, text, hint))
        if rule.id in retired:
            add("error", "K101", f"{rule.id} is a retired id ({retired[rule.id]})", f"id: {rule.id}",
                "choose a new id; retired ids are never reused")
        for source in rule.sources:
            for claim in re.findall(r"seed (K\d+(?:\.\d+)?)", source):
                if claim not in claims:
                    close = [c for c in claims if c.split(".")[0] == claim.split(".")[0]]
                    add("error", "K102", f"cites {claim}, which the seed does not have", f"source: {source}",
                        (f"claims of that section: {', '.join(close)}" if close else "the seed's claims are K1.1 to K4.6")
                        + " (kb/seed.yaml)")
        if not can_be_true(rule.when):
            add("error", "K201", "the condition can never be true", f"when: {rule.when_text}",
                "two comparisons on one fact exclude each other")
        for path in sorted({p for p in expr.facts_of(rule.fire_condition) if p.startswith("derived.")}):
            if path not in pack.producers:
                add("error", "K202", f"needs {path}, which no rule derives, so it can never fire",
                    f"when: {rule.when_text}", "add a rule that derives it, or test input facts instead")
        for path in rule.derives:
            if path not in used and path not in OUTPUT_FACTS:
                add("warning", "K203", f"derives {path}, which no rule uses", None,
                    "use it in a condition, or drop the derivation")
        outcomes = {e.fires for e in rule.examples}
        if True not in outcomes:
            add("warning", "K301", "no example fires the rule", None, "add an example with `fires: true`")
        if False not in outcomes and "unknown" not in outcomes:
            add("warning", "K302", "no example where the rule does not fire", None,
                "add one with `fires: false` (decided false) or `fires: unknown` (waits for facts)")
        if "TODO" in " ".join([rule.title, rule.because, rule.when_text, " ".join(rule.sources)]):
            add("warning", "K303", "still has TODO placeholders from `kbopt rules new`", None, "fill them in")
    findings.extend(_ties(pack, mine, catalog))
    return findings


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
            if key in seen or not can_be_true_together(a.fire_condition, b.fire_condition):
                continue
            seen.add(key)
            rule = a if a.id in mine_ids else b
            findings.append(Finding(rule.file, rule.line, "warning", "K401",
                                    f"{a.id} ({ca.key}) and {b.id} ({cb.key}) can fire together, exclude each other "
                                    f"and weigh the same ({ca.weight:g}): the choice falls to their names",
                                    None, "give one a higher weight, or make their conditions exclusive"))
    return findings


def _limits(pack: Pack) -> list[Finding]:
    from kbopt.engine.durable_backend import RULESET_SIZE, compile_pack
    try:
        rulesets = compile_pack(pack)
    except expr.ExprError as error:
        return [Finding("(pack)", None, "error", "K501", error.message, None, error.hint)]
    if len(rulesets) > 1:
        sizes = ", ".join(str(len(r["rules"]) - 1) for r in rulesets)
        return [Finding("(pack)", None, "info", "K502",
                        f"compiled into {len(rulesets)} durable_rules rulesets ({sizes} compiled rules), so that no "
                        f"fact meets more than {RULESET_SIZE} conditions of one (durable_rules allows 64)")]
    return []


def _file_errors(paths: list[str]) -> list[Finding]:
    from kbopt.engine.loader import _read_text, _rule_files, builtin_parameters, load_parameters, load_rule_text
    shared = dict(builtin_parameters())
    findings = []
    for root, shown in [(builtin_root(), "rules")] + [(Path(p), p) for p in paths]:
        if shown != "rules" and Path(root, "parameters.yaml").is_file():
            try:
                shared.update(load_parameters(_read_text(Path(root, "parameters.yaml")), f"{shown}/parameters.yaml"))
            except RuleError as error:
                findings.append(Finding(error.file, error.line, "error", "K000", error.message, None, error.hint))
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
