"""The shard runner: what every command that maps a dataset's shards (``clean``, ``tokenize``)
shares, written once.

A command describes its steps — which task runs over which units, what it writes — and the
runner owns the rest:

* the input: opened, its manifest cross-checked against the shards' own footers, networked
  shards copied (verified) to local disk for the workers;
* the output: locked for the whole run, made ready (a dataset replaced only on overwrite, never
  a file the run did not write), the run's identity recorded so that a rerun resumes only the
  same run;
* the units of work: slices of the input's rows whose size is a function of the input's size
  alone, so the output is the same bytes for any number of workers or any executor; unit ``i``
  becomes output shard ``i`` (and reject shard ``i``);
* reading a unit's rows (:func:`read_unit`: the first unit of each shard checks the shard's
  hash), the one resume rule (:mod:`spr_data.pipeline.units`), progress;
* accounting: the ids of each unit's output and reject shards are exactly its input ids, none
  twice, checked from the files before anything is published;
* lineage and the manifests, published last; the work state removed once they are;
* an output on an object store (``s3://…``): the same run in a local run directory, published
  by upload, manifest last (:mod:`spr_data.remote_output`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from spr_data._version import __version__
from spr_data.card import write_card
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import DatasetError, InputError, SprDataError
from spr_data.manifest import Manifest, ShardInfo, write_manifest
from spr_data.outdir import (
    REJECTS_DIR,
    WORK_DIR,
    check_run,
    claim,
    output_lock,
    prepare_output,
    publish,
    retire_replaced,
)
from spr_data.pipeline.executor import Executor, check_shared, executor_for
from spr_data.pipeline.units import unit_rows
from spr_data.preload import pyarrow_first_use_in_background
from spr_data.reader import ReaderOptions
from spr_data.remote_output import (
    RemoteOutput,
    check_output_location,
    check_work_dir,
    is_remote_output,
    output_location,
)
from spr_data.schema import ID
from spr_data.verify import check_shard_hash, check_shards
from spr_data.writer import shard_name

__all__ = ["ShardRun", "Unit", "open_input", "read_unit"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Unit:
    """One unit of work: rows ``offset .. offset+length`` of the local input shard ``shard``
    (whose manifest hash is ``shard_hash``); unit ``index`` becomes output shard ``index``."""

    index: int
    shard: str
    offset: int
    length: int
    shard_hash: str = ""


def read_unit(unit: Unit, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of ``unit`` (memory-mapped). The first unit of each shard checks the whole
    shard against its manifest hash, so a corrupt shard fails the run instead of passing the
    corruption on."""
    if unit.offset == 0:
        check_shard_hash(unit.shard, unit.shard_hash)
    with pa.memory_map(unit.shard) as source:
        table = pa.ipc.open_file(source).read_all()
    if columns is not None:
        table = table.select(list(columns))
    return table.slice(unit.offset, unit.length)


def open_input(dataset: str | Path, out: str | Path, *, command: str,
               reader: ReaderOptions | None) -> Dataset:
    """The dataset a shard command reads: a rows dataset with rows, its manifest checked
    against the shards' footers (local ones: a networked dataset's are checked once copied),
    and not the output itself."""
    location = check_output_location(out)
    source = open_dataset(str(dataset), reader=reader)
    source.require_rows(dataset, command)
    if not source.remote:  # the manifest against the shards' own footers, before any plan
        check_shards(source.shard_paths, source.manifest)
    if is_remote_output(location):
        same = location.split("?")[0].rstrip("/") == str(dataset).split("?")[0].rstrip("/")
    else:
        same = Path(out).resolve() == Path(dataset).resolve()
        inside = any(Path(f(dataset)) in Path(f(out)).parents
                     for f in (os.path.realpath, os.path.abspath))  # a link in --out too
        if not source.remote and inside:
            raise InputError(f"--out {out} is inside the input dataset {dataset}; choose a "
                             "directory outside it (readers that list the input's directory "
                             "would take the output's shards for its rows)")
    if same:
        raise InputError("--out must differ from the input dataset")
    if not len(source):
        rejected = source.manifest.rows_in
        raise DatasetError(f"{dataset} has no rows to {command}"
                           + ((f" (all {rejected:,} records that entered it were rejected; "
                               "see its rejects)" if rejected else " (its inputs held no records)")
                              if command == "clean" else ""))
    return source


