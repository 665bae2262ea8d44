"""Run per-shard tasks on Ray: the same ``map`` as :class:`LocalExecutor`, on a cluster.

``RayExecutor()`` starts a local Ray for the run; ``RayExecutor("auto")`` or
``RayExecutor("HOST:6379")`` joins a running cluster (``ray start --head`` there). Tasks
read and write the paths they are given, so on a cluster of several machines the input,
``--out`` and its work directory must be on a filesystem every node mounts at the same path.

Why Ray retries are safe: every task function writes its files under a unique temp name and
renames them into place, and skips work whose result is already on disk, so a task that runs
twice (its worker died, or a driver rerun) writes the same bytes. A worker that dies is
retried by Ray (``max_retries``); an exception raised by the task is not (it would fail the
same way again) and reaches the caller as itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from spr_data.errors import InputError, SprDataError
from spr_data.pipeline.executor import default_workers

__all__ = ["RayExecutor"]

T = TypeVar("T")
R = TypeVar("R")

INSTALL_HINT = "pip install 'spr-data[ray]'"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise InputError(f"the Ray executor needs Ray: {INSTALL_HINT}") from exc
    return ray


#: seconds to wait for a TCP connection to the cluster's address before Ray is asked to join
_REACH_TIMEOUT = 5.0


def _check_reachable(address: str | None) -> None:
    """One clear error for a ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing listens:
    Ray itself retries such an address for many minutes, deaf to Ctrl-C."""
    if address is None or address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return  # Ray reads what else it takes, and says what it does not
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_REACH_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"cannot reach Ray at {address}: {reason}; check the address (`ray "
                         "status` on the head node prints it) or drop --ray-address") from None


def _call(fn: Callable[[T], R], task: T) -> R:
    """The Ray task: one call of ``fn`` (a module-level function, pickled by reference)."""
    return fn(task)


class RayExecutor:
    """Per-shard tasks as Ray tasks, at most ``workers`` in flight, results as they finish.

    ``address`` None starts a new local Ray with ``workers`` CPUs (default: all cores) and
    stops it on :meth:`close`; an address joins that cluster (``"auto"``: the one ``ray start``
    made on this machine) and leaves it running; ``workers`` then caps the tasks in flight
    (default: the cluster's CPUs when it connects; pass it for a cluster that autoscales). A
    Ray already initialized in this process is used as it is and left so. A task whose
    worker or node dies is run again, up to ``max_retries`` times. Use it as a context
    manager, or call :meth:`close`.
    """

    def __init__(self, address: str | None = None, *, workers: int | None = None,
                 max_retries: int = 3) -> None:
        if workers is not None and workers < 1:
            raise InputError(f"workers must be at least 1, got {workers}")
        if max_retries < 0:
            raise InputError(f"max_retries must be 0 or more, got {max_retries}")
        self.address = address
        self.max_retries = max_retries
        self._requested = workers
        self._workers: int | None = None
        self._started = False  # whether this executor called ray.init (and so ends it)
        self._remote: Any = None

    def __enter__(self) -> RayExecutor:
        if self.address is not None:
            # a cluster to join is joined now, before the command prepares its output: one
            # that cannot be reached leaves no run behind (a Ray of its own starts lazily, so
            # that a command refused for its inputs starts none)
            self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def workers(self) -> int:
        """Tasks run at once: the CPUs of the Ray this executor uses, or ``workers`` if fewer."""
        if self._workers is None:
            self._connect()
        return self._workers or 1

    @property
    def hosts(self) -> int:
        """The machines of the cluster (its live nodes' distinct addresses): tasks on more
        than one need the run's directory on a filesystem they all mount."""
        ray = self._connect()
        return len({n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}) or 1

    def _connect(self) -> Any:
        ray = _import_ray()
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False,
                                       "logging_level": logging.ERROR,
                                       "log_to_driver": False, "configure_logging": True}
            if self.address is None:
                # a Ray of our own: no usage report home, a small object store (tasks move
                # paths and statistics, never rows)
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                options.update(num_cpus=self._requested or default_workers(),
                               object_store_memory=256 << 20)
            # ray.init installs its own SIGTERM handlers (Python's, and a native one that
            # aborts the process, which is turned off); the caller's (the CLI: unwind like
            # Ctrl-C, so that the run stops its tasks) is put back
            main = threading.current_thread() is threading.main_thread()
            on_sigterm = signal.getsignal(signal.SIGTERM) if main else None
            os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
            _check_reachable(self.address)
            try:
                # "local": a new Ray even where one runs on this machine (ray.init() would
                # join that one)
                ray.init(address=self.address or "local", **options)
                self._started = True
            except (ConnectionError, RuntimeError, ValueError) as exc:
                _shutdown(ray)
                where = self.address or "a local Ray"
                raise InputError(f"cannot start or join Ray at {where}: {exc}; check that "
                                 "`ray start` runs there (or drop --ray-address)") from exc
            except SystemExit as exc:  # Ray's SIGTERM handler ran: the caller's does now
                _shutdown(ray)
                if exc.code == signal.SIGTERM and callable(on_sigterm):
                    on_sigterm(signal.SIGTERM, None)
                raise
            except BaseException:  # Ctrl-C while Ray starts: stop what it started
                _shutdown(ray)
                raise
            finally:
                if on_sigterm is not None:
                    signal.signal(signal.SIGTERM, on_sigterm)
        if self._remote is None:
            self._remote = ray.remote(num_cpus=1, max_retries=self.max_retries)(_call)
        if self._workers is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self._workers = max(1, min(cpus, self._requested or cpus))
        return ray

    def close(self) -> None:
        """Stop the Ray this executor started (a joined cluster keeps running)."""
        if self._started:
            ray = _import_ray()
            ray.shutdown()
            self._started = False
        self._remote = None
        self._workers = None

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Yield ``(task index, fn(task))`` as tasks finish; on an error, on Ctrl-C or when the
        caller stops iterating, the tasks still in flight are cancelled (their workers killed:
        the tasks are idempotent, a rerun redoes them)."""
        ray = _import_ray()
        self._connect()
        limit = self.workers
        fn_ref = ray.put(fn)  # pickled once, not once per task
        pending: dict[Any, int] = {}
        queue = iter(enumerate(tasks))
        try:
            for i, task in queue:
                pending[self._remote.remote(fn_ref, task)] = i
                if len(pending) >= limit:
                    break
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    index = pending.pop(ref)
                    yield index, _result(ray, ref, index, self.max_retries)
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[self._remote.remote(fn_ref, nxt[1])] = nxt[0]
        finally:
            _cancel(ray, list(pending))


def _cancel(ray: Any, refs: list[Any], timeout: float = 30.0) -> None:
    """Cancel tasks in flight (killing their workers) and wait until Ray has stopped them.

    A cancel that reaches a task while its worker is still being started can be lost (seen on
    a two-node cluster: the task then ran to its end), so it is repeated until each task has
    ended or ``timeout`` seconds have passed.
    """
    deadline = time.monotonic() + timeout
    while refs and time.monotonic() < deadline:
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        try:
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        except Exception:  # Ray already shut down: nothing left to stop
            return


def _shutdown(ray: Any) -> None:
    with contextlib.suppress(Exception):
        ray.shutdown()


def _result(ray: Any, ref: Any, index: int, retries: int) -> Any:
    """A finished task's value; its own exception raised as itself (not wrapped by Ray)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, BaseException):
            raise cause from None
        raise
    except ray.exceptions.RayError as exc:  # the worker or node died more than max_retries
        raise SprDataError(
            f"task {index} failed on Ray {retries + 1} time(s) ({type(exc).__name__}); the "
            "finished tasks are kept: rerun the same command to resume") from exc
