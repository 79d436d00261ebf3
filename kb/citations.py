"""What a rule's `source:` entries mean for readers, from the built-in sources catalog (kb/sources.yaml).

Rule files cite a methodology claim as `seed K3.8` and an external page by its address; readers
see "methodology §3.8" or the page's title instead. Unknown entries are shown as written (a custom
pack may cite a page the catalog does not list); lint refuses an unknown claim id.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from kbopt.kb.knowledge import builtin_knowledge
from kbopt.kb.sources import CLAIM, Source


def resolve(cited: str) -> Source | None:
    """The catalog entry a `source:` entry names, or None when the catalog does not know it."""
    match = CLAIM.match(cited.strip())
    if match:
        return builtin_knowledge().sources.claims.get(match.group(1))
    return builtin_knowledge().sources.references.get(cited.strip().split("#", 1)[0])


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
