"""``verify``: re-check a dataset directory against its manifest, byte for byte."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.arrays import unique
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import DatasetError, SprDataError
from spr_data.fsio import TMP_SUFFIX, sha256_file
from spr_data.manifest import Manifest, ShardInfo
from spr_data.reader import ReaderOptions, fetch_verified, filesystem_for
from spr_data.schema import ID, REASON, columns_line, schema_mismatch

#: how long verify waits before it re-reads a shard whose hash did not match (uncached)
_REREAD_PAUSE = 0.2

__all__ = ["VerifyReport", "check_shard_hash", "check_shards", "verify_dataset"]


@dataclass
class VerifyReport:
    """What ``verify`` found; ``ok`` when the dataset matches its manifest in every respect."""

    path: Path | str
    #: rows read from the shards that passed their checks (a corrupt shard's count none)
    rows: int = 0
    shards: int = 0
    #: rows the manifest lists, and the shards that failed a check
    manifest_rows: int = 0
    bad_shards: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rejects: VerifyReport | None = None
    #: rows per ``reason``, counted in the same pass, when the dataset has that column
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.problems and (self.rejects is None or self.rejects.ok)

    def all_problems(self) -> list[str]:
        return self.problems + (self.rejects.all_problems() if self.rejects else [])

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "path": str(self.path), "rows": self.rows, "shards": self.shards,
                "manifest_rows": self.manifest_rows, "bad_shards": self.bad_shards,
                "problems": self.all_problems(),
                "rejects": self.rejects.to_json() if self.rejects else None}


def check_shards(paths: Sequence[Path], manifest: Manifest) -> None:
    """Cross-check the manifest against each shard's own metadata (its IPC footer: rows and
    schema) and size, before a stage plans or allocates anything by the manifest's numbers.
    Reads only the footers (memory-mapped), so it costs milliseconds per shard."""
    for path, info in zip(paths, manifest.shards, strict=True):
        try:
            if not path.is_file():
                raise DatasetError(f"shard {path} is not a file; run spr-data verify")
            size = path.stat().st_size
            if size != info.bytes:
                raise DatasetError(f"shard {path} is {size:,} bytes, its manifest says "
                                   f"{info.bytes:,}; run spr-data verify")
            with pa.memory_map(str(path), "r") as source:
                reader = pa.ipc.open_file(source)
                schema = reader.schema
                rows = sum(reader.get_batch(i).num_rows
                           for i in range(reader.num_record_batches))
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"cannot read shard {path}: {exc}; run spr-data verify"
                               ) from exc
        if not schema.equals(manifest.schema):
            raise DatasetError(schema_mismatch(str(path), schema, manifest.schema))
        if rows != info.rows:
            raise DatasetError(f"shard {path} holds {rows:,} rows, its manifest says "
                               f"{info.rows:,}; run spr-data verify")


def check_shard_hash(path: str | Path, expected: str) -> None:
    """Raise unless the shard file's bytes hash to ``expected`` (its manifest hash): a stage
    that reads a corrupt shard fails instead of passing the corruption on."""
    if expected and sha256_file(Path(path)) != expected:
        raise DatasetError(f"shard {path} does not match its manifest hash (the file changed "
                           "or is corrupt); run spr-data verify")


def verify_dataset(
    path: str | Path, *, on_shard: Callable[[str], None] | None = None,
    reader: ReaderOptions | None = None,
) -> VerifyReport:
    """Re-hash every shard and check rows, bytes, schema, ids and reject counts.

    Row ids of the rows and of the rejects must be distinct, below the manifest's
    ``id_bound``, and together as many as ``rows_in`` — i.e. they partition the input.
    A dataset on a network filesystem or URL is read through the retrying reader.
    """
    ds = open_dataset(str(path), reader=reader)
    manifest = ds.manifest
    try:
        rejects_ds = ds.rejects
    except DatasetError:
        rejects_ds = None
    seen = _SeenIds(manifest.id_bound, _rows_in_files(ds) + _rows_in_files(rejects_ds))
    report = _verify_one(ds, seen, on_shard)
    if manifest.rejects_dir:
        try:
            rejects = ds.rejects
        except DatasetError as exc:
            report.problems.append(str(exc))
        else:
            assert rejects is not None  # noqa: S101 - the manifest names it
            rejects_path = rejects.location
            report.rejects = _verify_one(rejects, seen, on_shard)
            by_reason = dict(sorted(report.rejects.reasons.items()))
            if report.rejects.ok and by_reason != manifest.rejects:
                report.problems.append(
                    f"manifest rejects {manifest.rejects} but {rejects_path} holds {by_reason}")
            total = report.rows + report.rejects.rows
            # a shard that failed its own checks counts no rows: the sum would only repeat it
            if report.ok and report.rejects.ok and total != manifest.rows_in:
                report.problems.append(
                    f"rows ({report.rows}) + rejects ({report.rejects.rows}) = {total}, "
                    f"but {manifest.rows_in} rows came in")
    elif sum(manifest.rejects.values()):
        report.problems.append("manifest counts rejects but names no rejects directory")
    if report.ok and manifest.rejects_dir and seen.distinct() != manifest.rows_in:
        report.problems.append(
            f"ids of rows and rejects cover {seen.distinct()} distinct ids, "
            f"expected {manifest.rows_in}")
    return report


def _remote_source(ds: Dataset, shard: ShardInfo, where: str) -> tuple[Any, str | None]:
    """A networked shard's verified bytes (never mapped), or the problem reading them."""
    fs = ds.reader.filesystem or filesystem_for(ds.location)
    try:
        data = fetch_verified(fs, ds.shard_location(shard), size=shard.bytes, sha256=shard.hash,
                              policy=ds.reader.retry)
    except SprDataError as exc:
        if isinstance(exc, DatasetError):  # a mismatch: the whole dataset may be a new one
            try:
                ds.check_not_replaced()
            except DatasetError as replaced:
                return None, f"{where} {replaced}"
        return None, f"{where} {exc}"
    return pa.BufferReader(pa.py_buffer(data)), None