class ShardRun:
    """One run of a shard command from ``source`` into ``out``; use it as a context manager.

    Entering takes the output lock, prepares ``out``, checks or records the run's
    ``identity`` (a dict of what decides the output: input digest, options, version) and
    plans the units; leaving releases the executor (if the run made it) and the lock. The
    work state under ``out/.work`` outlives a failed run, which resumes from it.

    An ``out`` on an object store (``s3://bucket/prefix``) is locked and checked there as
    well; the run works in ``work_dir`` (default: a directory per URL in the user's cache)
    and :meth:`publish` uploads. ``out`` is then that run directory and ``location`` the URL.
    """

    def __init__(self, command: str, source: Dataset, out: str | Path, *,
                 identity: dict[str, Any], overwrite: bool = False,
                 executor: Executor | None = None, workers: int | None = None,
                 on_progress: Callable[[str, int, int], None] | None = None,
                 work_dir: str | Path | None = None) -> None:
        self.command = command
        self.source = source
        #: the output as the user named it: a directory, or a URL
        self.location = output_location(out)
        check_work_dir(self.location, work_dir)
        self.target = (RemoteOutput.of(self.location, work_dir)
                       if is_remote_output(self.location) else None)
        #: the directory the run writes: the output itself, or a remote output's run directory
        self.out = self.target.run_dir if self.target is not None else Path(out)
        self._uploaded = False
        self.work = self.out / WORK_DIR
        #: where tasks write the output's shards (``shard_name`` paths, rejects under
        #: ``_rejects/``): inside the work directory until the run publishes, so that a
        #: failed, refused or killed run leaves no shard where a reader would take it for
        #: the dataset's
        self.staging = self.work / "out"
        self.identity = identity
        self.overwrite = overwrite
        self.on_progress = on_progress
        self.units: list[Unit] = []
        self._executor_arg = executor
        self._workers_arg = workers
        self._stack = ExitStack()
        self._executor: Executor | None = None

    # -- the run's life ---------------------------------------------------------------------

    def __enter__(self) -> ShardRun:
        with ExitStack() as stack:
            if self.target is not None:
                stack.enter_context(self.target.locked(self.command))
                self.target.check(overwrite=self.overwrite)
            option = "--work-dir" if self.target is not None else "--out"  # chose self.out
            stack.enter_context(output_lock(self.out, command=self.command, option=option))
            prepare_output(self.out, overwrite=self.overwrite, resume=True, option=option)
            check_run(self.work, self.identity, overwrite=self.overwrite)
            local_paths = self.source.local_shard_paths(self.work / "shards")
            check_shards(local_paths, self.source.manifest)
            size = unit_rows(len(self.source))
            spans = [(path, start, min(size, info.rows - start), info.hash)
                     for path, info in zip(local_paths, self.source.manifest.shards,
                                           strict=True)
                     for start in range(0, info.rows, size)]
            self.units = [Unit(i, str(path), start, length, digest)
                          for i, (path, start, length, digest) in enumerate(spans)]
            (self.staging / REJECTS_DIR).mkdir(parents=True, exist_ok=True)
            self._executor = stack.enter_context(
                executor_for(self._executor_arg, self._workers_arg))
            # this process waits while the first step's workers start: meanwhile, what pyarrow
            # would load on first use in a later step of this process
            pyarrow_first_use_in_background()
            check_shared(self.out, self._executor,
                         "--work-dir" if self.target is not None else "--out")
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        self._stack.__exit__(exc_type, exc, tb)
        if self.target is not None and self._uploaded:
            self.target.remove_run_dir()

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            raise SprDataError("the run has not started: use it as a context manager")
        return self._executor

    @property
    def destination(self) -> str | Path:
        """Where the output is published: the directory, or the remote output's URL."""
        return self.location if self.target is not None else self.out

    @property
    def rows(self) -> int:
        return len(self.source)

    def claim(self, *names: str) -> None:
        """Record that the run is about to write ``names`` (relative to ``out``): only what a
        run recorded is ever removed."""
        claim(self.out, *names)

    def output_names(self, *, rejects: bool = False) -> list[str]:
        """The output (and reject) shard names of the units, relative to ``out``."""
        names = [shard_name(u.index) for u in self.units]
        if rejects:
            names += [f"{REJECTS_DIR}/{shard_name(u.index, rejects=True)}" for u in self.units]
        return names

    def map(self, step: str, fn: Callable[[T], R], tasks: Sequence[T],
            rows: Callable[[T], int] | None = None) -> Iterator[tuple[int, R]]:
        """Run ``fn`` over ``tasks`` on the executor, the largest first, yielding ``(task
        index, result)`` as each finishes and reporting ``on_progress(step, rows done, rows in
        all)`` (``rows(task)``: the rows a task stands for; by default a unit's)."""
        def count(task: Any) -> int:
            return rows(task) if rows is not None else int(task.unit.length)

        sizes = [count(t) for t in tasks]
        total = sum(sizes)
        done = 0
        # the largest first: a large task left for last keeps one worker busy while the
        # others idle (in file order a shard's short last unit ran midway and a whole unit
        # last: one worker idle 0.56-0.62 s at the end of a 7 s score step)
        order = sorted(range(len(tasks)), key=lambda k: -sizes[k])
        with self._input_replaced_is_said():
            for j, result in self.executor.map(fn, [tasks[k] for k in order]):
                i = order[j]
                done += sizes[i]
                if self.on_progress is not None:
                    self.on_progress(step, done, total)
                yield i, result

    @contextmanager
    def _input_replaced_is_said(self) -> Iterator[None]:
        """A shard that no longer matches its hash, or ids that no longer add up, because the
        input was replaced while the run read it (an ``ingest --overwrite`` into it) is said
        as that, not as a corrupt shard that ``verify`` then finds fine (a fault trial)."""
        try:
            yield
        except SprDataError:
            self.source.check_not_replaced()
            raise

    # -- the end ----------------------------------------------------------------------------

    def check_accounting(self, kept: Sequence[ShardInfo],
                         rejected: Sequence[ShardInfo] | None = None) -> None:
        """Every unit's input ids are exactly the ids of its output shard plus its reject
        shard, none twice: read from the written files, so nothing the tasks claimed is
        trusted. Raise before anything is published otherwise."""
        with self._input_replaced_is_said():
            self._check_accounting(kept, rejected)

    def _check_accounting(self, kept: Sequence[ShardInfo],
                          rejected: Sequence[ShardInfo] | None) -> None:
        rows_out = sum(s.rows for s in kept) + sum(s.rows for s in rejected or ())
        if rows_out != self.rows:
            raise SprDataError(f"accounting failed: {self.rows} rows in, "
                               f"{sum(s.rows for s in kept)} kept + "
                               f"{sum(s.rows for s in rejected or ())} rejected; the output is "
                               "not written")
        bound = self.source.manifest.id_bound
        spans: list[tuple[int, int]] = []  # each unit's lowest and highest id
        for i, unit in enumerate(self.units):
            ids_in = _ids(Path(unit.shard))[unit.offset:unit.offset + unit.length]
            parts = [_ids(self.staging / kept[i].file)]
            if rejected is not None:
                parts.append(_ids(self.staging / REJECTS_DIR / rejected[i].file))
            ids_out = np.sort(np.concatenate(parts))
            if ids_out.size != ids_in.size or not np.array_equal(ids_out, np.sort(ids_in)):
                raise SprDataError(f"accounting failed for unit {unit.index}: its "
                                   f"{ids_in.size} input ids are not the ids of its "
                                   f"{ids_out.size} output rows; the output is not written")
            if ids_out.size:
                _check_ids(ids_out, bound, unit.shard)
                spans.append((int(ids_out[0]), int(ids_out[-1])))
        spans.sort()
        if any(a[1] >= b[0] for a, b in itertools.pairwise(spans)):  # units' ids interleave
            every = np.sort(np.concatenate([_ids(Path(u.shard))[u.offset:u.offset + u.length]
                                            for u in self.units]))
            _check_ids(every, bound, str(self.source.path))

    def lineage(self, **details: Any) -> dict[str, Any]:
        """The lineage record of the output: this stage, its parent, and ``details``. A local
        parent of a local output is also named relative to it, so that ``audit`` still finds
        it when the tree that holds both is moved or copied."""
        parent = self.source.parent_record()
        if self.target is None and not self.source.remote:
            parent["relative_path"] = os.path.relpath(self.source.path.resolve(),
                                                      self.out.resolve())
        return {
            "stage": self.command, "tool": "spr-data", "version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "parent": parent, **details,
        }

    def publish(self, kept: Sequence[ShardInfo], *, lineage: dict[str, Any],
                rejected: Sequence[ShardInfo] | None = None,
                rejects: dict[str, int] | None = None, extras: Sequence[str] = ()) -> None:
        """Check the accounting; remove the dataset an ``overwrite`` replaces (it stayed whole
        and readable until now); move the staged shards into place, then publish the output's
        manifests (the rejects' first, the dataset's last) and remove the work state.
        ``extras``: files the command wrote into the staging directory that belong to the
        dataset (its report), moved in with the shards; a remote output uploads them with it."""
        self.check_accounting(kept, rejected)
        schema = _schema_of(self.staging, kept)
        manifest = self.source.manifest
        common: dict[str, Any] = dict(kind=manifest.kind, langs=self.source.langs,
                                      rows_in=self.rows, id_bound=manifest.id_bound,
                                      lineage=lineage)
        dataset = Manifest(role="rows", schema=schema, shards=list(kept), **common)
        reject_manifest = None
        if rejected is not None:
            counts = rejects or {}
            dataset = replace(dataset, rejects=counts, rejects_dir=REJECTS_DIR)
            reject_manifest = Manifest(role="rejects",
                                       schema=_schema_of(self.staging / REJECTS_DIR, rejected),
                                       shards=list(rejected), rejects=counts, **common)
        names = [s.file for s in kept] + [f"{REJECTS_DIR}/{s.file}" for s in rejected or ()]
        if self.target is not None:
            self._upload(self.target, names, list(extras), dataset, reject_manifest)
            return
        retire_replaced(self.out)
        if rejected is not None:
            (self.out / REJECTS_DIR).mkdir(exist_ok=True)
        for name in [*names, *extras]:
            (self.staging / name).replace(self.out / name)
        publish(self.out, dataset, rejects=reject_manifest)
        shutil.rmtree(self.work, ignore_errors=True)

    def _upload(self, target: RemoteOutput, names: list[str], extras: list[str],
                dataset: Manifest, rejects: Manifest | None) -> None:
        """Publish to the remote output: the finished dataset is put together in the work
        directory (hard links to the staged shards, which stay where a rerun's resume check
        finds them: a killed upload resumes with the upload) and uploaded, manifest last."""
        final = self.work / "publish"
        shutil.rmtree(final, ignore_errors=True)
        (final / REJECTS_DIR).mkdir(parents=True)
        for name in names:
            _link(self.staging / name, final / name)
        for name in extras:
            _link(self.staging / name, final / name)
        if rejects is not None:
            write_card(final / REJECTS_DIR, rejects)
            write_manifest(final / REJECTS_DIR, rejects)
        write_card(final, dataset, rejects)
        write_manifest(final, dataset)
        target.upload(final)
        self._uploaded = True


