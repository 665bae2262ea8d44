"""A local copy of shards that live on a network filesystem, so they can be memory-mapped.

Mapping a file on NFS turns a server blip into a SIGBUS; mapping a verified local copy does
not. Copies are named by the shard's hash (two datasets holding the same shard share it),
written as ``<hash>.arrow.part-<pid>-<thread>``, fsynced, checked against the manifest's
hash and only then renamed into place, so a copy killed midway is never used (its part file
is removed by the next cache opened on the directory once its process is gone). Every use
refreshes a copy's time; above ``limit_bytes`` the least recently used copies are removed
(a process that still maps a removed copy keeps its mapping).
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from spr_data.errors import InputError, OutputError
from spr_data.fsio import fsync_path, os_error_message
from spr_data.manifest import ShardInfo
from spr_data.reader import FileSystem, RetryPolicy, check_size, fetch_verified

__all__ = ["ShardCache"]

_PART = ".part-"


class ShardCache:
    """Verified local copies of shards in ``directory``, at most ``limit_bytes`` in all."""

    def __init__(self, directory: str | Path, *, limit_bytes: int | None = None,
                 prefetch: int = 2) -> None:
        if (limit_bytes is not None and limit_bytes < 0) or prefetch < 0:
            raise InputError(f"a shard cache needs limit_bytes >= 0 and prefetch >= 0; got "
                             f"{limit_bytes} and {prefetch}")
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self.prefetch = prefetch
        self._reset()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(os_error_message(exc, self.directory, "--cache-dir")) from exc
        self._remove_dead_parts()

    def _reset(self) -> None:
        # reentrant: a future that is already done runs its callback at once, in this thread
        self._lock = threading.RLock()
        self._pending: dict[str, Future[Path]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        """A forked child (a DataLoader worker) inherits the pool's futures but not its
        thread: it starts afresh."""
        if self._pid != os.getpid():
            self._reset()

    def path_for(self, info: ShardInfo) -> Path:
        if not info.hash.startswith("sha256:"):
            raise OutputError(f"shard {info.file} has no hash in its manifest; it cannot be "
                              "cached (write the dataset with spr-data)")
        return self.directory / f"{info.hash.removeprefix('sha256:')}.arrow"

    def get(self, fs: FileSystem, path: str, info: ShardInfo,
            policy: RetryPolicy | None = None) -> Path:
        """The local copy of shard ``info`` (read from ``path`` on ``fs``), made if needed."""
        self._check_fork()
        target = self.path_for(info)
        with self._lock:
            pending = self._pending.get(target.name)
        if pending is not None:  # the prefetcher is on it
            return pending.result()
        if _fresh(target, info):
            os.utime(target)
            return target
        return self._fill(fs, path, info, policy)

    def prefetch_shards(self, jobs: list[tuple[FileSystem, str, ShardInfo]],
                        policy: RetryPolicy | None = None) -> None:
        """Copy these shards in one background thread (at most ``prefetch`` queued)."""
        if self.prefetch <= 0:
            return
        self._check_fork()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="spr-data-prefetch")
            for fs, path, info in jobs:
                name = self.path_for(info).name
                queued = sum(not f.done() for f in self._pending.values())
                if name in self._pending or queued >= self.prefetch \
                        or _fresh(self.path_for(info), info):
                    continue
                future = self._pool.submit(self._fill, fs, path, info, policy)
                self._pending[name] = future
                future.add_done_callback(functools.partial(self._forget, name))

    def _forget(self, name: str, _done: Future[Path] | None = None) -> None:
        with self._lock:
            self._pending.pop(name, None)

    def _fill(self, fs: FileSystem, path: str, info: ShardInfo,
              policy: RetryPolicy | None) -> Path:
        target = self.path_for(info)
        if _fresh(target, info):
            return target
        check_size(fs, path, info.bytes, policy)  # a forged size evicts nothing
        self._make_room(info.bytes)
        part = target.with_name(f"{target.name}{_PART}{os.getpid()}-{threading.get_ident()}")
        try:
            with open(part, "wb") as sink:
                fetch_verified(fs, path, size=info.bytes, sha256=info.hash, policy=policy,
                               sink=sink)
                sink.flush()
                os.fsync(sink.fileno())
            os.replace(part, target)
            fsync_path(self.directory)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise OutputError(os_error_message(exc, part, "--cache-dir")) from exc
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        return target

    def _make_room(self, incoming: int) -> None:
        """Remove least recently used copies until ``incoming`` more bytes fit the limit."""
        if self.limit_bytes is None:
            return
        copies = []
        for p in self.directory.glob("*.arrow"):
            try:
                st = p.stat()
            except FileNotFoundError:  # another process evicted it
                continue
            copies.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in copies)
        for _, size, p in sorted(copies):
            if total + incoming <= self.limit_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size

    def used_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.directory.glob("*.arrow"))

    def _remove_dead_parts(self) -> None:
        for part in self.directory.glob(f"*{_PART}*"):
            pid = part.name.rsplit(_PART, 1)[1].split("-", 1)[0]
            if not pid.isdigit() or not _alive(int(pid)):
                part.unlink(missing_ok=True)

    def drain(self) -> None:
        """Wait until every queued prefetch has finished."""
        self._check_fork()
        with self._lock:
            pending = list(self._pending.values())
        for future in pending:
            future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _fresh(target: Path, info: ShardInfo) -> bool:
    """A finished copy: only renamed into place after its hash matched."""
    try:
        return target.stat().st_size == info.bytes
    except FileNotFoundError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
