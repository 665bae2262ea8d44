"""Outputs on an object store (``--out s3://bucket/prefix``): the same run, then an upload.

An object store cannot do what a run's work files need — rename into place, append, lock a
file, memory-map — so a run into ``s3://`` (or ``gs://``, ``abfs://``, ``hdfs://``) is the same
run as ever, in a *run directory* on a local disk or a shared mount (``work_dir``; by default
under the user's cache directory, named after the URL). A killed run resumes from it like any
other. Publishing uploads the finished dataset in the order a reader needs: every shard (each
one's stored size checked, transient faults retried to the reader's deadline), the extras
(report, model), the rejects' card and manifest, the dataset card, and the manifest last.
Then the run directory goes. A reader of the prefix sees the old dataset, no dataset, or the
whole new one, never a mix: on ``overwrite`` the old manifests are deleted before the first
new file is stored, and the old dataset's other files after the new manifest.

Nothing is deleted that spr-data did not write. The prefix is refused when it holds objects
that are not an spr-data dataset's. Before an upload starts, the names it writes and replaces
are recorded in ``PREFIX/.work/upload.json``, so a killed upload's objects stay known by name.
The prefix is held with a lock object ``PREFIX/.spr-data.lock`` for the whole run. An object
store gives pyarrow no create-if-absent, so this lock is best effort: two runs that write it
in the same instant are caught when each reads it back, not always.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import secrets
import shutil
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from spr_data.card import CARD_NAME
from spr_data.errors import DatasetError, InputError, LockError, OutputError
from spr_data.lock import LOCK_NAME, describe_holder, holder_alive, process_identity
from spr_data.manifest import MANIFEST_NAME, Manifest, parse_manifest, read_manifest
from spr_data.outdir import EXTRA_FILES, WORK_DIR
from spr_data.reader import (
    ArrowFileSystem,
    RetryPolicy,
    TransientError,
    arrow_call,
    check_no_credentials,
    is_url,
    redact,
)

__all__ = ["RemoteOutput", "check_output_location", "dataset_files", "is_remote_output",
           "output_location"]

_T = TypeVar("_T")
#: what a run records in the prefix before it uploads: the names it writes and replaces
UPLOAD_RECORD = f"{WORK_DIR}/upload.json"
_CHUNK = 8 << 20
#: objects uploaded at once
_UPLOADS = 8
#: URL schemes that name a web server, not a store spr-data could write to
_READ_ONLY = ("http", "https")
#: a URL that went through ``pathlib.Path``: ``s3://b/k`` became ``s3:/b/k``
_COLLAPSED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


def output_location(out: str | Path) -> str:
    """``out`` as the user meant it: a URL that went through ``pathlib.Path`` (``s3:/b/k``)
    gets its ``//`` back; a path stays a path."""
    text = os.fspath(out)
    return text if is_url(text) else _COLLAPSED_URL.sub(r"\1://", text, count=1)


def check_output_location(out: str | Path) -> str:
    """``out`` as :func:`output_location` reads it, refused when it is a URL no run can
    write (a web server's) or one that carries credentials."""
    url = output_location(out)
    if is_url(url):
        check_no_credentials(url)
        if urllib.parse.urlsplit(url).scheme.lower() in _READ_ONLY:
            raise InputError(f"--out {redact(url)}: an HTTP server cannot be written to; write "
                             "to a directory, or to an object store (s3://bucket/prefix)")
    return url


def is_remote_output(out: str | Path) -> bool:
    """Whether ``out`` names an object store (written by upload) rather than a directory."""
    return is_url(output_location(out))


def check_work_dir(out: str | Path, work_dir: str | Path | None) -> None:
    """A run directory is for an output on an object store; given with a local ``out``, it
    would be silently ignored (the run works in ``out`` itself): refused instead."""
    if work_dir is not None and not is_remote_output(out):
        raise InputError(f"a run directory (--work-dir {work_dir}) is for an --out on an "
                         f"object store (s3://…); {out} is a local directory, where the run "
                         "works itself: leave --work-dir out")


