"""Today's launch command (`kbopt advise --launch "vllm serve MODEL --tensor-parallel-size 4 ..."`),
read with the same engine profile the emitted script is checked against.

The flags a profile's `deployment` entries carry become the serving.* facts they stand for; every
flag, modelled or not, is kept in order with its text, so that the emitted script relaunches
today's server flag for flag before the advice changes anything. A flag close to one the profile
knows, or one the engine lacks at the version, is refused with the engine's own message.
"""
from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbopt.engine.advice.settings import clean
from kbopt.errors import KboptError
from kbopt.kb.engines import ENGINES, Carry, Engine, Read, Version, parse_version, version_text
from kbopt.kb.knowledge import engine_catalog

MAX_COMMAND = 100_000        # characters: a launch command, not a file of anything


@dataclass(frozen=True)
class Command:
    """A launch command as the engine would read it."""
    engine: str
    model: str | None
    args: tuple[tuple[str, str | None], ...]      # every flag (or VAR for an environment assignment), in order
    env: tuple[tuple[str, str], ...] = ()
    modelled: frozenset[str] = frozenset()         # the flags the profile knows; the rest are carried as given
    facts: tuple[tuple[str, Any], ...] = ()        # the serving.* (and model, workload.engine) facts they state
    yaml_keys: frozenset[str] = frozenset()        # args read from today's TensorRT-LLM options file (dotted keys)
    several: frozenset[str] = frozenset()          # unmodelled flags given several words: the value is them shell-quoted
    # serving.* facts a flag of the profile states, whose flag the command leaves out: the engine runs
    # them at its defaults, whatever a facts file says (fact, flag, the default where the profile knows it)
    defaults: tuple[tuple[str, str, Any], ...] = ()

    @property
    def unmodelled(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.args if name not in self.modelled)

    def overrides(self) -> list[str]:
        """The facts as --set overrides (PATH=VALUE, the value JSON, which YAML reads back as it is)."""
        return [f"{path}={json.dumps(value)}" for path, value in self.facts]


