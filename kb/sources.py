"""The sources catalog (kb/sources.yaml): what a rule's `source:` entries mean, for people.

Rule files cite a methodology claim as `seed K3.8` and an external page by its address; readers
see "methodology §3.8" or the page's title instead. Unknown entries are shown as written (a custom
pack may cite a page the catalog does not list); lint refuses an unknown claim id.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kbopt.kb.packaged import package_dir

CLAIM = re.compile(r"^seed (K(\d+)\.(\d+))$")


@dataclass(frozen=True)
class Source:
    id: str                 # K3.8, or a reference id such as vllm-optimization
    label: str              # what readers see: "methodology §3.8", or a page's title
    text: str = ""          # a claim, in the project's words
    url: str | None = None


@dataclass(frozen=True)
class Catalog:
    title: str              # the methodology document's title
    about: str
    claims: dict[str, Source]
    references: dict[str, Source]      # by url, without fragment


def catalog() -> Catalog:
    """The built-in catalog, as the process's knowledge base holds it (from a cached pack, or read once)."""
    from kbopt.kb.knowledge import builtin_knowledge
    return builtin_knowledge().sources


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """kb/sources.yaml, read and parsed."""
    raw = _read_yaml(package_dir("kbopt.kb").joinpath("sources.yaml").read_text(encoding="utf-8"))
    method = raw["methodology"]
    claims = {}
    for cid, text in raw["claims"].items():
        section, number = cid[1:].split(".")
        claims[cid] = Source(cid, f"{method['label']} §{section}.{number}", text)
    references = {r["url"]: Source(r["id"], r["title"], url=r["url"]) for r in raw.get("references", ())}
    return Catalog(method["title"], method["about"], claims, references)


def resolve(cited: str) -> Source | None:
    """The catalog entry a `source:` entry names, or None when the catalog does not know it."""
    match = CLAIM.match(cited.strip())
    if match:
        return catalog().claims.get(match.group(1))
    return catalog().references.get(cited.strip().split("#", 1)[0])


def label(cited: str) -> str:
    """A `source:` entry as readers see it: "methodology §3.8", a page's title (with its #part),
    or the entry as written when the catalog does not know it."""
    found = resolve(cited)
    if found is None:
        match = CLAIM.match(cited.strip())
        # An unknown claim id still reads as the methodology's (lint reports it as K102).
        return f"methodology §{match.group(2)}.{match.group(3)}" if match else cited
    fragment = cited.strip().partition("#")[2]
    return found.label + (f" (#{fragment})" if found.url and fragment else "")


def url(cited: str) -> str | None:
    """Where a reader can open the source: an http(s) entry's own address, else None."""
    return cited.strip() if re.match(r"https?://", cited.strip()) else None


def labels(cited: Iterable[str]) -> str:
    """Several `source:` entries, comma-separated, as readers see them."""
    return ", ".join(label(c) for c in cited)


def _read_yaml(text: str) -> Any:
    # PyYAML is imported only when a catalog file is actually read: a cold advise whose pack comes
    # from the compiled-pack cache never needs it.
    from kbopt.kb.yamlio import read_yaml
    return read_yaml(text)
