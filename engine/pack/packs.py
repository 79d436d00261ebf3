"""Which packs a command uses: the built-in one, KBOPT_RULES, then --rules, and the checks a
custom pack must pass before its advice is trusted."""
from __future__ import annotations

import os

from kbopt.engine.pack.rule import Pack
from kbopt.errors import KboptError


def load_checked_pack(dirs: list[str]) -> Pack:
    """The built-in pack with `dirs` layered over it. A custom pack must pass lint's error checks
    (a rule that can never fire, a retired id, TODOs...), not just load."""
    from kbopt.engine.pack.loader import load_pack
    dirs = list(dict.fromkeys(dirs))
    pack = load_pack(dirs)
    if dirs:
        from kbopt.engine.authoring.lint import lint_pack
        errors = [f for f in lint_pack(pack, dirs) if f.severity == "error"]
        if errors:
            more = f" ({len(errors) - 1} more: run `kbopt rules lint {' '.join(dirs)}`)" if len(errors) > 1 else ""
            first = errors[0]
            hint = f" (hint: {first.hint})" if first.hint else ""
            raise KboptError(f"{first.file}:{first.line}: {first.message}{hint}{more}")
    return pack


def configured_packs() -> list[str]:
    """Packs named in the KBOPT_RULES environment entry, layered before any --rules."""
    return [path for path in os.environ.get("KBOPT_RULES", "").split(os.pathsep) if path]
