"""The placeholders of a rule's `because` text: `{fact.path}` or `{parameter}`, each with an
optional format spec after a colon (`{threshold:.0%}`), filled in when the rule fires."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator

_PLACEHOLDER = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_PARAMETER = re.compile(r"[a-z_][a-z0-9_]*")     # facts are dotted, so a bare name is a parameter


def placeholders(text: str) -> Iterator[tuple[str, str | None]]:
    """(name, format spec or None) of each placeholder, in order."""
    for match in _PLACEHOLDER.finditer(text):
        yield match.group(1), match.group(2)


MAX_SPEC = 16          # characters of one format spec
MAX_WIDTH = 100        # width and precision: `{x:>1500000000}` would take seconds and gigabytes to fill


def spec_problem(spec: str | None) -> str | None:
    """Why a placeholder's format spec is refused, or None: width and precision are bounded."""
    if spec is None:
        return None
    if len(spec) > MAX_SPEC:
        return f"the format spec {spec[:MAX_SPEC]!r}... is longer than {MAX_SPEC} characters"
    if any(int(digits) > MAX_WIDTH for digits in re.findall(r"[0-9]+", spec)):
        return f"the format spec {spec!r} asks for a width or precision over {MAX_WIDTH}"
    return None


def parameter_names(text: str) -> set[str]:
    return {name for name, _ in placeholders(text) if _PARAMETER.fullmatch(name)}


def fill(text: str, value: Callable[[str, str | None], str]) -> str:
    """`text` with each placeholder replaced by `value(name, spec)`."""
    return _PLACEHOLDER.sub(lambda match: value(match.group(1), match.group(2)), text)


Compiled = tuple[str | tuple[str, str | None], ...]     # literal text, or a placeholder's (name, spec)


def compile_text(text: str) -> Compiled:
    """`text` split once into literals and placeholders, for `fill_compiled`."""
    parts: list[str | tuple[str, str | None]] = []
    at = 0
    for match in _PLACEHOLDER.finditer(text):
        parts.extend([text[at:match.start()], (match.group(1), match.group(2))])
        at = match.end()
    parts.append(text[at:])
    return tuple(parts)


def fill_compiled(parts: Compiled, value: Callable[[str, str | None], str]) -> str:
    """`fill(text, value)` of the text `parts` was compiled from."""
    return "".join(part if isinstance(part, str) else value(*part) for part in parts)
