"""The registry of diagnostic codes: each code's severity, title and explanation, and the page
docs/lint-codes.md generated from it.

Codes are a contract (they appear in CI logs and in tickets): never renumber or reuse one. They
start with `L` because the seed's claim ids are `K<section>.<n>`, and `K201` read like `K2.01`.
Run `python -m kbopt.codes > docs/lint-codes.md` after editing this file.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from kbopt.diagnostics import Diagnostic


@dataclass(frozen=True)
class Code:
    code: str
    severity: str
    title: str
    explanation: str
    formerly: str | None = None      # the code it had before the L prefix, for old logs


_ENTRIES = (
    # L0xx: the pack does not load (reported by every command that loads it)
    Code("L001", "error", "not a rules pack",
         "A path given as a pack is not a directory, or holds none of the files a pack may have: rule files under "
         "`<layer>/<id>.yaml` (layers: diagnosis, compute, storage, scheduling), `parameters.yaml`, `disable.yaml`, "
         "`retired.yaml`, `derived.yaml`.", "K001"),
    Code("L002", "error", "unreadable file",
         "A pack file could not be read, or is not UTF-8 text. Rule files are read as UTF-8 on every platform so that "
         "a pack means the same everywhere."),
    Code("L003", "error", "not valid YAML",
         "The file is not YAML, is empty, or repeats a key in one mapping. YAML lets a later copy of a key silently "
         "replace the first, so a typo'd duplicate would win without a word; kbopt refuses it."),
    Code("L004", "error", "wrong shape",
         "The file does not have the shape its kind needs: a rule file follows `kbopt schema rules` (an unknown key, "
         "a missing key, fewer than two examples), `parameters.yaml` maps names to `{value, why}`, `disable.yaml` "
         "lists `{id, why}`, `retired.yaml` maps ids to reasons or lists them, `derived.yaml` maps names to `{type, "
         "description}` (type ratio, number, integer, bool or enum with its `values`). Only a rule file's first shape error "
         "is shown: the later ones usually restate it (an unknown `condition` and a missing `when`)."),
    Code("L005", "error", "rule does not compile",
         "The rule's parts do not resolve: a condition or value expression that does not parse or type-check, an "
         "unknown fact, parameter, strategy, variant or placeholder, a derived value of the wrong type, or a layer or "
         "id that disagrees with where the file lies. Each part is checked, so one file can give several."),
    Code("L006", "error", "packs do not layer",
         "Packs are layered over the built-in one, and a later pack must say what it changes: a rule id already "
         "taken needs `overrides: true`, a retuned shared parameter needs `overrides: true`, and disabling or "
         "overriding needs an earlier pack that has the rule or parameter. Anything else would silently shadow."),
    Code("L007", "error", "beyond kbopt's limits",
         "The rule is valid but asks for more than kbopt evaluates safely and identically on both evaluators: an "
         "expression over 4,000 characters or nested over 32 levels, an `in [..]` of more than 126 values (durable_rules' "
         "core crashes from 127), a condition whose normal form has more than 64 alternatives, a number that is not "
         "finite or an integer beyond ±2^53, or a `because` format spec with a width or precision over 100. The limits "
         "are listed in docs/usage.md."),
    # L1xx: identity and citations
    Code("L101", "error", "retired id",
         "The rule uses an id listed in a `retired.yaml`. Retired ids are never reused, so that an old report's "
         "citation of a rule always means what it meant (as pylint keeps its retired message ids).", "K101"),
    Code("L102", "error", "unknown methodology claim",
         "The rule's `source` cites `seed K<section>.<n>` (methodology §<section>.<n>), and the sources catalog "
         "(kb/sources.yaml) has no such claim. A citation "
         "must lead a reader to the evidence.", "K102"),
    # L2xx: whether a rule can fire
    Code("L201", "error", "never true",
         "In every alternative of the condition, two tests contradict each other: an empty range, a value that is "
         "also excluded, a fact required to be known and missing together. The rule is dead code.", "K201"),
    Code("L202", "error", "can never fire",
         "The condition needs a derived fact (or a value of one) that no rule of the layered packs derives, for "
         "instance because a pack disabled the rule that did.", "K202"),
    Code("L203", "warning", "unused derivation",
         "The rule derives a fact that no condition and no value expression reads, and that no report shows.", "K203"),
    # L3xx: examples and placeholders
    Code("L301", "warning", "no firing example",
         "No inline example has `fires: true`, so `kbopt rules test` never sees the rule fire.", "K301"),
    Code("L302", "warning", "no example that does not fire",
         "Every inline example fires. Add one with `fires: false` (decided false) or `fires: unknown` (waits for "
         "facts), so that a condition that is always true fails a test.", "K302"),
    Code("L303", "error", "TODO placeholders",
         "The rule still has the TODO texts `kbopt rules new` scaffolds; a custom pack with them is refused.", "K303"),
    Code("L304", "error", "example facts are not facts v1",
         "An example's facts would be refused as input (unknown fact, wrong type, a ratio written as a percent), so "
         "the example tests something users cannot write.", "K304"),
    Code("L305", "error", "example expects no strategy",
         "An example's `expect: {chosen, rejected}` names a strategy or variant the catalog (kb/strategies.yaml) does "
         "not have, so the expectation can never hold.", "K305"),
    # L4xx: rules together
    Code("L401", "warning", "tie by name",
         "Two rules can fire together, recommend candidates that exclude each other, and give them the same weight: "
         "the conflict graph then decides by rule name, which is no declared resolution. Give one a higher weight, "
         "make the conditions exclusive, or have one rule reject the other's candidate.", "K401"),
    # L5xx: the compiled pack
    Code("L501", "error", "does not compile for durable_rules",
         "The pack loads but cannot be compiled into durable_rules rulesets.", "K501"),
    Code("L502", "info", "split into several rulesets",
         "Rules run in levels (those that read a derived fact after those that derive it), and a level with more "
         "compiled rules than one durable_rules ruleset can hold (no fact may meet more than 64 conditions of one) is "
         "split into several, each asserted once per evaluation. Nothing to fix; said so that timings are not a "
         "surprise.", "K502"),
)

CODES: dict[str, Code] = {entry.code: entry for entry in _ENTRIES}


def diagnostic(code: str, file: str, line: int | None, message: str, *, help: str | None = None,
               snippet: str | None = None, column: int | None = None) -> Diagnostic:
    """A Diagnostic whose severity comes from the registry, so that no call site can disagree with it."""
    return Diagnostic(file, line, column, code, CODES[code].severity, message, snippet, help)


def page() -> str:
    """docs/lint-codes.md."""
    out = ["# Diagnostic codes", "",
           "Generated from `kbopt/codes.py` by `python -m kbopt.codes > docs/lint-codes.md`; do not edit by hand.", "",
           "Every problem kbopt finds in a rule pack has a stable code. `L0xx` codes mean the pack does not load "
           "(every command refuses it); the others come from `kbopt rules lint`, and `advise --rules` refuses a "
           "custom pack with any error among them. Codes are never renumbered or reused.", "",
           "| code | severity | title | formerly |", "| --- | --- | --- | --- |"]
    out += [f"| [{c.code}](#{c.code.lower()}) | {c.severity} | {c.title} | {c.formerly or ''} |" for c in _ENTRIES]
    for c in _ENTRIES:
        out += ["", f"## {c.code}", "", f"**{c.title}** ({c.severity})", "", c.explanation]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(page())
