"""Typed errors: user mistakes and infeasible answers are kept apart from bugs.

The CLI turns a :class:`UserError` into one or two lines on stderr and exit code 2,
and an :class:`Infeasible` outcome into a readable report and exit code 3. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INFEASIBLE = 3


class UserError(Exception):
    """Bad input: a config key, a file, a name. ``key`` names what to fix."""

    def __init__(self, message: str, key: str | None = None, fix: str | None = None):
        self.key = key
        self.fix = fix
        super().__init__(message)

    def render(self) -> str:
        head = f"error: {self}" if self.key is None else f"error: {self.key}: {self}"
        return head if not self.fix else f"{head}\n  fix: {self.fix}"


class ConfigError(UserError):
    """The composed configuration is invalid."""


class CatalogError(UserError):
    """A catalog file (GPU or model) is missing, malformed or names an unknown entry."""


class InfeasibleDeployment(UserError):
    """A single requested deployment cannot run (does not fit, bad parallelism)."""


class Infeasible(Exception):
    """An expected outcome, not a bug: no deployment meets the targets."""


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """'did you mean ...' text for an unknown name, or a list of what exists."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(name, choices, n=n, cutoff=0.4)
    if close:
        return "did you mean " + ", ".join(close) + "?"
    return "known: " + ", ".join(choices)
