"""``ShardWriter``: streams record batches into crash-safe, memory-mappable shard files."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import OutputError
from spr_data.fsio import fsync_path, os_error_message, temp_path
from spr_data.manifest import ShardInfo
from spr_data.schema import ID

__all__ = ["DEFAULT_SHARD_BYTES", "MAX_SHARD_BYTES", "REJECTS_SHARD_SUFFIX", "ShardWriter",
           "shard_name", "write_shard_file"]

DEFAULT_SHARD_BYTES = 256 << 20
#: Arrow ``string`` columns address at most 2 GiB; keep every shard well under that.
MAX_SHARD_BYTES = 1 << 30


#: Reject shards end in another suffix than ``.arrow``, so that a ``DIR/**/*.arrow`` glob
#: (polars, and the like) reads only the kept rows; ``.arrow`` stays inside the name, which is
#: what Hugging Face ``datasets`` looks for to pick its Arrow reader.
REJECTS_SHARD_SUFFIX = ".arrow.rejects"


def shard_name(index: int, *, rejects: bool = False) -> str:
    """``shard-NNNNN.arrow``, or ``shard-NNNNN.arrow.rejects`` for a shard of rejected rows."""
    return f"shard-{index:05d}" + (REJECTS_SHARD_SUFFIX if rejects else ".arrow")


class ShardWriter:
    """Writes batches into ``shard-NNNNN.arrow`` files of one record batch each.

    A shard is one uncompressed record batch, so a reader maps it with zero copies and gathers
    random rows with a single ``take``. A shard rolls over before it passes ``shard_rows`` rows
    or ``shard_bytes`` bytes (counting text bytes plus fixed-width columns); it is written to a
    temporary name, fsynced, then renamed, in a background thread. Memory held is about two
    shards: the one filling and the one being written (or, while a shard is assembled, its
    pieces and its copy).
    """

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        *,
        shard_rows: int | None = None,
        shard_bytes: int | None = DEFAULT_SHARD_BYTES,
        claim: Callable[[Path], None] | None = None,
        rejects: bool = False,
        tag: str | None = None,
    ) -> None:
        """``claim(path)`` is called before each shard file is created (the run records what
        it writes, so that only that is ever removed); ``rejects`` names the shards as reject
        shards (see :func:`shard_name`); ``tag`` is the run's token for temp names."""
        if shard_rows is not None and shard_rows < 1:
            raise ValueError(f"shard_rows must be at least 1, got {shard_rows}")
        if shard_bytes is not None and shard_bytes < 1:
            raise ValueError(f"shard_bytes must be at least 1, got {shard_bytes}")
        self.directory = directory
        self.schema = schema
        self.shard_rows = shard_rows
        self.shard_bytes = min(shard_bytes or MAX_SHARD_BYTES, MAX_SHARD_BYTES)
        self.shards: list[ShardInfo] = []
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spr-data-shard")
        self._in_flight: Future[ShardInfo] | None = None
        self._claim = claim
        self._rejects = rejects
        self._tag = tag

    def write(self, batch: pa.RecordBatch) -> None:
        """Append rows; full shards are written as they fill."""
        sizes = np.cumsum(_row_nbytes(batch))
        done = 0
        while done < batch.num_rows:
            room = batch.num_rows - done
            if self.shard_rows is not None:
                room = min(room, self.shard_rows - self._pending_rows)
            base = sizes[done - 1] if done else 0
            fits = int(np.searchsorted(sizes[done:], base + self.shard_bytes - self._pending_bytes,
                                       side="right"))
            room = min(room, fits)
            if room == 0 and self._pending_rows == 0:
                room = 1  # one row larger than a whole shard still gets a shard
            if room == 0:
                self._flush()
                continue
            self._pending.append(batch.slice(done, room))
            self._pending_rows += room
            self._pending_bytes += int(sizes[done + room - 1] - base)
            done += room
            if self.shard_rows is not None and self._pending_rows >= self.shard_rows:
                self._flush()

    def close(self) -> list[ShardInfo]:
        """Write the last shard, wait for every write, and return the shards' records."""
        self._flush()
        self._wait()
        self._pool.shutdown()
        if self.directory.exists():
            fsync_path(self.directory)
        return self.shards

    def abort(self) -> None:
        """Stop writing after a failure elsewhere; the caller removes the files."""
        self._pending = []
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _flush(self) -> None:
        """Hand the pending rows to the background thread as one shard.

        Writing, fsync and hashing release the GIL, so they overlap the parsing of the next
        rows; at most one shard is in flight, which bounds memory.
        """
        if not self._pending_rows:
            return
        self._wait()  # the previous shard is written before this one is copied: ~2 shards held
        table = pa.Table.from_batches(self._pending, self.schema).combine_chunks()
        batch = table.to_batches()[0]  # one batch: combine_chunks left one chunk per column
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        name = shard_name(len(self.shards), rejects=self._rejects)
        if self._claim is not None:
            self._claim(self.directory / name)
        self._in_flight = self._pool.submit(self._write_shard, name, batch)

    def _wait(self) -> None:
        if self._in_flight is not None:
            future, self._in_flight = self._in_flight, None
            self.shards.append(future.result())

    def _write_shard(self, name: str, batch: pa.RecordBatch) -> ShardInfo:
        self.directory.mkdir(parents=True, exist_ok=True)
        return write_shard_file(self.directory / name, batch, tag=self._tag)


