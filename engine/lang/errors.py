"""The one error the rule language raises: a message for the author and, where one helps, a hint."""
from __future__ import annotations


class ExprError(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint
