"""Reads that survive network filesystems: retry what is transient, fail fast on the rest.

A SentencePiece trainer reading from a NAS died on a network blip that surfaced as EOF; NFS
``EIO``/``ESTALE`` kill training runs; a memory-mapped file whose NFS server blips is a
SIGBUS, not an exception. Everything spr-data reads from a filesystem that is not a local
disk goes through :class:`RetryingFile`:

* it knows how many bytes to expect (a manifest gives every shard's size and hash; a raw
  input its size when opened), so a short read or an early EOF is a fault, not the end;
* it retries only what is transient (:data:`TRANSIENT_ERRNOS`, dropped connections, HTTP
  5xx/429, truncated bodies) with exponential backoff, jitter and a deadline; after a fault it
  reopens the file (a new handle: a stale one is not reused), seeks back and goes on, and
  logs ``attempt i/N`` with the file and offset;
* it fails at once, naming the file, on permanent errors (missing, permission denied, a
  directory), and after the last attempt with the file, offset, attempts and last error.

:func:`fetch_verified` reads a whole shard and checks it against the manifest's hash,
reading again on a mismatch. Files on a network filesystem are never memory-mapped
(:func:`is_network_path` reads the mount table); see :mod:`spr_data.cache` for the local copy.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import io
import logging
import os
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

from spr_data.errors import DatasetError, InputError, ReadError, SprDataError
from spr_data.fsio import drop_cache

__all__ = [
    "TRANSIENT_ERRNOS",
    "ArrowFileSystem",
    "FileSystem",
    "HttpFileSystem",
    "LocalFileSystem",
    "ReaderOptions",
    "RetryPolicy",
    "RetryingFile",
    "TransientError",
    "arrow_call",
    "check_local_output",
    "check_no_credentials",
    "check_size",
    "fetch_verified",
    "file_size",
    "filesystem_for",
    "is_network_path",
    "is_url",
    "join_location",
    "location_name",
    "read_all",
    "redact",
]

log = logging.getLogger("spr_data.reader")
_T = TypeVar("_T")

#: errors a retry can cure: the network, the server or the client blipped
TRANSIENT_ERRNOS = frozenset({
    errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED,
    errno.ENOTCONN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EAGAIN, errno.EINTR,
})
#: filesystem types that live across a network (``fuse.*`` counts too: sshfs, s3fs, gcsfuse…)
NETWORK_FSTYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "lustre", "gpfs", "ceph", "glusterfs",
    "beegfs", "afs", "panfs", "wekafs", "virtiofs",
})
_CHUNK = 8 << 20


class TransientError(OSError):
    """A fault that is not an errno but is worth a retry: a dropped connection, an HTTP 5xx
    or 429, a body shorter than its headers said."""


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: by a deadline, not by a count. Waits grow from ``base_delay`` ×2 per
    attempt up to ``max_delay`` (with jitter: between half and all of that), and a read is
    given up when the next wait would pass ``deadline`` seconds after its first failure —
    so the default rides out a NAS or share that is gone for a few minutes (a failover, a
    reboot of the server) whatever the number of attempts that takes. ``attempts`` caps the
    count as well, for callers that want to fail fast (None: no cap)."""

    attempts: int | None = None
    base_delay: float = 0.05
    max_delay: float = 10.0
    deadline: float = 300.0

    def wait(self, attempt: int, rng: random.Random) -> float:
        cap = float(min(self.max_delay, self.base_delay * 2.0 ** min(attempt - 1, 60)))
        return cap / 2 + rng.uniform(0, cap / 2)


class FileSystem(Protocol):
    """Where bytes come from: local paths, or a server."""

    def open(self, path: str) -> BinaryIO:
        """A new seekable binary handle (every call: a stale handle is never reused)."""
        ...

    def size(self, path: str) -> int:
        ...

    def is_network(self, path: str) -> bool:
        """Whether ``path`` crosses a network (then it is never memory-mapped)."""
        ...


