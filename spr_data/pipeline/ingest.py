"""``ingest``: raw corpora → a sharded Arrow dataset with stable row ids and a manifest.

Every input record gets the next id, in input order, and becomes either a row or a reject
(with its reason and raw bytes), so the ids of rows and rejects partition ``0..n-1``.

Several inputs are parsed at once, one task per input on the executor (local processes or
Ray), each into a work file of its record chunks; this process then writes them, in input
order, exactly as it writes chunks it parsed itself, so the dataset is the same bytes however
many workers parsed it. Parsing (JSON, decompression) is the costly part; writing is copying.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spr_data._version import __version__
from spr_data.errors import DataLossError, InputError, OutputError, SprDataError
from spr_data.fsio import fsync_path, os_error_message
from spr_data.manifest import MANIFEST_NAME, Manifest
from spr_data.outdir import (
    REJECTS_DIR,
    WORK_DIR,
    claim,
    output_lock,
    prepare_output,
    publish,
    remove_outputs,
    retire_replaced,
    temp_tag,
)
from spr_data.pipeline.executor import Executor, check_shared, default_workers, executor_for
from spr_data.pipeline.sources import (
    REJECT_REASONS,
    InputFile,
    RecordChunk,
    Source,
    SourcePlan,
    encoded_as,
    is_utf8_name,
    path_text,
    plan_sources,
)
from spr_data.reader import RetryPolicy
from spr_data.remote_output import (
    RemoteOutput,
    check_output_location,
    check_work_dir,
    is_remote_output,
)
from spr_data.schema import ORIGIN_TYPE, RAW, Kind, ingest_rejects_schema, rows_schema, text_columns
from spr_data.writer import DEFAULT_SHARD_BYTES, MAX_SHARD_BYTES, ShardWriter

__all__ = ["IngestSummary", "ingest"]

_REASONS = np.array(REJECT_REASONS, dtype=object)


@dataclass
class IngestSummary:
    """What an ingest run produced; ``to_json`` is the CLI's ``--json`` output."""

    out: str | Path
    kind: str
    langs: list[str]
    records: int
    rows: int
    rejects: dict[str, int]
    shards: int
    bytes: int
    input_bytes: int
    seconds: float
    inputs: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "kind": self.kind, "langs": self.langs,
            "records": self.records, "rows": self.rows,
            "rejected": sum(self.rejects.values()), "rejects": self.rejects,
            "shards": self.shards, "bytes": self.bytes, "input_bytes": self.input_bytes,
            "seconds": round(self.seconds, 3),
            "input_mb_per_s": round(self.input_bytes / 1e6 / max(self.seconds, 1e-9), 1),
        }


