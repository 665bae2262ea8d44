"""PyTorch iteration over an spr-data dataset: every row once per epoch, resumable.

``SprIterableDataset`` yields whole batches in the epoch order of :mod:`spr_data.pipeline.order`
(a pure function of the seed and epoch), dealt to ranks and DataLoader workers round-robin, so
every rank yields the same number of batches and the order does not depend on the number of
ranks or workers. Each batch carries the row ids it holds. Use it with
``DataLoader(ds, batch_size=None, num_workers=K)``. Needs the ``torch`` extra.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from spr_data.arrays import unique
from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import InputError
from spr_data.pipeline.order import (
    DEFAULT_WINDOW,
    EpochPlan,
    TokenPlan,
    epoch_order,
    plan,
    token_plan,
)
from spr_data.pipeline.tokenize import id_column, row_sizes
from spr_data.reader import ReaderOptions
from spr_data.schema import text_columns
from spr_data.tokenizers import Tokenizer, load_tokenizer

__all__ = ["CoverageMonitor", "SprIterableDataset", "SprMapDataset", "pad", "to_device"]


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class SprIterableDataset(IterableDataset[dict[str, Any]]):
    """Whole batches of an epoch, for ``DataLoader(ds, batch_size=None, num_workers=K)``.

    A batch is ``{"ids": LongTensor[B], "batch": int, ...}``: for each token-id column
    ``c_ids`` (from ``spr-data tokenize``, or made on the fly from text with ``tokenizer``) a
    padded ``LongTensor[B, L]`` ``c_ids`` and a bool ``c_mask``; text columns asked for in
    ``columns`` come as lists of strings. Batches are ``batch_size`` rows, or with
    ``max_tokens`` at most that many padded tokens (rows × longest row; length-bucketed inside
    windows of ``window`` positions; ``batch_size`` then caps the rows). ``block=N`` reads
    runs of N consecutive rows (shuffled inside and between blocks) for storage where random
    reads are slow.

    ``reader`` reads a dataset on a network filesystem or URL (retries, a local cache:
    :class:`~spr_data.reader.ReaderOptions`); each worker opens the dataset with it.

    A batch reads only the columns it holds (``id``, the token ids, ``columns``), padded with
    numpy straight from the memory-mapped shards; in a DataLoader worker its tensors are views
    of one buffer, so that it crosses to the main process as one shared-memory segment.

    ``world_size``/``rank`` default to ``torch.distributed``'s (or 1/0). ``state_dict()``
    (what torchdata's ``StatefulDataLoader`` calls, in each worker) or
    ``state_dict(batches_done)`` (from a training loop that consumed that many batches of
    this rank's epoch), then ``load_state_dict`` in a new run, continue with exactly the
    batches an uninterrupted run would have produced.
    """

    def __init__(self, path: str | Path, *, batch_size: int | None = None,
                 max_tokens: int | None = None, seed: int = 0,
                 columns: list[str] | None = None, world_size: int | None = None,
                 rank: int | None = None, drop_remainder: bool = True,
                 tokenizer: str | None = None, pad_id: int = 0,
                 window: int = DEFAULT_WINDOW, block: int | None = None,
                 reader: ReaderOptions | None = None) -> None:
        super().__init__()
        if batch_size is None and max_tokens is None:
            raise InputError("give batch_size (rows per batch) or max_tokens (a token budget)")
        batch_size = _count("batch_size", batch_size)
        max_tokens = _count("max_tokens", max_tokens)
        window = _whole("window", window)
        block = _count("block", block, least=2, hint="; leave it out for the plain shuffle")
        self.path = str(path)
        self.reader = reader
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.window = window
        self.block = block
        self.seed = seed
        self.drop_remainder = drop_remainder
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        default_world, default_rank = _world()
        self.world_size = world_size if world_size is not None else default_world
        self.rank = rank if rank is not None else default_rank
        # a rank (and maybe a world) taken from a process group not started yet: checked again
        # when read (world_size=2 alone made every process rank 0)
        self._world_unknown = rank is None and default_world == 1
        self._said_empty = False
        if not 0 <= self.rank < self.world_size:
            raise InputError(f"rank {self.rank} is outside a world of {self.world_size}")
        dataset = open_dataset(self.path, reader=reader)
        dataset.require_rows(self.path, "train on")
        names = [f.name for f in dataset.schema]
        texts = list(text_columns(dataset.kind))  # type: ignore[arg-type]
        self.token_columns = [id_column(c) for c in texts if id_column(c) in names] \
            if tokenizer is None else [id_column(c) for c in texts]
        if columns is None:
            columns = [] if self.token_columns else texts
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise InputError(f"{self.path} has no column {unknown[0]!r} (it has "
                             f"{', '.join(names)})")
        padded = [c for c in columns if c in self.token_columns]
        if padded:
            raise InputError(f"{padded[0]} comes padded in every batch (with its mask); "
                             "columns= is for other columns, as lists")
        if not 0 <= seed < 1 << 64:
            raise InputError(f"seed {seed} is outside 0 .. 2**64 - 1 (it would wrap around)")
        self.columns = columns
        if max_tokens is not None and tokenizer is not None:
            stored = [id_column(c) for c in texts if id_column(c) in names]
            raise InputError(
                "max_tokens sizes rows by their token ids before the epoch starts, and "
                "tokenizer= makes them only batch by batch: "
                + (f"drop tokenizer= to use the token ids this dataset holds ({', '.join(stored)})"
                   if stored else "run `spr-data tokenize` on the dataset first, or use "
                   "batch_size"))
        if max_tokens is not None and not self.token_columns:
            raise InputError("max_tokens needs token-id columns to size rows: run "
                             "`spr-data tokenize` on the dataset first")
        self.rows = len(dataset)
        self.manifest_digest = dataset.manifest_digest
        self.epoch = 0
        self._start_batch = 0
        self._next_batch = 0
        self._worker_next: int | None = None  # a worker's own position (StatefulDataLoader)
        self._resume_epoch: int | None = None  # the epoch of a state just loaded
        self._iterated_here = False  # whether this process yielded batches (no workers)
        self._dataset: Dataset | None = dataset  # each worker opens its own (getstate)
        self._encoder: Tokenizer | None = None
        self._plans: dict[tuple[int, int], EpochPlan | TokenPlan] = {}
        #: (epoch, batch counts per window) of the token plan, shipped to the workers
        self._window_ends: tuple[int, np.ndarray] | None = None
        #: (epoch, first batch) as the main process last set them, in shared memory: a
        #: persistent DataLoader worker keeps the copy of the dataset it started with, and
        #: reads the epoch each pass from here (set_epoch in the main process reaches it)
        self._shared = torch.zeros(2, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    def __getstate__(self) -> dict[str, Any]:
        # a spawned worker sees no process group: the check is made here, in the process
        # that has one
        self._before_reading()
        # each worker maps the shards and loads the tokenizer itself
        return {**self.__dict__, "_dataset": None, "_encoder": None, "_plans": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_world_unknown", False)  # pickled by a version before them
        self.__dict__.setdefault("_said_empty", False)
        if "_shared" not in state:  # pickled by a version before it
            self._shared = torch.tensor([self.epoch, self._start_batch], dtype=torch.int64)
        if not self._shared.is_shared():  # a deep copy: forked workers must still see it
            self._shared.share_memory_()  # type: ignore[no-untyped-call]

    def __len__(self) -> int:
        return self._plan(1).batches_per_rank

    def _before_reading(self) -> None:
        """Before reading: refuse where ``torch.distributed`` was started after this dataset
        was made without a rank (each rank would read the whole epoch, or every rank rank 0's
        share, with no error); warn where an epoch holds no batch at all (a training loop
        would end at once, as if done), once, and in DataLoader workers from the first only."""
        info = get_worker_info()
        if (not self._said_empty and (info is None or info.id == 0) and self.rows
                and len(self) == 0):
            self._said_empty = True
            warnings.warn(f"an epoch has no batch at all: the world size ({self.world_size}) "
                          f"times the batch (or token budget) needs more than the "
                          f"{self.rows:,} rows of {self.path}; lower them or pass "
                          "drop_remainder=False", stacklevel=3)
        world = _world()[0]
        if self._world_unknown and world > 1:
            raise InputError(
                f"this SprIterableDataset was made before torch.distributed."
                f"init_process_group and given no rank, so each of the {world} ranks "
                "would read the same rows (the whole dataset, or rank 0's share); make it "
                "after init_process_group, or pass both world_size= and rank=")

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch (call before each epoch) — or, right
        after ``load_state_dict`` of a state in that epoch, from where the state left it, so
        that the usual ``for epoch in range(state["epoch"], E): ds.set_epoch(epoch)`` loop
        resumes rather than repeats."""
        self._before_reading()
        resuming = self._resume_epoch == epoch
        self._resume_epoch = None
        self.epoch = epoch
        if not resuming:
            self._start_batch = self._next_batch = 0
            self._worker_next = None
        self._share_position()
        if self.max_tokens is not None:  # plan here, once: the workers get the counts
            self._plan(1)

    def _share_position(self) -> None:
        if get_worker_info() is None:  # the main process's position is the one to share
            self._shared[0], self._shared[1] = self.epoch, self._start_batch

    def _read_position(self) -> None:
        """In a DataLoader worker, the epoch and first batch the main process set last —
        unless this worker was given its own position (torchdata's ``StatefulDataLoader``)."""
        if get_worker_info() is None or self._worker_next is not None:
            return
        epoch, start = (int(x) for x in self._shared.tolist())
        self.epoch, self._start_batch = epoch, start

    def _open(self) -> Dataset:
        if self._dataset is None:  # opened in each worker process: memory maps do not pickle
            dataset = open_dataset(self.path, reader=self.reader)
            dataset.check_digest(self.manifest_digest)  # the one the plan was made for
            self._dataset = dataset
        return self._dataset

    def _plan(self, workers: int) -> EpochPlan | TokenPlan:
        key = (self.epoch, workers)
        if key not in self._plans:
            if self.max_tokens is None:
                assert self.batch_size is not None  # noqa: S101 - checked in __init__
                self._plans = {key: plan(self.rows, world_size=self.world_size,
                                         batch_size=self.batch_size, workers=workers,
                                         drop_remainder=self.drop_remainder)}
            else:
                known = self._window_ends
                p = token_plan(
                    self.rows, self.sizes_of, max_tokens=self.max_tokens, seed=self.seed,
                    epoch=self.epoch, world_size=self.world_size, workers=workers,
                    drop_remainder=self.drop_remainder, max_rows=self.batch_size,
                    window=self.window, block=self.block,
                    window_ends=known[1] if known and known[0] == self.epoch else None)
                self._window_ends = (self.epoch, p.window_ends)
                self._plans = {key: p}
        return self._plans[key]

    def _per_rank_on(self, world_size: int) -> int:
        """This epoch's batches a rank on ``world_size`` ranks (the plan's own count)."""
        return dataclasses.replace(self._plan(1), world_size=world_size).batches_per_rank

    def by_design(self, epoch: int | None = None) -> dict[str, int]:
        """Rows an epoch (this one by default) leaves out or reads twice on purpose, over all
        ranks: the remainder that fills no whole batch (``drop_remainder``), or the rows its
        last batches read again from the start. What :class:`CoverageMonitor` and ``audit``
        allow for."""
        if self.max_tokens is None:
            assert self.batch_size is not None  # noqa: S101 - checked in __init__
            p: EpochPlan | TokenPlan = plan(self.rows, world_size=self.world_size,
                                            batch_size=self.batch_size,
                                            drop_remainder=self.drop_remainder)
        else:
            p = token_plan(self.rows, self.sizes_of, max_tokens=self.max_tokens,
                           seed=self.seed, epoch=self.epoch if epoch is None else epoch,
                           world_size=self.world_size, workers=1,
                           drop_remainder=self.drop_remainder, max_rows=self.batch_size,
                           window=self.window, block=self.block)
        return {"dropped": p.dropped, "repeated": p.repeated}

    def rank_ids(self) -> np.ndarray:
        """Row ids of every batch this rank reads in the current epoch, in order (a row
        read twice by design appears twice)."""
        p = self._plan(1)
        if isinstance(p, TokenPlan):
            parts = [p.batch_rows(self.rank, b) for b in range(p.batches_per_rank)]
            rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        else:
            rows = epoch_order(self.rows, self.seed, self.epoch,
                               p.batch_positions(self.rank, np.arange(p.batches_per_rank)),
                               self.block)
        ids: np.ndarray = self._open().select_rows(rows).values("id").astype(np.int64)
        return ids

    def sizes_of(self, rows: np.ndarray) -> np.ndarray:
        """The size of each row for the token budget: its longest token-id sequence."""
        return row_sizes(self._open())(rows)

    def batch_rows(self, batch: int, workers: int = 1) -> np.ndarray:
        """Row indices of this rank's ``batch``-th batch of the current epoch."""
        p = self._plan(workers)
        if isinstance(p, TokenPlan):
            return p.batch_rows(self.rank, batch)
        return epoch_order(self.rows, self.seed, self.epoch, p.batch_positions(self.rank, batch),
                           self.block)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # not a generator: the position is set when the pass starts, so that a worker's
        # state_dict() taken before its first batch (torchdata takes one as the worker
        # starts) says which batch it will yield first, not the main process's position
        self._before_reading()
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        self._read_position()
        dataset = self._open()
        if self.tokenizer is not None and self._encoder is None:
            self._encoder = load_tokenizer(self.tokenizer)
        plan = self._plan(workers)
        numbers = (range(self._worker_next, plan.batches_per_rank, workers)
                   if self._worker_next is not None
                   else plan.worker_batches(worker, self._start_batch))
        self._next_batch = numbers[0] if numbers else plan.batches_per_rank
        return self._batches(dataset, numbers, workers, info is not None,
                             plan.batches_per_rank)

    def _batches(self, dataset: Dataset, numbers: range, workers: int, in_worker: bool,
                 per_rank: int) -> Iterator[dict[str, Any]]:
        texts = [name[:-4] for name in self.token_columns] if self._encoder is not None else []
        for b in numbers:
            # only the columns the batch holds are read: no text or origin unless asked for
            rows = dataset.select_rows(self.batch_rows(b, workers))
            batch: dict[str, Any] = {"ids": torch.from_numpy(
                rows.values("id").astype(np.int64)), "batch": b}
            table = rows.table(list(dict.fromkeys(texts + self.columns))) \
                if texts or self.columns else None
            for name in self.token_columns:
                if self._encoder is not None:
                    assert table is not None  # noqa: S101 - it holds the text columns
                    ids = self._encoder.encode(table.column(name[:-4]).to_pylist())
                    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
                    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                                       count=int(lengths.sum()))
                    batch[name], batch[name[:-4] + "_mask"] = pad(flat, lengths, self.pad_id)
                else:
                    padded, mask = rows.padded(name, self.pad_id)
                    batch[name] = torch.from_numpy(padded)
                    batch[name[:-4] + "_mask"] = torch.from_numpy(mask)
            for column in self.columns:
                batch[column] = table.column(column).to_pylist()  # type: ignore[union-attr]
            if in_worker:
                _one_storage(batch)
            # this worker's next batch (the epoch's end once it has none left: a worker's
            # state past it would read as a position past the epoch)
            self._next_batch = min(b + workers, per_rank)
            self._iterated_here = True
            yield batch
        # a later pass without set_epoch starts the epoch again, not at the resume point
        self._start_batch, self._worker_next = 0, None
        self._share_position()

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """The position after ``batches_done`` batches of this rank's epoch, O(1) in size.

        Without ``batches_done`` (torchdata's ``StatefulDataLoader``, in each worker): the
        position after the last batch this process yielded.
        """
        if batches_done is None and get_worker_info() is None and not self._iterated_here:
            warnings.warn("state_dict() without batches_done in a process that yielded no "
                          "batch: with DataLoader workers this process cannot know the "
                          "position; pass batches_done=batch['batch'] + 1, or use torchdata's "
                          "StatefulDataLoader", stacklevel=2)
        if batches_done is not None and not 0 <= _whole("batches_done", batches_done,
                                                        least=0) <= len(self):
            raise InputError(f"batches_done={batches_done} is outside this rank's epoch of "
                             f"{len(self)} batches (0 to {len(self)})")
        done = self._next_batch if batches_done is None else batches_done
        state = {"epoch": self.epoch, "batches_done": done, "seed": self.seed,
                 "batch_size": self.batch_size, "max_tokens": self.max_tokens,
                 "window": self.window, "block": self.block, "world_size": self.world_size,
                 "drop_remainder": self.drop_remainder, "manifest": self.manifest_digest}
        if batches_done is None and get_worker_info() is not None:
            state["worker_next"] = self._next_batch  # restored into this same worker
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; a state of another dataset or other options is refused.

        A state saved with another world size resumes at the same global position when that
        position falls on a batch boundary of the new world size; a worker's state from
        torchdata's ``StatefulDataLoader`` resumes on the same world size only. The position
        holds for the next pass (and a ``set_epoch`` of the state's epoch).
        """
        for key, mine in (("manifest", self.manifest_digest), ("seed", self.seed),
                          ("batch_size", self.batch_size), ("max_tokens", self.max_tokens),
                          ("window", self.window), ("block", self.block),
                          ("drop_remainder", self.drop_remainder)):
            optional = ("max_tokens", "window", "block", "drop_remainder")  # older states
            if state.get(key, mine if key in optional else None) != mine:
                raise InputError(f"iterator state has {key} {state.get(key)!r}, expected "
                                 f"{mine!r}: it belongs to another dataset or run")
        # global steps consumed: a step is one batch on every rank
        done = _whole("the state's batches_done", state["batches_done"], least=0)
        saved_world = _whole("the state's world_size", state["world_size"])
        consumed = done * saved_world
        if "worker_next" in state and saved_world != self.world_size:
            raise InputError(f"this state is one DataLoader worker's position on "
                             f"{saved_world} ranks; it resumes on {saved_world} "
                             f"ranks only, not {self.world_size} (to change the world size, "
                             "save state_dict(batches_done) from the training loop)")
        epoch = _whole("the state's epoch", state["epoch"], least=0)
        worker_next = (_whole("the state's worker_next", state["worker_next"], least=0)
                       if "worker_next" in state else None)
        current, self.epoch = self.epoch, epoch
        try:
            per_rank = self._plan(1).batches_per_rank
            then = self._per_rank_on(saved_world)  # the epoch's batches a rank where saved
        finally:
            self.epoch = current  # nothing changes until the state is found good
        # a worker done with its share said a batch past the epoch (up to one a loader
        # worker, before this version clamped it)
        slack = _MAX_LOADER_WORKERS if worker_next is not None else 0
        if done > then + slack:
            raise InputError(
                f"the state is {done:,} batches into epoch {epoch}, which has {then:,} "
                f"batches a rank on {saved_world} rank(s): batches_done counts this epoch's "
                "batches of one rank (batch['batch'] + 1 of the last batch trained on), not "
                "the global step")
        if done >= then:
            # the epoch's end where it was saved is its end here, whatever the world size
            # (one that wraps its last steps reads more batches than this one has, one that
            # drops a remainder fewer)
            consumed = per_rank * self.world_size
        elif consumed % self.world_size:
            raise InputError(
                f"the state is {consumed} batches into the epoch, which is not a step "
                f"boundary for world size {self.world_size}; resume on {saved_world} "
                "ranks or at an epoch boundary")
        self.epoch = self._resume_epoch = epoch
        self._start_batch = self._next_batch = consumed // self.world_size
        self._worker_next = worker_next
        self._share_position()


#: more DataLoader workers than any run has: how far past its epoch an old worker state may say
_MAX_LOADER_WORKERS = 256


def _count(name: str, value: Any, *, least: int = 1, hint: str = "") -> int | None:
    """``value`` as :func:`_whole` has it; ``None`` stays ``None``."""
    return None if value is None else _whole(name, value, least=least, hint=hint)


def _whole(name: str, value: Any, *, least: int = 1, hint: str = "") -> int:
    """``value`` as a whole number ≥ ``least`` (a whole float such as ``16e3`` too), or an
    :class:`InputError` naming it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InputError(f"{name} should be a whole number ≥ {least}, got {value!r}{hint}")
    return int(value)


def pad(flat: np.ndarray, lengths: np.ndarray, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``flat`` (cut by ``lengths``) as a padded ``LongTensor[B, L]`` and its mask."""
    width = int(lengths.max()) if len(lengths) else 0
    ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    mask = np.arange(width) < lengths[:, None]
    ids[mask] = flat
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _one_storage(batch: dict[str, Any]) -> None:
    """Make the batch's tensors views of one buffer, widest items first (each view aligned).

    A DataLoader worker sends each tensor storage to the main process through its own shared
    memory segment; one storage for the whole batch roughly halves the CPU time of that
    transfer, which is most of a batch's cost with workers.
    """
    tensors = sorted(((k, v) for k, v in batch.items() if isinstance(v, torch.Tensor)),
                     key=lambda kv: -kv[1].element_size())
    sizes = [v.numel() * v.element_size() for _, v in tensors]
    buffer = torch.empty(sum(-(-size // 8) * 8 for size in sizes), dtype=torch.uint8)
    at = 0
    for (name, tensor), size in zip(tensors, sizes, strict=True):
        view = buffer[at:at + size].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        batch[name] = view
        at += -(-size // 8) * 8


def to_device(batch: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
    """Every tensor of ``batch`` on ``device``, copied without blocking (from pinned memory:
    ``DataLoader(..., pin_memory=True)``), so the copy overlaps the previous step."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


class SprMapDataset(torch.utils.data.Dataset[dict[str, Any]]):
    """Map-style access for any sampler: ``ds[i]`` is row ``i`` as a dict (with its ``id``)."""

    def __init__(self, path: str | Path, *, reader: ReaderOptions | None = None) -> None:
        self.path = str(path)
        self.reader = reader
        dataset = open_dataset(self.path, reader=reader)
        self._rows = len(dataset)
        #: the manifest the length was read from: a worker that opens the path again checks
        #: it finds the same one (after ``ingest --overwrite`` it would not)
        self.manifest_digest = dataset.manifest_digest
        self._dataset: Dataset | None = dataset

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None}

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._dataset is None:  # in a DataLoader worker: memory maps do not pickle
            dataset = open_dataset(self.path, reader=self.reader)
            dataset.check_digest(self.manifest_digest)
            self._dataset = dataset
        return self._dataset[index]


#: ids per row above which ``CoverageMonitor`` keeps the ids seen rather than a bitmap
_BITS_PER_ROW = 64


class CoverageMonitor:
    """Counts distinct row ids per epoch in a bitmap (one bit per id: 1.75 MB at 14M rows)
    and says, at the epoch's end, how many rows were missed or repeated. Where the ids are
    sparse (``id_bound`` above 64 ids a row: a dataset that kept few of its input's rows, or
    a forged manifest) it keeps the ids seen instead, 8 bytes each.

    ``update(batch["ids"])`` on every step; ``end_epoch()`` returns the figures and warns —
    or raises with ``strict`` — unless every row was seen exactly once. With ``loader`` (the
    :class:`SprIterableDataset` that feeds the steps) the rows its epoch leaves out or reads
    twice by design (``drop_remainder``: the last partial batch) in its current epoch are
    expected, not an error; and where that loader is one rank of several, the monitor checks
    this rank's share of the epoch (every row the rank's batches hold, once; none other) —
    the whole dataset is covered by all ranks together, which ``spr-data audit --ids-log``
    checks from the ranks' logs.
    """

    def __init__(self, path: str | Path, *, strict: bool = False,
                 reader: ReaderOptions | None = None,
                 loader: SprIterableDataset | None = None) -> None:
        dataset = open_dataset(path, reader=reader)
        dataset.check_sizes()  # the rows are then bounded by the files, not only the manifest
        self.rows = len(dataset)
        self.strict = strict
        self._bound = dataset.manifest.id_bound
        # a bitmap costs id_bound / 8 bytes, the ids themselves 8 bytes a row: the bitmap only
        # while it is the cheaper (a sparse or forged id_bound never sizes an allocation)
        dense = self._bound <= _BITS_PER_ROW * self.rows + (1 << 23)
        self._bits: np.ndarray | None = (np.zeros((self._bound + 7) // 8, dtype=np.uint8)
                                         if dense else None)
        self._parts: list[np.ndarray] = []  # the ids seen, when there is no bitmap
        self._seen = 0
        self._repeats = 0
        self.epoch = 0
        self.loader = loader
        if loader is not None and loader.rows != self.rows:
            raise InputError(f"the loader reads {loader.rows:,} rows and {path} holds "
                             f"{self.rows:,}: give the monitor the loader's dataset")

    def update(self, ids: Any) -> None:
        values = np.asarray(ids.cpu() if hasattr(ids, "cpu") else ids, dtype=np.int64)
        values = values.reshape(-1)
        if values.size and (values.min() < 0 or values.max() >= self._bound):
            raise InputError(f"row id {int(values.max())} is outside this dataset's ids "
                             f"(0..{self._bound - 1})")
        self._seen += len(values)
        if self._bits is None:
            self._parts.append(values.copy())
            return
        distinct = unique(values)
        self._repeats += len(values) - len(distinct)
        byte, bit = distinct >> 3, (1 << (distinct & 7)).astype(np.uint8)
        self._repeats += int(((self._bits[byte] & bit) != 0).sum())
        np.bitwise_or.at(self._bits, byte, bit)

    def end_epoch(self) -> dict[str, Any]:
        if self.loader is not None and self.loader.world_size > 1:
            return self._end_rank_epoch(self.loader)
        if self._bits is not None:
            distinct = int(np.unpackbits(self._bits).sum())
            self._bits[:] = 0
        else:
            distinct = len(unique(np.concatenate(self._parts))) if self._parts else 0
            self._repeats = self._seen - distinct
            self._parts = []
        result = {"epoch": self.epoch, "seen": self._seen, "distinct_rows": distinct,
                  "repeats": self._repeats, "missed": self.rows - distinct,
                  "coverage": round(distinct / max(self.rows, 1), 6)}
        design = (self.loader.by_design() if self.loader is not None
                  else {"dropped": 0, "repeated": 0})
        result["dropped_by_design"] = design["dropped"]
        result["repeated_by_design"] = design["repeated"]
        self._seen = self._repeats = 0
        self.epoch += 1
        if result["missed"] != design["dropped"] or result["repeats"] != design["repeated"]:
            message = (f"epoch {result['epoch']}: {distinct:,} of {self.rows:,} rows seen, "
                       f"{result['missed']:,} missed, {result['repeats']:,} repeated")
            if design["dropped"] or design["repeated"]:
                message += (f" ({design['dropped']:,} dropped and {design['repeated']:,} "
                            "repeated by design)")
            elif result["missed"] and self.loader is None:
                message += (" (a loader that drops its last partial batch misses rows by "
                            "design: pass it as loader= to allow for them)")
            self._complain(message)
        return result

    def _complain(self, message: str, stacklevel: int = 3) -> None:
        if self.strict:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=stacklevel)  # at the caller of end_epoch

    def _end_rank_epoch(self, loader: SprIterableDataset) -> dict[str, Any]:
        """End an epoch of one rank of several: its ids against the rows its batches hold."""
        expected_ids = loader.rank_ids()
        expected = unique(expected_ids)
        if self._bits is not None:
            seen = np.flatnonzero(np.unpackbits(self._bits, bitorder="little")).astype(np.int64)
            self._bits[:] = 0
        else:
            seen = unique(np.concatenate(self._parts)) if self._parts else np.zeros(0, np.int64)
            self._repeats = self._seen - len(seen)
            self._parts = []
        missed = int(len(expected) - np.isin(expected, seen, assume_unique=True).sum())
        unexpected = int(len(seen) - np.isin(seen, expected, assume_unique=True).sum())
        result = {"epoch": self.epoch, "rank": loader.rank, "world_size": loader.world_size,
                  "rank_rows": len(expected), "seen": self._seen, "distinct_rows": len(seen),
                  "repeats": self._repeats, "missed": missed, "unexpected": unexpected,
                  "coverage": round((len(expected) - missed) / max(len(expected), 1), 6),
                  # the rows no rank reads are in no rank's share: none are missed here
                  "dropped_by_design": 0,
                  "repeated_by_design": len(expected_ids) - len(expected)}
        self._seen = self._repeats = 0
        self.epoch += 1
        if missed or unexpected or result["repeats"] != result["repeated_by_design"]:
            self._complain(
                f"epoch {result['epoch']}, rank {loader.rank} of {loader.world_size}: "
                f"{len(seen):,} distinct rows seen of the {len(expected):,} this rank's "
                f"batches hold, {missed:,} of them missed, {unexpected:,} rows of other "
                f"ranks seen, {result['repeats']:,} repeated "
                f"({result['repeated_by_design']:,} by design)", stacklevel=4)
        return result