def write_shard_file(path: Path, batch: pa.RecordBatch, *, digest: bool = True,
                     tag: str | None = None) -> ShardInfo:
    """Write one record batch as a shard, hashed as it is written: temp name, fsync, rename.

    The one place shard files are written (``ShardWriter`` and the clean stage use it).
    ``digest=False`` skips the hash, for work files that no manifest lists; ``tag`` is the
    run's token for the temp name (:func:`spr_data.outdir.temp_tag`).
    """
    tmp = temp_path(path, tag)
    try:
        with open(tmp, "wb") as file:
            hashed = _HashingFile(file, digest)
            with pa.PythonFile(hashed, mode="w") as sink, \
                    pa.ipc.new_file(sink, batch.schema) as out:
                out.write_batch(batch)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        size = path.stat().st_size
        hash_text = "sha256:" + hashed.sha256.hexdigest() if hashed.sha256 else ""
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(os_error_message(exc, tmp)) from exc
    first_id = batch.column(ID)[0].as_py() if ID in batch.schema.names and batch.num_rows \
        else None
    return ShardInfo(path.name, batch.num_rows, size, hash_text, first_id)


class _HashingFile:
    """A file's writes, hashed on their way (SHA-256, as :func:`spr_data.fsio.sha256_file`
    reads them back): the shard is not read a second time for its manifest hash. Arrow hands
    the IPC writer's buffers over whole, a few dozen writes a shard."""

    def __init__(self, file: BinaryIO, hashing: bool) -> None:
        self.file = file
        self.sha256 = hashlib.sha256() if hashing else None

    def write(self, data: bytes) -> int:
        if self.sha256 is not None:
            self.sha256.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def close(self) -> None:  # the caller closes the file after its fsync
        pass


def _row_nbytes(batch: pa.RecordBatch) -> np.ndarray:
    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        sizes += _array_row_nbytes(column)
    return sizes


def _array_row_nbytes(arr: pa.Array) -> np.ndarray | int:
    """Bytes each row of ``arr`` takes in a shard (values plus offsets), roughly."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
            or pa.types.is_large_binary(t):
        lengths = pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        return np.asarray(lengths, dtype=np.int64) + 4
    if pa.types.is_struct(t):
        total: np.ndarray | int = 0
        for i in range(t.num_fields):
            total = total + _array_row_nbytes(arr.field(i))
        return total
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        width = max(t.value_type.bit_width // 8, 1) if pa.types.is_primitive(t.value_type) else 8
        return np.asarray(lengths, dtype=np.int64) * width + 4
    if pa.types.is_primitive(t):
        return max(int(t.bit_width) // 8, 1)
    return max(int(arr.nbytes) // max(len(arr), 1), 1)