def read_command(text: str, version: str | None = None) -> Command:
    """`text` (or @FILE: the command in a file) as a Command; a one-paragraph error naming what is wrong."""
    base: Path | None = None                   # where a relative options file is looked for first
    if text.startswith("@"):
        base = Path(text[1:]).parent
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise KboptError(f"--launch {text}: cannot read the file ({error.__class__.__name__}: {clean(error)})") from None
    if len(text) > MAX_COMMAND:
        raise KboptError(f"--launch: {len(text):,} characters is not a launch command (at most {MAX_COMMAND:,})")
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        raise KboptError(f"--launch: not a shell command line ({error})") from None
    while words and words[0] in ("exec", "env"):
        words = words[1:]
    env: list[tuple[str, str]] = []
    while words and "=" in words[0] and not words[0].startswith("-") and words[0].split("=", 1)[0].isidentifier():
        variable, assigned = words.pop(0).split("=", 1)
        env.append((variable, assigned))
    spec, rest = _engine(words)
    given = parse_version(version) if version else None
    at = given if given is not None and spec.floor is not None and given >= spec.floor else spec.latest
    if given is not None and given not in spec.versions and spec.floor is not None and given >= spec.floor:
        at = spec.nearest(given)
    model: str | None = None
    args: list[tuple[str, str | None]] = [(name, value) for name, value in env]
    modelled = {name for name, _ in env if spec.by_name.get(name) is not None}
    several: set[str] = set()                  # flags given several words (kept shell-quoted, one value)
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if not word.startswith("-"):
            if model is None:
                model = word
                continue
            raise KboptError(f"--launch: {spec.unknown_flag.format(flag=word)} (a second positional argument after the "
                             f"model {model!r})")
        name, eq, inline = word.partition("=")
        flag = spec.by_name.get(name)
        if flag is None and spec.abbreviations and name.startswith("--") and len(name) > 3:
            # argparse reads a unique prefix as the option it starts (SGLang's docs write --tp for
            # --tp-size): one the profile's flags make unique is read so (set 17 d4: --tp 8 carried as
            # unknown beside a new --tp-size); the engine's parser knows more options than the profile,
            # so a prefix it would find ambiguous is still refused there, as the engine would
            starting = {f.name: f for n, f in spec.by_name.items() if n.startswith(name) and n.startswith("--")}
            if len(starting) == 1:
                flag = next(iter(starting.values()))
        if flag is not None:
            name = flag.name            # an alias (vLLM -tp, SGLang --ep-size) is read, and relaunched, as the flag
        if name in spec.model_flags:
            if not eq and i >= len(rest):
                raise KboptError(f"--launch: {name} needs the model id after it")
            model = inline if eq else rest[i]
            i += 0 if eq else 1
            continue
        if flag is None or not flag.holds_at(at):
            close = difflib.get_close_matches(name, [f.name for f in spec.flags if f.kind == "cli"], n=1, cutoff=0.85)
            if flag is not None or close:
                hint = (f"; {name} holds for {spec.title} from {version_text(flag.min)}" if flag is not None and flag.min
                        else f" (did you mean {close[0]}?)" if close else "")
                raise KboptError(f"--launch: {spec.unknown_flag.format(flag=name)}{hint}; {spec.title} "
                                 f"{version_text(at)} would not start")
            # not modelled: carried as given; the following words that are no option are its values
            # (SGLang --lora-paths and vLLM --lora-modules take several: nargs), once the model is known
            value: str | None = inline if eq else None
            if not eq and i < len(rest) and not rest[i].startswith("-"):
                words = [rest[i]]
                i += 1
                while (model is not None or spec.model == "option") and i < len(rest) and not rest[i].startswith("-"):
                    words.append(rest[i])
                    i += 1
                value = words[0] if len(words) == 1 else shlex.join(words)
                if len(words) > 1:
                    several.add(name)
            args.append((name, value))
            continue
        if flag.type == "flag":
            if eq:
                raise KboptError(f"--launch: {name} is a switch and takes no value (got {inline!r})")
            args.append((name, None))
        else:
            if not eq and (i >= len(rest) or (flag.several and rest[i].startswith("-"))):
                raise KboptError(f"--launch: {name} needs a value ({flag.type})")
            value = inline if eq else rest[i]
            i += 0 if eq else 1
            if flag.several and not eq:        # argparse nargs: the words up to the next option
                words = [value]
                while i < len(rest) and not rest[i].startswith("-"):
                    words.append(rest[i])
                    i += 1
                if len(words) > 1:
                    value = shlex.join(words)
                    several.add(name)
            problem = flag.problem(value)
            if problem:
                raise KboptError(f"--launch: {problem}")
            args.append((name, value))
        modelled.add(name)
    args, yaml_keys = _options_file(spec, args, base, at)
    modelled |= {name for name in yaml_keys if spec.by_name.get(name) is not None}
    names = [name for name, _ in args]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated and spec.id == "tgi":
        raise KboptError(f"--launch: {repeated[0]} is given more than once: TGI's launcher refuses a repeated argument")
    if repeated:
        raise KboptError(f"--launch: {repeated[0]} is given more than once ({spec.title} keeps one of them silently): "
                         "give each flag once, with the value the server should run with")
    facts = _facts(spec, args, model, several)
    return Command(spec.id, model, tuple(args), tuple(env), frozenset(modelled), tuple(facts), frozenset(yaml_keys),
                   frozenset(several), _left_at_defaults(spec, args, dict(facts), at))


# Facts a flag states that its absence does not settle: vLLM and SGLang read a checkpoint's own
# quantization without --quantization; a block size read from the startup log with the block count
# is the default's own value (M-KV-POOL-MEASURED reads the two together); where the server listens
# is not the advice's concern.
_NOT_BY_ABSENCE = frozenset({"serving.quantization", "serving.kv_block_size", "serving.port", "serving.host",
                             "serving.served_model_name"})


def _left_at_defaults(spec: Engine, args: list[tuple[str, str | None]], stated: dict[str, Any], at: Version
                      ) -> tuple[tuple[str, str, Any], ...]:
    """The serving facts the profile's flags state that the command does not give: the engine's
    defaults hold for them, and a facts file's values for them are not what runs. A flag the
    engine does not have at the command's version settles nothing (vLLM before 0.12 spans nodes
    through Ray, with no --nnodes: set 27 d4)."""
    given = {name for name, _ in args}
    out: dict[str, tuple[str, Any]] = {}
    for fact, flag, default in [*((carry.fact, carry.name, carry.default) for carry in spec.deployment),
                                *((read.fact, read.flag, None) for read in spec.reads)]:
        known = spec.by_name.get(flag)
        if known is not None and not known.holds_at(at):
            continue
        if fact.startswith("serving.") and fact not in _NOT_BY_ABSENCE and fact not in stated and flag not in given:
            out.setdefault(fact, (flag, default))
    return tuple((fact, flag, default) for fact, (flag, default) in sorted(out.items()))


