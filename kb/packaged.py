"""Where kbopt's own data files are: the directory of one of its packages (kbopt.kb, kbopt.rules)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any


def package_dir(name: str) -> Path:
    """The directory of kbopt's package `name`, where its data files lie. kbopt is installed
    unpacked (pip, editable or not), never imported from a zip, so a path is all it takes:
    importlib.resources cost every cold start about 5 ms of imports it then did not use
    (tempfile, random, zipfile)."""
    module = importlib.import_module(name)
    assert module.__file__ is not None, name       # a regular package: its __init__.py
    return Path(module.__file__).parent


def read_knowledge_yaml(text: str, where: str) -> Any:
    """One of kbopt's own YAML files (kb/*.yaml, kb/engines/*.yaml), safely, and strictly: a key
    written twice is an error naming `where` and the line, never the last value silently winning
    (review set 30: kb/models.yaml gave qwen3-30b-a3b two vocab sizes)."""
    # PyYAML is imported only when a knowledge file is actually read: a cold advise whose pack
    # comes from the compiled-pack cache never needs it.
    from kbopt.kb.yamlio import DuplicateKey, read_yaml_strict
    try:
        return read_yaml_strict(text)
    except DuplicateKey as error:
        raise ValueError(f"{where}:{error.line}: duplicate key {error.key!r}") from None
