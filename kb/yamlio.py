"""Safe, bounded YAML reading, with libyaml's C parser where PyYAML was built with it (several times faster).

Every YAML kbopt reads (facts, rule files, pack files, --set values, the knowledge base's catalogs) goes
through `read_yaml` or `read_yaml_strict`, which refuse what no kbopt file needs and what a hostile file
uses to make a small text expensive: anchors and aliases (a 1 KB "billion laughs" expands to gigabytes;
a recursive anchor never ends), tags beyond the core schema (!!set, !!python/...), keys that are not
scalars, nesting deeper than MAX_DEPTH and texts longer than MAX_TEXT. The checks run on libyaml's event
stream, which is flat, so they cost one pass and never recurse.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # builds plain data only, never Python objects

MAX_TEXT = 4 * 1024 * 1024     # characters: far above any real facts or rule file (docs/usage.md, Limits)
MAX_DEPTH = 64                 # nested mappings and lists; kbopt's deepest file needs 6
MAX_NODES = 500_000            # scalars, mappings and lists in one document
# Digits of a decimal integer: Python refuses to convert more than 4,300 (an internal error, before), and
# nothing kbopt reads comes near (facts are within +-2^53, 16 digits).
MAX_INT_DIGITS = 4000
# A plain scalar YAML 1.1 reads as a decimal integer (octal, hexadecimal, binary and sexagesimal ones
# convert without Python's limit).
_DECIMAL = re.compile(r"[-+]?[1-9][0-9_]*")
# The tags a plain YAML document resolves to by itself (the core schema, plus dates, which YAML 1.1 reads
# implicitly and facts turn back into ISO strings). An explicit tag outside this set is refused.
CORE_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq",
                                                                 "timestamp"))


class DuplicateKey(ValueError):
    def __init__(self, key: str, line: int, column: int | None = None):
        super().__init__(f"line {line}: duplicate key {key!r}")
        self.key, self.line, self.column = key, line, column


class YamlRefused(ValueError):
    """Valid YAML that kbopt will not read (an alias, a tag, a complex key, too deep or too long)."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None):
        where = f"line {line}: " if line else ""
        super().__init__(f"{where}{problem}")
        self.problem, self.line, self.column = problem, line, column


def _refuse(problem: str, mark: Any) -> YamlRefused:
    return YamlRefused(problem, mark.line + 1 if mark else None, mark.column + 1 if mark else None)


def check_events(text: str) -> None:
    """Refuse aliases, anchors, non-core tags, non-scalar keys, deep nesting and long texts (YamlRefused);
    a text that is not YAML at all raises yaml.YAMLError as the loader would."""
    if len(text) > MAX_TEXT:
        raise YamlRefused(f"the text is {len(text):,} characters long; kbopt reads at most {MAX_TEXT:,}")
    parser = SafeLoader(text)       # only its parser is used: events, never nodes or objects
    # One frame per open collection: whether it is a mapping, for a mapping whether the next node is a
    # key, and where it is (the last key read, or the list's index), to name a refused value's path.
    stack: list[list[Any]] = []
    nodes = 0
    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                return
            if isinstance(event, yaml.AliasEvent):
                raise _refuse("aliases (*name) are not supported; write the value out", event.start_mark)
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            nodes += 1
            if nodes > MAX_NODES:
                raise _refuse(f"more than {MAX_NODES:,} values in one document", event.start_mark)
            if event.anchor is not None:
                raise _refuse(f"anchors (&{event.anchor}) are not supported; write the value out", event.start_mark)
            tag = getattr(event, "tag", None)
            if tag not in (None, "!") and tag not in CORE_TAGS:
                raise _refuse(f"the tag {tag} is not supported: kbopt reads plain strings, numbers, booleans, "
                              "lists and mappings", event.start_mark)
            is_key = bool(stack) and stack[-1][0] and stack[-1][1]
            if stack and stack[-1][0]:
                stack[-1][1] = not stack[-1][1]
            elif stack:
                stack[-1][2] += 1
            if isinstance(event, yaml.ScalarEvent):
                if is_key:
                    stack[-1][2] = event.value
                elif len(event.value) > MAX_INT_DIGITS and not event.style and _DECIMAL.fullmatch(event.value):
                    digits = sum(c.isdigit() for c in event.value)
                    raise _refuse(f"{_path(stack)}: an integer of {digits:,} digits; kbopt reads integers of at most "
                                  f"{MAX_INT_DIGITS:,} digits (and facts within +-2^53)", event.start_mark)
            if isinstance(event, yaml.CollectionStartEvent):
                if is_key:
                    raise _refuse("a key must be a plain name, not a list or a mapping", event.start_mark)
                if len(stack) >= MAX_DEPTH:
                    raise _refuse(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
                stack.append([isinstance(event, yaml.MappingStartEvent), True, -1])
    finally:
        parser.dispose()


def _path(stack: list[list[Any]]) -> str:
    """`$.model.num_layers`, `$.rules[2]`: where the event check stands."""
    return "$" + "".join(f".{where}" if mapping else f"[{where}]" for mapping, _, where in stack)


def check_duplicate_keys(node: yaml.Node) -> None:
    """YAML lets a later key silently replace an earlier one; a typo'd copy must not win.
    Walks without recursion (check_events has bounded the depth, but a walk need not rely on it)."""
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[object] = set()
            for key, value in current.value:
                # check_events admits only scalar keys; str() keeps an unhashable surprise from crashing here
                name = key.value if isinstance(key.value, str) else str(key.value)
                if name in seen:
                    raise DuplicateKey(name, key.start_mark.line + 1, key.start_mark.column + 1)
                seen.add(name)
                pending.append(value)
        elif isinstance(current, yaml.SequenceNode):
            pending.extend(current.value)


def compose_checked(text: str) -> tuple[Any, yaml.Node | None]:
    """(loader, node) of a checked text, the caller disposing of the loader; node None for an empty one."""
    check_events(text)
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            check_duplicate_keys(node)
    except BaseException:
        loader.dispose()
        raise
    return loader, node


def read_yaml_strict(text: str) -> Any:
    """Like read_yaml, but a duplicate key is an error (DuplicateKey)."""
    loader, node = compose_checked(text)
    try:
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(text: str) -> Any:
    check_events(text)
    loader = SafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