def ingest(
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    format: str | None = None,
    langs: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    shard_rows: int | None = None,
    shard_bytes: int | None = DEFAULT_SHARD_BYTES,
    overwrite: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    retry: RetryPolicy | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
    work_dir: str | Path | None = None,
    allow_heavy_loss: bool = False,
) -> IngestSummary:
    """Read ``inputs`` and write the dataset directory ``out``.

    ``on_progress(done, total)`` is called with input bytes read (compressed sizes). On any
    error, the files this call wrote are removed and no manifest is left behind. Reads of the
    inputs are retried as ``retry`` says when they fail transiently (a NAS blip). Several
    inputs are parsed in parallel on ``executor``, or ``workers`` local processes (default: all
    cores when the inputs hold 16 MiB or more); the output is the same bytes either way. An
    ``out`` on an object store (``s3://bucket/prefix``) is written in ``work_dir`` (default: a
    directory per URL in the user's cache), then uploaded, manifest last. When one reason
    rejects more than half of the records (a stray tab on a TSV's first line, the wrong
    ``--format``), nothing is written (:class:`DataLossError`) unless ``allow_heavy_loss``.
    """
    started = time.perf_counter()
    location = check_output_location(out)
    check_work_dir(location, work_dir)
    _check_shard_limits(shard_rows, shard_bytes)
    target = (RemoteOutput.of(location, work_dir, retry)
              if is_remote_output(location) else None)
    out = target.run_dir if target is not None else Path(out)
    _check_out_name(out)
    plan = plan_sources(inputs, format=format, langs=langs, columns=columns, keys=keys,
                        retry=retry)
    total_bytes = sum(f.size for s in plan.sources for f in s.files)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if on_progress is not None:
            on_progress(done, total_bytes)

    with ExitStack() as stack:
        if target is not None:  # the run directory is scratch: a run there starts over
            stack.enter_context(target.locked("ingest"))
            target.check(overwrite=overwrite)
        option = "--work-dir" if target is not None else "--out"  # what chose ``out``
        with output_lock(out, command="ingest", option=option):
            prepare_output(out, overwrite=overwrite or target is not None, option=option)
            manifest, lineage, counts, next_id = _write_dataset(
                plan, out, format, columns, keys, shard_rows, shard_bytes, advance,
                workers=workers, executor=executor, allow_heavy_loss=allow_heavy_loss)
        if target is not None:
            target.upload(out)
            target.remove_run_dir()
    inputs_lineage: list[dict[str, Any]] = lineage["inputs"]  # type: ignore[assignment]
    return IngestSummary(
        out=location if target is not None else out, kind=plan.kind, langs=plan.langs,
        records=next_id, rows=manifest.rows,
        rejects=counts, shards=len(manifest.shards), bytes=manifest.bytes,
        input_bytes=total_bytes, seconds=time.perf_counter() - started,
        inputs=inputs_lineage)


def _write_dataset(plan: SourcePlan, out: Path, format: str | None, columns: Sequence[str] | None,
                   keys: Sequence[str] | None, shard_rows: int | None, shard_bytes: int | None,
                   advance: Callable[[int], None], *, workers: int | None,
                   executor: Executor | None, allow_heavy_loss: bool = False,
                   ) -> tuple[Manifest, dict[str, Any], dict[str, int], int]:
    """Write the shards and manifests into ``out`` (locked and prepared); on any error remove
    exactly the files this run wrote, as its work state recorded them."""
    def claim_file(path: Path) -> None:
        claim(out, path.relative_to(out).as_posix())

    schema = rows_schema(plan.kind)
    writers: list[ShardWriter] = []
    lost = _Rejected()
    next_id = 0
    # the shards are written under the work directory and moved into place at the end: a run
    # killed before then leaves no shard where pyarrow's or polars' discovery would read it
    staging = out / WORK_DIR / _STAGING
    try:
        tag = temp_tag(out)  # recorded in the work state before any temp file is made
        (staging / REJECTS_DIR).mkdir(parents=True, exist_ok=True)
        rows = ShardWriter(staging, schema, shard_rows=shard_rows, shard_bytes=shard_bytes,
                           claim=claim_file, tag=tag)
        rejects = ShardWriter(staging / REJECTS_DIR, ingest_rejects_schema(),
                              shard_rows=shard_rows, shard_bytes=shard_bytes, claim=claim_file,
                              rejects=True, tag=tag)
        writers += [rows, rejects]
        claim(out, REJECTS_DIR + "/", f"{REJECTS_DIR}/{MANIFEST_NAME}", MANIFEST_NAME)
        inputs_lineage: list[dict[str, Any]] = []
        for input_index, chunks, source_lineage in _parsed(plan, out, advance, workers,
                                                           executor):
            for chunk in chunks:
                _write_chunk(chunk, input_index, next_id, schema, rows, rejects, lost)
                next_id += len(chunk)
            inputs_lineage.append(source_lineage())
        reject_counts = lost.by_reason()
        if not allow_heavy_loss:
            _check_encoding(plan, lost)
            _check_heavy_loss(plan, reject_counts, lost.first, next_id)
        lineage = {
            "stage": "ingest",
            "tool": "spr-data",
            "version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "parent": None,
            "options": {"format": format, "columns": list(columns) if columns else None,
                        "keys": list(keys) if keys else None, "shard_rows": shard_rows,
                        "shard_bytes": shard_bytes},
            "inputs": inputs_lineage,
        }
        counts = dict(sorted(reject_counts.items()))
        rejected = Manifest(
            kind=plan.kind, role="rejects", langs=plan.langs, schema=rejects.schema,
            shards=rejects.close(), rows_in=next_id, id_bound=next_id, rejects=counts,
            lineage=lineage)
        manifest = Manifest(
            kind=plan.kind, role="rows", langs=plan.langs, schema=schema, shards=rows.close(),
            rows_in=next_id, id_bound=next_id, rejects=counts, rejects_dir=REJECTS_DIR,
            lineage=lineage)
        retire_replaced(out)  # an overwrite's old dataset: readable until this run succeeds
        _move_into_place(out, staging, manifest, rejected)
        publish(out, manifest, rejects=rejected)
        shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    except BaseException as exc:
        for writer in writers:
            writer.abort()
        remove_outputs(out)
        if isinstance(exc, OSError):
            raise OutputError(os_error_message(exc, out)) from exc
        raise
    return manifest, lineage, counts, next_id