class LocalFileSystem:
    """Paths of this machine's filesystems, NFS/SMB/FUSE mounts included.

    ``network`` declares every path networked (True) or local (False); by default the mount
    table decides.
    """

    def __init__(self, network: bool | None = None) -> None:
        self.network = network

    def open(self, path: str) -> BinaryIO:
        return open(path, "rb", buffering=0)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def is_network(self, path: str) -> bool:
        return self.network if self.network is not None else is_network_path(path)

    def drop_cache(self, path: str) -> None:
        """Forget the file's cached pages, so that the next read fetches them again."""
        with contextlib.suppress(OSError), open(path, "rb") as f:
            drop_cache(f.fileno())


def _mounts(table: str) -> list[tuple[str, str]]:
    out = []
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 3:  # device, mount point (octal escapes: \\040 is a space), type
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[1])
            out.append((point, parts[2]))
    return out


def is_network_path(path: str | Path, mount_table: str | None = None) -> bool:
    """Whether ``path`` is on a network filesystem, by the type of its mount (Linux's
    ``/proc/mounts``; elsewhere, False)."""
    if mount_table is None:
        try:
            mount_table = Path("/proc/mounts").read_text()
        except OSError:
            return False
    target = os.path.realpath(path)
    best, fstype = "", ""
    for point, kind in _mounts(mount_table):
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, kind
    # a plain "fuse" mount (bindfs, rclone, gcsfuse…) may be a network one: treated as such
    return fstype in NETWORK_FSTYPES or fstype == "fuse" or fstype.startswith("fuse.")


class _HttpFile(io.RawIOBase):
    """A read-only, seekable view of one URL through HTTP range requests."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout, self.pos = url, timeout, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0:
            raise io.UnsupportedOperation("only absolute seeks")
        self.pos = offset
        return offset

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = len(buffer)
        if want == 0:
            return 0
        request = urllib.request.Request(
            self.url, headers={"Range": f"bytes={self.pos}-{self.pos + want - 1}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                if response.status == 200 and self.pos:
                    raise InputError(f"{self.url}: the server ignores range requests; serve "
                                     "the dataset with one that supports them (nginx, "
                                     "caddy, any object store)")
                data = response.read(want)
            _reached(self.url)
        except urllib.error.HTTPError as exc:
            _reached(self.url)
            if exc.code == 416:  # the range starts at or past the end
                return 0
            raise _http_error(self.url, exc.code) from exc
        except urllib.error.URLError as exc:
            raise _url_error(self.url, exc) from exc
        except (http.client.IncompleteRead, ConnectionError, TimeoutError,
                http.client.HTTPException) as exc:
            raise TransientError(f"{self.url}: {exc}") from exc
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


#: servers (``host:port``) this process has had an answer from: one that refuses connections
#: afterwards is restarting (an outage to wait out), not a wrong address
_REACHED: set[str] = set()


def _reached(url: str) -> None:
    _REACHED.add(urllib.parse.urlsplit(url).netloc)


def _url_error(url: str, exc: urllib.error.URLError) -> OSError:
    """A refused connection fails at once when the server was never reached (a wrong address,
    nobody listening); from a server that answered before, it is an outage: retried."""
    if isinstance(exc.reason, ConnectionRefusedError):
        if urllib.parse.urlsplit(url).netloc in _REACHED:
            return TransientError(f"{url}: connection refused (the server answered before; "
                                  "waiting for it to come back)")
        return OSError(errno.ECONNREFUSED, "connection refused (is the server up?)", url)
    return TransientError(f"{url}: {exc.reason}")


def _http_error(url: str, code: int) -> OSError:
    if code == 429 or code >= 500:
        return TransientError(f"{url}: HTTP {code}")
    if code in (401, 403):
        return PermissionError(errno.EACCES, f"HTTP {code}", url)
    if code == 404:
        return FileNotFoundError(errno.ENOENT, "HTTP 404", url)
    return OSError(errno.EIO, f"HTTP {code}", url)


class HttpFileSystem:
    """``http(s)://`` URLs read with range requests (the standard library; no extra
    dependency). Every URL counts as networked."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout

    def open(self, path: str) -> BinaryIO:
        return _HttpFile(path, self.timeout)  # type: ignore[return-value]

    def size(self, path: str) -> int:
        request = urllib.request.Request(path, method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                length = response.headers.get("Content-Length")
            _reached(path)
        except urllib.error.HTTPError as exc:
            _reached(path)
            raise _http_error(path, exc.code) from exc
        except urllib.error.URLError as exc:
            raise _url_error(path, exc) from exc
        except (ConnectionError, TimeoutError, http.client.HTTPException) as exc:
            raise TransientError(f"{path}: {exc}") from exc
        if length is None:
            raise OSError(errno.EIO, "no Content-Length", path)
        return int(length)

    def is_network(self, path: str) -> bool:
        return True


class _ArrowFile(io.RawIOBase):
    def __init__(self, inner: Any, key: str) -> None:
        self.inner, self.key = inner, key

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.inner.seek(offset, whence))

    def tell(self) -> int:
        return int(self.inner.tell())

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return arrow_call(lambda: int(self.inner.readinto(buffer)), self.key)

    def close(self) -> None:
        self.inner.close()
        super().close()


