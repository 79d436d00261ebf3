"""What changed between two pieces of advice (a what-if, or two deployments)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbopt.engine.advice.model import Advice

_GONE = "(absent)"


@dataclass(frozen=True)
class Change:
    name: str
    before: Any
    after: Any


@dataclass(frozen=True)
class AdviceDiff:
    before_label: str
    after_label: str
    facts: tuple[Change, ...]                 # input facts that differ
    bottleneck: Change | None
    added: tuple[str, ...]                    # strategy keys chosen only after
    removed: tuple[str, ...]                  # strategy keys chosen only before
    params: tuple[Change, ...]                # `key.param` of strategies chosen in both
    newly_rejected: tuple[str, ...]
    no_longer_rejected: tuple[str, ...]
    estimates: tuple[Change, ...] = ()        # the performance model's numbers that moved, with their units

    @property
    def advice_changed(self) -> bool:
        return bool(self.bottleneck or self.added or self.removed or self.params
                    or self.newly_rejected or self.no_longer_rejected)


def _diff(before: Mapping[str, object], after: Mapping[str, object]) -> tuple[Change, ...]:
    return tuple(Change(k, before.get(k, _GONE), after.get(k, _GONE))
                 for k in sorted(set(before) | set(after)) if before.get(k, _GONE) != after.get(k, _GONE))


def compare(before: Advice, after: Advice, before_label: str, after_label: str) -> AdviceDiff:
    chosen_before = {s.key: s for s in before.strategies}
    chosen_after = {s.key: s for s in after.strategies}
    params = tuple(Change(f"{key}.{c.name}", c.before, c.after)
                   for key in sorted(set(chosen_before) & set(chosen_after))
                   for c in _diff(chosen_before[key].params, chosen_after[key].params))
    rejected_before = {r.key for r in before.rejected}
    rejected_after = {r.key for r in after.rejected}
    return AdviceDiff(
        before_label=before_label, after_label=after_label,
        facts=_diff(before.facts, after.facts),
        bottleneck=Change("bottleneck", before.bottleneck, after.bottleneck) if before.bottleneck != after.bottleneck else None,
        added=tuple(sorted(set(chosen_after) - set(chosen_before))),
        removed=tuple(sorted(set(chosen_before) - set(chosen_after))),
        params=params,
        newly_rejected=tuple(sorted(rejected_after - rejected_before)),
        no_longer_rejected=tuple(sorted(rejected_before - rejected_after)),
        estimates=tuple(Change(f"{name} ({e.unit})" if e.unit else name, e.value, after.estimates[name].value)
                        for name, e in before.estimates.items()
                        if name in after.estimates and after.estimates[name].value != e.value),
    )
