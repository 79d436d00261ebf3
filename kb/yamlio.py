"""Safe YAML reading, with libyaml's C parser where PyYAML was built with it (several times faster)."""
from __future__ import annotations

from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # builds plain data only, never Python objects


class DuplicateKey(ValueError):
    def __init__(self, key: str, line: int, column: int | None = None):
        super().__init__(f"line {line}: duplicate key {key!r}")
        self.key, self.line, self.column = key, line, column


def check_duplicate_keys(node: yaml.Node) -> None:
    """YAML lets a later key silently replace an earlier one; a typo'd copy must not win."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if key.value in seen:
                raise DuplicateKey(key.value, key.start_mark.line + 1, key.start_mark.column + 1)
            seen.add(key.value)
            check_duplicate_keys(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            check_duplicate_keys(item)


def read_yaml_strict(text: str) -> Any:
    """Like read_yaml, but a duplicate key is an error (DuplicateKey)."""
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_duplicate_keys(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(text: str) -> Any:
    loader = SafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