def _link(source: Path, target: Path) -> None:
    """``target`` as a second name of ``source`` (a copy where links cannot be made)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _check_ids(ids: np.ndarray, bound: int, where: str) -> None:
    """Sorted row ids, each once and below the dataset's ``id_bound``: a shard rewritten with
    a repeated or foreign id, its hash made to match, would otherwise pass through as a
    row seen twice per epoch."""
    repeated = np.flatnonzero(ids[1:] == ids[:-1])
    if repeated.size or ids[0] < 0 or ids[-1] >= bound:
        what = (f"row id {ids[repeated[0]]} appears more than once" if repeated.size
                else f"row id {ids[-1] if ids[-1] >= bound else ids[0]} is outside "
                f"0..{bound - 1}")
        raise DatasetError(f"{where}: {what}; the dataset is damaged (spr-data verify names "
                           "its shards) and the output is not written")


def _ids(path: Path) -> np.ndarray:
    with pa.memory_map(str(path)) as source:
        return np.asarray(pa.ipc.open_file(source).read_all().column(ID).to_numpy())


def _schema_of(directory: Path, shards: Sequence[ShardInfo]) -> pa.Schema:
    if not shards:
        raise SprDataError(f"no shards were written to {directory}")
    with pa.memory_map(str(directory / shards[0].file)) as source:
        return pa.ipc.open_file(source).schema
