"""Random access, iteration and sharding of an ingested dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spr_data import DatasetError, ingest, open_dataset
from spr_data.outdir import REJECTS_DIR


def make_corpus(tmp_path: Path, n: int = 5000) -> tuple[Path, list[tuple[str, str]]]:
    pairs = [(f"sentence {i} " + "word " * (i % 17), f"Satz {i} ä" + "ü" * (i % 5))
             for i in range(n)]
    src = tmp_path / "c.tsv"
    src.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    return src, pairs


@pytest.fixture
def sharded(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    src, pairs = make_corpus(tmp_path)
    ingest([src], tmp_path / "ds", shard_rows=700)
    return tmp_path / "ds", pairs


def test_shards_roll_over_by_rows(sharded):
    path, pairs = sharded
    ds = open_dataset(path)
    assert [s.rows for s in ds.manifest.shards] == [700] * 7 + [100]
    assert [s.first_id for s in ds.manifest.shards] == list(range(0, 5000, 700))
    assert len(ds) == len(pairs)


def test_shards_roll_over_by_bytes(tmp_path: Path):
    src, pairs = make_corpus(tmp_path)
    ingest([src], tmp_path / "ds", shard_bytes=40_000)
    ds = open_dataset(tmp_path / "ds")
    assert len(ds.manifest.shards) > 5
    assert all(s.bytes < 40_000 * 1.5 for s in ds.manifest.shards)
    assert ds.take(range(len(ds))).column("src").to_pylist() == [a for a, _ in pairs]


def test_take_returns_rows_in_the_order_given_across_shards(sharded):
    path, pairs = sharded
    ds = open_dataset(path)
    rng = np.random.default_rng(0)
    for _ in range(20):
        idx = rng.integers(0, len(pairs), size=int(rng.integers(1, 300)))
        table = ds.take(idx)
        assert list(zip(table.column("src").to_pylist(), table.column("tgt").to_pylist(),
                        strict=True)) == [pairs[i] for i in idx]
        assert table.column("id").to_pylist() == idx.tolist()


def test_take_with_repeats_and_single_shard(sharded):
    path, pairs = sharded
    ds = open_dataset(path)
    assert ds.take([3, 3, 1]).column("src").to_pylist() == [pairs[3][0], pairs[3][0], pairs[1][0]]
    assert ds.take([]).num_rows == 0


def test_getitem_and_bounds(sharded):
    path, pairs = sharded
    ds = open_dataset(path)
    assert ds[0]["src"] == pairs[0][0]
    assert ds[-1]["tgt"] == pairs[-1][1]
    assert ds[2100]["origin"] == {"input": 0, "line": 2101}
    with pytest.raises(IndexError):
        ds[len(pairs)]
    with pytest.raises(IndexError):
        ds.take([0, len(pairs)])
    # negative positions count from the end, as ds[-1] does (take([-1]) raised)
    assert ds.take([-1, 0, -len(pairs)]).column("tgt").to_pylist() == [
        pairs[-1][1], pairs[0][1], pairs[0][1]]
    with pytest.raises(IndexError, match=f"row {-len(pairs) - 1} is out of range"):
        ds.take([-len(pairs) - 1])


def test_iter_batches_yields_every_row_once_in_order(sharded):
    path, pairs = sharded
    ds = open_dataset(path)
    batches = list(ds.iter_batches(256))
    assert max(b.num_rows for b in batches) == 256
    assert [s for b in batches for s in b.column("src").to_pylist()] == [a for a, _ in pairs]


def test_scan_gives_a_polars_lazyframe(sharded):
    path, pairs = sharded
    frame = open_dataset(path).scan().select("id", "src").collect()
    assert frame.height == len(pairs)
    assert frame["src"].to_list()[:3] == [a for a, _ in pairs[:3]]


def test_opening_reads_only_the_manifest(sharded):
    path, _ = sharded
    (path / "shard-00003.arrow").unlink()
    ds = open_dataset(path)  # still opens: shards are mapped on first use
    assert ds[0]["id"] == 0
    with pytest.raises(DatasetError, match="shard-00003"):
        ds[2100]


def test_same_inputs_give_byte_identical_shards(tmp_path: Path):
    src, _ = make_corpus(tmp_path)
    ingest([src], tmp_path / "a", shard_rows=900)
    ingest([src], tmp_path / "b", shard_rows=900)
    a = json.loads((tmp_path / "a/manifest.json").read_text())
    b = json.loads((tmp_path / "b/manifest.json").read_text())
    assert a["shards"] == b["shards"]
    for shard in a["shards"]:
        assert (tmp_path / "a" / shard["file"]).read_bytes() == \
            (tmp_path / "b" / shard["file"]).read_bytes()


def test_empty_input_gives_an_empty_dataset(tmp_path: Path):
    src = tmp_path / "empty.txt"
    src.write_bytes(b"")
    summary = ingest([src], tmp_path / "ds")
    ds = open_dataset(tmp_path / "ds")
    assert summary.rows == len(ds) == 0
    assert ds.take([]).num_rows == 0 and ds.scan().collect().height == 0


def test_manifest_holds_the_contract_keys(sharded):
    path, _ = sharded
    m = json.loads((path / "manifest.json").read_text())
    for key in ("format_version", "kind", "langs", "rows", "shards", "rejects", "lineage"):
        assert key in m
    assert set(m["shards"][0]) >= {"file", "rows", "bytes", "hash", "first_id"}
    assert m["lineage"]["inputs"][0]["files"][0]["sha256"]
    assert m["lineage"]["stage"] == "ingest"
    rejects = open_dataset(path / REJECTS_DIR)
    assert "reason" in rejects.schema.names


def test_take_refuses_masks_and_fractions(sharded):
    """A bool mask would read as rows 0 and 1, and 1.7 as row 1: both are refused."""
    ds = open_dataset(sharded[0])
    with pytest.raises(TypeError, match=r"np\.flatnonzero"):
        ds.take(np.arange(len(ds)) % 2 == 0)
    with pytest.raises(TypeError, match="integer row positions"):
        ds.take([1.7])
    assert ds.take(np.array([3], dtype=np.uint32)).column("id").to_pylist() == \
        ds.take([3]).column("id").to_pylist()
    assert ds.take([]).num_rows == 0


@pytest.mark.parametrize("flip", [(3, 0xFF), (1, 0x04)])
def test_a_damaged_offsets_buffer_is_named_not_a_crash(tmp_path: Path, flip: tuple[int, int]):
    """Found by a fault trial: one byte flipped in a text column's offsets (a shard is not
    re-hashed when mapped) crashed the process (a segfault in pyarrow) or raised pyarrow's
    ``Negative offsets`` with no shard named. Now the shard's offsets are checked when it is
    opened: one line naming it, from ``take`` and from the training iterator."""
    import pyarrow as pa

    from spr_data.pipeline.torch_data import SprIterableDataset

    tsv = tmp_path / "p.en-de.tsv"
    tsv.write_text("".join(f"Two dogs {i}.\tZwei Hunde {i}.\n" for i in range(5000)))
    ingest([tsv], tmp_path / "ds")
    shard = tmp_path / "ds" / "shard-00000.arrow"
    data = bytearray(shard.read_bytes())
    whole = pa.py_buffer(bytes(data))
    src = pa.ipc.open_file(whole).read_all().column("src").chunk(0)
    at = src.buffers()[1].address - whole.address + 4 * 2000 + flip[0]  # offset of row 2000
    data[at] ^= flip[1]
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=f"shard {shard} is damaged: the offsets"):
        open_dataset(tmp_path / "ds").take(range(1990, 2010))
    with pytest.raises(DatasetError, match="is damaged: the offsets of a string column"):
        for _ in SprIterableDataset(tmp_path / "ds", batch_size=64, columns=["src"]):
            pass
