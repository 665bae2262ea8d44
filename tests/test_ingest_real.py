"""Ingest of the real corpora in shared/corpora, with the quirks SOURCES.md lists."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from spr_data import ingest, open_dataset, verify_dataset
from spr_data.outdir import REJECTS_DIR


def all_rows(ds_path: Path) -> list[dict]:
    ds = open_dataset(ds_path)
    return ds.take(np.arange(len(ds))).to_pylist()


def gz_lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")


def assert_ids_partition(ds_path: Path, records: int) -> None:
    ds = open_dataset(ds_path)
    rejects = ds.rejects
    assert rejects is not None
    ids = [r["id"] for r in all_rows(ds_path)] + [r["id"] for r in all_rows(rejects.path)]
    assert sorted(ids) == list(range(records))


def test_tatoeba_cmn_tsv_bom_attribution_and_trailing_blank_line(corpora: Path, tmp_path: Path):
    src = corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz"
    summary = ingest([src], tmp_path / "ds")
    assert (summary.records, summary.rows) == (29156, 29155)
    assert summary.rejects == {"empty_line": 1}
    assert summary.langs == ["eng", "cmn"]  # from the file name
    rows = all_rows(tmp_path / "ds")
    assert rows[0]["src"] == "Hi."  # the BOM is gone, not glued to the first word
    assert rows[0]["tgt"] == "嗨。"
    assert not any("CC-BY" in r["src"] or "CC-BY" in r["tgt"] for r in rows)
    reject = open_dataset(tmp_path / "ds" / REJECTS_DIR)[0]
    assert reject["origin"]["line"] == 29156 and reject["raw"] == b""
    # every row is exactly columns 0 and 1 of its line in the file
    lines = gz_lines(src)
    lines[0] = lines[0].removeprefix("\ufeff")
    for r in rows[::997]:
        fields = lines[r["origin"]["line"] - 1].split("\t")
        assert [r["src"], r["tgt"]] == fields[:2]
    assert_ids_partition(tmp_path / "ds", 29156)
    assert verify_dataset(tmp_path / "ds").ok


def test_opennmt_moses_pair_keeps_alignment_and_rejects_the_empty_side(
        corpora: Path, tmp_path: Path):
    en = corpora / "parallel/opennmt_wmt_en-de.train.en.gz"
    de = corpora / "parallel/opennmt_wmt_en-de.train.de.gz"
    summary = ingest([en, de], tmp_path / "ds")
    assert summary.langs == ["en", "de"]
    assert (summary.records, summary.rows, summary.rejects) == (10000, 9999, {"empty_field": 1})
    en_lines, de_lines = gz_lines(en), gz_lines(de)
    rows = all_rows(tmp_path / "ds")
    for r in rows:
        line = r["origin"]["line"]
        assert (r["src"], r["tgt"]) == (en_lines[line - 1], de_lines[line - 1])
    reject = open_dataset(tmp_path / "ds" / REJECTS_DIR)[0]
    assert reject["origin"]["line"] == 5 and reject["reason"] == "empty_field"
    assert reject["raw"] == b"\n" + de_lines[4].encode()
    assert de_lines[4].startswith("Der Name dieser Seite")
    assert_ids_partition(tmp_path / "ds", 10000)


def test_multi30k_tab_inside_a_sentence_is_text_in_a_moses_pair(corpora: Path, tmp_path: Path):
    base = corpora / "parallel/multi30k"
    summary = ingest([base / "train.en.gz", base / "train.de.gz"], tmp_path / "ds")
    assert summary.rows == 29000 and not summary.rejects
    row = open_dataset(tmp_path / "ds")[7365]
    assert row["origin"]["line"] == 7366
    assert "\tWasserfontäne." in row["tgt"]


def test_ntrex_crlf_text_becomes_mono_rows_without_carriage_returns(
        corpora: Path, tmp_path: Path):
    src = corpora / "multiparallel/ntrex128/newstest2019-ref.ben.txt.gz"
    assert b"\r\n" in gzip.decompress(src.read_bytes())[:10000]
    summary = ingest([src], tmp_path / "ds")
    assert (summary.kind, summary.langs, summary.rows) == ("mono", ["ben"], 1997)
    rows = all_rows(tmp_path / "ds")
    expected = gzip.decompress(src.read_bytes()).decode("utf-8").splitlines()
    assert [r["text"] for r in rows] == expected
    assert not any("\r" in r["text"] for r in rows)


def test_several_inputs_are_concatenated_and_keep_their_origin(corpora: Path, tmp_path: Path):
    files = [corpora / f"multiparallel/ntrex128/newstest2019-ref.{lang}.txt.gz"
             for lang in ("hin", "mar")]
    summary = ingest(files, tmp_path / "ds", langs=["mul"])
    ds = open_dataset(tmp_path / "ds")
    assert summary.rows == len(ds) == 2 * 1997
    assert ds[1997]["origin"] == {"input": 1, "line": 1}
    assert ds[1997]["id"] == 1997
    inputs = ds.manifest.lineage["inputs"]
    assert [Path(i["files"][0]["path"]).name for i in inputs] == [f.name for f in files]


@pytest.mark.parametrize("name", ["ben_wiki_sipc.txt.gz", "hin_wiki_sipc.txt.gz"])
def test_mono_wiki_files_round_trip(corpora: Path, tmp_path: Path, name: str):
    src = corpora / "mono" / name
    ingest([src], tmp_path / "ds", langs=[name[:3]])
    rows = all_rows(tmp_path / "ds")
    lines = gzip.decompress(src.read_bytes()).decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    assert [r["text"] for r in rows] == [x for x in lines if x]
