"""``clean``: run the QA stages of a recipe over a dataset; keep good rows, keep every reject.

The run has three steps, each resumable shard by shard:

1. *score* (parallel over shards): normalize → rules → langid, plus a content hash per row;
   each shard's scored rows go to ``OUT/.work/scored-NNNNN.arrow``.
2. *global*: duplicates are decided from the hashes of all rows (16 bytes a row); the
   alignment model is trained on rows that passed so far, and its threshold is fixed.
3. *decide* (parallel over shards): alignment scores, dedup and quarantine reasons; each input
   shard becomes one kept shard and one reject shard, so the output is byte-identical whatever
   the number of workers. Rows in = kept + rejected, by exact id sets, or the run stops.

The manifest is written last; ``.work`` is removed once it is.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data._version import __version__
from spr_data.arrays import unique
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import DataLossError, DatasetError, InputError, SprDataError
from spr_data.fsio import TMP_SUFFIX, atomic_write_bytes, sha256_file
from spr_data.manifest import Manifest, ShardInfo
from spr_data.outdir import (
    REJECTS_DIR,
    WORK_DIR,
    check_run,
    claim,
    output_lock,
    prepare_output,
    publish,
    temp_tag,
)
from spr_data.pipeline.executor import Executor, LocalExecutor, executor_for, run_apart
from spr_data.pipeline.units import finished_unit, mark_unit_finished, unit_rows
from spr_data.qa.stage import Stage
from spr_data.reader import ReaderOptions
from spr_data.recipe import Recipe, load_recipe
from spr_data.schema import ID, REASON, text_columns
from spr_data.verify import check_shard_hash, check_shards
from spr_data.writer import shard_name, write_shard_file

__all__ = ["CleanReport", "clean", "read_quarantine", "stage_of_reason"]

REASONS = "reasons"
STAGE = "stage"
ALIGN_SCORE = "align_score"
P_TRANSLATION = "p_translation"
_HASH = "_content_hash"
_SRC_HASH = "_source_hash"
_PASS1_REASONS = "_reasons"
#: ``p_translation`` from which a row is surely a translation (see ``shifted_lines``)
_SURE = 0.99
_EXAMPLES = 3
_SLICE_ROWS = 32768
_LANGID_REASONS = ("swapped_sides", "wrong_lang_src", "wrong_lang_tgt", "wrong_lang_text")
_HISTOGRAMS = {
    "length_ratio": np.concatenate([np.linspace(1.0, 4.0, 61), np.linspace(4.5, 20.0, 32)]),
    ALIGN_SCORE: np.linspace(-20.0, 0.0, 201),
}


def stage_of_reason(reason: str) -> str:
    """Which stage a reject reason comes from (the report's waterfall groups by it)."""
    if reason == "quarantined":
        return "quarantine"
    if reason in _LANGID_REASONS:
        return "langid"
    if reason in ("duplicate", "too_many_targets"):
        return "dedup"
    if reason in ("low_alignment", "shifted_lines"):
        return "align"
    return "rules"


@dataclass
class CleanReport:
    """The waterfall and distributions of a clean run; ``to_json`` is ``report.json``."""

    out: Path
    rows_in: int
    rows_kept: int
    by_reason: dict[str, int]
    all_reasons: dict[str, int]
    stages: list[dict[str, Any]]
    distributions: dict[str, Any]
    align: dict[str, Any] | None
    recipe: dict[str, Any]
    recipe_hash: str
    seconds: float
    workers: int
    resumed_shards: int = 0
    #: quarantine ids that are not rows of this dataset (another dataset's ids, a typo)
    quarantine_not_found: int = 0
    #: wall seconds of each step: score, dedup, align_train, decide
    timings: dict[str, float] = field(default_factory=dict)
    #: a few rejected rows per first reason (the first by shard and row order), for a person
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

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
            "examples": self.examples,
        }


# --- stages ------------------------------------------------------------------------------------

def build_stages(recipe: Recipe, kind: str, langs: list[str]) -> list[Stage]:
    """The per-shard stages of a recipe, in order (dedup and align are global)."""
    from spr_data.qa.langid import LangIdStage
    from spr_data.qa.normalize import NormalizeStage
    from spr_data.qa.rules import RulesStage

    columns = text_columns(kind)  # type: ignore[arg-type]
    stages: list[Stage] = []
    for name in recipe.stages:
        if name == "normalize":
            stages.append(NormalizeStage(recipe.normalize, columns))
        elif name == "rules":
            stages.append(RulesStage(recipe.rules, columns, langs))
        elif name == "langid":
            stages.append(LangIdStage(recipe.langid, columns, langs))
    return stages


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


def _score_slice(batch: pa.RecordBatch, stages: list[Stage], columns: tuple[str, ...],
                 recipe: Recipe) -> pa.RecordBatch:
    from spr_data.qa.dedup import content_hashes

    rejects: list[tuple[str, np.ndarray]] = []
    for stage in stages:
        # a stage that can skip rows already rejected (fastText: the costly one) is told them
        apply_after = getattr(stage, "apply_after", None)
        if apply_after is not None:
            rejected = np.zeros(batch.num_rows, dtype=bool)
            for _, mask in rejects:
                rejected |= mask
            result = apply_after(batch, rejected)
        else:
            result = stage.apply(batch)
        for name, array in result.columns.items():
            if name in batch.schema.names:
                batch = batch.set_column(batch.schema.get_field_index(name), name, array)
            else:
                batch = batch.append_column(name, array)
        rejects += result.rejects
    texts = [batch.column(c) for c in columns]
    extra = {_PASS1_REASONS: reason_lists(batch.num_rows, rejects)}
    if "dedup" in recipe.stages:
        extra[_HASH] = pa.array(content_hashes(texts))
        if recipe.dedup.max_targets_per_source and len(texts) == 2:
            extra[_SRC_HASH] = pa.array(content_hashes(texts[:1]))
    for name, array in extra.items():
        batch = batch.append_column(name, array)
    return batch


