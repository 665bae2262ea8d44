"""One test per failure mode: bad lines become rejects with reasons, bad files a clear error."""

from __future__ import annotations

import bz2
import errno
import gzip
import json
import lzma
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spr_data import InputError, OutputError, ingest, open_dataset, verify_dataset
from spr_data.outdir import REJECTS_DIR
from tests.conftest import run_cli, small_tmpfs
from tests.junk import read_lines


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def rejects_of(ds: Path) -> list[dict]:
    rej = open_dataset(ds / REJECTS_DIR)
    return rej.take(range(len(rej))).to_pylist()


def texts_of(ds: Path, column: str = "src") -> list[str]:
    d = open_dataset(ds)
    return d.take(range(len(d))).column(column).to_pylist()


def assert_no_dataset(out: Path) -> None:
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("shard-*")) if out.exists() else True


# --- lines that cannot be rows become rejects, with their raw bytes ----------------------------

def test_invalid_utf8_line_is_rejected_with_its_raw_bytes(tmp_path: Path):
    bad = b"caf\xe9\tcafe"
    src = write(tmp_path / "c.tsv", b"good\tgut\n" + bad + b"\nmore\tmehr\n")
    ingest([src], tmp_path / "ds")
    assert texts_of(tmp_path / "ds") == ["good", "more"]
    [reject] = rejects_of(tmp_path / "ds")
    assert (reject["reason"], reject["raw"], reject["id"]) == ("invalid_utf8", bad, 1)


def test_nul_byte_is_rejected(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"a\x00b\tx\nok\tgut\n")
    ingest([src], tmp_path / "ds")
    [reject] = rejects_of(tmp_path / "ds")
    assert reject["reason"] == "nul_byte" and reject["raw"] == b"a\x00b\tx"


def test_tsv_wrong_field_count_is_rejected_not_missplit(tmp_path: Path):
    src = write(tmp_path / "c.tsv",
                b"one\teins\tattr\nonly-one-field\ntab\tinside\ta\tsentence\ntwo\tzwei\tattr\n")
    summary = ingest([src], tmp_path / "ds")
    assert texts_of(tmp_path / "ds", "tgt") == ["eins", "zwei"]
    assert summary.rejects == {"tsv_field_count": 2}
    assert [r["origin"]["line"] for r in rejects_of(tmp_path / "ds")] == [2, 3]