#: where ``ingest`` writes its shards until it publishes them (under the work directory)
_STAGING = "ingest-staging"


def _move_into_place(out: Path, staging: Path, manifest: Manifest, rejected: Manifest) -> None:
    """The finished shards from ``staging`` to ``out`` (the rejects' to ``out/_rejects``),
    each claimed first, by rename on the same filesystem; the manifests follow them."""
    moves = [(staging / s.file, s.file) for s in manifest.shards]
    moves += [(staging / REJECTS_DIR / s.file, f"{REJECTS_DIR}/{s.file}") for s in rejected.shards]
    claim(out, *(name for _, name in moves))
    (out / REJECTS_DIR).mkdir(exist_ok=True)
    for source, name in moves:
        os.replace(source, out / name)
    fsync_path(out / REJECTS_DIR)
    fsync_path(out)


def _parsed(plan: SourcePlan, out: Path, advance: Callable[[int], None], workers: int | None,
            executor: Executor | None,
            ) -> Iterator[tuple[int, Iterator[RecordChunk], Callable[[], dict[str, Any]]]]:
    """Each input in order: its index, its record chunks, and (once they are read) its
    lineage. One input, or one worker: read here. Several: parsed by tasks into work files
    (:func:`_parse_input`), read back in input order as each is ready."""
    if not _in_parallel(plan, workers, executor):
        for index, source in enumerate(plan.sources):
            yield index, _checked_chunks(source, advance), source.lineage
        return
    folder = out / WORK_DIR / _PARTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tasks = [_ParseInput(source, str(folder / f"input-{i}")) for i, source in
             enumerate(plan.sources)]
    ready: dict[int, dict[str, Any] | SprDataError] = {}
    following = 0
    with executor_for(executor, workers) as run_on:
        check_shared(out, run_on, "--out (or --work-dir)")
        for index, result in run_on.map(_parse_input, tasks):
            ready[index] = result
            advance(sum(f.size for f in plan.sources[index].files))
            while following in ready:
                lineage = ready.pop(following)
                if isinstance(lineage, SprDataError):  # the first bad input, in input order
                    raise lineage
                yield following, _read_back(tasks[following].path), functools.partial(
                    dict, lineage)
                for suffix in (".arrow", ".raw.arrow"):  # written: the work file can go
                    Path(tasks[following].path + suffix).unlink(missing_ok=True)
                following += 1


_PARTS_DIR = "ingest"
#: inputs smaller than this in all are read here by default: starting a worker process takes
#: about as long as parsing this much (measured: 1–2 s, JSONL at 3–10 MB/s of gzip here)
_PARALLEL_FROM_BYTES = 16 << 20


