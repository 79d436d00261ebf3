"""Facts v1: read a document, validate it against the vocabulary, flatten it, enrich it.

The only derivation done here is the documented catalog step: a known `hardware.gpu_name`
fills `hardware.compute_capability` and `hardware.memory_total_gib` when they are absent
(source `catalog:<gpu id>`, quality `catalog`). Everything else is derived by rules.
Each fact carries its provenance: from the document's `provenance` section (collectors write
it), else `input`/`set` with quality `user`.
"""
from __future__ import annotations

import collections
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from kbopt.errors import FactsError
from kbopt.kb.knowledge import builtin_knowledge
from kbopt.kb.provenance import SET, USER, Provenance
from kbopt.kb.schema import FACTS_FORMAT, facts_schema, plainly_valid
from kbopt.kb.vocabulary import QUALITY_PREFIX, Vocabulary

if TYPE_CHECKING:  # jsonschema itself is imported only once a document is at hand
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@dataclass(frozen=True)
class Facts:
    """Known input facts by dotted path, with where each value came from."""

    values: dict[str, Any]
    provenance: dict[str, Provenance] = field(default_factory=dict)

    def engine_values(self, vocabulary: Vocabulary | None = None) -> dict[str, Any]:
        """Values as the evaluators compare them: versions become numbers (8.9), and each fact's
        quality is readable as `quality.<path>`."""
        vocabulary = vocabulary or builtin_knowledge().vocabulary
        out: dict[str, Any] = {}
        for path, value in self.values.items():
            spec = vocabulary.get(path)
            out[path] = version_number(value) if spec and spec.type == "version" else value
            out[QUALITY_PREFIX + path] = self.provenance.get(path, USER).quality
        return out


def version_number(text: str) -> float:
    major, minor = text.split(".")
    return int(major) + int(minor) / 10  # minor is one digit (schema), so 8.9 < 9.0 < 10.0


# Bounds on what a facts document may hold (docs/usage.md, Limits). A real one is a few kilobytes; these
# keep a hostile one from costing minutes or gigabytes, and keep every number one both evaluators hold
# exactly: durable_rules' core saturates integers at 2^63 and compares in doubles, exact only to 2^53.
MAX_FACTS_BYTES = 1024 * 1024
MAX_DEPTH = 16
MAX_STRING = 10_000
MAX_EXACT_INT = 2 ** 53
MAX_SET_TEXT = 10_000
SHOWN = 5                   # schema errors (and unknown keys) said in full; the rest are counted


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):      # linear: 40,000 keys must not take key-count squared steps
        counts = collections.Counter(key for key, _ in pairs)
        duplicates = sorted(key for key, count in counts.items() if count > 1)
        raise ValueError(f"duplicate key {_clip(duplicates[0])!r}")
    return found


