"""The PyTorch iterator: every row once per epoch over ranks and workers, and exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from spr_data import InputError, ingest  # noqa: E402
from spr_data.errors import DatasetError  # noqa: E402
from spr_data.pipeline.torch_data import SprIterableDataset  # noqa: E402


@pytest.fixture(scope="module")
def dataset(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch")
    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    ingest([src], root / "ds", langs=["en", "bn"], shard_rows=1000)
    return root / "ds"


def epoch_ids(ds_path: Path, *, world: int, workers: int, batch: int, epoch: int = 0,
              seed: int = 0, **options: Any) -> list[list[int]]:
    """The ids each rank yields in an epoch, through a real DataLoader."""
    out = []
    for rank in range(world):
        ds = SprIterableDataset(ds_path, batch_size=batch, seed=seed, world_size=world,
                                rank=rank, **options)
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=None, num_workers=workers)
        out.append([i for b in loader for i in b["ids"].tolist()])
    return out


@pytest.mark.parametrize("world,workers", [(1, 0), (2, 2), (3, 1)])
def test_every_row_once_per_epoch_and_equal_batches(dataset: Path, world: int, workers: int):
    per_rank = epoch_ids(dataset, world=world, workers=workers, batch=32)
    flat = [i for ids in per_rank for i in ids]
    assert len(flat) == len(set(flat))  # nothing twice
    dropped = 4387 - len(flat)
    assert 0 <= dropped < world * 32  # only the remainder that cannot fill a batch everywhere
    assert len({len(ids) for ids in per_rank}) == 1  # every rank the same number of batches


def test_order_depends_on_epoch_not_on_workers(dataset: Path):
    a = epoch_ids(dataset, world=1, workers=0, batch=16)[0]
    b = epoch_ids(dataset, world=1, workers=2, batch=16)[0]
    assert a == b
    assert a != epoch_ids(dataset, world=1, workers=0, batch=16, epoch=1)[0]


def resume_check(ds_path: Path, *, stop: int, world: int = 1, new_world: int | None = None,
                 **options: Any) -> None:
    """The one resume helper: iterate to a midpoint, snapshot, finish; reload the snapshot
    (possibly on another world size) and assert the rest is exactly the unseen rows."""
    full = [SprIterableDataset(ds_path, world_size=world, rank=r, **options)
            for r in range(world)]
    runs = [list(r) for r in full]
    state = full[0].state_dict(batches_done=stop)
    seen = {i for run in runs for b in run[:stop] for i in b["ids"].tolist()}
    rest_expected = {i for run in runs for b in run[stop:] for i in b["ids"].tolist()}
    w = new_world or world
    resumed = [SprIterableDataset(ds_path, world_size=w, rank=r, **options) for r in range(w)]
    for r in resumed:
        r.load_state_dict(state)
    resumed_batches = [b for r in resumed for b in r]  # one pass: the resume point holds once
    rest = [i for b in resumed_batches for i in b["ids"].tolist()]
    if new_world is None:
        assert [b["ids"].tolist() for run in runs for b in run[stop:]] == \
            [b["ids"].tolist() for b in resumed_batches]
    assert not seen & set(rest)
    assert len(rest) == len(set(rest))
    if new_world is None:
        assert set(rest) == rest_expected
    else:  # with drop mode, only the end of the epoch may differ, by less than a step
        assert len(rest_expected ^ set(rest)) <= max(len(b["ids"]) for run in runs
                                                     for b in run) * max(world, w)


def test_resume_mid_epoch_gives_the_exact_next_batches(dataset: Path):
    resume_check(dataset, batch_size=20, stop=37)
    resume_check(dataset, batch_size=20, stop=10, world=2)


def test_resume_on_another_world_size(dataset: Path):
    resume_check(dataset, batch_size=10, stop=20, world=2, new_world=4)


def test_a_state_of_another_dataset_is_refused(dataset: Path, tmp_path: Path):
    ds = SprIterableDataset(dataset, batch_size=8)
    state = ds.state_dict(batches_done=3)
    with pytest.raises(InputError, match="seed"):
        SprIterableDataset(dataset, batch_size=8, seed=5).load_state_dict(state)
    with pytest.raises(InputError, match="step boundary"):
        SprIterableDataset(dataset, batch_size=8, world_size=2, rank=0).load_state_dict(state)
    assert len(ds) == 4387 // 8
    assert np.array_equal(next(iter(ds))["ids"].numpy(), next(iter(ds))["ids"].numpy())


GLOO_RANK = """
import json, os, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from spr_data.pipeline.torch_data import SprIterableDataset
dist.init_process_group("gloo", rank=int(sys.argv[2]), world_size=int(sys.argv[3]))
ds = SprIterableDataset(sys.argv[1], batch_size=16, seed=3)  # rank and world from torch.distributed
ds.set_epoch(1)
ids = [i for b in DataLoader(ds, batch_size=None, num_workers=1) for i in b["ids"].tolist()]
dist.barrier()  # a rank with fewer batches would hang here, or at the next all-reduce
print(json.dumps({"rank": dist.get_rank(), "world": ds.world_size, "ids": ids}))
dist.destroy_process_group()
"""


def test_torch_distributed_gloo_ranks_cover_the_dataset_once(dataset: Path):
    """Real processes, a real process group on loopback, DataLoader workers, a full epoch."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    world = 3
    procs = [subprocess.Popen([sys.executable, "-c", GLOO_RANK, str(dataset), str(r),
                               str(world)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for r in range(world)]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(o["rank"] for o in outputs) == [0, 1, 2]
    assert all(o["world"] == world for o in outputs)
    ids = [i for o in outputs for i in o["ids"]]
    assert len(ids) == len(set(ids)) and 4387 - len(ids) < world * 16
    assert len({len(o["ids"]) for o in outputs}) == 1


def test_impossible_positions_and_a_rejects_dataset_are_refused_when_made(dataset: Path):
    """A position outside the epoch is refused when the state is saved, not days later when
    a run resumes from it; the rows clean or ingest took out are no training data."""
    ds = SprIterableDataset(dataset, batch_size=8)
    assert ds.state_dict(batches_done=len(ds))["batches_done"] == len(ds)  # the epoch's end
    with pytest.raises(InputError, match="outside this rank's epoch"):
        ds.state_dict(batches_done=len(ds) + 1)
    for done in (-5, 2.5, True):
        with pytest.raises(InputError, match="batches_done should be a whole number ≥ 0"):
            ds.state_dict(batches_done=done)
    with pytest.raises(DatasetError, match="is a rejects dataset"):
        SprIterableDataset(dataset / "_rejects", batch_size=8)


def test_an_epoch_without_a_batch_is_said(dataset: Path):
    """4,387 rows, 5,000 a batch, the remainder dropped: no batch at all, said once, not a
    training loop that ends at once as if done."""
    import warnings

    ds = SprIterableDataset(dataset, batch_size=5000)
    with pytest.warns(UserWarning, match="no batch at all") as said:
        ds.set_epoch(0)
        assert list(ds) == []
    assert len(said) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(SprIterableDataset(dataset, batch_size=5000, drop_remainder=False))) == 1


GLOO_LATE = """
import sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from spr_data.errors import InputError
from spr_data.pipeline.torch_data import SprIterableDataset
if __name__ == "__main__":
    path = sys.argv[1]
    made = [SprIterableDataset(path, batch_size=16),  # before the process group: a world of 1
            SprIterableDataset(path, batch_size=16, world_size=2),  # and every rank rank 0
            SprIterableDataset(path, batch_size=16)]
    dist.init_process_group("gloo", rank=int(sys.argv[2]), world_size=int(sys.argv[3]))
    reads = [lambda ds: ds.set_epoch(0), lambda ds: ds.set_epoch(0),
             # a spawned worker, no set_epoch: the worker sees no process group
             lambda ds: list(DataLoader(ds, batch_size=None, num_workers=1,
                                        multiprocessing_context="spawn"))]
    for ds, read in zip(made, reads):
        try:
            read(ds)
            print("read")
        except InputError as exc:
            print("refused:", exc)
    dist.destroy_process_group()
"""


def test_a_dataset_made_before_the_process_group_is_refused(dataset: Path):
    """Made before ``init_process_group`` without a world size, it would read the whole epoch
    on every rank with no error: it refuses to read, saying how to make it."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    script = dataset.parent / "late.py"  # a file: spawned workers import its __main__
    script.write_text(GLOO_LATE)
    procs = [subprocess.Popen([sys.executable, str(script), str(dataset), str(r), "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for r in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
        lines = out.strip().splitlines()
        assert len(lines) == 3 and all(line.startswith("refused:") and
                                       "after init_process_group" in line for line in lines), out


def test_map_style_dataset_with_torch_samplers(dataset: Path):
    from torch.utils.data import DistributedSampler

    from spr_data.pipeline.torch_data import SprMapDataset

    ds = SprMapDataset(dataset)
    assert len(ds) == 4387 and ds[0]["id"] == 0 and ds[0]["src"]
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(ds, sampler=sampler, batch_size=64, num_workers=1,
                            collate_fn=lambda rows: [r["id"] for r in rows])
        seen += [i for b in loader for i in b]
    assert set(seen) == set(range(4387))  # DistributedSampler pads: some ids twice


def test_coverage_monitor_catches_missed_and_repeated_rows(dataset: Path):
    from spr_data.pipeline.torch_data import CoverageMonitor

    monitor = CoverageMonitor(dataset, strict=True)
    ds = SprIterableDataset(dataset, batch_size=64, drop_remainder=False)
    for batch in ds:
        monitor.update(batch["ids"])
    # wrap mode repeats the few rows that complete the last batch: reported, not hidden
    with pytest.raises(RuntimeError, match="repeated"):
        monitor.end_epoch()
    for i in range(4387):
        monitor.update([i])
    assert monitor.end_epoch()["coverage"] == 1.0
    for i in range(2000):  # the 2,000-pair bug, live
        monitor.update([i, i])
    with pytest.raises(RuntimeError, match="2,387 missed"):
        monitor.end_epoch()


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_coverage_monitor_allows_what_the_loader_leaves_out_by_design(dataset: Path,
                                                                     drop_remainder: bool):
    """The default loader drops its last partial batch (4,387 rows in batches of 64: 35
    rows): strict with the loader, a correct epoch passes; rows lost beyond it still fail."""
    from spr_data.pipeline.torch_data import CoverageMonitor

    ds = SprIterableDataset(dataset, batch_size=64, drop_remainder=drop_remainder)
    monitor = CoverageMonitor(dataset, strict=True, loader=ds)
    for batch in ds:
        monitor.update(batch["ids"])
    figures = monitor.end_epoch()
    assert (figures["missed"], figures["repeats"]) == ((35, 0) if drop_remainder else (0, 29))
    assert figures["dropped_by_design"] == figures["missed"]
    assert figures["repeated_by_design"] == figures["repeats"]
    for k, batch in enumerate(ds):
        if k:  # one batch lost: 64 rows more than the design drops
            monitor.update(batch["ids"])
    with pytest.raises(RuntimeError, match="by design"):
        monitor.end_epoch()
    without = CoverageMonitor(dataset, strict=True)
    for batch in ds:
        without.update(batch["ids"])
    with pytest.raises(RuntimeError, match="loader=" if drop_remainder else "repeated"):
        without.end_epoch()


@pytest.mark.parametrize("options", [{"batch_size": 64, "drop_remainder": False},
                                     {"batch_size": 64}, {"max_tokens": 900}])
def test_coverage_monitor_of_one_rank_checks_that_ranks_share(dataset: Path, tokenized: Path,
                                                              options: dict[str, Any]):
    """On 3 ranks, each rank's monitor (given its loader) checks the rows its own batches
    hold, once, and no other rank's; a correct run passes on every rank (each rank once
    warned that two thirds of the dataset was missed)."""
    from spr_data.pipeline.torch_data import CoverageMonitor

    path = tokenized if "max_tokens" in options else dataset
    loaders = [SprIterableDataset(path, seed=3, world_size=3, rank=r, **options)
               for r in range(3)]
    monitors = [CoverageMonitor(path, strict=True, loader=ds) for ds in loaders]
    shares = []
    for ds, monitor in zip(loaders, monitors, strict=True):
        ds.set_epoch(1)
        ids = [b["ids"] for b in DataLoader(ds, batch_size=None, num_workers=2)]
        for batch in ids:
            monitor.update(batch)
        figures = monitor.end_epoch()
        assert figures["missed"] == figures["unexpected"] == 0
        assert figures["repeats"] == figures["repeated_by_design"]
        shares.append(set(torch.cat(ids).tolist()))
        assert figures["rank_rows"] == len(shares[-1])
    if options.get("drop_remainder", True):  # (wrapping, the last steps read the first rows)
        assert not (shares[0] & shares[1]) and not (shares[1] & shares[2])
    ds, monitor = loaders[0], monitors[0]
    batches = list(ds)
    for batch in batches[1:]:  # a batch lost
        monitor.update(batch["ids"])
    with pytest.raises(RuntimeError, match=f"{len(batches[0]['ids'])} of them missed"):
        monitor.end_epoch()
    for batch in [*batches, next(iter(loaders[1]))]:  # and a batch of another rank
        monitor.update(batch["ids"])
    with pytest.raises(RuntimeError, match=r"0 of them missed, [1-9][0-9]* rows of other ranks"):
        monitor.end_epoch()


def test_coverage_monitor_is_not_sized_by_a_forged_id_bound(dataset: Path, tmp_path: Path):
    """id_bound = 10**18 passes every check (rows <= rows_in <= id_bound < 2**63): a bitmap
    over it would be 111 PiB. Above 64 ids a row the monitor keeps the ids instead."""
    import json
    import shutil

    from spr_data.pipeline.torch_data import CoverageMonitor

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "id_bound": 10**18}))
    monitor = CoverageMonitor(copy, strict=True)
    monitor.update(np.arange(4387))
    assert monitor.end_epoch() == {"epoch": 0, "seen": 4387, "distinct_rows": 4387,
                                   "repeats": 0, "missed": 0, "coverage": 1.0,
                                   "dropped_by_design": 0, "repeated_by_design": 0}
    monitor.update(np.arange(2000))
    monitor.update(np.arange(2000))
    with pytest.raises(RuntimeError, match="2,000 repeated"):
        monitor.end_epoch()


def test_coverage_monitor_refuses_forged_rows_and_bytes(dataset: Path, tmp_path: Path):
    """rows and bytes forged together: the shard's real size refuses them before the bitmap
    (sized by the rows) is made."""
    import json
    import shutil

    from spr_data.errors import DatasetError
    from spr_data.pipeline.torch_data import CoverageMonitor

    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    m = json.loads((copy / "manifest.json").read_text())
    shards = [{**m["shards"][0], "rows": 10**17, "bytes": 2**62}, *m["shards"][1:]]
    rows = sum(s["rows"] for s in shards)
    (copy / "manifest.json").write_text(json.dumps(
        {**m, "shards": shards, "rows": rows, "rows_in": rows, "id_bound": 10**18}))
    with pytest.raises(DatasetError, match="its manifest says 4,611,686,018,427,387,904"):
        CoverageMonitor(copy)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_map_style_workers_notice_a_dataset_replaced_since_its_length(
        corpora: Path, tmp_path: Path, start: str):
    """``ingest --overwrite`` between the construction (which read the length) and the
    DataLoader's workers (which open the path again): refused, not new rows under the old
    length."""
    from spr_data.errors import DatasetError
    from spr_data.pipeline.torch_data import SprMapDataset

    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    out = tmp_path / "ds"
    ingest([src], out, langs=["en", "bn"], shard_rows=1000)
    ds = SprMapDataset(out)
    ingest([src], out, langs=["en", "bn"], shard_rows=700, overwrite=True)
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context=start)
    with pytest.raises(DatasetError, match="was replaced since it was opened"):
        next(iter(loader))


@pytest.fixture(scope="module")
def tokenized(dataset: Path, corpora: Path) -> Path:
    from spr_data.pipeline.tokenize import tokenize

    out = dataset.parent / "tokenized"
    tokenize(dataset, out, tokenizer=str(corpora / "tokenizers/llama2_tokenizer.model"),
             workers=1)
    return out


@pytest.mark.parametrize("world,workers", [(1, 0), (2, 2), (3, 1)])
def test_token_budget_batches_cover_the_epoch_within_the_budget(tokenized: Path, world: int,
                                                                 workers: int):
    from spr_data import open_dataset

    table = open_dataset(tokenized).take(range(4387))
    src, tgt = table.column("src_ids").to_pylist(), table.column("tgt_ids").to_pylist()
    per_rank = []
    for rank in range(world):
        ds = SprIterableDataset(tokenized, max_tokens=600, world_size=world, rank=rank,
                                window=1024)
        batches = list(DataLoader(ds, batch_size=None, num_workers=workers))
        per_rank.append([b["ids"].tolist() for b in batches])
        for b in batches:
            rows = b["ids"].tolist()
            width = max(b["src_ids"].shape[1], b["tgt_ids"].shape[1])
            assert len(rows) * width <= 600 or len(rows) == 1
            for k, i in enumerate(rows):  # the padded tensors hold each row's ids, then pad
                n = int(b["src_mask"][k].sum())
                assert b["src_ids"][k, :n].tolist() == src[i] and n == len(src[i])
                assert b["tgt_ids"][k][b["tgt_mask"][k]].tolist() == tgt[i]
                assert not b["tgt_ids"][k][~b["tgt_mask"][k]].any()
    flat = [i for rank in per_rank for batch in rank for i in batch]
    assert len(flat) == len(set(flat))
    assert len({len(rank) for rank in per_rank}) == 1
    ds = SprIterableDataset(tokenized, max_tokens=600, world_size=world, window=1024)
    p = ds._plan(1)
    assert 4387 - len(flat) == sum(len(p.rows_of(k)) for k in p.dropped_batches)


def test_the_blocked_order_through_the_loader_and_resume(tokenized: Path):
    per_rank = epoch_ids(tokenized, world=2, workers=2, batch=32, block=256)
    flat = [i for ids in per_rank for i in ids]
    assert len(flat) == len(set(flat)) and 4387 - len(flat) < 2 * 32
    assert per_rank != epoch_ids(tokenized, world=2, workers=2, batch=32)
    resume_check(tokenized, batch_size=16, stop=9, world=2, block=256)
    resume_check(tokenized, max_tokens=700, stop=9, block=300)


def test_resume_with_a_token_budget(tokenized: Path):
    resume_check(tokenized, max_tokens=500, stop=11, window=700)
    resume_check(tokenized, max_tokens=500, stop=6, world=3, new_world=2, window=700)


@settings(max_examples=15, deadline=None)
@given(stop=st.integers(0, 40), world=st.integers(1, 4), new_world=st.integers(1, 4),
       budget=st.sampled_from([None, 300, 1000]))
def test_resume_anywhere_sees_each_remaining_row_once(tokenized: Path, stop: int, world: int,
                                                      new_world: int, budget: int | None):
    options: dict[str, Any] = {"max_tokens": budget} if budget else {"batch_size": 50}
    # a position past the epoch is refused (tested above): at most its end
    stop = min(stop, len(SprIterableDataset(tokenized, world_size=world, rank=0, **options)))
    if stop * world % new_world:
        new_world = world  # not a step boundary for that world size: refused, tested above
    resume_check(tokenized, stop=stop, world=world,
                 new_world=None if new_world == world else new_world, **options)


def test_tokenizing_on_the_fly_gives_the_pretokenized_tensors(dataset: Path, tokenized: Path,
                                                              corpora: Path):
    model = corpora / "tokenizers/llama2_tokenizer.model"
    on_the_fly = SprIterableDataset(dataset, batch_size=64, tokenizer=str(model), seed=4,
                                    columns=["src"])
    ready = SprIterableDataset(tokenized, batch_size=64, seed=4, columns=["src"])
    for a, b in zip(DataLoader(on_the_fly, batch_size=None, num_workers=1), ready, strict=True):
        assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["tgt_ids"], b["tgt_ids"])
        assert torch.equal(a["src_mask"], b["src_mask"]) and a["src"] == b["src"]


def test_a_token_budget_needs_token_columns(dataset: Path):
    with pytest.raises(InputError, match="spr-data tokenize"):
        SprIterableDataset(dataset, max_tokens=1000)
    with pytest.raises(InputError, match="batch_size"):
        SprIterableDataset(dataset)
    with pytest.raises(InputError, match="no column 'nope'"):
        SprIterableDataset(dataset, batch_size=4, columns=["nope"])


def test_stateful_dataloader_resumes_mid_epoch_with_workers(tokenized: Path):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader() -> Any:
        ds = SprIterableDataset(tokenized, max_tokens=800, seed=9, window=2048)
        return stateful.StatefulDataLoader(ds, batch_size=None, num_workers=2)

    full = [b["ids"].tolist() for b in loader()]
    first = loader()
    it = iter(first)
    head = [next(it)["ids"].tolist() for _ in range(13)]
    state = first.state_dict()
    del it, first
    second = loader()
    second.load_state_dict(state)
    tail = [b["ids"].tolist() for b in second]
    assert head + tail == full


@pytest.mark.parametrize("options", [{"batch_size": 40}, {"max_tokens": 800, "window": 2048}])
@pytest.mark.parametrize("taken", [0, 1, 2, -2, -1])
def test_stateful_dataloader_resumes_before_every_worker_has_yielded(tokenized: Path,
                                                                    options: dict[str, Any],
                                                                    taken: int):
    """A checkpoint at the start of an epoch, or after fewer batches than workers: the
    workers that yielded nothing yet still know which batch is theirs next (they once
    all said batch 0: the resumed epoch read a third of its batches three times). And one
    in the last batches (-2, -1: that many before the end), where a worker done with its
    share says the epoch's end, not a batch past it."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader() -> Any:
        ds = SprIterableDataset(tokenized, seed=5, **options)
        ds.set_epoch(1)
        return stateful.StatefulDataLoader(ds, batch_size=None, num_workers=3)

    full = [b["batch"] for b in loader()]
    first = loader()
    it = iter(first)
    head = [next(it)["batch"] for _ in range(taken % len(full))]
    state = first.state_dict()
    del it, first
    second = loader()
    second.load_state_dict(state)
    assert head + [b["batch"] for b in second] == full == list(range(len(full)))


