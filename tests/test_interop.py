"""A dataset directory opens as exactly its kept rows in the tools people use.

HF ``datasets``, pyarrow's dataset discovery, polars globs and duckdb (over Arrow) read a
cleaned WMT sample straight from its directory; none of them mixes in the rejects, and the
rejects open on their own. The README's one-liners are run as written. The adapters hand
over the memory-mapped shards, checked by where their buffers live and by anonymous memory.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
import pytest

from spr_data import OutputError, ingest, open_dataset, verify_dataset
from spr_data.card import CARD_NAME, REJECTS_CONFIG
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import clean
from spr_data.writer import REJECTS_SHARD_SUFFIX

datasets = pytest.importorskip("datasets")
pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wmt_clean(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The WMT en-de sample, ingested and cleaned with the shipped en-de recipe."""
    root = tmp_path_factory.mktemp("wmt")
    ingest([corpora / "parallel/opennmt_wmt_en-de.train.en.gz",
            corpora / "parallel/opennmt_wmt_en-de.train.de.gz"], root / "ds")
    clean(root / "ds", root / "clean", recipe=ROOT / "data_manifests/en-de.toml", workers=2)
    return root / "clean"


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF's cache in a temporary directory, and no network."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return tmp_path / "hf"


def ids(dataset_path: Path) -> np.ndarray:
    ds = open_dataset(dataset_path)
    return np.sort(ds.take(np.arange(len(ds))).column("id").to_numpy())


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_the_layout_keeps_rejects_apart(wmt_clean: Path):
    ds = open_dataset(wmt_clean)
    assert ds.manifest.rejects_dir == REJECTS_DIR and REJECTS_DIR.startswith("_")
    assert len(ds.rejects) > 0 and len(ds) > 0
    assert all(s.file.endswith(".arrow") for s in ds.manifest.shards)
    assert all(s.file.endswith(REJECTS_SHARD_SUFFIX)
               for s in ds.rejects.manifest.shards)
    assert (wmt_clean / CARD_NAME).is_file() and (wmt_clean / REJECTS_DIR / CARD_NAME).is_file()
    assert verify_dataset(wmt_clean).ok


def test_hf_load_dataset_gives_exactly_the_kept_rows_and_the_rejects(wmt_clean: Path,
                                                                      hf_cache: Path):
    before = listing(wmt_clean)
    ds = open_dataset(wmt_clean)
    rows = datasets.load_dataset(str(wmt_clean))["train"]
    assert rows.num_rows == len(ds)
    assert rows.column_names == ds.schema.names
    assert np.array_equal(np.sort(np.asarray(rows["id"], dtype=np.uint64)), ids(wmt_clean))
    first = ds[0]
    assert rows[0]["src"] == first["src"] and rows[0]["tgt"] == first["tgt"]
    rejects = datasets.load_dataset(str(wmt_clean), REJECTS_CONFIG)["train"]
    assert rejects.num_rows == len(ds.rejects)
    assert "reason" in rejects.column_names
    assert np.array_equal(np.sort(np.asarray(rejects["id"], dtype=np.uint64)),
                          ids(wmt_clean / REJECTS_DIR))
    # the rejects directory opens on its own as well
    alone = datasets.load_dataset(str(wmt_clean / REJECTS_DIR))["train"]
    assert alone.num_rows == rejects.num_rows
    assert listing(wmt_clean) == before  # HF wrote nothing into the dataset


def test_discovery_and_globs_read_only_the_kept_rows(wmt_clean: Path):
    kept = ids(wmt_clean)
    found = pds.dataset(wmt_clean, format="ipc", exclude_invalid_files=True).to_table()
    assert np.array_equal(np.sort(found.column("id").to_numpy()), kept)
    for pattern in ("**/*.arrow", "*.arrow"):
        frame = pl.scan_ipc(f"{wmt_clean}/{pattern}").select("id").collect()
        assert np.array_equal(np.sort(frame["id"].to_numpy()), kept), pattern
    rows = found  # noqa: F841 - duckdb finds it by name
    assert duckdb.sql("SELECT count(DISTINCT id) FROM rows").fetchall()[0][0] == len(kept)
    rejected = pl.scan_ipc(f"{wmt_clean}/{REJECTS_DIR}/*{REJECTS_SHARD_SUFFIX}").collect()
    assert np.array_equal(np.sort(rejected["id"].to_numpy()), ids(wmt_clean / REJECTS_DIR))


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The dataset directory", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "README 'The dataset directory' should hold one python block"
    return blocks[0]


def test_the_readme_one_liners_run_as_written(wmt_clean: Path, hf_cache: Path):
    code = readme_snippet()
    placeholder = re.search(r'^DIR = "([^"]+)"', code, flags=re.M)
    assert placeholder is not None
    scope: dict[str, object] = {}
    runnable = compile(code.replace(placeholder.group(1), str(wmt_clean)), "README", "exec")
    exec(runnable, scope)  # the README block, as written
    ds = open_dataset(wmt_clean)
    n, n_rejects = len(ds), len(ds.rejects)
    assert scope["rows"].num_rows == n
    assert scope["rejects"].num_rows == n_rejects
    assert scope["frame"].height == n
    assert scope["kept"].num_rows == n
    assert scope["count"] == n
    assert scope["rejected"].height == n_rejects
    table, frame, hf = scope["mapped"]
    assert table.num_rows == frame.height == len(hf) == n


def _mapped_ranges(path_part: str) -> list[tuple[int, int]]:
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and path_part in fields[5]:
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((lo, hi))
    return ranges