#: what pyarrow's object-store clients say (squashed: lower case, no spaces or underscores)
#: for a missing bucket or object; for refused credentials; for an endpoint never reached
_NOT_FOUND = ("doesnotexist", "nosuchkey", "nosuchbucket", "notfound", "httpstatus404")
_DENIED = ("accessdenied", "forbidden", "invalidaccesskeyid", "signaturedoesnotmatch",
           "expiredtoken", "invalidtoken", "unauthorized", "httpstatus401", "httpstatus403")
_UNREACHABLE = ("couldnotconnect", "couldnotresolve", "curlcode:6,", "curlcode:7,",
                "connectionrefused")


def arrow_call(call: Callable[[], _T], key: str, *, answers: bool = True) -> _T:
    """pyarrow's object-store clients raise a bare OSError (their own retries exhausted):
    a missing bucket or object and refused credentials are permanent; an endpoint that this
    process never reached (nothing listening, a wrong host) fails at once like a refused
    HTTP connection; any other network fault is worth another attempt. ``key`` names the
    endpoint (see :func:`_arrow_key`); ``answers``: whether the call's success shows that the
    endpoint answered (making a client needs no request when the URL names the endpoint)."""
    try:
        result = call()
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        _REACHED.add(key)
        raise
    except OSError as exc:
        text = " ".join(str(exc).split())
        squashed = re.sub(r"[\s_]", "", text.lower())
        if any(m in squashed for m in _NOT_FOUND):
            _REACHED.add(key)
            raise FileNotFoundError(errno.ENOENT, text) from exc
        if any(m in squashed for m in _DENIED):
            _REACHED.add(key)
            hint = ("; check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                    "AWS_SESSION_TOKEN or AWS_PROFILE)" if key.startswith("s3:") else "")
            raise PermissionError(errno.EACCES, f"access denied ({text}){hint}") from exc
        if exc.errno is None and key not in _REACHED \
                and any(m in squashed for m in _UNREACHABLE):
            detail = text.split("Details: ", 1)[-1]
            where = (" (is it up? is AWS_ENDPOINT_URL or ?endpoint_override= right?)"
                     if key.startswith("s3:") else "")
            code = errno.EHOSTUNREACH if "resolve" in squashed else errno.ECONNREFUSED
            # a ConnectionRefusedError is never retried (see _is_transient)
            raise ConnectionRefusedError(code, f"cannot reach the endpoint{where}: {detail}") \
                from exc
        if exc.errno is None:
            raise TransientError(text) from exc
        raise
    if answers:
        _REACHED.add(key)
    return result


#: object-store schemes whose paths are ``bucket/key``: one client serves every URL of an
#: endpoint (with its query options), made once per process and reused
_BUCKET_SCHEMES = ("s3", "gs", "gcs")
_CLIENTS: dict[tuple[Any, ...], Any] = {}


