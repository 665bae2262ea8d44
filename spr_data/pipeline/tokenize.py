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
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spr_data._version import __version__
from spr_data.dataset import Dataset
from spr_data.errors import InputError, SprDataError
from spr_data.fsio import sha256_file
from spr_data.manifest import ShardInfo
from spr_data.pipeline.executor import Executor
from spr_data.pipeline.runner import ShardRun, Unit, open_input, read_unit
from spr_data.pipeline.units import finished_unit, mark_unit_finished
from spr_data.reader import ReaderOptions
from spr_data.schema import id_column, text_columns, token_id_columns
from spr_data.tokenizers import Tokenizer, load_tokenizer
from spr_data.writer import shard_name, write_shard_file

__all__ = ["TokenizeReport", "id_column", "row_sizes", "token_columns", "tokenize"]

_ENCODE_ROWS = 8192


def token_columns(ds: Dataset) -> list[str]:
    """The token-id columns ``ds`` has, in text-column order."""
    return token_id_columns(ds.manifest.kind, ds.schema.names)


def row_sizes(ds: Dataset) -> Callable[[np.ndarray], np.ndarray]:
    """The size of each row for a token budget: its longest token-id sequence (what padding
    a batch to its longest row costs)."""
    columns = token_columns(ds)
    if not columns:
        raise InputError(f"{ds.location} has no token-id columns to size rows by (a token budget "
                         "needs them): run `spr-data tokenize` on it first")

    def sizes_of(rows: np.ndarray) -> np.ndarray:
        selection = ds.select_rows(np.asarray(rows, dtype=np.int64))  # located once
        return np.asarray(np.max([selection.lengths(c) for c in columns], axis=0))

    return sizes_of


@dataclass
class TokenizeReport:
    out: str | Path
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
    unit: Unit
    columns: tuple[str, ...]
    tokenizer: str
    id_type: str
    staging: str
    work: str

    @property
    def index(self) -> int:
        return self.unit.index


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
    unit = task.unit
    done = finished_unit(task.work, task.staging, unit.index)
    if done is not None:
        return {**done, "resumed": True}
    table = read_unit(unit).combine_chunks()
    if table.num_rows == 0:
        raise SprDataError(f"{unit.shard}: no rows at {unit.offset}..+{unit.length}")
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
    path = Path(task.staging) / shard_name(unit.index)
    info = write_shard_file(path, table.combine_chunks().to_batches()[0])
    stats = {"shard": info.__dict__, "tokens": tokens}
    return mark_unit_finished(task.work, task.staging, unit.index, stats, [path])


def tokenize(dataset: str | Path, out: str | Path, *, tokenizer: str,
             workers: int | None = None, overwrite: bool = False,
             on_progress: Callable[[str, int, int], None] | None = None,
             reader: ReaderOptions | None = None,
             executor: Executor | None = None,
             work_dir: str | Path | None = None) -> TokenizeReport:
    """Write ``out``: every row of ``dataset`` with token-id columns added.

    ``tokenizer`` is what ``load_tokenizer`` takes (``[NAME=]PATH``). A run killed at any
    point resumes where it stopped when started again with the same input and tokenizer.
    A dataset on a network filesystem or URL is read as ``reader`` says, its shards copied
    (verified) to local disk for the workers. ``out`` is locked for the whole run; a failed
    run keeps its work state (it resumes from it) and removes nothing it did not write. The
    per-shard tasks run on ``executor`` (default: ``workers`` local processes). An ``out`` on
    an object store (``s3://…``) is written by upload, the run working in ``work_dir``.
    """
    started = time.perf_counter()
    source = open_input(dataset, out, command="tokenize", reader=reader)
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
    identity = {"input": source.manifest_digest,
                "tokenizer": tokenizer_info["sha256"], "tool_version": __version__}
    with ShardRun("tokenize", source, out, identity=identity, overwrite=overwrite,
                  executor=executor, workers=workers, on_progress=on_progress,
                  work_dir=work_dir) as run:
        tasks = [_Task(unit, columns, spec, id_type, str(run.staging), str(run.work))
                 for unit in run.units]
        run.claim(*run.output_names())
        results = dict(run.map("tokenize", _tokenize_task, tasks))
        shards = [ShardInfo(**results[i]["shard"]) for i in range(len(tasks))]
        tokens = {id_column(c): sum(r["tokens"][id_column(c)] for r in results.values())
                  for c in columns}
        used = run.executor.workers
        run.publish(shards, lineage=run.lineage(tokenizer=tokenizer_info, id_type=id_type,
                                                tokens=tokens, options={"workers": used}))
    return TokenizeReport(run.destination, len(source), tokens, id_type, tokenizer_info,
                          time.perf_counter() - started, used,
                          sum(1 for r in results.values() if r.get("resumed")))
