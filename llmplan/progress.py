"""Progress display for long stages (rich), on stderr only.

Bars go to standard error, never to standard output, so tables, JSON and redirected output
are the same with and without them. They are shown only when stderr is a terminal and the
caller enables them (``output.progress=false`` turns them off in `plan`/`simulate`; the
offline tools take ``--quiet`` / ``--no-progress``), and they vanish when the stage ends
(``transient``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: update(stage, done, total): one bar per stage name
StageUpdate = Callable[[str, int, int], None]


def make_console() -> Console:
    """A console wide enough for the plan tables, also when piped to a file; a width the user
    sets with ``COLUMNS`` (e.g. ``COLUMNS=100 llmplan plan``) is kept (the tables fit 100 columns)."""
    c = Console()
    if os.environ.get("COLUMNS", "").strip().isdigit():
        return c
    return c if c.is_terminal and c.width >= 120 else Console(width=160)


def stderr_console() -> Console:
    """The console progress bars draw on: the current ``sys.stderr`` (looked up at call time)."""
    return Console(file=sys.stderr, stderr=True)


def shows(enabled: bool = True) -> bool:
    """Whether a bar would be drawn: enabled and stderr is a terminal."""
    return bool(enabled) and stderr_console().is_terminal


@contextmanager
def stage_progress(console: Console | None = None, enabled: bool = True) -> Iterator[StageUpdate | None]:
    """Yields ``update(stage, done, total)`` drawing one bar per stage name on stderr, or None
    when disabled or stderr is not a terminal. ``console`` is accepted for old callers and not
    drawn on (it is the stdout console)."""
    err = stderr_console()
    if not enabled or not err.is_terminal:
        yield None
        return
    with Progress(TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


@contextmanager
def fraction_progress(label: str, enabled: bool = True) -> Iterator[Callable[[float], None] | None]:
    """Yields ``update(fraction)`` (0..1) for one stage on stderr (a simulation), or None."""
    with stage_progress(None, enabled) as update:
        if update is None:
            yield None
            return
        yield lambda f: update(label, int(round(1000 * min(max(f, 0.0), 1.0))), 1000)


@contextmanager
def step(update: StageUpdate | None, stage: str) -> Iterator[None]:
    """Mark a single-step stage (an ILP, one simulation) on an existing ``stage_progress``."""
    if update is not None:
        update(stage, 0, 1)
    yield
    if update is not None:
        update(stage, 1, 1)