def _clip(text: str, limit: int = 80) -> str:
    """A value quoted in a message, cut short: a message is one paragraph, whatever the input."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def _has_surrogate(text: str) -> bool:
    # JSON may escape a lone surrogate ("\ud800"), and a command line's undecodable bytes arrive as
    # surrogates; neither can be written back out as UTF-8.
    return not text.isascii() and _SURROGATE.search(text) is not None


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_plain(document: Any, name: str) -> None:
    """Bounds every consumer relies on, checked without recursion before anything else reads the
    document: nesting depth, string lengths and encodability, integers within ±2^53, finite floats."""
    pending: list[tuple[Any, str, int]] = [(document, "$", 0)]
    while pending:
        value, where, depth = pending.pop()
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                raise FactsError(f"{name}: {where}: nested more than {MAX_DEPTH} levels deep; facts are section.name")
            for key, item in value.items():
                if not isinstance(key, str) or _has_surrogate(key) or len(key) > MAX_STRING:
                    raise FactsError(f"{name}: {where}: the key {_clip(ascii(key))} is not a name")
                pending.append((item, f"{where}.{key}", depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_DEPTH:
                raise FactsError(f"{name}: {where}: nested more than {MAX_DEPTH} levels deep; facts are section.name")
            pending.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            if len(value) > MAX_STRING:
                raise FactsError(f"{name}: {where}: a string of {len(value):,} characters; kbopt reads at most {MAX_STRING:,}")
            if _has_surrogate(value):
                raise FactsError(f"{name}: {where}: {_clip(ascii(value))} holds a lone surrogate, which is not text")
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) > MAX_EXACT_INT:
                # A float takes an integer up to about 1.8e308 (`:e` formats through one); past that, its digits.
                shown = (f"{value:.3e}" if abs(value) < 10 ** 300 else f"an integer of {len(str(abs(value))):,} digits"
                         if abs(value) < 10 ** 4000 else "an integer of over 4,000 digits")
                raise FactsError(f"{name}: {where}: {shown} is beyond ±2^53, the largest integers kbopt compares exactly")
        elif isinstance(value, float) and not math.isfinite(value):
            raise FactsError(f"{name}: {where}: {value} is not a finite number")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number kbopt accepts")


def parse_document(text: str, name: str, as_yaml: bool | None = None) -> Any:
    """Parse JSON or YAML text (YAML by the name's suffix unless `as_yaml` says); errors name the
    file, line and column."""
    if len(text) > MAX_FACTS_BYTES:
        raise FactsError(f"{name}: the facts document is {len(text):,} characters long; kbopt reads at most "
                         f"{MAX_FACTS_BYTES:,} (a real one is a few kilobytes)")
    if not text.strip():
        raise FactsError(f"{name}: the facts document is empty; write at least {{\"kbopt\": \"{FACTS_FORMAT}\"}}")
    if as_yaml if as_yaml is not None else name.endswith((".yaml", ".yml")):
        import yaml  # only for YAML documents: JSON facts never load PyYAML

        from kbopt.kb.yamlio import DuplicateKey, YamlRefused, read_yaml_strict  # PyYAML: only for a YAML facts file
        try:
            return _plain(read_yaml_strict(text), name, "$")
        except (DuplicateKey, YamlRefused) as error:
            raise FactsError(f"{name}: not valid facts YAML: {error}") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
            raise FactsError(f"{name}: not valid YAML: {where}{getattr(error, 'problem', error)}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise FactsError(f"{name}: not valid JSON: line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise FactsError(f"{name}: not valid facts: nested more than {MAX_DEPTH} levels deep; facts are section.name") from None
    except ValueError as error:
        huge = _huge_integer(text)
        raise FactsError(f"{name}: {huge}" if huge else f"{name}: not valid JSON: {error}") from None


def _huge_integer(text: str) -> str | None:
    """Where the JSON text has an integer too long for Python to convert, said as YAML's check
    says it (`$.model.num_layers: an integer of 5,001 digits ...`), or None. Only asked once
    json.loads has failed: a document that parses pays nothing for it."""
    from kbopt.kb.yamlio import MAX_INT_DIGITS  # with PyYAML: only for a YAML value
    marker = object()
    digits: list[int] = []

    def integer(literal: str) -> object:
        if len(literal) > MAX_INT_DIGITS:
            digits.append(len(literal.lstrip("-")))
            return marker
        return int(literal)
    try:
        document = json.loads(text, parse_int=integer, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    pending: list[tuple[str, Any]] = [("$", document)]
    while pending:
        where, value = pending.pop()
        if value is marker:
            return (f"{where}: an integer of {digits[0]:,} digits; kbopt reads integers of at most {MAX_INT_DIGITS:,} "
                    "digits (and facts within +-2^53)")
        if isinstance(value, dict):
            pending.extend((f"{where}.{key}", item) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
    return None


def _plain(value: Any, name: str, where: str) -> Any:
    """YAML values as JSON would have them: string keys only; dates become ISO strings."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise FactsError(f"{name}: {where}: the key {key!r} is not a name; quote it or fix the indentation")
        return {k: _plain(v, name, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, name, f"{where}[{i}]") for i, v in enumerate(value)]
    # A value is a date only where the YAML reader made one, and it imported datetime to do so:
    # a JSON document spares a cold start that import.
    dates = sys.modules.get("datetime")
    if dates is not None and isinstance(value, (dates.date, dates.datetime)):
        return value.isoformat()
    return value


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _json_path(parts: Iterable[str | int]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _describe(error: ValidationError, vocabulary: Vocabulary) -> str:
    """One sentence per schema error, naming the JSON path, with a hint where one helps."""
    path = list(error.absolute_path)
    where = _json_path(path)
    # jsonschema types a failing (sub)schema as a mapping, a bool or "unset"; the facts schema's are all mappings
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(schema.get("properties", {}))
        unknown = sorted(set(error.instance) - known)
        prefix = ".".join(str(p) for p in path)
        sentences = []
        # The first few with a hint each (difflib is slow), then a count: 40,000 keys make one short message.
        for key in unknown[:SHOWN]:
            full = f"{prefix}.{key}" if prefix else key
            hint = vocabulary.suggest(full) if prefix else None
            if not prefix:
                import difflib  # only to suggest a name on an error path
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = close[0] if close else None
            did_you_mean = f"; did you mean '{hint}'?" if hint else f"; known keys here: {', '.join(sorted(known))}"
            sentences.append(f"{where}.{_clip(key)}: unknown key{did_you_mean}")
        if len(unknown) > SHOWN:
            sentences.append(f"(and {len(unknown) - SHOWN:,} more unknown keys)")
        return " ".join(sentences)
    dotted = ".".join(str(p) for p in path if not isinstance(p, int))
    spec = vocabulary.get(dotted)
    instance = error.instance
    if error.validator == "anyOf" and spec is not None:
        # Our fact schemas are anyOf[<type>, null]; report against the real type.
        inner = schema["anyOf"][0]
        if spec.type == "ratio" and isinstance(instance, (int, float)) and not isinstance(instance, bool):
            if 1 < instance <= 100:
                return (f"{where}: {instance!r} is out of range: {dotted} is a ratio in 0..1 "
                        f"({instance!r} looks like a percentage: write {instance / 100:g})")
            return f"{where}: {instance!r} is out of range: {dotted} is a ratio in 0..1"
        if spec.type in ("number", "integer", "ratio"):
            if isinstance(instance, bool) or not isinstance(instance, (int, float)):
                return f"{where}: expected {'an integer' if spec.type == 'integer' else 'a number'}, got {_show(instance)}"
            if spec.type == "integer" and not float(instance).is_integer():
                return f"{where}: expected an integer, got {instance!r}"
            return f"{where}: {instance!r} is out of range ({spec.range_text()})"
        if spec.type == "bool":
            return f"{where}: expected true or false, got {_show(instance)}"
        if spec.type == "enum":
            return f"{where}: {_show(instance)} is not one of {', '.join(spec.values)}"
        if spec.type == "version":
            return f"{where}: expected a compute capability \"major.minor\" such as \"8.9\", got {_show(instance)}"
        if spec.type == "list":
            return f"{where}: expected a list of distinct values from {', '.join(spec.values)}, got {_show(instance)}"
        if spec.type == "string":
            if isinstance(instance, str) and spec.pattern:
                return f"{where}: {_show(instance)} is not of the form {dotted} takes ({spec.description})"
            return f"{where}: expected a string, got {_show(instance)}"
        return f"{where}: {error.message} (expected {inner})"
    if error.validator == "type" and error.validator_value == "object":
        return f"{where}: expected an object with named facts, got {_show(instance)}"
    if error.validator == "const":
        return f"{where}: format marker must be \"{FACTS_FORMAT}\", got {_show(instance)}"
    return f"{where}: {error.message}"


@lru_cache(maxsize=1)
def _facts_validator() -> Draft202012Validator:
    import jsonschema  # imported here: only needed once a document is at hand
    return jsonschema.Draft202012Validator(facts_schema())


def _json_line(text: str, parts: Sequence[str | int]) -> int | None:
    """The line of the key at `parts` (its object keys, up to the first list index) in JSON text,
    or None: a scan of strings and nesting, run only to place an error (json gives no positions)."""
    keys = [str(p) for p in parts[:next((i for i, p in enumerate(parts) if isinstance(p, int)), len(parts))]]
    if not keys:
        return None
    path: list[str | None] = []          # the key of each open object (None: an array)
    i, line, size = 0, 1, len(text)
    while i < size:
        char = text[i]
        if char == "\n":
            line += 1
        elif char in "{[":
            path.append(None)
        elif char in "}]":
            if path:
                path.pop()
        elif char == '"':
            start_line, j, chunk = line, i + 1, []
            while j < size and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                chunk.append(text[j] if j < size else "")
                j += 1
            k = j + 1
            while k < size and text[k] in " \t\r\n":
                line += text[k] == "\n"
                k += 1
            if k < size and text[k] == ":" and path:
                path[-1] = "".join(chunk)
                if path == keys:
                    return start_line
            i = k
            continue
        i += 1
    return None


def _yaml_line(text: str, parts: Sequence[str | int]) -> int | None:
    """The line of the node at `parts` in YAML text (the deepest one found), or None."""
    import yaml  # PyYAML: only for a YAML value
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(part)), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _line(text: str | None, name: str, parts: Sequence[str | int]) -> str:
    """`line 7: ` where the text shows where the error is, else nothing."""
    if text is None:
        return ""
    found = _yaml_line(text, parts) if name.endswith((".yaml", ".yml")) or not text.lstrip().startswith("{") else _json_line(text, parts)
    return f"line {found}: " if found else ""


def validate_document(document: Any, name: str, vocabulary: Vocabulary | None = None, text: str | None = None) -> None:
    """Refuses a document that breaks the facts schema, naming each problem's JSON path and, where
    `text` (the document as read) shows it, its line: one paragraph, problems separated by `;`."""
    vocabulary = vocabulary or builtin_knowledge().vocabulary
    if not isinstance(document, dict):
        raise FactsError(f"{name}: $: a facts document is a JSON object of sections "
                         f"(hardware, telemetry, model, workload, constraints), got {type(document).__name__}")
    check_plain(document, name)
    if plainly_valid(document, vocabulary):
        return
    errors = sorted(_facts_validator().iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        shown = [_line(text, name, _error_parts(e)) + _describe(e, vocabulary) for e in errors[:SHOWN]]
        more = f"; and {len(errors) - SHOWN} more" if len(errors) > SHOWN else ""
        count = f" ({len(errors)} problems)" if len(errors) > 1 else ""
        raise FactsError(f"{name}: invalid facts{count}: " + "; ".join(shown) + more)


def _error_parts(error: ValidationError) -> list[str | int]:
    """Where an error is: its path, or for an unknown key the first such key."""
    parts: list[str | int] = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        unknown = sorted(set(error.instance) - set(schema.get("properties", {})))
        if unknown:
            parts.append(unknown[0])
    return parts


def flatten(document: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for section, fields in document.items():
        if section in ("kbopt", "provenance") or not isinstance(fields, dict):
            continue
        for key, value in fields.items():
            if value is not None:
                values[f"{section}.{key}"] = value
    return values


def _yaml_scalar(raw: str, path: str) -> Any:
    """A --set value as YAML reads it (0.95, true, [int8, fp16]); the text itself when it is not YAML."""
    import yaml  # PyYAML: only for a YAML facts file

    from kbopt.kb.yamlio import YamlRefused, read_yaml  # with PyYAML
    try:
        return read_yaml(raw)
    except YamlRefused as error:
        raise FactsError(f"--set {_clip(path)}: the value {_clip(raw)!r} is refused: {error}") from None
    except yaml.YAMLError:
        return raw


def apply_overrides(document: dict[str, Any], overrides: list[str], vocabulary: Vocabulary) -> dict[str, Any]:
    """`--set PATH=VALUE` what-ifs; VALUE is read as a YAML scalar or list (0.95, true, [int8, fp16])."""
    document = json.loads(json.dumps(document))
    for item in overrides:
        if len(item) > MAX_SET_TEXT or _has_surrogate(item):
            raise FactsError(f"--set {_clip(ascii(item))}: not a PATH=VALUE kbopt reads (at most {MAX_SET_TEXT:,} "
                             "characters of UTF-8 text)")
        path, sep, raw = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise FactsError(f"--set {_clip(item)!r}: expected PATH=VALUE, e.g. --set telemetry.memory_used_ratio=0.95")
        spec = vocabulary.get(path)
        if spec is None or spec.derived:
            hint = vocabulary.suggest(path)
            why = "is derived by rules and cannot be set" if spec else "is not a known fact"
            raise FactsError(f"--set {_clip(path)}: {_clip(path)} {why}" + (f"; did you mean '{hint}'?" if hint and not spec else ""))
        value = _yaml_scalar(raw, path)
        if spec.type in ("string", "enum", "version") and value is not None and not isinstance(value, str):
            value = raw.strip()
        if spec.is_numeric and spec.type != "version" and isinstance(value, str):
            try:
                value = float(value)            # YAML 1.1 reads 1e-5 (no dot) as a string
            except ValueError:
                pass
        section, key = path.split(".", 1)
        document.setdefault(section, {})[key] = value
    return document


def enrich_from_catalog(values: dict[str, Any], provenance: dict[str, Provenance]) -> None:
    name = values.get("hardware.gpu_name")
    gpu = builtin_knowledge().match_gpu(name) if isinstance(name, str) else None
    if gpu is None:
        return
    for path, value in (("hardware.vendor", gpu.vendor),
                        ("hardware.compute_capability", gpu.compute_capability),
                        ("hardware.memory_total_gib", gpu.memory_gib),
                        ("hardware.bandwidth_gbps", gpu.bandwidth_gbps),
                        ("hardware.fp16_tflops", gpu.fp16_tflops),
                        ("hardware.fp8_tflops", gpu.fp8_tflops),
                        ("hardware.int8_tops", gpu.int8_tops),
                        ("hardware.fp4_tflops", gpu.fp4_tflops),
                        ("hardware.mig_slice_sm_share", gpu.mig_slice_sm_share or None)):
        if value is None:
            continue
        if path not in values:
            values[path] = value
            provenance[path] = Provenance(f"catalog:{gpu.id}", "catalog", note=gpu.source)


# Facts renamed since kbopt first read them (old path -> current path): a document that still uses
# an old name is read under the current one, and the fact's provenance says so.
RENAMED = {"workload.max_seq_len": "workload.seq_len_max"}


def with_current_names(document: Any) -> Any:
    """`document` with each renamed fact under its current name (a copy where any moved), its
    provenance noting the name it was given under; a document that gives both keeps the current."""
    if not isinstance(document, dict):
        return document
    out = document
    for old, new in RENAMED.items():
        section, _, key = old.partition(".")
        fields = document.get(section)
        if not isinstance(fields, dict) or key not in fields:
            continue
        if out is document:
            out = dict(document)
        moved = dict(out[section])
        value = moved.pop(key)
        moved.setdefault(new.partition(".")[2], value)
        out[section] = moved
        given_provenance = out.get("provenance")
        if given_provenance is not None and not isinstance(given_provenance, dict):
            continue                 # not a provenance table: validation names it
        provenance = dict(given_provenance or {})
        raw = provenance.pop(old, None)
        if new not in provenance:
            given = raw if isinstance(raw, dict) else {"source": "input", "quality": "user"}
            provenance[new] = {**given, "note": f"given as {old}, its name before; kbopt reads it as {new}"}
        out["provenance"] = provenance
    return out


def facts_from_document(document: Any, name: str, overrides: Sequence[str] = (), launched: Sequence[str] = ()) -> Facts:
    """`launched`: the facts today's launch command states (--launch), applied before the --set
    `overrides`, each named as where it came from when it is wrong."""
    vocabulary = builtin_knowledge().vocabulary
    document = with_current_names(document)
    validate_document(document, name, vocabulary)
    for given, origin in ((launched, "today's launch command (--launch)"), (overrides, "--set")):
        if given:
            document = apply_overrides(document, list(given), vocabulary)
            validate_document(document, f"{name} with {origin}", vocabulary)
    values = flatten(document)
    for path, value in values.items():
        spec = vocabulary.get(path)     # never None: validation allows only the vocabulary's facts
        if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                spec is not None and spec.type == "version":
            text = f"{value:.1f}"     # YAML reads an unquoted 8.9 as a number
            if float(text) != value:     # 8.96 is not 9.0: refuse rather than round
                raise FactsError(f"{name}: $.{path}: {value!r} is not a compute capability \"major.minor\" with a "
                                 f"one-digit minor; write it quoted, e.g. \"8.9\"")
            values[path] = text
    check_consistency(values, name, vocabulary)
    recorded = {path: Provenance(**raw) for path, raw in (document.get("provenance") or {}).items()}
    provenance = {path: recorded.get(path, USER) for path in values}
    for item in overrides:
        provenance[item.partition("=")[0].strip()] = SET
    for path, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise FactsError(f"{name}: ${'.' + path}: {value} is not a finite number")
    enrich_from_catalog(values, provenance)
    return Facts(values=dict(sorted(values.items())), provenance=dict(sorted(provenance.items())))


STDIN = "-"


def load_facts(path: str | Path, overrides: Sequence[str] = ()) -> Facts:
    return load_merged_facts([str(path)], overrides)


def load_merged_facts(paths: Sequence[str], overrides: Sequence[str] = ()) -> Facts:
    return facts_from_document(*merged_document(paths), overrides)


def merged_document(paths: Sequence[str]) -> tuple[dict[str, Any], str]:
    """One facts document from one or more (`-`: standard input), merged in order: a later
    document's fact replaces an earlier one's, with its provenance; and the name errors give it.
    Each document is checked on its own first, so that an error names the file it is in; relations
    between facts are checked on the merge (facts_from_document)."""
    if list(paths).count(STDIN) > 1:
        raise FactsError("--facts -: standard input can be read once")
    vocabulary = builtin_knowledge().vocabulary
    documents = []
    for path in paths:
        name = "<stdin>" if path == STDIN else str(path)
        text, as_yaml = _read_text(path)
        document = with_current_names(parse_document(text, name, as_yaml))
        validate_document(document, name, vocabulary, text)
        documents.append(document)
    if len(documents) == 1:
        return documents[0], name
    return merge_documents(documents), " + ".join("<stdin>" if path == STDIN else Path(path).name for path in paths)


def _read_text(path: str) -> tuple[str, bool | None]:
    """The text of a facts document, and whether it is YAML (by its suffix, None; standard input is
    JSON when it starts with `{`, YAML otherwise)."""
    try:
        if path == STDIN:
            text = sys.stdin.read(MAX_FACTS_BYTES + 1)
            return text, not text.lstrip().startswith("{")
        return Path(path).read_text(encoding="utf-8"), None
    except FileNotFoundError:
        raise FactsError(f"{path}: no such facts file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise FactsError(f"{'<stdin>' if path == STDIN else path}: cannot read the facts file: {error}") from None


def merge_documents(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Facts documents merged in order, fact by fact: a later value and its provenance win, and a
    fact a later document sets without provenance loses the earlier document's."""
    merged: dict[str, Any] = {"kbopt": FACTS_FORMAT}
    provenance: dict[str, Any] = {}
    for document in documents:
        for section, fields in document.items():
            if section in ("kbopt", "provenance") or not isinstance(fields, dict):
                continue
            for key, value in fields.items():
                merged.setdefault(section, {})[key] = value
                provenance.pop(f"{section}.{key}", None)
        provenance.update(document.get("provenance") or {})
    if provenance:
        merged["provenance"] = provenance
    return merged


def check_consistency(values: dict[str, Any], name: str, vocabulary: Vocabulary) -> None:
    """Relations between facts that any real deployment satisfies (kb/vocabulary.yaml `consistency`)."""
    from kbopt.engine.lang.text import fmt  # kb/ imports no engine module at load time
    problems = []
    for rule in vocabulary.consistency:
        a, b = values.get(rule["fact"]), values.get(rule["other"])
        if a is None or b is None:
            continue
        holds = a >= b if rule["op"] == ">=" else a <= b
        if not holds:
            relation = "below" if rule["op"] == ">=" else "above"
            problems.append(f"$.{rule['fact']}: {fmt(a)} is {relation} {rule['other']} ({fmt(b)}); {rule['why']}")
    name_ = values.get("hardware.gpu_name")
    gpu = builtin_knowledge().match_gpu(name_) if isinstance(name_, str) else None
    given = values.get("hardware.compute_capability")
    vendor = gpu.vendor if gpu else values.get("hardware.vendor")
    if gpu and values.get("hardware.vendor") not in (None, gpu.vendor):
        problems.append(f"$.hardware.vendor: {values['hardware.vendor']} contradicts hardware.gpu_name {name_!r}, "
                        f"an {gpu.vendor.upper()} part ({gpu.source})")
    if given and vendor == "amd":
        problems.append(f"$.hardware.compute_capability: {given} is a CUDA compute capability and the GPU is AMD's, "
                        "which has none; leave it out (PyTorch on ROCm reports the gfx version, 9.4 on an MI300X, "
                        "in its place)")
    elif gpu and given and given != gpu.compute_capability:
        problems.append(f"$.hardware.compute_capability: {given} contradicts hardware.gpu_name {name_!r}, "
                        f"which has compute capability {gpu.compute_capability} ({gpu.source})")
    if vendor == "amd" and values.get("workload.engine") == "trtllm":
        problems.append("$.workload.engine: trtllm (TensorRT-LLM) runs on NVIDIA GPUs only, and the GPU is AMD's")
    if problems:
        raise FactsError(f"{name}: inconsistent facts: " + " ".join(problems))
