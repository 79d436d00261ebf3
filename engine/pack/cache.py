"""A compiled-pack cache: a pack that loaded cleanly is kept, pickled, in the user's cache folder.

Loading a pack parses every YAML file, checks it against the rule schema (jsonschema) and compiles
every expression; a cold `kbopt advise` spent most of its own time there. The key covers everything
the compiled pack depends on: the bytes of every file of every pack layered, the knowledge base's
data files, and kbopt's own code (size and modification time of each module) and version, so an
edit anywhere makes a new entry. A stale, unreadable or corrupt entry is ignored and rebuilt; a
pack with problems is never cached (loading it again reports them).

KBOPT_CACHE_DIR names the folder (default: $XDG_CACHE_HOME/kbopt or ~/.cache/kbopt);
KBOPT_NO_CACHE=1 turns the cache off. Entries are pickles of kbopt's own Pack values, never of rule
text; they are read only from a folder and files this user owns and nobody else can write.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

from kbopt.diagnostics import Diagnostic
from kbopt.engine.pack import files
from kbopt.engine.pack.rule import Pack
from kbopt.kb.engines import profile_files
from kbopt.kb.knowledge import adopt
from kbopt.kb.packaged import package_dir

FORMAT = b"kbopt-pack-cache/1"
KB_FILES = ("vocabulary.yaml", "strategies.yaml", "gpus.yaml", "sources.yaml", "models.yaml", "model_errors.yaml")
CODE_PACKAGES = ("kbopt", "kbopt.engine", "kbopt.engine.lang", "kbopt.engine.pack", "kbopt.engine.evaluators",
                 "kbopt.engine.advice", "kbopt.engine.authoring", "kbopt.kb")


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
    from kbopt import __version__
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
                digest.update(f"{layer}/{file.name}\0".encode() + file.read_bytes() + b"\0")
            for name in (files.PARAMETERS, files.RETIRED, files.DISABLE):
                found = pack.optional(name)
                if found is not None:
                    digest.update(name.encode() + b"\0" + found.read_bytes() + b"\0")
        except OSError:
            return None
    return None if problems else digest.hexdigest()


def cached_pack(dirs: tuple[str, ...], build: Callable[[], Pack]) -> Pack:
    """The pack `build()` makes, from the cache when an entry for exactly these files exists."""
    folder = cache_dir()
    key = pack_key(dirs) if folder is not None else None
    if folder is None or key is None:
        return build()
    entry = folder / f"pack-{key}.pickle"
    data = _read_private(folder, entry)
    if data is not None:
        try:
            pack = _PackUnpickler(io.BytesIO(data)).load()
            if isinstance(pack, Pack):
                adopt(pack.kb)
                return pack
        except Exception:       # a corrupt or incompatible entry: rebuild it
            pass
        with contextlib.suppress(OSError):
            entry.unlink()
    pack = build()
    _store(folder, entry, pack)
    return pack


# What a cached pack is made of: kbopt's own values and plain containers. Anything else in an
# entry (a function to call, a module's class) is refused, so reading one can only build data.
_BUILTINS = frozenset({"tuple", "list", "dict", "set", "frozenset", "str", "bytes", "int", "float", "bool", "complex"})


class _PackUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module == "kbopt" or module.startswith("kbopt.")) and not name.startswith("_"):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        elif module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)  # type: ignore[no-any-return]  # a builtin type
        raise pickle.UnpicklingError(f"a pack cache entry may not hold {module}.{name}")


def _private(stat: os.stat_result) -> bool:
    """Owned by this user, and writable by nobody else."""
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o022


def _read_private(folder: Path, entry: Path) -> bytes | None:
    """The entry's bytes, only when the folder and the entry are this user's own and nobody else
    can write them. Unpickling runs what the bytes say, so an entry someone else could have written
    is treated as absent (and rebuilt); kbopt creates the folder 0700 and the entries 0600."""
    try:
        if not (_private(os.stat(folder)) and _private(os.lstat(entry))):
            return None
        return entry.read_bytes()
    except OSError:             # no entry yet, or no cache folder to read
        return None


def _store(folder: Path, entry: Path, pack: Pack) -> None:
    """Write the entry whole or not at all; a cache that cannot be written only costs time."""
    import tempfile
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".pack-")     # created 0600
        try:
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(pack, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, entry)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        pass
