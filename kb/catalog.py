"""Catalogs shipped in kb/: GPUs, strategies and the seed's claims."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from kbopt.kb.yamlio import read_yaml


def _load(name: str):
    text = resources.files("kbopt.kb").joinpath(name).read_text(encoding="utf-8")
    return read_yaml(text)


@dataclass(frozen=True)
class Gpu:
    id: str
    match: str
    compute_capability: str
    memory_gib: float
    bandwidth_gbps: float
    fp8_tensor_cores: bool
    source: str


@dataclass(frozen=True)
class Strategy:
    id: str
    layer: str
    title: str
    params: dict[str, str]
    variant: str | None = None            # the parameter that names a variant (quantization.scheme)
    variants: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    return tuple(Gpu(**entry) for entry in _load("gpus.yaml")["gpus"])


def match_gpu(name: str) -> Gpu | None:
    for gpu in gpus():
        if re.search(gpu.match, name, re.IGNORECASE):
            return gpu
    return None


@lru_cache(maxsize=1)
def strategies() -> dict[str, Strategy]:
    out = {}
    for sid, raw in _load("strategies.yaml")["strategies"].items():
        out[sid] = Strategy(
            id=sid,
            layer=raw["layer"],
            title=raw["title"],
            params=dict(raw.get("params", {})),
            variant=raw.get("variant"),
            variants=tuple(raw.get("variants", ())),
            excludes=tuple(raw.get("excludes", ())),
        )
    return out


@lru_cache(maxsize=1)
def seed_claims() -> dict[str, str]:
    return dict(_load("seed.yaml")["claims"])