def dataset_files(directory: Path) -> list[str]:
    """The files of the finished dataset in ``directory``, in the order they are published:
    the shards, the rejects' shards, the extras, the rejects' card and manifest, the dataset
    card, and its manifest last."""
    manifest = read_manifest(directory)
    names = [s.file for s in manifest.shards]
    last: list[str] = []
    rejects_dir = manifest.rejects_dir
    if rejects_dir and (directory / rejects_dir / MANIFEST_NAME).is_file():
        rejects = read_manifest(directory / rejects_dir)
        names += [f"{rejects_dir}/{s.file}" for s in rejects.shards]
        last += [f"{rejects_dir}/{n}" for n in (CARD_NAME, MANIFEST_NAME)
                 if (directory / rejects_dir / n).is_file()]
    names += [n for n in EXTRA_FILES if n != CARD_NAME and (directory / n).is_file()]
    last += [n for n in (CARD_NAME,) if (directory / n).is_file()]
    return names + last + [MANIFEST_NAME]


def _default_run_dir(url: str) -> Path:
    """Where a run into ``url`` works by default: the user's cache directory, one directory
    per output URL (so that the same command resumes there)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    name = urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1] or "out"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return Path(cache) / "spr-data" / "runs" / f"{name}-{digest}"


@dataclass
class RemoteOutput:
    """The output prefix ``url`` on an object store and the local ``run_dir`` a run into it
    works in."""

    url: str
    run_dir: Path
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    client: Any = None
    prefix: str = ""
    key: str = ""
    bucket: str | None = None
    _token: str | None = None

    @classmethod
    def of(cls, out: str | Path, work_dir: str | Path | None = None,
           retry: RetryPolicy | None = None) -> RemoteOutput:
        """The remote output ``out`` names; its client is made here (a URL pyarrow cannot
        write is an error now, before any work)."""
        url = check_output_location(out)
        client, prefix, key, bucket = ArrowFileSystem().resolve(url)
        if not prefix.strip("/") or (bucket is not None and prefix.strip("/") == bucket):
            raise InputError(f"--out {url}: name a prefix inside the bucket "
                             f"({url.split('?')[0].rstrip('/')}/NAME), not the bucket itself")
        run_dir = Path(work_dir) if work_dir is not None else _default_run_dir(url)
        return cls(url, run_dir, retry or RetryPolicy(), client, prefix.rstrip("/"), key,
                   bucket)

    # -- objects ------------------------------------------------------------------------------

    def where(self, name: str = "") -> str:
        """The URL of ``name`` inside the prefix (for messages)."""
        base, mark, query = self.url.partition("?")
        return f"{base.rstrip('/')}/{name}{mark}{query}" if name else self.url

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        """``call`` on the store, transient faults retried to the policy's deadline; any
        other failure an :class:`OutputError` naming the object."""
        rng = random.Random()
        first_failure: float | None = None
        attempt = 0
        while True:
            attempt += 1
            try:
                return arrow_call(call, self.key)
            except TransientError as exc:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                wait = self.retry.wait(attempt, rng)
                if (now + wait - first_failure > self.retry.deadline
                        or (self.retry.attempts is not None and attempt >= self.retry.attempts)):
                    raise OutputError(f"{what} {self.where()}: gave up after {attempt} "
                                      f"attempts: {exc}") from None
                time.sleep(wait)
            except FileNotFoundError as exc:
                raise OutputError(f"{what} {self.where()}: {exc.strerror or exc}") from None
            except OSError as exc:
                raise OutputError(f"{what} {self.where()}: {exc.strerror or exc}") from None

    def _info(self, name: str) -> Any:
        return self._call("cannot read", lambda: self.client.get_file_info(
            f"{self.prefix}/{name}"))

    def _read(self, name: str) -> bytes | None:
        """The object ``name``'s bytes, or None when there is none."""
        import pyarrow.fs

        if self._info(name).type == pyarrow.fs.FileType.NotFound:
            return None

        def read() -> bytes:
            path = f"{self.prefix}/{name}"
            with self.client.open_input_stream(path, compression=None) as stream:
                return bytes(stream.read())

        return self._call("cannot read", read)

    def _read_json(self, name: str) -> Any:
        raw = self._read(name)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return {}

    def _write(self, name: str, data: bytes) -> None:
        def write() -> None:
            path = f"{self.prefix}/{name}"
            with self.client.open_output_stream(path, compression=None) as stream:
                stream.write(data)

        self._call("cannot write", write)

    def _put(self, path: Path, name: str) -> None:
        """Upload the local file ``path`` as ``name``; its stored size checked, a short or
        failed upload made again."""
        size = path.stat().st_size

        def upload() -> None:
            key = f"{self.prefix}/{name}"
            with open(path, "rb") as f, \
                    self.client.open_output_stream(key, compression=None) as stream:
                while chunk := f.read(_CHUNK):
                    stream.write(chunk)
            stored = self.client.get_file_info(key).size
            if stored != size:
                raise TransientError(f"{name}: {stored} of {size} bytes stored")

        self._call("cannot write", upload)

    def _delete(self, name: str) -> None:
        import pyarrow.fs

        def delete() -> None:
            if self.client.get_file_info(f"{self.prefix}/{name}").type \
                    == pyarrow.fs.FileType.File:
                self.client.delete_file(f"{self.prefix}/{name}")

        self._call("cannot delete", delete)

    def _check_place(self) -> None:
        """Refuse a bucket that does not exist and a prefix that is an object."""
        import pyarrow.fs

        bucket = self.bucket
        if bucket is not None and self._call("cannot read", lambda: self.client.get_file_info(
                bucket)).type == pyarrow.fs.FileType.NotFound:
            raise OutputError(f"--out {self.url}: there is no bucket {self.bucket!r} at this "
                              "endpoint; create it first (or check the URL's endpoint)")
        info = self._call("cannot read", lambda: self.client.get_file_info(self.prefix))
        if info.type == pyarrow.fs.FileType.File:
            raise OutputError(f"--out {self.url} is an object, not a prefix; choose a prefix "
                              "that holds no object of that name")

    def _names(self) -> list[str]:
        """Every object under the prefix, relative to it."""
        import pyarrow.fs

        selector = pyarrow.fs.FileSelector(self.prefix, recursive=True, allow_not_found=True)
        found = self._call("cannot list", lambda: self.client.get_file_info(selector))
        return sorted(i.path[len(self.prefix) + 1:] for i in found
                      if i.type == pyarrow.fs.FileType.File)

    # -- the run's life -----------------------------------------------------------------------

    @contextmanager
    def locked(self, command: str) -> Iterator[RemoteOutput]:
        """Hold the prefix's lock object for the ``with`` block."""
        self._acquire(command)
        try:
            yield self
        finally:
            self._release()

    def _acquire(self, command: str) -> None:
        self._check_place()
        found = self._read_json(LOCK_NAME)
        if found is not None:
            alive = holder_alive(found) if found else False
            if alive is not False:
                raise LockError(f"{self.url} is in use by another run ({describe_holder(found)}"
                                "); wait for it to finish, or if it is gone delete "
                                f"{self.where(LOCK_NAME)}")
            print(f"spr-data: took over the stale lock of {self.url} "
                  f"({describe_holder(found)}: that process is gone)", file=sys.stderr)
        token = secrets.token_hex(8)
        self._write(LOCK_NAME, json.dumps({**process_identity(command),
                                           "token": token}).encode())
        again = self._read_json(LOCK_NAME)
        if not isinstance(again, dict) or again.get("token") != token:
            raise LockError(f"{self.url} was taken by another run at the same moment "
                            f"({describe_holder(again if isinstance(again, dict) else None)})")
        self._token = token

    def _release(self) -> None:
        if self._token is None:
            return
        try:
            found = self._read_json(LOCK_NAME)
            if isinstance(found, dict) and found.get("token") == self._token:
                self._delete(LOCK_NAME)
        except OutputError as exc:  # the run's outcome stands; the lock is stale, and says so
            print(f"spr-data: could not remove the lock of {self.url}: {exc}", file=sys.stderr)
        self._token = None

    def _old_files(self, names: set[str]) -> list[str]:
        """The files of the dataset the prefix holds (its manifests list them), or []."""
        if MANIFEST_NAME not in names:
            return []
        try:
            manifest = self._manifest(MANIFEST_NAME)
            files = [MANIFEST_NAME, *(s.file for s in manifest.shards),
                     *(n for n in EXTRA_FILES if n in names)]
            rejects_dir = manifest.rejects_dir
            if rejects_dir and f"{rejects_dir}/{MANIFEST_NAME}" in names:
                rejects = self._manifest(f"{rejects_dir}/{MANIFEST_NAME}")
                files += [f"{rejects_dir}/{n}" for n in (MANIFEST_NAME, CARD_NAME)]
                files += [f"{rejects_dir}/{s.file}" for s in rejects.shards]
        except DatasetError as exc:
            raise OutputError(f"{self.url} holds a manifest that cannot be read, so which "
                              f"objects are the dataset's is unknown ({exc}); remove them "
                              "yourself or choose another --out") from None
        return files

    def _manifest(self, name: str) -> Manifest:
        raw = self._read(name)
        if raw is None:
            raise DatasetError(f"{name} is gone")
        return parse_manifest(raw, self.where(name))

    def check(self, *, overwrite: bool) -> None:
        """Refuse a prefix that holds a dataset (unless ``overwrite``) or any object that no
        spr-data run wrote; delete nothing."""
        names = set(self._names())
        if MANIFEST_NAME in names and not overwrite:
            raise OutputError(f"{self.url} already holds a dataset; pass overwrite=True "
                              "to replace it")
        recorded = self._read_json(UPLOAD_RECORD) or {}
        owned = {LOCK_NAME, UPLOAD_RECORD, *self._old_files(names),
                 *recorded.get("writing", []), *recorded.get("replacing", [])}
        strangers = sorted(names - owned)
        if strangers:
            raise OutputError(
                f"{self.url} is not empty and is not an spr-data dataset (it holds "
                f"{', '.join(strangers[:3])}, which spr-data did not write); choose a new or "
                "empty prefix, or move those objects away")

    def upload(self, directory: Path) -> None:
        """Publish the finished dataset in ``directory`` to the prefix (see the module's
        docstring for the order), replacing the dataset there. The shards and extras go up
        ``_UPLOADS`` at a time (an object store's bandwidth is per connection); the cards
        and manifests one by one, in order, after them."""
        new = dataset_files(directory)
        names = set(self._names())
        recorded = self._read_json(UPLOAD_RECORD) or {}
        replacing = sorted({*self._old_files(names), *recorded.get("writing", []),
                            *recorded.get("replacing", [])} - {LOCK_NAME, UPLOAD_RECORD})
        self._write(UPLOAD_RECORD, json.dumps({"writing": new, "replacing": replacing},
                                              indent=1).encode())
        # the old dataset stops being one before any of its files change
        for name in (MANIFEST_NAME, *(n for n in replacing if n.endswith("/" + MANIFEST_NAME))):
            if name in names:
                self._delete(name)
        last = [n for n in new if Path(n).name in (CARD_NAME, MANIFEST_NAME)]
        with ThreadPoolExecutor(_UPLOADS) as pool:
            for done in [pool.submit(self._put, directory / n, n) for n in new if n not in last]:
                done.result()
        for name in last:
            self._put(directory / name, name)
        for name in sorted(set(replacing) - set(new)):
            if name in names:
                self._delete(name)
        work = f"{self.prefix}/{WORK_DIR}"  # the record, and the folder marker the store keeps
        self._call("cannot delete", lambda: self.client.delete_dir(work))

    def remove_run_dir(self) -> None:
        """Remove the local run directory once its dataset is published."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
