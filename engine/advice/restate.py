"""A --set what-if of the deployment itself (another dtype, GPU, parallelism or engine) restated
the way a strategy's what-if is (kb/strategies.yaml effects): the measurements that describe
today's deployment, not the changed one, are dropped and estimated again, today's calibration is
carried over, and the advice says which measured values it kept and which it re-estimated."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbopt.kb.facts import Facts
from kbopt.kb.provenance import Provenance

# Facts that describe the deployment: setting one is a what-if of another deployment.
DEPLOYMENT_SECTIONS = ("model.", "hardware.", "serving.")
DEPLOYMENT_FACTS = ("workload.engine", "workload.batching", "workload.kv_cache")
# Measurements of today's deployment that a changed one would not reproduce: the model estimates
# them again (the same ones a strategy's effects forget, kb/strategies.yaml).
STALE = ("workload.itl_mean_ms", "workload.itl_p99_ms", "workload.generation_tokens_per_s", "serving.num_gpu_blocks")
# Today's calibration, carried to the changed deployment (derived fact -> the input it is carried as).
CARRIED = (("derived.bandwidth_efficiency", "telemetry.bandwidth_efficiency"), ("derived.host_step_ms", "telemetry.host_step_ms"),
           ("derived.step_unexplained_ms", "telemetry.step_unexplained_ms"))
# Calibration that is the engine's own: another engine's host does other work each step (TGI's
# Python grammar masks are not vLLM's; a step's unexplained time is its kernels' and host's), so it is carried
# only where the engine stays.
ENGINE_OWN = frozenset({"telemetry.host_step_ms", "telemetry.step_unexplained_ms"})
MEASURED_SECTIONS = ("telemetry.", "workload.")
# The engine's KV gauge is a share of today's pool held by today's running batch: a changed
# deployment reads it in proportion to its own pool and batch (M-KV-USAGE-NOW), from these
# (derived fact -> the input it is carried as).
GAUGE_READ_ON = (("derived.kv_pool_tokens", "telemetry.kv_gauge_pool_tokens"),
                 ("derived.running_batch", "telemetry.kv_gauge_running_batch"))


@dataclass(frozen=True)
class Restated:
    changed: tuple[str, ...]          # deployment facts the --set changed
    re_estimated: tuple[str, ...]     # today's measurements dropped: the model estimates them again
    carried: tuple[str, ...]          # today's calibration given to the changed deployment
    kept: tuple[str, ...]             # measurements kept as they are (load, lengths, telemetry)
    left_behind: tuple[str, ...] = ()  # `fact = value` of today's engine a move to another leaves (migrate.py)
    moved_from: str | None = None      # the deployed engine, where the what-if is a move to another (migrate.py)

    def to_dict(self) -> dict[str, list[str]]:
        return {"changed": list(self.changed), "re_estimated": list(self.re_estimated),
                "carried": list(self.carried), "kept": list(self.kept),
                **({"left_behind": list(self.left_behind)} if self.left_behind else {})}

    def text(self) -> str:
        parts = [f"what-if of {', '.join(self.changed)}"]
        if self.left_behind:
            parts.append(f"left with today's engine (its own settings): {', '.join(self.left_behind)}")
        if self.re_estimated:
            parts.append(f"re-estimated (today's measurements dropped): {', '.join(self.re_estimated)}")
        if self.carried:
            parts.append(f"carried from today: {', '.join(self.carried)}")
        if self.kept:
            parts.append(f"kept as measured: {', '.join(self.kept)}")
        return "; ".join(parts)


def restate(today: Facts, today_derived: Mapping[str, Any], changed: Facts, set_paths: Sequence[str]
            ) -> tuple[Facts, Restated | None]:
    """The changed facts as a what-if of another deployment, or as they are (None) when the --set
    changed no deployment fact. A measurement the user set again stays: it is theirs."""
    deployment = tuple(sorted(path for path in set_paths
                              if path.startswith(DEPLOYMENT_SECTIONS) or path in DEPLOYMENT_FACTS))
    if not deployment or not any(today.values.get(p) != changed.values.get(p) for p in deployment):
        return changed, None
    values, provenance = dict(changed.values), dict(changed.provenance)
    dropped = tuple(path for path in STALE if path in values and path not in set_paths)
    for path in dropped:
        del values[path]
        provenance.pop(path, None)
    carried = []
    same_engine = today.values.get("workload.engine") == changed.values.get("workload.engine")
    for source, target in CARRIED:
        if source in today_derived and target not in values and dropped and (same_engine or target not in ENGINE_OWN):
            values[target] = today_derived[source]
            provenance[target] = Provenance("what-if", "derived", metric=source,
                                            note="today's calibration, carried to the changed deployment")
            carried.append(target)
    if "telemetry.kv_cache_usage_ratio" in values:
        for source, target in GAUGE_READ_ON:
            if source in today_derived and target not in values:
                values[target] = today_derived[source]
                provenance[target] = Provenance("what-if", "derived", metric=source,
                                                note="what today's KV gauge was read on, carried to the changed deployment")
                carried.append(target)
    kept = tuple(sorted(path for path, value in values.items() if path.startswith(MEASURED_SECTIONS)
                        and isinstance(value, (int, float)) and not isinstance(value, bool)
                        and path not in set_paths and path not in carried))
    return (Facts(values=dict(sorted(values.items())), provenance=dict(sorted(provenance.items()))),
            Restated(deployment, dropped, tuple(carried), kept))