class _SeenIds:
    """The row ids met so far: a bitmap over ``0..bound`` when that is near the number of
    records, else the ids themselves, checked for repeats by sorting — so that a sparse or
    hostile ``id_bound`` cannot make verify allocate terabytes. ``records`` must be a count
    the files bound (:func:`_rows_in_files`), never a manifest's number as it is."""

    def __init__(self, bound: int, records: int) -> None:
        self.bound = bound
        self._bitmap = (np.zeros(bound, dtype=bool) if bound <= 4 * records + (1 << 20)
                        else None)
        self._parts: list[np.ndarray] = []

    def add(self, ids: np.ndarray) -> int:
        """Note ``ids``; how many of them were met before (or repeat among themselves)."""
        repeated = len(ids) - len(unique(ids))
        if self._bitmap is None:
            self._parts.append(ids)
            return repeated
        repeated += int(self._bitmap[ids].sum())
        self._bitmap[ids] = True
        return repeated

    def distinct(self) -> int:
        if self._bitmap is not None:
            return int(self._bitmap.sum())
        return len(unique(np.concatenate(self._parts))) if self._parts else 0


def _rows_in_files(ds: Dataset | None) -> int:
    """The rows of the shards whose file really is the manifest's size (stat, or the server's
    Content-Length), each at most one per 8 bytes (a row id takes 8): a count the files bound,
    whatever a forged manifest says. Shards of another size count none (verify reports them)."""
    if ds is None:
        return 0
    return sum(min(info.rows, info.bytes // 8) for info in ds.manifest.shards
               if ds.shard_size(info) == info.bytes)


def _verify_one(ds: Dataset, seen: _SeenIds,
                on_shard: Callable[[str], None] | None) -> VerifyReport:
    manifest = ds.manifest
    report = VerifyReport(ds.location, shards=len(manifest.shards),
                          manifest_rows=sum(shard.rows for shard in manifest.shards))
    has_ids = ID in manifest.schema.names
    for shard in manifest.shards:
        if on_shard is not None:
            on_shard(shard.file)
        problems, table = _verify_shard(ds, shard, seen, has_ids)
        if problems or table is None:
            report.problems += problems
            report.bad_shards.append(shard.file)
            continue
        report.rows += table.num_rows
        if REASON in table.schema.names:
            for item in pc.value_counts(table.column(REASON)).to_pylist():
                report.reasons[item["values"]] += item["counts"]
    if not ds.remote:
        report.problems += _unlisted_shards(ds.path, manifest)
    return report


def _verify_shard(ds: Dataset, shard: ShardInfo, seen: _SeenIds,
                  has_ids: bool) -> tuple[list[str], pa.Table | None]:
    """One shard's problems, and its table where it could be read (its rows count where it
    has no problem)."""
    where = f"{ds.shard_location(shard)}:"  # a URL stays a URL (a Path would mangle it)
    if ds.remote:
        source, problem = _remote_source(ds, shard, where)
        if problem is not None:
            return [problem], None
    else:
        path = ds.path / shard.file
        if not path.is_file():
            return [f"{where} missing"], None
        size = path.stat().st_size
        if size != shard.bytes:
            return [f"{where} {size} bytes, manifest says {shard.bytes}"], None
        digest = sha256_file(path)
        if digest != shard.hash:  # read it again from the disk before calling it corrupt
            time.sleep(_REREAD_PAUSE)
            digest = sha256_file(path, uncached=True)
        if digest != shard.hash:
            return [f"{where} content hash {digest} differs from the manifest's {shard.hash} "
                    "(the file changed or is corrupt)"], None
        source = pa.memory_map(str(path))
    try:
        with source:
            table = pa.ipc.open_file(source).read_all()
            problems = _check_table(table, ds.manifest, shard.rows, shard.first_id, seen,
                                    has_ids)
    except (OSError, pa.ArrowInvalid) as exc:
        return [f"{where} not a readable Arrow IPC file: {exc}"], None
    return [f"{where} {p}" for p in problems], table


def _unlisted_shards(directory: Path, manifest: Manifest) -> list[str]:
    """Shard files beside the manifest that it does not list: ``pyarrow.dataset`` and a
    polars ``*.arrow`` glob read their rows as the dataset's, so the directory no longer
    opens as exactly its rows (a temp file a run is writing, ``.tmp``, is not one)."""
    listed = {shard.file for shard in manifest.shards}
    try:
        names = sorted(p.name for p in directory.iterdir() if p.is_file())
    except OSError:
        return []
    return [f"{directory / name}: a shard file the manifest does not list (other tools would "
            "read its rows as this dataset's); move it away"
            for name in names if name not in listed and not name.endswith(TMP_SUFFIX)
            and (name.startswith("shard-") or name.endswith(".arrow"))]


def _check_table(table: pa.Table, manifest: Manifest, rows: int, first_id: int | None,
                 seen: _SeenIds, has_ids: bool) -> list[str]:
    problems = []
    if not table.schema.equals(manifest.schema):
        found, said = columns_line(table.schema), columns_line(manifest.schema)
        problems.append(f"columns {found} differ from the manifest's {said}"
                        + (" in nullability or metadata" if found == said else ""))
        return problems
    if table.num_rows != rows:
        problems.append(f"{table.num_rows} rows, manifest says {rows}")
    if not has_ids or not table.num_rows:
        return problems
    ids = table.column(ID).to_numpy()
    if first_id is not None and int(ids[0]) != first_id:
        problems.append(f"first id {int(ids[0])}, manifest says {first_id}")
    if int(ids.max()) >= seen.bound:
        problems.append(f"id {int(ids.max())} is outside 0..{seen.bound - 1}")
        return problems
    repeated = seen.add(ids)
    if repeated:
        problems.append(f"{repeated} row id(s) appear more than once in the dataset")
    return problems
