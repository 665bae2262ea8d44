"""``audit``: prove a dataset holds what its lineage says, and that a loader saw every row once.

The 2,000-pair bug fed a model the same 2,000 pairs of 14.17M; its only symptom was a loss
that looked too good. The checks here catch that class of bug from both ends: the data
(*content*: distinct pairs against rows, whatever the ids say) and the loader (*ids log*:
the row ids a training loop really consumed, per epoch, against the dataset's ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spr_data.arrays import member, unique
from spr_data.dataset import Dataset, open_dataset, open_parent
from spr_data.errors import DatasetError, InputError
from spr_data.reader import ReaderOptions
from spr_data.schema import ID, text_columns
from spr_data.verify import verify_dataset

__all__ = ["AuditReport", "IdsRecorder", "Replay", "audit_dataset", "read_ids_log"]

#: below this share of distinct contents among rows, the content check fails
DEFAULT_MIN_DISTINCT = 0.5


@dataclass
class AuditReport:
    """Every check with its verdict and figures; ``ok`` when all pass."""

    path: Path | str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.checks.values())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "path": str(self.path), **self.checks}


class IdsRecorder:
    """Writes the ids log ``audit --ids-log`` reads, from any training loop::

        with IdsRecorder("ids.log") as rec:
            for epoch in range(E):
                rec.next_epoch()
                for batch in loader:
                    rec.record(batch["ids"])

    A resumed run continues the log: save :meth:`state_dict` with the checkpoint, and open
    the log with it (``IdsRecorder("ids.log", state=saved)``). The ids the killed run logged
    after its checkpoint are cut off, and the first :meth:`next_epoch` continues the epoch
    the state was saved in (as the iterator's ``set_epoch`` after ``load_state_dict`` does).
    """

    def __init__(self, path: str | Path, *, state: dict[str, Any] | None = None) -> None:
        self._epoch = -1
        self._continues = False
        if state is None:
            self._file = open(path, "w", encoding="ascii")  # noqa: SIM115 - closed in close()
            return
        try:
            epoch, offset = int(state["epoch"]), int(state["offset"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"not an IdsRecorder state: {state!r:.80}") from None
        size = Path(path).stat().st_size if Path(path).is_file() else None
        if size is None or size < offset:
            raise InputError(f"ids log {path} holds {size or 0:,} bytes, fewer than the "
                             f"{offset:,} its saved state says: not the log of that run")
        self._file = open(path, "r+", encoding="ascii")  # noqa: SIM115 - closed in close()
        self._file.truncate(offset)  # what the killed run logged after its checkpoint
        self._file.seek(offset)
        self._epoch, self._continues = epoch, epoch >= 0

    def next_epoch(self) -> None:
        if self._continues:  # the resumed epoch: its header is written already
            self._continues = False
            return
        self._epoch += 1
        self._file.write(f"# epoch {self._epoch}\n")

    def record(self, ids: Any) -> None:
        values = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._file.write("".join(f"{v}\n" for v in values.tolist()))

    def state_dict(self) -> dict[str, int]:
        """Where the log stands (its epoch and length), flushed: save it with the checkpoint."""
        self._file.flush()
        return {"epoch": self._epoch, "offset": self._file.tell()}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> IdsRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: stages a lineage may have before audit calls it corrupt (a real one has a handful)
MAX_LINEAGE_DEPTH = 256

def read_ids_log(path: str | Path) -> list[np.ndarray]:
    """Row ids per epoch: text (one id per line, ``# epoch N`` headers between epochs, numbered
    0, 1, … in order) or a ``.npy`` integer array of one epoch."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"ids log {p} is a directory; give the log file")
    if not p.is_file():
        raise InputError(f"ids log {p} does not exist")
    if p.suffix == ".npy":
        with open(p, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                raise InputError(f"{p} is not a .npy file (no numpy header); give a .npy "
                                 "array of ids or a text log with one id per line")
        try:
            ids = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"{p} is not a numpy array of ids: {exc}") from exc
        if not np.issubdtype(ids.dtype, np.integer):
            raise InputError(f"{p} holds {ids.dtype} values; an ids log holds integer row ids")
        return [np.asarray(ids, dtype=np.int64).reshape(-1)]
    epochs: list[list[int]] = []
    current: list[int] | None = None  # the open epoch; ids before any header are epoch 0
    with open(p, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise InputError(f"{p}:{number}: not UTF-8 text; an ids log has one row id per "
                                 "line (or is a .npy array)") from None
            if not text:
                continue
            if text.startswith("#"):
                words = text[1:].split()
                if not words or words[0].lower() != "epoch":
                    continue  # a comment
                if current is not None:
                    epochs.append(current)
                if len(words) != 2 or words[1] != str(len(epochs)):
                    raise InputError(f"{p}:{number}: expected '# epoch {len(epochs)}', found "
                                     f"{text[:40]!r} (epochs are numbered 0, 1, … in order)")
                current = []
                continue
            try:
                value = int(text)
            except ValueError:
                raise InputError(f"{p}:{number}: expected a row id, found {text[:40]!r}") \
                    from None
            if not 0 <= value < 1 << 63:
                raise InputError(f"{p}:{number}: row id {text[:40]} is out of range")
            if current is None:
                current = []
            current.append(value)
    if current is not None or not epochs:
        epochs.append(current or [])
    return [np.asarray(e, dtype=np.int64) for e in epochs]


def _all_ids(ds: Dataset) -> np.ndarray:
    return np.concatenate([b.column(ID).to_numpy() for b in ds.iter_batches()]) \
        if len(ds) else np.zeros(0, dtype=np.uint64)


def _check_integrity(path: Path | str, reader: ReaderOptions | None) -> dict[str, Any]:
    report = verify_dataset(path, reader=reader)
    return {"ok": report.ok, "rows": report.rows, "shards": report.shards,
            "problems": report.all_problems()}


def _check_accounting(ds: Dataset, reader: ReaderOptions | None = None) -> dict[str, Any]:
    """Walk the lineage: at each stage the ids in are exactly the ids kept plus rejected."""
    stages = []
    problems: list[str] = []
    current: Dataset | None = ds
    kept = _all_ids(ds)
    visited: set[str] = set()
    while current is not None:
        where = current.location if current.remote else str(current.path.resolve())
        if where in visited or len(visited) >= MAX_LINEAGE_DEPTH:
            problems.append(f"{current.location}: the lineage "
                            + ("comes back to it (a loop)" if where in visited else
                               f"is deeper than {MAX_LINEAGE_DEPTH} stages")
                            + "; the manifest is corrupt or forged, accounting stops there")
            break
        visited.add(where)
        lineage = current.manifest.lineage
        rejects = current.rejects
        rejected = _all_ids(rejects) if rejects is not None else np.zeros(0, dtype=np.uint64)
        out = np.concatenate([kept, rejected])
        parent_info = lineage.get("parent")
        parent = None
        if isinstance(parent_info, dict) and parent_info.get("path"):
            try:
                parent = open_parent(current, str(parent_info["path"]), reader,
                                      parent_info.get("relative_path"))
            except DatasetError as exc:
                problems.append(f"{current.location}: its parent {parent_info['path']} cannot be "
                                f"opened ({exc}); accounting stops there")
            if parent is not None and parent_info.get("manifest_sha256") not in (
                    None, parent.manifest_digest):
                problems.append(f"{current.location}: its parent {parent.location} changed since "
                                "it was made (its manifest's sha256 is not the one the lineage "
                                "recorded); accounting stops there")
                parent = None
        if parent is None and current.manifest.rows_in > len(out):
            # the ids 0..rows_in are not built: rows_in is not bounded by any file's size
            problems.append(f"{current.location} ({lineage.get('stage', '?')}): "
                            f"{current.manifest.rows_in:,} rows came in, but only "
                            f"{len(kept):,} kept + {len(rejected):,} rejected are there")
            stages.append({"stage": lineage.get("stage", "?"), "path": current.location,
                           "rows_in": current.manifest.rows_in, "kept": len(kept),
                           "rejected": len(rejected), "ok": False})
            break
        if parent is None and isinstance(parent_info, dict) and parent_info.get("path"):
            # the parent is named but cannot be read (said above): its ids are not known, and
            # need not be 0..rows_in (ingest rejects some); what this stage's own files say
            distinct_out = unique(out)
            bound = current.manifest.id_bound
            ok = (len(distinct_out) == len(out) == current.manifest.rows_in
                  and (not len(out) or int(distinct_out[-1]) < bound))
            stages.append({"stage": lineage.get("stage", "?"), "path": current.location,
                           "rows_in": current.manifest.rows_in, "kept": len(kept),
                           "rejected": len(rejected), "ok": bool(ok)})
            if not ok:
                problems.append(f"{current.location} ({lineage.get('stage', '?')}): "
                                f"{current.manifest.rows_in:,} rows came in, {len(kept):,} kept "
                                f"+ {len(rejected):,} rejected, {len(out) - len(distinct_out)} "
                                f"repeated or beyond its id bound {bound:,}")
            break
        expected = _all_ids(parent) if parent is not None else \
            np.arange(current.manifest.rows_in, dtype=np.uint64)
        distinct_out, distinct_in = unique(out), unique(expected)
        ok = len(distinct_out) == len(out) and np.array_equal(distinct_out, distinct_in) \
            and len(expected) == len(distinct_in)
        stages.append({"stage": lineage.get("stage", "?"), "path": current.location,
                       "rows_in": len(expected), "kept": len(kept),
                       "rejected": len(rejected), "ok": bool(ok)})
        if not ok:
            problems.append(f"{current.location} ({lineage.get('stage', '?')}): "
                            f"{len(expected)} ids in, {len(kept)} kept + {len(rejected)} "
                            f"rejected, {len(out) - len(distinct_out)} repeated; the id sets "
                            "differ")
        current, kept = parent, expected  # the parent's rows were just read
    return {"ok": not problems, "stages": stages, "problems": problems}


def _check_content(ds: Dataset, min_distinct: float) -> dict[str, Any]:
    """Distinct contents by a 64-bit hash of the text columns: polars' row hash, native and
    parallel (a collision among 14M rows has odds of about 1 in 200,000, and would only
    lower the count by one)."""
    import polars as pl

    columns = list(text_columns(ds.kind))  # type: ignore[arg-type]
    hashes = [pl.from_arrow(b.select(columns)).hash_rows(seed=7).to_numpy()  # type: ignore[union-attr]
              for b in ds.iter_batches(1 << 20)]
    all_hashes = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    rows = len(all_hashes)
    distinct = len(unique(all_hashes))
    share = distinct / rows if rows else 1.0
    ok = share >= min_distinct
    return {"ok": ok, "rows": rows, "distinct_content": distinct,
            "distinct_share": round(share, 6), "min_distinct": min_distinct,
            "problems": [] if ok else [
                f"{rows:,} rows hold only {distinct:,} distinct contents ({share:.2%}); a "
                "sharding or sampling bug may repeat a few rows (the 2,000-pair bug)"]}


def _read_ids_logs(paths: Sequence[Path]) -> list[np.ndarray]:
    """Row ids per epoch of several logs together (each rank's, under DDP): epoch ``i`` is
    every log's epoch ``i``; the logs must hold as many epochs each."""
    twice = [str(p) for p in paths if sum(q.resolve() == p.resolve() for q in paths) > 1]
    if twice:
        raise InputError(f"ids log {twice[0]} is given twice; give each rank's log once")
    logs = [read_ids_log(path) for path in paths]
    for path, log in zip(paths[1:], logs[1:], strict=True):
        if len(log) != len(logs[0]):
            raise InputError(f"ids log {path} holds {len(log)} epoch(s) and {paths[0]} "
                             f"{len(logs[0])}: the logs of one run's ranks hold the same "
                             "epochs")
    return [np.concatenate(epoch) for epoch in zip(*logs, strict=True)]


def _check_ids_log(ds: Dataset, paths: Sequence[Path],
                   replay: Replay | None = None) -> dict[str, Any]:
    """Each epoch of a loader's ids logs (one, or each rank's) covers every row once; with the
    loader's settings (``replay``), as many rows missed and repeated as those settings drop
    and repeat by design (the remainder a fixed batch size leaves, say), as
    :func:`_check_replay` counts."""
    ids = np.sort(_all_ids(ds).astype(np.int64))
    epochs = []
    problems = []
    for number, seen in enumerate(_read_ids_logs(paths)):
        distinct = unique(seen)
        known = member(distinct, ids)
        missed = len(ids) - int(known.sum())
        repeats = len(seen) - len(distinct)
        unknown = int((~known).sum())
        dropped = repeated = 0
        if replay is not None:
            _, _, dropped, repeated = (_replay_fixed(len(ds), replay, number)
                                       if replay.max_tokens is None
                                       else _replay_tokens(ds, replay, number))
        ok = missed == dropped and repeats == repeated and unknown == 0
        epochs.append({"epoch": number, "ok": ok, "seen": len(seen),
                       "distinct_rows": int(known.sum()), "repeats": repeats,
                       "missed": missed, "unknown_ids": unknown,
                       "dropped_by_design": dropped, "repeated_by_design": repeated,
                       "coverage": round(int(known.sum()) / max(len(ids), 1), 6)})
        if not ok:
            by_design = (f" (by design, for the settings given: {dropped:,} missed, "
                         f"{repeated:,} repeats)" if replay is not None else "")
            if replay is not None and len(paths) < replay.world_size:
                by_design += (f"; {len(paths)} log(s) for a world of {replay.world_size}: give "
                              "each rank's --ids-log")
            problems.append(f"epoch {number}: {int(known.sum()):,} of {len(ids):,} rows seen "
                            f"({missed:,} missed), {repeats:,} repeats, {unknown:,} ids not in "
                            f"the dataset{by_design}")
    return {"ok": not problems, "epochs": epochs, "problems": problems}


@dataclass(frozen=True)
class Replay:
    """The loader settings ``audit`` replays: spr-data's own epoch order and dealing."""

    world_size: int = 1
    workers: int = 0
    batch_size: int | None = 1
    seed: int = 0
    epochs: int = 1
    drop_remainder: bool = True
    max_tokens: int | None = None
    window: int | None = None
    block: int | None = None


#: positions replayed at a time: bounds the replay's memory whatever the dataset's size
_REPLAY_CHUNK = 1 << 20


def _replay_fixed(n: int, replay: Replay, epoch: int) -> tuple[np.ndarray, list[int], int, int]:
    from spr_data.pipeline.order import epoch_order, plan

    assert replay.batch_size is not None  # noqa: S101 - fixed-size mode
    p = plan(n, world_size=replay.world_size, batch_size=replay.batch_size,
             workers=replay.workers, drop_remainder=replay.drop_remainder)
    seen = np.zeros(n, dtype=np.int64)
    batches = []
    step = max(1, _REPLAY_CHUNK // replay.batch_size)
    for rank in range(replay.world_size):
        count = 0
        for worker in range(p.workers):
            numbers = np.asarray(p.worker_batches(worker), dtype=np.int64)
            count += len(numbers)
            for start in range(0, len(numbers), step):
                rows = epoch_order(n, replay.seed, epoch,
                                   p.batch_positions(rank, numbers[start:start + step]),
                                   replay.block)
                seen += np.bincount(rows, minlength=n)
        batches.append(count)
    return seen, batches, p.dropped, p.repeated


def _replay_tokens(ds: Dataset, replay: Replay,
                   epoch: int) -> tuple[np.ndarray, list[int], int, int]:
    from spr_data.pipeline.order import DEFAULT_WINDOW, token_plan
    from spr_data.pipeline.tokenize import row_sizes

    assert replay.max_tokens is not None  # noqa: S101 - token-budget mode
    n = len(ds)
    p = token_plan(n, row_sizes(ds), max_tokens=replay.max_tokens, seed=replay.seed,
                   epoch=epoch, world_size=replay.world_size, workers=replay.workers,
                   drop_remainder=replay.drop_remainder, max_rows=replay.batch_size,
                   window=replay.window or DEFAULT_WINDOW, block=replay.block)
    reads = np.zeros(p.total_batches, dtype=np.int64)  # how often each batch of the epoch is read
    batches = []
    for rank in range(replay.world_size):
        count = 0
        for worker in range(p.workers):
            for b in p.worker_batches(worker):
                reads[p.global_batch(rank, b)] += 1
                count += 1
        batches.append(count)
    seen = np.zeros(n, dtype=np.int64)
    for k in range(p.total_batches):  # in order: each window is rebuilt once
        rows = p.rows_of(k)
        seen[rows] += reads[k]
    return seen, batches, p.dropped, p.repeated


def _check_replay(ds: Dataset, replay: Replay) -> dict[str, Any]:
    """Replays the very functions the iterator uses and counts what each epoch saw."""
    from spr_data.pipeline.order import epoch_order

    ds.check_sizes()  # the replay allocates by the rows: the manifest's, bounded by the files
    n = len(ds)
    epochs, problems = [], []
    orders = []
    for epoch in range(replay.epochs):
        seen, batches, dropped, repeated = (
            _replay_fixed(n, replay, epoch) if replay.max_tokens is None
            else _replay_tokens(ds, replay, epoch))
        orders.append(epoch_order(n, replay.seed, epoch, np.arange(min(n, 64)), replay.block))
        distinct = int((seen > 0).sum())
        repeats = int((seen - 1).clip(min=0).sum())
        missed = n - distinct
        equal = len(set(batches)) <= 1
        empty = bool(n) and not any(batches)  # everything dropped: nothing to train on
        ok = equal and repeats == repeated and missed == dropped and not empty
        epochs.append({"epoch": epoch, "ok": ok, "distinct_rows": distinct,
                       "repeats": repeats, "missed": missed, "batches_per_rank": batches,
                       "dropped_by_design": dropped, "repeated_by_design": repeated})
        if empty:
            problems.append(f"epoch {epoch}: no batch at all — the world size times the batch "
                            f"(or token budget) needs more than the {n:,} rows; lower them or "
                            "do not drop the remainder")
        elif not ok:
            problems.append(f"epoch {epoch}: {distinct:,} of {n:,} rows, {repeats:,} repeats, "
                            f"{missed:,} missed, batches per rank {batches}")
    if len(orders) > 1 and all(np.array_equal(orders[0], o) for o in orders[1:]) and n > 2:
        problems.append("every epoch has the same order; set_epoch is not taking effect")
    return {"ok": not problems, "world_size": replay.world_size, "workers": replay.workers,
            "batch_size": replay.batch_size, "max_tokens": replay.max_tokens,
            "seed": replay.seed, "epochs": epochs, "problems": problems}


def audit_dataset(path: str | Path, *,
                  ids_log: str | Path | Sequence[str | Path] | None = None,
                  min_distinct: float = DEFAULT_MIN_DISTINCT,
                  replay: Replay | None = None,
                  reader: ReaderOptions | None = None) -> AuditReport:
    """Integrity, accounting through the lineage, content distinctness, and (with
    ``ids_log``: a log, or a list of them, each rank's, checked together) the coverage of a
    loader's epochs."""
    ds = open_dataset(str(path), reader=reader)
    ds.require_rows(path, "audit")
    report = AuditReport(ds.location)
    checks: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("integrity", lambda: _check_integrity(str(path), reader)),
        ("accounting", lambda: _check_accounting(ds, reader)),
        ("content", lambda: _check_content(ds, min_distinct)),
    ]
    if replay is not None:
        checks.append(("epoch_replay", lambda: _check_replay(ds, replay)))
    logs = ([] if ids_log is None else [Path(ids_log)] if isinstance(ids_log, (str, Path))
            else [Path(p) for p in ids_log])
    if logs:
        checks.append(("ids_log", lambda: _check_ids_log(ds, logs, replay)))
    for name, check in checks:
        try:
            report.checks[name] = check()
        except DatasetError as exc:  # a shard that cannot be read fails this check, not audit
            report.checks[name] = {"ok": False, "problems": [str(exc)]}
    return report

