"""``clean``: run the QA stages of a recipe over a dataset; keep good rows, keep every reject.

The stages are declared (:mod:`spr_data.qa.stages`); the shard runner
(:mod:`spr_data.pipeline.runner`) owns the lock, the units, resume, accounting and the
manifest. A run has three steps, each resumable unit by unit:

1. *score* (a task per unit): the row stages (normalize → rules → langid) in order, and each
   corpus stage's *partial* (dedup's sorted hashes); the scored rows go to
   ``OUT/.work/scored-NNNNN.arrow``.
2. *combine* (each corpus stage in order, itself as tasks): dedup by hash partitions, the
   alignment model trained and its thresholds calibrated.
3. *decide* (a task per unit): every stage's reasons in declared order; each unit becomes one
   kept shard and one reject shard, so the output is byte-identical whatever the number of
   workers or the executor. Rows in = kept + rejected, by exact id sets, or the run stops.

The manifest is written last; ``.work`` is removed once it is.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data._version import __version__
from spr_data.arrays import member
from spr_data.dataset import open_parent
from spr_data.errors import DataLossError, InputError, OutputError, SprDataError
from spr_data.fsio import (
    atomic_write_bytes,
    fsync_path,
    os_error_message,
    sha256_file,
    temp_path,
)
from spr_data.heap import release_heap
from spr_data.manifest import ShardInfo
from spr_data.outdir import REJECTS_DIR, temp_tag
from spr_data.pipeline.executor import Executor
from spr_data.pipeline.runner import ShardRun, Unit, open_input, read_unit
from spr_data.pipeline.units import equal_parts, finished_unit, mark_unit_finished
from spr_data.qa.align_stage import ALIGN_SCORE, P_TRANSLATION, SCORE_HISTOGRAM_EDGES
from spr_data.qa.quarantine import read_quarantine
from spr_data.qa.scripts import normalize_lang
from spr_data.qa.stage import CorpusStage, Stage, stage_of, unit_ids
from spr_data.qa.stages import build_stages
from spr_data.reader import ReaderOptions
from spr_data.recipe import Recipe, load_recipe
from spr_data.schema import ID, REASON, token_id_columns
from spr_data.writer import shard_name, write_shard_file

__all__ = ["ALIGN_SCORE", "P_TRANSLATION", "CleanReport", "clean", "read_quarantine"]

T = TypeVar("T")
R = TypeVar("R")

REASONS = "reasons"
STAGE = "stage"
_PASS1_REASONS = "_reasons"
_EXAMPLES = 3
#: rows a score or decide task handles at a time. Why not more: a score worker's memory is a
#: slice's temporaries above its imports (normalize, rules, langid: about 150 MB at 32,768 rows
#: of two joined sentences); at 5M pairs the process tree peaked in the score step at 1,019 MB
#: with 32,768 rows, 859 MB with 16,384 (52.6 and 50.3 s; at 1M pairs 1.01x the wall and 1.03x
#: the CPU). The rules fit the length ratio per slice, so the slice is part of the decision:
#: at 1M pairs the same rows kept, 2 of 50,635 rejects with another first reason
_SLICE_ROWS = 16384
_HISTOGRAMS = {
    "length_ratio": np.concatenate([np.linspace(1.0, 4.0, 61), np.linspace(4.5, 20.0, 32)]),
    ALIGN_SCORE: SCORE_HISTOGRAM_EDGES,
}
#: what each corpus stage's combine step is called in the report's timings
_TIMING = {"align": "align_train"}
_SIDES = ("src", "tgt", "text")


@dataclass
class CleanReport:
    """The waterfall and distributions of a clean run; ``to_json`` is ``report.json``."""

    out: str | Path
    rows_in: int
    rows_kept: int
    by_reason: dict[str, int]
    all_reasons: dict[str, int]
    stages: list[dict[str, Any]]
    distributions: dict[str, Any]
    align: dict[str, Any] | None
    recipe: dict[str, Any]
    recipe_hash: str
    #: wall seconds from the start to this report (publishing the output after it is not
    #: counted: the renames, an upload to ``s3://``)
    seconds: float
    workers: int
    #: units whose score or decide step an earlier (killed) run finished, reused here
    resumed_shards: int = 0
    #: quarantine ids that are not rows of this dataset (another dataset's ids, a typo)
    quarantine_not_found: int = 0
    #: wall seconds of each step: score, dedup, align_train, decide
    timings: dict[str, float] = field(default_factory=dict)
    #: a few rejected rows per first reason (the first by shard and row order), for a person
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: what the run could not check, for a person (the alignment's own are under ``align``)
    warnings: list[str] = field(default_factory=list)

    @property
    def rows_rejected(self) -> int:
        return self.rows_in - self.rows_kept

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "rows_in": self.rows_in, "rows_kept": self.rows_kept,
            "rows_rejected": self.rows_rejected, "by_reason": self.by_reason,
            "all_reasons": self.all_reasons, "stages": self.stages,
            "distributions": self.distributions, "align": self.align,
            "recipe": self.recipe, "recipe_hash": self.recipe_hash,
            "seconds": round(self.seconds, 3), "workers": self.workers,
            "resumed_shards": self.resumed_shards,
            "quarantine_not_found": self.quarantine_not_found,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "examples": self.examples, "warnings": self.warnings,
        }



# --- reasons ---------------------------------------------------------------------------------

def reason_lists(n: int, rejects: list[tuple[str, np.ndarray]]) -> pa.ListArray:
    """Per row, the reasons whose mask selects it, in the order given (vectorized)."""
    names = [reason for reason, _ in rejects]
    if not names:
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                        pa.array([], pa.string()))
    hits = np.stack([np.asarray(mask, dtype=bool) for _, mask in rejects], axis=1)
    rows, cols = np.nonzero(hits)  # row-major: each row's reasons in stage order
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    values = pa.DictionaryArray.from_arrays(pa.array(cols.astype(np.int32)),
                                            pa.array(names, pa.string()))
    return pa.ListArray.from_arrays(pa.array(offsets), values.cast(pa.string()))


def reason_lists_any(n: int, rejects: list[tuple[str, np.ndarray]]) -> np.ndarray:
    """Per row, whether any of the masks selects it."""
    hit = np.zeros(n, dtype=bool)
    for _, mask in rejects:
        hit |= np.asarray(mask, dtype=bool)
    return hit




# --- step 1: score -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _UnitTask:
    """One unit of clean: its rows, the declared stages, and (for decide) the corpus stages'
    combined states."""

    unit: Unit
    work: str
    staging: str
    stages: tuple[Stage, ...]
    states: tuple[tuple[str, str], ...] = ()  # stage name -> its state, as JSON

    @property
    def index(self) -> int:
        return self.unit.index


def _scored_path(work: str | Path, index: int) -> Path:
    return Path(work) / f"scored-{index:05d}.arrow"


def _partial_path(work: str | Path, stage: str, index: int) -> Path:
    return Path(work) / f"{stage}-partial-{index:05d}.npy"


def _score_slice(batch: pa.RecordBatch, stages: Sequence[Stage]) -> pa.RecordBatch:
    """The row stages over one slice, in order: their columns, and per row the reasons they
    reject it for (a list column, in order of precedence)."""
    rejects: list[tuple[str, np.ndarray]] = []
    for stage in stages:
        if isinstance(stage, CorpusStage):
            continue
        result = stage.apply(batch, reason_lists_any(batch.num_rows, rejects))
        batch = _with_columns(batch, _declared(stage, result.columns))
        rejects += result.rejects
    return batch.append_column(_PASS1_REASONS, reason_lists(batch.num_rows, rejects))


def _declared(stage: Stage, columns: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """``columns``, where the stage declared each (a stage that adds another is a bug)."""
    undeclared = sorted(set(columns) - set(stage.columns))
    if undeclared:
        raise SprDataError(f"stage {stage.name} returned columns it does not declare: "
                           f"{', '.join(undeclared)}")
    return columns


def _with_columns(batch: Any, columns: dict[str, pa.Array]) -> Any:
    """``batch`` (a record batch or table) with ``columns`` added, or replaced where it has
    them already (a cleaned dataset cleaned again)."""
    for name, array in columns.items():
        if name in batch.schema.names:
            batch = batch.set_column(batch.schema.get_field_index(name), name, array)
        else:
            batch = batch.append_column(name, array)
    return batch


def _score_task(task: _UnitTask) -> bool:
    """Step 1 for one unit: the scored rows, slice by slice (a worker never holds the unit's
    rows at once), then the corpus stages' partials read back from them; the scored file is
    renamed into place last: the unit's score step is done when it holds exactly its rows.
    True where an earlier run's (a killed one's) score of the unit is reused."""
    target = _scored_path(task.work, task.index)
    partials = {s.name: _partial_path(task.work, s.name, task.index)
                for s in task.stages if isinstance(s, CorpusStage)}
    if target.exists():
        if _holds_unit(target, task.unit) and all(p.exists() for p in partials.values()):
            return True
        target.unlink()  # cut short, corrupt or of another unit: scored again
    for stage in task.stages:
        if not isinstance(stage, CorpusStage):
            stage.setup()
    tmp = temp_path(target)
    try:
        _write_batches(tmp, (_score_slice(b, task.stages) for b in _unit_slices(task.unit)))
        for stage in task.stages:
            if isinstance(stage, CorpusStage):
                partial = stage.partial(_ScoredRows(tmp))
                path = partials[stage.name]
                part_tmp = path.with_name(path.name + ".tmp")
                with open(part_tmp, "wb") as f:
                    np.save(f, partial if partial is not None else np.zeros(0),
                            allow_pickle=False)
                part_tmp.replace(path)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    # what the slices grew goes back: this worker may wait idle through the combine step
    # (an idle score worker held about 0.4 GB at 5M pairs)
    release_heap()
    return False


def _unit_slices(unit: Unit) -> Iterator[pa.RecordBatch]:
    """The rows of ``unit`` in slices of equal size, ``_SLICE_ROWS`` at most (an empty unit:
    one empty batch), each slice read from a map of the shard of its own: the pages a slice
    touched leave memory with it (one map for the unit would keep every page of the unit's
    rows). Equal, because the rules fit the length ratio per slice: a unit of 50,000 rows
    cut by 16,384 left a last slice of 1,848 to fit on."""
    size = equal_parts(unit.length, _SLICE_ROWS)
    for lo in range(0, max(unit.length, 1), size):
        part = replace(unit, offset=unit.offset + lo, length=min(size, unit.length - lo))
        table = read_unit(part)
        yield from table.to_batches(max_chunksize=size) or [
            pa.RecordBatch.from_pylist([], schema=table.schema)]


def _write_batches(path: Path, batches: Iterator[pa.RecordBatch]) -> int:
    """Write ``batches`` (at least one) as an Arrow file, one at a time, and fsync it: a work
    file, made without holding its rows. Returns its rows."""
    first = next(batches)
    rows = 0
    try:
        with pa.OSFile(str(path), "wb") as sink, \
                pa.ipc.new_file(sink, first.schema) as out:
            for batch in itertools.chain([first], batches):
                out.write_batch(batch)
                rows += batch.num_rows
        fsync_path(path)
    except OSError as exc:
        raise OutputError(os_error_message(exc, path)) from exc
    return rows


class _ScoredRows:
    """A work file's rows as :data:`~spr_data.qa.stage.UnitRows`: its record batches in order,
    each read from a map of the file of its own when iterated (see :func:`_unit_slices`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.select()

    def select(self, *names: str) -> Iterator[pa.RecordBatch]:
        """The batches, of columns ``names`` only (all without): only those pages are read."""
        with pa.memory_map(str(self.path)) as source:
            count = pa.ipc.open_file(source).num_record_batches
        for i in range(count):
            with pa.memory_map(str(self.path)) as source:
                batch = pa.ipc.open_file(source).get_batch(i)
            yield batch.select(list(names)) if names else batch


def _holds_unit(path: Path, unit: Unit) -> bool:
    """Whether a work file left by an earlier run holds exactly the rows of ``unit`` (its
    ids, in order), so that resuming cannot lose or repeat a row."""
    try:
        ids = _read_table(path).column(ID).to_numpy()
    except (pa.ArrowException, OSError, KeyError):
        return False
    with pa.memory_map(unit.shard) as source:
        expected = (pa.ipc.open_file(source).read_all().column(ID)
                    .slice(unit.offset, unit.length).to_numpy())
    return bool(np.array_equal(ids, expected))


def _read_table(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _unpack_reasons(column: pa.ChunkedArray) -> dict[str, np.ndarray]:
    """Per reason found in a ``_reasons`` list column, the rows it lists it for."""
    column = column.combine_chunks()  # parent indices of the whole column, not per chunk
    flat = pc.list_flatten(column)
    if len(flat) == 0:
        return {}
    rows = np.asarray(pc.list_parent_indices(column).to_numpy())
    values = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=object)
    out = {}
    for reason in sorted(set(values.tolist())):
        mask = np.zeros(len(column), dtype=bool)
        mask[rows[values == reason]] = True
        out[reason] = mask
    return out


# --- step 2: combine -----------------------------------------------------------------------

@dataclass
class _Combine:
    """What a corpus stage's ``combine`` gets (:class:`spr_data.qa.stage.CombineContext`)."""

    work: Path
    scored: list[Path]
    partials: list[Path | None]
    #: the stages declared before this one, and the states of the corpus stages among them
    before: tuple[Stage, ...]
    states: dict[str, dict[str, Any]]
    workers: int
    executor: Executor | None = field(default=None, repr=False)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        if self.executor is None:
            raise SprDataError("the combine step has no executor")
        return self.executor.map(fn, tasks)

    def rejected_before(self, unit: int, spare: Collection[str] = ()
                        ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        _release_row_stages(self.before)  # a combine task: this worker's score step is over
        table = _read_table(self.scored[unit])
        found = _unpack_reasons(table.column(_PASS1_REASONS))
        rejected = np.zeros(table.num_rows, dtype=bool)
        unspared = np.zeros(table.num_rows, dtype=bool)  # rejected for a reason not spared
        for stage in self.before:
            if isinstance(stage, CorpusStage):
                result = stage.apply(table.to_batches(), self.states[stage.name], rejected)
                masks = result.rejects
            else:
                masks = [(r, found[r]) for r in stage.reasons if r in found]
            for reason, found_mask in masks:
                mask = np.asarray(found_mask, dtype=bool)
                rejected |= mask
                if reason not in spare:
                    unspared |= mask
        return table, rejected, rejected & ~unspared

    def __getstate__(self) -> dict[str, Any]:  # to a process apart: without the executor
        return {**self.__dict__, "executor": None}


def _release_row_stages(stages: Sequence[Stage]) -> None:
    """Let go of what the row stages loaded for the score step (``release``, where a stage
    has it: language id's models), so that a worker kept for the combine and decide steps
    does not hold it through them. Called by every combine task that reads a unit: after the
    first, a stage has nothing left to let go of."""
    for stage in stages:
        release = getattr(stage, "release", None)
        if not isinstance(stage, CorpusStage) and callable(release):
            release()


def _combine(run: ShardRun, stages: list[Stage], position: int,
             states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Corpus stage ``stages[position]``'s combined state: from an earlier run of this run
    (its state file), or combined now."""
    stage = stages[position]
    if not isinstance(stage, CorpusStage):
        raise SprDataError(f"{stage.name} is not a corpus stage")
    state_path = run.work / f"{stage.name}-state.json"
    if state_path.exists():
        found: dict[str, Any] = json.loads(state_path.read_text())
        return found
    context = _Combine(
        work=run.work, scored=[_scored_path(run.work, u.index) for u in run.units],
        partials=[_partial_path(run.work, stage.name, u.index) for u in run.units],
        before=tuple(stages[:position]), states=dict(states),
        workers=run.executor.workers, executor=run.executor)
    # the workers are kept from step to step (their tasks give their heap back as they end,
    # and the first combine task the score step's models): the next step does not wait for
    # new ones to start (about 0.5 s of start-up and imports each). The heap a heavy combine
    # grew here is not kept through the decide step.
    state = stage.combine(context)
    if getattr(stage, "heavy_combine", False):
        release_heap()
    atomic_write_bytes(state_path, json.dumps(state).encode())
    return state


# --- step 3: decide ------------------------------------------------------------------------

def _decide_task(task: _UnitTask) -> dict[str, Any]:
    """Step 3 for one unit: every stage's reasons in declared order, the kept and reject
    shards, accounting, stats. The decisions are made over the whole unit (the corpus stages
    read its rows slice by slice); the shards are then made column by column, each held once."""
    staging = Path(task.staging)
    done = finished_unit(task.work, staging, task.index)
    if done is not None:
        return {**done, "resumed": True}
    states = {name: json.loads(state) for name, state in task.states}
    rows = _ScoredRows(_scored_path(task.work, task.index))
    ids = unit_ids(rows)
    n = len(ids)
    found = _unpack_reasons(pa.chunked_array(
        [b.column(_PASS1_REASONS) for b in rows], _REASONS_TYPE))
    rejects: list[tuple[str, np.ndarray]] = []
    rejected = np.zeros(n, dtype=bool)
    added: list[tuple[Stage, dict[str, pa.Array]]] = []
    stage_stats: dict[str, dict[str, list[int]]] = {}
    for stage in task.stages:
        if isinstance(stage, CorpusStage):
            result = stage.apply(rows, states[stage.name], rejected)
            added.append((stage, result.columns))
            masks = [(r, np.asarray(m, dtype=bool)) for r, m in result.rejects]
            if result.stats:
                stage_stats[stage.name] = result.stats
        else:
            masks = [(r, found.pop(r)) for r in stage.reasons if r in found]
        rejects += masks
        for _, mask in masks:
            rejected |= mask
    if found:  # a reason no declared stage gives: a bug, not a row to count as anything
        raise SprDataError(f"unit {task.index}: reasons {sorted(found)} come from no stage")
    stage_name = stage_of(task.stages)
    lists = reason_lists(n, rejects)
    mask = pa.array(rejected)
    chosen = lists.filter(mask)
    first = pc.list_element(chosen, 0) if len(chosen) else pa.array([], pa.string())
    stages = pa.array([stage_name[r] for r in first.to_pylist()], pa.string())
    columns = _Columns(rows, added)
    kept_path = staging / shard_name(task.index)
    reject_path = staging / REJECTS_DIR / shard_name(task.index, rejects=True)
    kept = columns.batch(~rejected)
    kept_info = write_shard_file(kept_path, kept)
    kept_ids = kept.column(ID).to_numpy()
    del kept  # the kept rows let go before the rejected ones are gathered
    rejected_batch = (columns.batch(rejected).append_column(REASON, first)
                      .append_column(REASONS, chosen).append_column(STAGE, stages))
    reject_info = write_shard_file(reject_path, rejected_batch)
    rejected_table = pa.Table.from_batches([rejected_batch])
    # accounting: every id of the unit is kept or rejected, none twice
    out_ids = np.concatenate([kept_ids, rejected_table.column(ID).to_numpy()])
    if len(out_ids) != n or not np.array_equal(np.sort(out_ids), np.sort(ids)):
        raise SprDataError(f"accounting failed for unit {task.index}: {n} rows in, "
                           f"{kept_info.rows} kept + {rejected_table.num_rows} rejected")
    stats: dict[str, Any] = {
        "rows": n, "kept": kept_info.__dict__, "rejects": reject_info.__dict__,
        "by_reason": _counts(first),
        "all_reasons": _counts(pc.list_flatten(chosen)),
        "histograms": {}, "stage_stats": stage_stats,
        "examples": _examples(rejected_table),
    }
    for name in _HISTOGRAMS:
        if name in columns.schema.names:
            values = columns.whole(name).to_numpy(zero_copy_only=False).astype(np.float64)
            stats["histograms"][name] = _histogram(values, name)
    return mark_unit_finished(task.work, staging, task.index, stats, [kept_path, reject_path])


#: the type of the score step's reasons column (a list per row)
_REASONS_TYPE = pa.list_(pa.string())


class _Columns:
    """A unit's decided columns: the scored ones (less the reasons) with the corpus stages'
    columns added or in their place, in the order the stages declare them. An output shard
    is made column by column, each read slice by slice: a worker holds the shard's rows
    once, and one column's slices beside them (not the unit's rows, nor the shard twice)."""

    def __init__(self, rows: _ScoredRows, added: list[tuple[Stage, dict[str, pa.Array]]]):
        self.rows = rows
        self.added: dict[str, pa.Array] = {}
        empty = next(iter(rows)).slice(0, 0).drop_columns([_PASS1_REASONS])
        for stage, columns in added:
            empty = _with_columns(empty, _declared(stage, {
                name: array.slice(0, 0) for name, array in columns.items()}))
            self.added.update(columns)
        self.schema: pa.Schema = empty.schema

    def whole(self, name: str) -> pa.Array:
        """Column ``name`` for every row of the unit."""
        if name in self.added:
            return self.added[name]
        return pa.concat_arrays([b.column(name) for b in self.rows.select(name)])

    def batch(self, keep: np.ndarray) -> pa.RecordBatch:
        """The rows ``keep`` selects, every column, as one record batch (a shard is one)."""
        return pa.RecordBatch.from_arrays([self._filtered(f.name, keep) for f in self.schema],
                                          schema=self.schema)

    def _filtered(self, name: str, keep: np.ndarray) -> pa.Array:
        if name in self.added:
            return self.added[name].filter(pa.array(keep))
        parts, lo = [], 0
        for batch in self.rows.select(name):
            parts.append(batch.column(0).filter(pa.array(keep[lo:lo + batch.num_rows])))
            lo += batch.num_rows
        return pa.concat_arrays(parts)


def _counts(values: pa.Array) -> dict[str, int]:
    return {item["values"]: item["counts"] for item in pc.value_counts(values).to_pylist()}


def _histogram(values: np.ndarray, name: str) -> list[int]:
    edges = _HISTOGRAMS[name]
    clipped = np.clip(values[np.isfinite(values)], edges[0], edges[-1])
    counts: list[int] = np.histogram(clipped, bins=edges)[0].tolist()
    return counts


def _examples(rejected: pa.Table) -> dict[str, list[dict[str, Any]]]:
    """The first ``_EXAMPLES`` rejected rows of each reason, their long texts cut: what
    ``report.html`` shows a person per reason."""
    picks: dict[str, list[int]] = {}
    for i, reason in enumerate(rejected.column(REASON).to_pylist()):
        chosen = picks.setdefault(reason, [])
        if len(chosen) < _EXAMPLES:
            chosen.append(i)
    if not picks:
        return {}
    names = [f.name for f in rejected.schema
             if f.name == REASONS or not pa.types.is_nested(f.type)]
    rows = rejected.select(names).take(sorted(i for v in picks.values() for i in v)).to_pylist()
    by_id = {row[ID]: {k: v[:300] if isinstance(v, str) else
                       round(v, 4) if isinstance(v, float) else v
                       for k, v in row.items() if k not in (REASON, STAGE)} for row in rows}
    ids = rejected.column(ID).to_pylist()
    return {reason: [by_id[ids[i]] for i in chosen] for reason, chosen in picks.items()}



# --- the run -----------------------------------------------------------------------------------

def clean(
    dataset: str | Path,
    out: str | Path,
    *,
    recipe: str | Path | Recipe | None = None,
    workers: int | None = None,
    quarantine: str | Path | Sequence[str | Path] | None = None,
    overwrite: bool = False,
    on_progress: Callable[[str, int, int], None] | None = None,
    reader: ReaderOptions | None = None,
    allow_heavy_loss: bool = False,
    executor: Executor | None = None,
    work_dir: str | Path | None = None,
) -> CleanReport:
    """Clean ``dataset`` into ``out`` (kept rows) and ``out/_rejects`` (every rejected row).

    ``on_progress(step, done, total)`` reports rows done per step (score, each whole-corpus
    stage — dedup, align — at its start and end, decide). A run
    killed at any point resumes where it stopped when started again with the same inputs and
    recipe. A dataset on a network filesystem or URL is read as ``reader`` says, its shards
    copied (verified) to local disk for the workers. When one reason rejects more than the
    recipe's ``max_reason_share`` of the rows, nothing is published (:class:`DataLossError`;
    the run's work and report stay under ``out/.work``) unless ``allow_heavy_loss``; a rerun
    with it resumes from that work. The tasks run on ``executor`` (e.g. a
    :class:`~spr_data.pipeline.ray_executor.RayExecutor`; default: ``workers`` local
    processes); the output is the same bytes on any executor. ``out`` may be an object
    store's prefix (``s3://bucket/prefix``): the run then works in ``work_dir`` (default: a
    directory per URL in the user's cache) and publishes by upload, manifest last.
    """
    started = time.perf_counter()
    source = open_input(dataset, out, command="clean", reader=reader)
    resolved = (recipe if isinstance(recipe, Recipe)
                else load_recipe(recipe, source.langs, source.kind))
    if "align" in resolved.stages and source.kind != "parallel":
        raise InputError("the align stage needs a parallel corpus; drop it from the recipe")
    quarantines = _quarantine_files(quarantine)
    for path in quarantines:
        read_quarantine(path)  # a bad file is an error now, before any work
    hashes = [sha256_file(path) for path in quarantines]
    identity = {
        "input": source.manifest_digest,
        "recipe": resolved.digest,
        "quarantine": hashes[0] if len(hashes) == 1 else sorted(hashes) or None,
        "tool_version": __version__,
    }
    tokenized = bool(token_id_columns(source.manifest.kind, source.schema.names))
    stages = build_stages(resolved, source.kind, source.langs, quarantine=quarantines,
                          cleaned=_cleaned_with(source, resolved), tokenized=tokenized)
    # the lock is held for the whole run; a failed run keeps its work state (it resumes from
    # it) and never removes what it did not write
    with ShardRun("clean", source, out, identity=identity, overwrite=overwrite,
                  executor=executor, workers=workers, on_progress=on_progress,
                  work_dir=work_dir) as run:
        return _run(run, resolved, stages, allow_heavy_loss,
                    [{"path": str(path.resolve()), "sha256": digest}
                     for path, digest in zip(quarantines, hashes, strict=True)], started)


def _quarantine_files(quarantine: str | Path | Sequence[str | Path] | None) -> list[Path]:
    """The quarantine files given, each once (the same file twice is one list)."""
    given = [] if quarantine is None else (
        [quarantine] if isinstance(quarantine, (str, Path)) else list(quarantine))
    files: dict[Path, Path] = {}
    for item in given:
        path = Path(item)
        files.setdefault(path.resolve(), path)
    return list(files.values())


def _cleaned_with(source: Any, recipe: Recipe) -> Path | None:
    """The dataset's directory when ``recipe`` is what cleaned it, and that run's model and
    report are there (a local dataset): its alignment decision is then reused. A dataset
    ``tokenize`` made of such a clean (the same rows and text) reuses that clean's."""
    if (source.remote or recipe.align.model or recipe.align.min_score is not None
            or recipe.align.quantile is not None):
        return None
    if source.manifest.lineage.get("stage") == "tokenize":
        source = _tokenized_from_clean(source)
        if source is None:
            return None
    lineage = source.manifest.lineage
    if lineage.get("stage") != "clean" or lineage.get("recipe_hash") != recipe.digest:
        return None
    here = Path(source.path)
    if not ((here / "align_model.npz").is_file() and (here / "report.json").is_file()):
        return None
    try:
        align = json.loads((here / "report.json").read_text()).get("align") or {}
    except (OSError, ValueError):
        return None
    needed = ("model_hash", "threshold", "threshold_unseen", "p_translation",
              "p_translation_unseen")
    return here if all(k in align for k in needed) else None


def _tokenized_from_clean(source: Any) -> Any | None:
    """The local dataset ``clean`` made that ``tokenize`` made ``source`` of (the same rows
    and text), as it was then; else None."""
    lineage = source.manifest.lineage
    parent = lineage.get("parent")
    if lineage.get("stage") != "tokenize" or not (isinstance(parent, dict) and parent.get("path")):
        return None
    try:
        cleaned = open_parent(source, str(parent["path"]), None, parent.get("relative_path"))
    except SprDataError:
        return None
    if (cleaned.remote or cleaned.manifest_digest != parent.get("manifest_sha256")
            or len(cleaned) != len(source) or cleaned.manifest.lineage.get("stage") != "clean"):
        return None  # not the clean it was made of, as it was then
    return cleaned


def _run(run: ShardRun, recipe: Recipe, stages: list[Stage], allow_heavy_loss: bool,
         quarantine_files: list[dict[str, str]], started: float) -> CleanReport:
    """The steps: score, each whole-corpus stage, decide; then :func:`_finish` publishes.
    ``started``: the run's start (``perf_counter``), for the report's seconds."""
    run.claim(REJECTS_DIR + "/", "report.json", "report.html", "align_model.npz",
              *run.output_names(rejects=True))
    tasks = [_UnitTask(unit, str(run.work), str(run.staging), tuple(stages))
             for unit in run.units]
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    # units an earlier (killed) run scored or decided already: the report's resumed_shards
    resumed = {index for index, reused in run.map("score", _score_task, tasks) if reused}
    timings["score"] = time.perf_counter() - clock
    states: dict[str, dict[str, Any]] = {}
    for position, stage in enumerate(stages):
        if isinstance(stage, CorpusStage):
            clock = time.perf_counter()
            # a whole-corpus step (the alignment model's training: half a run at 100k rows)
            # shows as a bar of its own, done when it is, rather than a score bar standing still
            if run.on_progress is not None:
                run.on_progress(stage.name, 0, run.rows)
            try:
                states[stage.name] = _combine(run, stages, position, states)
            except SprDataError as error:
                # the cause, where the stages before left it too few rows (not a disk or a
                # network fault: those are what they say)
                if type(error) in (InputError, SprDataError):
                    _refuse_heavy_loss_before(run, recipe, stage.name, allow_heavy_loss,
                                              states.get("quarantine", {}).get("ids"))
                raise
            if run.on_progress is not None:
                run.on_progress(stage.name, run.rows, run.rows)
            timings[_TIMING.get(stage.name, stage.name)] = time.perf_counter() - clock
    clock = time.perf_counter()
    encoded = tuple((name, json.dumps(state)) for name, state in states.items())
    decide = [replace(t, states=encoded) for t in tasks]
    results = dict(run.map("decide", _decide_task, decide))
    timings["decide"] = time.perf_counter() - clock
    resumed |= {index for index, result in results.items() if result.get("resumed")}
    return _finish(run, recipe, stages, results, states, allow_heavy_loss, quarantine_files,
                   timings, started, len(resumed))


def _finish(run: ShardRun, recipe: Recipe, stages: list[Stage],
            results: dict[int, dict[str, Any]], states: dict[str, dict[str, Any]],
            allow_heavy_loss: bool, quarantine_files: list[dict[str, str]],
            timings: dict[str, float], started: float, resumed: int) -> CleanReport:
    ordered = [results[k] for k in sorted(results)]
    kept = [ShardInfo(**r["kept"]) for r in ordered]
    rejected = [ShardInfo(**r["rejects"]) for r in ordered]
    by_reason: Counter[str] = Counter()
    all_reasons: Counter[str] = Counter()
    histograms: dict[str, np.ndarray] = {}
    stage_sums: dict[str, dict[str, np.ndarray]] = {}
    examples: dict[str, list[dict[str, Any]]] = {}
    for r in ordered:
        for reason, rows in r.get("examples", {}).items():
            examples[reason] = (examples.get(reason, []) + rows)[:_EXAMPLES]
        by_reason.update(r["by_reason"])
        all_reasons.update(r["all_reasons"])
        for name, counts in r["histograms"].items():
            histograms[name] = histograms.get(name, 0) + np.asarray(counts)
        for name, figures in r.get("stage_stats", {}).items():
            sums = stage_sums.setdefault(name, {})
            for key, values in figures.items():
                sums[key] = sums.get(key, 0) + np.asarray(values, np.int64)
    rows_in = run.rows
    rows_kept = sum(s.rows for s in kept)
    counts = dict(sorted(by_reason.items()))
    align_info = None
    if "align" in states:
        info = states["align"]["info"]
        decided = {k: v.tolist() for k, v in stage_sums.get("align", {}).items()}
        align_info = {**info, "histograms": {**info["histograms"], **decided}}
    quarantined = stage_sums.get("quarantine", {}).get("quarantined")
    report = CleanReport(
        out=run.destination, rows_in=rows_in, rows_kept=rows_kept, by_reason=counts,
        all_reasons=dict(sorted(all_reasons.items())),
        stages=_waterfall(rows_in, counts, stages),
        distributions={name: _summarize(hist, name) for name, hist in histograms.items()},
        align=align_info, recipe=recipe.to_json(), recipe_hash=recipe.digest,
        seconds=time.perf_counter() - started, workers=run.executor.workers, timings=timings,
        resumed_shards=resumed,
        quarantine_not_found=(states["quarantine"]["count"] - int(quarantined.sum())
                              if "quarantine" in states and quarantined is not None else 0),
        examples=dict(sorted(examples.items())),
        warnings=_unchecked(run.source.langs, stages) + _kept_text(run.source, stages, recipe))
    if not allow_heavy_loss:
        _refuse_heavy_loss(report, recipe, run.work, run.source.langs)
    # the report and the model wait in the staging directory with the shards and move in
    # with them: the dataset an overwrite replaces stays whole until then
    tag = temp_tag(run.out)  # this process's temp files in out, recorded as the run's
    atomic_write_bytes(run.staging / "report.json",
                       json.dumps(report.to_json(), indent=2, ensure_ascii=False).encode(),
                       tag=tag)
    from spr_data.qa.report_html import render_report

    atomic_write_bytes(run.staging / "report.html", render_report(report.to_json()).encode(),
                       tag=tag)
    if "align" in states:
        atomic_write_bytes(run.staging / "align_model.npz",
                           Path(states["align"]["model"]).read_bytes(), tag=tag)
    lineage = run.lineage(recipe=recipe.to_json(), recipe_hash=recipe.digest,
                          options={"workers": run.executor.workers},
                          **({"quarantine": quarantine_files} if quarantine_files else {}))
    run.publish(kept, rejected=rejected, rejects=counts, lineage=lineage,
                extras=["report.json", "report.html"]
                + (["align_model.npz"] if "align" in states else []))
    return report


def _waterfall(rows_in: int, by_reason: dict[str, int],
               stages: list[Stage]) -> list[dict[str, Any]]:
    """Rows in and out of each declared stage, in order (a quarantine that removed nothing is
    left out)."""
    of = stage_of(stages)
    remaining = rows_in
    out = []
    for stage in stages:
        removed = {r: n for r, n in by_reason.items() if of[r] == stage.name}
        if stage.name == "quarantine" and not removed:
            continue
        total = sum(removed.values())
        out.append({"name": stage.name, "rows_in": remaining, "rows_out": remaining - total,
                    "removed": total, "by_reason": removed})
        remaining -= total
    return out


def _summarize(hist: np.ndarray, name: str) -> dict[str, Any]:
    edges = _HISTOGRAMS[name]
    total = int(hist.sum())
    if total == 0:
        return {"count": 0}
    cumulative = np.cumsum(hist) / total
    quantiles = {}
    for q in (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99):
        quantiles[str(q)] = round(float(edges[int(np.searchsorted(cumulative, q)) + 1]), 3)
    return {"count": total, "quantiles": quantiles, "edges": edges.round(4).tolist(),
            "histogram": hist.tolist()}


def _normalized_before(source: Any, recipe: Recipe) -> bool:
    """Whether the clean a tokenized dataset was made of normalized its text as ``recipe``
    would."""
    cleaned = _tokenized_from_clean(source)
    if cleaned is None:
        return False
    before = cleaned.manifest.lineage.get("recipe")
    return (isinstance(before, dict) and "normalize" in (before.get("stages") or [])
            and before.get("normalize") == recipe.to_json()["normalize"])


def _kept_text(source: Any, stages: Sequence[Stage], recipe: Recipe) -> list[str]:
    """A warning where normalize left a tokenized dataset's text as it was."""
    ids = token_id_columns(source.manifest.kind, source.schema.names)
    if not ids or not any(s.name == "normalize" for s in stages) \
            or _normalized_before(source, recipe):
        return []
    return [f"the dataset is tokenized ({', '.join(ids)}): normalize left its text as it was, "
            "so that the token ids still match it (its rules and checks read the text as it "
            "is); to normalize, clean the dataset before tokenizing it"]


def _unchecked(langs: list[str], stages: Sequence[Stage]) -> list[str]:
    """A warning where the dataset's languages are not known (``und``, ``mul``): language id
    and the script rules then have nothing to check a side against, and a corpus of the
    wrong language, or a pair ingested the wrong way round, passes them."""
    unknown = [i for i, lang in enumerate(langs) if normalize_lang(lang) in ("und", "mul", "")]
    checks = [s.name for s in stages if s.name in ("rules", "langid")]
    if not unknown or not checks:
        return []
    sides = ("no side" if len(unknown) == len(langs)
             else f"its {('source', 'target')[unknown[0]]} side")
    return [f"the dataset's languages are {'-'.join(langs)}: {' and '.join(checks)} checked "
            f"{sides} against a language or script; ingest with --langs (or files named by "
            "their languages) to have them checked"]


def _refuse_heavy_loss(report: CleanReport, recipe: Recipe, work: Path,
                       langs: list[str]) -> None:
    """Stop before publishing when one reason rejects more than ``recipe.max_reason_share``
    of the rows: a wrong language code, wrong columns or a recipe typo reject nearly
    everything, and a run that "succeeds" with 2% of its rows is silent destruction. The
    report goes to the work directory for a look; the rerun that accepts resumes there."""
    heavy = _heaviest(report.by_reason, report.rows_in, recipe)
    if heavy is None:
        return
    n, reason = heavy
    atomic_write_bytes(work / "report.json",
                       json.dumps(report.to_json(), indent=2, ensure_ascii=False).encode())
    raise _heavy_loss_error(
        f"clean stopped before publishing {report.out}", reason, n, report.rows_in,
        report.examples.get(reason, []), recipe, langs,
        f"if this loss is right, rerun with allow_heavy_loss=True, which "
        f"resumes from {work} (its report.json has the details), or raise max_reason_share")


def _refuse_heavy_loss_before(run: ShardRun, recipe: Recipe, stage: str,
                              allow_heavy_loss: bool, quarantine_ids: str | None) -> None:
    """The same refusal when a corpus stage could not run (the align stage found no pairs
    to train on) because the row stages before it rejected nearly every row — a
    wrong language code, swapped sides: their reason is the cause to name, not the stage's
    (counted from the score step's work files). Where the quarantine took every row the
    others left, that is what to say."""
    by_reason: Counter[str] = Counter()
    examples: dict[str, list[dict[str, Any]]] = {}
    listed = (np.load(quarantine_ids, allow_pickle=False) if quarantine_ids is not None
              else np.zeros(0, np.uint64))
    quarantined = 0  # of the rows the row stages left, those the quarantine lists
    for unit in run.units:
        table = _read_table(_scored_path(run.work, unit.index))
        column = table.column(_PASS1_REASONS).combine_chunks()
        has = np.asarray(pc.greater(pc.list_value_length(column), 0).fill_null(False)
                         .to_numpy(zero_copy_only=False))
        if listed.size:
            left_ids = table.column(ID).to_numpy()[~has].astype(np.uint64)
            quarantined += int(member(left_ids, listed).sum())
        rows = np.flatnonzero(has)
        if not rows.size:
            continue
        first = pc.list_element(column.take(pa.array(rows)), 0)
        names = [c for c in (*_SIDES, "lid_src", "lid_tgt", "lid_text") if c in table.column_names]
        for item in pc.value_counts(first).to_pylist():
            reason, count = item["values"], item["counts"]
            by_reason[reason] += count
            taken = examples.setdefault(reason, [])
            if len(taken) < 2:
                at = rows[np.flatnonzero(pc.equal(first, reason).to_numpy(
                    zero_copy_only=False))[:2 - len(taken)]]
                taken += table.select(names).take(pa.array(at)).to_pylist()
    heavy = None if allow_heavy_loss else _heaviest(dict(by_reason), run.rows, recipe)
    left = run.rows - sum(by_reason.values())
    if heavy is None and quarantined and quarantined == left:
        # the quarantine, the user's own list, took every row the row stages left
        raise InputError(
            f"clean stopped at the {stage} stage: no row is left for it — the quarantine "
            f"took {_plural(quarantined, 'row')}"
            + (f", and the other checks the other {run.rows - left:,} ("
               + ", ".join(f"{r} {n:,}" for r, n in by_reason.most_common()) + ")"
               if left < run.rows else ", every row of the dataset")
            + "; nothing is left to clean")
    if heavy is None:
        return
    n, reason = heavy
    raise _heavy_loss_error(
        f"clean stopped at the {stage} stage", reason, n, run.rows, examples[reason], recipe,
        run.source.langs, f"the {stage} stage could not run on the {left:,} rows left")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _heaviest(by_reason: dict[str, int], rows_in: int, recipe: Recipe
              ) -> tuple[int, str] | None:
    """The reason that rejects the most rows, and how many, when it is more than the recipe's
    ``max_reason_share`` (a quarantine, the user's own explicit list, never counts)."""
    heavy = [(n, reason) for reason, n in by_reason.items()
             if reason != "quarantined" and n > recipe.max_reason_share * rows_in]
    return max(heavy) if heavy and rows_in else None


def _heavy_loss_error(what: str, reason: str, n: int, rows_in: int,
                      examples: list[dict[str, Any]], recipe: Recipe, langs: list[str],
                      then: str) -> DataLossError:
    samples = []
    for row in examples[:2]:
        text = " / ".join(repr(str(row[c])[:60]) for c in _SIDES if c in row)
        predicted = ", ".join(f"{k} {row[k]}" for k in ("lid_src", "lid_tgt", "lid_text")
                              if isinstance(row.get(k), str))
        samples.append(text + (f" ({predicted})" if predicted else ""))
    return DataLossError(
        f"{what}: {reason} rejects {n:,} of {rows_in:,} rows ({n / rows_in:.1%}), more than "
        f"the recipe's max_reason_share ({recipe.max_reason_share:g}); e.g. "
        f"{'; '.join(samples) or '-'}. Check the dataset's languages ({'-'.join(langs)}) "
        f"and the recipe; {then}")
