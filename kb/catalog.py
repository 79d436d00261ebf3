"""Catalogs shipped in kb/: GPUs, strategies and the methodology's claims (kb/sources.py)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, get_args

# The methodology's four layers, in the order advice is read: what limits the GPU, then what to
# change in the math, in memory, in scheduling. Rules and strategies each belong to one.
Layer = Literal["diagnosis", "compute", "storage", "scheduling"]
LAYERS: tuple[Layer, ...] = get_args(Layer)


def _load(name: str) -> Any:  # a parsed YAML document
    text = resources.files("kbopt.kb").joinpath(name).read_text(encoding="utf-8")
    return _read_yaml(text)


@dataclass(frozen=True)
class Gpu:
    id: str
    match: str
    compute_capability: str
    memory_gib: float
    bandwidth_gbps: float
    fp16_tflops: float
    int8_tops: float
    fp8_tflops: float
    fp8_tensor_cores: bool
    fp4_tensor_cores: bool
    source: str


@dataclass(frozen=True)
class ParamSpec:
    description: str
    min: float | None = None
    max: float | None = None

    def violated_by(self, value: object) -> str | None:
        """Why a computed value is out of range, or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.min is not None and value < self.min:
            return f"below {self.min:g}"
        if self.max is not None and value > self.max:
            return f"above {self.max:g}"
        return None


@dataclass(frozen=True)
class Strategy:
    id: str
    layer: str
    title: str
    params: dict[str, ParamSpec]
    variant: str | None = None            # the parameter that names a variant (quantization.scheme)
    variants: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    return tuple(Gpu(**entry) for entry in _load("gpus.yaml")["gpus"])


def match_gpu(name: str) -> Gpu | None:
    from kbopt.kb.knowledge import builtin_knowledge
    return builtin_knowledge().match_gpu(name)


@lru_cache(maxsize=1)
def strategies() -> dict[str, Strategy]:
    out = {}
    for sid, raw in _load("strategies.yaml")["strategies"].items():
        out[sid] = Strategy(
            id=sid,
            layer=raw["layer"],
            title=raw["title"],
            params={name: ParamSpec(**spec) if isinstance(spec, dict) else ParamSpec(spec)
                    for name, spec in raw.get("params", {}).items()},
            variant=raw.get("variant"),
            variants=tuple(raw.get("variants", ())),
            excludes=tuple(raw.get("excludes", ())),
        )
    return out


@lru_cache(maxsize=1)
def seed_claims() -> dict[str, str]:
    """The methodology's claims, id -> text (rules cite them as `seed K3.8`)."""
    from kbopt.kb.sources import catalog
    return {cid: claim.text for cid, claim in catalog().claims.items()}


def _read_yaml(text: str) -> Any:
    # PyYAML is imported only when a catalog file is actually read: a cold advise whose pack comes
    # from the compiled-pack cache never needs it.
    from kbopt.kb.yamlio import read_yaml
    return read_yaml(text)
