"""The garbage collector's settings for a process that advises many times: a batch worker,
`kbopt fleet`, or a service of one's own that keeps a pack loaded.

An advice allocates tens of thousands of containers and frees all of them by reference counting
(none is left in a reference cycle: tests/test_garbage.py). At Python's default thresholds
(700, 10, 10) a collection still comes whenever more than 700 new containers live at once, and
the older generations' collections walk every object the process holds: the loaded pack (its
rules, compiled functions and kept results) first of all. With a 2,000-rule pack, whose advice
holds thousands, that is about 40% of each advice's time (5.3 ms against 3.2 ms in a run of
benchmarks/bench.py (c)); with the built-in pack, one collection every three documents of a batch.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_OBJECTS = 10_000     # allocations between two collections of the youngest generation


def tune_for_many_advices() -> None:
    """Call once the pack is loaded, in a process of one's own (it changes the whole process's
    collector): what exists now, the pack above all, is moved out of the collector's sight
    (gc.freeze; it is never freed, as a loaded pack never is), and the youngest generation is
    collected every YOUNG_OBJECTS allocations. An advice leaves nothing in reference cycles
    (tests/test_garbage.py): what it allocates is freed by reference counting as soon as it is
    let go, so the youngest generation's count stays low and its collections are rare."""
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, 50, 100)


@contextmanager
def many_advices() -> Iterator[None]:
    """tune_for_many_advices for the time of a block that advises (kbopt fleet, --facts-jsonl,
    and even a single advise, whose collections also walked the whole loaded pack), the
    collector's settings as they were once it ends: so a caller of kbopt's main() in its own
    process (the tests do) keeps its collector. What the block froze goes back to the collector,
    unless something had been frozen before (one cannot unfreeze only one's own)."""
    thresholds, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    tune_for_many_advices()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen_before:
            gc.unfreeze()