OPTIONS_FILES = ("--extra_llm_api_options", "--config")   # TensorRT-LLM's YAML of LLM API options (serve.py)
MAX_OPTIONS_FILE = 1_000_000                                  # bytes: a few dozen keys, not a data file
MAX_DEPTH = 8                                                 # option sections nest two or three levels
MAX_KEYS = 2_000                                              # keys in all: YAML anchors can repeat a section without bound
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/+-]+\Z")               # a YAML scalar that reads back as the same string


def _options_file(spec: Engine, args: list[tuple[str, str | None]], base: Path | None, at: Any
                  ) -> tuple[list[tuple[str, str | None]], set[str]]:
    """TensorRT-LLM takes most settings from a YAML file (--extra_llm_api_options): where today's
    command names one that kbopt can read, its keys take the option's place as dotted keys
    (kv_cache_config.free_gpu_memory_fraction), the profile's checked and read as facts, the others
    carried as given; the emitted script writes them back into its own file. One it cannot read
    (not on this machine) stays an option, and the script says to copy its keys."""
    if spec.id != "trtllm":
        return args, set()
    out: list[tuple[str, str | None]] = []
    keys: set[str] = set()
    for name, value in args:
        path = _found(value, base) if name in OPTIONS_FILES and value else None
        if path is None:
            out.append((name, value))
            continue
        for key, text in _flat(_yaml_mapping(path), "", spec, str(path), [0]):
            flag = spec.flag_at(key, at)
            problem = flag.problem(text) if flag is not None else None
            if problem:
                raise KboptError(f"--launch: {path}: {problem}")
            out.append((key, text))
            keys.add(key)
    return out, keys


def _found(value: str, base: Path | None) -> Path | None:
    path = Path(value)
    for candidate in ([path] if path.is_absolute() else [*([base / path] if base is not None else []), path]):
        if candidate.is_file():
            return candidate
    return None


