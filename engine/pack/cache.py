"""A compiled-pack cache: a pack that loaded cleanly is kept, as plain JSON data, in the user's cache folder.

Loading a pack parses every YAML file, checks it against the rule schema (jsonschema) and compiles
every expression; a cold `kbopt advise` spent most of its own time there. The key covers everything
the compiled pack depends on: the bytes of every file of every pack layered, the knowledge base's
data files, and kbopt's own code (size and modification time of each module) and version, so an
edit anywhere makes a new entry. A stale, unreadable or corrupt entry is ignored and rebuilt; a
pack with problems is never cached (loading it again reports them).

An entry is data, never code: JSON whose values are text, numbers, booleans, null, containers and
kbopt's own frozen dataclasses (the rule IR, condition nodes, the knowledge base), each written as
its class's index in a table of the classes a pack is made of and its fields' values in order.
Reading one calls nothing the entry names: an object is made without its `__init__` and given its
declared fields, and each field's value is checked against the field's type before the pack is
used. Anything else (a class not in the table, fields that are not the class's, a value of the
wrong type, JSON that does not parse) makes the entry corrupt, and it is rebuilt: a planted entry
can at worst cost a rebuild (or, shaped as a valid pack, say what a rule file could). (Until
kbopt-pack-cache/2 entries were pickles, and a pickle runs what its bytes say.)

KBOPT_CACHE_DIR names the folder (default: $XDG_CACHE_HOME/kbopt or ~/.cache/kbopt);
KBOPT_NO_CACHE=1 turns the cache off. Entries are read only from a folder and files this user owns
and nobody else can write.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from kbopt import __version__
from kbopt.diagnostics import Diagnostic
from kbopt.engine.pack import files
from kbopt.engine.pack.rule import Pack
from kbopt.kb.engines import profile_files
from kbopt.kb.knowledge import adopt
from kbopt.kb.packaged import package_dir

FORMAT = b"kbopt-pack-cache/2"
KB_FILES = ("vocabulary.yaml", "strategies.yaml", "gpus.yaml", "sources.yaml", "models.yaml", "model_errors.yaml")
CODE_PACKAGES = ("kbopt", "kbopt.engine", "kbopt.engine.lang", "kbopt.engine.pack", "kbopt.engine.evaluators",
                 "kbopt.engine.advice", "kbopt.engine.authoring", "kbopt.kb")
# The modules whose dataclasses a pack is made of: an entry may hold these and nothing else.
VALUE_MODULES = ("kbopt.engine.pack.rule", "kbopt.engine.lang.nodes", "kbopt.kb.knowledge", "kbopt.kb.vocabulary",
                 "kbopt.kb.sources", "kbopt.kb.engines", "kbopt.kb.catalog")


def cache_dir() -> Path | None:
    if os.environ.get("KBOPT_NO_CACHE"):
        return None
    configured = os.environ.get("KBOPT_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kbopt"


def pack_key(dirs: tuple[str, ...]) -> str | None:
    """The digest of everything a compiled pack depends on; None when the packs cannot be read
    (loading them then says why)."""
    digest = hashlib.sha256(FORMAT + b"\0" + __version__.encode() + b"\0" + sys.version.encode())
    for package in CODE_PACKAGES:
        for module in sorted(package_dir(package).iterdir(), key=lambda f: f.name):
            if module.name.endswith(".py"):
                stat = os.stat(str(module))
                digest.update(f"{package}/{module.name}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    kb = package_dir("kbopt.kb")
    for name in (*KB_FILES, *profile_files()):       # the engine profiles: kb/engines/<engine>.yaml
        digest.update(name.encode() + b"\0" + kb.joinpath(name).read_bytes() + b"\0")
    problems: list[Diagnostic] = []
    for pack in files.discover(dirs, problems):
        digest.update(f"pack {pack.pack} {pack.shown}\0".encode())
        try:
            for layer, file in pack.rule_files:
                data = files.read_bounded(file)
                if data is None:            # too long: loading it says so
                    return None
                digest.update(f"{layer}/{file.name}\0".encode() + data + b"\0")
            for name in (files.PARAMETERS, files.RETIRED, files.DISABLE, files.DERIVED):
                found = pack.optional(name)
                if found is not None:
                    data = files.read_bounded(found)
                    if data is None:
                        return None
                    digest.update(name.encode() + b"\0" + data + b"\0")
        except OSError:
            return None
    return None if problems else digest.hexdigest()


def cached_pack(dirs: tuple[str, ...], build: Callable[[], Pack]) -> Pack:
    """The pack `build()` makes, from the cache when an entry for exactly these files exists."""
    folder = cache_dir()
    key = pack_key(dirs) if folder is not None else None
    if folder is None or key is None:
        return build()
    entry = folder / f"pack-{key}.json"
    data = _read_private(folder, entry)
    if data is not None:
        try:
            pack = decode(data)
            if not pack.kb.vocabulary.pack_facts:      # the built-in knowledge as it is on disk now
                adopt(pack.kb)
            return pack
        except Exception:       # a corrupt, planted or incompatible entry: rebuild it
            pass
        with contextlib.suppress(OSError):
            entry.unlink()
    pack = build()
    _store(folder, entry, pack)
    return pack


# ------------------------------------------------------------------ a pack as plain data
# A value is JSON itself (text, a number, a boolean, null), or an array whose first element says
# what it is: ["T", ...] a tuple, ["L", ...] a list, ["D", key, value, ...] a dict, ["S", ...] a set,
# ["F", ...] a frozenset, [n, field values...] an object of the n-th class of the entry's table,
# ["R", n] the n-th object already read (an object met twice is written once, as pickle did).


_SCALARS = frozenset({str, int, float, bool, type(None)})


class CorruptEntry(ValueError):
    """A cache entry that is not a pack as this kbopt writes one."""


@cache
def value_classes() -> dict[str, type]:
    """Every class a cached pack may hold, by `module.Name`: the dataclasses of VALUE_MODULES."""
    found: dict[str, type] = {}
    for module in VALUE_MODULES:
        for name, value in vars(sys.modules[module] if module in sys.modules else __import__(module, fromlist=["_"])).items():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module:
                found[f"{module}.{name}"] = value
    return found


def encode(pack: Pack) -> bytes:
    """The pack as an entry (TypeError for a value it cannot hold: such a pack is not cached)."""
    classes = value_classes()
    index_of = {cls: n for n, cls in enumerate(classes.values())}
    seen: dict[int, int] = {}
    used: set[int] = set()

    def plain(value: object) -> object:
        if value is None or isinstance(value, (str, bool, int, float)):
            return value
        kind = type(value)
        if isinstance(value, tuple) and kind is tuple:
            return ["T", *map(plain, value)]
        if isinstance(value, list) and kind is list:
            return ["L", *map(plain, value)]
        if isinstance(value, dict) and kind is dict:
            return ["D", *(plain(part) for item in value.items() for part in item)]
        if isinstance(value, (set, frozenset)) and kind in (set, frozenset):
            return ["S" if kind is set else "F", *map(plain, sorted(value, key=repr))]
        if kind in index_of:
            if id(value) in seen:
                return ["R", seen[id(value)]]
            seen[id(value)] = len(seen)
            used.add(index_of[kind])
            state = typing.cast(dict[str, object], value.__getstate__() if "__getstate__" in vars(kind) else vars(value))
            return [index_of[kind], *(plain(state[name]) for name in _field_names(kind))]
        raise TypeError(f"a pack cache entry cannot hold {kind.__module__}.{kind.__qualname__}")

    body = plain(pack)
    table = [[name, _field_names(cls)] if n in used else None for n, (name, cls) in enumerate(classes.items())]
    return json.dumps({"format": FORMAT.decode(), "classes": table, "pack": body},
                      ensure_ascii=False, separators=(",", ":")).encode()


def decode(data: bytes) -> Pack:
    """The pack an entry holds, or CorruptEntry (or the JSON decoder's own ValueError or
    RecursionError): nothing an entry names is called, and every field is checked for its type."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("format") != FORMAT.decode() \
            or not isinstance(document.get("classes"), list):
        raise CorruptEntry("not a kbopt pack cache entry of this format")
    known = value_classes()
    table: list[tuple[type, tuple[tuple[str, Callable[[object], bool]], ...]] | None] = []
    for row in document["classes"]:
        if row is None:
            table.append(None)
            continue
        name, names = row
        cls = known.get(name) if isinstance(name, str) else None
        if cls is None or names != _field_names(cls):
            raise CorruptEntry(f"an entry may not hold {str(name)[:80]}")
        table.append((cls, field_checks(cls)))
    made: list[object] = []
    scalars = _SCALARS

    # The entry's leaves (most of it: names, paths, numbers) are taken as they are in each
    # container's loop; only arrays call value(), which is most of a cold start's reading time.
    def value(item: object) -> object:
        if type(item) is not list:
            if type(item) in scalars:
                return item
            raise CorruptEntry("a bare JSON object")
        if not item:
            raise CorruptEntry("an empty array")
        tag = item[0]
        if tag == "T":
            return tuple([x if type(x) in scalars else value(x) for x in itertools.islice(item, 1, None)])
        if tag == "L":
            return [x if type(x) in scalars else value(x) for x in itertools.islice(item, 1, None)]
        if tag == "D":
            if not len(item) % 2:
                raise CorruptEntry("a dict without a value for its last key")
            pairs = [x if type(x) in scalars else value(x) for x in itertools.islice(item, 1, None)]
            return dict(zip(pairs[::2], pairs[1::2], strict=True))
        if tag in ("S", "F"):
            return (set if tag == "S" else frozenset)(value(x) for x in itertools.islice(item, 1, None))
        if tag == "R" and len(item) == 2 and type(item[1]) is int and 0 <= item[1] < len(made):
            return made[item[1]]
        if type(tag) is not int or not 0 <= tag < len(table) or table[tag] is None:
            raise CorruptEntry(f"an unknown tag {str(tag)[:20]}")
        cls, checks = table[tag]       # type: ignore[misc]  # not None, just checked
        if len(item) != len(checks) + 1:
            raise CorruptEntry(f"{cls.__name__} with {len(item) - 1} fields")
        made_object = object.__new__(cls)
        made.append(made_object)
        state = vars(made_object)
        for (name, check), x in zip(checks, itertools.islice(item, 1, None), strict=True):
            field = x if type(x) in scalars else value(x)
            if not check(field):
                raise CorruptEntry(f"{cls.__name__}.{name} is a {type(field).__name__}")
            state[name] = field
        return made_object

    pack = value(document.get("pack"))
    if type(pack) is not Pack:
        raise CorruptEntry("not a pack")
    return pack


