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
from spr_data.errors import DatasetError, InputError, SprDataError
from spr_data.fsio import sha256_file
from spr_data.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
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
    check_no_credentials,
    check_size,
    fetch_verified,
    file_size,
    filesystem_for,
    join_location,
    read_all,
)
from spr_data.schema import schema_mismatch

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Dataset", "RowSelection", "open_dataset"]

log = logging.getLogger("spr_data.dataset")


#: Above this many indices, Arrow's own ``take`` per shard beats gathering row by row.
_GATHER_MAX_ROWS = 8192
#: Rows per shard below which reading rows one by one beats numpy calls per shard (see
#: ``RowSelection._by_row``), measured in CPU time on 240-row batches spread over 2 to 240
#: shards: for token-id lists (two offsets and a slice a row) and for numbers (one read).
_BY_ROW_BELOW = {"list": 32, "number": 4}
#: Formats whose memoryview items are Python numbers (numpy's dtype.char; not float16).
_MEMORYVIEW_FORMATS = "bBhHiIlLqQfd"


class _Leaf:
    """Zero-copy numpy views of one leaf column of a shard: values, or offsets + data; and
    ``view``, the values or offsets as a memoryview (its items are Python numbers: the fast
    way to read a few)."""

    __slots__ = ("data", "items", "offsets", "values", "view")

    def __init__(self, arr: pa.Array) -> None:
        buffers = arr.buffers()
        t = arr.type
        self.values: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self.data: memoryview | None = None
        self.items: np.ndarray | None = None  # a list column's values, typed
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
            self.items = typed
            self.data = memoryview(typed)  # type: ignore[arg-type]
        else:
            width = np.int64 if (pa.types.is_large_string(t) or pa.types.is_large_binary(t)) \
                else np.int32
            self.offsets = np.frombuffer(buffers[1], dtype=width, count=len(arr) + 1,
                                         offset=arr.offset * np.dtype(width).itemsize)
            self.data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
        self.view = memoryview(self.values if self.values is not None  # type: ignore[arg-type]
                               else self.offsets)


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
            raise DatasetError(schema_mismatch(path, reader.schema, schema))
        self.leaves: list[_Leaf] | None = None
        try:  # a damaged message header or buffer size shows only here
            self.batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            for batch in self.batches:
                batch.validate()  # buffer sizes: O(columns)
                _check_offsets(batch.columns, path)
            self.starts = np.cumsum([0] + [b.num_rows for b in self.batches], dtype=np.int64)
            if len(self.batches) == 1 and self.batches[0].num_rows \
                    and all(_gatherable(f.type) for f in schema):
                batch = self.batches[0]
                if all(c.null_count == 0 for c in batch.columns):
                    self.leaves = [leaf for c in batch.columns for leaf in _leaves(c)]
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read shard {path}: {exc}; the file is damaged: run "
                               "spr-data verify") from exc
        #: row ``i`` of the shard as a dict: straight from the leaf views when there are any
        self.row: Callable[[int], dict[str, Any]] = \
            _row_reader(schema, self.leaves) if self.leaves is not None else self._arrow_row

    def take(self, local: np.ndarray, columns: list[str] | None = None) -> pa.RecordBatch:
        """Rows ``local`` of the shard (only ``columns``, when given), in the order given."""
        batches = self.batches if columns is None else [b.select(columns) for b in self.batches]
        if len(local) == 1:  # one row: a zero-copy slice, not a gather
            k = int(np.searchsorted(self.starts, local[0], side="right")) - 1
            return batches[k].slice(int(local[0]) - int(self.starts[k]), 1)
        return _grouped_take(local, self.starts,
                             lambda k, rows: batches[k].take(pa.array(rows)))

    def _arrow_row(self, local: int) -> dict[str, Any]:
        k = int(np.searchsorted(self.starts, local, side="right")) - 1
        row: dict[str, Any] = self.batches[k].slice(local - int(self.starts[k]), 1).to_pylist()[0]
        return row