@pytest.mark.parametrize("options", [{"batch_size": 40}, {"max_tokens": 800, "window": 2048}])
def test_persistent_workers_follow_set_epoch(tokenized: Path, options: dict[str, Any]):
    """``persistent_workers=True`` keeps the workers' copies of the dataset from epoch to
    epoch: each still reads the epoch the main process set (they once replayed epoch 0)."""
    reference = SprIterableDataset(tokenized, seed=5, **options)
    expected = []
    for epoch in range(3):
        reference.set_epoch(epoch)
        expected.append([b["ids"].tolist() for b in reference])
    assert expected[0] != expected[1] != expected[2]
    ds = SprIterableDataset(tokenized, seed=5, **options)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    got = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        got.append([b["ids"].tolist() for b in loader])
    assert got == expected
    # a deep copy of the dataset (its own shared position) feeds forked workers as well
    import copy

    twin = copy.deepcopy(ds)
    twin_loader = DataLoader(twin, batch_size=None, num_workers=2, persistent_workers=True,
                             multiprocessing_context="fork")
    for epoch in (2, 0):
        twin.set_epoch(epoch)
        assert [b["ids"].tolist() for b in twin_loader] == expected[epoch]
    # a resume point set in the main process reaches the same workers too
    state = SprIterableDataset(tokenized, seed=5, **options).state_dict(batches_done=3)
    state["epoch"] = 1
    ds.load_state_dict(state)
    ds.set_epoch(1)
    assert [b["ids"].tolist() for b in loader] == expected[1][3:]


