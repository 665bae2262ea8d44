"""The fast read paths: single rows, column-pruned selections and padded token ids.

Every fast path is checked against a reference that does not use it: pyarrow reading the shard
files itself, or the full ``take`` the training iterator used before it read only the columns a
batch needs. On a real tokenized corpus in many shards, and on shards of varied column types,
with nulls (Arrow's path) and with two record batches (no numpy views).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from spr_data import InputError, ingest, open_dataset
from spr_data.dataset import Dataset
from spr_data.fsio import sha256_file
from spr_data.manifest import ShardInfo, write_manifest

torch = pytest.importorskip("torch")

from spr_data.pipeline.torch_data import SprIterableDataset, pad  # noqa: E402


@pytest.fixture(scope="module")
def tokenized(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,387 real en-bn pairs in 5 shards, tokenized with Llama 2's model."""
    from spr_data.pipeline.tokenize import tokenize

    root = tmp_path_factory.mktemp("rows")
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], root / "ds",
           langs=["en", "bn"], shard_rows=1000)
    tokenize(root / "ds", root / "tok",
             tokenizer=str(corpora / "tokenizers/llama2_tokenizer.model"), workers=1)
    return root / "tok"


def whole(path: Path) -> pa.Table:
    """Every row, read by pyarrow from the shard files themselves (the reference)."""
    ds = open_dataset(path)
    tables = []
    for info in ds.manifest.shards:
        with pa.memory_map(str(path / info.file)) as source:
            tables.append(pa.ipc.open_file(source).read_all())
    return pa.concat_tables(tables)


def reference_padded(table: pa.Table, column: str, pad_id: int) -> tuple[Any, Any]:
    """How the iterator padded a full ``take`` before it read columns on their own."""
    col = table.column(column).combine_chunks()
    offsets = col.offsets.to_numpy()
    ids, mask = pad(col.values.to_numpy()[offsets[0]:offsets[-1]],
                    np.diff(offsets).astype(np.int64), pad_id)
    return ids.numpy(), mask.numpy()


