"""One exception per failure kind; the CLI turns each into a one-paragraph message and exit 2."""
from __future__ import annotations

from collections.abc import Sequence

from kbopt.diagnostics import Diagnostic, render

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2     # the command's exit codes (docs/usage.md)
MAX_MESSAGE = 4000      # characters of one error message: one paragraph, whatever the input quoted in it


def bounded(text: str) -> str:
    """A message cut to MAX_MESSAGE characters, saying how much was left out."""
    if len(text) <= MAX_MESSAGE:
        return text
    return text[:MAX_MESSAGE] + f"... ({len(text) - MAX_MESSAGE:,} more characters)"


class KboptError(Exception):
    """Bad input the user can fix. `str(error)` is the whole message."""

    exit_code = 2


class FactsError(KboptError):
    """A facts document that cannot be read or does not follow facts v1."""


class RuleError(KboptError):
    """A rule pack that cannot be used: carries every Diagnostic found, says the first and counts the rest."""

    def __init__(self, diagnostics: Sequence[Diagnostic], more: str | None = None):
        self.diagnostics = tuple(diagnostics)
        first = self.diagnostics[0]
        self.file, self.line, self.message, self.hint = first.file, first.line, first.message, first.help
        text = render(first)
        if len(self.diagnostics) > 1:
            text += f"\n{len(self.diagnostics) - 1} more error(s)" + (f": {more}" if more else "")
        super().__init__(text)


class EvaluationError(KboptError):
    """Rules that are individually valid but contradict each other on these facts."""
