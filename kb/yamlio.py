"""Safe YAML reading, with libyaml's C parser where PyYAML was built with it (several times faster)."""
from __future__ import annotations

from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # builds plain data only, never Python objects


def read_yaml(text: str) -> Any:
    loader = SafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