def _arrow_key(url: str) -> str:
    """What identifies the server behind ``url`` (scheme, host or bucket, query options):
    for the record of servers that answered before."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}?{parts.query}"


class ArrowFileSystem:
    """URLs that pyarrow reads natively: ``s3://``, ``gs://``, ``hdfs://``, ``abfs://``,
    ``file://``. Their clients retry the network themselves; the ``RetryingFile`` on top adds
    the size and hash checks, reopening and its own retries. Every URL counts as networked.

    ``s3://bucket/key`` reads the endpoint, region and credentials as pyarrow does (the
    ``AWS_*`` environment variables, ``~/.aws``; ``AWS_ENDPOINT_URL`` or
    ``AWS_ENDPOINT_URL_S3`` for an S3-compatible server), or from the URL's query
    (``?endpoint_override=HOST:PORT&scheme=http&region=…``). ``filesystem``, a pyarrow
    filesystem made by the caller (``pyarrow.fs.S3FileSystem(...)`` with its own timeouts,
    retry strategy or credentials), reads instead: locations are then its paths
    (``bucket/key``) or URLs whose scheme it serves."""

    def __init__(self, filesystem: Any = None) -> None:
        self.filesystem = filesystem

    def resolve(self, location: str) -> tuple[Any, str, str, str | None]:
        """(client, its path for ``location``, the endpoint's key, the bucket if any)."""
        import pyarrow.fs

        check_no_credentials(location)
        parts = urllib.parse.urlsplit(location) if is_url(location) else None
        bucket = parts.netloc if parts is not None and parts.scheme in _BUCKET_SCHEMES \
            and parts.netloc else None
        if self.filesystem is not None:
            client = self.filesystem
            kind = str(getattr(client, "type_name", "arrow"))
            if parts is None:
                inner = location
                if kind in ("s3", "gcs"):
                    bucket = location.split("/", 1)[0] or None
            else:
                inner = (bucket or "") + urllib.parse.unquote(parts.path)
            return client, inner.rstrip("/"), f"{kind}:{id(client)}", bucket
        if parts is None:  # a plain path: pyarrow's local filesystem
            parts = urllib.parse.urlsplit(location)
        key = _arrow_key(location)
        cache_key: tuple[Any, ...] | None = None
        if bucket is not None:
            # per process (a forked worker makes its own) and per environment (the
            # endpoint and credentials pyarrow reads from it)
            env = tuple(sorted((k, v) for k, v in os.environ.items()
                               if k.startswith(("AWS_", "GOOGLE_"))))
            cache_key = (os.getpid(), parts.scheme, parts.netloc, parts.query, env)
            client = _CLIENTS.get(cache_key)
            if client is not None:
                return (client, bucket + urllib.parse.unquote(parts.path).rstrip("/"), key,
                        bucket)
        try:
            client, path = arrow_call(lambda: pyarrow.fs.FileSystem.from_uri(location), key,
                                       answers=False)
        except ValueError as exc:  # pyarrow.ArrowInvalid: a URL it does not understand
            raise InputError(f"{location}: {exc}") from exc
        if cache_key is not None:
            _CLIENTS[cache_key] = client
        return client, str(path), key, bucket

    def open(self, path: str) -> BinaryIO:
        client, inner, key, _ = self.resolve(path)
        return _ArrowFile(arrow_call(lambda: client.open_input_file(inner), key),  # type: ignore[return-value]
                          key)

    def size(self, path: str) -> int:
        import pyarrow.fs

        client, inner, key, bucket = self.resolve(path)
        info = arrow_call(lambda: client.get_file_info(inner), key)
        if info.type == pyarrow.fs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, self._missing(client, bucket, key), path)
        if info.type == pyarrow.fs.FileType.Directory:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        return int(info.size)

    def _missing(self, client: Any, bucket: str | None, key: str) -> str:
        """Why a location is not found: its bucket does not exist, or only the object."""
        import pyarrow.fs

        if bucket is None:
            return "No such file"
        try:
            found = arrow_call(lambda: client.get_file_info(bucket), key)
        except OSError:
            return "No such object"
        if found.type == pyarrow.fs.FileType.NotFound:
            return f"no bucket {bucket!r} at this endpoint"
        return f"no such object in bucket {bucket!r}"

    def is_network(self, path: str) -> bool:
        return True