def test_a_state_outside_its_epoch_is_refused(dataset: Path):
    ds = SprIterableDataset(dataset, batch_size=50)
    per_rank = len(ds)
    for done in (per_rank + 1, 10 * per_rank):  # e.g. a global step counter
        refused = SprIterableDataset(dataset, batch_size=50)
        state = {**ds.state_dict(batches_done=0), "batches_done": done, "epoch": 4}
        with pytest.raises(InputError, match="not the global step"):
            refused.load_state_dict(state)
        assert refused.epoch == 0 and refused._shared.tolist() == [0, 0]  # left as it was
    with pytest.raises(InputError, match="batches_done should be a whole number ≥ 0, got -3"):
        SprIterableDataset(dataset, batch_size=50).load_state_dict(
            {**ds.state_dict(batches_done=0), "batches_done": -3})  # saved by hand, or old
    end = SprIterableDataset(dataset, batch_size=50)
    end.load_state_dict(ds.state_dict(batches_done=per_rank))  # the epoch's end: nothing left
    assert list(end) == []
    # the end of an epoch whose last steps wrap around on 4 ranks (more batches than one rank
    # has): still the end on 1 rank
    wrapped = SprIterableDataset(dataset, batch_size=64, drop_remainder=False, world_size=4,
                                 rank=0)
    alone = SprIterableDataset(dataset, batch_size=64, drop_remainder=False)
    assert len(wrapped) * 4 > len(alone)
    alone.load_state_dict(wrapped.state_dict(batches_done=len(wrapped)))
    assert list(alone) == []
    # an epoch's end is an epoch boundary on any world size, a step boundary or not, with
    # a remainder wrapped or dropped (dropped, the default: 4 ranks end after fewer batches
    # than 1 rank has, and the end of the epoch on 4 read on as batches left on 1; found by
    # rereading this code)
    for drop in (False, True):
        for saved, loaded in ((4, 5), (5, 4), (3, 2), (4, 1)):
            ending = SprIterableDataset(dataset, batch_size=64, drop_remainder=drop,
                                        world_size=saved, rank=0)
            there = SprIterableDataset(dataset, batch_size=64, drop_remainder=drop,
                                       world_size=loaded, rank=0)
            there.load_state_dict(ending.state_dict(batches_done=len(ending)))
            assert list(there) == [], (drop, saved, loaded)
    # a worker's state past its epoch by more than any loader's workers is refused too
    forged = {**ds.state_dict(batches_done=5), "batches_done": 10**9, "worker_next": 10**9}
    with pytest.raises(InputError, match="not the global step"):
        SprIterableDataset(dataset, batch_size=50).load_state_dict(forged)