def _in_parallel(plan: SourcePlan, workers: int | None, executor: Executor | None) -> bool:
    """Whether to parse the inputs in tasks: for several inputs on an executor or on the
    workers asked for; by default, when there is enough to parse to pay for the workers."""
    if len(plan.sources) < 2:
        return False
    if executor is not None:
        return True
    if workers is None:
        total = sum(f.size for s in plan.sources for f in s.files)
        return total >= _PARALLEL_FROM_BYTES and default_workers() > 1
    return workers > 1


def _checked_chunks(source: Source, advance: Callable[[int], None] | None,
                    ) -> Iterator[RecordChunk]:
    """The source's chunks; an input whose every record is rejected is refused at its end."""
    tally = _Tally()
    for chunk in source.chunks(advance):
        tally.add(chunk)
        yield chunk
    tally.check(source)


@dataclass
class _ParseInput:
    """A task: parse ``source`` into ``path``.arrow (per record chunk: the text fields, the
    reason code, the line) and ``path``.raw.arrow (the raw bytes of its rejected records)."""

    source: Source
    path: str


def _part_schemas(kind: Kind) -> tuple[pa.Schema, pa.Schema]:
    fields = [pa.field(f"text{i}", pa.string()) for i in range(len(text_columns(kind)))]
    return (pa.schema([*fields, pa.field("code", pa.int8()), pa.field("line", pa.uint64())]),
            pa.schema([pa.field(RAW, pa.binary())]))


def _parse_input(task: _ParseInput) -> dict[str, Any] | SprDataError:
    """Run in a worker; returns the source's lineage (its hashes are of the bytes read here),
    or the error that stopped it: raised by the caller in input order, so that of two bad
    inputs the first is the one reported, however the tasks finish.

    Written under temp names and renamed, so a task run twice (Ray retries) writes the same;
    the work files go with the run's work directory whatever happens."""
    try:
        return _parse_into(task)
    except SprDataError as exc:
        return exc


def _parse_into(task: _ParseInput) -> dict[str, Any]:
    chunk_schema, raw_schema = _part_schemas(task.source.kind)
    out = Path(task.path).parent.parent.parent
    temp = f"{task.path}.{os.getpid()}-{temp_tag(out)}.tmp"
    with pa.OSFile(temp + ".arrow", "wb") as chunk_file, \
            pa.OSFile(temp + ".raw.arrow", "wb") as raw_file, \
            pa.ipc.new_file(chunk_file, chunk_schema) as chunks, \
            pa.ipc.new_file(raw_file, raw_schema) as raws:
        for chunk in _checked_chunks(task.source, None):
            n = len(chunk)
            lines = np.arange(chunk.first_line, chunk.first_line + n, dtype=np.uint64)
            chunks.write_batch(pa.RecordBatch.from_arrays(
                [*chunk.fields, pa.array(chunk.codes.astype(np.int8)), pa.array(lines)],
                schema=chunk_schema))
            raws.write_batch(pa.RecordBatch.from_arrays([chunk.raw(chunk.codes >= 0)],
                                                        schema=raw_schema))
    os.replace(temp + ".arrow", task.path + ".arrow")
    os.replace(temp + ".raw.arrow", task.path + ".raw.arrow")
    return task.source.lineage()


def _read_back(path: str) -> Iterator[RecordChunk]:
    """The chunks :func:`_parse_input` wrote, as the source gave them (batch for batch)."""
    with pa.memory_map(path + ".arrow") as chunk_file, \
            pa.memory_map(path + ".raw.arrow") as raw_file:
        chunks = pa.ipc.open_file(chunk_file)
        raws = pa.ipc.open_file(raw_file)
        for i in range(chunks.num_record_batches):
            batch = chunks.get_batch(i)
            raw = raws.get_batch(i).column(0)
            codes = batch.column(batch.num_columns - 2).to_numpy().astype(np.int8)
            lines = batch.column(batch.num_columns - 1)
            first_line = int(lines[0].as_py()) if len(lines) else 0
            bad = codes >= 0

            def raw_of(mask: np.ndarray, raw: pa.Array = raw, bad: np.ndarray = bad
                       ) -> pa.Array:
                return raw.filter(pa.array(mask[bad]))

            yield RecordChunk(first_line, codes, batch.columns[:-2], raw_of)


