"""PyTorch iteration over an spr-data dataset: every row once per epoch, resumable.

``SprIterableDataset`` yields whole batches in the epoch order of :mod:`spr_data.pipeline.order`
(a pure function of the seed and epoch), dealt to ranks and DataLoader workers round-robin, so
every rank yields the same number of batches and the order does not depend on the number of
ranks or workers. Each batch carries the row ids it holds. Use it with
``DataLoader(ds, batch_size=None, num_workers=K)``. Needs the ``torch`` extra.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from spr_data.dataset import Dataset, open_dataset
from spr_data.errors import InputError
from spr_data.manifest import MANIFEST_NAME
from spr_data.pipeline.order import EpochPlan, epoch_order, plan

__all__ = ["CoverageMonitor", "SprIterableDataset", "SprMapDataset"]


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class SprIterableDataset(IterableDataset[dict[str, Any]]):
    """Batches of ``batch_size`` rows: ``{"ids": LongTensor, "batch": int, column: list}``.

    ``world_size``/``rank`` default to ``torch.distributed``'s (or 1/0). ``state_dict(n)``
    after a training loop has consumed ``n`` batches of the epoch, and ``load_state_dict`` in
    a new run, continue with exactly the batches an uninterrupted run would have produced.
    """

    def __init__(self, path: str | Path, *, batch_size: int, seed: int = 0,
                 columns: list[str] | None = None, world_size: int | None = None,
                 rank: int | None = None, drop_remainder: bool = True) -> None:
        super().__init__()
        self.path = str(path)
        self.batch_size = batch_size
        self.seed = seed
        self.drop_remainder = drop_remainder
        default_world, default_rank = _world()
        self.world_size = world_size if world_size is not None else default_world
        self.rank = rank if rank is not None else default_rank
        if not 0 <= self.rank < self.world_size:
            raise InputError(f"rank {self.rank} is outside a world of {self.world_size}")
        dataset = open_dataset(self.path)
        self.columns = columns or [f.name for f in dataset.schema if f.name != "id"]
        self.rows = len(dataset)
        self.manifest_digest = "sha256:" + hashlib.sha256(
            (Path(self.path) / MANIFEST_NAME).read_bytes()).hexdigest()
        self.epoch = 0
        self._start_batch = 0
        self._dataset: Dataset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_dataset"] = None  # each worker maps the shards itself
        return state

    def __len__(self) -> int:
        return self._plan(1).batches_per_rank

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch (call before each epoch)."""
        self.epoch = epoch
        self._start_batch = 0

    def _plan(self, workers: int) -> EpochPlan:
        return plan(self.rows, world_size=self.world_size, batch_size=self.batch_size,
                    workers=workers, drop_remainder=self.drop_remainder)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        if self._dataset is None:  # opened in each worker process: memory maps do not pickle
            self._dataset = open_dataset(self.path)
        p = self._plan(workers)
        for b in p.worker_batches(worker):
            if b < self._start_batch:
                continue
            rows = epoch_order(self.rows, self.seed, self.epoch, p.batch_positions(self.rank, b))
            table = self._dataset.take(rows)
            batch: dict[str, Any] = {"ids": torch.from_numpy(
                table.column("id").to_numpy().astype(np.int64)), "batch": b}
            for column in self.columns:
                batch[column] = table.column(column).to_pylist()
            yield batch

    def state_dict(self, batches_done: int) -> dict[str, Any]:
        """The position after ``batches_done`` batches of this rank's epoch, O(1) in size."""
        return {"epoch": self.epoch, "batches_done": batches_done, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size,
                "manifest": self.manifest_digest}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``; a state of another dataset or other options is refused.

        A state saved with another world size resumes at the same global position when that
        position falls on a batch boundary of the new world size.
        """
        for key, mine in (("manifest", self.manifest_digest), ("seed", self.seed),
                          ("batch_size", self.batch_size)):
            if state.get(key) != mine:
                raise InputError(f"iterator state has {key} {state.get(key)!r}, expected "
                                 f"{mine!r}: it belongs to another dataset or run")
        consumed = int(state["batches_done"]) * self.batch_size * int(state["world_size"])
        per_step = self.batch_size * self.world_size
        if consumed % per_step:
            raise InputError(f"the state is {consumed} rows into the epoch, which is not a "
                             f"batch boundary for world size {self.world_size}; resume on "
                             f"{state['world_size']} ranks or at an epoch boundary")
        self.epoch = int(state["epoch"])
        self._start_batch = consumed // per_step


class SprMapDataset(torch.utils.data.Dataset[dict[str, Any]]):
    """Map-style access for any sampler: ``ds[i]`` is row ``i`` as a dict (with its ``id``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._rows = len(open_dataset(self.path))
        self._dataset: Dataset | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None}

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._dataset is None:
            self._dataset = open_dataset(self.path)
        return self._dataset[index]


class CoverageMonitor:
    """Counts distinct row ids per epoch in a bitmap (one bit per id: 1.75 MB at 14M rows)
    and says, at the epoch's end, how many rows were missed or repeated.

    ``update(batch["ids"])`` on every step; ``end_epoch()`` returns the figures and warns —
    or raises with ``strict`` — unless every row was seen exactly once.
    """

    def __init__(self, path: str | Path, *, strict: bool = False) -> None:
        dataset = open_dataset(path)
        self.rows = len(dataset)
        self.strict = strict
        self._bound = dataset.manifest.id_bound
        self._bits = np.zeros((self._bound + 7) // 8, dtype=np.uint8)
        self._seen = 0
        self._repeats = 0
        self.epoch = 0

    def update(self, ids: Any) -> None:
        values = np.asarray(ids.cpu() if hasattr(ids, "cpu") else ids, dtype=np.int64)
        values = values.reshape(-1)
        if values.size and (values.min() < 0 or values.max() >= self._bound):
            raise InputError(f"row id {int(values.max())} is outside this dataset's ids "
                             f"(0..{self._bound - 1})")
        unique = np.unique(values)
        self._repeats += len(values) - len(unique)
        byte, bit = unique >> 3, (1 << (unique & 7)).astype(np.uint8)
        self._repeats += int(((self._bits[byte] & bit) != 0).sum())
        np.bitwise_or.at(self._bits, byte, bit)
        self._seen += len(values)

    def end_epoch(self) -> dict[str, Any]:
        distinct = int(np.unpackbits(self._bits).sum())
        result = {"epoch": self.epoch, "seen": self._seen, "distinct_rows": distinct,
                  "repeats": self._repeats, "missed": self.rows - distinct,
                  "coverage": round(distinct / max(self.rows, 1), 6)}
        self._bits[:] = 0
        self._seen = self._repeats = 0
        self.epoch += 1
        if result["missed"] or result["repeats"]:
            message = (f"epoch {result['epoch']}: {distinct:,} of {self.rows:,} rows seen, "
                       f"{result['missed']:,} missed, {result['repeats']:,} repeated")
            if self.strict:
                raise RuntimeError(message)
            import warnings

            warnings.warn(message, stacklevel=2)
        return result