def test_tsv_columns_beyond_the_file_is_a_usage_error(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    result = run_cli("ingest", src, "--out", tmp_path / "ds", "--columns", "0,5")
    assert result.exit_code == 2
    assert "--columns 0,5" in result.stderr and str(src) in result.stderr
    assert_no_dataset(tmp_path / "ds")


def test_empty_lines_in_a_moses_pair(tmp_path: Path):
    en = write(tmp_path / "p.en", b"Hello\n\n\nBye\n")
    de = write(tmp_path / "p.de", b"Hallo\n\nnur deutsch\nTschuss\n")
    summary = ingest([en, de], tmp_path / "ds")
    assert summary.rejects == {"empty_field": 1, "empty_line": 1}
    assert [(r["origin"]["line"], r["reason"], r["raw"]) for r in rejects_of(tmp_path / "ds")] \
        == [(2, "empty_line", b"\n"), (3, "empty_field", b"\nnur deutsch")]


def test_crlf_bom_and_missing_final_newline(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"\xef\xbb\xbfHi.\tHallo.\r\nBye.\tTschuss.\r\nLast\tLetzte")
    ingest([src], tmp_path / "ds")
    assert texts_of(tmp_path / "ds") == ["Hi.", "Bye.", "Last"]
    assert texts_of(tmp_path / "ds", "tgt") == ["Hallo.", "Tschuss.", "Letzte"]


def test_cr_only_line_ends_are_a_clear_error_not_one_huge_line(tmp_path: Path):
    src = write(tmp_path / "c.en", b"one\rtwo\rthree\r")
    tgt = write(tmp_path / "c.de", b"eins\rzwei\rdrei\r")
    result = run_cli("ingest", src, tgt, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "ends its lines with CR alone" in result.stderr
    assert_no_dataset(tmp_path / "out")


def test_jsonl_reasons(tmp_path: Path):
    lines = [
        json.dumps({"en": "Hello", "de": "Hallo", "extra": 1}),
        "{not json",
        json.dumps({"en": "only en"}),
        json.dumps({"en": "x", "de": 5}),
        json.dumps(["a", "b"]),
        json.dumps({"en": "Bye", "de": "Tschüss"}, ensure_ascii=False),
    ]
    src = write(tmp_path / "c.jsonl", "\n".join(lines).encode() + b"\n")
    summary = ingest([src], tmp_path / "ds", keys=["en", "de"])
    assert texts_of(tmp_path / "ds", "tgt") == ["Hallo", "Tschüss"]
    assert summary.rejects == {"invalid_json": 2, "missing_key": 1, "not_a_string": 1}


def test_jsonl_lone_surrogate_escape_is_rejected_with_its_raw_bytes(tmp_path: Path):
    """``"\\ud800"`` is JSON syntax but no Unicode text: it cannot be stored as UTF-8."""
    bad = b'{"src": "\\ud800", "tgt": "y"}'
    paired = b'{"src": "\\ud83d\\ude00", "tgt": "emoji"}'  # a surrogate *pair* is fine
    src = write(tmp_path / "c.jsonl", b'{"src": "a", "tgt": "b"}\n' + bad + b"\n" + paired + b"\n")
    summary = ingest([src], tmp_path / "ds")
    assert texts_of(tmp_path / "ds") == ["a", "\U0001F600"]
    assert summary.rejects == {"invalid_json": 1}
    [reject] = rejects_of(tmp_path / "ds")
    assert (reject["raw"], reject["origin"]["line"]) == (bad, 2)


def test_jsonl_huge_numbers_in_other_fields_do_not_reject_the_line(tmp_path: Path):
    src = write(tmp_path / "c.jsonl",
                b'{"src": "a", "tgt": "b", "n": ' + b"9" * 5000 + b'}\n{"src": 5, "tgt": "c"}\n')
    ingest([src], tmp_path / "out")
    assert texts_of(tmp_path / "out") == ["a"]
    assert [r["reason"] for r in rejects_of(tmp_path / "out")] == ["not_a_string"]


def test_jsonl_nested_deeper_than_the_stack_is_rejected(tmp_path: Path):
    deep = b'{"src": ' + b"[" * 100_000 + b"]" * 100_000 + b', "tgt": "y"}'
    src = write(tmp_path / "c.jsonl", deep + b'\n{"src": "a", "tgt": "b"}\n')
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 0, result.stderr
    assert texts_of(tmp_path / "ds") == ["a"]
    [reject] = rejects_of(tmp_path / "ds")
    assert (reject["reason"], reject["raw"]) == ("invalid_json", deep)


def test_parquet_columns_nulls_and_types(tmp_path: Path):
    table = pa.table({"en": ["a", None, "c"], "de": ["x", "y", ""], "n": [1, 2, 3]})
    pq.write_table(table, tmp_path / "c.parquet")
    summary = ingest([tmp_path / "c.parquet"], tmp_path / "ds", columns=["en", "de"])
    assert texts_of(tmp_path / "ds") == ["a"]
    assert summary.rejects == {"empty_field": 1, "null_field": 1}
    result = run_cli("ingest", tmp_path / "c.parquet", "--out", tmp_path / "ds2",
                     "--columns", "en,n")
    assert result.exit_code == 2 and "'n' is int64" in result.stderr



def test_parquet_text_stored_as_categories_is_read_as_text(tmp_path: Path):
    """A pandas ``category`` column is a dictionary of strings in Parquet: read through its
    values (it was refused as "not a string column")."""
    en = pa.array(["Two dogs.", "A cat.", "Two dogs.", None]).dictionary_encode()
    de = pa.array(["Zwei Hunde.", "Eine Katze.", "Zwei Hunde.", "x"]).dictionary_encode()
    pq.write_table(pa.table({"en": en, "de": de}), tmp_path / "cat.en-de.parquet")
    summary = ingest([tmp_path / "cat.en-de.parquet"], tmp_path / "ds")
    assert summary.rejects == {"null_field": 1}
    rows = open_dataset(tmp_path / "ds").take(range(3)).to_pylist()
    assert [(r["src"], r["tgt"]) for r in rows] == [("Two dogs.", "Zwei Hunde."),
                                                    ("A cat.", "Eine Katze."),
                                                    ("Two dogs.", "Zwei Hunde.")]
    ints = pa.array([1, 2, 1, 3]).dictionary_encode()
    pq.write_table(pa.table({"en": en, "de": ints}), tmp_path / "ints.en-de.parquet")
    result = run_cli("ingest", tmp_path / "ints.en-de.parquet", "--out", tmp_path / "ds2")
    assert result.exit_code == 2 and "expected a string column" in result.stderr


def test_text_that_is_not_utf8_is_named_where_it_is_and_what_it_is(tmp_path: Path):
    """Only the target of a Moses pair is Latin-1: the error names the target (it named the
    source); UTF-16 and a gzip file without .gz say so, with the fix."""
    en = write(tmp_path / "a.en", "".join(f"Two dogs {i}.\n" for i in range(50)).encode())
    de = write(tmp_path / "a.de", "".join(f"Zwei Hündé {i}.\n" for i in range(50))
               .encode("latin-1"))
    result = run_cli("ingest", en, de, "--out", tmp_path / "ds")
    assert result.exit_code == 1
    assert f"{de}: all 50 records were rejected" in result.stderr and "Zwei H" in result.stderr
    utf16 = write(tmp_path / "u.en", "".join(f"Two dogs {i}.\n" for i in range(50))
                  .encode("utf-16"))
    partner = write(tmp_path / "u.de", "".join(f"Zwei Hunde {i}.\n" for i in range(50)).encode())
    result = run_cli("ingest", utf16, partner, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "u.en is UTF-16 text" in result.stderr
    packed = write(tmp_path / "g.en-de.tsv", gzip.compress(b"a\tb\n" * 200))
    result = run_cli("ingest", packed, "--out", tmp_path / "ds")
    assert result.exit_code == 1 and "g.en-de.tsv is gzip-compressed: name it with .gz" \
        in result.stderr
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())

# --- whole-file problems: one line naming the file, non-zero exit, no manifest -----------------

def test_moses_line_count_mismatch_names_both_files_and_counts(tmp_path: Path):
    en = write(tmp_path / "train.en", b"a\nb\nc\n")
    de = write(tmp_path / "train.de", b"x\ny\n")
    result = run_cli("ingest", en, de, "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert f"{en} has 3 lines" in result.stderr and f"{de} has 2" in result.stderr
    assert not (tmp_path / "ds").exists()  # nothing is written


@pytest.mark.parametrize("tail", [b"\n", b"\n\n\n", b"\r\n"])
def test_blank_lines_at_the_end_of_one_moses_file_are_rejects_not_a_mismatch(tmp_path: Path,
                                                                               tail: bytes):
    """A file that ends in an empty line (or a few) is still line-aligned with its partner:
    the extra lines are empty_line rejects; text there is still a mismatch."""
    en = write(tmp_path / "train.en", b"a\nb\nc\n" + tail)
    de = write(tmp_path / "train.de", b"x\ny\nz\n")
    summary = ingest([en, de], tmp_path / "ds")
    extra = tail.count(b"\n")
    assert summary.rows == 3 and summary.rejects == {"empty_line": extra}
    assert summary.records == 3 + extra
    write(tmp_path / "more.en", b"a\nb\nc\n\nd\n")
    write(tmp_path / "more.de", b"x\ny\nz\n")
    result = run_cli("ingest", tmp_path / "more.en", tmp_path / "more.de", "--out",
                     tmp_path / "mismatch")
    assert result.exit_code == 2 and "has 5 lines" in result.stderr


def test_an_extra_line_that_is_not_utf8_is_still_a_mismatch(tmp_path: Path):
    """Found by a new-user trial: a German file one line longer whose last line is Latin-1
    was read as line-aligned (the extra line decoded to "", an ``empty_line`` reject), and
    two thirds of the pairs were off by one with exit 0."""
    en = write(tmp_path / "t.en", b"".join(b"sentence %d.\n" % i for i in range(300)))
    lines = [b"Satz %d." % i for i in range(300)]
    lines.insert(100, b"Eine zus\xc3\xa4tzliche Zeile.")
    lines[-1] += " Grüße".encode("latin-1")
    de = write(tmp_path / "t.de", b"\n".join(lines) + b"\n")
    result = run_cli("ingest", en, de, "--out", tmp_path / "ds")
    assert result.exit_code == 2, result.stdout
    assert f"{en} has 300 lines" in result.stderr and f"{de} has 301" in result.stderr


def test_a_file_in_another_encoding_is_refused_not_half_dropped(corpora: Path, tmp_path: Path):
    """Found by a new-user trial: LASER's Tatoeba German converted to cp1252 lost 476 of its
    1,000 lines as ``invalid_utf8`` with exit 0, and the rows kept were the ones without an
    umlaut (under the 50% guard; and a second input pair hid a worse one's share). Now an
    input over 1% of whose lines are not UTF-8 is refused, naming it and the fix."""
    base = corpora / "parallel/tatoeba_laser"
    pairs = list(zip(read_lines(base / "tatoeba.deu-eng.eng"),
                     read_lines(base / "tatoeba.deu-eng.deu"), strict=True))[:1000]
    en = write(tmp_path / "t.en", "".join(e + "\n" for e, _ in pairs).encode())
    de = write(tmp_path / "t.de", "".join(d + "\n" for _, d in pairs).encode("cp1252"))
    bad = sum(not d.isascii() for _, d in pairs)
    assert 0.1 < bad / len(pairs) < 0.5  # under the heavy-loss guard's half
    good_en = write(tmp_path / "u.en", "".join(e + "\n" for e, _ in pairs).encode())
    good_de = write(tmp_path / "u.de", "".join(d + "\n" for _, d in pairs).encode())
    result = run_cli("ingest", good_en, good_de, en, de, "--out", tmp_path / "ds")
    assert result.exit_code == 1, result.stdout
    assert f"{de}: {bad:,} of its 1,000 lines are not UTF-8" in result.stderr
    assert "iconv -f cp1252 -t utf-8 t.de" in result.stderr
    assert not (tmp_path / "ds" / "manifest.json").exists()
    summary = ingest([good_en, good_de, en, de], tmp_path / "ds", allow_heavy_loss=True)
    assert summary.rejects == {"invalid_utf8": bad}
    # a stray line or two is a reject, as ever
    lines = [d.encode() for _, d in pairs[:300]]
    lines[5], lines[9] = b"Gr\xfc\xdfe", b"\xe9t\xe9"
    write(tmp_path / "s.de", b"\n".join(lines) + b"\n")
    write(tmp_path / "s.en", "".join(e + "\n" for e, _ in pairs[:300]).encode())
    assert ingest([tmp_path / "s.en", tmp_path / "s.de"],
                  tmp_path / "stray").rejects == {"invalid_utf8": 2}
    # each file of a pair is judged apart, and a compressed one is converted through its
    # compressor (found by a review: the pair's count was put on the file with 2 bad lines)
    src_lines = [e.encode() for e, _ in pairs[:300]]
    src_lines[3] = src_lines[7] = b"caf\xe9"
    write(tmp_path / "m.en", b"\n".join(src_lines) + b"\n")
    write(tmp_path / "m.de.gz", gzip.compress("".join(d + "\n" for _, d in pairs[:300])
                                              .encode("cp1252")))
    bad_de = sum(not d.isascii() for _, d in pairs[:300])
    result = run_cli("ingest", tmp_path / "m.en", tmp_path / "m.de.gz", "--out", tmp_path / "m")
    assert result.exit_code == 1
    assert f"m.de.gz: {bad_de:,} of its 300 lines are not UTF-8" in result.stderr
    assert "zcat m.de.gz | iconv -f cp1252 -t utf-8 | gzip > utf8-m.de.gz" in result.stderr


@pytest.mark.parametrize("suffix", [".gz", ".zst", ".xz", ".bz2"])
def test_an_empty_compressed_file_is_a_failed_download_not_an_empty_input(tmp_path: Path,
                                                                          suffix: str):
    """Found by a new-user trial: a 0-byte .gz or .zst (no such file holds even empty text)
    was read as an input of no records, exit 0."""
    write(tmp_path / f"e.en{suffix}", b"")
    write(tmp_path / f"e.de{suffix}", b"")
    result = run_cli("ingest", tmp_path / f"e.en{suffix}", tmp_path / f"e.de{suffix}",
                     "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert f"e.en{suffix} is empty (0 bytes), which no" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("magic", "said"), [(b"PK\x03\x04", "a zip archive: unzip it"),
                                           (b"\x04\x22\x4d\x18", "lz4-compressed")])
def test_a_zip_or_lz4_file_named_as_text_says_what_it_is(tmp_path: Path, magic: bytes,
                                                          said: str):
    en = write(tmp_path / "c.en", magic + bytes(range(1, 256)) * 4)
    de = write(tmp_path / "c.de", b"Hallo.\n" * 40)
    result = run_cli("ingest", en, de, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and f"c.en is {said}" in result.stderr


@pytest.mark.parametrize("header", [b"source\ttarget", b"en\tde", b"English\tGerman",
                                    b"src_text\ttgt_text", b"\xef\xbb\xbfsentence1\tsentence2"])
def test_a_header_line_is_a_reject_not_a_pair(tmp_path: Path, header: bytes):
    """Found by a new-user trial: ``source⇥target`` on a TSV's first line became a training
    pair and survived clean. A first line of column names is now a ``header`` reject; the
    same words on a later line, and a first line that is a real pair, stay rows."""
    names = header.removeprefix(b"\xef\xbb\xbf")  # a byte order mark is no text
    tsv = write(tmp_path / "p.en-de.tsv", header + b"\n" + b"Two dogs.\tZwei Hunde.\n" * 30
                + names + b"\n")
    summary = ingest([tsv], tmp_path / "ds")
    assert (summary.rows, summary.rejects) == (31, {"header": 1})
    rejects = open_dataset(tmp_path / "ds").rejects
    assert rejects is not None and rejects.take([0]).column("raw").to_pylist() == [names]
    firsts = (b"No.\tNein.", b"No.\tNo.", b"Hindi\tHindi", b"It is so\tEs ist so")
    for n, first in enumerate(firsts):
        real = write(tmp_path / f"r{n}.en-de.tsv",
                     first + b"\n" + b"Two dogs.\tZwei Hunde.\n" * 30)
        assert ingest([real], tmp_path / f"real{n}").rejects == {}, first


def test_one_file_twice_or_one_column_for_both_sides_is_refused(tmp_path: Path):
    """Found by a new-user trial: ``--columns 0,0`` made 300 rows of English labelled as a
    pair, and one file given twice (or a link to it) was read twice, or paired with itself."""
    en = write(tmp_path / "t.en", b"Two dogs.\n" * 20)
    (tmp_path / "link.de").symlink_to(en)
    tsv = write(tmp_path / "p.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 20)
    for args, said in (([en, tmp_path / "link.de"], "are the same file"),
                       ([tsv, tsv], "are the same file"),
                       ([tsv, f"file://{tsv}"], "are the same file"),
                       ([tsv, "--columns", "1,01"], "--columns 1,01 names one column for both")):
        result = run_cli("ingest", *args, "--out", tmp_path / "ds")
        assert result.exit_code == 2 and said in result.stderr, (args, result.stderr)
    assert not (tmp_path / "ds").exists()


def test_a_file_that_grows_while_it_is_read_is_refused(tmp_path: Path):
    """Found by a fault trial: ingest of a TSV another process was still appending to took
    the half-written last line as a pair (``angehängter Satz Num``), exit 0. A local file
    longer at the end of its read than when the run planned it is now refused."""
    from spr_data.pipeline.sources.base import InputFile, iter_line_blocks

    path = write(tmp_path / "g.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 100 + b"One\tEi")
    planned = InputFile(path, size=path.stat().st_size)
    with open(path, "ab") as f:  # the writer goes on after the run planned the file
        f.write(b"ne Katze.\n")
    with pytest.raises(InputError, match=r"changed while it was read: 2,206 bytes when the "
                                         r"run started, 2,216 now"):
        list(iter_line_blocks(planned))
    assert sum(len(b) for b in iter_line_blocks(InputFile(path, size=2216))) == 101
    # a gzip file still being written ends mid-stream: the same, not "truncated"
    packed = gzip.compress(big_text(20000))
    gz = write(tmp_path / "g.tsv.gz", packed[:len(packed) // 2])
    planned = InputFile(gz, size=gz.stat().st_size)
    gz.write_bytes(packed)
    with pytest.raises(InputError, match="changed while it was read"):
        list(iter_line_blocks(planned))


def test_a_tsv_with_csv_quoting_across_lines_makes_no_half_pairs(corpora: Path, tmp_path: Path):
    """Found by a new-user trial: Python's ``csv`` module (and pandas) quote a field that
    holds a line break, so one record spans lines; read literally, the last piece became a
    pair of half a sentence and the next field, and 4 of 5 survived clean. Every piece of
    such a record is now a ``tsv_field_count`` reject, in either column; the other rows
    are as before."""
    import csv

    lines = (corpora / "parallel/tatoeba_manythings_eng-ben.tsv").read_text("utf-8")
    pairs = [tuple(line.split("\t")[:2]) for line in lines.splitlines()[:300]]
    broken = {10: 0, 50: 1, 120: 0, 200: 1, 299: 0}  # row → the column given a line break
    rows = [list(p) for p in pairs]
    for i, side in broken.items():
        words = rows[i][side].split(" ")
        rows[i][side] = " ".join(words[:1]) + "\n" + " ".join(words[1:])
    with open(tmp_path / "c.en-bn.tsv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)
    summary = ingest([tmp_path / "c.en-bn.tsv"], tmp_path / "ds")
    assert summary.rows == 295 and summary.rejects == {"tsv_field_count": 10}
    ds = open_dataset(tmp_path / "ds")
    kept = ds.take(range(len(ds)))
    assert sorted(zip(kept.column("src").to_pylist(), kept.column("tgt").to_pylist(),
                      strict=True)) == sorted(p for i, p in enumerate(pairs) if i not in broken)


def test_quotes_are_counted_per_line_as_arrow_counts_them(corpora: Path):
    import pyarrow.compute as pc

    from spr_data.pipeline.sources.tsv import _quote_counts

    lines = gzip.decompress((corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz")
                            .read_bytes()).decode("utf-8").splitlines()
    arr = pa.array([*lines, '"', "", None, 'a""b"'])
    for part in (arr, arr.slice(1000, 5000), arr.slice(len(arr) - 4)):
        assert _quote_counts(part).tolist() == pc.count_substring(part, '"').fill_null(0) \
            .to_pylist()
    assert _quote_counts(arr).sum() > 100  # Tatoeba's English quotes people


def big_text(lines: int = 20000) -> bytes:
    return b"".join(b"sentence number %d\tSatz Nummer %d\n" % (i, i) for i in range(lines))


def zstd_compress(data: bytes) -> bytes:
    """One zstd frame, made with pyarrow's codec (what the reader uses too)."""
    return pa.Codec("zstd").compress(data, asbytes=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".xz", lzma.compress), (".bz2", bz2.compress),
    (".zst", zstd_compress),
])
def test_truncated_compressed_file(tmp_path: Path, suffix: str, compress):
    packed = compress(big_text())
    src = write(tmp_path / f"c.tsv{suffix}", packed[: len(packed) // 2])
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert "truncated" in result.stderr and str(src) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists()


def test_corrupt_gzip(tmp_path: Path):
    packed = bytearray(gzip.compress(big_text()))
    packed[len(packed) // 2] ^= 0xFF
    src = write(tmp_path / "c.tsv.gz", bytes(packed))
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "corrupt" in result.stderr and str(src) in result.stderr


@pytest.mark.parametrize("damage", ["magic", "garbage after the frame"])
def test_corrupt_zstd(tmp_path: Path, damage: str):
    # a frame without a checksum (pyarrow writes none) cannot show a flipped literal byte,
    # so damage what any zstd reader must notice: a frame's magic number, or bytes after it
    packed = bytearray(zstd_compress(big_text()))
    if damage == "magic":
        packed[0] ^= 0xFF
    else:
        packed += b"not a zstd frame"
    src = write(tmp_path / "c.tsv.zst", bytes(packed))
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "corrupt" in result.stderr and str(src) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists()


def test_concatenated_zstd_frames_read_as_one_file(tmp_path: Path):
    # ``cat a.zst b.zst > ab.zst`` is a valid zstd file: every frame is read, in order
    data = big_text(3000)
    half = data.index(b"\n", len(data) // 2) + 1
    write(tmp_path / "plain.tsv", data)
    write(tmp_path / "cat.tsv.zst", zstd_compress(data[:half]) + zstd_compress(data[half:]))
    ingest([tmp_path / "plain.tsv"], tmp_path / "a")
    ingest([tmp_path / "cat.tsv.zst"], tmp_path / "b")
    assert len(open_dataset(tmp_path / "b")) == 3000
    assert (tmp_path / "a/shard-00000.arrow").read_bytes() == \
        (tmp_path / "b/shard-00000.arrow").read_bytes()


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".xz", lzma.compress), (".bz2", bz2.compress),
    (".zst", zstd_compress),
])
def test_compressed_inputs_read_like_plain_ones(tmp_path: Path, suffix: str, compress):
    data = big_text(3000)
    write(tmp_path / "plain.tsv", data)
    write(tmp_path / f"packed.tsv{suffix}", compress(data))
    ingest([tmp_path / "plain.tsv"], tmp_path / "a")
    ingest([tmp_path / f"packed.tsv{suffix}"], tmp_path / "b")
    assert (tmp_path / "a/shard-00000.arrow").read_bytes() == \
        (tmp_path / "b/shard-00000.arrow").read_bytes()


def non_utf8_name(directory: Path, name: bytes) -> Path:
    """A path whose name holds bytes that are not UTF-8, where the filesystem allows one."""
    path = directory / os.fsdecode(name)
    try:
        path.touch()
        path.unlink()
    except (OSError, UnicodeEncodeError):
        pytest.skip("this filesystem refuses file names that are not UTF-8")
    return path


@pytest.mark.parametrize("suffix", [".tsv", ".parquet"])
def test_input_name_that_is_not_utf8_is_ingested_and_recorded_escaped(tmp_path: Path,
                                                                       suffix: str):
    src = non_utf8_name(tmp_path, b"bad\xff" + suffix.encode())
    if suffix == ".tsv":
        src.write_bytes(b"Hi.\tHallo.\n")
    else:
        with open(src, "wb") as f:
            pq.write_table(pa.table({"src": ["Hi."], "tgt": ["Hallo."]}), f)
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 0, result.stderr
    assert texts_of(tmp_path / "ds", "tgt") == ["Hallo."]
    [source] = json.loads((tmp_path / "ds/manifest.json").read_text())["lineage"]["inputs"]
    assert source["files"][0]["path"] == f"{tmp_path}/bad\\xff{suffix}"


def test_output_name_that_is_not_utf8_is_a_usage_error(tmp_path: Path):
    out = non_utf8_name(tmp_path, b"ds\xff")
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    result = run_cli("ingest", src, "--out", out)
    assert result.exit_code == 2
    assert f"--out {tmp_path}/ds\\xff" in result.stderr and "not UTF-8" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("size", ["0", "0K", "0.1"])
def test_shard_bytes_of_zero_is_a_usage_error(tmp_path: Path, size: str):
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    result = run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-bytes", size)
    assert result.exit_code == 2
    assert "--shard-bytes comes to 0 bytes" in result.stderr and "at least 1 byte" in result.stderr
    assert not (tmp_path / "ds").exists()


def test_shard_bytes_above_the_maximum_is_refused_not_capped(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    result = run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-bytes", "5G")
    assert result.exit_code == 2 and "above the maximum of 1G" in result.stderr
    assert not (tmp_path / "ds").exists()
    assert run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-bytes", "1G").exit_code == 0


def test_langs_that_swap_a_moses_pairs_suffixes_are_refused(tmp_path: Path):
    en = write(tmp_path / "q.en", b"Hello\n")
    de = write(tmp_path / "q.de", b"Hallo\n")
    result = run_cli("ingest", en, de, "--langs", "de-en", "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert f"{en} (the source) says en" in result.stderr
    assert f"{de} (the target) says de" in result.stderr and "--langs en,de" in result.stderr
    assert not (tmp_path / "ds").exists()


def test_langs_may_name_a_moses_pairs_languages_in_other_codes(tmp_path: Path):
    """Suffixes in another code scheme (``.eng``) are not a contradiction, only a swap is."""
    eng = write(tmp_path / "q.eng", b"Hello\n")
    deu = write(tmp_path / "q.deu", b"Hallo\n")
    summary = ingest([eng, deu], tmp_path / "ds", langs=["en", "de"])
    assert summary.langs == ["en", "de"] and texts_of(tmp_path / "ds") == ["Hello"]


def test_missing_input_file(tmp_path: Path):
    result = run_cli("ingest", tmp_path / "nope.tsv", "--out", tmp_path / "ds")
    assert result.exit_code == 2 and f"{tmp_path / 'nope.tsv'} does not exist" in result.stderr
    assert not (tmp_path / "ds").exists()


def test_unknown_format_asks_for_format(tmp_path: Path):
    src = write(tmp_path / "corpus.dat", b"a\tb\n")
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "--format" in result.stderr


def test_unwritable_output(tmp_path: Path):
    blocker = write(tmp_path / "file", b"")
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    result = run_cli("ingest", src, "--out", blocker / "ds")
    assert result.exit_code == 1 and str(blocker) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_full_disk_injected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A write that fails with ENOSPC: one line, exit 1, no manifest, no shard left."""
    import spr_data.writer as writer

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer.os, "fsync", no_space)
    src = write(tmp_path / "c.tsv", big_text(100))
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 1 and "no space left" in result.stderr
    assert not (tmp_path / "ds").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_disk_under_a_steps_work_files_is_one_line(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    """numpy's writes on a full disk (the align stage's EM files) fail with an OSError that
    has no errno, only "N requested and M written": read as a full disk, one line, exit 1,
    not "unexpected … please report it". Here the training writes to /dev/full, a device
    that is always full."""
    import numpy as np

    from spr_data.fsio import failed_write_message
    from spr_data.qa.align import LexicalAligner

    with pytest.raises(OSError) as numpy_full:
        np.arange(100_000).tofile("/dev/full")
    with pytest.raises(OSError) as write_full, open("/dev/full", "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
    # numpy's fallocate before a write, the message a fault trial met under the EM files
    fallocate = OSError("Not enough free space to write 59257416 bytes after offset 128")
    for caught in (numpy_full.value, write_full.value, fallocate):
        assert (failed_write_message(caught) or "").startswith("no space left on device")
    assert failed_write_message(FileNotFoundError(errno.ENOENT, "gone", "x")) is None

    def fills_the_disk(*args: object, **kwargs: object) -> None:
        np.arange(100_000).tofile("/dev/full")

    monkeypatch.setattr(LexicalAligner, "train", fills_the_disk)
    src = write(tmp_path / "c.tsv", big_text(300))
    ingest([src], tmp_path / "ds")
    result = run_cli("clean", tmp_path / "ds", "--out", tmp_path / "out", "--workers", "1")
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "no space left on device" in said, said
    assert "unexpected" not in said and "rerun the same command to resume" in said
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_dataset_removed_while_a_run_reads_it_is_one_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A shard gone mid-run (the dataset deleted, or replaced by an ingest --overwrite):
    a missing file, bad input (exit 2), not "unexpected … please report it". The run is made
    to open a shard removed after it started."""
    import spr_data.pipeline.clean as clean_module

    src = write(tmp_path / "c.tsv", big_text(300))
    ingest([src], tmp_path / "ds")
    shard = next((tmp_path / "ds").glob("shard-*.arrow"))

    def reads_a_removed_shard(*args: object, **kwargs: object) -> None:
        shard.unlink()
        with open(shard, "rb"):
            pass

    monkeypatch.setattr(clean_module, "clean", reads_a_removed_shard)
    result = run_cli("clean", tmp_path / "ds", "--out", tmp_path / "out")
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2, said
    assert f"{shard} is gone: it was removed while the run used it" in said
    assert "unexpected" not in said and len(result.stderr.strip().splitlines()) == 1


def test_an_input_replaced_while_clean_reads_it_is_said_as_that(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    """Found by a fault trial: an ``ingest --overwrite`` into the dataset a ``clean`` was
    reading failed the clean as a shard that does not match its hash ("run spr-data verify",
    which then found the new dataset fine). Now the run says the input was replaced."""
    import spr_data.pipeline.clean as clean_module

    src = write(tmp_path / "c.tsv", big_text(3000))
    other = write(tmp_path / "d.tsv", big_text(2000))
    ingest([src], tmp_path / "ds", shard_rows=1000)
    read_unit = clean_module.read_unit

    def replaced_first(*args: Any, **kwargs: Any) -> Any:
        if not (tmp_path / "done").exists():
            (tmp_path / "done").touch()
            ingest([other], tmp_path / "ds", shard_rows=700, overwrite=True)
        return read_unit(*args, **kwargs)

    monkeypatch.setattr(clean_module, "read_unit", replaced_first)
    recipe = write(tmp_path / "r.toml", b'stages = ["normalize", "rules"]\n')
    result = run_cli("clean", tmp_path / "ds", "--out", tmp_path / "out", "--workers", "1",
                     "--recipe", recipe)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2, said
    assert f"{tmp_path / 'ds'} was replaced since it was opened" in said
    assert "verify" not in said and len(result.stderr.strip().splitlines()) == 1


def test_a_work_dir_with_a_local_out_is_refused_not_ignored(tmp_path: Path):
    """--work-dir is where a run for an s3:// --out works; a local --out is its own run
    directory, so the option would be silently ignored: refused, exit 2, nothing made."""
    src = write(tmp_path / "c.tsv", big_text(50))
    for args in (["ingest", src], ["clean", tmp_path / "ds"]):
        if args[0] == "clean":
            ingest([src], tmp_path / "ds")
        result = run_cli(*args, "--out", tmp_path / "out", "--work-dir", tmp_path / "run")
        said = " ".join(result.stderr.split())
        assert result.exit_code == 2 and "is for an --out on an object store" in said, said
        assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_full_disk_on_a_real_small_filesystem(tmp_path: Path):
    """The same on a real 1 MiB tmpfs, where the machine lets us mount one (root, Linux)."""
    with small_tmpfs(tmp_path / "small", "1m") as mnt:
        src = write(tmp_path / "c.tsv", big_text(100000))  # ~3.5 MB
        result = run_cli("ingest", src, "--out", mnt / "ds", "--shard-bytes", "256K")
        assert result.exit_code == 1 and "no space left" in result.stderr
        assert str(mnt / "ds") in result.stderr
        assert not (mnt / "ds").exists()



def test_existing_dataset_is_replaced_only_with_overwrite(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    assert run_cli("ingest", src, "--out", tmp_path / "ds").exit_code == 0
    again = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert again.exit_code == 1 and "--overwrite" in again.stderr
    assert run_cli("ingest", src, "--out", tmp_path / "ds", "--overwrite").exit_code == 0
    assert verify_dataset(tmp_path / "ds").ok


def test_a_directory_with_other_files_is_refused(tmp_path: Path):
    (tmp_path / "ds").mkdir()
    write(tmp_path / "ds/notes.txt", b"mine")
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    with pytest.raises(OutputError, match="not empty"):
        ingest([src], tmp_path / "ds")
    assert (tmp_path / "ds/notes.txt").read_bytes() == b"mine"


def test_files_that_only_look_like_leftovers_are_kept(tmp_path: Path):
    """Leftovers are cleared only when the killed run's work state lists them (see
    test_reliability); a file that merely has a shard-like name is the user's, and stays."""
    out = tmp_path / "ds"
    out.mkdir()
    write(out / "shard-00000.arrow.tmp", b"partial")
    write(out / "shard-00007.arrow", b"stale")
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    with pytest.raises(OutputError, match="spr-data did not write"):
        ingest([src], out)
    assert sorted(p.name for p in out.iterdir()) == ["shard-00000.arrow.tmp",
                                                     "shard-00007.arrow"]


# --- malformed datasets ---------------------------------------------------------------------

@pytest.mark.parametrize("mangle,message", [
    (lambda m: "{not json", "not valid JSON"),
    (lambda m: json.dumps({k: v for k, v in m.items() if k != "shards"}), "missing key 'shards'"),
    (lambda m: json.dumps({**m, "rows": "many"}), "'rows' should be int"),
    (lambda m: json.dumps({**m, "rows": m["rows"] + 1}), "but the shards hold"),
    (lambda m: json.dumps({**m, "kind": "triple"}), "kind should be one of"),
    (lambda m: json.dumps({**m, "format_version": 99}), "format_version 99"),
    (lambda m: json.dumps({**m, "shards": [{**m["shards"][0], "file": "../x"}]}),
     "plain file name"),
])
def test_malformed_manifest_is_a_clear_error(tmp_path: Path, mangle, message: str):
    src = write(tmp_path / "c.tsv", b"a\tb\n")
    ingest([src], tmp_path / "ds")
    manifest = tmp_path / "ds/manifest.json"
    manifest.write_text(mangle(json.loads(manifest.read_text())))
    for command in ("info", "verify"):
        result = run_cli(command, tmp_path / "ds")
        assert result.exit_code == 2, result.stderr
        assert message in result.stderr and str(manifest) in result.stderr


def test_a_directory_without_manifest_is_not_a_dataset(tmp_path: Path):
    result = run_cli("info", tmp_path)
    assert result.exit_code == 2 and "no manifest.json" in result.stderr


@pytest.mark.parametrize("command", ["clean", "tokenize", "info", "verify"])
def test_a_raw_file_given_as_a_dataset_says_to_ingest_it(tmp_path: Path, command: str):
    raw = write(tmp_path / "train.en", b"Hello world\n")
    extra = {"clean": ["--out", str(tmp_path / "out")],
             "tokenize": ["--out", str(tmp_path / "out"), "--tokenizer", "bytes"]}
    result = run_cli(command, raw, *extra.get(command, []))
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2, result.stderr
    assert "is a file, not a dataset directory; make a dataset of it first: spr-data ingest" \
        in said and "Traceback" not in said


def test_a_file_without_any_tsv_line_is_an_error_not_all_rejects(tmp_path: Path):
    src = write(tmp_path / "c.tsv", b"just text\nno tabs here\n\n")
    result = run_cli("ingest", src, "--out", tmp_path / "ds")
    assert result.exit_code == 2 and "tab-separated fields" in result.stderr
    assert not (tmp_path / "ds").exists()


# --- options that do not fit the inputs (a new user's first hour) -----------------------------

def test_options_that_do_not_fit_the_inputs_are_refused_not_ignored(tmp_path: Path):
    tsv = write(tmp_path / "t.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 20)
    jsonl = write(tmp_path / "k.en-de.jsonl",
                  b'{"en": "Two dogs.", "de": "Zwei Hunde."}\n' * 20)
    en = write(tmp_path / "c.en", b"Two dogs.\n" * 20)
    de = write(tmp_path / "c.de", b"Zwei Hunde.\n" * 20)
    refused = {
        ("--langs", ""): "should be SRC-TGT", ("--lang", ""): "--lang is empty",
        ("--keys", ""): "has an empty name", ("--columns", "0,"): "has an empty name",
        ("--keys", "en,de"): "no input is JSONL",
    }
    for (option, value), said in refused.items():
        result = run_cli("ingest", tsv, "--out", tmp_path / "ds", option, value)
        assert result.exit_code == 2 and said in result.stderr, (option, result.stderr)
    for inputs in ([jsonl], [en, de]):
        result = run_cli("ingest", *inputs, "--out", tmp_path / "ds", "--columns", "0,1")
        assert result.exit_code == 2 and "no input is TSV or Parquet" in result.stderr
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


def test_the_languages_follow_the_columns_chosen(tmp_path: Path):
    """``pairs.en-de.tsv --columns 1,0`` puts the German in src: the dataset is de-en (it
    stayed en-de, each side labelled with the other's language)."""
    tsv = write(tmp_path / "p.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 20)
    jsonl = write(tmp_path / "p.en-de.jsonl",
                  b'{"en": "Two dogs.", "de": "Zwei Hunde."}\n' * 20)
    for path, option in ((tsv, {"columns": ["1", "0"]}), (jsonl, {"keys": ["de", "en"]})):
        summary = ingest([path], tmp_path / path.suffix[1:], **option)  # type: ignore[arg-type]
        assert summary.langs == ["de", "en"]
        first = open_dataset(tmp_path / path.suffix[1:]).take([0]).to_pylist()[0]
        assert (first["src"], first["tgt"]) == ("Zwei Hunde.", "Two dogs.")
    assert ingest([tsv], tmp_path / "as_named").langs == ["en", "de"]
    # Tatoeba's layout (id, eng, id, cmn): the later column first is the other order too
    tatoeba = write(tmp_path / "t.eng-cmn.tsv", "1\tTwo dogs.\t2\t两只狗。\n".encode() * 20)
    for columns, langs, first in ((["3", "1"], ["cmn", "eng"], "两只狗。"),
                                  (["1", "3"], ["eng", "cmn"], "Two dogs.")):
        summary = ingest([tatoeba], tmp_path / "".join(columns), columns=columns)
        assert summary.langs == langs
        assert open_dataset(tmp_path / "".join(columns)).take([0]).to_pylist()[0]["src"] == first
    # a name's order need not be the file's (id, German, English in p.en-de.tsv): with
    # columns chosen, --langs says which holds which (it was refused as a contradiction)
    other = write(tmp_path / "o.en-de.tsv", b"1\tZwei Hunde.\tTwo dogs.\n" * 20)
    for columns, langs, first in ((["2", "1"], ["en", "de"], "Two dogs."),
                                  (["1", "2"], ["de", "en"], "Zwei Hunde.")):
        summary = ingest([other], tmp_path / ("o" + "".join(columns)), columns=columns,
                         langs=langs)
        assert summary.langs == langs
        row = open_dataset(tmp_path / ("o" + "".join(columns))).take([0]).to_pylist()[0]
        assert row["src"] == first
    with pytest.raises(InputError, match="contradicts the file name"):
        ingest([other], tmp_path / "fr", columns=["2", "1"], langs=["en", "fr"])
    # of two columns, or of keys named by their languages, the name says which is which: a
    # --langs the other way round is still a contradiction (found by a review)
    two = write(tmp_path / "two.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 20)
    keyed = write(tmp_path / "k.en-de.jsonl", b'{"en": "Two dogs.", "de": "Zwei Hunde."}\n' * 20)
    for path, option in ((two, {"columns": ["0", "1"]}), (two, {"columns": ["1", "0"]}),
                         (keyed, {"keys": ["de", "en"]})):
        langs = ["de", "en"] if option == {"columns": ["0", "1"]} else ["en", "de"]
        with pytest.raises(InputError, match="contradicts the file name"):
            ingest([path], tmp_path / "x", langs=langs, **option)  # type: ignore[arg-type]


def test_a_moses_pair_with_upper_case_suffixes_and_lines_of_spaces(tmp_path: Path):
    en = write(tmp_path / "corpus.EN", b"Two dogs.\n   \nA cat.\n\t\n")
    de = write(tmp_path / "corpus.DE", b"Zwei Hunde.\nEin Haus.\nEine Katze.\n \n")
    summary = ingest([en, de], tmp_path / "ds")
    assert (summary.kind, summary.langs, summary.rows) == ("parallel", ["en", "de"], 2)
    assert summary.rejects == {"empty_field": 1, "empty_line": 1}


def test_info_on_a_manifest_file_names_the_dataset_directory(tmp_path: Path):
    tsv = write(tmp_path / "t.en-de.tsv", b"Two dogs.\tZwei Hunde.\n" * 5)
    ingest([tsv], tmp_path / "ds")
    result = run_cli("info", tmp_path / "ds" / "manifest.json")
    assert result.exit_code != 0
    assert f"name the dataset by its directory: {tmp_path / 'ds'}" in result.stderr
    assert "spr-data ingest" not in result.stderr


def test_what_looks_like_a_pair_or_a_report_is_judged_narrowly(tmp_path: Path):
    """Found by a review of the first-hour fixes: names whose parts are no languages are two
    mono files; a JSONL field of spaces is empty as a TSV's is; --keys swaps only JSONL's
    languages; a large file is never read whole to tell whether it is a report."""
    old = write(tmp_path / "notes.old.txt", b"first\n")
    new = write(tmp_path / "notes.new.txt", b"second\n")
    assert ingest([old, new], tmp_path / "notes").rows == 2
    upper = [write(tmp_path / "wiki.EN.txt", b"Two dogs.\n"),
             write(tmp_path / "wiki.DE.txt", b"Zwei Hunde.\n")]
    with pytest.raises(InputError, match="look like the two sides of a pair"):
        ingest(upper, tmp_path / "wiki")
    jsonl = write(tmp_path / "s.en-de.jsonl", b'{"en": "  ", "de": "x"}\n'
                  + b'{"en": "\\u3000", "de": "y"}\n' + b'{"en": "Hi.", "de": "Hallo."}\n')
    summary = ingest([jsonl], tmp_path / "spaces")
    assert summary.rows == 1 and summary.rejects == {"empty_field": 2}
    tsv = write(tmp_path / "p.en-de.tsv", b"Hello\tHallo\n")
    pair = write(tmp_path / "p.en-de.jsonl", b'{"en": "Hello", "de": "Hallo"}\n')
    with pytest.raises(InputError, match="different language pairs"):
        ingest([pair, tsv], tmp_path / "mixed", keys=["de", "en"])
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of NUL bytes, not a report
    result = run_cli("fertility-report", old, "-t", "chars", "--json", big)
    assert result.exit_code == 2 and "not a report this option wrote" in result.stderr