@dataclass
class _Tally:
    """Records of one input that became rows, and its first reject: an input whose every
    record is rejected is refused (0 rows from a file means the options do not fit it)."""

    records: int = 0
    kept: int = 0
    first: tuple[int, str, bytes] | None = None  # line, reason, raw bytes

    def add(self, chunk: RecordChunk) -> None:
        bad = chunk.codes >= 0
        self.records += len(chunk)
        self.kept += len(chunk) - int(bad.sum())
        if self.first is None and bad.any():
            i = int(np.argmax(bad))
            only = np.zeros(len(chunk), dtype=bool)
            only[i] = True
            self.first = (chunk.first_line + i, str(_REASONS[chunk.codes[i]]),
                          bytes(chunk.raw(only)[0].as_py()))

    def check(self, source: Source) -> None:
        if self.kept or self.first is None:
            return
        line, reason, raw = self.first
        file, snippet = _reject_in(source, reason, raw)
        raise DataLossError(
            f"{file.where}: all {self.records:,} records were rejected, "
            f"so no dataset was written; the first, line {line}, as {reason}: {snippet!r}"
            + _read_with(source) + _next_step(reason, file))


def _reject_in(source: Source, reason: str, raw: bytes) -> tuple[InputFile, str]:
    """The file a reject's record is at fault in, and the start of its text: of a Moses pair
    (whose record is the source line, a newline, the target line), the side that is not
    UTF-8 or holds the NUL byte, not always the source."""
    file, text = source.files[0], raw
    if len(source.files) == 2 and reason in ("invalid_utf8", "nul_byte"):
        sides = raw.split(b"\n", 1)
        if len(sides) == 2:
            def bad(side: bytes) -> bool:
                if reason == "nul_byte":
                    return b"\0" in side
                try:
                    side.decode("utf-8")
                except UnicodeDecodeError:
                    return True
                return False
            if not bad(sides[0]) and bad(sides[1]):
                file, text = source.files[1], sides[1]
            elif bad(sides[0]):
                text = sides[0]
    return file, text[:80].decode("utf-8", "replace")


def _next_step(reason: str, file: InputFile) -> str:
    """What to change for a reason that rejected an input's records: for text that is not
    UTF-8, what the file's first bytes say it is (UTF-16, a compressed file misnamed)."""
    what = encoded_as(file) if reason == "invalid_utf8" else None
    if what is not None:
        return f"; {file.path.name} is {what}"
    return _NEXT_STEP.get(reason, "")




def _read_with(source: Source) -> str:
    """`` (read with keys src,tgt)``: the options an input was read with, for an error."""
    options = ", ".join(f"{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
                        for k, v in source.options().items() if v is not None)
    return f" (read with {options})" if options else ""


#: what to change when every record of an input was rejected for this reason
_NEXT_STEP = {
    "missing_key": "; name the keys that hold the text with --keys",
    "not_a_string": "; name the keys that hold the text with --keys",
    "tsv_field_count": "; choose the text columns with --columns, or check --format",
    "invalid_json": "; is it JSONL? pass --format for another format",
    "invalid_utf8": "; the file is not UTF-8 text: convert it first (e.g. iconv)",
    "empty_field": "; one side is empty in every record: check --columns / --keys",
    "null_field": "; the chosen columns are null: choose others with --columns",
}


