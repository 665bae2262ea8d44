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

``token_plan(n, sizes_of, max_tokens=T, ...)`` batches by a token budget instead: the epoch
order is cut into windows of ``window`` positions; inside a window rows are sorted by size
(length bucketing: little padding) and packed greedily into batches of at most ``T`` padded
tokens, whose order is then shuffled inside the window. Batch ``k`` of the epoch goes to rank
``k % world_size``. Only each window's batch count is kept; a window's batches are rebuilt
from the sizes when a worker reaches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from spr_data.arrays import unique

__all__ = ["EpochPlan", "TokenPlan", "epoch_order", "plan", "token_plan"]

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


def epoch_order(n: int, seed: int, epoch: int, positions: np.ndarray,
                block: int | None = None) -> np.ndarray:
    """Row index at each of ``positions`` (0..n-1) of epoch ``epoch``'s shuffled order.

    With ``block``, the order is *blocked* for storage where random reads are slow: runs of
    ``block`` consecutive positions read one block of ``block`` consecutive rows, in a shuffled
    order inside it, and the blocks come in a shuffled order (the short last block too).
    """
    if block is not None and block > 1 and n > block:
        return _blocked_order(n, seed, epoch, np.asarray(positions, dtype=np.int64), block)
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


def _blocked_order(n: int, seed: int, epoch: int, positions: np.ndarray,
                   block: int) -> np.ndarray:
    full, tail = divmod(n, block)
    keys = _keys(seed, epoch)
    # the short block sits at a seeded slot among the full ones
    slot = int(keys[0] % np.uint64(full + 1)) if tail else full
    in_tail = (positions >= slot * block) & (positions < slot * block + tail)
    shifted = np.where(positions >= slot * block + tail, positions - tail, positions)
    slots, inner = np.divmod(shifted, block)
    out = np.empty(len(positions), dtype=np.int64)
    full_rows = ~in_tail
    if full_rows.any():
        blocks = epoch_order(full, seed, epoch, slots[full_rows])
        offsets = np.empty(int(full_rows.sum()), dtype=np.int64)
        for b in unique(blocks).tolist():  # each block its own inner order
            here = blocks == b
            offsets[here] = epoch_order(block, seed ^ (b + 1), epoch, inner[full_rows][here])
        out[full_rows] = blocks * block + offsets
    if in_tail.any():
        out[in_tail] = full * block + epoch_order(tail, seed ^ (full + 1), epoch,
                                                  positions[in_tail] - slot * block)
    return out


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

    def batch_positions(self, rank: int, batch: int | np.ndarray) -> np.ndarray:
        """Global positions (in the epoch order) of a rank's ``batch``-th batch; for an array
        of batch numbers, their positions one batch after another."""
        first = np.asarray(batch, dtype=np.int64).reshape(-1, 1) * self.batch_size
        local = (first + np.arange(self.batch_size, dtype=np.int64)).reshape(-1)
        return (local * self.world_size + rank) % max(self.n, 1)

    def worker_batches(self, worker: int, start: int = 0) -> range:
        """The batch numbers a DataLoader worker of every rank produces (round-robin from
        batch ``start``, so a loader that takes one batch from each worker in turn yields
        ``start, start + 1, …`` in order)."""
        return range(start + worker, self.batches_per_rank, self.workers)


def plan(n: int, *, world_size: int = 1, batch_size: int = 1, workers: int = 0,
         drop_remainder: bool = True) -> EpochPlan:
    """Deal an epoch of ``n`` rows to ``world_size`` ranks × ``workers`` loader workers."""
    if world_size < 1 or batch_size < 1 or workers < 0:
        raise ValueError("world_size and batch_size must be ≥ 1 and workers ≥ 0")
    return EpochPlan(n, world_size, batch_size, max(workers, 1), drop_remainder)


SizesOf = Callable[[np.ndarray], np.ndarray]
#: positions per bucketing window: big enough that sorting by size leaves little padding,
#: small enough that a window's rows and sizes stay well under a megabyte
DEFAULT_WINDOW = 32_768


