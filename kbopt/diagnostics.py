"""One value for everything kbopt says about a rule pack (load errors and lint findings alike),
and the one renderer every command prints them with."""
from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int | None
    column: int | None
    code: str
    severity: str          # error | warning | info (from the code's entry in kbopt.codes)
    message: str
    snippet: str | None = None      # the offending text, as written or as the rule reads
    help: str | None = None

    @property
    def location(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")


def render(diagnostic: Diagnostic) -> str:
    """semgrep's shape: what and why on the first line, then where, the offending line and a hint."""
    d = diagnostic
    gutter = " " * len(str(d.line or ""))
    out = [f"{d.severity}[{d.code}]: {d.message}", f"{gutter} --> {d.location}"]
    if d.snippet:
        out.append(f"{d.line or gutter} | {d.snippet}")
    if d.help:
        out.append(f"{gutter} = help: {d.help}")
    return "\n".join(out)


def render_all(diagnostics) -> str:
    return "".join(render(d) + "\n\n" for d in diagnostics)