def is_url(location: str | Path) -> bool:
    """Whether ``location`` names a URL (``s3://…``, ``https://…``) rather than a path."""
    return bool(_URL.match(str(location)))


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
#: a URL that went through ``pathlib.Path`` (``s3://b/k`` became ``s3:/b/k``), as command
#: line options typed as paths receive it
_COLLAPSED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


def check_local_output(out: str | Path, option: str = "--out") -> None:
    """Refuse an output that is a URL: spr-data writes to local or mounted directories only
    (its outputs are locked, fsynced and renamed into place, which an object store cannot
    do); raises :class:`InputError` with the way out."""
    text = str(out)
    if not (is_url(text) or _COLLAPSED_URL.match(text)):
        return
    url = _COLLAPSED_URL.sub(r"\1://", text) if not is_url(text) else text
    raise InputError(f"{option} {redact(url)}: writing to a URL is not supported; write to a "
                     "local or shared-mount directory, then copy it up (e.g. aws s3 sync DIR "
                     f"{redact(url)})")


def redact(url: str) -> str:
    """``url`` without the user name or password it may carry."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))


def check_no_credentials(url: str) -> None:
    """Refuse a URL that carries credentials (``s3://KEY:SECRET@bucket/…``): a URL is
    written into messages, logs and the lineage of every dataset made from it."""
    if is_url(url) and "@" in urllib.parse.urlsplit(url).netloc:
        raise InputError(f"{redact(url)}: a URL with credentials in it would be written into "
                         "messages, logs and lineage; give them in the environment instead "
                         "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")


def join_location(location: str, name: str) -> str:
    """``name`` (a relative path: ``manifest.json``, ``_rejects``) inside the dataset at
    ``location``: a path, or a URL whose query (``?endpoint_override=…``) stays at the end."""
    if not is_url(location):
        return str(Path(location) / name)
    base, mark, query = location.partition("?")
    return f"{base.rstrip('/')}/{name}{mark}{query}"


def location_name(location: str | Path) -> str:
    """The last part of a path or of a URL's path (``s3://b/data/en-de?…`` → ``en-de``)."""
    text = str(location)
    if not is_url(text):
        return Path(text).name
    return urllib.parse.unquote(urllib.parse.urlsplit(text).path).rstrip("/").rsplit("/", 1)[-1]


def filesystem_for(path: str | Path) -> FileSystem:
    """The filesystem a path or URL names."""
    text = str(path)
    if text.startswith(("http://", "https://")):
        return HttpFileSystem()
    if "://" in text:
        return ArrowFileSystem()
    return LocalFileSystem()


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionRefusedError):  # nobody listening: retrying will not help
        return False
    if isinstance(exc, TransientError | ConnectionError | TimeoutError):
        return True
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


def _is_permanent(exc: BaseException) -> bool:
    return isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError
                      | NotADirectoryError)


