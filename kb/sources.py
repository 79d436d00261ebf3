"""The sources catalog (kb/sources.yaml), read: the methodology's claims and the external pages rules cite
(kb/citations.py says what a `source:` entry reads as).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from kbopt.kb.packaged import package_dir, read_knowledge_yaml

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


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """kb/sources.yaml, read and parsed."""
    raw = read_knowledge_yaml(package_dir("kbopt.kb").joinpath("sources.yaml").read_text(encoding="utf-8"), "kb/sources.yaml")
    method = raw["methodology"]
    claims = {}
    for cid, text in raw["claims"].items():
        section, number = cid[1:].split(".")
        claims[cid] = Source(cid, f"{method['label']} §{section}.{number}", text)
    references = {r["url"]: Source(r["id"], r["title"], url=r["url"]) for r in raw.get("references", ())}
    return Catalog(method["title"], method["about"], claims, references)

