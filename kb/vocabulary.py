"""The fact vocabulary: every fact kbopt knows, with its type, unit and range."""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from kbopt.kb.packaged import package_dir, read_knowledge_yaml

FACT_TYPES = ("ratio", "number", "integer", "bool", "string", "enum", "version", "list")
QUALITIES = ("measured", "proxy", "derived", "user", "catalog")
QUALITY_PREFIX = "quality."
DERIVED_SECTION = "derived."      # facts the rules compute (`derived.<name>`), never given in a facts file
NUMERIC_TYPES = ("ratio", "number", "integer", "version")


@dataclass(frozen=True)
class FactSpec:
    path: str                      # "section.name"
    type: str
    description: str
    unit: str | None = None
    values: tuple[str, ...] = ()   # enum members, or list item members
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    derived: bool = False
    quality_of: str | None = None  # set on the pseudo-fact `quality.<path>`: the fact it qualifies
    estimate: bool = False         # a derived quantity of the performance model, reported under advice "estimates"
    validated_by: str | None = None  # the metric of kb/model_errors.yaml it is checked as (its error band)
    absent_means_none: bool = False  # absent, the feature is not there (no MIG slice): a rule's default then assumes nothing
    applies_when: str | None = None  # a condition of the rule language: where false, the fact is not asked for (what to collect)
    pattern: str | None = None     # a string fact's form, as a regular expression (an engine's version)

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def is_numeric(self) -> bool:
        return self.type in NUMERIC_TYPES

    @property
    def is_float(self) -> bool:
        """Facts whose equality is meaningless (measured or computed reals)."""
        return self.type in ("ratio", "number")

    def range_text(self) -> str:
        if self.type == "ratio":
            return "0..1"
        low = "" if self.min is None else (f">{self.min:g}" if self.exclusive_min else f">={self.min:g}")
        high = "" if self.max is None else f"<={self.max:g}"
        return " ".join(part for part in (low, high) if part)


@dataclass(frozen=True)
class Vocabulary:
    facts: dict[str, FactSpec]
    consistency: tuple[dict[str, str], ...] = ()
    dtype_bytes: dict[str, float] = field(default_factory=dict)
    pack_facts: frozenset[str] = frozenset()      # derived facts declared by packs, not by kb/vocabulary.yaml

    def get(self, path: str) -> FactSpec | None:
        return self.facts.get(path)

    @staticmethod
    def is_derived(path: str) -> bool:
        """Whether `path` names a derived fact, declared or not (a rule may read one no vocabulary has)."""
        return path.startswith(DERIVED_SECTION)

    def with_pack_facts(self, declared: Mapping[str, FactSpec]) -> Vocabulary:
        """This vocabulary and the derived facts packs declare (each `derived.<pack>.<name>`)."""
        return Vocabulary({**self.facts, **declared}, self.consistency, self.dtype_bytes, frozenset(declared))

    @cached_property
    def estimate_paths(self) -> tuple[str, ...]:
        """The performance model's estimates (`estimate: true`), in vocabulary order."""
        return tuple(path for path, spec in self.facts.items() if spec.estimate)

    def suggest(self, path: str) -> str | None:
        """The closest known fact name, for "did you mean" hints."""
        names = [p for p, spec in self.facts.items() if spec.quality_of is None]
        close = difflib.get_close_matches(path, names, n=1, cutoff=0.6)
        if not close and "." in path:
            leaf = path.rsplit(".", 1)[1]
            by_leaf = {p.rsplit(".", 1)[1]: p for p in names}
            close = [by_leaf[m] for m in difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)]
        return close[0] if close else None

    def sections(self) -> dict[str, list[FactSpec]]:
        """Input and derived facts by section (without the quality pseudo-facts). Computed once:
        every facts document is checked against it; callers read it and never change it."""
        return self._sections

    def input_sections(self) -> dict[str, list[FactSpec]]:
        return self._input_sections

    @cached_property
    def _sections(self) -> dict[str, list[FactSpec]]:
        grouped: dict[str, list[FactSpec]] = {}
        for spec in self.facts.values():
            if spec.quality_of is None:
                grouped.setdefault(spec.section, []).append(spec)
        return grouped

    @cached_property
    def _input_sections(self) -> dict[str, list[FactSpec]]:
        return {name: specs for name, specs in self.sections().items() if name != "derived"}


def spec_from(path: str, raw: dict[str, Any], derived: bool) -> FactSpec:
    """A fact's spec from its vocabulary entry (kb/vocabulary.yaml, or a pack's derived.yaml)."""
    if raw["type"] not in FACT_TYPES:
        raise ValueError(f"vocabulary: {path} has unknown type {raw['type']!r}")
    return FactSpec(
        path=path,
        type=raw["type"],
        description=raw.get("description", ""),
        unit=raw.get("unit"),
        values=tuple(raw.get("values", ())),
        min=raw.get("min"),
        max=raw.get("max"),
        exclusive_min=bool(raw.get("exclusive_min", False)),
        derived=derived,
        estimate=bool(raw.get("estimate", False)),
        validated_by=raw.get("validated_by"),
        absent_means_none=bool(raw.get("absent_means_none", False)),
        applies_when=raw.get("applies_when"),
        pattern=raw.get("pattern"),
    )


@lru_cache(maxsize=1)
def load_vocabulary() -> Vocabulary:
    text = package_dir("kbopt.kb").joinpath("vocabulary.yaml").read_text(encoding="utf-8")
    raw = read_knowledge_yaml(text, "kb/vocabulary.yaml")
    facts: dict[str, FactSpec] = {}
    for section, fields in raw["sections"].items():
        for name, spec in fields.items():
            path = f"{section}.{name}"
            facts[path] = spec_from(path, spec, derived=(section == "derived"))
    for path in [p for p, spec in facts.items() if not spec.derived]:
        quality = QUALITY_PREFIX + path
        facts[quality] = FactSpec(path=quality, type="enum", values=QUALITIES, quality_of=path,
                                  description=f"where {path} came from: {', '.join(QUALITIES)}")
    return Vocabulary(facts, tuple(raw.get("consistency", ())), dict(raw.get("dtype_bytes", {})))

