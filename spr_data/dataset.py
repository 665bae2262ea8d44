"""Open a dataset directory for random access with memory that does not grow with its size.

Shards are memory-mapped Arrow IPC files opened on first use. A global row index resolves to
(shard, record batch, row) through two tiny sorted tables, and a batch of indices is gathered
with one ``take`` per record batch touched, then put back in the caller's order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from spr_data.errors import DatasetError
from spr_data.manifest import Manifest, read_manifest

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Dataset", "open_dataset"]


class _Shard:
    """One memory-mapped shard: its record batches and where each starts."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        try:
            self._source = pa.memory_map(str(path), "r")
            reader = pa.ipc.open_file(self._source)
        except (OSError, pa.ArrowInvalid) as exc:
            raise DatasetError(f"cannot open shard {path}: {exc}; run spr-data verify") from exc
        if not reader.schema.equals(schema):
            raise DatasetError(f"shard {path} has schema {reader.schema}, expected {schema}")
        self.batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self.starts = np.cumsum([0] + [b.num_rows for b in self.batches], dtype=np.int64)

    def take(self, local: np.ndarray) -> pa.RecordBatch:
        return _grouped_take(local, self.starts,
                             lambda k, rows: self.batches[k].take(pa.array(rows)))


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
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return pa.concat_batches(pieces).take(pa.array(inverse))


class Dataset:
    """A dataset directory opened through its manifest.

    ``len(ds)``, ``ds[i]`` (one row as a dict), ``ds.take(indices)`` (an Arrow table in the
    order given), ``ds.iter_batches(n)`` and ``ds.scan()`` (a polars LazyFrame). Opening reads
    only the manifest; each shard is mapped the first time a row of it is needed.
    """

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest
        self._starts = np.cumsum([0] + [s.rows for s in manifest.shards], dtype=np.int64)
        self._shards: list[_Shard | None] = [None] * len(manifest.shards)

    def __repr__(self) -> str:
        return (f"Dataset({str(self.path)!r}, kind={self.kind!r}, langs={self.langs!r}, "
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
        return [self.path / s.file for s in self.manifest.shards]

    @property
    def rejects(self) -> Dataset | None:
        """The dataset of rejected rows that sits beside this one, if any."""
        name = self.manifest.rejects_dir
        return open_dataset(self.path / name) if name else None

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} is out of range for a dataset of {n} rows")
        row: dict[str, Any] = self.take([i]).to_pylist()[0]
        return row

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array) -> pa.Table:
        """Rows at global positions ``indices`` (0-based, not ids), in the order given."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0:
            return self.schema.empty_table()
        n = len(self)
        if idx.min() < 0 or idx.max() >= n:
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise IndexError(f"row {bad} is out of range for a dataset of {n} rows")
        batch = _grouped_take(idx, self._starts, lambda k, rows: self._shard(k).take(rows))
        return pa.Table.from_batches([batch])

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
            shard = self._shards[k] = _Shard(self.shard_paths[k], self.schema)
        return shard


def open_dataset(path: str | Path) -> Dataset:
    """Open a dataset directory; raises :class:`DatasetError` when it is not a valid one."""
    p = Path(path)
    return Dataset(p, read_manifest(p))