def _check_offsets(columns: Sequence[pa.Array], path: str) -> None:
    """Every offsets buffer rises and stays inside its data: a damaged one (a flipped bit in
    a shard that is not re-hashed on read) made pyarrow crash the process, or read other
    rows' bytes. A few ms for a shard of 675k two-sentence rows (a full Arrow validation
    takes 0.46 s)."""
    for arr in columns:
        t = arr.type
        if pa.types.is_struct(t):
            _check_offsets([arr.field(i) for i in range(t.num_fields)], path)
            continue
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t) \
            or pa.types.is_large_list(t)
        if not (large or pa.types.is_string(t) or pa.types.is_binary(t)
                or pa.types.is_list(t)) or not len(arr):
            continue
        width = np.int64 if large else np.int32
        offsets = np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                                offset=arr.offset * np.dtype(width).itemsize)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            end = len(arr.values)
        else:
            data = arr.buffers()[2]
            end = data.size if data is not None else 0
        if offsets[0] < 0 or offsets[-1] > end or bool((offsets[1:] < offsets[:-1]).any()):
            raise DatasetError(f"shard {path} is damaged: the offsets of a {t} column point "
                               "outside its data; run spr-data verify, and re-create the "
                               "dataset (or restore the shard) if it fails")


def _row_reader(schema: pa.Schema, leaves: list[_Leaf]) -> Callable[[int], dict[str, Any]]:
    """A function that reads row ``i`` straight from the leaf views, made once per shard.

    Its source is generated from the schema: one dict display whose values read the leaves'
    memoryviews (Python ints, no numpy scalars), so a row costs one Python call, a dict and
    one slice per variable-width field — as fast as ``seek`` + ``readline`` on a line-offset
    index. Column names enter the source only as ``repr`` literals.
    """
    env: dict[str, Any] = {}
    remaining = iter(leaves)

    def read(t: pa.DataType) -> str:
        if pa.types.is_struct(t):
            return "{" + ", ".join(f"{t.field(k).name!r}: {read(t.field(k).type)}"
                                   for k in range(t.num_fields)) + "}"
        leaf, n = next(remaining), len(env)
        if leaf.values is not None:
            if leaf.view.format in _MEMORYVIEW_FORMATS:
                env[f"v{n}"] = leaf.view
                return f"v{n}[i]"
            env[f"v{n}"] = leaf.values  # float16: memoryview cannot read it
            return f"v{n}[i].item()"
        env[f"o{n}"], env[f"d{n}"] = leaf.view, leaf.data
        span = f"[o{n}[i]:o{n}[i + 1]]"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return f"str(d{n}{span}, 'utf-8')"
        if pa.types.is_list(t):
            if leaf.data.format in _MEMORYVIEW_FORMATS:  # type: ignore[union-attr]
                return f"d{n}{span}.tolist()"
            env[f"d{n}"] = leaf.items
            return f"d{n}{span}.tolist()"
        return f"bytes(d{n}{span})"

    body = ", ".join(f"{f.name!r}: {read(f.type)}" for f in schema)
    exec(f"def row(i):\n    return {{{body}}}\n", env)  # the source is built above
    return env["row"]  # type: ignore[no-any-return]


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


def _small(keys: np.ndarray) -> np.ndarray:
    """Non-negative ``keys`` as uint16 when they fit: numpy's stable argsort is then a radix
    sort, ten times faster on a window of rows (the order is the same: a stable sort)."""
    return keys.astype(np.uint16) if len(keys) and int(keys.max()) < 1 << 16 else keys


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return inverse


def _gather(schema: pa.Schema, parts: list[tuple[_Shard, np.ndarray]],
            inverse: np.ndarray, fields: list[int], leaf_starts: list[int]) -> pa.RecordBatch:
    """Columns ``fields`` of rows ``local`` of each shard in ``parts``; row ``i`` of the
    result is row ``inverse[i]`` of the parts concatenated. Column ``f``'s leaves are
    ``leaf_starts[f]:leaf_starts[f + 1]``."""
    n = len(inverse)
    nexts = [local + 1 for _, local in parts]
    reorder = operator.itemgetter(*inverse.tolist()) if n > 1 else None
    columns: list[Any] = []
    first = parts[0][0].leaves or []
    for j in [j for f in fields for j in range(leaf_starts[f], leaf_starts[f + 1])]:
        leaf = first[j]
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

    picked = pa.schema([schema.field(f) for f in fields])
    return pa.RecordBatch.from_arrays([build(f.type) for f in picked], schema=picked)


