"""Results a pack keeps under a key, bounded, each kept once its key comes back.

Some results of an advice depend on a few discrete things only (which rules fired, which rules
were left undecided and what each lacks), so the next advice that shares them takes the result
instead of working it out. In a batch most keys come back: replicas of one deployment, lines of
one fleet. With a large pack many never do (a 2,000-rule pack fires a different set of rules for
almost every fact set), and keeping each result at once filled memory with entries no advice read
again, which every full garbage collection then walked. So a result is kept only when its key has
been seen before: what repeats is kept from its second time on, a one-off costs one hash.
"""
from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """At most `most` results by key (all let go when full: a bound on what a long-lived process
    holds), and the hashes of up to 4 x `most` keys seen once."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.results: dict[K, V] = {}
        self._seen: set[int] = set()

    def get(self, key: K) -> V | None:
        return self.results.get(key)

    def offer(self, key: K, result: V) -> None:
        """Keep `result` if `key` was offered before (by its hash: a collision only keeps a
        result one sighting early)."""
        seen = hash(key)
        if seen not in self._seen:
            if len(self._seen) >= 4 * self.most:
                self._seen.clear()
            self._seen.add(seen)
            return
        if len(self.results) >= self.most:
            self.results.clear()
        self.results[key] = result
