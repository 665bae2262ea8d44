"""Open a dataset directory for random access with memory that does not grow with its size.

Shards are memory-mapped Arrow IPC files opened on first use. A global row index resolves to
(shard, record batch, row) through two tiny sorted tables, and a batch of indices is gathered
with one ``take`` per record batch touched, then put back in the caller's order.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import operator
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.cache import ShardCache
from spr_data.errors import DatasetError, InputError
from spr_data.fsio import sha256_file
from spr_data.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    parse_manifest,
    read_manifest,
)
from spr_data.reader import (
    FileSystem,
    ReaderOptions,
    RetryingFile,
    RetryPolicy,
    fetch_verified,
    filesystem_for,
    read_all,
)

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Dataset", "open_dataset"]

log = logging.getLogger("spr_data.dataset")


#: Above this many indices, Arrow's own ``take`` per shard beats gathering row by row.
_GATHER_MAX_ROWS = 8192


class _Leaf:
    """Zero-copy numpy views of one leaf column of a shard: values, or offsets + data."""

    __slots__ = ("data", "offsets", "values")

    def __init__(self, arr: pa.Array) -> None:
        buffers = arr.buffers()
        t = arr.type
        self.values: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self.data: memoryview | None = None
        if pa.types.is_primitive(t) and not pa.types.is_boolean(t):
            self.values = np.frombuffer(buffers[1], dtype=t.to_pandas_dtype(), count=len(arr),
                                        offset=arr.offset * (t.bit_width // 8))
        elif pa.types.is_list(t):  # token ids: offsets count elements; slices of a typed view
            self.offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(arr) + 1,
                                         offset=arr.offset * 4)
            values = arr.values
            typed = np.frombuffer(values.buffers()[1], dtype=values.type.to_pandas_dtype(),
                                  count=len(values),
                                  offset=values.offset * (values.type.bit_width // 8))
            self.data = memoryview(typed)  # type: ignore[arg-type]
        else:
            width = np.int64 if (pa.types.is_large_string(t) or pa.types.is_large_binary(t)) \
                else np.int32
            self.offsets = np.frombuffer(buffers[1], dtype=width, count=len(arr) + 1,
                                         offset=arr.offset * np.dtype(width).itemsize)
            self.data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")


def _gatherable(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return all(_gatherable(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _numeric(t.value_type)
    return _numeric(t) or pa.types.is_string(t) \
        or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _leaf_count(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    return 1


def _leaf_index(schema: pa.Schema, column: int) -> int:
    """Index of column ``column``'s first leaf among a shard's leaves."""
    return sum(_leaf_count(schema.field(i).type) for i in range(column))


def _leaves(arr: pa.Array) -> list[_Leaf]:
    if pa.types.is_struct(arr.type):
        return [leaf for i in range(arr.type.num_fields) for leaf in _leaves(arr.field(i))]
    return [_Leaf(arr)]


class _Shard:
    """One memory-mapped shard: its record batches and where each starts.

    A shard of one record batch without nulls also gets numpy views of its columns
    (``leaves``), so a random batch spanning many shards is gathered with a few numpy
    operations per shard instead of a full Arrow ``take`` per shard.
    """

    def __init__(self, path: str, schema: pa.Schema, source: Any = None) -> None:
        try:
            self._source = source if source is not None else pa.memory_map(path, "r")
            reader = pa.ipc.open_file(self._source)
        except (OSError, pa.ArrowInvalid) as exc:
            raise DatasetError(f"cannot open shard {path}: {exc}; run spr-data verify") from exc
        if not reader.schema.equals(schema):
            raise DatasetError(f"shard {path} has schema {reader.schema}, expected {schema}")
        self.batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self.starts = np.cumsum([0] + [b.num_rows for b in self.batches], dtype=np.int64)
        self.leaves: list[_Leaf] | None = None
        if len(self.batches) == 1 and self.batches[0].num_rows \
                and all(_gatherable(f.type) for f in schema):
            batch = self.batches[0]
            if all(c.null_count == 0 for c in batch.columns):
                self.leaves = [leaf for c in batch.columns for leaf in _leaves(c)]
        self._row = _row_reader(schema, self.leaves) if self.leaves is not None else None

    def take(self, local: np.ndarray) -> pa.RecordBatch:
        return _grouped_take(local, self.starts,
                             lambda k, rows: self.batches[k].take(pa.array(rows)))

    def row(self, local: int) -> dict[str, Any]:
        if self._row is not None:
            return self._row(local)
        k = int(np.searchsorted(self.starts, local, side="right")) - 1
        row: dict[str, Any] = self.batches[k].slice(local - int(self.starts[k]), 1).to_pylist()[0]
        return row


def _row_reader(schema: pa.Schema, leaves: list[_Leaf]) -> Callable[[int], dict[str, Any]]:
    """A function that reads row ``i`` straight from the leaf views, compiled once per shard."""
    remaining = iter(leaves)

    def compile_type(t: pa.DataType) -> Callable[[int], Any]:
        if pa.types.is_struct(t):
            fields = [(t.field(i).name, compile_type(t.field(i).type)) for i in range(t.num_fields)]
            return lambda i: {name: get(i) for name, get in fields}
        leaf = next(remaining)
        if leaf.values is not None:
            values = leaf.values
            return lambda i: values[i].item()
        offsets, data = leaf.offsets, leaf.data
        assert offsets is not None and data is not None  # noqa: S101 - var-width leaf
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return lambda i: str(data[offsets[i]:offsets[i + 1]], "utf-8")
        if pa.types.is_list(t):
            return lambda i: data[offsets[i]:offsets[i + 1]].tolist()
        return lambda i: bytes(data[offsets[i]:offsets[i + 1]])

    getters = [(f.name, compile_type(f.type)) for f in schema]
    return lambda i: {name: get(i) for name, get in getters}


def _grouped_take(
    idx: np.ndarray, starts: np.ndarray, take_part: Callable[[int, np.ndarray], pa.RecordBatch]
) -> pa.RecordBatch:
    """Gather rows ``idx`` from parts that begin at ``starts``, in the order of ``idx``."""
    part = np.searchsorted(starts, idx, side="right") - 1
    first = int(part[0])
    if (part == first).all():
        return take_part(first, idx - starts[first])
    order = np.argsort(part, kind="stable")
    sorted_part, sorted_idx = part[order], idx[order]
    cuts = np.flatnonzero(sorted_part[1:] != sorted_part[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(idx)]
    pieces = [
        take_part(int(sorted_part[a]), sorted_idx[a:b] - starts[sorted_part[a]])
        for a, b in itertools.pairwise(bounds)
    ]
    return pa.concat_batches(pieces).take(pa.array(_inverse(order)))


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return inverse


def _gather(schema: pa.Schema, parts: list[tuple[_Shard, np.ndarray]],
            inverse: np.ndarray) -> pa.RecordBatch:
    """Rows ``local`` of each shard in ``parts``; row ``i`` of the result is row
    ``inverse[i]`` of the parts concatenated."""
    n = len(inverse)
    nexts = [local + 1 for _, local in parts]
    reorder = operator.itemgetter(*inverse.tolist()) if n > 1 else None
    columns: list[Any] = []
    for j, leaf in enumerate(parts[0][0].leaves or []):
        shard_leaves = [s.leaves[j] for s, _ in parts]  # type: ignore[index]
        if leaf.values is not None:
            values = np.concatenate([lf.values[local]  # type: ignore[index]
                                     for lf, (_, local) in zip(shard_leaves, parts,
                                                               strict=True)])
            columns.append(values[inverse])
            continue
        pieces: list[memoryview] = []
        lengths = []
        for lf, (_, local), after in zip(shard_leaves, parts, nexts, strict=True):
            begin, end = lf.offsets[local], lf.offsets[after]  # type: ignore[index]
            lengths.append(end - begin)
            # C-level loops: one slice object per row, then one memoryview slice per row
            pieces += map(lf.data.__getitem__,  # type: ignore[union-attr, index]
                          map(slice, begin.tolist(), end.tolist()))
        offsets = np.zeros(n + 1, dtype=leaf.offsets.dtype)  # type: ignore[union-attr]
        np.cumsum(np.concatenate(lengths)[inverse], out=offsets[1:])
        columns.append((offsets, b"".join(reorder(pieces) if reorder else pieces)))
    leaves = iter(columns)

    def build(t: pa.DataType) -> pa.Array:
        if pa.types.is_struct(t):
            return pa.StructArray.from_arrays([build(t.field(i).type) for i in range(t.num_fields)],
                                              fields=list(t))
        leaf = next(leaves)
        if isinstance(leaf, np.ndarray):
            return pa.array(leaf, type=t)
        offsets, data = leaf
        if pa.types.is_list(t):
            values = pa.Array.from_buffers(t.value_type, int(offsets[-1]),
                                           [None, pa.py_buffer(data)])
            return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets)], children=[values])
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])

    return pa.RecordBatch.from_arrays([build(f.type) for f in schema], schema=schema)


class Dataset:
    """A dataset directory opened through its manifest.

    ``len(ds)``, ``ds[i]`` (one row as a dict), ``ds.take(indices)`` (an Arrow table in the
    order given), ``ds.iter_batches(n)`` and ``ds.scan()`` (a polars LazyFrame). Opening reads
    only the manifest; each shard is mapped the first time a row of it is needed.
    """

    def __init__(self, path: Path, manifest: Manifest, *, location: str | None = None,
                 reader: ReaderOptions | None = None, remote: bool = False) -> None:
        self.path = path
        self.location = location or str(path)
        self.manifest = manifest
        self.reader = reader or ReaderOptions()
        self.remote = remote
        self._starts = np.cumsum([0] + [s.rows for s in manifest.shards], dtype=np.int64)
        self._start_list: list[int] = self._starts.tolist()
        self._shards: list[_Shard | None] = [None] * len(manifest.shards)
        self._in_memory: list[int] = []  # remote shards held whole, least recently used first
        self._cache: ShardCache | None = None
        self._digest: str | None = None
        self._evictions = 0

    @property
    def manifest_digest(self) -> str:
        """``sha256:<hex>`` of the manifest's bytes: what an iterator's state is tied to."""
        if self._digest is None:
            self._digest = sha256_file(self.path / MANIFEST_NAME)
        return self._digest

    def parent_record(self) -> dict[str, Any]:
        """How a stage's lineage names this dataset as its parent: an absolute path (or its
        URL), so that ``audit`` finds it from any directory, and the manifest digest, so that
        it notices when the parent changed."""
        return {"path": self.location if self.remote else str(self.path.resolve()),
                "manifest_sha256": self.manifest_digest, "rows": len(self)}

    def __repr__(self) -> str:
        return (f"Dataset({self.location!r}, kind={self.kind!r}, langs={self.langs!r}, "
                f"rows={len(self)}, shards={len(self.manifest.shards)})")

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @property
    def langs(self) -> list[str]:
        return self.manifest.langs

    @property
    def schema(self) -> pa.Schema:
        return self.manifest.schema

    @property
    def shard_paths(self) -> list[Path]:
        """The shard files of a local dataset (stages map them in worker processes)."""
        if self.remote:
            raise DatasetError(f"{self.location} is on a network filesystem; this step reads "
                               "local shards only: copy the dataset to local disk first")
        return [self.path / s.file for s in self.manifest.shards]

    def shard_location(self, info: ShardInfo) -> str:
        """Where a shard of this dataset is read from: a path, or a URL."""
        return _join(self.location, info.file)

    def local_shard_paths(self, staging: Path) -> list[Path]:
        """Shard files on local disk, for tasks that map them in other processes: the files
        themselves for a local dataset; for a networked one, verified copies in the reader's
        ``cache_dir``, or else in ``staging`` (a stage's work directory)."""
        if not self.remote:
            return self.shard_paths
        cache = ShardCache(self.reader.cache_dir or staging, prefetch=0)
        fs = self.reader.filesystem or filesystem_for(self.location)
        return [cache.get(fs, self.shard_location(info), info, self.reader.retry)
                for info in self.manifest.shards]

    @property
    def rejects(self) -> Dataset | None:
        """The dataset of rejected rows that sits beside this one, if any."""
        name = self.manifest.rejects_dir
        if not name:
            return None
        return _open(_join(self.location, name), self.reader)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} is out of range for a dataset of {n} rows")
        k = bisect.bisect_right(self._start_list, i) - 1
        return self._shard(k).row(i - self._start_list[k])

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array) -> pa.Table:
        """Rows at global positions ``indices`` (0-based, not ids), in the order given."""
        given = indices.to_numpy(zero_copy_only=False) if isinstance(indices, pa.Array) \
            else np.asarray(indices)
        if given.size == 0:
            return self.schema.empty_table()
        if given.dtype.kind not in "iu":  # a bool mask read as rows 0/1, or 1.7 as row 1
            raise TypeError(f"take needs integer row positions, got {given.dtype} values"
                            + ("; for a mask use np.flatnonzero(mask)"
                               if given.dtype.kind == "b" else ""))
        idx = given.astype(np.int64).reshape(-1)
        n = len(self)
        if idx.min() < 0 or idx.max() >= n:
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise IndexError(f"row {bad} is out of range for a dataset of {n} rows")
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        first = int(shard[0])
        if (shard == first).all():  # one shard: Arrow's take keeps the order
            return pa.Table.from_batches([self._shard(first).take(idx - self._starts[first])])
        order = np.argsort(shard, kind="stable")
        sorted_shard, local = shard[order], idx[order] - self._starts[shard[order]]
        cuts = (np.flatnonzero(sorted_shard[1:] != sorted_shard[:-1]) + 1).tolist()
        bounds = [0, *cuts, len(idx)]
        parts = [(self._shard(int(sorted_shard[a])), local[a:b])
                 for a, b in itertools.pairwise(bounds)]
        inverse = _inverse(order)
        if len(idx) <= _GATHER_MAX_ROWS and all(s.leaves is not None for s, _ in parts):
            return pa.Table.from_batches([_gather(self.schema, parts, inverse)])
        batch = pa.concat_batches([s.take(rows) for s, rows in parts])
        return pa.Table.from_batches([batch.take(pa.array(inverse))])

    def list_lengths(self, column: str, indices: np.ndarray) -> np.ndarray:
        """Lengths of the list column ``column`` (token ids) at rows ``indices``, read from
        the shards' offsets alone (no values are touched)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = np.zeros(len(idx), dtype=np.int64)
        if not idx.size:
            return out
        j = self.schema.get_field_index(column)
        if j < 0 or not pa.types.is_list(self.schema.field(j).type):
            raise DatasetError(f"{self.path} has no token-id list column {column!r}")
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        for k in np.unique(shard).tolist():
            here = shard == k
            s = self._shard(k)
            local = idx[here] - self._starts[k]
            if s.leaves is not None:
                offsets = s.leaves[_leaf_index(self.schema, j)].offsets
                assert offsets is not None  # noqa: S101 - a list leaf
                out[here] = offsets[local + 1] - offsets[local]
            else:
                lengths = pc.list_value_length(s.take(local).column(j))
                out[here] = lengths.to_numpy(zero_copy_only=False)
        return out

    def iter_batches(self, batch_size: int = 65536) -> Iterator[pa.RecordBatch]:
        """All rows in order, as zero-copy record batches of at most ``batch_size`` rows."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        for k in range(len(self._shards)):
            for batch in self._shard(k).batches:
                for start in range(0, batch.num_rows, batch_size):
                    yield batch.slice(start, batch_size)

    def scan(self) -> pl.LazyFrame:
        """A polars LazyFrame over every shard, for analysis."""
        import polars as pl

        if not self.manifest.shards:
            return pl.DataFrame(self.schema.empty_table()).lazy()
        return pl.scan_ipc([str(p) for p in self.shard_paths])

    def _shard(self, k: int) -> _Shard:
        shard = self._shards[k]
        if shard is None:
            shard = self._shards[k] = self._open_shard(k)
        if self.remote and self._cache is None:  # whole shards in memory: keep a few
            if k in self._in_memory:
                self._in_memory.remove(k)
            self._in_memory.append(k)
            while len(self._in_memory) > self.reader.max_in_memory:
                self._shards[self._in_memory.pop(0)] = None
                self._evictions += 1
                if self._evictions == len(self._shards) + 1:
                    log.warning("%s: shards are read again and again (%d held in memory of "
                                "%d); for random access over a networked dataset pass "
                                "cache_dir, or read it in order (block=)", self.location,
                                self.reader.max_in_memory, len(self._shards))
        return shard

    def _open_shard(self, k: int) -> _Shard:
        info = self.manifest.shards[k]
        where = self.shard_location(info)
        options = self.reader
        if not self.remote:
            if options.verify == "always" and sha256_file(Path(where)) != info.hash:
                raise DatasetError(f"shard {where} does not match its manifest hash; run "
                                   "spr-data verify")
            return _Shard(where, self.schema)
        fs = options.filesystem or filesystem_for(self.location)
        sha = info.hash if options.verify != "never" else None
        if options.cache_dir is not None:
            if self._cache is None:
                self._cache = ShardCache(options.cache_dir, limit_bytes=options.cache_limit)
            upcoming = [(fs, self.shard_location(s), s)
                        for s in self.manifest.shards[k + 1:k + 1 + self._cache.prefetch]]
            for attempt in range(3):
                local = self._cache.get(fs, where, info, options.retry)
                try:
                    shard = _Shard(str(local), self.schema)
                    break
                except DatasetError:  # evicted (by another process) before it was mapped
                    if local.exists() or attempt == 2:
                        raise
            self._cache.prefetch_shards(upcoming, options.retry)
            return shard
        data = fetch_verified(fs, where, size=info.bytes, sha256=sha, policy=options.retry)
        return _Shard(where, self.schema, pa.BufferReader(pa.py_buffer(data)))


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}" if "://" in location else str(Path(location) / name)


