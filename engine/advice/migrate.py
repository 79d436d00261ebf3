"""The advice for an engine other than the deployed one: what `--emit ENGINE` writes for a move.

A migration's script is the new engine's own advice (its levers, caps and chunk budget, sized on
its memory rule) on today's model, GPUs and load, not the deployed engine's advice translated:
TGI cannot chunk a Gemma 3, so its advice has no chunk budget, where vLLM's has one (set 15 d7).
The move is a what-if of `workload.engine` that keeps today's measurements: they describe the
load, which moves with the deployment, and the new engine's model is calibrated to them."""
from __future__ import annotations

import dataclasses

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.restate import MEASURED_SECTIONS, Restated
from kbopt.engine.pack.rule import Pack
from kbopt.kb.engines import ENGINES
from kbopt.kb.facts import Facts
from kbopt.kb.provenance import Provenance

# Each engine's own: its version, a memory fraction in its own denominator (the profiles'
# `deployed_only`), its token budget, which means another thing in each (TGI's prefill-only batch,
# TensorRT-LLM's step with chunking off), and the KV blocks its memory rule gave it (the new engine's
# rule sizes its own pool): a move drops them, and the new engine's defaults stand unless its advice
# sizes one (set 17 d6: TRT-LLM's 8,192 carried as vLLM's budget on an L4 reserved 5 GiB of
# activations and asked for a second GPU).
ENGINE_OWN = ("serving.engine_version", "serving.memory_fraction", "serving.max_num_batched_tokens", "serving.num_gpu_blocks")


def advice_for(advice: Advice, engine: str, pack: Pack, evaluator: str, version: str | None = None) -> Advice:
    """`advice` itself where `engine` is the deployed one (or the facts name no covered engine)
    and no other version is asked; else the advice again with `engine`, at `version` where given,
    serving today's load, saying what it kept and left behind. A version asked is that engine's:
    `--set serving.engine_version` is the deployed engine's (set 18 d4: TGI's version set to 0.11.0
    on the way to vLLM)."""
    deployed = advice.facts.get("workload.engine")
    if (deployed not in ENGINES or deployed == engine) and (version is None or advice.facts.get("serving.engine_version") == version):
        return advice
    today = Facts(advice.facts, advice.provenance)
    moving = deployed in ENGINES and deployed != engine
    own = ENGINE_OWN if moving else ("serving.engine_version",)
    values = {path: value for path, value in today.values.items() if path not in own}
    provenance = {path: prov for path, prov in today.provenance.items() if path not in own}
    values["workload.engine"] = engine
    provenance["workload.engine"] = Provenance("what-if", "user", note=f"--emit {engine}: the deployment moved to it") \
        if moving else today.provenance.get("workload.engine", Provenance("what-if", "user", note=f"--emit {engine}"))
    if version is not None:
        values["serving.engine_version"] = version
        provenance["serving.engine_version"] = Provenance("what-if", "user", note=f"--emit {engine}@{version}")
    # Today's measurements stay: they are the load's own evidence (a missed ITL objective, the
    # queue), which the new engine's rules read and its model is calibrated to. Dropped as a --set
    # of the deployment drops them, the move lost the very symptom its advice answers (set 17 d2:
    # the SGLang script had no chunk budget and no word of the 35 ms objective it still missed).
    left = tuple(f"{path} = {today.values[path]} ({deployed}'s)" for path in own if path in today.values)
    earlier = advice.restated              # a --set what-if before the move: the header says both
    carried = earlier.carried if earlier else ()
    kept = tuple(sorted(path for path, value in values.items() if path.startswith(MEASURED_SECTIONS)
                        and isinstance(value, int | float) and not isinstance(value, bool) and path not in carried))
    changed = {*(earlier.changed if earlier else ()), *(("workload.engine",) if moving else ()),
               *(("serving.engine_version",) if version is not None else ())}
    restated = Restated(tuple(sorted(changed)), earlier.re_estimated if earlier else (), carried, kept, left,
                        str(deployed) if moving else None)
    moved = Facts(values=dict(sorted(values.items())), provenance=dict(sorted(provenance.items())))
    return dataclasses.replace(advise(moved, pack, evaluator), restated=restated)
