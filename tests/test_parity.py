"""Parity only over inputs that really are line-parallel.

``--sample N`` gives every input N lines, so equal counts prove nothing: inputs are compared
only when declared parallel (the two sides of one dataset) or detected so from their line
lengths against shifted negatives; otherwise the report says why parity is not computed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spr_data import ingest
from spr_data.pipeline.fertility import fertility_report, line_parallel, read_sources
from spr_data.tokenizers import load_tokenizer
from tests.conftest import run_cli


def ntrex(corpora: Path, name: str) -> Path:
    return corpora / "multiparallel/ntrex128" / f"newstest2019-{name}.txt.gz"


def by_lang(report: dict, tokenizer: str = "chars") -> dict:
    return report["tokenizers"][tokenizer]["by_lang"]


def test_multi_parallel_files_are_detected_even_when_sampled(corpora: Path):
    inputs = [ntrex(corpora, n) for n in ("src.eng", "ref.ben", "ref.zho-CN", "ref.rus")]
    report = fertility_report(read_sources(inputs, sample=300, seed=3),
                              [load_tokenizer("bytes")])
    pairs = report["parity"]["pairs"]
    assert {p["input"] for p in pairs} == {p.name for p in inputs[1:]}
    assert all(p["how"] == "detected" and p["length_correlation"] > 0.8 for p in pairs)
    langs = by_lang(report, "bytes")
    assert langs["en"]["parity"] == 1.0
    # bytes per same sentence: Bengali takes ~3 UTF-8 bytes a letter
    assert langs["bn"]["parity"] == pytest.approx(langs["bn"]["tokens"] / langs["en"]["tokens"],
                                                  abs=1e-4)
    assert langs["bn"]["parity"] > 2 and report["parity"]["not_parallel"] == {}


def test_unrelated_inputs_of_as_many_lines_get_no_parity(corpora: Path, tmp_path: Path):
    """The case of the issue: unrelated inputs sampled to the same size looked multi-parallel
    (English parity 3.39 "against itself"). The Bengali of Tatoeba's ben-eng test set is no
    translation of the English of its hin-eng one, though both hold 1,000 lines."""
    laser = corpora / "parallel/tatoeba_laser"
    inputs = [laser / "tatoeba.hin-eng.eng", corpora / "parallel/opennmt_wmt_en-de.train.en.gz",
              laser / "tatoeba.ben-eng.ben"]
    result = run_cli("fertility-report", *inputs, "-t", "chars", "--sample", "500",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    langs = by_lang(report)
    assert langs["bn"]["segments"] == 500 and langs["en"]["segments"] == 1000
    assert langs["bn"]["parity"] is None and langs["en"]["parity"] is None
    assert "do not go together" in langs["bn"]["parity_note"]
    assert "line-parallel" in langs["en"]["parity_note"]
    assert report["parity"]["pairs"] == []
    assert "parity — bn:" in result.stdout  # the table says why, too


def test_different_line_counts_are_named(corpora: Path):
    inputs = [ntrex(corpora, "src.eng"), corpora / "parallel/tatoeba_laser/tatoeba.ben-eng.ben"]
    report = fertility_report(read_sources(inputs), [load_tokenizer("chars")])
    note = by_lang(report)["bn"]["parity_note"]
    assert "1,000 lines" in note and "1,997" in note


def test_a_small_parallel_pair_is_detected(corpora: Path):
    base = corpora / "parallel/tatoeba_laser"
    report = fertility_report(read_sources([base / "tatoeba.ben-eng.eng",
                                            base / "tatoeba.ben-eng.ben"], sample=200),
                              [load_tokenizer("chars")])
    assert by_lang(report)["bn"]["parity"] is not None


def test_the_two_sides_of_a_dataset_are_declared_parallel(corpora: Path, tmp_path: Path):
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], tmp_path / "ds",
           langs=["en", "bn"])
    report = fertility_report(read_sources([tmp_path / "ds"], sample=400),
                              [load_tokenizer("chars")])
    [pair] = report["parity"]["pairs"]
    assert pair["how"] == "declared" and pair["input"] == "ds:tgt"
    langs = by_lang(report)
    assert langs["bn"]["parity"] == pytest.approx(langs["bn"]["tokens"] / langs["en"]["tokens"],
                                                  abs=1e-4)


def test_line_lengths_tell_parallel_from_shuffled_and_sorted(corpora: Path):
    en = read_sources([ntrex(corpora, "src.eng")])[0].texts
    de = read_sources([ntrex(corpora, "ref.deu")])[0].texts
    wmt = read_sources([corpora / "parallel/opennmt_wmt_en-de.train.en.gz"])[0].texts[:len(en)]
    assert line_parallel(en, de)[0]
    shuffled = de[:]
    random.Random(0).shuffle(shuffled)
    assert not line_parallel(en, shuffled)[0]
    # two unrelated files both sorted by length correlate highly, but so do their shifts
    parallel, aligned, _ = line_parallel(sorted(en, key=len), sorted(wmt, key=len))
    assert aligned > 0.9 and not parallel


def test_parallel_files_can_be_declared(corpora: Path, tmp_path: Path):
    """Ten lines are too few for the lengths to show it; ``--parallel`` says so instead, and
    files of other line counts are then refused."""
    en = read_sources([ntrex(corpora, "src.eng")])[0].texts[:10]
    bn = read_sources([ntrex(corpora, "ref.ben")])[0].texts[:10]
    assert not line_parallel(en, bn)[0]
    (tmp_path / "few.eng.txt").write_text("\n".join(en) + "\n")
    (tmp_path / "few.ben.txt").write_text("\n".join(bn) + "\n")
    files = [tmp_path / "few.eng.txt", tmp_path / "few.ben.txt"]
    declared = fertility_report(read_sources(files, parallel=True), [load_tokenizer("chars")])
    assert declared["parity"]["pairs"][0]["how"] == "declared"
    assert by_lang(declared)["bn"]["parity"] is not None
    (tmp_path / "few.ben.txt").write_text("\n".join(bn[:9]) + "\n")
    result = run_cli("fertility-report", *files, "-t", "chars", "--parallel")
    assert result.exit_code == 2 and "--parallel" in result.stderr and "10" in result.stderr
