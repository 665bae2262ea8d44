"""Crash-safe file writing and hashing: temp name, fsync, rename."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

from spr_data.errors import OutputError

__all__ = ["TMP_SUFFIX", "atomic_write_bytes", "fsync_dir", "os_error_message", "sha256_file"]

TMP_SUFFIX = ".tmp"
_HASH_CHUNK = 8 << 20


def sha256_file(path: Path) -> str:
    """Return ``"sha256:<hex>"`` of a file's bytes, read in bounded chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(os_error_message(exc, path)) from exc