@pytest.mark.parametrize(("options", "message"), [
    ({"batch_size": 0}, "batch_size should be a whole number ≥ 1, got 0"),
    ({"max_tokens": 0}, "max_tokens should be a whole number ≥ 1, got 0"),
    ({"batch_size": 2.5}, "batch_size should be a whole number ≥ 1, got 2.5"),
    ({"batch_size": True}, "batch_size should be a whole number"),
    ({"batch_size": 8, "window": 0}, "window should be a whole number ≥ 1, got 0"),
    ({"batch_size": 8, "block": 1}, "block should be a whole number ≥ 2, got 1; leave it out"),
    ({"batch_size": 8, "block": -2}, "block should be a whole number ≥ 2, got -2"),
])
def test_bad_loader_arguments_are_refused_where_they_are_given(tokenized: Path,
                                                              options: dict[str, Any],
                                                              message: str):
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        SprIterableDataset(tokenized, **options)


def test_a_whole_float_budget_is_read_as_its_number(tokenized: Path):
    as_float = SprIterableDataset(tokenized, max_tokens=16e3, seed=1)
    as_int = SprIterableDataset(tokenized, max_tokens=16000, seed=1)
    assert as_float.max_tokens == 16000
    assert [b["ids"].tolist() for b in as_float] == [b["ids"].tolist() for b in as_int]


