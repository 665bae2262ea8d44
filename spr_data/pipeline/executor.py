"""Executors run per-shard tasks; stages never parallelize themselves.

``LocalExecutor`` uses processes on this machine (or none, with one worker);
``spr_data.pipeline.ray_executor.RayExecutor`` implements the same ``map`` on Ray, for corpora
that outgrow one machine.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol, TypeVar

from spr_data.errors import InputError
from spr_data.preload import pyarrow_first_use
from spr_data.reader import is_network_path

__all__ = ["Executor", "LocalExecutor", "check_shared", "default_workers", "die_with_parent",
           "executor_for"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Worker initializer: die when the parent dies, whatever kills it (the OOM killer,
    ``kill -9``, an eviction), and leave Ctrl-C to the parent.

    On Linux the kernel sends SIGKILL to the worker when its parent exits (``prctl``
    ``PR_SET_PDEATHSIG``); a parent that died before that was set is caught by ``getppid``.
    Workers ignore SIGINT: the terminal sends it to the whole process group, and the parent,
    which stops them, is the one that reports it (one line, no worker tracebacks). A worker
    starts with SIGINT blocked (``_submit``), so a Ctrl-C while it is still importing stays
    pending until it is ignored here.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked while this process started: see _submit
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the check below
            pass
    if os.getppid() != parent:  # the parent is already gone
        os._exit(1)


def _start_worker(parent: int) -> None:
    """Worker initializer: :func:`die_with_parent`, then what pyarrow imports on first use
    (in each worker's start-up, not in its first task)."""
    die_with_parent(parent)
    pyarrow_first_use()


T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Executor(Protocol):
    """Runs ``fn`` over tasks and yields ``(task index, result)`` as each finishes.

    ``fn`` is a module-level function and each task a picklable value: both travel to other
    processes (``LocalExecutor``) or machines (``RayExecutor``). ``workers`` is how many tasks
    run at once (recorded in reports).
    """

    @property
    def workers(self) -> int:
        ...

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        ...


def check_shared(directory: str | Path, executor: Executor, option: str = "--out",
                 mount_table: str | None = None) -> None:
    """Refuse a run directory on this machine's own disk when the executor's tasks run on
    several machines (``executor.hosts``, a Ray cluster's): the tasks on the other hosts would
    not find the files they read and write there, and their outputs would be lost to the
    driver."""
    hosts = int(getattr(executor, "hosts", 1))
    if hosts > 1 and not is_network_path(directory, mount_table):
        raise InputError(f"{option} {directory} is on this machine's own disk, but the tasks "
                         f"run on {hosts} hosts of the Ray cluster, which cannot read it; put "
                         f"{option} on a filesystem every node mounts at the same path (NFS, "
                         "Lustre, a bucket's FUSE mount)")


def executor_for(executor: Executor | None,
                 workers: int | None) -> AbstractContextManager[Executor]:
    """What a command runs its tasks on: the caller's ``executor`` (left open: the caller owns
    it), or local processes for this run alone."""
    if executor is None:
        return LocalExecutor(workers)
    if workers is not None:
        raise InputError("pass workers to the executor, not beside it "
                         "(RayExecutor(workers=N), LocalExecutor(N))")
    return nullcontext(executor)


class LocalExecutor:
    """Local worker processes (``spawn``: no state leaks from the parent); 1 means in-process.

    At most ``workers`` tasks are in flight, so memory is bounded by the workers, not by the
    number of shards. Used as a context manager, one pool of processes serves every ``map``
    (a process starts in about a second: imports, and fastText's model once per worker).
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or default_workers())
        self._pool: ProcessPoolExecutor | None = None
        #: tasks of a ``map`` submitted and not yet returned to its caller (one the caller
        #: stopped reading may still be running)
        self._pending: set[Future[Any]] = set()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._pool is None:
            return
        self._close(failed=exc_type is not None)

    def release(self) -> None:
        """Stop the worker processes now (they hold memory while idle); the next ``map``
        starts new ones."""
        self._close(failed=False)

    def _close(self, *, failed: bool) -> None:
        """Stop the pool. Interrupted or failed, or with every task returned (idle workers
        have nothing to finish), the workers are stopped at once: an idle worker that exits
        by itself takes 0.1-0.2 s to tear its interpreter down, twice a ``clean`` run, and
        the run waits. A task still running (a ``map`` its caller stopped reading) is waited
        for."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        if failed or all(future.done() for future in self._pending):
            _stop_workers(pool)
        self._pending.clear()
        pool.shutdown(wait=True, cancel_futures=True)

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                             mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker,
                                             initargs=(os.getpid(),))
        return self._pool

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        if self.workers == 1 or len(tasks) <= 1:
            for i, task in enumerate(tasks):
                yield i, fn(task)
            return
        pool = self._started()
        pending: dict[Future[R], int] = {}
        queue = iter(enumerate(tasks))

        def submit(i: int, task: T) -> None:
            future = _submit(pool, fn, task)
            pending[future] = i
            self._pending.add(future)

        try:
            for i, task in queue:
                submit(i, task)
                if len(pending) >= self.workers:
                    break
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = pending.pop(future)
                    self._pending.discard(future)
                    yield index, future.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        submit(*nxt)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _submit(pool: ProcessPoolExecutor, fn: Callable[..., R], *task: object) -> Future[R]:
    """``pool.submit`` with SIGINT blocked in this thread: ``submit`` is where the pool starts
    its processes, and a process inherits the signal mask of the thread that started it.

    A Ctrl-C meanwhile waits until ``submit`` returns. The mask alone does not make it wait:
    another thread of this process (pyarrow's, the progress bar's) takes the signal, and
    Python raises KeyboardInterrupt in the main thread at its next line, in the middle of
    sending a new worker what it needs to start; that worker then printed a traceback
    (``EOFError`` in ``spawn_main``). So the handler is held too, and called on return."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return pool.submit(fn, *task)
    held: list[int] = []
    # a handler can be set, and put back, from the main thread only (and not one set in C)
    handler = (signal.getsignal(signal.SIGINT)
               if threading.current_thread() is threading.main_thread() else None)
    if handler is not None:
        signal.signal(signal.SIGINT, lambda sig, _: held.append(sig))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(fn, *task)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
            if held and callable(handler):
                handler(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
            elif held and handler == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate a pool's worker processes (the pool keeps them in ``_processes``; there is
    no public way), so that a failed or interrupted run does not wait for tasks in flight,
    nor a finished one for idle workers to exit."""
    processes = dict(getattr(pool, "_processes", None) or {})
    for process in processes.values():
        if process.is_alive():
            process.terminate()
    for process in processes.values():
        process.join(timeout=5)
        if process.is_alive():  # pragma: no cover - ignored SIGTERM
            process.kill()