# --- per-shard tasks (run in worker processes) ---------------------------------------------------

@dataclass(frozen=True)
class _ShardTask:
    """One unit of work: rows ``offset .. offset+length`` of an input shard; unit ``index``
    becomes output shard ``index``."""

    index: int
    shard: str
    offset: int
    length: int
    work: str
    out: str
    recipe: Recipe
    kind: str
    langs: tuple[str, ...]
    duplicates: str | None = None
    aligner: str | None = None
    aligner_hash: str | None = None
    threshold: float | None = None
    #: ``p_translation`` at the edges of the align score histogram (from the calibration)
    p_table: tuple[float, ...] | None = None
    #: the same for rows the alignment model was not trained on, and the ids it was
    threshold_unseen: float | None = None
    p_table_unseen: tuple[float, ...] | None = None
    trained_ids: str | None = None
    #: (row id, next row id) of each shifted negative trained on (this source, the next
    #: target): the model has seen that cross pair, so ``shifted_lines`` does not count it
    shift_skip_ids: str | None = None
    quarantine: str | None = None
    shard_hash: str = ""


def _read_shard(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _write_ipc(path: Path, table: pa.Table, *, digest: bool = True,
               tag: str | None = None) -> ShardInfo:
    batches = table.combine_chunks().to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
    return write_shard_file(path, batch, digest=digest, tag=tag)


def _score_task(task: _ShardTask) -> int:
    """Step 1 for one shard: scored rows to ``.work/scored-NNNNN.arrow``."""
    target = Path(task.work) / f"scored-{task.index:05d}.arrow"
    if target.exists():
        if _holds_unit(target, task):
            return 0
        target.unlink()  # cut short, corrupt or of another unit: scored again
    if task.offset == 0:  # the first unit of each shard checks the whole shard
        check_shard_hash(task.shard, task.shard_hash)
    columns = text_columns(task.kind)  # type: ignore[arg-type]
    stages = build_stages(task.recipe, task.kind, list(task.langs))
    table = _read_shard(Path(task.shard)).slice(task.offset, task.length)
    batches = table.to_batches(max_chunksize=_SLICE_ROWS) or [
        pa.RecordBatch.from_pylist([], schema=table.schema)]
    _write_ipc(target, pa.Table.from_batches(  # work file: fsynced, not hashed
        [_score_slice(b, stages, columns, task.recipe) for b in batches]), digest=False)
    return int(table.num_rows)


def _holds_unit(path: Path, task: _ShardTask) -> bool:
    """Whether a work file left by an earlier run holds exactly the rows of ``task``'s unit
    (its ids, in order), so that resuming cannot lose or repeat a row."""
    try:
        ids = _read_shard(path).column(ID).to_numpy()
    except (pa.ArrowException, OSError, KeyError):
        return False
    with pa.memory_map(task.shard) as source:
        expected = (pa.ipc.open_file(source).read_all().column(ID)
                    .slice(task.offset, task.length).to_numpy())
    return bool(np.array_equal(ids, expected))


def _np_bool(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _counts(values: pa.Array) -> dict[str, int]:
    return {item["values"]: item["counts"] for item in pc.value_counts(values).to_pylist()}


def _histogram(values: np.ndarray, name: str) -> list[int]:
    edges = _HISTOGRAMS[name]
    clipped = np.clip(values[np.isfinite(values)], edges[0], edges[-1])
    counts: list[int] = np.histogram(clipped, bins=edges)[0].tolist()
    return counts


def _decide_task(task: _ShardTask) -> dict[str, Any]:
    """Step 3 for one shard: final reasons, kept and reject shards, accounting, stats."""
    work = Path(task.work)
    done = finished_unit(work, task.out, task.index)
    if done is not None:
        return {**done, "resumed": True}
    scored = _read_shard(work / f"scored-{task.index:05d}.arrow")
    ids = scored.column(ID).to_numpy()
    n = scored.num_rows
    columns = text_columns(task.kind)  # type: ignore[arg-type]
    rejects: list[tuple[str, np.ndarray]] = []
    quarantined_here = 0
    if task.quarantine:
        quarantined = np.isin(ids, np.load(task.quarantine, allow_pickle=False))
        quarantined_here = int(quarantined.sum())
        rejects.append(("quarantined", quarantined))
    for reason, mask in _unpack_reasons(scored.column(_PASS1_REASONS)):
        rejects.append((reason, mask))
    if task.duplicates:
        dup = np.load(task.duplicates, allow_pickle=False)
        rejects.append(("duplicate", np.isin(ids, dup["duplicate"])))
        if len(dup["too_many_targets"]):
            rejects.append(("too_many_targets", np.isin(ids, dup["too_many_targets"])))
    drop = [c for c in (_PASS1_REASONS, _HASH, _SRC_HASH) if c in scored.schema.names]
    table = scored.drop_columns(drop)
    if task.aligner:
        from spr_data.qa.align import LexicalAligner, p_translation

        aligner = LexicalAligner.load(task.aligner, expected_hash=task.aligner_hash)
        src, tgt = (table.column(c).combine_chunks() for c in columns)
        scores = aligner.score(src, tgt) if n else np.zeros(0, dtype=np.float32)
        # set together with the aligner
        assert task.threshold is not None and task.p_table is not None  # noqa: S101
        assert task.p_table_unseen is not None and task.threshold_unseen is not None  # noqa: S101
        assert task.trained_ids  # noqa: S101
        seen = np.isin(ids, np.load(task.trained_ids, allow_pickle=False))
        threshold = np.where(seen, task.threshold, task.threshold_unseen)
        p_values = np.where(seen, p_translation(scores, task.p_table),
                            p_translation(scores, task.p_table_unseen))
        for name, values in ((ALIGN_SCORE, scores), (P_TRANSLATION, p_values)):
            column = pa.array(np.asarray(values, np.float32))
            table = (table.set_column(table.schema.get_field_index(name), name, column)
                     if name in table.schema.names  # a cleaned dataset cleaned again
                     else table.append_column(name, column))
        low_alignment = scores < threshold
        rejects.append(("low_alignment", low_alignment))
        # a reused model may have been trained on this corpus' lines, slipped ones included:
        # it knows their cross pairs, so neighbours cannot be compared with it
        if task.recipe.align.shift_links and not task.recipe.align.model:
            from spr_data.qa.align import shifted_runs

            # in file order, among the rows no earlier stage rejected
            alive = np.flatnonzero(~reason_lists_any(n, rejects[:-1]))
            rows = pa.array(alive)
            shifted = np.zeros(n, dtype=bool)
            trained_cross = (_trained_cross(ids[alive], np.load(task.shift_skip_ids,
                                                                allow_pickle=False))
                             if task.shift_skip_ids else None)
            # a link between two rows that are surely translations is no slip: only links
            # that touch a row below _SURE are scored (measured at 1M pairs with 5% junk: the
            # decide step 47 -> 22 s, the same decisions on every quality mix)
            unsure = p_values[alive] < _SURE
            shifted[alive] = shifted_runs(aligner, src.take(rows), tgt.take(rows),
                                          scores[alive], threshold=threshold[alive],
                                          trained_cross=trained_cross,
                                          check=unsure | np.r_[False, unsure[:-1]],
                                          min_links=task.recipe.align.shift_links)
            rejects.append(("shifted_lines", shifted))
    lists = reason_lists(n, rejects)
    rejected = _np_bool(pc.greater(pc.list_value_length(lists), 0))
    kept = table.filter(pa.array(~rejected))
    mask = pa.array(rejected)
    chosen = lists.filter(mask)
    first = pc.list_element(chosen, 0) if len(chosen) else pa.array([], pa.string())
    stages = pa.array([stage_of_reason(r) for r in first.to_pylist()], pa.string())
    rejected_table = (table.filter(mask).append_column(REASON, first)
                      .append_column(REASONS, chosen).append_column(STAGE, stages))
    # accounting: every id of the shard is kept or rejected, none twice
    out_ids = np.concatenate([kept.column(ID).to_numpy(), rejected_table.column(ID).to_numpy()])
    if len(out_ids) != n or not np.array_equal(np.sort(out_ids), np.sort(ids)):
        raise SprDataError(f"accounting failed for shard {task.index}: {n} rows in, "
                           f"{kept.num_rows} kept + {rejected_table.num_rows} rejected")
    out = Path(task.out)
    kept_path = out / shard_name(task.index)
    reject_path = out / REJECTS_DIR / shard_name(task.index, rejects=True)
    tag = temp_tag(out)  # this worker's, recorded in the run's work state
    kept_info = _write_ipc(kept_path, kept, tag=tag)
    reject_info = _write_ipc(reject_path, rejected_table, tag=tag)
    stats: dict[str, Any] = {
        "rows": n, "kept": kept_info.__dict__, "rejects": reject_info.__dict__,
        "by_reason": _counts(first),
        "all_reasons": _counts(pc.list_flatten(chosen)),
        "histograms": {}, "quarantined": quarantined_here,
        "examples": _examples(rejected_table),
    }
    for name in _HISTOGRAMS:
        if name in table.schema.names:
            values = table.column(name).to_numpy().astype(np.float64)
            stats["histograms"][name] = _histogram(values, name)
    if task.aligner:
        # the align report's kept / rejected histograms (rejected: by alignment, or by another
        # reason first)
        other = rejected & ~low_alignment
        stats["align_histograms"] = {
            "kept": _histogram(scores[~rejected].astype(np.float64), ALIGN_SCORE),
            "rejected_low_alignment": _histogram(
                scores[low_alignment].astype(np.float64), ALIGN_SCORE),
            "rejected_other": _histogram(scores[other].astype(np.float64), ALIGN_SCORE)}
    return mark_unit_finished(work, out, task.index, stats, [kept_path, reject_path])


def _trained_cross(ids: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """Per row, whether (the previous row's source, this row's target) was trained on:
    ``trained`` holds sorted (row id, next row id) pairs of the shifted negatives."""
    out = np.zeros(len(ids), dtype=bool)
    if len(ids) < 2 or len(trained) == 0:
        return out
    at = np.minimum(np.searchsorted(trained[:, 0], ids[:-1]), len(trained) - 1)
    out[1:] = (trained[at, 0] == ids[:-1]) & (trained[at, 1] == ids[1:])
    return out


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


_STAGE_ORDER = ("quarantine", "rules", "langid", "dedup", "align")
_SIDES = ("src", "tgt", "text")


def reason_rank(reason: str) -> tuple[int, int, int]:
    """Where a reason stands in the order stages apply them: stage, then side, then rule (the
    order in which ``reasons`` lists them and ``reason`` picks the first)."""
    from spr_data.qa.rules import PAIR_RULES, SIDE_RULES

    stage = _STAGE_ORDER.index(stage_of_reason(reason))
    if stage_of_reason(reason) == "rules":
        if reason in PAIR_RULES:
            return stage, len(_SIDES), PAIR_RULES.index(reason)
        rule, _, side = reason.rpartition("_")
        return stage, _SIDES.index(side), SIDE_RULES.index(rule)
    if reason in _LANGID_REASONS:
        return stage, 0, _LANGID_REASONS.index(reason)
    return stage, 0, 0


def _unpack_reasons(column: pa.ChunkedArray) -> list[tuple[str, np.ndarray]]:
    flat = pc.list_flatten(column)
    if len(flat) == 0:
        return []
    rows = np.asarray(pc.list_parent_indices(column).to_numpy())
    values = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=object)
    n = len(column)
    order = sorted(set(values.tolist()), key=reason_rank)
    out = []
    for reason in order:
        mask = np.zeros(n, dtype=bool)
        mask[rows[values == reason]] = True
        out.append((reason, mask))
    return out


# --- the run -----------------------------------------------------------------------------------

def read_quarantine(path: str | Path) -> np.ndarray:
    """Row ids from a quarantine file: JSONL of ``{"row_ids": [...]}``, ``{"id": n}`` or ``n``."""
    p = Path(path)
    ids: list[int] = []
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM, as some editors write, is fine
    except FileNotFoundError:
        raise InputError(f"quarantine file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read quarantine file {p}: {exc}") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{number}: not JSON ({exc.msg})") from None
        values = item.get("row_ids", item.get("ids", [item["id"]] if "id" in item else None)) \
            if isinstance(item, dict) else [item]
        if not isinstance(values, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64
                for v in values):
            raise InputError(f"{p}:{number}: expected a row id, a list 'row_ids' of row ids, "
                             f"or 'id'; found {line.strip()[:80]}")
        ids.extend(values)
    return unique(np.asarray(ids, dtype=np.uint64))


def _global_dedup(work: Path, recipe: Recipe, scored: list[Path]) -> Path | None:
    if "dedup" not in recipe.stages:
        return None
    from spr_data.qa.dedup import duplicate_ids, too_many_targets_ids

    target = work / "dedup.npz"
    if target.exists():
        return target
    ids, hashes, src_hashes = [], [], []
    for path in scored:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
            ids.append(table.column(ID).to_numpy().copy())
            hashes.append(table.column(_HASH).to_numpy().copy())
            if _SRC_HASH in table.schema.names:
                src_hashes.append(table.column(_SRC_HASH).to_numpy().copy())
    all_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint64)
    dup = duplicate_ids(np.concatenate(hashes) if hashes else all_ids, all_ids)
    many = (too_many_targets_ids(np.concatenate(src_hashes), all_ids,
                                 recipe.dedup.max_targets_per_source)
            if src_hashes else np.zeros(0, dtype=np.uint64))
    tmp = work / ("dedup.npz" + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        np.savez(f, duplicate=dup, too_many_targets=many)
    tmp.replace(target)
    return target


#: negatives of each kind at least (when the corpus has ten times as many rows): fewer make
#: the threshold, a high quantile of them, a matter of a handful of pairs
_MIN_NEGATIVES_PER_KIND = 200
#: the negatives the corpus' misaligned share is estimated from: re-paired pairs only. Cut
#: sides and next lines are sometimes still fair translations (a three-word sentence cut to
#: two, a corpus sorted by source); in the mixture they "explain" real pairs as junk, and the
#: estimated loss of real pairs falls to nothing while the true one grows (measured on
#: Tatoeba eng–cmn at 25% junk: estimated 0.5%, true 5.7%; with re-paired pairs alone 2.0%,
#: true 1.3%)
_MIXTURE_KINDS = ("repaired",)


def _train_aligner(work: Path, recipe: Recipe, scored: list[Path], dedup: Path | None,
                   langs: list[str]) -> tuple[Path | None, dict[str, Any] | None]:
    """Train the alignment model and fix its thresholds (``align.json`` beside the model).

    The thresholds are calibrated on negatives made from the training pairs (see
    :func:`spr_data.qa.align.calibrate`). EM learns links between the words of every pair it
    sees, junk included, so a pair it was trained on scores higher than one it was not
    (measured on Tatoeba eng–ben with 25% re-paired junk: median -3.2 for the junk it saw,
    -6.2 for the same junk unseen). So there are two calibrations:

    * *seen* (rows the model was trained on): negatives take the place of the rows they are
      made from in training, as junk takes the place of a pair in a corpus — its source then
      appears nowhere else, its target once more — and are scored with the corpus' rows;
    * *unseen* (the rows they replaced, and every row beyond ``max_train_pairs``): the
      replaced rows are a random sample of the corpus the model never saw; negatives made
      from them, also unseen, calibrate the threshold for such rows.

    With ``align.trusted`` the corpus is not trained on, nor with ``align.model`` (a model an
    earlier run wrote, loaded instead of trained): one unseen calibration.
    """
    if "align" not in recipe.stages:
        return None, None
    from spr_data.qa.align import (
        NEGATIVE_KINDS,
        SCORE_EDGES,
        AlignerOptions,
        Calibration,
        LexicalAligner,
        calibrate,
        synthetic_negatives,
    )

    model_path = work / "align_model.npz"
    info_path = work / "align.json"
    trained_path = work / "align_trained_ids.npy"
    skip_path = work / "align_shift_skip_ids.npy"
    if all(p.exists() for p in (model_path, info_path, trained_path, skip_path)):
        return model_path, json.loads(info_path.read_text())
    cfg = recipe.align
    src, tgt, ids = _training_pairs(scored, dedup, cfg.max_train_pairs)
    if len(src) == 0:
        raise SprDataError("no pairs left to train the alignment model on; loosen the rules or "
                           "name align.trusted in the recipe")
    src, tgt = src.cast(pa.large_string()), tgt.cast(pa.large_string())
    n = len(src)
    share = max(cfg.negatives_share,
                min(_MIN_NEGATIVES_PER_KIND / n, 0.1))  # at most 40% of the rows drawn
    seen_neg = synthetic_negatives(src, tgt, share=share, seed=cfg.seed)
    held = seen_neg.drawn
    in_train = np.ones(n, bool)
    in_train[held] = False
    held_rows = pa.array(held)
    unseen_neg = synthetic_negatives(src.take(held_rows), tgt.take(held_rows),
                                     share=1.0 / len(NEGATIVE_KINDS), seed=cfg.seed + 1)
    # the corpus' junk reached align through the rules; so must the negatives, or those the
    # rules would have taken (a length ratio of 10) widen their low tail and the junk share
    # is underestimated (measured: 0.28 for 0.40 on Multi30k with 50% junk)
    seen_neg = seen_neg.only(_passes_rules(recipe, langs, seen_neg.src, seen_neg.tgt))
    unseen_neg = unseen_neg.only(_passes_rules(recipe, langs, unseen_neg.src, unseen_neg.tgt))
    repaired = NEGATIVE_KINDS.index("repaired")
    outside = bool(cfg.trusted or cfg.model)  # the model never saw this corpus
    if cfg.model:
        train_src = train_tgt = pa.array([], pa.large_string())
        trained_ids = np.zeros(0, np.uint64)
    elif cfg.trusted:
        trusted = open_dataset(cfg.trusted)
        if trusted.kind != "parallel":
            raise InputError(f"align.trusted {cfg.trusted} is not a parallel dataset")
        table = trusted.take(np.arange(min(len(trusted), cfg.max_train_pairs)))
        train_src = table.column("src").combine_chunks()
        train_tgt = table.column("tgt").combine_chunks()
        trained_ids = np.zeros(0, np.uint64)
    else:
        keep = pa.array(np.flatnonzero(in_train))
        train_src = pa.concat_arrays([src.take(keep), seen_neg.src])
        train_tgt = pa.concat_arrays([tgt.take(keep), seen_neg.tgt])
        trained_ids = np.sort(ids[in_train])
    options = AlignerOptions(src_lang=langs[0], tgt_lang=langs[-1], iterations=cfg.iterations,
                             max_train_pairs=max(cfg.max_train_pairs, len(train_src)),
                             seed=cfg.seed)
    started = time.perf_counter()
    aligner = (_reused_model(cfg.model, langs) if cfg.model
               else LexicalAligner.train(train_src, train_tgt, options))
    train_seconds = time.perf_counter() - started
    corpus_scores = aligner.score(src, tgt)
    unseen_scores = aligner.score(unseen_neg.src, unseen_neg.tgt)

    def calibrated(corpus: np.ndarray, negatives: Any, scores: np.ndarray) -> Any:
        try:
            return calibrate(corpus, scores, negative_recall=cfg.negative_recall,
                             max_real_reject=cfg.max_real_reject,
                             min_p_translation=cfg.min_p_translation,
                             reference=negatives.kinds == repaired, kinds=negatives.kinds,
                             mixture=np.isin(negatives.kinds,
                                             [NEGATIVE_KINDS.index(k) for k in _MIXTURE_KINDS]))
        except InputError:
            if cfg.min_score is None and cfg.quantile is None:
                raise
            # too few pairs for negatives, and a threshold set by hand: nothing to estimate
            return Calibration(threshold=float("-inf"), misaligned_share=0.0,
                               negatives_rejected=0.0, real_rejected=0.0,
                               p_translation=tuple(1.0 for _ in SCORE_EDGES),
                               corpus_histogram=(0,) * (SCORE_EDGES.size - 1),
                               negatives_histogram=(0,) * (SCORE_EDGES.size - 1))

    unseen = calibrated(corpus_scores[held], unseen_neg, unseen_scores)
    if outside:
        seen, seen_scores, seen_negatives = unseen, unseen_scores, unseen_neg
    else:
        seen_scores = aligner.score(seen_neg.src, seen_neg.tgt)
        seen = calibrated(corpus_scores[in_train], seen_neg, seen_scores)
        seen_negatives = seen_neg
    warnings: list[str] = []
    thresholds = {"seen": seen.threshold, "unseen": unseen.threshold}
    if cfg.min_score is not None:
        method = "min_score"
        thresholds = {"seen": cfg.min_score, "unseen": cfg.min_score}
    elif cfg.quantile is not None:
        method = "quantile"
        value = float(np.quantile(corpus_scores, cfg.quantile))
        thresholds = {"seen": value, "unseen": value}
        warnings.append(f"align.quantile = {cfg.quantile:g} rejects that share of the pairs "
                        "whatever the corpus holds (and again each time a cleaned dataset is "
                        "cleaned); drop it for the calibrated threshold "
                        f"({seen.threshold:.3f} here)")
    else:
        method = "calibrated"
    threshold = thresholds["seen"]
    if method == "calibrated" and seen.negatives_rejected < 0.5:
        warnings.append(f"the alignment model tells the corpus' pairs from negatives made of "
                        f"them poorly: a threshold that keeps the real pairs rejects only "
                        f"{seen.negatives_rejected:.0%} of the negatives; train it on a larger "
                        "or trusted corpus (align.trusted)")
    tmp = work / ("align_model.npz" + TMP_SUFFIX)
    aligner.save(tmp)
    tmp.replace(model_path)
    shifted_kind = seen_neg.kinds == NEGATIVE_KINDS.index("shifted")
    made_from = seen_neg.rows[shifted_kind] if not outside else np.zeros(0, np.int64)
    skip_ids = np.stack([ids[made_from], ids[(made_from + 1) % n]], axis=1)
    skip_ids = skip_ids[np.argsort(skip_ids[:, 0], kind="stable")]
    with open(work / ("align_shift_skip_ids.npy" + TMP_SUFFIX), "wb") as f:
        np.save(f, skip_ids, allow_pickle=False)
    (work / ("align_shift_skip_ids.npy" + TMP_SUFFIX)).replace(skip_path)
    with open(work / ("align_trained_ids.npy" + TMP_SUFFIX), "wb") as f:
        np.save(f, trained_ids, allow_pickle=False)
    (work / ("align_trained_ids.npy" + TMP_SUFFIX)).replace(trained_path)
    info = {"method": method, "threshold": threshold,
            "threshold_unseen": thresholds["unseen"], "trained_on": len(train_src),
            "corpus_pairs_scored": n, "quantile": cfg.quantile,
            "min_score": cfg.min_score, "trusted": cfg.trusted, "model": cfg.model,
            "model_hash": aligner.content_hash, "train_seconds": round(train_seconds, 3),
            "calibrated_threshold": seen.threshold,
            "calibrated_threshold_unseen": unseen.threshold,
            # the mixture bounds the share from both sides (see calibrate): its midpoint, and
            # the range; measured on Multi30k with 10/25/50% junk, 0.10-0.13 / 0.19-0.31 /
            # 0.41-0.59
            "estimated_misaligned_share": round(
                (seen.misaligned_share + seen.misaligned_share_low) / 2, 6),
            "estimated_misaligned_share_range": [round(seen.misaligned_share_low, 6),
                                                 round(seen.misaligned_share, 6)],
            "estimated_misaligned_share_unseen": round(unseen.misaligned_share, 6),
            "negatives_rejected": round(float(np.mean(seen_scores < threshold))
                                        if len(seen_scores) else 0.0, 6),
            "estimated_real_rejected": round(seen.real_rejected, 6),
            "negatives": {"count": len(seen_scores), "kinds": seen_negatives.counts(),
                          "rejected_by_kind": {
                              kind: round(float(np.mean(
                                  seen_scores[seen_negatives.kinds == i] < threshold)), 6)
                              for i, kind in enumerate(NEGATIVE_KINDS)
                              if np.any(seen_negatives.kinds == i)},
                          "unseen_count": len(unseen_scores)},
            "histograms": {"edges": SCORE_EDGES.round(4).tolist(),
                           "corpus": list(seen.corpus_histogram),
                           "negatives": list(seen.negatives_histogram)},
            "p_translation": list(seen.p_translation),
            "p_translation_unseen": list(unseen.p_translation),
            "warnings": warnings}
    atomic_write_bytes(info_path, json.dumps(info).encode())
    return model_path, info


def _reused_model(path: str, langs: list[str]) -> Any:
    """``align.model``: a model an earlier clean wrote, for this language pair only."""
    from spr_data.qa.align import LexicalAligner

    if not Path(path).is_file():
        raise InputError(f"align.model {path} does not exist; name the align_model.npz an "
                         "earlier clean wrote into its --out, or drop align.model to train one")
    model = LexicalAligner.load(path)
    pair = (model.options.src_lang, model.options.tgt_lang)
    if pair != (langs[0], langs[-1]):
        raise InputError(f"align.model {path} was trained for {pair[0]}-{pair[1]}, and this "
                         f"dataset is {langs[0]}-{langs[-1]}; name a model of this language "
                         "pair or drop align.model to train one")
    return model


def _passes_rules(recipe: Recipe, langs: list[str], src: pa.Array,
                  tgt: pa.Array) -> np.ndarray:
    """Which pairs the recipe's rules stage would keep (all, without one)."""
    keep = np.ones(len(src), bool)
    if "rules" not in recipe.stages or not len(src):
        return keep
    (stage,) = build_stages(replace(recipe, stages=("rules",)), "parallel", langs)
    for start in range(0, len(src), _SLICE_ROWS):
        batch = pa.RecordBatch.from_arrays([src.slice(start, _SLICE_ROWS),
                                            tgt.slice(start, _SLICE_ROWS)], ["src", "tgt"])
        for _, mask in stage.apply(batch).rejects:
            keep[start:start + batch.num_rows] &= ~np.asarray(mask, bool)
    return keep


def _training_pairs(scored: list[Path], dedup: Path | None,
                    limit: int) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Rows that passed every per-shard stage and are not duplicates, evenly spread: their
    sources, targets and ids."""
    dup = np.load(dedup, allow_pickle=False)["duplicate"] if dedup else np.zeros(0, np.uint64)
    eligible = []
    for path in scored:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
            ok = (pc.list_value_length(table.column(_PASS1_REASONS)).to_numpy() == 0)
            ok &= ~np.isin(table.column(ID).to_numpy(), dup)
            eligible.append(int(ok.sum()))
    total = sum(eligible)
    stride = max(1, -(-total // limit)) if limit else 1
    src_parts, tgt_parts, id_parts = [], [], []
    seen = 0
    for path in scored:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
            ok = (pc.list_value_length(table.column(_PASS1_REASONS)).to_numpy() == 0)
            ok &= ~np.isin(table.column(ID).to_numpy(), dup)
            positions = np.flatnonzero(ok)
            chosen = positions[(np.arange(len(positions)) + seen) % stride == 0]
            seen += len(positions)
            picked = table.take(pa.array(chosen))
            src_parts.append(picked.column("src").combine_chunks())
            tgt_parts.append(picked.column("tgt").combine_chunks())
            id_parts.append(picked.column(ID).to_numpy())
    if not src_parts:
        return pa.array([], pa.string()), pa.array([], pa.string()), np.zeros(0, np.uint64)
    return (pa.concat_arrays(src_parts), pa.concat_arrays(tgt_parts),
            np.concatenate(id_parts).astype(np.uint64))


def clean(
    dataset: str | Path,
    out: str | Path,
    *,
    recipe: str | Path | Recipe | None = None,
    workers: int | None = None,
    quarantine: str | Path | None = None,
    overwrite: bool = False,
    on_progress: Callable[[str, int, int], None] | None = None,
    reader: ReaderOptions | None = None,
    allow_heavy_loss: bool = False,
    executor: Executor | None = None,
) -> CleanReport:
    """Clean ``dataset`` into ``out`` (kept rows) and ``out/_rejects`` (every rejected row).

    ``on_progress(step, done, total)`` reports rows done per step (score, decide). A run
    killed at any point resumes where it stopped when started again with the same inputs and
    recipe. A dataset on a network filesystem or URL is read as ``reader`` says, its shards
    copied (verified) to local disk for the workers. When one reason rejects more than the
    recipe's ``max_reason_share`` of the rows, nothing is published (:class:`DataLossError`;
    the run's work and report stay under ``out/.work``) unless ``allow_heavy_loss``; a rerun
    with it resumes from that work. The per-shard tasks run on ``executor`` (e.g. a
    :class:`~spr_data.pipeline.ray_executor.RayExecutor`; default: ``workers`` local
    processes); the output is the same bytes on any executor.
    """
    started = time.perf_counter()
    source = open_dataset(str(dataset), reader=reader)
    if source.manifest.role != "rows":
        raise DatasetError(f"{dataset} is a rejects dataset; clean its parent instead")
    if not source.remote:  # the manifest against the shards' own footers, before any plan
        check_shards(source.shard_paths, source.manifest)
    if not len(source):
        raise DatasetError(f"{dataset} has no rows to clean (its inputs were all rejected at "
                           "ingest; see its rejects)")
    resolved = (recipe if isinstance(recipe, Recipe)
                else load_recipe(recipe, source.langs, source.kind))
    if "align" in resolved.stages and source.kind != "parallel":
        raise InputError("the align stage needs a parallel corpus; drop it from the recipe")
    out = Path(out)
    if out.resolve() == Path(dataset).resolve():
        raise InputError("--out must differ from the input dataset")
    quarantine_ids = read_quarantine(quarantine) if quarantine is not None else None
    identity = {
        "input": source.manifest_digest,
        "recipe": resolved.digest,
        "quarantine": None if quarantine is None else sha256_file(Path(quarantine)),
        "tool_version": __version__,
    }
    # the lock is held for the whole run; a failed run keeps its work state (it resumes from
    # it) and never removes what it did not write
    with output_lock(out, command="clean"):
        prepare_output(out, overwrite=overwrite, resume=True)
        work = out / WORK_DIR
        check_run(work, identity, overwrite=overwrite)
        claim(out, REJECTS_DIR + "/")
        (out / REJECTS_DIR).mkdir(exist_ok=True)
        quarantine_path = None
        if quarantine_ids is not None:
            quarantine_path = work / "quarantine.npy"
            with open(quarantine_path, "wb") as f:
                np.save(f, quarantine_ids, allow_pickle=False)
        with executor_for(executor, workers) as runner:
            report = _run(source, out, work, resolved, runner, quarantine_path, on_progress,
                          allow_heavy_loss)
    report.seconds = time.perf_counter() - started
    return report


def _run(source: Dataset, out: Path, work: Path, recipe: Recipe, executor: Executor,
         quarantine: Path | None,
         on_progress: Callable[[str, int, int], None] | None,
         allow_heavy_loss: bool = False) -> CleanReport:
    langs = source.langs
    unit = unit_rows(len(source))
    local_paths = source.local_shard_paths(work / "shards")
    check_shards(local_paths, source.manifest)
    spans = [(path, start, min(unit, info.rows - start), info.hash)
             for path, info in zip(local_paths, source.manifest.shards, strict=True)
             for start in range(0, info.rows, unit)]
    tasks = [_ShardTask(index=u, shard=str(path), offset=start, length=length, work=str(work),
                        out=str(out), recipe=recipe, kind=source.kind, langs=tuple(langs),
                        shard_hash=digest)
             for u, (path, start, length, digest) in enumerate(spans)]
    claim(out, "report.json", "report.html", "align_model.npz",
          *(shard_name(t.index) for t in tasks),
          *(f"{REJECTS_DIR}/{shard_name(t.index, rejects=True)}" for t in tasks))

    total = sum(t.length for t in tasks)
    rows_done = {"score": 0, "decide": 0}

    def report_progress(step: str, task: _ShardTask) -> None:
        rows_done[step] += task.length
        if on_progress is not None:
            on_progress(step, rows_done[step], total)

    timings: dict[str, float] = {}
    clock = time.perf_counter()
    for i, _ in executor.map(_score_task, tasks):
        report_progress("score", tasks[i])
    timings["score"], clock = time.perf_counter() - clock, time.perf_counter()
    scored = [work / f"scored-{t.index:05d}.arrow" for t in tasks]
    dedup = _global_dedup(work, recipe, scored)
    timings["dedup"], clock = time.perf_counter() - clock, time.perf_counter()
    if "align" in recipe.stages and isinstance(executor, LocalExecutor) \
            and executor.workers > 1:
        # training runs alone for a minute: idle workers would hold the memory of the score
        # step all that time (about 0.5 GB each at 1M pairs), and this process would keep
        # what training allocated through the decide step; so the workers stop (decide starts
        # new ones) and training runs in a process of its own
        executor.release()
        aligner, align_info = run_apart(_train_aligner, work, recipe, scored, dedup, langs)
    else:
        aligner, align_info = _train_aligner(work, recipe, scored, dedup, langs)
    timings["align_train"], clock = time.perf_counter() - clock, time.perf_counter()
    decide = [replace(t, duplicates=str(dedup) if dedup else None,
                      aligner=str(aligner) if aligner else None,
                      aligner_hash=align_info["model_hash"] if align_info else None,
                      threshold=align_info["threshold"] if align_info else None,
                      p_table=tuple(align_info["p_translation"]) if align_info else None,
                      threshold_unseen=align_info["threshold_unseen"] if align_info else None,
                      p_table_unseen=(tuple(align_info["p_translation_unseen"])
                                      if align_info else None),
                      trained_ids=str(work / "align_trained_ids.npy") if align_info else None,
                      shift_skip_ids=(str(work / "align_shift_skip_ids.npy")
                                      if align_info else None),
                      quarantine=str(quarantine) if quarantine else None)
              for t in tasks]
    results: dict[int, dict[str, Any]] = {}
    for i, stats in executor.map(_decide_task, decide):
        results[decide[i].index] = stats
        report_progress("decide", decide[i])
    timings["decide"] = time.perf_counter() - clock
    if align_info is not None:
        align_info = _with_decided_histograms(align_info, results)
    quarantine_size = len(np.load(quarantine, allow_pickle=False)) if quarantine else 0
    report = _finish(source, out, work, recipe, results, align_info, executor.workers,
                     quarantine_size, allow_heavy_loss)
    report.timings = timings
    return report


def _with_decided_histograms(align_info: dict[str, Any],
                             results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The align report with the kept and rejected rows' score histograms summed over shards."""
    sums: dict[str, np.ndarray] = {}
    for k in sorted(results):
        for name, counts in results[k].get("align_histograms", {}).items():
            sums[name] = sums.get(name, 0) + np.asarray(counts, np.int64)
    histograms = {**align_info["histograms"], **{k: v.tolist() for k, v in sums.items()}}
    return {**align_info, "histograms": histograms}


def _finish(source: Dataset, out: Path, work: Path, recipe: Recipe,
            results: dict[int, dict[str, Any]], align_info: dict[str, Any] | None,
            workers: int, quarantine_size: int, allow_heavy_loss: bool = False) -> CleanReport:
    ordered = [results[k] for k in sorted(results)]
    kept = [ShardInfo(**r["kept"]) for r in ordered]
    rejected = [ShardInfo(**r["rejects"]) for r in ordered]
    by_reason: Counter[str] = Counter()
    all_reasons: Counter[str] = Counter()
    histograms: dict[str, np.ndarray] = {}
    examples: dict[str, list[dict[str, Any]]] = {}
    for r in ordered:
        for reason, rows in r.get("examples", {}).items():
            examples[reason] = (examples.get(reason, []) + rows)[:_EXAMPLES]
        by_reason.update(r["by_reason"])
        all_reasons.update(r["all_reasons"])
        for name, counts in r["histograms"].items():
            histograms[name] = histograms.get(name, 0) + np.asarray(counts)
    rows_in = len(source)
    rows_kept = sum(s.rows for s in kept)
    if rows_kept + sum(s.rows for s in rejected) != rows_in:
        raise SprDataError(f"accounting failed: {rows_in} rows in, {rows_kept} kept + "
                           f"{sum(s.rows for s in rejected)} rejected; the output is not "
                           "written")
    schema_of = _schema_of(out, kept)
    reject_schema = _schema_of(out / REJECTS_DIR, rejected)
    lineage = {
        "stage": "clean", "tool": "spr-data", "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "parent": source.parent_record(),
        "recipe": recipe.to_json(), "recipe_hash": recipe.digest,
        "options": {"workers": workers},
    }
    counts = dict(sorted(by_reason.items()))
    stages = _waterfall(rows_in, counts, recipe)
    report = CleanReport(
        out=out, rows_in=rows_in, rows_kept=rows_kept, by_reason=counts,
        all_reasons=dict(sorted(all_reasons.items())), stages=stages,
        distributions={name: _summarize(hist, name) for name, hist in histograms.items()},
        align=align_info, recipe=recipe.to_json(), recipe_hash=recipe.digest, seconds=0.0,
        workers=workers, resumed_shards=sum(1 for r in ordered if r.get("resumed")),
        quarantine_not_found=quarantine_size - sum(r.get("quarantined", 0) for r in ordered),
        examples=dict(sorted(examples.items())))
    if not allow_heavy_loss:
        _refuse_heavy_loss(report, recipe, work, source.langs)
    tag = temp_tag(out)
    atomic_write_bytes(out / "report.json",
                       json.dumps(report.to_json(), indent=2, ensure_ascii=False).encode(),
                       tag=tag)
    from spr_data.qa.report_html import render_report

    atomic_write_bytes(out / "report.html", render_report(report.to_json()).encode(), tag=tag)
    if align_info is not None:
        shutil.copyfile(work / "align_model.npz", out / "align_model.npz")
    id_bound = source.manifest.id_bound
    publish(out, Manifest(
        kind=source.manifest.kind, role="rows", langs=source.langs, schema=schema_of,
        shards=kept, rows_in=rows_in, id_bound=id_bound, rejects=counts,
        rejects_dir=REJECTS_DIR, lineage=lineage), rejects=Manifest(
        kind=source.manifest.kind, role="rejects", langs=source.langs, schema=reject_schema,
        shards=rejected, rows_in=rows_in, id_bound=id_bound, rejects=counts, lineage=lineage))
    shutil.rmtree(work, ignore_errors=True)
    return report


def _schema_of(directory: Path, shards: list[ShardInfo]) -> pa.Schema:
    if not shards:
        raise SprDataError(f"no shards were written to {directory}")
    with pa.memory_map(str(directory / shards[0].file)) as source:
        return pa.ipc.open_file(source).schema


def _waterfall(rows_in: int, by_reason: dict[str, int], recipe: Recipe) -> list[dict[str, Any]]:
    order = ["quarantine", *recipe.stages]
    remaining = rows_in
    stages = []
    for name in order:
        removed = {r: n for r, n in by_reason.items() if stage_of_reason(r) == name}
        if name == "quarantine" and not removed:
            continue
        total = sum(removed.values())
        stages.append({"name": name, "rows_in": remaining, "rows_out": remaining - total,
                       "removed": total, "by_reason": removed})
        remaining -= total
    return stages


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


def _refuse_heavy_loss(report: CleanReport, recipe: Recipe, work: Path,
                       langs: list[str]) -> None:
    """Stop before publishing when one reason rejects more than ``recipe.max_reason_share``
    of the rows: a wrong language code, wrong columns or a recipe typo reject nearly
    everything, and a run that "succeeds" with 2% of its rows is silent destruction. The
    report goes to the work directory for a look; the rerun that accepts resumes there."""
    if not report.rows_in:
        return
    # a quarantine is the user's own explicit list: never a surprise
    heavy = [(n, reason) for reason, n in report.by_reason.items()
             if reason != "quarantined" and n > recipe.max_reason_share * report.rows_in]
    if not heavy:
        return
    n, reason = max(heavy)
    atomic_write_bytes(work / "report.json",
                       json.dumps(report.to_json(), indent=2, ensure_ascii=False).encode())
    samples = []
    for row in report.examples.get(reason, [])[:2]:
        text = " / ".join(repr(str(row[c])[:60]) for c in _SIDES if c in row)
        predicted = ", ".join(f"{k} {row[k]}" for k in ("lid_src", "lid_tgt", "lid_text")
                              if isinstance(row.get(k), str))
        samples.append(text + (f" ({predicted})" if predicted else ""))
    raise DataLossError(
        f"clean stopped before publishing {report.out}: {reason} rejects {n:,} of "
        f"{report.rows_in:,} rows ({n / report.rows_in:.1%}), more than the recipe's "
        f"max_reason_share ({recipe.max_reason_share:g}); e.g. {'; '.join(samples) or '-'}. "
        f"Check the dataset's languages ({'-'.join(langs)}) and the recipe; if this loss is "
        f"right, rerun with allow_heavy_loss=True, which resumes from "
        f"{work} (its report.json has the details), or raise max_reason_share")