def _check_shard_limits(shard_rows: int | None, shard_bytes: int | None) -> None:
    """Refuse shard sizes the writer cannot honour, before anything is read or written, rather
    than failing inside the writer or silently capping a size the user asked for."""
    if shard_rows is not None and shard_rows < 1:
        raise InputError(f"--shard-rows {shard_rows} is below 1; give a number of rows per "
                         "shard, or leave it out")
    if shard_bytes is None:
        return
    if shard_bytes < 1:
        raise InputError(f"--shard-bytes comes to {shard_bytes} bytes; give a size of at least "
                         "1 byte and at most 1G, such as 64M (K, M and G are powers of 1024)")
    if shard_bytes > MAX_SHARD_BYTES:
        raise InputError(f"--shard-bytes comes to {shard_bytes:,} bytes, above the maximum of "
                         f"1G ({MAX_SHARD_BYTES:,} bytes: an Arrow text column holds at most "
                         "2 GiB); give at most 1G")


def _check_out_name(out: Path) -> None:
    """Refuse an output name that is not UTF-8: Arrow opens files by UTF-8 name only, so no
    spr-data command could write or read the dataset's shards there."""
    if not is_utf8_name(out):
        raise InputError(f"--out {path_text(out)}: the name holds bytes that are not UTF-8, "
                         "and Arrow can only open UTF-8 file names; choose another name")


#: one reason rejecting more than this share of all records stops ingest (as a share of
#: rows does ``clean``, recipe key ``max_reason_share``): the options do not fit the data
HEAVY_LOSS_SHARE = 0.5
#: … in inputs of at least this many records (a handful of lines is read whole by a person)
HEAVY_LOSS_MIN_RECORDS = 100


def _check_heavy_loss(plan: SourcePlan, counts: Counter[str],
                      first: dict[tuple[int, str], tuple[int, bytes]], records: int) -> None:
    """Refuse a dataset most of whose records one reason rejected, naming the reason, its
    share and its first record, with what to change (the inputs whose every record was
    rejected are refused earlier, by :class:`_Tally`)."""
    if not counts or records < HEAVY_LOSS_MIN_RECORDS:
        return
    reason, n = max(counts.items(), key=lambda item: (item[1], item[0]))
    if n <= HEAVY_LOSS_SHARE * records:
        return
    input_index = min(i for i, r in first if r == reason)
    line, raw = first[input_index, reason]
    file, snippet = _reject_in(plan.sources[input_index], reason, raw)
    raise DataLossError(
        f"{reason} rejects {n:,} of the {records:,} records ({n / records:.0%}), so no dataset "
        f"was written; the first, {file.where} line {line}: {snippet!r}"
        + _read_with(plan.sources[input_index]) + _next_step(reason, file)
        + "; pass allow_heavy_loss=True to write it anyway")