def index_sets(ds: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
    """Rows from one shard, spread thin over every shard, many per shard, repeats, one."""
    starts = ds._starts
    one_shard = rng.integers(starts[1], starts[2], 300)
    thin = np.concatenate([rng.integers(a, b, 2) for a, b in itertools.pairwise(starts)])
    thick = rng.integers(0, len(ds), 2000)
    return [one_shard, rng.permutation(thin), thick, np.array([7, 7, 3000, 7]),
            np.array([len(ds) - 1])]


def check_selection(ds: Dataset, reference: pa.Table, idx: np.ndarray) -> None:
    expected = reference.take(pa.array(idx))
    rows = ds.select_rows(idx)
    assert len(rows) == len(idx)
    assert rows.table().equals(expected)
    assert ds.take(idx).equals(expected)
    assert ds.take(idx, columns=["src_ids", "id"]).equals(expected.select(["src_ids", "id"]))
    np.testing.assert_array_equal(rows.values("id"), expected.column("id").to_numpy())
    for column in ("src_ids", "tgt_ids"):
        ids, mask = rows.padded(column, pad_id=5)
        want_ids, want_mask = reference_padded(expected, column, 5)
        assert ids.dtype == np.int64 and mask.dtype == np.bool_
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(mask, want_mask)
        np.testing.assert_array_equal(rows.lengths(column), mask.sum(axis=1))


def test_selections_equal_pyarrow_on_a_real_tokenized_corpus(tokenized: Path):
    ds = open_dataset(tokenized)
    assert len(ds.manifest.shards) >= 4
    reference = whole(tokenized)
    rng = np.random.default_rng(0)
    paths = set()
    for idx in index_sets(ds, rng) + [rng.integers(0, len(ds), int(n)) for n in
                                       rng.integers(2, 400, 15)]:
        check_selection(ds, reference, idx)
        paths.add(ds.select_rows(idx)._by_row())
    assert paths == {True, False}  # rows read one by one, and shard by shard


def test_single_rows_equal_pyarrow(tokenized: Path):
    ds = open_dataset(tokenized)
    reference = whole(tokenized)
    for i in [*range(0, len(ds), 97), len(ds) - 1, -1]:
        row = reference.slice(i % len(ds), 1).to_pylist()[0]
        assert ds[i] == row
        assert ds.take([i % len(ds)]).to_pylist() == [row]
        assert [type(v) for v in ds[i].values()] == [type(v) for v in row.values()]


def test_empty_and_bad_selections(tokenized: Path):
    ds = open_dataset(tokenized)
    empty = ds.select_rows([])
    assert empty.table(["id", "src"]).schema.names == ["id", "src"]
    assert empty.values("id").shape == (0,) and empty.lengths("src_ids").shape == (0,)
    ids, mask = empty.padded("src_ids")
    assert ids.shape == mask.shape == (0, 0)
    with pytest.raises(InputError, match="no column 'nope'"):
        ds.select_rows([1]).table(["nope"])
    with pytest.raises(InputError, match="numeric column"):
        ds.select_rows([1]).values("src")
    with pytest.raises(InputError, match="list-of-integers"):
        ds.select_rows([1]).padded("src")
    with pytest.raises(IndexError, match="out of range"):
        ds.select_rows([0, len(ds)])


def test_column_pruned_batches_equal_full_take_batches(tokenized: Path):
    """The iterator reads only the columns a batch holds; its batches are what padding a
    full ``take`` of the same rows gives, for a token budget and for fixed-size batches."""
    ds = open_dataset(tokenized)
    for options in ({"max_tokens": 700, "window": 1024}, {"batch_size": 50}):
        it = SprIterableDataset(tokenized, seed=3, columns=["src"], pad_id=1,
                                **options)  # type: ignore[arg-type]
        count = 0
        for batch in it:
            full = ds.take(it.batch_rows(batch["batch"]))
            assert batch["ids"].tolist() == full.column("id").to_pylist()
            assert batch["src"] == full.column("src").to_pylist()
            for column in ("src_ids", "tgt_ids"):
                ids, mask = reference_padded(full, column, 1)
                assert torch.equal(batch[column], torch.from_numpy(ids))
                assert torch.equal(batch[column[:-4] + "_mask"], torch.from_numpy(mask))
            count += 1
        assert count == len(it)


def varied_dataset(source: Path, out: Path) -> pa.Table:
    """``source`` rewritten in shards with more column types: float32, float16, int8,
    binary, large_string, list<uint32>; one shard with nulls, one of two record batches."""
    ds = open_dataset(source)
    table = whole(source)
    n = table.num_rows
    extra = {
        "score": pa.array(np.linspace(-1, 1, n), pa.float32()),
        "half": pa.array(np.linspace(0, 2, n).astype(np.float16), pa.float16()),
        "tiny": pa.array((np.arange(n) % 250 - 125).astype(np.int8)),
        "blob": pa.array([bytes([i % 256]) * (i % 4) for i in range(n)], pa.binary()),
        "big": pa.array([f"ক{i}" for i in range(n)], pa.large_string()),
        "wide": table.column("tgt_ids").cast(pa.list_(pa.uint32())),
    }
    for name, values in extra.items():
        table = table.append_column(name, values)
    out.mkdir()
    shards = []
    bounds = [0, 900, 1500, 2900, n]
    pieces = []
    for k in range(len(bounds) - 1):
        piece = table.slice(bounds[k], bounds[k + 1] - bounds[k])
        if k == 1:  # nulls: this shard is read through Arrow, not numpy views
            score = piece.column("score").combine_chunks()
            nulls = pa.array(np.arange(len(piece)) % 5 == 0)
            piece = piece.set_column(piece.schema.get_field_index("score"),
                                     pa.field("score", pa.float32()),
                                     pa.compute.if_else(nulls, None, score))
        pieces.append(piece)
        path = out / f"shard-{k:05d}.arrow"
        with pa.OSFile(str(path), "wb") as sink, \
                pa.ipc.new_file(sink, piece.schema) as writer:
            for batch in piece.combine_chunks().to_batches(
                    max_chunksize=700 if k == 2 else None):  # shard 2: two batches
                writer.write_batch(batch)
        shards.append(ShardInfo(path.name, piece.num_rows, path.stat().st_size,
                                sha256_file(path), piece.column("id")[0].as_py()))
    schema = pieces[0].schema
    write_manifest(out, dataclasses.replace(ds.manifest, schema=schema, shards=shards))
    return pa.concat_tables([p.cast(schema) for p in pieces])


def test_varied_types_nulls_and_several_batches(tokenized: Path, tmp_path: Path):
    reference = varied_dataset(tokenized, tmp_path / "varied")
    ds = open_dataset(tmp_path / "varied")
    assert [ds._shard(k).leaves is not None for k in range(4)] == [True, False, False, True]
    for i in [0, 899, 900, 1499, 1500, 2200, 2900, len(ds) - 1]:
        assert ds[i] == reference.slice(i, 1).to_pylist()[0]
    rng = np.random.default_rng(1)
    for idx in [*index_sets(ds, rng), rng.integers(0, 900, 50), rng.integers(3000, 4000, 3)]:
        expected = reference.take(pa.array(idx))
        rows = ds.select_rows(idx)
        assert rows.table().equals(expected)
        assert rows.table(["big", "half"]).equals(expected.select(["big", "half"]))
        np.testing.assert_array_equal(rows.values("score"),
                                      expected.column("score").to_numpy(zero_copy_only=False))
        np.testing.assert_array_equal(rows.values("half"), expected.column("half").to_numpy())
        for column in ("src_ids", "wide"):
            ids, mask = rows.padded(column)
            want_ids, want_mask = reference_padded(expected, column, 0)
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(mask, want_mask)


def test_a_networked_dataset_holding_two_shards_reads_the_same(tokenized: Path):
    """Over a network filesystem without a cache, a dataset keeps only ``max_in_memory``
    shards; a selection spread over every shard still reads each row from its own shard."""
    from spr_data.reader import ReaderOptions
    from spr_data.testing import FaultyFileSystem

    reference = whole(tokenized)
    ds = open_dataset(tokenized, reader=ReaderOptions(filesystem=FaultyFileSystem(rate=0.0),
                                                      max_in_memory=2))
    assert ds.remote and len(ds.manifest.shards) > 2
    rng = np.random.default_rng(2)
    for idx in index_sets(ds, rng):
        check_selection(ds, reference, idx)
    assert [ds[i] for i in range(0, len(ds), 500)] == \
        reference.take(pa.array(range(0, len(ds), 500))).to_pylist()


def test_worker_batches_are_one_buffer_and_equal_the_in_process_ones(tokenized: Path):
    """In a DataLoader worker a batch's tensors are views of one storage (one shared-memory
    segment to send); their values, dtypes and shapes are those of the in-process batches."""
    from torch.utils.data import DataLoader

    def make() -> SprIterableDataset:
        return SprIterableDataset(tokenized, max_tokens=900, seed=5, columns=["tgt"])

    here = list(make())
    there = list(DataLoader(make(), batch_size=None, num_workers=1))
    assert len(here) == len(there) > 10
    for a, b in zip(here, there, strict=True):
        assert a.keys() == b.keys() and a["batch"] == b["batch"] and a["tgt"] == b["tgt"]
        tensors = [k for k, v in a.items() if isinstance(v, torch.Tensor)]
        for k in tensors:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k])
            assert b[k].is_contiguous()
        assert len({b[k].untyped_storage().data_ptr() for k in tensors}) == 1
        assert len({a[k].untyped_storage().data_ptr() for k in tensors}) == len(tensors)