def _yaml_mapping(path: Path) -> dict[Any, Any]:
    import yaml  # here: only a TensorRT-LLM command with an options file needs it
    try:
        if path.stat().st_size > MAX_OPTIONS_FILE:
            raise KboptError(f"--launch: {path}: {path.stat().st_size:,} bytes is not an options file (at most {MAX_OPTIONS_FILE:,})")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise KboptError(f"--launch: {path}: cannot read the options file ({error.__class__.__name__}: {clean(error)})") from None
    except RecursionError:
        raise KboptError(f"--launch: {path}: nested too deep to be TensorRT-LLM's options file") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise KboptError(f"--launch: {where}: not valid YAML ({clean(getattr(error, 'problem', None) or error)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KboptError(f"--launch: {path}: TensorRT-LLM's options file is a mapping of option names, not a {type(data).__name__}")
    return data


def _flat(node: dict[Any, Any], prefix: str, spec: Engine, where: str, seen: list[int]) -> list[tuple[str, str]]:
    """A nested mapping as dotted keys and YAML values: a mapping is descended unless the profile
    takes it whole (speculative_config) and nothing below it. `seen` counts the keys read so far:
    anchors and aliases can make a small file name billions of them."""
    out: list[tuple[str, str]] = []
    for key, value in node.items():
        seen[0] += 1
        if seen[0] > MAX_KEYS:
            raise KboptError(f"--launch: {where}: more than {MAX_KEYS:,} keys is not TensorRT-LLM's options file")
        if not isinstance(key, str) or not _KEY.match(key):
            raise KboptError(f"--launch: {where}: {prefix}{clean(str(key))!r} is not an option name (letters, digits and _)")
        name = prefix + key
        if name.count(".") > MAX_DEPTH:
            raise KboptError(f"--launch: {where}: {clean(name[:80])}: nested deeper than any TensorRT-LLM option ({MAX_DEPTH} levels)")
        whole = name in spec.by_name and not any(f.name.startswith(name + ".") for f in spec.flags)
        if isinstance(value, dict) and value and not whole:
            out += _flat(value, name + ".", spec, where, seen)
        else:
            out.append((name, _yaml_text(value)))
    return out


def _yaml_text(value: Any) -> str:
    """A value as one line of YAML that reads back the same: JSON (a subset of YAML) where a plain
    scalar would not, so a string from the file cannot add lines or keys to the script's file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str) and _PLAIN.match(value) and value not in ("true", "false", "null", "yes", "no", "on", "off", "~"):
        return value
    try:
        return json.dumps(value, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return json.dumps(str(value))


def _engine(words: list[str]) -> tuple[Engine, list[str]]:
    catalog = engine_catalog()
    for engine in ENGINES:
        spec = catalog.engines[engine]
        for start in sorted(spec.invoked_as, key=lambda s: -len(s.split())):
            prefix = start.split()
            head = [Path(words[0]).name, *words[1:len(prefix)]] if words else []
            if head == prefix:
                return spec, words[len(prefix):]
    shown = " ".join(words[:3]) or "(nothing)"
    starts = "; ".join(s for e in ENGINES for s in catalog.engines[e].invoked_as)
    # a file's name given without its @ (set 34's reviewers, twice): say so
    try:
        a_file = len(words) == 1 and Path(words[0]).is_file()
    except (OSError, ValueError):        # a word no path can be (a NUL, too long a name)
        a_file = False
    raise KboptError(f"--launch: {clean(shown)!r} is not the launch command of an engine kbopt has a profile for "
                     f"(a command starts with one of: {starts})"
                     + (f"; to read the command from that file, write --launch @{clean(words[0])}" if a_file else ""))


def _facts(spec: Engine, args: list[tuple[str, str | None]], model: str | None,
           several: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, Any]]:
    """The facts the modelled flags state, through the profile's deployment entries read backwards."""
    out: dict[str, Any] = {"workload.engine": spec.id, **dict(spec.states)}
    if model is not None:
        out["model.name"] = model
    given = dict(args)
    for carry in spec.deployment:
        name = carry.name
        if name not in given:
            continue
        fact = _fact(spec, carry, given[name])
        if fact is not None:
            out.setdefault(carry.fact, fact)
    for read in spec.reads:
        if read.flag in given and (read.without is None or read.without not in given):
            value = _read_value(spec, read, given[read.flag], given, read.flag in several)
            if value is not None:
                out.setdefault(read.fact, value)
    totals = spec.rank_totals
    if totals is not None and totals.switch in given and str(given.get(totals.size)).isdigit():
        ranks = int(str(given[totals.size]))      # a per-GPU fact from the total the engine divides (kb/engines.py RankTotals)
        for carry in spec.deployment:
            if carry.name in totals.flags and isinstance(out.get(carry.fact), int) and ranks > 1:
                out[carry.fact] = max(1, out[carry.fact] // ranks)
    return sorted(out.items())


def _read_value(spec: Engine, read: Read, raw: str | None, given: dict[str, str | None], joined: bool = False) -> Any:
    """A profile's `reads` entry's fact from the flag's text; None: the flag does not state it."""
    parsed: Any = None
    if read.key is not None or any(not key.startswith("-") for key, _ in read.where):
        try:
            parsed = json.loads(raw or "")
        except ValueError:
            return None                        # the flag's own check names a malformed value
        if not isinstance(parsed, dict):
            return None
    for key, values in read.where:
        held = given.get(key) if key.startswith("-") else parsed.get(key)
        if str(held) not in values:
            return None
    if read.constant is not None:
        return read.constant
    value: Any = raw if read.key is None else parsed.get(read.key)
    if read.count:                             # SGLang's --lora-paths a=x b=y: how many (one word, quoted or not, is one)
        return (len(shlex.split(raw or "")) if joined else 1) if raw else None
    if read.largest:                           # TGI's --cuda-graphs 1,2,4,8,16,32: the largest batch it captures
        sizes = [part.strip() for part in str(raw or "").split(",")]
        largest = max(int(part) for part in sizes) if sizes and all(p.isdigit() and len(p) <= 6 for p in sizes) else 0
        return largest or None                 # the engine drops the zeros: `0` alone is graphs off
    if read.key is None and raw is not None and spec.by_name[read.flag].type == "int":
        value = int(raw)
    if read.mapping:
        return dict(read.mapping).get(str(value))
    return value


def _fact(spec: Engine, carry: Carry, raw: str | None) -> Any:
    template = carry.set.split("=", 1)[1] if carry.kind == "env" else carry.set.split(None, 1)[1] if " " in carry.set else None
    if template is None:                       # a switch: present means the `when` value
        return carry.when
    if "{value}" not in template:              # a fixed value (`--kv-cache-dtype fp8`): this value means `when`
        return carry.when if raw == template.strip() else None
    if carry.value == "expert_size":
        return True
    if carry.mapping:
        back = {engine_value: fact for fact, engine_value in carry.mapping}
        return back.get(str(raw))
    flag = spec.by_name[carry.name]
    if raw is None:
        return None
    if flag.type == "int":
        return int(raw)
    if flag.type == "float":
        return float(raw)
    if flag.type == "bool":
        return raw == "true"
    return raw
