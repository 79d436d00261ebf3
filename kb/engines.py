"""The engine profiles (kb/engines/<engine>.yaml) as typed, frozen values.

One file per serving engine holds what kbopt knows of it: the versions whose arguments were read,
each flag (or YAML key, or environment variable) with its value type and the versions that have
it, the combinations the engine refuses, the facts that describe today's server and the setting
that carries each, and how each strategy and its parameters are set. engine/advice/settings.py
turns the entries into the lines of advice, engine/advice/launch.py into a whole launch command,
and every line either writes is checked here against the profile at the deployment's version.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Literal

from kbopt.kb.packaged import package_dir, read_knowledge_yaml

Kind = Literal["cli", "yaml", "env", "note"]
KINDS: tuple[Kind, ...] = ("cli", "yaml", "env", "note")
ENGINES = ("vllm", "sglang", "trtllm", "tgi")        # the order every report lists them in
VENDORS = ("nvidia", "amd")                          # GPU makers (hardware.vendor, kb/gpus.yaml `vendor`)
TYPES = ("int", "float", "str", "flag", "bool", "json", "choice")
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


def _in_range(version: Version, low: Version | None, high: Version | None) -> bool:
    return (low is None or version >= low) and (high is None or version <= high)


def _range_text(low: Version | None, high: Version | None) -> str:
    parts = ([f">= {version_text(low)}"] if low else []) + ([f"<= {version_text(high)}"] if high else [])
    return ", ".join(parts) or "all covered"


@dataclass(frozen=True)
class Flag:
    """One argument of the engine: a command-line flag, a key of TensorRT-LLM's YAML file, or an
    environment variable (TGI's PREFIX_CACHING), with its value type and the versions that have it."""
    name: str
    type: str                          # int | float | str | flag (a bare switch) | bool | json | choice
    source: str                        # file@version[:line] where it was read
    choices: tuple[str, ...] = ()
    min: Version | None = None
    max: Version | None = None
    at_least: float | None = None
    at_most: float | None = None
    note: str = ""                     # what a user relaunching with it should know (e.g. where the engine ignores it)
    aliases: tuple[str, ...] = ()      # other spellings the engine's parser takes (vLLM -tp, SGLang --ep-size)
    several: bool = False              # takes several words (argparse nargs): SGLang --lora-paths a=x b=y

    @property
    def kind(self) -> Kind:
        if self.name.startswith("-"):
            return "cli"
        return "env" if self.name.isupper() else "yaml"

    def holds_at(self, version: Version) -> bool:
        return _in_range(version, self.min, self.max)

    def range_text(self) -> str:
        return _range_text(self.min, self.max)

    def problem(self, value: str | None) -> str | None:
        """Why `value` (as the engine would read it; None for a bare switch) is not a value of
        this flag, or None when it is."""
        if self.type == "flag":
            return None if value is None else f"{self.name} is a switch and takes no value (got {value!r})"
        if value is None:
            return f"{self.name} needs a value ({self.type})"
        number: float | None = None
        if self.type == "int":
            if not re.fullmatch(r"-?\d+", value):
                return f"{self.name} takes an integer, not {value!r}"
            number = int(value)
        elif self.type == "float":
            try:
                number = float(value)
            except ValueError:
                return f"{self.name} takes a number, not {value!r}"
        elif self.type == "bool" and value not in ("true", "false"):
            return f"{self.name} takes true or false, not {value!r}"
        elif self.type == "json":
            try:
                json.loads(value)
            except ValueError:
                return f"{self.name} takes JSON, not {value!r}"
        elif self.type == "choice" and value not in self.choices:
            return f"{self.name} takes one of {', '.join(self.choices)}, not {value!r}"
        if number is not None and ((self.at_least is not None and number < self.at_least)
                                   or (self.at_most is not None and number > self.at_most)):
            low = "" if self.at_least is None else f" >= {self.at_least:g}"
            high = "" if self.at_most is None else f" <= {self.at_most:g}"
            return f"{self.name} takes a value{low}{' and' if low and high else ''}{high}, not {value}"
        return None


@dataclass(frozen=True)
class Refusal:
    """A setting, or a combination, the engine refuses at start (or ignores: `noop`)."""
    flag: str
    why: str
    source: str
    above: float | None = None         # a number above this is refused
    at_most: float | None = None       # a number at or below this is refused
    values: tuple[str, ...] = ()       # these values are refused
    json_values: tuple[tuple[str, tuple[str, ...]], ...] = ()   # these values of a key inside a JSON value
    without: str | None = None         # refused unless this flag is set too
    beside: str | None = None          # refused when this flag is set too (with below_flag or values: only then)
    below_flag: str | None = None      # a number below this other flag's value is refused
    noop: bool = False                 # accepted, changes nothing: never emitted
    min: Version | None = None
    max: Version | None = None

    def range_text(self) -> str:
        return _range_text(self.min, self.max)

    def refuses(self, value: str | None, given: Mapping[str, str | None]) -> bool:
        """Whether the flag given `value`, beside the flags `given` (name -> value), is what this
        refusal names."""
        if self.noop:
            return True
        if self.without is not None:
            return self.without not in given
        if self.below_flag is not None:
            if self.below_flag not in given or (self.beside is not None and self.beside not in given):
                return False
            try:
                return float(value or "") < float(given[self.below_flag] or "")
            except ValueError:
                return False
        if self.beside is not None:
            return self.beside in given and (not self.values or value in self.values)
        if self.values:
            return value in self.values
        if self.json_values:
            try:
                parsed = json.loads(value or "")
            except ValueError:
                return False
            return isinstance(parsed, dict) and any(parsed.get(key) in refused for key, refused in self.json_values)
        try:
            number = float(value or "")
        except ValueError:
            return False
        return (self.above is not None and number > self.above) or (self.at_most is not None and number <= self.at_most)


@dataclass(frozen=True)
class Together:
    """Two strategies the catalog keeps apart (kb/strategies.yaml `excludes`) that the engine runs
    together at these versions, the second in one of `variants` (all where empty)."""
    first: str
    second: str
    variants: tuple[str, ...]
    source: str
    min: Version | None = None
    max: Version | None = None

    def range_text(self) -> str:
        return _range_text(self.min, self.max)

    def allows(self, a: tuple[str, str | None], b: tuple[str, str | None], version: Version) -> bool:
        """Whether strategies `a` and `b` (strategy, variant), in either order, run together at `version`."""
        if not _in_range(version, self.min, self.max):
            return False
        for first, second in ((a, b), (b, a)):
            if first[0] == self.first and second[0] == self.second and (not self.variants or second[1] in self.variants):
                return True
        return False


@dataclass(frozen=True)
class Carry:
    """A fact describing today's server and the setting that carries it into a launch command."""
    fact: str
    set: str                           # the line, {value} the fact's value (or its mapped value)
    kind: Kind = "cli"
    when: Any = None                   # only for this value of the fact (None: any)
    mapping: tuple[tuple[str, str], ...] = ()   # the fact's enum values -> the engine's spelling
    value: str | None = None           # a computation of engine/advice/launch.py (expert_size)
    deployed_only: bool = False        # only when the facts are this engine's own settings
    # the engine's value where the command leaves the flag out: a facts file that states it is not
    # set aside as a value the command overrides (TP 1; TGI's --num-shard takes every GPU it sees)
    default: Any = None

    @property
    def name(self) -> str:
        return _line_name(self.kind, self.set)


@dataclass(frozen=True)
class Read:
    """A fact today's launch command states through a flag no deployment entry carries: the
    strategy's own setting writes that flag (speculative decoding), so the emitted script needs no
    entry, but the advice must know what runs today (kbopt advise --launch)."""
    flag: str
    fact: str
    key: str | None = None             # a key inside the flag's JSON value (vLLM --speculative-config)
    mapping: tuple[tuple[str, Any], ...] = ()   # the engine's spelling -> the fact's value
    constant: Any = None               # the fact's value whenever the flag is given
    without: str | None = None         # only when this other flag is not given
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()   # only when these keys of the JSON value, or
                                       # these other flags (a name starting with -), hold one of the values
    largest: bool = False              # the flag is a comma-separated list of whole numbers: the fact is the largest
    count: bool = False                # the flag takes several words: the fact is how many (SGLang --lora-paths)


@dataclass(frozen=True)
class RankTotals:
    """Flags the engine reads as a total over its data-parallel attention ranks and divides among
    them, where kbopt's facts and parameters are per GPU (serving.dp_attention)."""
    switch: str                        # the flag that turns data-parallel attention on
    size: str                          # the flag that gives the number of ranks
    flags: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class CapDefault:
    """An engine's default for a flag on a class of GPU: the first whose GPU matches holds."""
    value: int
    min_gpu_gib: float = 0.0           # the GPU has at least this much memory
    except_gpu: str = ""               # and its name does not hold this (lower case)


@dataclass(frozen=True)
class Bound:
    """A flag the engine refuses above another flag's value (vLLM's max_num_seqs above its token
    budget). Where the script's budget is below the cap the server would run, the one set or the
    engine's default on that GPU, the cap comes down to the budget, saying why."""
    flag: str                          # the flag bounded: --max-num-seqs
    at_most: str                       # the flag whose value bounds it: --max-num-batched-tokens
    defaults: tuple[CapDefault, ...]   # the bounded flag's default by GPU, first match
    why: str
    source: str

    def default_on(self, gpu_name: str, gpu_gib: float | None) -> int | None:
        for default in self.defaults:
            if (gpu_gib is None and default.min_gpu_gib > 0) or (gpu_gib is not None and gpu_gib < default.min_gpu_gib):
                continue
            if default.except_gpu and default.except_gpu in gpu_name.lower():
                continue
            return default.value
        return None


@dataclass(frozen=True)
class ImpliedCap:
    """A cap the engine lowers by itself when another flag is set and the cap is not (SGLang runs 48
    requests under EAGLE speculation): a script that sets `when` sets the cap too, at the running
    batch the advice's estimates assume."""
    flag: str                          # the cap: --max-running-requests
    when: str                          # the flag that brings the engine's own lower cap: --speculative-algorithm
    value: int                         # the cap the engine then runs
    source: str


@dataclass(frozen=True)
class SectionOverride:
    """An options-file section that replaces the one the command line builds, with the command-line
    setting that goes into it (TensorRT-LLM: a YAML kv_cache_config drops --kv_cache_free_gpu_memory_fraction)."""
    section: str                       # kv_cache_config
    flag: str                          # --kv_cache_free_gpu_memory_fraction
    key: str                           # kv_cache_config.free_gpu_memory_fraction
    source: str


@dataclass(frozen=True)
class PromptLimit:
    """A prompt longer than the step's token budget is refused unless chunked prefill is on
    (TensorRT-LLM's PyTorch backend): a script whose budget is under the workload's long prompts
    turns chunking on, at that budget."""
    budget: str                        # the budget's flag: --max_num_tokens
    default: int                       # its default when unset
    chunking: str                      # the setting that lifts the limit (a YAML key): enable_chunked_prefill
    source: str


@dataclass(frozen=True)
class Checkpoints:
    """What quantized weights the engine loads: whether it quantizes 16-bit weights to FP8 as it
    loads, and the checkpoint formats it cannot read, with what it reads instead and how to make one."""
    online_fp8: bool = True
    unread: tuple[str, ...] = ()       # serving.quantization values whose checkpoints it does not read
    reads: str = ""                    # what it reads instead
    make: str = ""                     # how to make a checkpoint it reads
    source: str = ""


@dataclass(frozen=True)
class Engine:
    id: str
    title: str
    versions: tuple[Version, ...]      # the versions whose argument names were read, oldest first
    command: str                       # how a server is started, before the model
    source: str
    notes: tuple[str, ...] = ()        # what holds for every setting of the engine
    floor: Version | None = None       # the oldest version any setting is known to hold at
    model: str = "positional"          # positional: the model is an argument; option: the command ends in its flag
    flags: tuple[Flag, ...] = ()
    refuses: tuple[Refusal, ...] = ()
    deployment: tuple[Carry, ...] = ()
    reads: tuple[Read, ...] = ()       # facts read from today's command only (a strategy's setting writes the flag)
    invoked_as: tuple[str, ...] = ()   # how a launch command of this engine starts (kbopt advise --launch)
    model_flags: tuple[str, ...] = ()  # options that name the model besides the positional
    unknown_flag: str = "unrecognized argument {flag}"   # the engine's own message for an argument it lacks
    abbreviations: bool = False        # its parser takes a unique prefix of a long option (Python's argparse)
    vendors: tuple[str, ...] = VENDORS   # the GPU makers it runs on (hardware.vendor)
    rank_totals: RankTotals | None = None
    bounds: tuple[Bound, ...] = ()
    implied_caps: tuple[ImpliedCap, ...] = ()
    prompt_limit: PromptLimit | None = None
    checkpoints: Checkpoints = Checkpoints()
    # facts any server of the engine has, stated by a launch command of it whatever the facts file
    # says (every covered engine batches continuously: a facts file's "static" is not this server)
    states: tuple[tuple[str, Any], ...] = ()
    section_overrides: tuple[SectionOverride, ...] = ()
    together: tuple[Together, ...] = ()

    @property
    def latest(self) -> Version:
        return self.versions[-1]

    @cached_property
    def by_name(self) -> dict[str, Flag]:
        """Each flag by its name and by every alias (a lookup by alias gives the flag, whose
        `name` is the spelling kbopt writes)."""
        return {name: flag for flag in self.flags for name in (flag.name, *flag.aliases)}

    def nearest(self, version: Version) -> Version:
        """The covered version nearest `version` (the later of two as near; compared by release order)."""
        return min(self.versions, key=lambda known: (_distance(known, version), -self.versions.index(known)))

    def flag_at(self, name: str, version: Version) -> Flag | None:
        flag = self.by_name.get(name)
        return flag if flag is not None and flag.holds_at(version) else None

    def problems(self, version: Version, args: list[tuple[str, str | None]]) -> list[str]:
        """What the engine at `version` would refuse in `args` (name, value: None for a switch, in
        order): an unknown name, a value of the wrong type, a flag given twice, a refused
        combination. Empty when it would start."""
        out: list[str] = []
        given = dict(args)
        seen: set[str] = set()
        for name, value in args:
            if name in seen:
                out.append(f"{name} is given more than once")
            seen.add(name)
            flag = self.by_name.get(name)
            if flag is None:
                out.append(f"{name} is not an argument of {self.title}")
                continue
            if not flag.holds_at(version):
                out.append(f"{name} holds for {self.title} {_range_text(flag.min, flag.max)}, not {version_text(version)}")
            problem = flag.problem(value)
            if problem:
                out.append(problem)
            for refusal in self.refuses:
                if refusal.flag == name and _in_range(version, refusal.min, refusal.max) and refusal.refuses(value, given):
                    out.append(f"{name}{'' if value is None else ' ' + value}: {refusal.why}")
        for bound in self.bounds:
            capped, limit = given.get(bound.flag), given.get(bound.at_most)
            if capped is not None and limit is not None and capped.isdigit() and limit.isdigit() and int(capped) > int(limit):
                out.append(f"{bound.flag} {capped} above {bound.at_most} {limit}: {bound.why}")
        return out


def _distance(a: Version, b: Version) -> int:
    """How far apart two versions are in release order (major, minor and patch as digits of one number)."""
    def order(v: Version) -> int:
        padded = (v + (0, 0, 0))[:3]
        return padded[0] * 10**8 + padded[1] * 10**4 + padded[2]
    return abs(order(a) - order(b))


def _line_name(kind: str, line: str) -> str:
    if kind == "cli":
        return line.split()[0]
    if kind == "yaml":
        return line.split(":", 1)[0].strip()
    if kind == "env":
        return line.split("=", 1)[0]
    return ""


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
    removes: tuple[str, ...] = ()      # flags of today's server this setting replaces (--no-enable-prefix-caching)
    # given beside the checkpoint the change needs, where the engine's own reading of that checkpoint
    # picks a kernel the GPU cannot run (SGLang's compressed-tensors INT8 needs sm89)
    with_checkpoint: bool = False

    def holds_at(self, version: Version) -> bool:
        return _in_range(version, self.min, self.max)

    @property
    def name(self) -> str:
        """The argument the line sets: a flag, a dotted YAML key or an environment variable."""
        return _line_name(self.kind, self.set)

    @property
    def names(self) -> tuple[str, ...]:
        """Every argument the line sets (a command-line line may set several flags)."""
        if self.kind == "cli":
            return tuple(word for word in self.set.split() if word.startswith("--"))
        return (self.name,) if self.name else ()

    def range_text(self) -> str:
        return _range_text(self.min, self.max)


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


def _version(raw: object, where: str) -> Version | None:
    if raw is None:
        return None
    parsed = parse_version(str(raw))
    if parsed is None:
        raise ValueError(f"{where}: unreadable version {raw!r}")
    return parsed


def _entry(engine: str, raw: dict[str, Any], where: str) -> Entry:
    if raw["kind"] not in KINDS:
        raise ValueError(f"{where}: kind {raw['kind']!r} of {raw['strategy']} is not one of {KINDS}")
    return Entry(
        engine=engine, strategy=raw["strategy"], slot=str(raw.get("slot") or raw.get("param") or "-"),
        kind=raw["kind"], source=raw["source"], set=raw.get("set", ""), variant=raw.get("variant"),
        when=tuple(sorted((raw.get("when") or {}).items())), param=raw.get("param"), value=raw.get("value"),
        min=_version(raw.get("min"), where), max=_version(raw.get("max"), where),
        unchanged=tuple(sorted((raw.get("unchanged") or {}).items())), needs=tuple(raw.get("needs") or ()),
        removes=tuple(raw.get("removes") or ()), with_checkpoint=bool(raw.get("with_checkpoint")))


def _flag(name: str, raw: dict[str, Any], where: str) -> Flag:
    if raw.get("type") not in TYPES:
        raise ValueError(f"{where}: flag {name}: type {raw.get('type')!r} is not one of {TYPES}")
    if (raw["type"] == "choice") != bool(raw.get("choices")):
        raise ValueError(f"{where}: flag {name}: `choices` go with type choice, and only with it")
    return Flag(name, raw["type"], str(raw["source"]), tuple(str(c) for c in raw.get("choices") or ()),
                _version(raw.get("min"), where), _version(raw.get("max"), where), raw.get("at_least"), raw.get("at_most"),
                str(raw.get("note") or ""), tuple(str(a) for a in raw.get("aliases") or ()), bool(raw.get("several")))


def _refusal(raw: dict[str, Any], where: str) -> Refusal:
    return Refusal(raw["flag"], raw["why"], raw["source"], raw.get("above"), raw.get("at_most"),
                   tuple(str(v) for v in raw.get("values") or ()),
                   tuple((key, tuple(values)) for key, values in sorted((raw.get("json_values") or {}).items())),
                   raw.get("without"), raw.get("beside"), raw.get("below_flag"), bool(raw.get("noop")), _version(raw.get("min"), where),
                   _version(raw.get("max"), where))


def _rank_totals(raw: dict[str, Any] | None) -> RankTotals | None:
    if raw is None:
        return None
    return RankTotals(raw["switch"], raw["size"], tuple(raw["flags"]), raw["source"])


def _bound(raw: dict[str, Any]) -> Bound:
    return Bound(raw["flag"], raw["at_most"], tuple(CapDefault(int(d["value"]), float(d.get("min_gpu_gib", 0)),
                                                               str(d.get("except_gpu", "")).lower())
                                                    for d in raw.get("defaults") or ()), raw["why"], raw["source"])


def _carry(raw: dict[str, Any]) -> Carry:
    mapping = raw.get("value")
    return Carry(raw["fact"], raw["set"], raw.get("kind", "cli"), raw.get("when"),
                 tuple(sorted(mapping.items())) if isinstance(mapping, dict) else (),
                 mapping if isinstance(mapping, str) else None, bool(raw.get("deployed_only")), raw.get("default"))


def _read(raw: dict[str, Any]) -> Read:
    mapping = raw.get("value")
    return Read(raw["flag"], raw["fact"], raw.get("key"), tuple(sorted(mapping.items())) if isinstance(mapping, dict) else (),
                raw.get("constant"), raw.get("without"),
                tuple((key, tuple(str(v) for v in values)) for key, values in sorted((raw.get("where") or {}).items())),
                bool(raw.get("largest")), bool(raw.get("count")))


def load_profile(engine_id: str, text: str) -> tuple[Engine, tuple[Entry, ...]]:
    """One engine's profile file, parsed and checked: every line its settings and deployment
    entries write names a flag of its table."""
    where = f"kb/engines/{engine_id}.yaml"
    raw = read_knowledge_yaml(text, where)
    if raw.get("engine") != engine_id:
        raise ValueError(f"{where}: `engine` says {raw.get('engine')!r}, the file name {engine_id!r}")
    versions = tuple(v for v in (_version(text, where) for text in raw["versions"]) if v is not None)
    flags = tuple(_flag(name, spec, where) for name, spec in (raw.get("flags") or {}).items())
    engine = Engine(engine_id, raw["title"], versions, raw["command"], raw["source"], tuple(raw.get("notes") or ()),
                    _version(raw.get("floor"), where), raw.get("model", "positional"), flags,
                    tuple(_refusal(item, where) for item in raw.get("refuses") or ()),
                    tuple(_carry(item) for item in raw.get("deployment") or ()),
                    tuple(_read(item) for item in raw.get("reads") or ()),
                    tuple(raw.get("invoked_as") or ()), tuple(raw.get("model_flags") or ()),
                    str(raw.get("unknown_flag") or "unrecognized argument {flag}"), bool(raw.get("abbreviations")),
                    tuple(raw.get("vendors") or VENDORS), _rank_totals(raw.get("dp_attention_totals")),
                    tuple(_bound(item) for item in raw.get("bounded") or ()),
                    tuple(ImpliedCap(item["flag"], item["when"], int(item["value"]), item["source"])
                          for item in raw.get("implied_caps") or ()),
                    PromptLimit(**raw["prompt_limit"]) if raw.get("prompt_limit") else None,
                    Checkpoints(**{**raw["checkpoints"], "unread": tuple(raw["checkpoints"].get("unread") or ())})
                    if raw.get("checkpoints") else Checkpoints(),
                    tuple(sorted((raw.get("states") or {}).items())),
                    tuple(SectionOverride(**item) for item in raw.get("section_overrides") or ()),
                    tuple(Together(item["strategies"][0], item["strategies"][1], tuple(item.get("variants") or ()),
                                   item["source"], _version(item.get("min"), where), _version(item.get("max"), where))
                          for item in raw.get("together") or ()))
    if not set(engine.vendors) <= set(VENDORS):
        raise ValueError(f"{where}: vendors {list(engine.vendors)} are not among {list(VENDORS)}")
    entries = tuple(_entry(engine_id, item, where) for item in raw.get("settings") or ())
    known = {flag.name for flag in flags}
    spellings = [name for flag in flags for name in (flag.name, *flag.aliases)]
    if len(spellings) != len(set(spellings)):
        raise ValueError(f"{where}: {sorted({n for n in spellings if spellings.count(n) > 1})[0]} names two flags (or one twice)")
    totals = engine.rank_totals
    for name in ([n for e in entries for n in (*e.names, *e.removes)] + [c.name for c in engine.deployment]
                 + [name for r in engine.reads for name in (r.flag, r.without, *(k for k, _ in r.where if k.startswith("-")))
                    if name is not None]
                 + ([totals.switch, totals.size, *totals.flags] if totals else [])
                 + [name for bound in engine.bounds for name in (bound.flag, bound.at_most)]
                 + [name for cap in engine.implied_caps for name in (cap.flag, cap.when)]
                 + ([engine.prompt_limit.budget, engine.prompt_limit.chunking] if engine.prompt_limit else [])
                 + [name for o in engine.section_overrides for name in (o.flag, o.key)]):
        if name not in known:
            raise ValueError(f"{where}: {name} is set but not in the profile's flags")
    return engine, entries


def profile_files() -> list[str]:
    """The profile files' names under kb/engines/, one per engine, in ENGINES order."""
    return [f"engines/{engine}.yaml" for engine in ENGINES]


@lru_cache(maxsize=1)
def load_engine_catalog() -> EngineCatalog:
    """kb/engines/*.yaml, read and parsed."""
    kb = package_dir("kbopt.kb")
    engines: dict[str, Engine] = {}
    entries: list[Entry] = []
    for engine_id in ENGINES:
        engine, own = load_profile(engine_id, kb.joinpath("engines", f"{engine_id}.yaml").read_text(encoding="utf-8"))
        engines[engine_id] = engine
        entries.extend(own)
    return EngineCatalog(engines, tuple(entries))
