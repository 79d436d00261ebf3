"""An advice leaves no reference cycles: what it allocates is freed as soon as it is let go.

A batch worker or `kbopt fleet` advises thousands of times; objects caught in reference cycles
wait for the garbage collector, whose collections then walk them all (a model that held its own
bound method, an outcome that held the what-if holding it, a recursive closure). Leaving none
took 10,000 `--facts-jsonl` documents from 11-12 s to 9 s on the benchmark machine (docs/performance.md)."""
from __future__ import annotations

import gc
import json
import random
from pathlib import Path

import pytest

from kbopt.batch import advise_line
from kbopt.engine.advice.advisor import advise
from kbopt.engine.authoring.synthetic import random_telemetry, synthetic_pack
from kbopt.engine.evaluators import available_evaluators
from kbopt.kb.facts import facts_from_document, load_facts

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.json"))


def _cyclic_garbage(work) -> list[str]:
    """The types of the objects `work()` left in reference cycles (found by a full collection)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("evaluator", available_evaluators())
def test_an_advice_leaves_no_reference_cycles(pack, evaluator):
    facts = [load_facts(path) for path in EXAMPLES]
    rng = random.Random(3)
    for f in facts * 2:                # a pack in use: compiled, its kept results made
        advise(f, pack, evaluator)

    def work():
        for f in facts:
            advise(f, pack, evaluator).to_dict()
        for path in EXAMPLES:          # the batch's path, on lines with their telemetry varied
            document = json.loads(path.read_text())
            for name, value in (document.get("telemetry") or {}).items():
                if isinstance(value, float):
                    document["telemetry"][name] = round(min(1.0, value * rng.uniform(0.8, 1.2)), 4)
            advise_line(json.dumps(document), pack, evaluator)
    assert _cyclic_garbage(work) == []


def test_an_advice_on_a_chained_pack_leaves_no_reference_cycles():
    pack = synthetic_pack(300)
    rng = random.Random(300)
    documents = [{"telemetry": {k.split(".")[1]: v for k, v in random_telemetry(rng).items()}} for _ in range(40)]
    facts = [facts_from_document(document, "synthetic") for document in documents]
    for f in facts:
        advise(f, pack, "reference")
    assert _cyclic_garbage(lambda: [advise(f, pack, "reference") for f in facts]) == []
