"""The knowledge base as one value: the fact vocabulary and the GPU and strategy catalogs.

Code that checks or evaluates rules receives this value (a pack carries the one it was checked
against) instead of reaching for module-level loaders, so what a rule was validated against is
what it runs against, and a test can hand in another knowledge base.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from kbopt.kb.catalog import Gpu, Strategy, gpus, strategies
from kbopt.kb.vocabulary import Vocabulary, load_vocabulary


@dataclass(frozen=True)
class KnowledgeBase:
    vocabulary: Vocabulary
    strategies: Mapping[str, Strategy]
    gpus: tuple[Gpu, ...]

    def match_gpu(self, name: str) -> Gpu | None:
        """The catalog entry whose pattern matches an NVML/DCGM device name, if any."""
        for gpu in self.gpus:
            if re.search(gpu.match, name, re.IGNORECASE):
                return gpu
        return None


@lru_cache(maxsize=1)
def builtin_knowledge() -> KnowledgeBase:
    return KnowledgeBase(vocabulary=load_vocabulary(), strategies=strategies(), gpus=gpus())
