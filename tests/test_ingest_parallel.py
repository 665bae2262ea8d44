"""Several inputs parsed at once: the same dataset, byte for byte, as one process reading them
in turn; errors reported in input order; nothing left behind."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spr_data import ingest, open_dataset
from spr_data.errors import DataLossError, InputError
from spr_data.outdir import REJECTS_DIR, WORK_DIR
from tests.conftest import run_cli


def dataset_files(out: Path) -> dict[str, bytes]:
    """Every file of a dataset, the manifests without their creation time."""
    files = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                manifest = json.loads(data)
                manifest["lineage"].pop("created")
                data = json.dumps(manifest, sort_keys=True).encode()
            files[path.relative_to(out).as_posix()] = data
    return files


@pytest.fixture(scope="module")
def inputs(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Real en–de pairs in four formats, three of them with records ingest rejects."""
    root = tmp_path_factory.mktemp("inputs")
    multi30k = [corpora / f"parallel/multi30k/val.{lang}.gz" for lang in ("en", "de")]
    wmt = [corpora / f"parallel/opennmt_wmt_en-de.train.{lang}.gz" for lang in ("en", "de")]
    en, de = (gzip.decompress(p.read_bytes()).decode().splitlines() for p in multi30k)
    jsonl = root / "pairs.en-de.jsonl"
    pairs = list(zip(en, de, strict=True))
    lines = [json.dumps({"en": a, "de": b}, ensure_ascii=False) for a, b in pairs]
    lines[7] = "{not json"
    lines[9] = json.dumps({"en": "only one side"})
    jsonl.write_text("\n".join(lines) + "\n")
    tsv = root / "pairs.en-de.tsv.gz"
    tsv.write_bytes(gzip.compress(
        "".join(f"{a}\t{b}\n" if i % 50 else f"{a}\n" for i, (a, b) in enumerate(pairs))
        .encode()))
    parquet = root / "pairs.en-de.parquet"
    pq.write_table(pa.table({"en": en[:300], "de": de[:300]}), parquet, row_group_size=100)
    return [*wmt, jsonl, tsv, *multi30k, parquet]


def test_several_inputs_on_two_workers_are_the_bytes_one_process_writes(inputs: list[Path],
                                                                        tmp_path: Path):
    one = ingest(inputs, tmp_path / "one", workers=1, shard_rows=3000)
    two = ingest(inputs, tmp_path / "two", workers=2, shard_rows=3000)
    volatile = {"seconds": 0, "input_mb_per_s": 0, "out": ""}
    assert one.to_json() | volatile == two.to_json() | volatile
    assert one.rejects == {"empty_field": 1, "invalid_json": 1, "missing_key": 1,
                           "tsv_field_count": 21}
    assert len(list((tmp_path / "two").glob("shard-*.arrow"))) > len(inputs) // 2
    assert dataset_files(tmp_path / "two") == dataset_files(tmp_path / "one")
    assert not (tmp_path / "two" / WORK_DIR).exists()
    # the lineage of every input, read by a worker, is the one read here (hashes, records)
    lineage = [open_dataset(tmp_path / d).manifest.lineage["inputs"] for d in ("one", "two")]
    assert lineage[0] == lineage[1] and len(lineage[0]) == 5
    assert all(len(f["sha256"]) == 64 for i in lineage[1] for f in i["files"])
    # ids still run in input order across inputs: input 2's first record follows input 1's last
    ds = open_dataset(tmp_path / "two")
    origins = ds.take(np.arange(len(ds))).column("origin").to_pylist()
    assert [o["input"] for o in origins] == sorted(o["input"] for o in origins)
    rejects = open_dataset(tmp_path / "two" / REJECTS_DIR)
    assert len(ds) + len(rejects) == one.records


def test_of_two_bad_inputs_the_first_is_reported_and_nothing_is_left(inputs: list[Path],
                                                                     tmp_path: Path):
    truncated = tmp_path / "cut.en-de.tsv.gz"
    truncated.write_bytes(inputs[3].read_bytes()[:-40])
    empty_sides = tmp_path / "blank.en-de.tsv"
    empty_sides.write_text("\t\n" * 50)
    out = tmp_path / "out"
    for bad in ([inputs[2], truncated, empty_sides], [inputs[2], empty_sides, truncated]):
        with pytest.raises((InputError, DataLossError)) as err:
            ingest(bad, out, workers=2)
        assert Path(bad[1]).name in str(err.value)
        assert not out.exists() or list(out.iterdir()) == []


def test_cli_ingest_workers_and_executor_options(inputs: list[Path], tmp_path: Path):
    result = run_cli("ingest", *map(str, inputs[:4]), "--out", str(tmp_path / "cli"),
                     "--workers", "2", "--json", "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["records"] == ingest(
        inputs[:4], tmp_path / "api", workers=1).records
    result = run_cli("ingest", str(inputs[2]), "--out", str(tmp_path / "x"),
                     "--ray-address", "auto")
    assert result.exit_code == 2 and "--ray-address needs --executor ray" in result.stderr