def _open(location: str, reader: ReaderOptions) -> Dataset:
    fs = reader.filesystem or filesystem_for(location)
    remote = fs.is_network(location)
    if not remote:
        p = Path(location)
        return Dataset(p, read_manifest(p), reader=reader)
    where = _join(location, MANIFEST_NAME)
    try:
        with RetryingFile(fs, where, policy=reader.retry) as f:
            raw = bytes(read_all(f))
    except InputError as exc:
        raise DatasetError(f"{location} is not a readable spr-data dataset: {exc}") from exc
    ds = Dataset(Path(location), parse_manifest(raw, where), location=location,
                 reader=reader, remote=True)
    ds._digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    return ds


def open_dataset(path: str | Path, *, filesystem: FileSystem | None = None,
                 retry: RetryPolicy | None = None, cache_dir: str | Path | None = None,
                 cache_limit: int | None = None, verify: str = "remote",
                 reader: ReaderOptions | None = None) -> Dataset:
    """Open a dataset directory (a local path, a network mount or an ``http(s)://`` URL);
    raises :class:`DatasetError` when it is not a valid one.

    A local dataset is memory-mapped. One on a network filesystem is read through the
    retrying reader, never mapped: copied to ``cache_dir`` when given, else read whole, shard
    by shard (see :class:`~spr_data.reader.ReaderOptions`, which ``reader`` passes at once).
    """
    if reader is None:
        reader = ReaderOptions(filesystem=filesystem, retry=retry,
                               cache_dir=None if cache_dir is None else str(cache_dir),
                               cache_limit=cache_limit, verify=verify)
    return _open(str(path), reader)