@cache
def field_checks(cls: type) -> tuple[tuple[str, Callable[[object], bool]], ...]:
    """Each field with the check of its annotated type (anything where it cannot be resolved)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    return tuple((name, checker(hints.get(name, Any))) for name in _field_names(cls))


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(typing.cast(Any, cls))]     # value_classes() holds dataclasses


def _anything(value: object) -> bool:
    return True


@cache
def checker(wanted: object) -> Callable[[object], bool]:
    """Whether a value is of the annotated type `wanted`, containers' elements included (a float
    takes an int, as Python's numbers do; a type the check does not follow, such as a TypeVar or
    a Callable, takes anything)."""
    origin, args = typing.get_origin(wanted), typing.get_args(wanted)
    if wanted is Any or wanted is object:
        return _anything
    if origin in (typing.Union, types.UnionType):
        if all(isinstance(arg, type) and arg is not float for arg in args):
            plain = tuple(args)
            return lambda value: isinstance(value, plain)
        each = tuple(map(checker, args))
        return lambda value: any(check(value) for check in each)
    if origin is typing.Literal:
        return lambda value: value in args
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = checker(args[0])
        return lambda value: type(value) is tuple and (item is _anything or all(map(item, value)))
    if origin is tuple:
        items = tuple(map(checker, args))
        return lambda value: type(value) is tuple and (not items or (
            len(value) == len(items) and all(check(v) for check, v in zip(items, value, strict=True))))
    if origin in (list, set, frozenset):
        kind, item = origin, checker(args[0]) if args else _anything
        return lambda value: type(value) is kind and (item is _anything or all(map(item, value)))   # type: ignore[call-overload]
    if origin in (dict, Mapping):
        key, item = (checker(args[0]), checker(args[1])) if args else (_anything, _anything)
        return lambda value: type(value) is dict and all(key(k) and item(v) for k, v in value.items())
    if wanted is float:
        return lambda value: type(value) in (float, int)
    if isinstance(wanted, type):
        return lambda value: isinstance(value, wanted)
    return _anything


def _private(stat: os.stat_result) -> bool:
    """Owned by this user, and writable by nobody else."""
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o022


def _read_private(folder: Path, entry: Path) -> bytes | None:
    """The entry's bytes, only when the folder and the entry are this user's own and nobody else
    can write them: an entry someone else could have written is treated as absent (and rebuilt);
    kbopt creates the folder 0700 and the entries 0600."""
    try:
        if not (_private(os.stat(folder)) and _private(os.lstat(entry))):
            return None
        return entry.read_bytes()
    except OSError:             # no entry yet, or no cache folder to read
        return None


def _store(folder: Path, entry: Path, pack: Pack) -> None:
    """Write the entry whole or not at all; a cache that cannot be written only costs time."""
    import tempfile  # only when an entry is written
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".pack-")     # created 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(encode(pack))
            os.replace(temporary, entry)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except (OSError, TypeError):     # TypeError: the pack holds what an entry cannot (encode)
        pass
