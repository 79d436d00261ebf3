"""Where kbopt's own data files are: the directory of one of its packages (kbopt.kb, kbopt.rules)."""
from __future__ import annotations

import importlib
from pathlib import Path


def package_dir(name: str) -> Path:
    """The directory of kbopt's package `name`, where its data files lie. kbopt is installed
    unpacked (pip, editable or not), never imported from a zip, so a path is all it takes:
    importlib.resources cost every cold start about 5 ms of imports it then did not use
    (tempfile, random, zipfile)."""
    module = importlib.import_module(name)
    assert module.__file__ is not None, name       # a regular package: its __init__.py
    return Path(module.__file__).parent
