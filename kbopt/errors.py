"""One exception per failure kind; the CLI turns each into a one-paragraph message and exit 2."""
from __future__ import annotations


class KboptError(Exception):
    """Bad input the user can fix. `str(error)` is the whole message."""

    exit_code = 2


class FactsError(KboptError):
    """A facts document that cannot be read or does not follow facts v1."""


class RuleError(KboptError):
    """A rule file that cannot be loaded; names the file and line."""

    def __init__(self, file: str, line: int | None, message: str, hint: str | None = None):
        self.file, self.line, self.message, self.hint = file, line, message, hint
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {message}" + (f" (hint: {hint})" if hint else ""))


class EvaluationError(KboptError):
    """Rules that are individually valid but contradict each other on these facts."""
