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
    SpinnerColumn,
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
    "progress_phases",
    "progress_steps",
    "table",
    "warn",
]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """Write one JSON object to stdout and nothing else."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def print_error(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True, emoji=False)


def warn(message: str) -> None:
    """``warning: …`` on stderr, the message as plain text (brackets are not markup)."""
    err.print(Text.assemble(("warning: ", "yellow"), message), soft_wrap=True)


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


class _CountColumn(ProgressColumn):
    """``done / total`` when the total is known, else ``done`` (``≈`` for an estimate)."""

    def render(self, task: Task) -> Text:
        if not task.fields.get("unit"):  # a phase without a count (a trainer at work)
            return Text("")
        if task.total is None:
            return Text(f"{task.completed:,.0f}" if task.completed else "",
                        style="progress.download")
        return Text(f"{task.completed:,.0f} / {task.total:,.0f}", style="progress.download")


@contextmanager
def progress_phases(*, enabled: bool, units: dict[str, str] | None = None,
                    console: Console | None = None,
                    ) -> Iterator[Callable[[str, int, int | None], None]]:
    """One line per phase of a long job, in order (a spinner, then a tick when the next phase
    starts; a bar when the phase's total is known; what it counted; time), on a terminal.
    ``update(phase, done, total)``; total None while unknown. A no-op when piped."""
    target = console or err
    if not enabled or not target.is_terminal:
        yield lambda phase, done, total: None
        return
    units = units or {}
    with Progress(SpinnerColumn(finished_text="[green]✓[/]"),
                  TextColumn("{task.description:<15}"), BarColumn(), _CountColumn(),
                  TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), console=target,
                  transient=False) as bar:
        tasks: dict[str, Any] = {}

        def finish() -> None:
            for task in bar.tasks:
                if not task.finished:
                    done = max(task.completed, 1)
                    bar.update(task.id, total=done, completed=done)

        def update(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                finish()  # the earlier phases are over
                tasks[phase] = bar.add_task(phase, total=total, unit=units.get(phase, ""))
            bar.update(tasks[phase], completed=done, total=total)

        yield update
        finish()
