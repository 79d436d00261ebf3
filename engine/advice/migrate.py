"""The advice for an engine other than the deployed one: what `--emit ENGINE` writes for a move.

A migration's script is the new engine's own advice (its levers, caps and chunk budget, sized on
its memory rule) on today's model, GPUs and load, not the deployed engine's advice translated:
TGI cannot chunk a Gemma 3, so its advice has no chunk budget, where vLLM's has one (set 15 d7).
The move is a what-if of `workload.engine`, restated as a --set of the deployment is (restate.py):
today's measurements the move would change are re-estimated with today's calibration."""
from __future__ import annotations

import dataclasses

from kbopt.engine.advice.advisor import advise
from kbopt.engine.advice.model import Advice
from kbopt.engine.advice.restate import Restated, restate
from kbopt.engine.pack.rule import Pack
from kbopt.kb.engines import ENGINES
from kbopt.kb.facts import Facts
from kbopt.kb.provenance import Provenance

# Each engine's own: its version, a memory fraction in its own denominator (the profiles'
# `deployed_only`), and its token budget, which means another thing in each (TGI's prefill-only batch,
# TensorRT-LLM's step with chunking off): a move drops them, and the new engine's defaults stand
# unless its advice sizes one (set 17 d6: TRT-LLM's 8,192 carried as vLLM's budget on an L4 reserved
# 5 GiB of activations and asked for a second GPU).
ENGINE_OWN = ("serving.engine_version", "serving.memory_fraction", "serving.max_num_batched_tokens")


def advice_for(advice: Advice, engine: str, pack: Pack, evaluator: str) -> Advice:
    """`advice` itself where `engine` is the deployed one (or the facts name no covered engine);
    else the advice again with `engine` serving today's load, saying what it kept and re-estimated."""
    deployed = advice.facts.get("workload.engine")
    if deployed not in ENGINES or deployed == engine:
        return advice
    today = Facts(advice.facts, advice.provenance)
    values = {path: value for path, value in today.values.items() if path not in ENGINE_OWN}
    provenance = {path: prov for path, prov in today.provenance.items() if path not in ENGINE_OWN}
    values["workload.engine"] = engine
    provenance["workload.engine"] = Provenance("what-if", "user", note=f"--emit {engine}: the deployment moved to it")
    facts, restated = restate(today, advice.derived, Facts(values=values, provenance=provenance), ("workload.engine",))
    assert restated is not None            # workload.engine changed
    left = tuple(f"{path} = {today.values[path]} ({deployed}'s)" for path in ENGINE_OWN if path in today.values)
    earlier = advice.restated              # a --set what-if before the move: the header says both
    carried = tuple(dict.fromkeys((earlier.carried if earlier else ()) + restated.carried))
    restated = Restated(tuple(sorted({*(earlier.changed if earlier else ()), *restated.changed})),
                        tuple(dict.fromkeys((earlier.re_estimated if earlier else ()) + restated.re_estimated)),
                        carried, tuple(path for path in restated.kept if path not in carried), left, str(deployed))
    return dataclasses.replace(advise(facts, pack, evaluator), restated=restated)
