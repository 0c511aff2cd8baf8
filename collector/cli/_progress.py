"""One progress bar on stderr for the CLI's long commands (rich), or nothing at all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressBar:
    """The handle a command updates; ``count`` is the number of items (spans, rows) done."""

    def __init__(self, progress: Progress | None, task_id, unit: str):
        self._progress = progress
        self._task = task_id
        self.unit = unit

    def new_row(self, description: str, total: float | None) -> None:
        """Finish the current row and go on in a new one (e.g. one row per exported table)."""
        if self._progress is None:
            return
        self._task = self._progress.add_task(description, total=total, count="0")

    def update(self, *, description: str | None = None, completed: float | None = None,
               total: float | None = None, count: int | None = None) -> None:
        if self._progress is None or self._task is None:
            return
        fields = {}
        if description is not None:
            fields["description"] = description
        if completed is not None:
            fields["completed"] = completed
        if total is not None:
            fields["total"] = total
        if count is not None:
            fields["count"] = f"{count:,}"
        self._progress.update(self._task, **fields)


@contextmanager
def progress_bar(enabled: bool | None, *, total: float | None, unit: str) -> Iterator[ProgressBar]:
    """A progress bar on stderr; ``enabled=None`` shows it only when stderr is a terminal."""
    console = Console(stderr=True, force_terminal=True if enabled else None)
    if enabled is None:
        enabled = console.is_terminal
    if not enabled:
        yield ProgressBar(None, None, unit)
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[count]} " + unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        yield ProgressBar(progress, progress.add_task("", total=total, count="0") if total else None, unit)
