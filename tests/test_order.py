"""The epoch order and its dealing to ranks and workers, stated as properties."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spr_data.pipeline.order import epoch_order, plan, token_plan


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


sizes_strategy = st.lists(st.integers(0, 300), min_size=0, max_size=1500)


def token_epoch(sizes: list[int], *, world: int, workers: int, budget: int, seed: int,
                drop: bool, window: int, max_rows: int | None = None):
    arr = np.asarray(sizes, dtype=np.int64)
    p = token_plan(len(arr), lambda rows: arr[rows], max_tokens=budget, seed=seed, epoch=2,
                   world_size=world, workers=workers, drop_remainder=drop, window=window,
                   max_rows=max_rows)
    return arr, p


@given(sizes=sizes_strategy, world=st.integers(1, 8), workers=st.integers(0, 4),
       budget=st.integers(1, 2000), seed=st.integers(0, 1000), drop=st.booleans(),
       window=st.integers(1, 700), max_rows=st.none() | st.integers(1, 50))
def test_token_batches_cover_every_row_once_within_the_budget(
        sizes: list[int], world: int, workers: int, budget: int, seed: int, drop: bool,
        window: int, max_rows: int | None):
    arr, p = token_epoch(sizes, world=world, workers=workers, budget=budget, seed=seed,
                         drop=drop, window=window, max_rows=max_rows)
    seen = np.zeros(max(len(arr), 1), dtype=np.int64)
    per_rank = []
    for rank in range(world):
        count = 0
        for worker in range(p.workers):
            for b in p.worker_batches(worker):
                rows = p.batch_rows(rank, b)
                assert len(rows) >= 1
                padded = len(rows) * max(1, int(arr[rows].max()))
                assert padded <= budget or len(rows) == 1  # an over-long row rides alone
                assert max_rows is None or len(rows) <= max_rows
                np.add.at(seen, rows, 1)
                count += 1
        per_rank.append(count)
    assert len(set(per_rank)) == 1  # every rank the same number of batches
    dropped = sum(len(p.rows_of(k)) for k in p.dropped_batches)
    repeated = sum(len(p.rows_of(k)) for k in p.repeated_batches)
    assert int((seen[:len(arr)] == 0).sum()) == dropped
    assert int((seen - 1).clip(min=0).sum()) == repeated
    assert not (dropped and repeated) and (not drop or repeated == 0)
    assert len(p.dropped_batches) < world and len(p.repeated_batches) < world


@given(sizes=st.lists(st.integers(1, 100), min_size=20, max_size=800), seed=st.integers(0, 99))
def test_token_batches_do_not_depend_on_world_size_and_differ_by_epoch(sizes: list[int],
                                                                       seed: int):
    arr, one = token_epoch(sizes, world=1, workers=0, budget=400, seed=seed, drop=False,
                           window=256)
    _, three = token_epoch(sizes, world=3, workers=2, budget=400, seed=seed, drop=False,
                           window=256)
    batches = [one.rows_of(k).tolist() for k in range(one.total_batches)]
    assert batches == [three.rows_of(k).tolist() for k in range(three.total_batches)]
    # rank r's b-th batch is batch b*W + r of that sequence
    assert three.batch_rows(2, 1).tolist() == batches[(1 * 3 + 2) % len(batches)]
    other = token_plan(len(arr), lambda rows: arr[rows], max_tokens=400, seed=seed, epoch=3,
                       window=256)
    if one.total_batches >= 8:  # fewer may fall in the same order by chance (one batch: surely)
        assert [other.rows_of(k).tolist() for k in range(other.total_batches)] != batches


def test_length_bucketing_leaves_little_padding():
    rng = np.random.default_rng(0)
    arr = rng.integers(1, 200, 20_000)
    p = token_plan(len(arr), lambda rows: arr[rows], max_tokens=4096, window=4096)
    padded = sum(len(p.rows_of(k)) * int(arr[p.rows_of(k)].max()) for k in range(p.total_batches))
    assert arr.sum() / padded > 0.95
    # without bucketing (window of one batch's rows) the same budget wastes far more
    q = token_plan(len(arr), lambda rows: arr[rows], max_tokens=4096, window=20)
    padded_q = sum(len(q.rows_of(k)) * int(arr[q.rows_of(k)].max()) for k in range(q.total_batches))
    assert arr.sum() / padded_q < 0.8


@given(n=st.integers(0, 3000), block=st.integers(2, 500), seed=st.integers(0, 2**32),
       epoch=st.integers(0, 5))
def test_the_blocked_order_is_a_permutation_read_in_runs_of_a_block(n: int, block: int,
                                                                    seed: int, epoch: int):
    order = epoch_order(n, seed, epoch, np.arange(n), block=block)
    assert sorted(order.tolist()) == list(range(n))
    if n > block:
        # each block of rows is read in one run of consecutive positions
        blocks = order // block
        assert np.count_nonzero(np.diff(blocks)) == len(set(blocks.tolist())) - 1
        assert not np.array_equal(order, epoch_order(n, seed, epoch + 1, np.arange(n),
                                                     block=block))


def test_the_blocked_order_reads_few_blocks_per_batch():
    n, block = 1_000_000, 4096
    p = plan(n, world_size=1, batch_size=256)
    rows = epoch_order(n, 7, 0, p.batch_positions(0, 10), block=block)
    assert len(np.unique(rows // block)) <= 2
    rows_global = epoch_order(n, 7, 0, p.batch_positions(0, 10))
    assert len(np.unique(rows_global // block)) > 100
