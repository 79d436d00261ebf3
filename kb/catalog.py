"""Catalogs shipped in kb/: GPUs, strategies and the methodology's claims (kb/sources.py)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args

from kbopt.kb.packaged import package_dir, read_knowledge_yaml

# The methodology's four layers, in the order advice is read: what limits the GPU, then what to
# change in the math, in memory, in scheduling. Rules and strategies each belong to one.
Layer = Literal["diagnosis", "compute", "storage", "scheduling"]
LAYERS: tuple[Layer, ...] = get_args(Layer)


def _load(name: str) -> Any:  # a parsed YAML document
    text = package_dir("kbopt.kb").joinpath(name).read_text(encoding="utf-8")
    return read_knowledge_yaml(text, f"kb/{name}")


@dataclass(frozen=True)
class Gpu:
    id: str
    match: str
    memory_gib: float
    bandwidth_gbps: float
    fp16_tflops: float
    int8_tops: float
    fp8_tflops: float
    fp8_tensor_cores: bool
    fp4_tensor_cores: bool
    source: str
    # CUDA compute capability "major.minor"; None for an AMD part, which has none (rules decide from
    # hardware.vendor and the throughput columns there).
    compute_capability: str | None = None
    vendor: Literal["nvidia", "amd"] = "nvidia"
    fp4_tflops: float = 0.0            # dense FP4 tensor math (NVFP4; MXFP4 on AMD CDNA 4); 0 without FP4 tensor cores
    # One MIG compute slice's share of the whole GPU's SMs (the datasheet peak counts them all): an
    # A100 slice has 14 of 108 SMs, not 1/7 of them, since MIG mode leaves 10 SMs unused. 0: not given.
    mig_slice_sm_share: float = 0.0


@dataclass(frozen=True)
class ParamSpec:
    description: str
    min: float | None = None
    max: float | None = None
    # A budget of the running server (a chunk budget, a page count): computed on the deployment as
    # the whole plan leaves it (FP8 weights shorten the step and grow the pool), not on today's.
    after_plan: bool = False

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
    # What applying it changes in the facts: (fact path, literal | "= expression" | None), None
    # forgetting a measurement the change makes stale. The advisor re-evaluates the performance
    # model with them (engine/advice/whatif.py); kb/ stays free of the expression language.
    effects: tuple[tuple[str, Any], ...] = ()
    variant_effects: Mapping[str, tuple[tuple[str, Any], ...]] = field(default_factory=dict)
    # When the deployment already has it: a condition of the rule language (text; the advisor
    # parses it against the vocabulary and evaluates it on the final facts). A candidate for which
    # it holds is advice to keep, not to change. A variant's own condition wins over the strategy's.
    in_place_when: str | None = None
    variant_in_place_when: Mapping[str, str] = field(default_factory=dict)
    # Variants that cost accuracy (narrower weights or KV): such a change must buy service (a
    # faster step, first token or more tokens a second), not only capacity no request uses; the
    # condition (rule language) names where capacity alone still pays (preemptions the model
    # does not count).
    accuracy_cost: tuple[str, ...] = ()
    capacity_pays_when: str | None = None

    def in_place_condition(self, variant: str | None) -> str | None:
        """The condition under which this strategy (or variant) is already in place, if any."""
        if variant and variant in self.variant_in_place_when:
            return self.variant_in_place_when[variant]
        return self.in_place_when

    def effects_of(self, variant: str | None) -> tuple[tuple[str, Any], ...]:
        """The strategy's effects, then its variant's (a variant's entry for a fact wins)."""
        merged = dict(self.effects)
        merged.update(self.variant_effects.get(variant, ()) if variant else ())
        return tuple(merged.items())


@lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    return tuple(Gpu(**entry) for entry in _load("gpus.yaml")["gpus"])


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
            effects=tuple((raw.get("effects") or {}).items()),
            variant_effects={variant: tuple(changes.items())
                             for variant, changes in (raw.get("variant_effects") or {}).items()},
            in_place_when=raw.get("in_place_when"),
            variant_in_place_when=dict(raw.get("variant_in_place_when") or {}),
            accuracy_cost=tuple((raw.get("accuracy_cost") or {}).get("variants", ())),
            capacity_pays_when=(raw.get("accuracy_cost") or {}).get("capacity_pays_when"),
        )
    return out


@dataclass(frozen=True)
class ErrorBand:
    """How far one metric of the performance model was off on benchmarks/validation
    (kb/model_errors.yaml): the band an estimate of that metric is shown with."""
    metric: str
    rows: int
    median_abs_error: float
    worst_error: float
    optimistic_share: float
    loso_median_abs_error: float | None = None

    def text(self) -> str:
        """`±8% (36 rows; 10% with its source left out)`: the median error, how many rows, and the
        leave-one-source-out median, the figure that holds for a deployment unlike the rows."""
        held = f"; {self.loso_median_abs_error:.0%} with its source left out" if self.loso_median_abs_error is not None else ""
        return f"±{self.median_abs_error:.0%} ({self.rows} rows{held})"

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "rows": self.rows, "median_abs_error": self.median_abs_error,
                "worst_error": self.worst_error, "optimistic_share": self.optimistic_share,
                "loso_median_abs_error": self.loso_median_abs_error}


@lru_cache(maxsize=1)
def error_bands() -> dict[str, ErrorBand]:
    """kb/model_errors.yaml by metric (step, tput, ttft, kv_pool, gain); empty before it is written."""
    if not package_dir("kbopt.kb").joinpath("model_errors.yaml").is_file():
        return {}
    raw = _load("model_errors.yaml")
    return {metric: ErrorBand(metric, int(m["rows"]), float(m["median_abs_error"]), float(m["worst_error"]),
                              float(m["optimistic_share"]),
                              float(m["loso_median_abs_error"]) if m.get("loso_median_abs_error") is not None else None)
            for metric, m in (raw.get("metrics") or {}).items()}


@lru_cache(maxsize=1)
def load_negligible_change() -> float:
    """Relative change of every estimate a strategy moves under which it is not recommended."""
    return float(_load("strategies.yaml")["negligible_change"]["value"])

