"""Faults on demand, for testing code that reads through :mod:`spr_data.reader`.

``FaultyFileSystem`` wraps a filesystem and, on a seeded schedule, makes reads fail the ways
a NAS does: ``EIO``, ``ESTALE``, ``ETIMEDOUT``, short reads, an early EOF, a flipped bit;
``vanish(path)`` makes a file disappear, ``flip_always`` corrupts one for good.
``serve_directory`` serves a directory over HTTP on loopback, dropping connections
mid-body, truncating bodies and answering 503 at random (seeded)::

    fs = FaultyFileSystem(rate=0.01, seed=0)
    ds = open_dataset("data/en-de", filesystem=fs)      # read as if over NFS
    with serve_directory("data", rate=0.05) as url:
        ds = open_dataset(f"{url}/en-de")

Both count what they injected (``injected``), so a test can check faults really happened.
"""

from __future__ import annotations

import errno
import io
import os
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

from spr_data.reader import FileSystem, LocalFileSystem

__all__ = ["FAULT_KINDS", "FaultyFileSystem", "corpora_dir", "corpora_path",
           "serve_directory"]

FAULT_KINDS = ("EIO", "ESTALE", "ETIMEDOUT", "short", "eof", "flip")


class FaultyFileSystem:
    """``base`` (local files by default) with faults injected into ``rate`` of the reads.

    Reads return at most ``max_read`` bytes, as a network filesystem's do, so a shard takes
    many reads and a 1% rate means many faults per epoch. Counts per kind are in
    ``injected``. Pickles (for DataLoader workers) with its schedule's state.
    """

    def __init__(self, base: FileSystem | None = None, *, rate: float = 0.01, seed: int = 0,
                 kinds: tuple[str, ...] = FAULT_KINDS, max_read: int = 64 << 10,
                 network: bool = True) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        self.base = base or LocalFileSystem(network=False)
        self.rate, self.kinds, self.max_read, self.network = rate, kinds, max_read, network
        self.injected: Counter[str] = Counter()
        self.opens = 0
        self.vanished: set[str] = set()
        self.flip_always: set[str] = set()
        self.denied: set[str] = set()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def vanish(self, path: str | Path) -> None:
        """From now on ``path`` does not exist."""
        self.vanished.add(str(path))

    def _draw(self) -> str | None:
        with self._lock:
            if self._rng.random() >= self.rate:
                return None
            kind = self._rng.choice(self.kinds)
            self.injected[kind] += 1
            return kind

    def _check(self, path: str) -> None:
        if path in self.vanished:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if path in self.denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)

    def open(self, path: str) -> BinaryIO:
        self._check(path)
        with self._lock:
            self.opens += 1
        if self._draw() in ("ESTALE", "EIO"):
            raise OSError(errno.ESTALE, "Stale file handle", path)
        return _FaultyFile(self, self.base.open(path), path)  # type: ignore[return-value]

    def size(self, path: str) -> int:
        self._check(path)
        return self.base.size(path)

    def is_network(self, path: str) -> bool:
        return self.network


class _FaultyFile(io.RawIOBase):
    def __init__(self, fs: FaultyFileSystem, inner: BinaryIO, path: str) -> None:
        self.fs, self.inner, self.path = fs, inner, path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        self.fs._check(self.path)
        want = min(len(buffer), self.fs.max_read)
        kind = self.fs._draw()
        if kind in ("EIO", "ESTALE", "ETIMEDOUT"):
            code = getattr(errno, kind)
            raise OSError(code, os.strerror(code), self.path)
        if kind == "eof":
            return 0
        data = bytearray(self.inner.read(want))
        if kind == "short" and len(data) > 1:
            self.inner.seek(-(len(data) - len(data) // 2), 1)
            data = data[:len(data) // 2]
        if (kind == "flip" or self.path in self.fs.flip_always) and data:
            data[len(data) // 2] ^= 0x10
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


class _Handler(BaseHTTPRequestHandler):
    server: _FlakyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _target(self) -> Path | None:
        relative = self.path.split("?", 1)[0].lstrip("/")
        target = (self.server.root / relative).resolve()
        if self.server.root not in target.parents and target != self.server.root:
            return None
        return target if target.is_file() else None

    def do_HEAD(self) -> None:
        target = self._target()
        if target is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(target.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:
        target = self._target()
        if target is None:
            self.send_error(404)
            return
        size = target.stat().st_size
        start, stop = 0, size - 1
        header = self.headers.get("Range")
        if header and header.startswith("bytes="):
            first, _, last = header[6:].partition("-")
            start, stop = int(first), min(int(last) if last else size - 1, size - 1)
            if start >= size:
                self.send_error(416)
                return
        with open(target, "rb") as f:
            f.seek(start)
            body = f.read(stop - start + 1)
        fault = self.server.draw()
        if fault == "503":
            self.send_error(503)
            return
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes {start}-{stop}/{size}")
        self.end_headers()
        if fault in ("drop", "truncate"):
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            if fault == "drop":  # a reset, not a clean close
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            return
        self.wfile.write(body)


class _FlakyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, rate: float, seed: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root.resolve()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.rate = rate
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def draw(self) -> str | None:
        with self._lock:
            if self._rng.random() >= self.rate:
                return None
            kind = self._rng.choice(("drop", "truncate", "503"))
            self.injected[kind] += 1
            return kind


@contextmanager
def serve_directory(root: str | Path, *, rate: float = 0.0,
                    seed: int = 0) -> Iterator[_FlakyServer]:
    """Serve ``root`` on a loopback port (``server.url``), with ``rate`` of the GETs dropped
    mid-body, truncated or answered 503."""
    server = _FlakyServer(Path(root), rate, seed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def corpora_path(given: str | Path | None = None) -> Path:
    """Where the real corpora that the tests and benchmarks read are: ``given``, else
    ``$SPR_DATA_CORPORA``, else ``shared/corpora`` beside the repository."""
    env = os.environ.get("SPR_DATA_CORPORA")
    return Path(given or env or Path(__file__).resolve().parents[2] / "shared" / "corpora")


def corpora_dir(given: str | Path | None = None) -> Path:
    """:func:`corpora_path`, or SystemExit saying what to do when nothing is there."""
    path = corpora_path(given)
    if not (path / "SOURCES.md").is_file():
        raise SystemExit(f"real corpora not found at {path}; pass --corpora or set "
                         "SPR_DATA_CORPORA to the shared/corpora folder")
    return path
