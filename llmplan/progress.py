"""Progress display for long stages (rich), silent when disabled or not a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def make_console() -> Console:
    """A console wide enough for the plan tables, also when piped to a file."""
    c = Console()
    return c if c.is_terminal and c.width >= 120 else Console(width=160)


@contextmanager
def stage_progress(console: Console, enabled: bool = True) -> Iterator[Callable[[str, int, int], None] | None]:
    """Yields ``update(stage, done, total)``; one bar per stage name."""
    if not enabled or not console.is_terminal:
        yield None
        return
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update
