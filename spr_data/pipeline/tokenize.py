"""``tokenize``: add token-id list columns to a dataset, so training reads ids, not text.

Each text column ``c`` gets ``c_ids`` (``src_ids``/``tgt_ids``, or ``text_ids``): a list of
uint16 when every id fits (vocabularies up to 65,536), else uint32 — half the bytes of int32
for most MT vocabularies. Work is split into units of rows by the input's size alone, so the
output is byte-identical for any number of workers; each unit is an output shard written
atomically, with a marker, so a killed run resumes where it stopped. Every row is kept: the
stage accounts rows in = rows out in the lineage.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spr_data._version import __version__
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import DatasetError, InputError, SprDataError
from spr_data.fsio import sha256_file
from spr_data.manifest import Manifest, ShardInfo
from spr_data.outdir import (
    WORK_DIR,
    check_run,
    claim,
    output_lock,
    prepare_output,
    publish,
    temp_tag,
)
from spr_data.pipeline.executor import Executor, executor_for
from spr_data.pipeline.units import finished_unit, mark_unit_finished, unit_rows
from spr_data.reader import ReaderOptions
from spr_data.schema import text_columns
from spr_data.tokenizers import Tokenizer, load_tokenizer
from spr_data.verify import check_shard_hash, check_shards
from spr_data.writer import shard_name, write_shard_file

__all__ = ["TokenizeReport", "id_column", "row_sizes", "token_columns", "tokenize"]

_ENCODE_ROWS = 8192


def id_column(text_column: str) -> str:
    """The token-id column of a text column: ``src`` → ``src_ids``."""
    return f"{text_column}_ids"


def token_columns(ds: Dataset) -> list[str]:
    """The token-id columns ``ds`` has, in text-column order."""
    names = ds.schema.names
    return [id_column(c) for c in text_columns(ds.manifest.kind) if id_column(c) in names]


def row_sizes(ds: Dataset) -> Callable[[np.ndarray], np.ndarray]:
    """The size of each row for a token budget: its longest token-id sequence (what padding
    a batch to its longest row costs)."""
    columns = token_columns(ds)
    if not columns:
        raise InputError(f"{ds.path} has no token-id columns to size rows by (a token budget "
                         "needs them): run `spr-data tokenize` on it first")

    def sizes_of(rows: np.ndarray) -> np.ndarray:
        selection = ds.select_rows(np.asarray(rows, dtype=np.int64))  # located once
        return np.asarray(np.max([selection.lengths(c) for c in columns], axis=0))

    return sizes_of


@dataclass
class TokenizeReport:
    out: Path
    rows: int
    tokens: dict[str, int]
    id_type: str
    tokenizer: dict[str, Any]
    seconds: float
    workers: int
    resumed_shards: int

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "rows": self.rows, "tokens": self.tokens,
                "id_type": self.id_type, "tokenizer": self.tokenizer,
                "seconds": round(self.seconds, 3), "workers": self.workers,
                "resumed_shards": self.resumed_shards}


@dataclass(frozen=True)
class _Task:
    index: int
    shard: str
    offset: int
    length: int
    columns: tuple[str, ...]
    tokenizer: str
    id_type: str
    out: str
    work: str
    shard_hash: str = ""


@lru_cache(maxsize=2)
def _tokenizer(spec: str) -> Tokenizer:  # once per worker process
    return load_tokenizer(spec)


def _vocab_size(tok: Tokenizer) -> int:
    return len(tok.unknown)


def _id_array(ids: list[list[int]], id_type: pa.DataType) -> pa.Array:
    """A list array from per-row ids, built from numpy (not from Python lists per element)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=id_type.to_pandas_dtype(),
                       count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=id_type))


def _tokenize_task(task: _Task) -> dict[str, Any]:
    """One unit: read its rows, add the id columns, write the output shard, then a marker."""
    work = Path(task.work)
    done = finished_unit(work, task.out, task.index)
    if done is not None:
        return {**done, "resumed": True}
    if task.offset == 0:  # the first unit of each shard checks the whole shard
        check_shard_hash(task.shard, task.shard_hash)
    with pa.memory_map(task.shard) as source:
        batch = pa.ipc.open_file(source).read_all().slice(task.offset, task.length) \
            .combine_chunks().to_batches()
    if not batch:
        raise SprDataError(f"{task.shard}: no rows at {task.offset}..+{task.length}")
    table = pa.Table.from_batches(batch)
    tok = _tokenizer(task.tokenizer)
    id_type = pa.uint16() if task.id_type == "uint16" else pa.uint32()
    tokens = {}
    for column in task.columns:
        texts = table.column(column).to_pylist()
        ids: list[list[int]] = []
        for start in range(0, len(texts), _ENCODE_ROWS):
            ids += tok.encode(texts[start:start + _ENCODE_ROWS])
        array = _id_array(ids, id_type)
        tokens[id_column(column)] = len(array.values)
        name = id_column(column)
        if name in table.schema.names:  # tokenized before: replaced
            table = table.drop_columns([name])
        table = table.append_column(pa.field(name, array.type, nullable=False), array)
    path = Path(task.out) / shard_name(task.index)
    info = write_shard_file(path, table.combine_chunks().to_batches()[0],
                            tag=temp_tag(Path(task.out)))
    stats = {"shard": info.__dict__, "tokens": tokens}
    return mark_unit_finished(work, task.out, task.index, stats, [path])