class RetryingFile(io.RawIOBase):
    """A read-only, seekable file that retries transient faults (see the module docstring).

    ``size`` is what the file must hold (default: its size when opened); reading stops there,
    and a read that ends before it is a fault.
    """

    def __init__(self, fs: FileSystem, path: str, *, size: int | None = None,
                 policy: RetryPolicy | None = None, seed: int | None = None) -> None:
        self.fs, self.path = fs, path
        self.policy = policy or RetryPolicy()
        self._rng = random.Random(seed)
        self._handle: BinaryIO | None = None
        self.pos = 0
        self.retries = 0  # faults survived, for reports and tests
        self.expected = size if size is not None else self._call(lambda: fs.size(path), 0)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.expected}[whence]
        target = max(0, base + offset)
        if target != self.pos and self._handle is not None:
            try:
                self._handle.seek(target)
            except OSError:  # the next read reopens at the new position
                self._drop_handle()
        self.pos = target
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self.expected - self.pos)
        if want <= 0:
            return 0
        view = memoryview(buffer).cast("B")[:want]
        got = self._call(lambda: self._read_once(view), self.pos)
        self.pos += got
        return got

    def _read_once(self, view: memoryview) -> int:
        """One read straight into ``view`` (a failed attempt's bytes are overwritten by the
        next, at the same offset)."""
        if self._handle is None:
            self._handle = self.fs.open(self.path)
            self._handle.seek(self.pos)
        got = self._handle.readinto(view)  # type: ignore[attr-defined]
        if not got:  # the manifest (or the size at open) says there is more
            self._changed_under_us()
            raise TransientError(errno.EIO, f"early EOF at byte {self.pos} of "
                                 f"{self.expected}", self.path)
        return int(got)

    def _changed_under_us(self) -> None:
        """A local file now shorter than it must be was cut, or is being rewritten: no retry
        cures that (a network filesystem's early EOF may be a blip: those are retried)."""
        if self.fs.is_network(self.path):
            return
        try:
            now = self.fs.size(self.path)
        except OSError:
            return
        if now < self.expected:
            raise InputError(f"{self.path} holds {now:,} bytes where {self.expected:,} were "
                             "expected (its size when the run opened it, or its manifest's): "
                             "it was cut or changed while being read; rerun once it is whole")

    def _call(self, read: Callable[[], _T], offset: int) -> _T:
        started = time.monotonic()
        attempt = 1
        while True:
            try:
                return read()
            except Exception as exc:
                self._drop_handle()
                if _is_permanent(exc):
                    raise InputError(f"cannot read {self.path}: "
                                     f"{getattr(exc, 'strerror', None) or exc}") from exc
                if not _is_transient(exc):
                    if isinstance(exc, OSError) and not isinstance(exc, SprDataError):
                        raise ReadError(f"cannot read {self.path}: {_describe(exc)}") from exc
                    raise
                waited = time.monotonic() - started
                pause = self.policy.wait(attempt, self._rng)
                out_of_time = waited + pause > self.policy.deadline
                capped = self.policy.attempts is not None and attempt >= self.policy.attempts
                if capped or out_of_time:
                    why = (f"the deadline of {self.policy.deadline:.0f}s is reached"
                           if out_of_time else "no attempts are left")
                    raise ReadError(
                        f"cannot read {self.path} at byte {offset}: {attempt} attempts failed; "
                        f"last error: {_describe(exc)} (retried for {waited:.0f}s; {why})"
                    ) from exc
                of = "" if self.policy.attempts is None else f"/{self.policy.attempts}"
                log.warning("%s at byte %d: %s; attempt %d%s, waited %.1fs (giving up after "
                            "%.0fs)", self.path, offset, _describe(exc), attempt + 1, of,
                            waited, self.policy.deadline)
                self.retries += 1
                time.sleep(pause)
                attempt += 1

    def _drop_handle(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None

    def close(self) -> None:
        self._drop_handle()
        super().close()


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    text = getattr(exc, "strerror", None) or str(exc)
    return f"{name} ({text})" if name else text


def read_all(file: RetryingFile) -> bytearray:
    """Every expected byte of ``file``, into one buffer."""
    out = bytearray(file.expected)
    view = memoryview(out)
    file.seek(0)
    done = 0
    while done < file.expected:
        got = file.readinto(view[done:done + _CHUNK])
        if got == 0:
            break
        done += got
    return out


def _read_hashing(file: RetryingFile, hashing: bool) -> tuple[bytearray, str | None]:
    """Every expected byte of ``file`` and their sha256, each chunk hashed in a helper thread
    while the next is read (hashlib lets go of the GIL on big buffers)."""
    if not hashing:
        return read_all(file), None
    out = bytearray(file.expected)
    view = memoryview(out)
    digest = hashlib.sha256()
    with ThreadPoolExecutor(1) as pool:
        pending: Future[None] | None = None
        done = 0
        while done < file.expected:
            got = file.readinto(view[done:done + _CHUNK])
            if got == 0:
                break
            if pending is not None:
                pending.result()
            pending = pool.submit(digest.update, view[done:done + got])
            done += got
        if pending is not None:
            pending.result()
    return out, digest.hexdigest()


def file_size(fs: FileSystem, path: str, policy: RetryPolicy | None = None) -> int:
    """The size of ``path`` as its filesystem says it (a stat; the server's Content-Length),
    with transient faults retried."""
    with RetryingFile(fs, path, policy=policy) as f:
        return f.expected


def check_size(fs: FileSystem, path: str, size: int, policy: RetryPolicy | None = None,
               ) -> None:
    """Raise :class:`DatasetError` unless shard ``path`` holds ``size`` bytes (its manifest's):
    every buffer sized by a manifest is checked against the real file first, so a forged
    manifest cannot make a reader allocate more than the file holds."""
    actual = file_size(fs, path, policy)
    if actual != size:
        raise DatasetError(f"shard {path} is {actual:,} bytes, its manifest says {size:,}; "
                           "the manifest does not describe this file: run spr-data verify")


def fetch_verified(fs: FileSystem, path: str, *, size: int, sha256: str | None,
                   policy: RetryPolicy | None = None, rereads: int = 3,
                   sink: BinaryIO | None = None) -> bytearray:
    """Shard ``path`` in full, checked against its manifest hash (``"sha256:<hex>"``), read
    again on a mismatch (a flipped bit in transit); a mismatch that persists is reported with
    the shard's name. With ``sink``, the verified bytes are also written there."""
    check_size(fs, path, size, policy)  # before a buffer of ``size`` bytes is allocated
    rng = random.Random()
    for attempt in range(1, rereads + 1):
        with RetryingFile(fs, path, size=size, policy=policy) as f:
            data, digest = _read_hashing(f, sha256 not in (None, ""))
        if digest is None or "sha256:" + digest == sha256:
            if sink is not None:
                sink.write(data)
            return data
        if attempt == rereads:
            break
        # a flipped bit in transit or in a cached page: wait, drop the cached pages, read again
        pause = (policy or RetryPolicy()).wait(attempt + 2, rng)
        log.warning("%s: checksum mismatch; reading it again from the source (attempt %d/%d, "
                    "after %.2fs)", path, attempt + 1, rereads, pause)
        time.sleep(pause)
        drop = getattr(fs, "drop_cache", None)
        if drop is not None:
            drop(path)
    raise DatasetError(f"shard {path}: its bytes do not match the manifest's hash after "
                       f"{rereads} reads; the file is corrupt (run spr-data verify where it "
                       "lives, or restore it)")


VERIFY_MODES = ("remote", "always", "never")


@dataclass(frozen=True)
class ReaderOptions:
    """How a dataset's shards are read (see :func:`spr_data.open_dataset`).

    ``filesystem`` defaults to the one the path names (local, ``http(s)://``, or pyarrow's
    for ``s3://``, ``gs://``…; ``ArrowFileSystem(pyarrow_filesystem)`` reads through one of
    your own); ``retry`` to :class:`RetryPolicy`'s defaults. A dataset on a network
    filesystem is never mapped: with ``cache_dir`` its shards are copied there
    (``cache_limit`` bytes at most, least recently used evicted, the next shards prefetched)
    and the copies are mapped; without,
    each shard is read whole through the retrying reader (``max_in_memory`` kept at once).
    ``verify``: ``"remote"`` checks every byte that crossed the network against the
    manifest's hash; ``"always"`` also hashes local shards once when first opened;
    ``"never"`` skips both.
    """

    filesystem: FileSystem | None = None
    retry: RetryPolicy | None = None
    cache_dir: str | None = None
    cache_limit: int | None = None
    verify: str = "remote"
    max_in_memory: int = 4

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise InputError(f"verify={self.verify!r}: expected one of {', '.join(VERIFY_MODES)}")
        if self.max_in_memory < 1:
            raise InputError("max_in_memory must be at least 1")