@dataclass(frozen=True, eq=False)
class TokenPlan:
    """An epoch of ``n`` rows in batches of at most ``max_tokens`` padded tokens (rows × the
    longest row; a row longer than the budget gets a batch of its own), ``max_rows`` at most.

    ``window_ends[w]`` is the number of batches in windows ``0..w``; everything else is
    recomputed from ``sizes_of(rows)`` (the size of each row: its longest token sequence).
    """

    n: int
    world_size: int
    workers: int
    drop_remainder: bool
    max_tokens: int
    max_rows: int | None
    window: int
    seed: int
    epoch: int
    window_ends: np.ndarray
    sizes_of: SizesOf
    block: int | None = None
    _cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)

    @property
    def total_batches(self) -> int:
        return int(self.window_ends[-1]) if len(self.window_ends) else 0

    @property
    def batches_per_rank(self) -> int:
        if self.drop_remainder:
            return self.total_batches // self.world_size
        return -(-self.total_batches // self.world_size)

    @property
    def dropped_batches(self) -> range:
        """Batches of the epoch no rank reads (drop mode): the last ``total % world`` ones."""
        return range(self.batches_per_rank * self.world_size, self.total_batches)

    @property
    def repeated_batches(self) -> list[int]:
        """Batches read once more because the last steps wrap around (wrap mode)."""
        return [k % self.total_batches
                for k in range(self.total_batches, self.batches_per_rank * self.world_size)]

    @property
    def dropped(self) -> int:
        """Rows of the epoch that no rank reads (drop mode), as :attr:`EpochPlan.dropped`."""
        return sum(len(self.rows_of(k)) for k in self.dropped_batches)

    @property
    def repeated(self) -> int:
        """Rows read twice because the last steps wrap around (wrap mode)."""
        return sum(len(self.rows_of(k)) for k in self.repeated_batches)

    def global_batch(self, rank: int, batch: int) -> int:
        """The epoch's batch number of a rank's ``batch``-th batch."""
        return (batch * self.world_size + rank) % max(self.total_batches, 1)

    def worker_batches(self, worker: int, start: int = 0) -> range:
        return range(start + worker, self.batches_per_rank, self.workers)

    def batch_rows(self, rank: int, batch: int) -> np.ndarray:
        """Row indices of a rank's ``batch``-th batch, shortest first."""
        return self.rows_of(self.global_batch(rank, batch))

    def rows_of(self, k: int) -> np.ndarray:
        """Row indices of the epoch's batch ``k``."""
        w = int(np.searchsorted(self.window_ends, k, side="right"))
        rows, starts, order = self._window(w)
        j = int(order[k - (int(self.window_ends[w - 1]) if w else 0)])
        return rows[starts[j]:starts[j + 1]]

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Window ``w``'s rows sorted by size, its batches' bounds, and the batches' order."""
        if w not in self._cache:
            rows, starts = _pack_window(self, w)
            order = epoch_order(len(starts) - 1, _window_seed(self.seed, w), self.epoch,
                                np.arange(len(starts) - 1))
            self._cache.clear()  # one window at a time: workers walk the epoch in order
            self._cache[w] = (rows, starts, order)
        return self._cache[w]


def _window_seed(seed: int, window: int) -> int:
    return (seed * 0x9E3779B1 + window + 1) & 0xFFFFFFFFFFFFFFFF


def _pack_window(p: TokenPlan, w: int) -> tuple[np.ndarray, np.ndarray]:
    positions = np.arange(w * p.window, min(p.n, (w + 1) * p.window), dtype=np.int64)
    rows = epoch_order(p.n, p.seed, p.epoch, positions, p.block)
    sizes = np.maximum(np.asarray(p.sizes_of(rows), dtype=np.int64), 1)
    # the same stable order either way; as uint16, numpy sorts by radix (ten times faster)
    keys = sizes.astype(np.uint16) if len(sizes) and int(sizes.max()) < 1 << 16 else sizes
    by_size = np.argsort(keys, kind="stable")
    rows, sizes = rows[by_size], sizes[by_size]
    return rows, _pack(sizes, p.max_tokens, p.max_rows)


def _pack(sizes: np.ndarray, max_tokens: int, max_rows: int | None) -> np.ndarray:
    """Greedy cuts of ascending ``sizes`` into batches with count × largest ≤ ``max_tokens``;
    returns the batches' bounds (``len + 1`` values)."""
    m = len(sizes)
    cap = max_rows or m
    starts = [0]
    i = 0
    while i < m:
        j = min(m, i + min(cap, max(1, max_tokens // int(sizes[i]))))
        while j - i > 1 and (j - i) * int(sizes[j - 1]) > max_tokens:
            j = i + max(1, max_tokens // int(sizes[j - 1]))
        starts.append(j)
        i = j
    return np.asarray(starts, dtype=np.int64)


def token_plan(n: int, sizes_of: SizesOf, *, max_tokens: int, seed: int = 0, epoch: int = 0,
               world_size: int = 1, workers: int = 0, drop_remainder: bool = True,
               max_rows: int | None = None, window: int = DEFAULT_WINDOW,
               block: int | None = None, window_ends: np.ndarray | None = None) -> TokenPlan:
    """Plan an epoch of ``n`` rows in token-budget batches (reads every row's size once).

    ``window_ends`` from an earlier plan of the same epoch and options (they depend on
    neither the world size nor the workers) skips that pass: a loader plans once, in its main
    process, and its workers reuse the counts."""
    if world_size < 1 or workers < 0 or max_tokens < 1 or window < 1 \
            or (max_rows is not None and max_rows < 1):
        raise ValueError("world_size, max_tokens, window and max_rows must be ≥ 1, "
                         "workers ≥ 0")
    p = TokenPlan(n, world_size, max(workers, 1), drop_remainder, max_tokens, max_rows, window,
                  seed, epoch, np.zeros(0, dtype=np.int64), sizes_of, block)
    if window_ends is None:
        counts = [len(_pack_window(p, w)[1]) - 1 for w in range(-(-n // window))]
        window_ends = np.cumsum(counts, dtype=np.int64)
    return replace(p, window_ends=window_ends, _cache={})
