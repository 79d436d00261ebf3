"""Which packs a command uses: the built-in one, KBOPT_RULES, then --rules, and the checks a
custom pack must pass before its advice is trusted."""
from __future__ import annotations

import os

from kbopt.engine.pack.rule import Pack
from kbopt.errors import RuleError


def load_checked_pack(dirs: list[str]) -> Pack:
    """The built-in pack with `dirs` layered over it. A custom pack must pass lint's error checks
    (a rule that can never fire, a retired id, TODOs...), not just load; its warnings are lint's
    business, not advise's. A pack that passed is kept in the compiled-pack cache (cache.py)."""
    from kbopt.engine.pack.cache import cached_pack  # a cold advise reads the cache: the loader and lint load on a miss
    layered = tuple(dict.fromkeys(dirs))
    return cached_pack(layered, lambda: _load_and_check(layered))


def builtin_pack() -> Pack:
    """The built-in pack alone, from the compiled-pack cache where it is there."""
    return load_checked_pack([])


def _load_and_check(dirs: tuple[str, ...]) -> Pack:
    from kbopt.engine.pack.loader import lint_hint, read_pack  # the YAML loader: only on a cache miss
    loaded = read_pack(dirs, builtin_pack() if dirs else None)
    pack = loaded.checked()
    if loaded.dirs:
        from kbopt.engine.authoring.lint import lint_pack  # lint: only for a custom pack
        errors = [d for d in lint_pack(pack, loaded.retired, errors_only=True) if d.severity == "error"]
        if errors:
            raise RuleError(errors, lint_hint(loaded.dirs))
    from kbopt.engine.evaluators import precompile  # both backends: only before a pack is cached
    precompile(pack)
    return pack


def configured_packs() -> list[str]:
    """Packs named in the KBOPT_RULES environment entry, layered before any --rules."""
    return [path for path in os.environ.get("KBOPT_RULES", "").split(os.pathsep) if path]
