"""Crash-safe file writing and hashing: temp name, fsync, rename."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
from pathlib import Path

from spr_data.errors import OutputError

__all__ = ["TMP_SUFFIX", "atomic_write_bytes", "drop_cache", "fsync_path", "is_temp_of",
           "is_token", "os_error_message", "sha256_file", "temp_path", "temp_token"]

TMP_SUFFIX = ".tmp"
_HASH_CHUNK = 8 << 20


def temp_path(path: Path, tag: str | None = None) -> Path:
    """A temporary name beside ``path`` that no other process uses: ``NAME.PID-TOKEN.tmp``.
    Two runs (or a run and the leftovers of a killed one) never write one temp file.

    The token is random, or ``tag``: a run's token for its output directory
    (:func:`spr_data.outdir.temp_tag`), recorded in the run's work state before the file is
    made. That record is what lets a later run prove a leftover temp file its own and remove
    it — a user's file of a like name is never taken for one."""
    token = tag if tag is not None else secrets.token_hex(4)
    return path.with_name(f"{path.name}.{os.getpid()}-{token}{TMP_SUFFIX}")


def is_token(text: str) -> bool:
    """Whether ``text`` is a temp name's token: 8 lowercase hex digits."""
    return len(text) == 8 and all(c in "0123456789abcdef" for c in text)


def temp_token(name: str, final: str) -> str | None:
    """The token of ``name`` when it is a temp file ``temp_path`` makes for the file named
    ``final``, else None."""
    if not (name.startswith(final + ".") and name.endswith(TMP_SUFFIX)):
        return None
    middle = name[len(final) + 1:-len(TMP_SUFFIX)]
    pid, _, token = middle.partition("-")
    return token if pid.isdigit() and is_token(token) else None


def is_temp_of(name: str, final: str) -> bool:
    """Whether ``name`` has the form of a temp file ``temp_path`` makes for ``final`` (the
    form only: whose it is, the run's recorded tokens say)."""
    return temp_token(name, final) is not None


def sha256_file(path: Path, *, uncached: bool = False) -> str:
    """Return ``"sha256:<hex>"`` of a file's bytes, read in bounded chunks. ``uncached``
    first drops the file's pages from the page cache, so the bytes come from the disk (or
    the server) again: how a checksum mismatch is re-read before it is called corruption."""
    digest = hashlib.sha256()
    # one buffer, read into again and again: a fresh 8 MB ``bytes`` a chunk is a fresh
    # mapping whose pages fault in (268 MB hashed in a new process: 0.10-0.16 s that way,
    # 0.08-0.09 s now)
    buffer = memoryview(bytearray(_HASH_CHUNK))
    with open(path, "rb", buffering=0) as f:
        if uncached:
            drop_cache(f.fileno())
        while size := f.readinto(buffer):
            digest.update(buffer[:size])
    return "sha256:" + digest.hexdigest()


def drop_cache(fd: int) -> bool:
    """Ask the kernel to forget the cached pages of the file open as ``fd`` (``posix_fadvise
    DONTNEED``; on NFS this also makes the client fetch the bytes again). False where the
    platform cannot."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):  # pragma: no cover - not Linux, or a pipe
        return False
    return True


def fsync_path(path: Path) -> None:
    """Make a file's bytes durable, or (for a directory) a rename inside it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def os_error_message(exc: OSError, path: Path | str, option: str = "--out") -> str:
    """One line that names the file and says what to do about a failed write (``option``
    names the command-line option that chose the place)."""
    if exc.errno == errno.ENOSPC:
        return (f"no space left on device while writing {path}; free space or choose another "
                f"{option}")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {exc.strerror}; choose a writable {option}"
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return f"{option} {path} is (or is inside) a file; choose a directory"
    return f"cannot write {path}: {exc.strerror or exc}"


#: numpy's ``tofile`` and ``np.save`` on a full disk (and a memory map it sizes there first:
#: "Not enough free space to write N bytes after offset M"): an OSError without an errno
_SHORT_WRITE = re.compile(r"\b\d+ requested and \d+ written\b"
                          r"|\bNot enough free space to write \d+ bytes")


def failed_write_message(exc: OSError) -> str | None:
    """One line for a write that failed for want of room or rights, wherever it happened (a
    work file deep in a step); None for any other OSError."""
    where = f" while writing {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) or (
            exc.errno is None and _SHORT_WRITE.search(str(exc))):
        return (f"no space left on device{where} ({exc.strerror or exc}); free space — a "
                "clean run's work files take a few times the dataset's size — and rerun the "
                "same command to resume")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write{where}: {exc.strerror}; choose a writable place"
    return None


def atomic_write_bytes(path: Path, data: bytes, *, tag: str | None = None) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one
    (``tag``: the run's token for the temp name, see :func:`temp_path`)."""
    tmp = temp_path(path, tag)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(os_error_message(exc, path)) from exc