@dataclass
class _Rejected:
    """What ingest rejected, per input: each reason's count and first record (line, raw
    bytes), and per file of an input (a Moses pair's two apart) its lines that are not
    UTF-8, with the first of them."""

    counts: Counter[tuple[int, str]] = field(default_factory=Counter)
    first: dict[tuple[int, str], tuple[int, bytes]] = field(default_factory=dict)
    not_utf8: Counter[tuple[int, int]] = field(default_factory=Counter)
    first_not_utf8: dict[tuple[int, int], tuple[int, bytes]] = field(default_factory=dict)
    records: Counter[int] = field(default_factory=Counter)

    def add(self, input_index: int, lines: np.ndarray, reasons: np.ndarray,
            raw: pa.Array) -> None:
        """The rejected records of a chunk: their 1-based ``lines``, reasons and raw bytes."""
        self.counts.update((input_index, reason) for reason in reasons.tolist())
        for reason in set(reasons.tolist()):  # each reason's first record in this input
            if (input_index, reason) not in self.first:
                at = int(np.argmax(reasons == reason))
                self.first[input_index, reason] = (int(lines[at]), bytes(raw[at].as_py()))
        for at in np.flatnonzero(reasons == "invalid_utf8").tolist():
            # a Moses record is the source line, a line feed, the target line (no other
            # record holds a line feed): each side is judged apart
            for side, part in enumerate(bytes(raw[at].as_py()).split(b"\n", 1)):
                try:
                    part.decode("utf-8")
                except UnicodeDecodeError:
                    self.not_utf8[input_index, side] += 1
                    self.first_not_utf8.setdefault((input_index, side), (int(lines[at]), part))

    def by_reason(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (_, reason), n in self.counts.items():
            out[reason] += n
        return out


#: an input file more than this share of whose lines are not UTF-8 (two lines at least) is
#: in another encoding: dropping them keeps a biased sample (the lines without an accented
#: letter), so ingest refuses it. No file of shared/corpora holds one such line.
ENCODING_SHARE = 0.01
#: how to read a compressed file as text and write it again, for the advice to convert it
_RECOMPRESS = {"gzip": ("zcat", "gzip"), "xz": ("xzcat", "xz"), "bz2": ("bzcat", "bzip2"),
               "zstd": ("zstdcat", "zstd")}


def _check_encoding(plan: SourcePlan, rejected: _Rejected) -> None:
    """Refuse an input file whose lines are not UTF-8 beyond a stray one, naming the file,
    the share, the first such line as it reads in cp1252, and how to convert the file."""
    for (index, side), n in sorted(rejected.not_utf8.items()):
        records = rejected.records[index]
        if n < 2 or n <= ENCODING_SHARE * records:
            continue
        file = plan.sources[index].files[side]
        line, text = rejected.first_not_utf8[index, side]
        what = encoded_as(file)
        name = file.path.name
        if file.compression in _RECOMPRESS:
            cat, pack = _RECOMPRESS[file.compression]
            convert = f"{cat} {name} | iconv -f cp1252 -t utf-8 | {pack} > utf8-{name}"
        else:
            convert = f"iconv -f cp1252 -t utf-8 {name} > utf8-{name}"
        raise DataLossError(
            f"{file.where}: {n:,} of its {records:,} lines are not UTF-8 "
            f"({n / records:.1%}), so no dataset was written; the first, line {line}, "
            f"reads as cp1252 {text[:80].decode('cp1252', 'replace')!r}: "
            + (f"{name} is {what}" if what else
               "the file is in another encoding (such as cp1252 or Latin-1), and dropping "
               "those lines would keep only the lines without an accented letter; convert "
               f"it first ({convert})")
            + "; pass allow_heavy_loss=True to write it without them")


def _write_chunk(chunk: RecordChunk, input_index: int, first_id: int, schema: pa.Schema,
                 rows: ShardWriter, rejects: ShardWriter, rejected: _Rejected) -> None:
    n = len(chunk)
    rejected.records[input_index] += n
    ids = pa.array(np.arange(first_id, first_id + n, dtype=np.uint64))
    origin = pa.StructArray.from_arrays(
        [pa.array(np.full(n, input_index, dtype=np.uint32)),
         pa.array(np.arange(chunk.first_line, chunk.first_line + n, dtype=np.uint64))],
        fields=list(ORIGIN_TYPE),
    )
    bad = chunk.codes >= 0
    batch = pa.RecordBatch.from_arrays([ids, *chunk.fields, origin], schema=schema)
    if not bad.any():
        rows.write(batch)
        return
    rows.write(batch.filter(pa.array(~bad)))
    reasons = _REASONS[chunk.codes[bad]]
    raw = chunk.raw(bad)
    rejected.add(input_index, chunk.first_line + np.flatnonzero(bad), reasons, raw)
    rejects.write(pa.RecordBatch.from_arrays(
        [ids.filter(pa.array(bad)), origin.filter(pa.array(bad)),
         pa.array(reasons, pa.string()), raw],
        schema=rejects.schema))
