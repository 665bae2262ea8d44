"""JSONL keys and Parquet columns follow the languages, wherever they come from; an input
whose every record is rejected is an error, not an empty success."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spr_data import ingest, open_dataset
from spr_data.errors import DataLossError
from tests.conftest import run_cli


def eng_ben(corpora: Path) -> list[tuple[str, str]]:
    lines = (corpora / "parallel/tatoeba_manythings_eng-ben.tsv").read_text("utf-8").splitlines()
    return [(a, b) for a, b, *_ in (line.split("\t") for line in lines if line)]


def write_jsonl(path: Path, pairs: list[tuple[str, str]], keys: tuple[str, str]) -> Path:
    path.write_text("".join(json.dumps({keys[0]: a, keys[1]: b}, ensure_ascii=False) + "\n"
                            for a, b in pairs), encoding="utf-8")
    return path


def texts(path: Path) -> list[tuple[str, str]]:
    ds = open_dataset(path)
    table = ds.take(range(len(ds)))
    return list(zip(table.column("src").to_pylist(), table.column("tgt").to_pylist(),
                    strict=True))


def test_languages_from_the_file_name_are_the_keys(corpora: Path, tmp_path: Path):
    """The case of the issue: pairs.en-bn.jsonl with {"en": …, "bn": …} lost every row."""
    pairs = eng_ben(corpora)
    src = write_jsonl(tmp_path / "pairs.en-bn.jsonl", pairs, ("en", "bn"))
    summary = ingest([src], tmp_path / "ds")
    assert summary.langs == ["en", "bn"] and summary.rows == len(pairs) and not summary.rejects
    assert texts(tmp_path / "ds") == pairs
    lineage = open_dataset(tmp_path / "ds").manifest.lineage
    assert lineage["inputs"][0]["keys"] == ["en", "bn"]


def test_src_tgt_keys_still_work_beside_languages(corpora: Path, tmp_path: Path):
    pairs = eng_ben(corpora)[:500]
    named = write_jsonl(tmp_path / "pairs.en-bn.jsonl", pairs, ("src", "tgt"))
    assert ingest([named], tmp_path / "a").rows == len(pairs)
    given = write_jsonl(tmp_path / "plain.jsonl", pairs, ("src", "tgt"))
    assert ingest([given], tmp_path / "b", langs=["en", "bn"]).rows == len(pairs)
    by_lang = write_jsonl(tmp_path / "plain2.jsonl", pairs, ("en", "bn"))
    assert texts(tmp_path / "b") == pairs
    assert ingest([by_lang], tmp_path / "c", langs=["en", "bn"]).rows == len(pairs)


def test_mono_jsonl_takes_its_language_as_key(corpora: Path, tmp_path: Path):
    lines = gzip.decompress((corpora / "mono/ben_wiki_sipc.txt.gz").read_bytes()) \
        .decode("utf-8").splitlines()[:300]
    src = tmp_path / "wiki.bn.jsonl"
    src.write_text("".join(json.dumps({"bn": t}, ensure_ascii=False) + "\n" for t in lines if t),
                   encoding="utf-8")
    summary = ingest([src], tmp_path / "ds", langs=["bn"])  # --lang bn
    assert summary.kind == "mono" and summary.langs == ["bn"]
    assert summary.rows == sum(1 for t in lines if t)


def test_parquet_columns_follow_the_languages(corpora: Path, tmp_path: Path):
    pairs = eng_ben(corpora)[:400]
    table = pa.table({"en": [a for a, _ in pairs], "bn": [b for _, b in pairs]})
    pq.write_table(table, tmp_path / "pairs.en-bn.parquet")
    summary = ingest([tmp_path / "pairs.en-bn.parquet"], tmp_path / "ds")
    assert summary.rows == len(pairs) and texts(tmp_path / "ds") == pairs


def test_hugging_face_translation_layout_is_read_by_path(corpora: Path, tmp_path: Path):
    """``{"translation": {"bn": …, "en": …}}``, as Hugging Face's translation datasets are
    exported (JSONL) and stored (Parquet, a struct column): read without options where the
    name or --langs gives the languages, or by ``--keys/--columns translation.en,…``. Found
    by a new-user trial: every record was rejected, with advice that could not work."""
    pairs = eng_ben(corpora)[:400]
    records = [{"translation": {"bn": b, "en": a}, "id": str(i)}
               for i, (a, b) in enumerate(pairs)]
    (tmp_path / "hf.en-bn.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "hf.parquet")
    assert ingest([tmp_path / "hf.en-bn.jsonl"], tmp_path / "a").rows == len(pairs)
    assert texts(tmp_path / "a") == pairs
    assert ingest([tmp_path / "hf.parquet"], tmp_path / "b", langs=["en", "bn"]).rows == 400
    assert texts(tmp_path / "b") == pairs
    ingest([tmp_path / "hf.parquet"], tmp_path / "c", langs=["bn", "en"],
           columns=["translation.bn", "translation.en"])
    assert texts(tmp_path / "c") == [(b, a) for a, b in pairs]
    result = run_cli("ingest", tmp_path / "hf.parquet", "--out", tmp_path / "d",
                     "--columns", "translation.en,translation.fr", "--langs", "en,fr")
    assert result.exit_code == 2
    assert "has no column 'translation.fr'; it has: translation, translation.bn, " \
           "translation.en, id" in result.stderr
    # a key that is literally dotted is still read as it is
    (tmp_path / "dotted.jsonl").write_text('{"a.b": "Two dogs.", "c": "Zwei Hunde."}\n' * 5)
    assert ingest([tmp_path / "dotted.jsonl"], tmp_path / "e", keys=["a.b", "c"],
                  langs=["en", "de"]).rows == 5


def test_an_input_whose_every_record_is_rejected_is_an_error(corpora: Path, tmp_path: Path):
    pairs = eng_ben(corpora)[:50]
    src = write_jsonl(tmp_path / "pairs.en-bn.jsonl", pairs, ("english", "bengali"))
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 1
    message = result.stderr
    assert "all 50 records were rejected" in message and "line 1" in message
    assert "missing_key" in message and "--keys" in message and '"english"' in message
    assert not (tmp_path / "ds").exists()
    # with the right keys it is a dataset
    ok = run_cli("ingest", src, "--keys", "english,bengali", "--out", tmp_path / "ds")
    assert ok.exit_code == 0 and len(open_dataset(tmp_path / "ds")) == 50


def test_one_input_lost_whole_among_good_ones_is_named(corpora: Path, tmp_path: Path):
    pairs = eng_ben(corpora)[:40]
    good = write_jsonl(tmp_path / "good.en-bn.jsonl", pairs, ("en", "bn"))
    bad = tmp_path / "bad.en-bn.jsonl"
    bad.write_bytes(b"\xff\xfe not utf-8\n" * 5)
    with pytest.raises(DataLossError, match=r"bad\.en-bn\.jsonl: all 5 records .*invalid_utf8"):
        ingest([good, bad], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_an_input_with_some_good_records_is_kept(tmp_path: Path):
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n\tonly target\n")
    summary = ingest([src], tmp_path / "ds")
    assert summary.rows == 1 and summary.rejects == {"empty_field": 1}
