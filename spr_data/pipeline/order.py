"""The order of rows in an epoch, and who reads which: pure functions, nothing stored.

``epoch_order(n, seed, epoch)`` is a pseudo-random permutation of ``0..n-1`` evaluated at any
position in O(1) memory (a Feistel network over the next power of four, with cycle walking):
no per-epoch array of 14M entries in every worker. The global order depends only on (n, seed,
epoch) — never on the number of ranks or workers — so a run can resume on another number of
GPUs and still see each remaining row once.

``plan(n, world_size, batch_size, ...)`` deals positions of that order to ranks round-robin
and each rank's batches to its DataLoader workers round-robin; every rank gets the same
number of batches (the remainder is dropped, or wrapped around from the start of the epoch
with the repeated rows reported). The training iterator and ``audit``'s replay both use these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EpochPlan", "epoch_order", "plan"]

_ROUNDS = 6


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit mixing function (splitmix64's finalizer), vectorized."""
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _keys(seed: int, epoch: int) -> np.ndarray:
    """Round keys from (seed, epoch): two mixes, so nearby seeds and epochs share nothing."""
    with np.errstate(over="ignore"):
        base = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        base = _mix(base + np.uint64(epoch & 0xFFFFFFFFFFFFFFFF))
        return np.asarray(_mix(base + np.arange(1, _ROUNDS + 1, dtype=np.uint64)))


def epoch_order(n: int, seed: int, epoch: int, positions: np.ndarray) -> np.ndarray:
    """Row index at each of ``positions`` (0..n-1) of epoch ``epoch``'s shuffled order."""
    positions = np.asarray(positions, dtype=np.uint64)
    if n <= 1:
        return positions.astype(np.int64)
    half = max(1, (int(n - 1).bit_length() + 1) // 2)
    low_mask = np.uint64((1 << half) - 1)
    keys = _keys(seed, epoch)

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(half), x & low_mask
        for k in keys:
            left, right = right, left ^ (_mix(right ^ k) & low_mask)
        return np.asarray((left << np.uint64(half)) | right, dtype=np.uint64)

    out = feistel(positions)
    todo = out >= np.uint64(n)
    while todo.any():  # cycle walking: the domain is at most 4n, so this ends fast
        out[todo] = feistel(out[todo])
        todo = out >= np.uint64(n)
    return out.astype(np.int64)


@dataclass(frozen=True)
class EpochPlan:
    """How an epoch of ``n`` rows is dealt out; all counts per rank are equal."""

    n: int
    world_size: int
    batch_size: int
    workers: int
    drop_remainder: bool

    @property
    def rows_per_rank(self) -> int:
        full = self.n // self.world_size
        if self.drop_remainder:
            return (full // self.batch_size) * self.batch_size
        return -(-self.n // (self.world_size * self.batch_size)) * self.batch_size

    @property
    def batches_per_rank(self) -> int:
        return self.rows_per_rank // self.batch_size

    @property
    def dropped(self) -> int:
        """Positions of the epoch that no rank reads (drop mode)."""
        return max(0, self.n - self.rows_per_rank * self.world_size)

    @property
    def repeated(self) -> int:
        """Positions read twice because the last batches wrap around (wrap mode)."""
        return max(0, self.rows_per_rank * self.world_size - self.n)

    def batch_positions(self, rank: int, batch: int) -> np.ndarray:
        """Global positions (in the epoch order) of a rank's ``batch``-th batch."""
        local = batch * self.batch_size + np.arange(self.batch_size, dtype=np.int64)
        return (local * self.world_size + rank) % max(self.n, 1)

    def worker_batches(self, worker: int) -> range:
        """The batch numbers a DataLoader worker of every rank produces (round-robin)."""
        return range(worker, self.batches_per_rank, self.workers)


def plan(n: int, *, world_size: int = 1, batch_size: int = 1, workers: int = 0,
         drop_remainder: bool = True) -> EpochPlan:
    """Deal an epoch of ``n`` rows to ``world_size`` ranks × ``workers`` loader workers."""
    if world_size < 1 or batch_size < 1 or workers < 0:
        raise ValueError("world_size and batch_size must be ≥ 1 and workers ≥ 0")
    return EpochPlan(n, world_size, batch_size, max(workers, 1), drop_remainder)