def test_a_token_budget_with_a_tokenizer_says_which_to_drop(dataset: Path, tokenized: Path,
                                                            corpora: Path):
    model = str(corpora / "tokenizers/llama2_tokenizer.model")
    with pytest.raises(InputError, match=r"drop tokenizer= to use the token ids this dataset "
                                         r"holds \(src_ids, tgt_ids\)"):
        SprIterableDataset(tokenized, max_tokens=1000, tokenizer=model)
    with pytest.raises(InputError, match="run `spr-data tokenize` on the dataset first, or use "
                                         "batch_size"):
        SprIterableDataset(dataset, max_tokens=1000, tokenizer=model)


def test_batches_are_ready_for_the_device(tokenized: Path):
    from spr_data.pipeline.torch_data import to_device

    batch = next(iter(SprIterableDataset(tokenized, batch_size=8, columns=["src"])))
    moved = to_device(batch, "cpu")
    assert moved["src_ids"].dtype == torch.long and moved["src_mask"].dtype == torch.bool
    assert moved["src"] == batch["src"] and moved["batch"] == 0
    assert moved["src_ids"].shape == moved["src_mask"].shape
    # DataLoader(pin_memory=True) pins these tensors: each is one contiguous buffer
    assert all(v.is_contiguous() for v in moved.values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("stop", [5, 6, 7])
def test_resume_through_dataloader_workers_gives_the_exact_next_batches(tokenized: Path,
                                                                        stop: int):
    def loader(ds: SprIterableDataset) -> list[list[int]]:
        return [b["ids"].tolist() for b in DataLoader(ds, batch_size=None, num_workers=2)]

    full = loader(SprIterableDataset(tokenized, max_tokens=900, seed=3))
    state = SprIterableDataset(tokenized, max_tokens=900, seed=3).state_dict(batches_done=stop)
    resumed = SprIterableDataset(tokenized, max_tokens=900, seed=3)
    resumed.load_state_dict(state)
    assert loader(resumed) == full[stop:]  # in order, even when stop is odd


def test_the_token_plan_is_made_once_and_shipped_to_the_workers(tokenized: Path):
    import pickle

    ds = SprIterableDataset(tokenized, max_tokens=700, window=512)
    ds.set_epoch(2)  # plans in this (the main) process
    worker_copy = pickle.loads(pickle.dumps(ds))  # what a DataLoader worker gets
    calls = []
    real = worker_copy.sizes_of
    worker_copy.sizes_of = lambda rows: calls.append(len(rows)) or real(rows)  # type: ignore[method-assign]
    plan = worker_copy._plan(2)
    assert not calls  # no pass over every row's size in the worker
    assert plan.total_batches == ds._plan(1).total_batches
    first = worker_copy.batch_rows(0, 2)
    assert calls and first.tolist() == ds.batch_rows(0).tolist()  # a window packed on demand


def test_the_usual_epoch_loop_resumes_and_a_later_pass_starts_over(dataset: Path):
    """``load_state_dict`` then ``for epoch in range(state["epoch"], E): set_epoch(epoch)``
    continues where the state left off; the next epoch, and a second pass, start at batch 0;
    the batch number each batch carries is what to save."""
    def epochs(ds: SprIterableDataset, first: int, last: int) -> list[list[int]]:
        out = []
        for epoch in range(first, last):
            ds.set_epoch(epoch)
            out += [b["batch"] for b in DataLoader(ds, batch_size=None, num_workers=2)]
        return [out]

    ds = SprIterableDataset(dataset, batch_size=100, seed=2)
    per_epoch = len(ds)
    ds.set_epoch(1)
    saved = None
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        if batch["batch"] == 9:
            saved = ds.state_dict(batches_done=batch["batch"] + 1)
            break
    resumed = SprIterableDataset(dataset, batch_size=100, seed=2)
    resumed.load_state_dict(saved)  # type: ignore[arg-type]
    assert epochs(resumed, 1, 3) == [list(range(10, per_epoch)) + list(range(per_epoch))]
    again = SprIterableDataset(dataset, batch_size=100, seed=2)
    again.load_state_dict(saved)  # type: ignore[arg-type]
    first_pass, second_pass = ([b["batch"] for b in again] for _ in range(2))
    assert first_pass == list(range(10, per_epoch))
    assert second_pass == list(range(per_epoch))  # a second pass is the whole epoch


def test_a_worker_state_resumes_on_its_own_world_size_only(tokenized: Path):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = SprIterableDataset(tokenized, batch_size=10, world_size=2, rank=0)
    loader = stateful.StatefulDataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(6):
        next(it)
    state = loader.state_dict()
    del it
    other = SprIterableDataset(tokenized, batch_size=10, world_size=1, rank=0)
    resumed = stateful.StatefulDataLoader(other, batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    with pytest.raises(Exception, match="resumes on 2 ranks only"):
        next(iter(resumed))


def test_state_dict_without_batches_done_warns_where_it_cannot_know(dataset: Path):
    ds = SprIterableDataset(dataset, batch_size=100)
    for _ in DataLoader(ds, batch_size=None, num_workers=1):
        break
    with pytest.warns(UserWarning, match="pass batches_done"):
        ds.state_dict()
