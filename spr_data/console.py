"""The CLI's one output module: data to stdout (JSON with ``--json``), diagnostics to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

__all__ = [
    "err",
    "out",
    "print_error",
    "print_json",
    "progress_bytes",
    "progress_steps",
    "table",
]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """Write one JSON object to stdout and nothing else."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def print_error(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True, emoji=False)


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


@contextmanager
def progress_bytes(description: str, *, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A byte progress bar on a terminal; a no-op callback when piped or disabled."""
    if not enabled or not err.is_terminal:
        yield lambda done, total: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


class _RowRateColumn(ProgressColumn):
    """Rows per second of a task."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} rows/s" if speed else "", style="progress.data.speed")


@contextmanager
def progress_steps(*, enabled: bool) -> Iterator[Callable[[str, int, int], None]]:
    """One bar per named step (rows done of total, rows/s) on a terminal; a no-op otherwise."""
    if not enabled or not err.is_terminal:
        yield lambda step, done, total: None
        return
    with Progress(TextColumn("{task.description:<8}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("rows"), _RowRateColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bar.add_task(step, total=total)
            bar.update(tasks[step], completed=done, total=total)

        yield update
