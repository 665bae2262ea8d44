"""The epoch order and its dealing to ranks and workers, stated as properties."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spr_data.pipeline.order import epoch_order, plan


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**32), epoch=st.integers(0, 50))
def test_each_epoch_is_a_permutation(n: int, seed: int, epoch: int):
    order = epoch_order(n, seed, epoch, np.arange(n))
    assert sorted(order.tolist()) == list(range(n))


@given(n=st.integers(50, 3000), seed=st.integers(0, 2**32))
def test_epochs_differ_and_the_same_seed_repeats(n: int, seed: int):
    a = epoch_order(n, seed, 0, np.arange(n))
    assert not np.array_equal(a, epoch_order(n, seed, 1, np.arange(n)))
    assert np.array_equal(a, epoch_order(n, seed, 0, np.arange(n)))
    # any position can be asked on its own: the order needs no stored array
    assert epoch_order(n, seed, 0, np.array([n // 2]))[0] == a[n // 2]


@given(n=st.integers(0, 2000), world=st.integers(1, 8), workers=st.integers(0, 4),
       batch=st.integers(1, 64), seed=st.integers(0, 1000), drop=st.booleans())
def test_exactly_once_over_ranks_and_workers_with_equal_batches(
        n: int, world: int, workers: int, batch: int, seed: int, drop: bool):
    p = plan(n, world_size=world, batch_size=batch, workers=workers, drop_remainder=drop)
    seen = np.zeros(max(n, 1), dtype=np.int64)
    per_rank = []
    for rank in range(world):
        count = 0
        for worker in range(p.workers):
            for b in p.worker_batches(worker):
                rows = epoch_order(n, seed, 3, p.batch_positions(rank, b)) if n else []
                np.add.at(seen, rows, 1)
                count += 1
        per_rank.append(count)
    assert len(set(per_rank)) == 1  # no rank waits for another at the end of the epoch
    if n:
        assert int((seen > 0).sum()) == n - p.dropped
        assert int((seen - 1).clip(min=0).sum()) == p.repeated
        assert seen.max() <= max(1, -(-p.rows_per_rank * world // n))


@given(n=st.integers(1, 2000), seed=st.integers(0, 1000))
def test_the_global_order_does_not_depend_on_the_world_size(n: int, seed: int):
    """Rank r of W reads positions r, r+W, …: interleaving the ranks gives one global order."""
    full = epoch_order(n, seed, 0, np.arange(n))
    for world in (1, 2, 3, 8):
        p = plan(n, world_size=world, batch_size=1, drop_remainder=True)
        for rank in range(world):
            positions = np.concatenate([p.batch_positions(rank, b)
                                        for b in range(p.batches_per_rank)] or [np.zeros(0,
                                                                                 np.int64)])
            assert np.array_equal(epoch_order(n, seed, 0, positions), full[positions])
