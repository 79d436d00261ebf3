"""The engine settings catalog (kb/engines.yaml) as typed, frozen values.

Each entry says how one strategy (and one of its parameters) is set in one engine, for which
versions the name holds, what it needs and where that was read. engine/advice/settings.py turns
the entries into the lines of advice; the test of known flags checks every name against the
engines' argument lists.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Literal

from kbopt.kb.packaged import package_dir

Kind = Literal["cli", "yaml", "env", "note"]
KINDS: tuple[Kind, ...] = ("cli", "yaml", "env", "note")
ENGINES = ("vllm", "sglang", "trtllm", "tgi")
Version = tuple[int, ...]

_VERSION = re.compile(r"^v?(\d{1,4})(?:\.(\d{1,4}))?(?:\.(\d{1,4}))?")


def parse_version(text: object) -> Version | None:
    """The numeric part of a version as an engine reports it ("0.11.0", "v3.3.4", "1.1.0rc2"),
    or None when it starts with no number: an unreadable version is treated as not given."""
    if not isinstance(text, str):
        return None
    match = _VERSION.match(text.strip())
    if not match:
        return None
    return tuple(int(part) for part in match.groups(default="0"))


def version_text(version: Version) -> str:
    return ".".join(str(part) for part in version)


@dataclass(frozen=True)
class Engine:
    id: str
    title: str
    versions: tuple[Version, ...]      # the versions whose argument names were read, oldest first
    command: str                       # how a server is started, before the model
    source: str
    notes: tuple[str, ...] = ()        # what holds for every setting of the engine

    @property
    def latest(self) -> Version:
        return self.versions[-1]


@dataclass(frozen=True)
class Entry:
    engine: str
    strategy: str
    slot: str                          # entries sharing (engine, strategy, slot) are alternatives
    kind: Kind
    source: str
    set: str = ""                      # the line, with {value} placeholders; a note's text
    variant: str | None = None
    when: tuple[tuple[str, Any], ...] = ()
    param: str | None = None
    value: str | None = None           # a computation of engine/advice/settings.py
    min: Version | None = None
    max: Version | None = None
    unchanged: tuple[tuple[str, Any], ...] = ()
    needs: tuple[str, ...] = ()

    def holds_at(self, version: Version) -> bool:
        return (self.min is None or version >= self.min) and (self.max is None or version <= self.max)

    @property
    def name(self) -> str:
        """The argument the line sets: a flag, a dotted YAML key or an environment variable."""
        if self.kind == "cli":
            return self.set.split()[0]
        if self.kind == "yaml":
            return self.set.split(":", 1)[0].strip()
        if self.kind == "env":
            return self.set.split("=", 1)[0]
        return ""

    def range_text(self) -> str:
        low = f">= {version_text(self.min)}" if self.min else ""
        high = f"<= {version_text(self.max)}" if self.max else ""
        return ", ".join(part for part in (low, high) if part) or "all covered"


@dataclass(frozen=True)
class EngineCatalog:
    engines: dict[str, Engine]
    entries: tuple[Entry, ...]

    def for_strategy(self, engine: str, strategy: str) -> tuple[Entry, ...]:
        return self._by_strategy.get((engine, strategy), ())

    @cached_property
    def _by_strategy(self) -> dict[tuple[str, str], tuple[Entry, ...]]:
        """The entries by (engine, strategy), in file order: every advice asks for each strategy."""
        grouped: dict[tuple[str, str], list[Entry]] = {}
        for entry in self.entries:
            grouped.setdefault((entry.engine, entry.strategy), []).append(entry)
        return {key: tuple(entries) for key, entries in grouped.items()}


def _version(raw: object) -> Version | None:
    if raw is None:
        return None
    parsed = parse_version(str(raw))
    if parsed is None:
        raise ValueError(f"kb/engines.yaml: unreadable version {raw!r}")
    return parsed


def _entries(raw: dict[str, Any]) -> list[Entry]:
    engines = ENGINES if raw["engine"] == "all" else (raw["engine"],)
    if raw["kind"] not in KINDS:
        raise ValueError(f"kb/engines.yaml: kind {raw['kind']!r} of {raw['strategy']} is not one of {KINDS}")
    return [Entry(
        engine=engine, strategy=raw["strategy"], slot=str(raw.get("slot") or raw.get("param") or "-"),
        kind=raw["kind"], source=raw["source"], set=raw.get("set", ""), variant=raw.get("variant"),
        when=tuple(sorted((raw.get("when") or {}).items())), param=raw.get("param"), value=raw.get("value"),
        min=_version(raw.get("min")), max=_version(raw.get("max")),
        unchanged=tuple(sorted((raw.get("unchanged") or {}).items())), needs=tuple(raw.get("needs") or ()))
        for engine in engines]


def engine_catalog() -> EngineCatalog:
    """The built-in catalog, as the process's knowledge base holds it (from a cached pack, or read once)."""
    from kbopt.kb.knowledge import builtin_knowledge
    return builtin_knowledge().engines


@lru_cache(maxsize=1)
def load_engine_catalog() -> EngineCatalog:
    """kb/engines.yaml, read and parsed."""
    from kbopt.kb.yamlio import read_yaml
    raw = read_yaml(package_dir("kbopt.kb").joinpath("engines.yaml").read_text(encoding="utf-8"))
    engines = {}
    for engine_id, spec in raw["engines"].items():
        versions = tuple(v for v in (_version(text) for text in spec["versions"]) if v is not None)
        engines[engine_id] = Engine(engine_id, spec["title"], versions, spec["command"], spec["source"],
                                    tuple(spec.get("notes") or ()))
    entries = tuple(entry for item in raw["settings"] for entry in _entries(item))
    return EngineCatalog(engines, entries)