def tokenize(dataset: str | Path, out: str | Path, *, tokenizer: str,
             workers: int | None = None, overwrite: bool = False,
             on_progress: Callable[[str, int, int], None] | None = None,
             reader: ReaderOptions | None = None,
             executor: Executor | None = None) -> TokenizeReport:
    """Write ``out``: every row of ``dataset`` with token-id columns added.

    ``tokenizer`` is what ``load_tokenizer`` takes (``[NAME=]PATH``). A run killed at any
    point resumes where it stopped when started again with the same input and tokenizer.
    A dataset on a network filesystem or URL is read as ``reader`` says, its shards copied
    (verified) to local disk for the workers. ``out`` is locked for the whole run; a failed
    run keeps its work state (it resumes from it) and removes nothing it did not write. The
    per-shard tasks run on ``executor`` (default: ``workers`` local processes).
    """
    with output_lock(out, command="tokenize"):
        return _tokenize(dataset, Path(out), tokenizer=tokenizer, workers=workers,
                         overwrite=overwrite, on_progress=on_progress, reader=reader,
                         executor=executor)


def _tokenize(dataset: str | Path, out: Path, *, tokenizer: str, workers: int | None,
              overwrite: bool, on_progress: Callable[[str, int, int], None] | None,
              reader: ReaderOptions | None, executor: Executor | None) -> TokenizeReport:
    started = time.perf_counter()
    source = open_dataset(str(dataset), reader=reader)
    if source.manifest.role != "rows":
        raise DatasetError(f"{dataset} is a rejects dataset; tokenize its parent instead")
    if not source.remote:  # the manifest against the shards' own footers, before any plan
        check_shards(source.shard_paths, source.manifest)
    if out.resolve() == Path(dataset).resolve():
        raise InputError("--out must differ from the input dataset")
    tok = load_tokenizer(tokenizer)
    if tok.kind in ("bytes", "chars"):
        raise InputError(f"{tokenizer} is a baseline of fertility-report, not a tokenizer; "
                         "give a .model, tokenizer.json, vocab.json or ranks file")
    id_type = "uint16" if _vocab_size(tok) <= 1 << 16 else "uint32"
    spec = str(tok.files[0].resolve())
    hashes = [sha256_file(f) for f in tok.files]  # a GPT-2 vocab.json and its merges.txt
    tokenizer_digest = (hashes[0] if len(hashes) == 1
                        else "sha256:" + hashlib.sha256("".join(hashes).encode()).hexdigest())
    tokenizer_info = {"name": tok.name, "kind": tok.kind, "path": spec, "sha256": tokenizer_digest,
                      "files": {str(f.resolve()): h
                                for f, h in zip(tok.files, hashes, strict=True)},
                      "vocab_size": _vocab_size(tok)}
    columns = text_columns(source.manifest.kind)
    if not len(source):
        raise DatasetError(f"{dataset} has no rows to tokenize")
    identity = {"input": source.manifest_digest,
                "tokenizer": tokenizer_info["sha256"], "tool_version": __version__}
    prepare_output(out, overwrite=overwrite, resume=True)
    work = out / WORK_DIR
    unit = unit_rows(len(source))
    done = 0
    results: dict[int, dict[str, Any]] = {}
    check_run(work, identity, overwrite=overwrite)
    local_paths = source.local_shard_paths(work / "shards")
    check_shards(local_paths, source.manifest)
    spans = [(str(path), start, min(unit, info.rows - start), info.hash)
             for path, info in zip(local_paths, source.manifest.shards, strict=True)
             for start in range(0, info.rows, unit)]
    tasks = [_Task(i, path, start, length, columns, spec, id_type, str(out), str(work),
                   digest)
             for i, (path, start, length, digest) in enumerate(spans)]
    claim(out, *(shard_name(t.index) for t in tasks))
    with executor_for(executor, workers) as runner:
        for i, stats in runner.map(_tokenize_task, tasks):
            results[i] = stats
            done += tasks[i].length
            if on_progress is not None:
                on_progress("tokenize", done, len(source))
        used = runner.workers
    shards = [ShardInfo(**results[i]["shard"]) for i in range(len(tasks))]
    if sum(s.rows for s in shards) != len(source):
        raise SprDataError(f"accounting failed: {len(source)} rows in, "
                           f"{sum(s.rows for s in shards)} written; the output is not written")
    tokens = {id_column(c): sum(r["tokens"][id_column(c)] for r in results.values())
              for c in columns}
    with pa.memory_map(str(out / shards[0].file)) as f:
        schema = pa.ipc.open_file(f).schema
    lineage = {
        "stage": "tokenize", "tool": "spr-data", "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "parent": source.parent_record(),
        "tokenizer": tokenizer_info, "id_type": id_type, "tokens": tokens,
        "options": {"workers": used},
    }
    publish(out, Manifest(kind=source.manifest.kind, role="rows", langs=source.langs,
                          schema=schema, shards=shards, rows_in=len(source),
                          id_bound=source.manifest.id_bound, lineage=lineage))
    shutil.rmtree(work, ignore_errors=True)
    return TokenizeReport(out, len(source), tokens, id_type, tokenizer_info,
                          time.perf_counter() - started, used,
                          sum(1 for r in results.values() if r.get("resumed")))
