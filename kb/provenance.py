"""Where a fact came from, and how far its value can be trusted."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kbopt.kb.vocabulary import QUALITIES


@dataclass(frozen=True)
class Provenance:
    source: str                    # input | set | catalog:<gpu> | nvml | dcgm | vllm | sglang | trace:<format> | ...
    quality: str                   # measured | proxy | derived | user | catalog
    metric: str | None = None      # the metric, field or column it was read from
    samples: int | None = None     # readings behind the value
    window_s: float | None = None  # time span those readings cover
    note: str | None = None

    def __post_init__(self) -> None:
        if self.quality not in QUALITIES:
            raise ValueError(f"unknown quality {self.quality!r}")

    def short(self) -> str:
        """`dcgm DCGM_FI_PROF_SM_ACTIVE, measured, 60 samples over 30 s` or just `input`."""
        head = self.source + (f" {self.metric}" if self.metric else "")
        if self.quality in ("user", "catalog") and not (self.samples or self.window_s):
            return head
        parts = [head, self.quality]
        if self.samples:
            parts.append(f"{self.samples} sample{'s' if self.samples != 1 else ''}"
                         + (f" over {self.window_s:g} s" if self.window_s else ""))
        elif self.window_s:
            parts.append(f"over {self.window_s:g} s")
        return ", ".join(parts)

    def detail(self) -> str:
        """short(), then the note: for facts tables."""
        return self.short() + (f" — {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "quality": self.quality, **self._details()}

    @cached_property
    def in_advice(self) -> dict[str, Any]:
        """What an advice's JSON writes beside a fact's value (`origin`, `quality` and the details
        given), made once per provenance: most facts share one (USER), and an advice writes every
        fact's. Callers copy it, never change it."""
        return {"origin": self.source, "quality": self.quality, **self._details()}

    def _details(self) -> dict[str, Any]:
        """The optional fields that are set, in DETAILS order."""
        return {name: value for name in DETAILS if (value := getattr(self, name)) is not None}


DETAILS = ("metric", "samples", "window_s", "note")     # the optional fields, as to_dict writes them
USER = Provenance("input", "user")
SET = Provenance("set", "user")