class Dataset:
    """A dataset directory opened through its manifest.

    ``len(ds)``, ``ds[i]`` (one row as a dict), ``ds.take(indices)`` (an Arrow table in the
    order given), ``ds.iter_batches(n)`` and ``ds.scan()`` (a polars LazyFrame); every row,
    memory-mapped, as a pyarrow Table, polars DataFrame or HF Dataset: ``to_pyarrow()``,
    ``to_polars()``, ``to_hf()``. Opening reads only the manifest; each shard is mapped the
    first time a row of it is needed.
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
        self._rows = int(self._start_list[-1])
        #: column ``f``'s leaves in a shard's leaf views: ``_leaf_starts[f]:_leaf_starts[f + 1]``
        self._leaf_starts = [_leaf_index(manifest.schema, f)
                             for f in range(len(manifest.schema) + 1)]
        #: (leaf, attribute) → that attribute of that leaf in each open shard (None if not
        #: open), for reading rows one by one; cleared when a shard is opened or dropped
        self._per_shard: dict[tuple[int, str], list[Any]] = {}
        self._shards: list[_Shard | None] = [None] * len(manifest.shards)
        self._in_memory: list[int] = []  # remote shards held whole, least recently used first
        self._cache: ShardCache | None = None
        self._digest: str | None = None
        self._evictions = 0
        #: the manifest file as opened (device, inode, size, mtime, sha256), checked whenever a
        #: shard is mapped; None for a remote dataset (its bytes are hash-checked instead)
        self._identity: tuple[int, int, int, int, str] | None = None

    @property
    def manifest_digest(self) -> str:
        """``sha256:<hex>`` of the manifest's bytes: what an iterator's state is tied to."""
        if self._digest is None:  # the manifest as opened, not whatever is there now
            self._digest = (self._identity[4] if self._identity is not None
                            else sha256_file(self.path / MANIFEST_NAME))
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

    def shard_size(self, info: ShardInfo) -> int | None:
        """The real size of a shard's file (a stat, or the server's Content-Length); None when
        it cannot be read. What bounds the manifest's numbers before anything is allocated
        by them."""
        where = self.shard_location(info)
        try:
            if not self.remote:
                path = Path(where)
                return path.stat().st_size if path.is_file() else None
            return file_size(self.reader.filesystem or filesystem_for(self.location), where,
                             self.reader.retry)
        except (OSError, SprDataError):
            return None

    def check_sizes(self) -> None:
        """Raise :class:`DatasetError`, naming the file, unless every shard's file is the size
        its manifest says: then ``len(self)`` and the manifest's counts are bounded by what
        the files hold (``rows × min_row_bytes <= bytes``, checked when it was parsed). Call
        it before allocating anything by them; one ``stat`` (or one request) per shard."""
        fs = self.reader.filesystem or filesystem_for(self.location)
        for info in self.manifest.shards:
            where = self.shard_location(info)
            if self.remote:
                check_size(fs, where, info.bytes, self.reader.retry)
            else:
                _check_shard_file(Path(where), info)

    def require_rows(self, name: str | Path, doing: str) -> None:
        """Refuse a rejects dataset (the rows clean or ingest took out) where its parent's
        rows are meant: ``doing`` is what would be done with it ("clean", "train on")."""
        if self.manifest.role != "rows":
            raise DatasetError(f"{name} is a rejects dataset (the rows clean or ingest took "
                               f"out); {doing} its parent instead")

    def check_digest(self, expected: str) -> None:
        """Raise if this dataset's manifest is not the one whose digest is ``expected`` (the
        digest recorded when it was first opened, in another process): the directory was
        replaced in between (``--overwrite``), and its rows are not the ones counted then."""
        if self.manifest_digest != expected:
            raise DatasetError(_replaced(self.location))

    def check_not_replaced(self) -> None:
        """Raise if the dataset was replaced since it was opened: for a local one, its
        manifest file changed; for a networked one, the manifest the server has now is not
        the one read (one request, made when a shard did not match its manifest)."""
        if not self.remote:
            self._check_identity()
            return
        if self._digest is None:
            return
        fs = self.reader.filesystem or filesystem_for(self.location)
        try:
            raw = _remote_manifest(fs, self.location, self.reader.retry)
        except SprDataError:  # gone altogether: the error being reported says enough
            return
        if "sha256:" + hashlib.sha256(raw).hexdigest() != self._digest:
            raise DatasetError(_replaced(self.location))

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
        return self._rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        n = self._rows
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} is out of range for a dataset of {n} rows")
        k = bisect.bisect_right(self._start_list, i) - 1
        shard = self._shards[k]
        if shard is None or self.remote:  # the LRU of remote shards sees every read
            shard = self._shard(k)
        return shard.row(i - self._start_list[k])

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at global positions ``indices`` (0-based, not ids), in the order given; only
        ``columns`` when given (the others are never read)."""
        return self.select_rows(indices).table(columns)

    def select_rows(self, indices: Sequence[int] | np.ndarray | pa.Array) -> RowSelection:
        """Rows at global positions ``indices``, located once in the shards, to read column
        by column: :class:`RowSelection`."""
        given = indices.to_numpy(zero_copy_only=False) if isinstance(indices, pa.Array) \
            else np.asarray(indices)
        if given.size == 0:
            return RowSelection(self, np.zeros(0, dtype=np.int64))
        if given.dtype.kind not in "iu":  # a bool mask read as rows 0/1, or 1.7 as row 1
            raise TypeError(f"take needs integer row positions, got {given.dtype} values"
                            + ("; for a mask use np.flatnonzero(mask)"
                               if given.dtype.kind == "b" else ""))
        idx = given.astype(np.int64, copy=False).reshape(-1)
        n = self._rows
        if idx.min() < 0 or idx.max() >= n:
            counted = np.where(idx < 0, idx + n, idx)  # -1 is the last row, as ds[-1]
            wrong = (counted < 0) | (counted >= n)
            if wrong.any():
                raise IndexError(f"row {idx[wrong][0]} is out of range for a dataset of {n} "
                                 "rows")
            idx = counted
        return RowSelection(self, idx)

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
        return self.select_rows(idx).lengths(column)

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

    def to_pyarrow(self) -> pa.Table:
        """Every row as one ``pyarrow.Table`` whose buffers are the memory-mapped shards
        (one chunk per shard): no row is copied, and pages are read as they are touched."""
        batches = [b for k in range(len(self._shards)) for b in self._shard(k).batches]
        return pa.Table.from_batches(batches, self.schema)

    def to_polars(self) -> pl.DataFrame:
        """Every row as a polars ``DataFrame`` over the memory-mapped shards.

        The text bytes stay in the map; polars adds its 16-byte string views per value (about
        32 bytes a row for a pair). ``scan()`` is the lazy road, but it reads the shards into
        memory."""
        import polars as pl

        frame = pl.from_arrow(self.to_pyarrow(), rechunk=False)
        assert isinstance(frame, pl.DataFrame)  # noqa: S101 - a Table gives a DataFrame
        return frame

    def to_hf(self) -> Any:
        """Every row as a Hugging Face ``datasets.Dataset`` over the memory-mapped shards.

        ``Dataset.from_file`` cannot open the shards (it reads Arrow's stream format; they are
        in the file format, for random access), so the mapped table is handed over as it is,
        with a fingerprint from the manifest instead of one hashed from every row. Needs
        ``pip install datasets``. Passing it to other processes (``map(num_proc=…)``) pickles
        the rows; ``datasets.load_dataset(DIR)`` makes HF's own cached copy instead.
        """
        try:
            import datasets
            from datasets.table import InMemoryTable
        except ImportError as exc:
            raise DatasetError("to_hf() needs Hugging Face datasets: pip install datasets") \
                from exc
        return datasets.Dataset(InMemoryTable(self.to_pyarrow()), split=datasets.Split.TRAIN,
                                fingerprint=self.manifest_digest.removeprefix("sha256:")[:16])

    def _shard(self, k: int) -> _Shard:
        shard = self._shards[k]
        if shard is None:
            shard = self._shards[k] = self._open_shard(k)
            self._per_shard.clear()
        if self.remote and self._cache is None:  # whole shards in memory: keep a few
            if k in self._in_memory:
                self._in_memory.remove(k)
            self._in_memory.append(k)
            while len(self._in_memory) > self.reader.max_in_memory:
                self._shards[self._in_memory.pop(0)] = None
                self._per_shard.clear()
                self._evictions += 1
                if self._evictions == len(self._shards) + 1:
                    log.warning("%s: shards are read again and again (%d held in memory of "
                                "%d); for random access over a networked dataset pass "
                                "cache_dir, or read it in order (block=)", self.location,
                                self.reader.max_in_memory, len(self._shards))
        return shard

    def _leaf_attr(self, leaf: int, attr: str) -> list[Any]:
        """``attr`` of leaf ``leaf`` of every open shard with views, by shard number."""
        key = (leaf, attr)
        if key not in self._per_shard:
            self._per_shard[key] = [None if s is None or s.leaves is None
                                    else getattr(s.leaves[leaf], attr) for s in self._shards]
        return self._per_shard[key]

    def _open_shard(self, k: int) -> _Shard:
        info = self.manifest.shards[k]
        where = self.shard_location(info)
        options = self.reader
        if not self.remote:
            if options.verify == "always" and sha256_file(Path(where)) != info.hash:
                raise DatasetError(f"shard {where} does not match its manifest hash; run "
                                   "spr-data verify")
            self._check_identity()
            _check_shard_file(Path(where), info)
            local_shard = _Shard(where, self.schema)
            _check_shard_rows(where, local_shard, info)
            self._check_identity()  # after mapping: the shard mapped is this manifest's
            return local_shard
        try:
            return self._open_remote_shard(k, info, where)
        except DatasetError:  # a shard that does not match: replaced, if the manifest was
            self.check_not_replaced()
            raise

    def _open_remote_shard(self, k: int, info: ShardInfo, where: str) -> _Shard:
        options = self.reader
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
        remote_shard = _Shard(where, self.schema, pa.BufferReader(pa.py_buffer(data)))
        _check_shard_rows(where, remote_shard, info)
        return remote_shard

    def _check_identity(self) -> None:
        """Raise if the directory was replaced (``--overwrite``) since it was opened: the
        manifest's file changed. Rows of two versions under one manifest are never mixed."""
        if self._identity is None:
            return
        path = self.path / MANIFEST_NAME
        now = _manifest_identity(path, digest_of=self._identity)
        if now != self._identity:
            raise DatasetError(_replaced(self.location))


