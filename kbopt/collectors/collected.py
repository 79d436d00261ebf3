"""Facts read by collectors, each with its provenance, and how several sources combine."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kbopt.kb.provenance import Provenance
from kbopt.kb.schema import FACTS_FORMAT

# Which reading wins when two sources give the same fact; on a tie, the finer source.
QUALITY_RANK = {"measured": 4, "derived": 3, "proxy": 2, "catalog": 1, "user": 0}
SOURCE_RANK = {"dcgm": 2, "nvml": 1}


@dataclass
class Collected:
    facts: dict[str, tuple[Any, Provenance]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)     # what a person should know (skipped fields, partial runs)

    def put(self, path: str, value: Any, provenance: Provenance) -> None:
        """Keep the better-quality reading of a fact (the first one on a tie)."""
        if value is None:
            return
        if isinstance(value, float):
            if not math.isfinite(value):
                # An exporter may say NaN or +Inf (an empty histogram's mean, a broken gauge): one bad
                # reading costs its fact, not the whole collection.
                self.notes.append(f"{provenance.source} {provenance.metric or path}: not a finite number "
                                  f"({value}); {path} left out")
                return
            value = round(value, 6)
        current = self.facts.get(path)
        rank = (QUALITY_RANK[provenance.quality], SOURCE_RANK.get(provenance.source, 0))
        if current is None or rank > (QUALITY_RANK[current[1].quality], SOURCE_RANK.get(current[1].source, 0)):
            self.facts[path] = (value, provenance)

    def merge(self, other: Collected) -> Collected:
        for path, (value, provenance) in other.facts.items():
            self.put(path, value, provenance)
        self.notes.extend(other.notes)
        return self

    def document(self) -> dict[str, Any]:
        """A facts v1 document: sections, then the provenance of every fact."""
        doc: dict[str, Any] = {"kbopt": FACTS_FORMAT}
        for path in sorted(self.facts):
            section, name = path.split(".", 1)
            doc.setdefault(section, {})[name] = self.facts[path][0]
        doc["provenance"] = {path: self.facts[path][1].to_dict() for path in sorted(self.facts)}
        return doc