def _buffers_in(table: pa.Table, ranges: list[tuple[int, int]]) -> tuple[int, int]:
    """(bytes of the table's buffers inside ``ranges``, bytes of all its buffers)."""
    inside = total = 0
    for column in table.columns:
        for chunk in column.chunks:
            for arr in [chunk, *(chunk.field(i) for i in range(chunk.type.num_fields))] \
                    if pa.types.is_struct(chunk.type) else [chunk]:
                for buf in arr.buffers():
                    if buf is None or buf.size == 0:
                        continue
                    total += buf.size
                    if any(lo <= buf.address and buf.address + buf.size <= hi
                           for lo, hi in ranges):
                        inside += buf.size
    return inside, total


def test_to_pyarrow_and_to_hf_hand_over_the_mapped_shards(wmt_clean: Path):
    ds = open_dataset(wmt_clean)
    table = ds.to_pyarrow()
    assert table.equals(ds.take(np.arange(len(ds))))
    ranges = _mapped_ranges(str(wmt_clean.resolve()))
    assert ranges, "the shards should be memory-mapped"
    inside, total = _buffers_in(table, ranges)
    assert total and inside == total
    hf = ds.to_hf()
    assert len(hf) == len(ds) and hf.column_names == ds.schema.names
    assert hf[5]["src"] == ds[5]["src"] and hf[len(ds) - 1]["id"] == ds[len(ds) - 1]["id"]
    inside, total = _buffers_in(hf.data.table, ranges)
    assert total and inside > 0.99 * total  # HF rebuilds a struct's validity bitmap, 1 bit a row
    rejects = ds.rejects.to_hf()
    assert "reason" in rejects.column_names


def _rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no RssAnon in /proc/self/status")
    return 0


def test_to_polars_keeps_the_text_in_the_map(corpora: Path, tmp_path: Path):
    """Twenty copies of the WMT sample (~50 MB of text): reading every string through
    ``to_polars()`` must not copy the text into anonymous memory."""
    lines = {}
    for side in ("en", "de"):
        raw = gzip.decompress((corpora / f"parallel/opennmt_wmt_en-de.train.{side}.gz")
                              .read_bytes())
        lines[side] = tmp_path / f"big.{side}"
        lines[side].write_bytes(raw * 20)
    ingest([lines["en"], lines["de"]], tmp_path / "big", langs=["en", "de"])
    ds = open_dataset(tmp_path / "big")
    text_bytes = sum(pa.compute.sum(pa.compute.binary_length(ds.to_pyarrow().column(c))).as_py()
                     for c in ("src", "tgt"))
    assert text_bytes > 40e6
    gc.collect()
    before = _rss_anon()
    frame = ds.to_polars()
    total = frame.select(pl.col("src").str.len_bytes().sum() + pl.col("tgt").str.len_bytes()
                         .sum()).item()
    grown = _rss_anon() - before
    assert total == text_bytes and frame.height == len(ds)
    assert grown < text_bytes / 2, f"RssAnon grew by {grown:,} bytes for {text_bytes:,}"


def test_a_dataset_in_the_old_layout_still_opens(tmp_path: Path):
    """Datasets written with ``rejects/`` and ``.arrow`` reject shards: readers follow the
    manifest's ``rejects_dir`` and shard names."""
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n\tno source\nc\td\n")
    ingest([src], tmp_path / "new")
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "new", old)
    (old / CARD_NAME).unlink()
    (old / REJECTS_DIR / CARD_NAME).unlink()
    (old / REJECTS_DIR).rename(old / "rejects")
    manifest = json.loads((old / "rejects/manifest.json").read_text())
    for shard in manifest["shards"]:
        new_name = shard["file"].removesuffix(REJECTS_SHARD_SUFFIX) + ".arrow"
        (old / "rejects" / shard["file"]).rename(old / "rejects" / new_name)
        shard["file"] = new_name
    (old / "rejects/manifest.json").write_text(json.dumps(manifest))
    top = json.loads((old / "manifest.json").read_text())
    top["rejects_dir"] = "rejects"
    (old / "manifest.json").write_text(json.dumps(top))
    ds = open_dataset(old)
    assert len(ds) == 2 and ds.rejects is not None and len(ds.rejects) == 1
    assert ds.rejects[0]["reason"] == "empty_field"
    assert verify_dataset(old).ok


def test_a_dataset_without_rejects_has_only_the_default_config(tmp_path: Path, hf_cache: Path):
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\nc\td\n")
    ingest([src], tmp_path / "ds")
    card = (tmp_path / "ds" / CARD_NAME).read_text()
    assert f"config_name: {REJECTS_CONFIG}" not in card and "No row was rejected" in card
    rows = datasets.load_dataset(str(tmp_path / "ds"))["train"]
    assert rows["src"] == ["a", "c"]


def test_a_readme_of_the_users_own_is_never_replaced(tmp_path: Path):
    """``--overwrite`` replaces the card spr-data wrote, but a README.md a person put beside
    a dataset is theirs: the run is refused and the file stays."""
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n")
    ingest([src], tmp_path / "ds")
    ingest([src], tmp_path / "ds", overwrite=True)  # our own card: replaced
    assert "spr-data dataset card" in (tmp_path / "ds" / CARD_NAME).read_text()
    (tmp_path / "ds" / CARD_NAME).write_text("# my notes on this corpus\n")
    with pytest.raises(OutputError, match=CARD_NAME):
        ingest([src], tmp_path / "ds", overwrite=True)
    assert (tmp_path / "ds" / CARD_NAME).read_text() == "# my notes on this corpus\n"