def _replaced(location: str) -> str:
    return (f"{location} was replaced since it was opened (its {MANIFEST_NAME} changed); open "
            "it again to read the new version")


class RowSelection:
    """Rows of a dataset located once in its shards, then read column by column, so that a
    training batch reads the columns it needs and never touches the others (text, origin).

    From :meth:`Dataset.select_rows`: ``values(c)`` is a numeric column as a numpy array,
    ``padded(c)`` a token-id list column as a padded ``int64`` matrix and its mask, and
    ``table(columns)`` an Arrow table; each in the order the rows were given.
    """

    def __init__(self, dataset: Dataset, idx: np.ndarray) -> None:
        self._ds = dataset
        self._n: int = len(idx)
        self._order: np.ndarray | None = None  # None: one shard, rows in the caller's order
        #: (shard, its local rows, where they go in the result) for each shard touched
        self._parts: list[tuple[_Shard, np.ndarray, slice | np.ndarray]] = []
        self._bounds: list[int] = []
        #: the shards touched, by number
        self._touched: dict[int, _Shard] = {}
        #: per row, in the caller's order: shard number, row in it
        self._shard_of: np.ndarray = np.zeros(0, dtype=np.int64)
        self._local: np.ndarray = np.zeros(0, dtype=np.int64)
        self._row_lists: tuple[Callable[[Any], Any], list[int], list[int]] | None = None
        self._all_views: bool | None = None
        if not self._n:
            return
        starts = dataset._starts
        shard = np.searchsorted(starts, idx, side="right") - 1
        first = int(shard[0])
        if (shard == first).all():
            self._touched = {first: dataset._shard(first)}
            self._parts = [(self._touched[first], idx - starts[first], slice(None))]
            return
        self._order = np.argsort(_small(shard), kind="stable")
        sorted_shard = shard[self._order]
        cuts = (np.flatnonzero(sorted_shard[1:] != sorted_shard[:-1]) + 1).tolist()
        self._bounds = [0, *cuts, self._n]
        shards = dataset._shards
        lru = dataset.remote and dataset._cache is None  # it must see every shard read
        self._touched = {k: (shards[k] if not lru else None) or dataset._shard(k)
                         for k in sorted_shard[self._bounds[:-1]].tolist()}
        self._shard_of, self._local = shard, idx - starts[shard]

    def _by_row(self, kind: str = "list") -> bool:
        """Whether to read the rows one by one (C-level loops over memoryviews) rather than
        shard by shard (a few numpy calls per shard touched): cheaper when the rows are
        spread thin, fewer than ``_BY_ROW_BELOW[kind]`` in each shard."""
        return self._order is not None \
            and len(self._touched) * _BY_ROW_BELOW[kind] > self._n

    def _shard_parts(self) -> list[tuple[_Shard, np.ndarray, slice | np.ndarray]]:
        """(shard, its local rows, where they go in the result) for each shard touched."""
        if not self._parts and self._order is not None:
            order, local = self._order, self._local[self._order]
            self._parts = [(shard, local[a:b], order[a:b]) for shard, (a, b)
                           in zip(self._touched.values(), itertools.pairwise(self._bounds),
                                  strict=True)]
        return self._parts

    def _lists(self) -> tuple[Callable[[Any], Any], list[int], list[int]]:
        """``pick(per_shard)`` (each row's item of a mapping shard number → item), the local
        rows and the local rows + 1, as Python lists: for the row-by-row reads."""
        if self._row_lists is None:
            self._row_lists = (operator.itemgetter(*self._shard_of.tolist()),
                               self._local.tolist(), (self._local + 1).tolist())
        return self._row_lists

    def __len__(self) -> int:
        return self._n

    def _field(self, column: str) -> int:
        j = int(self._ds.schema.get_field_index(column))
        if j < 0:
            raise InputError(f"{self._ds.location} has no column {column!r} (it has "
                             f"{', '.join(self._ds.schema.names)})")
        return j

    def _views(self) -> bool:
        """Whether every shard touched has numpy views of its columns (one record batch,
        no nulls): then columns are gathered with numpy, else through Arrow's take."""
        if self._all_views is None:
            self._all_views = all(s.leaves is not None for s in self._touched.values())
        return self._all_views

    def _leaves(self, leaf: int) -> list[_Leaf]:
        """Leaf ``leaf`` of each shard touched, in shard order (views checked)."""
        return [s.leaves[leaf] for s in self._touched.values()]  # type: ignore[index]

    def _first(self, leaf: int) -> _Leaf:
        return next(iter(self._touched.values())).leaves[leaf]  # type: ignore[index]

    def _per_row(self, leaf: int, attr: str) -> tuple[Any, ...]:
        """``attr`` of leaf ``leaf`` of each row's shard, row by row."""
        ds = self._ds
        if ds.remote and ds._cache is None:  # shards may be dropped since: use the ones held
            return self._lists()[0]({k: getattr(s.leaves[leaf], attr)  # type: ignore[index, no-any-return]
                                     for k, s in self._touched.items()})
        return self._lists()[0](ds._leaf_attr(leaf, attr))  # type: ignore[no-any-return]

    def table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows as an Arrow table: every column, or only ``columns``."""
        schema = self._ds.schema
        fields = list(range(len(schema))) if columns is None else \
            [self._field(c) for c in columns]
        names = None if columns is None else list(columns)
        if not self._n:
            return pa.schema([schema.field(f) for f in fields]).empty_table()
        parts = [(s, local) for s, local, _ in self._shard_parts()]
        if self._order is None:  # one shard: Arrow's take keeps the order
            return pa.Table.from_batches([parts[0][0].take(parts[0][1], names)])
        inverse = _inverse(self._order)
        if self._n <= _GATHER_MAX_ROWS and self._views():
            return pa.Table.from_batches([_gather(schema, parts, inverse, fields,
                                                  self._ds._leaf_starts)])
        batch = pa.concat_batches([s.take(local, names) for s, local in parts])
        return pa.Table.from_batches([batch.take(pa.array(inverse))])

    def values(self, column: str) -> np.ndarray:
        """A numeric column (``id``, a score) as a numpy array."""
        j = self._field(column)
        t = self._ds.schema.field(j).type
        if not _numeric(t):
            raise InputError(f"values() reads a numeric column; {column!r} is {t}: use "
                             "table([...]) or padded()")
        if not self._n or not self._views():
            return np.asarray(self.table([column]).column(0).to_numpy())
        leaf = self._ds._leaf_starts[j]
        dtype = self._first(leaf).view.format
        if self._by_row("number") and dtype in _MEMORYVIEW_FORMATS:
            views = self._per_row(leaf, "view")
            return np.fromiter(map(operator.getitem, views, self._lists()[1]), dtype=dtype,
                               count=self._n)
        parts = self._shard_parts()
        if self._order is None:
            return np.asarray(self._first(leaf).values[parts[0][1]])  # type: ignore[index]
        out = np.empty(self._n, dtype=dtype)
        for lf, (_, local_rows, where) in zip(self._leaves(leaf), parts, strict=True):
            out[where] = lf.values[local_rows]  # type: ignore[index]
        return out

    def padded(self, column: str, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A list-of-integers column (token ids) as ``int64[B, L]``, each row's values then
        ``pad_id`` up to the longest row ``L``, and its bool mask (True on the values).

        Read straight from the shards' offsets and values (no Arrow array is built, no
        other column is read): shard by shard with numpy, or row by row where the rows are
        spread thin over many shards.
        """
        j = self._field(column)
        t = self._ds.schema.field(j).type
        if not (pa.types.is_list(t) and pa.types.is_integer(t.value_type)):
            raise InputError(f"padded() reads a list-of-integers column (token ids); "
                             f"{column!r} is {t}")
        if not self._n or not self._views():
            array = self.table([column]).column(0).combine_chunks()
            offsets = array.offsets.to_numpy()
            flat = array.values.to_numpy()[offsets[0]:offsets[-1]]
            return _pad(flat, np.diff(offsets).astype(np.int64), pad_id)
        leaf = self._ds._leaf_starts[j]
        items = self._first(leaf).items
        assert items is not None  # noqa: S101 - a list leaf
        if self._by_row():
            begin, end = self._row_bounds(leaf)
            data = self._per_row(leaf, "data")
            pieces: list[memoryview] = list(map(operator.getitem, data, map(slice, begin, end)))
            flat = np.frombuffer(b"".join(pieces), dtype=items.dtype)
            lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=self._n)
            return _pad(flat, lengths, pad_id)
        begins, lengths = self._shard_bounds(leaf)
        width = int(lengths.max())
        span = np.arange(width)
        mask = span < lengths[:, None]
        out = np.empty((self._n, width), dtype=np.int64)
        if width:
            for lf, (_, _, where) in zip(self._leaves(leaf), self._shard_parts(), strict=True):
                if len(lf.items):  # type: ignore[arg-type]
                    # the last row's span may run past the values: clipped, then padded below
                    out[where] = lf.items.take(  # type: ignore[union-attr]
                        begins[where][:, None] + span, mode="clip")
        out[~mask] = pad_id
        return out, mask

    def lengths(self, column: str) -> np.ndarray:
        """The length of a list column (token ids) at each row, from the offsets alone."""
        j = self._field(column)
        if not self._n:
            return np.zeros(0, dtype=np.int64)
        if not self._views():
            lengths = pc.list_value_length(self.table([column]).column(0))
            return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)
        leaf = self._ds._leaf_starts[j]
        if self._by_row():
            begin, end = self._row_bounds(leaf)
            return np.subtract(end, begin, dtype=np.int64)
        return self._shard_bounds(leaf)[1]

    def _row_bounds(self, leaf: int) -> tuple[list[int], list[int]]:
        """Each row's first and end offset in its shard's leaf, read row by row."""
        _, local, after = self._lists()
        offsets = self._per_row(leaf, "view")
        return (list(map(operator.getitem, offsets, local)),
                list(map(operator.getitem, offsets, after)))

    def _shard_bounds(self, leaf: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's first offset in its shard's leaf and its length, shard by shard."""
        parts = self._shard_parts()
        if self._order is None:
            offsets = self._first(leaf).offsets
            local_rows = parts[0][1]
            begins = offsets[local_rows]  # type: ignore[index]
            return begins, (offsets[local_rows + 1] - begins).astype(np.int64)  # type: ignore[index]
        # gathered in shard order, then put back in the caller's order at once
        firsts = [lf.offsets[local_rows]  # type: ignore[index]
                  for lf, (_, local_rows, _) in zip(self._leaves(leaf), parts, strict=True)]
        ends = [lf.offsets[local_rows + 1]  # type: ignore[index]
                for lf, (_, local_rows, _) in zip(self._leaves(leaf), parts, strict=True)]
        begins = np.empty(self._n, dtype=np.int64)
        lengths = np.empty(self._n, dtype=np.int64)
        first = np.concatenate(firsts)
        begins[self._order] = first
        lengths[self._order] = np.concatenate(ends) - first
        return begins, lengths


def _pad(flat: np.ndarray, lengths: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``flat`` (cut by ``lengths``) as a padded ``int64[B, L]`` and its mask."""
    width = int(lengths.max()) if len(lengths) else 0
    ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    mask = np.arange(width) < lengths[:, None]
    ids[mask] = flat
    return ids, mask


def _join(location: str, name: str) -> str:
    return join_location(location, name)


def _manifest_identity(path: Path, digest_of: tuple[int, int, int, int, str] | None = None,
                       ) -> tuple[int, int, int, int, str] | None:
    """(device, inode, size, mtime, sha256) of a manifest file; the hash is recomputed only
    when the stat differs from ``digest_of`` (a shard open costs one ``stat``)."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if digest_of is not None and key == digest_of[:4]:
        return digest_of
    try:
        digest = sha256_file(path)
    except OSError:
        return None
    return (*key, digest)


def _check_shard_file(path: Path, info: ShardInfo) -> None:
    """The shard is a regular file of the manifest's size, before it is mapped."""
    try:
        st = path.stat()
    except OSError as exc:
        raise DatasetError(f"cannot open shard {path}: {exc.strerror}; run spr-data verify"
                           ) from exc
    if not path.is_file():
        raise DatasetError(f"shard {path} is not a file; the manifest names something else "
                           "than a shard: run spr-data verify")
    if st.st_size != info.bytes:
        raise DatasetError(f"shard {path} is {st.st_size:,} bytes, its manifest says "
                           f"{info.bytes:,}; run spr-data verify")


def _check_shard_rows(where: str, shard: _Shard, info: ShardInfo) -> None:
    """The rows the shard's own IPC footer holds are the manifest's."""
    found = int(shard.starts[-1])
    if found != info.rows:
        raise DatasetError(f"shard {where} holds {found:,} rows, its manifest says "
                           f"{info.rows:,}; run spr-data verify")


def _open(location: str, reader: ReaderOptions) -> Dataset:
    check_no_credentials(location)
    fs = reader.filesystem or filesystem_for(location)
    remote = fs.is_network(location)
    if not remote:
        p = Path(location)
        manifest = read_manifest(p)  # validates the directory and names the problem
        ds = Dataset(p, manifest, reader=reader)
        ds._identity = _manifest_identity(p / MANIFEST_NAME)
        return ds
    raw = _remote_manifest(fs, location, reader.retry)
    ds = Dataset(Path(location), parse_manifest(raw, _join(location, MANIFEST_NAME)),
                 location=location, reader=reader, remote=True)
    ds._digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    return ds


def _remote_manifest(fs: FileSystem, location: str, retry: RetryPolicy | None) -> bytes:
    """The manifest's bytes of a networked dataset, its size checked before it is read."""
    where = _join(location, MANIFEST_NAME)
    try:
        with RetryingFile(fs, where, policy=retry) as f:
            if f.expected > MAX_MANIFEST_BYTES:
                raise DatasetError(f"{where} is {f.expected:,} bytes, more than a manifest can "
                                   f"be ({MAX_MANIFEST_BYTES:,}); it is not an spr-data manifest")
            return bytes(read_all(f))
    except InputError as exc:
        raise DatasetError(f"{location} is not a readable spr-data dataset: {exc}") from exc


def open_dataset(path: str | Path, *, filesystem: FileSystem | None = None,
                 retry: RetryPolicy | None = None, cache_dir: str | Path | None = None,
                 cache_limit: int | None = None, verify: str = "remote",
                 reader: ReaderOptions | None = None) -> Dataset:
    """Open a dataset directory (a local path, a network mount, an ``http(s)://`` URL or a
    URL pyarrow reads: ``s3://bucket/path``, ``gs://``…); raises :class:`DatasetError` when it
    is not a valid one.

    A local dataset is memory-mapped. One on a network filesystem is read through the
    retrying reader, never mapped: copied to ``cache_dir`` when given, else read whole, shard
    by shard (see :class:`~spr_data.reader.ReaderOptions`, which ``reader`` passes at once).
    """
    if reader is None:
        reader = ReaderOptions(filesystem=filesystem, retry=retry,
                               cache_dir=None if cache_dir is None else str(cache_dir),
                               cache_limit=cache_limit, verify=verify)
    return _open(str(path), reader)


def open_parent(child: Dataset, path: str, reader: ReaderOptions | None,
                 relative: Any = None) -> Dataset:
    """The parent a lineage names (the ``path`` and ``relative_path`` of its record): its path
    as recorded; where that holds no dataset, its path relative to the child (a tree moved
    or copied whole); else (a relative path recorded by an older version, from another
    working directory) beside the child."""
    if isinstance(relative, str) and not child.remote and not (
            "://" in path or (Path(path) / "manifest.json").exists()):
        moved = child.path / relative
        if (moved / "manifest.json").exists():
            return open_dataset(str(moved), reader=reader)
    if "://" in path or Path(path).is_absolute() or (Path(path) / "manifest.json").exists():
        return open_dataset(path, reader=reader)
    for candidate in (child.path.parent / path, child.path.parent / Path(path).name):
        if (candidate / "manifest.json").exists():
            return open_dataset(str(candidate), reader=reader)
    return open_dataset(path, reader=reader)  # the error names the path as recorded
