"""Every file a pack may hold, found and read in one place: rule files by layer folder,
parameters.yaml, retired.yaml and disable.yaml.

Readers append Diagnostics to a list instead of raising, so that the loader can report every
broken file of every pack in one pass.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from kbopt.codes import diagnostic
from kbopt.diagnostics import Diagnostic
from kbopt.engine.pack.rule import Parameter
from kbopt.kb.catalog import LAYERS, Layer
from kbopt.kb.packaged import package_dir
from kbopt.kb.vocabulary import FactSpec, spec_from

if TYPE_CHECKING:       # importing importlib.resources costs a cold start its tempfile and zipfile
    from importlib.resources.abc import Traversable

PARAMETERS, RETIRED, DISABLE, DERIVED = "parameters.yaml", "retired.yaml", "disable.yaml", "derived.yaml"
MAX_SNIPPET = 300
# A pack's size limits (docs/usage.md, Limits): a rule file is a few kilobytes and the largest packs tested
# hold 2,000 rules; these bound what one hostile pack can make every command read, parse and compile.
MAX_FILE = 1024 * 1024         # characters of one pack file
MAX_RULE_FILES = 10_000        # rule files in one pack
LAYOUT = "a pack is a directory: <dir>/<layer>/<id>.yaml, layers: " + ", ".join(LAYERS)

# Where a node sits in a document: mapping keys and list indexes from the root, () for the root itself.
KeyPath: TypeAlias = tuple[str | int, ...]


def snippet(text: str, line: int | None) -> str | None:
    lines = text.splitlines()
    if not line or not 0 < line <= len(lines):
        return None
    shown = lines[line - 1].rstrip()
    # A diagnostic is one paragraph: a line of thousands of characters is shown by its start.
    return (shown if len(shown) <= MAX_SNIPPET else shown[:MAX_SNIPPET] + " ...") or None


@dataclass(frozen=True)
class Document:
    """A parsed YAML file, with the line and column of every key and list item."""
    file: str
    text: str
    data: Any
    marks: dict[KeyPath, tuple[int, int]]

    def mark(self, path: Iterable[str | int]) -> tuple[int, int]:
        """The nearest position on `path`: a key missing from the file points at its parent."""
        key = tuple(path)
        while key and key not in self.marks:
            key = key[:-1]
        return self.marks.get(key, (1, 1))

    def line(self, path: Iterable[str | int]) -> int:
        return self.mark(path)[0]

    def at(self, path: Iterable[str | int], code: str, message: str, help: str | None = None) -> Diagnostic:
        line, column = self.mark(path)
        return diagnostic(code, self.file, line, message, help=help, snippet=snippet(self.text, line), column=column)


def parse(text: str, file: str, problems: list[Diagnostic]) -> Document | None:
    """Safe YAML with every key's position; a duplicate key is an error, not a silent overwrite."""
    import yaml  # here, not at the top: a pack from the compiled-pack cache is never parsed

    from kbopt.kb.yamlio import DuplicateKey, YamlRefused, compose_checked  # PyYAML (27 ms) loads only when a file is parsed
    loader = None
    try:
        loader, node = compose_checked(text)
        if node is None:
            problems.append(diagnostic("L003", file, 1, "the file is empty"))
            return None
        data = loader.construct_document(node)
    except YamlRefused as error:
        problems.append(diagnostic("L003", file, error.line, error.problem, snippet=snippet(text, error.line),
                                   column=error.column))
        return None
    except DuplicateKey as error:
        problems.append(diagnostic("L003", file, error.line, f"duplicate key {error.key!r}", snippet=snippet(text, error.line),
                                   column=error.column, help="a later copy would silently replace the first"))
        return None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problems.append(diagnostic("L003", file, line, f"not valid YAML: {getattr(error, 'problem', error)}",
                                   snippet=snippet(text, line), column=mark.column + 1 if mark else None))
        return None
    finally:
        if loader is not None:
            loader.dispose()
    marks: dict[KeyPath, tuple[int, int]] = {}
    not_names: list[yaml.Node] = []

    def walk(n: yaml.Node, path: KeyPath) -> None:
        marks[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                if key.tag != "tag:yaml.org,2002:str":     # `1:` or `true:` would reach the schema as a non-string
                    not_names.append(key)
                walk(value, path + (key.value,))
                marks[path + (key.value,)] = (key.start_mark.line + 1, key.start_mark.column + 1)   # the key, not its value
        elif isinstance(n, yaml.SequenceNode):
            for index, item in enumerate(n.value):
                walk(item, path + (index,))

    walk(node, ())
    if not_names:
        key = not_names[0]
        line = key.start_mark.line + 1
        problems.append(diagnostic("L004", file, line, f"the key {key.value!r} is not a name", snippet=snippet(text, line),
                                   column=key.start_mark.column + 1, help="quote it, or fix the indentation"))
        return None
    return Document(file, text, data, marks)


def read_bounded(file: Traversable) -> bytes | None:
    """A pack file's bytes, or None where it holds more than MAX_FILE characters could take in
    UTF-8: a file of gigabytes is refused after reading one read's worth, not taken into memory."""
    with file.open("rb") as stream:
        data = stream.read(4 * MAX_FILE + 1)
    return None if len(data) > 4 * MAX_FILE else data


def read_text(file: Traversable, shown: str, problems: list[Diagnostic]) -> str | None:
    try:
        data = read_bounded(file)
        # universal newlines, as reading the file as text did: a CRLF file reads as LF
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n") if data is not None else None
        if text is None or len(text) > MAX_FILE:
            size = f"{len(text):,} characters long" if text is not None else f"over {4 * MAX_FILE:,} bytes long"
            problems.append(diagnostic("L002", shown, None, f"{size}; a pack file may hold at most {MAX_FILE:,} characters"))
            return None
        return text
    except UnicodeDecodeError as error:
        problems.append(diagnostic("L002", shown, None, f"not UTF-8 text (byte {error.start})"))
    except OSError as error:
        problems.append(diagnostic("L002", shown, None, f"cannot read: {error.strerror}"))
    return None


def read_document(file: Traversable, shown: str, problems: list[Diagnostic]) -> Document | None:
    text = read_text(file, shown, problems)
    return None if text is None else parse(text, shown, problems)


@dataclass(frozen=True)
class PackDir:
    """One pack's directory and the rule files found in it."""
    pack: str                  # "builtin", or the directory as given
    root: Traversable          # a Path, or the installed package's Traversable
    shown: str                 # how diagnostics name the directory
    rule_files: tuple[tuple[Layer, Traversable], ...]      # (layer, file), by layer then name

    def name(self, *parts: str) -> str:
        return "/".join((self.shown,) + parts)

    def optional(self, name: str) -> Traversable | None:
        file = self.root.joinpath(name)
        return file if file.is_file() else None


def _pack_dir(pack: str, root: Traversable, shown: str) -> PackDir:
    files: list[tuple[Layer, Traversable]] = []
    for layer in LAYERS:
        folder = root.joinpath(layer)
        if folder.is_dir():
            files.extend((layer, f) for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith((".yaml", ".yml")))
    return PackDir(pack, root, shown, tuple(files))


def builtin() -> PackDir:
    return _pack_dir("builtin", package_dir("kbopt.rules"), "rules")


def discover(dirs: Iterable[str | Path], problems: list[Diagnostic]) -> list[PackDir]:
    """The built-in pack, then each directory once, in layering order."""
    packs = [builtin()]
    for shown in dict.fromkeys(str(d) for d in dirs):
        root = Path(shown)
        if not root.is_dir():
            problems.append(diagnostic("L001", shown, None, "not a rules directory", help=LAYOUT))
            continue
        pack = _pack_dir(shown, root, shown)
        if len(pack.rule_files) > MAX_RULE_FILES:
            problems.append(diagnostic("L001", shown, None, f"{len(pack.rule_files):,} rule files; a pack may hold at "
                                       f"most {MAX_RULE_FILES:,}", help="split it into several packs"))
            continue
        if not pack.rule_files and not pack.optional(DISABLE) and not pack.optional(PARAMETERS):
            problems.append(diagnostic("L001", shown, None, "no rule files found", help=LAYOUT))
            continue
        packs.append(pack)
    return packs


def _entries(pack: PackDir, name: str, key: str, problems: list[Diagnostic]) -> tuple[Document | None, Any]:
    """The document of an optional pack file and what it holds under its one top-level `key`."""
    file = pack.optional(name)
    doc = file and read_document(file, pack.name(name), problems)
    if not doc:
        return None, None
    return doc, doc.data.get(key) if isinstance(doc.data, dict) else None


def read_parameters(pack: PackDir, problems: list[Diagnostic]) -> dict[str, Parameter]:
    """parameters.yaml: `parameters: {name: {value, why}}` (and `overrides: true` to retune another pack's)."""
    doc, entries = _entries(pack, PARAMETERS, "parameters", problems)
    if not doc:
        return {}
    if not isinstance(entries, dict):
        problems.append(doc.at((), "L004", "expected a mapping `parameters: {name: {value: ..., why: ...}}`"))
        return {}
    out = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not {"value", "why"} <= set(entry) <= {"value", "why", "overrides"} \
                or not isinstance(entry["why"], str) or not isinstance(entry["value"], (int, float, str, bool)):
            problems.append(doc.at(("parameters", name), "L004", f"parameter {name!r} needs `value` and `why` "
                                   "(and `overrides: true` to retune another pack's)"))
            continue
        out[name] = Parameter(name, entry["value"], " ".join(entry["why"].split()), bool(entry.get("overrides")),
                              doc.line(("parameters", name)))
    return out


_DERIVED_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_DERIVED_TYPES = ("ratio", "number", "integer", "bool", "enum")     # what a derive expression computes


def namespace(pack: PackDir) -> str:
    """The name a pack's own derived facts go under: `derived.<namespace>.<name>`, the pack
    directory's name with what is not a letter, digit or underscore as `_` (vllm-tuning: vllm_tuning)."""
    base = re.sub(r"[^a-z0-9_]", "_", Path(pack.pack).name.lower()) or "pack"
    return base if base[0].isalpha() else f"p_{base}"


def read_derived(pack: PackDir, problems: list[Diagnostic]) -> dict[str, FactSpec]:
    """derived.yaml: `derived: {name: {type, description, unit?, values?, min?, max?}}`, the facts the
    pack's rules derive beside the built-in ones, as `derived.<namespace>.<name>`."""
    doc, entries = _entries(pack, DERIVED, "derived", problems)
    if not doc:
        return {}
    if not isinstance(entries, dict):
        problems.append(doc.at((), "L004", "expected a mapping `derived: {name: {type: ..., description: ...}}`"))
        return {}
    out = {}
    for name, entry in entries.items():
        where = ("derived", name)
        if not isinstance(name, str) or not _DERIVED_NAME.fullmatch(name):
            problems.append(doc.at(where, "L004", f"derived fact name {str(name)[:80]!r}: use lowercase letters, digits and "
                                   "_ (it is written derived.<pack>.<name> in rules)"))
            continue
        if not isinstance(entry, dict) or not {"type", "description"} <= set(entry) \
                or not set(entry) <= {"type", "description", "unit", "values", "min", "max"} \
                or entry["type"] not in _DERIVED_TYPES or not isinstance(entry["description"], str) \
                or (entry["type"] == "enum") != isinstance(entry.get("values"), list) \
                or not all(isinstance(v, str) for v in entry.get("values") or []) \
                or not isinstance(entry.get("unit", ""), str) \
                or any(isinstance(entry.get(b), bool) or not isinstance(entry.get(b, 0), int | float) for b in ("min", "max")):
            problems.append(doc.at(where, "L004", f"derived fact {name!r} needs `type` (one of {', '.join(_DERIVED_TYPES)}) "
                                   "and `description` (and may give a `unit` text, numbers `min` and `max`; an enum its `values`, texts)"))
            continue
        path = f"derived.{namespace(pack)}.{name}"
        out[path] = spec_from(path, entry, derived=True)
    return out


@dataclass(frozen=True)
class Retired:
    id: str
    reason: str
    file: str
    line: int

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


def read_retired(pack: PackDir, problems: list[Diagnostic]) -> dict[str, Retired]:
    """retired.yaml: `retired: {ID: reason}` or `retired: [ID, ...]`."""
    doc, entries = _entries(pack, RETIRED, "retired", problems)
    if doc is None:
        return {}
    if entries is None and not (isinstance(doc.data, dict) and "retired" in doc.data):     # e.g. a bare list
        problems.append(doc.at((), "L004", "expected `retired: {RULE-ID: reason, ...}` or `retired: [RULE-ID, ...]`"))
        return {}
    if entries is None:        # `retired:` with nothing under it
        return {}
    if isinstance(entries, list) and all(isinstance(e, str) for e in entries):
        return {e: Retired(e, "retired", doc.file, doc.line(("retired", i))) for i, e in enumerate(entries)}
    if isinstance(entries, dict) and all(isinstance(k, str) for k in entries):
        return {k: Retired(k, str(v), doc.file, doc.line(("retired", k))) for k, v in entries.items()}
    problems.append(doc.at(("retired",), "L004", "expected `retired: {RULE-ID: reason, ...}` or `retired: [RULE-ID, ...]`"))
    return {}


def read_disable(pack: PackDir, problems: list[Diagnostic]) -> list[tuple[str, int]]:
    """disable.yaml: `disable: [{id, why}]`, as (id, line) in file order."""
    doc, entries = _entries(pack, DISABLE, "disable", problems)
    if not doc:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, dict) and set(e) == {"id", "why"} for e in entries):
        problems.append(doc.at((), "L004", "expected `disable: [{id: RULE-ID, why: reason}, ...]`"))
        return []
    return list({e["id"]: doc.line(("disable", i)) for i, e in enumerate(entries)}.items())
