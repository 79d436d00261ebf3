"""The knowledge base as one value: the fact vocabulary, the GPU, strategy and engine catalogs, the sources.

Code that checks or evaluates rules receives this value (a pack carries the one it was checked
against) instead of reaching for module-level loaders, so what a rule was validated against is
what it runs against, and a test can hand in another knowledge base.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kbopt.kb.catalog import ErrorBand, Gpu, Strategy, error_bands, gpus, load_negligible_change, strategies
from kbopt.kb.engines import EngineCatalog, load_engine_catalog
from kbopt.kb.sources import Catalog as SourceCatalog
from kbopt.kb.sources import load_catalog
from kbopt.kb.vocabulary import Vocabulary, load_vocabulary


@dataclass(frozen=True)
class KnowledgeBase:
    vocabulary: Vocabulary
    strategies: Mapping[str, Strategy]
    gpus: tuple[Gpu, ...]
    sources: SourceCatalog
    engines: EngineCatalog          # each engine's settings for each strategy (kb/engines/<engine>.yaml)
    negligible_change: float        # a what-if that moves no estimate by this share is not advised
    error_bands: Mapping[str, ErrorBand] = field(default_factory=dict)   # the model's measured error, by metric

    def error_band(self, path: str) -> ErrorBand | None:
        """The measured error of the metric an estimate is validated as (vocabulary `validated_by`)."""
        spec = self.vocabulary.facts.get(path)
        return self.error_bands.get(spec.validated_by) if spec is not None and spec.validated_by else None

    def match_gpu(self, name: str) -> Gpu | None:
        """The catalog entry whose pattern matches an NVML/DCGM device name, if any (each name
        looked up once: a batch's documents name the same few devices)."""
        key = (id(self.gpus), name)
        found = _matched.get(key)
        if found is None or found[0] is not self.gpus:
            if len(_matched) >= MATCHES_KEPT:
                _matched.clear()
            found = _matched[key] = (self.gpus, next((gpu for gpu in self.gpus if _pattern(gpu.match).search(name)), None))
        return found[1]


MATCHES_KEPT = 1024
# (catalog, device name) -> (the catalog itself, so that its id is not reused while kept; the match)
_matched: dict[tuple[int, str], tuple[tuple[Gpu, ...], Gpu | None]] = {}


@functools.cache
def _pattern(match: str) -> re.Pattern[str]:
    """A catalog pattern compiled once per process (re.search looks its cache up at every call)."""
    return re.compile(match, re.IGNORECASE)


_builtin: KnowledgeBase | None = None


def builtin_knowledge() -> KnowledgeBase:
    """The knowledge base shipped in kb/: read once per process, or adopted from a cached pack."""
    global _builtin
    if _builtin is None:
        _builtin = KnowledgeBase(vocabulary=load_vocabulary(), strategies=strategies(), gpus=gpus(), sources=load_catalog(),
                                 engines=load_engine_catalog(), negligible_change=load_negligible_change(),
                                 error_bands=error_bands())
    return _builtin


def adopt(knowledge: KnowledgeBase) -> None:
    """Use the knowledge base a cached pack carries (its cache key covers kb/'s files, so it is the
    built-in one as it is on disk now): facts are then checked without reading any YAML."""
    global _builtin
    if _builtin is None:
        _builtin = knowledge


# The built-in knowledge base's parts, for code that reads the shipped catalogs rather than a pack's
# (docs generation, the launch scripts of an Advice, the renderers' source labels).
def engine_catalog() -> EngineCatalog:
    """The built-in engine profiles (kb/engines/<engine>.yaml)."""
    return builtin_knowledge().engines


def source_catalog() -> SourceCatalog:
    """The built-in sources catalog (kb/sources.yaml)."""
    return builtin_knowledge().sources


def match_gpu(name: str) -> Gpu | None:
    """The built-in GPU catalog's entry for a device name (KnowledgeBase.match_gpu)."""
    return builtin_knowledge().match_gpu(name)


def seed_claims() -> dict[str, str]:
    """The methodology's claims, id -> text (rules cite them as `seed K3.8`)."""
    return {cid: claim.text for cid, claim in source_catalog().claims.items()}
