"""An exclusive lock per output directory, so that two runs never write into one ``--out``.

The lock is an ``flock`` on ``OUT/.spr-data.lock`` plus a record in that file of who holds it
(pid, host, boot id, the process's start time, the command). The kernel drops an ``flock``
when its holder dies, even by SIGKILL; the record is what names the holder to a second run and
what tells a stale record (its process is gone, or the pid now belongs to another process)
from a live one on filesystems whose locks do not reach every client.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spr_data.errors import LockError, OutputError
from spr_data.fsio import os_error_message
from spr_data.reader import check_local_output

__all__ = ["LOCK_NAME", "OutputLock", "describe_holder", "holder_alive", "output_lock",
           "process_identity"]

LOCK_NAME = ".spr-data.lock"
#: errno values that mean "this filesystem does not do locks", not "someone holds it".
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:  # pragma: no cover - not Linux
        return ""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or
    None when there is no such process. With the boot id it names one process for good: a pid
    reused after the holder died has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ")"
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def process_identity(command: str) -> dict[str, Any]:
    """The record a lock holder writes: enough to name it and to tell whether it still runs."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "boot_id": _boot_id(),
            "start_ticks": _start_ticks(pid),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command}


def holder_alive(record: dict[str, Any]) -> bool | None:
    """Whether the process a lock record names still runs: True or False on this host, None
    (unknown) for another host."""
    if record.get("host") != socket.gethostname():
        return None
    if record.get("boot_id") and record.get("boot_id") != _boot_id():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    ticks = _start_ticks(pid)
    return ticks is not None and ticks == record.get("start_ticks")


def describe_holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "another spr-data run (it is starting)"
    return (f"pid {record.get('pid')} on {record.get('host')}, started {record.get('started')}: "
            f"{record.get('command')}")


def _read_record(fd: int) -> dict[str, Any] | None:
    try:
        data = os.pread(fd, 1 << 16, 0)
        found = json.loads(data) if data.strip() else None
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


@dataclass
class OutputLock:
    """A held lock; ``created`` says whether acquiring it created the output directory."""

    out: Path
    path: Path
    fd: int
    created: bool
    made_dirs: list[Path]
    took_over: dict[str, Any] | None = None

    def release(self, *, remove_created: bool = False) -> None:
        """Drop the lock and its file; with ``remove_created`` also the directories that
        acquiring it made, if they are empty (what a failed run created and nothing else)."""
        if self.fd < 0:
            return
        try:
            st = os.fstat(self.fd)
            now = os.stat(self.path)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1
        if remove_created:
            self.remove_dirs()

    def remove_dirs(self) -> None:
        """Remove the directories acquiring made, deepest first, while they are empty."""
        for d in self.made_dirs:
            try:
                d.rmdir()
            except OSError:
                break


def _make_dirs(out: Path) -> list[Path]:
    """Create ``out`` and its missing parents; the ones made, deepest first."""
    missing = []
    p = out
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
            missing.remove(d)  # another process made it at the same moment: not ours
    return missing


def acquire(out: Path, command: str, option: str = "--out") -> OutputLock:
    """Take the lock of ``out`` or raise ``LockError`` naming its holder (``option``: the
    command-line option that chose ``out``, for the messages)."""
    check_local_output(out)  # an s3://… --out would become a local directory "s3:"
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option} {out} is a file; choose a directory")
    try:
        made = _make_dirs(out)
    except OSError as exc:
        raise OutputError(os_error_message(exc, out, option)) from exc
    path = out / LOCK_NAME
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise OutputError(os_error_message(exc, path, option)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd)
            os.close(fd)
            raise LockError(f"{out} is in use by another run ({describe_holder(holder)}); wait for "
                            f"it to finish or choose another {option}") from None
        except OSError as exc:
            os.close(fd)
            if made:  # nothing else can be in what this call just made
                path.unlink(missing_ok=True)
                OutputLock(out, path, -1, True, made).remove_dirs()
            if exc.errno in _NO_LOCKS:
                raise LockError(
                    f"the filesystem of {out} cannot lock files ({exc.strerror}), so two runs "
                    f"into it could not be kept apart; choose {'an' if option == '--out' else 'a'} "
                    f"{option} on a local disk or a "
                    "filesystem with locks") from None
            raise OutputError(os_error_message(exc, path, option)) from exc
        # the file may have been removed (a holder releasing) between open and flock: then
        # this lock guards nothing; open the new one
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    else:  # pragma: no cover - only under a storm of competing runs
        raise LockError(f"could not take the lock of {out}; retry")
    found = _read_record(fd)
    took_over = None
    if found:
        alive = holder_alive(found)
        if alive is not False:
            os.close(fd)
            where = ("another host" if alive is None else "a process the filesystem's locks "
                     "do not reach")
            raise LockError(
                f"{out} is in use by another run ({describe_holder(found)}) on {where}; wait "
                f"for it to finish, or if it is gone remove {path}")
        took_over = found
    # no fsync: after a crash of the machine the boot id tells the record is stale anyway
    record = json.dumps(process_identity(command)).encode()
    lock = OutputLock(out, path, fd, bool(made) and made[0] == out, made, took_over)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError as exc:
        lock.release(remove_created=True)
        raise OutputError(os_error_message(exc, path)) from exc
    return lock


@contextmanager
def output_lock(out: str | Path, command: str | None = None, *,
                option: str = "--out") -> Iterator[OutputLock]:
    """Hold the lock of ``out`` for the ``with`` block; released on any exit. When the block
    fails, directories the lock created are removed if the run left them empty."""
    lock = acquire(Path(out), command or " ".join(sys.argv), option)
    if lock.took_over:
        print(f"spr-data: took over the stale lock of {out} "
              f"({describe_holder(lock.took_over)}: that process is gone)", file=sys.stderr)
    try:
        yield lock
    except BaseException:
        lock.release(remove_created=True)
        raise
    lock.release()
