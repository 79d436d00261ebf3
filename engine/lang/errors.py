"""The one error the rule language raises: a message for the author and, where one helps, a hint."""
from __future__ import annotations


class ExprError(Exception):
    """`code` is the diagnostic it becomes: L005 (does not compile), or L007 (beyond kbopt's limits)."""

    def __init__(self, message: str, hint: str | None = None, code: str = "L005"):
        super().__init__(message)
        self.message, self.hint, self.code = message, hint, code


LIMIT = "L007"
