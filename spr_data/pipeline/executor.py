"""Executors run per-shard tasks; stages never parallelize themselves.

``LocalExecutor`` uses processes on this machine (or none, with one worker). A distributed
executor (Ray) implements the same ``map`` for corpora that outgrow one machine.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Protocol, TypeVar

__all__ = ["Executor", "LocalExecutor", "default_workers"]

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Executor(Protocol):
    """Runs ``fn`` over tasks and yields ``(task index, result)`` as each finishes."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        ...


class LocalExecutor:
    """Local worker processes (``spawn``: no state leaks from the parent); 1 means in-process.

    At most ``workers`` tasks are in flight, so memory is bounded by the workers, not by the
    number of shards. Used as a context manager, one pool of processes serves every ``map``
    (a process starts in about a second: imports, and fastText's model once per worker).
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or default_workers())
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        if self.workers == 1 or len(tasks) <= 1:
            for i, task in enumerate(tasks):
                yield i, fn(task)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             mp_context=multiprocessing.get_context("spawn"))
        pool = self._pool
        pending: dict[Future[R], int] = {}
        queue = iter(enumerate(tasks))
        try:
            for i, task in queue:
                pending[pool.submit(fn, task)] = i
                if len(pending) >= self.workers:
                    break
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = pending.pop(future)
                    yield index, future.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(fn, nxt[1])] = nxt[0]
        except BaseException:
            for future in pending:
                future.cancel()
            raise
