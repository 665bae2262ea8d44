"""``clean`` refuses to publish when one reason removes most rows (a wrong language, say), and
publishes on a rerun that accepts the loss, resuming the work it kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spr_data import InputError, ingest, open_dataset, verify_dataset
from spr_data.errors import DataLossError
from spr_data.manifest import MANIFEST_NAME
from spr_data.outdir import WORK_DIR
from spr_data.pipeline.clean import clean
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def mislabelled(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The WMT en-de sample ingested as en-fr: valid codes, the wrong target language."""
    import shutil

    root = tmp_path_factory.mktemp("mislabelled")
    sides = [root / "wmt.src.gz", root / "wmt.tgt.gz"]  # names that say no language
    for lang, side in zip(("en", "de"), sides, strict=True):
        shutil.copy(corpora / f"parallel/opennmt_wmt_en-de.train.{lang}.gz", side)
    ingest(sides, root / "ds", langs=["en", "fr"])
    return root / "ds"


def test_a_wrong_language_stops_clean_before_it_publishes(mislabelled: Path, tmp_path: Path):
    out = tmp_path / "out"
    with pytest.raises(DataLossError) as caught:
        clean(mislabelled, out, workers=1)
    message = str(caught.value)
    assert "wrong_lang_tgt rejects" in message and "max_reason_share (0.5)" in message
    assert "lid_tgt de" in message  # a sample says what the rows really are
    assert "allow_heavy_loss=True" in message and "en-fr" in message
    assert not (out / MANIFEST_NAME).exists()
    # nothing a reader would take for rows: the shards wait under .work (Hugging Face's
    # load_dataset(out) read them as 9,999 rows, rejects mixed in, when they did not)
    assert sorted(p.name for p in out.iterdir()) == [WORK_DIR]
    report = json.loads((out / WORK_DIR / "report.json").read_text())
    assert report["by_reason"]["wrong_lang_tgt"] > 0.5 * report["rows_in"]
    accepted = clean(mislabelled, out, workers=1, allow_heavy_loss=True)
    assert accepted.resumed_shards >= 1  # the refused run's work was kept and reused
    assert accepted.rows_kept < 0.5 * accepted.rows_in
    assert verify_dataset(out).ok and len(open_dataset(out)) == accepted.rows_kept
    assert not (out / WORK_DIR).exists()


def test_the_cli_exits_1_and_accepts_with_the_flag(mislabelled: Path, tmp_path: Path):
    out = tmp_path / "out"
    refused = run_cli("clean", mislabelled, "--out", out, "--quiet")
    assert refused.exit_code == 1 and "--allow-heavy-loss" in refused.stderr
    accepted = run_cli("clean", mislabelled, "--out", out, "--quiet", "--allow-heavy-loss")
    assert accepted.exit_code == 0, accepted.stderr
    assert (out / MANIFEST_NAME).is_file()


def test_the_share_is_a_recipe_key(mislabelled: Path, tmp_path: Path):
    loose = tmp_path / "loose.toml"
    loose.write_text("max_reason_share = 0.99\n")
    report = clean(mislabelled, tmp_path / "out", recipe=loose, workers=1)
    assert report.rows_kept < 0.5 * report.rows_in  # published: under 99% for any reason
    for bad in ("0", "1.5", "-0.1"):
        wrong = tmp_path / "wrong.toml"
        wrong.write_text(f"max_reason_share = {bad}\n")
        with pytest.raises(InputError, match="max_reason_share"):
            clean(mislabelled, tmp_path / "never", recipe=wrong)


def _tatoeba_tsv(corpora: Path, path: Path, first_line: str) -> Path:
    """Tatoeba eng-ben's TSV (3 fields a line) with its first line replaced."""
    lines = (corpora / "parallel/tatoeba_manythings_eng-ben.tsv").read_text(
        encoding="utf-8-sig").splitlines()
    path.write_text("\n".join([first_line, *lines[1:]]) + "\n", encoding="utf-8")
    return path


def test_a_stray_tab_on_a_tsvs_first_line_rejects_that_line_alone(corpora: Path,
                                                                  tmp_path: Path):
    """The field count is the one most lines have, not the first line's."""
    tsv = _tatoeba_tsv(corpora, tmp_path / "in.eng-ben.tsv", "Go.\tযাও।\t\t")
    summary = ingest([tsv], tmp_path / "ds")
    assert summary.rejects == {"tsv_field_count": 1}
    assert summary.rows == summary.records - 1 > 4000


def test_ingest_refuses_a_dataset_most_of_whose_records_one_reason_rejects(tmp_path: Path):
    """A TSV read as three columns when most lines hold two: nothing written, exit 1, the
    reason, its share and its first record named; the flag writes it."""
    tsv = tmp_path / "pairs.en-de.tsv"
    tsv.write_text("".join(f"a{i}\tb{i}\tc{i}\n" for i in range(3))
                   + "".join(f"a{i}\tb{i}\n" for i in range(3, 120)), encoding="utf-8")
    with pytest.raises(DataLossError) as caught:
        ingest([tsv], tmp_path / "ds", columns=["0", "2"])
    message = str(caught.value)
    assert "tsv_field_count rejects 117 of the 120 records (98%)" in message
    assert "line 4: 'a3\\tb3'" in message and "--columns" in message
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())
    refused = run_cli("ingest", tsv, "--out", tmp_path / "cli", "--columns", "0,2", "--quiet")
    assert refused.exit_code == 1 and "--allow-heavy-loss" in refused.stderr
    accepted = run_cli("ingest", tsv, "--out", tmp_path / "cli", "--columns", "0,2", "--quiet",
                       "--allow-heavy-loss")
    assert accepted.exit_code == 0, accepted.stderr
    assert len(open_dataset(tmp_path / "cli")) == 3
    tsv.write_text("".join(f"a{i}\tb{i}\tc{i}\n" for i in range(3))  # a handful: no guard
                   + "".join(f"a{i}\tb{i}\n" for i in range(3, 40)), encoding="utf-8")
    assert ingest([tsv], tmp_path / "small", columns=["0", "2"]).rows == 3


def test_too_few_pairs_for_align_after_a_wrong_language_names_the_reason(corpora: Path,
                                                                         tmp_path: Path):
    """Swapped sides: language id takes nearly every row before align, which then cannot
    train. The refusal names that reason, its share and sample rows, as when align runs (exit
    1), not align's 'a corpus this small'; allowed the loss, align's own error says how few
    rows reached it."""
    import gzip
    sides = []
    for name, lang in (("a.txt", "de"), ("b.txt", "en")):  # names that say no language
        sides.append(tmp_path / name)
        sides[-1].write_bytes(gzip.decompress(
            (corpora / f"parallel/multi30k/val.{lang}.gz").read_bytes()))
    ingest(sides, tmp_path / "ds", format="moses", langs=["en", "de"])
    with pytest.raises(DataLossError) as refused:
        clean(tmp_path / "ds", tmp_path / "out", workers=1)
    message = str(refused.value)
    assert "clean stopped at the align stage: swapped_sides rejects" in message, message
    assert "of 1,014 rows" in message and "(lid_src de, lid_tgt en)" in message
    assert "could not run on the" in message and "rows left" in message
    assert not (tmp_path / "out" / "manifest.json").exists()
    with pytest.raises(InputError) as caught:
        clean(tmp_path / "ds", tmp_path / "out", workers=1, allow_heavy_loss=True)
    assert "rows passed the stages before align" in str(caught.value)
    assert "of the 1,014 rows" in str(caught.value)


def test_a_corpus_of_one_template_says_its_negatives_met_the_rules(tmp_path: Path):
    """Rows of one template whose numbers differ: every pair mixed with another is taken for
    numbers_mismatch, so the calibration has no negatives; the error says that, not only
    'a corpus this small' (400 rows are not few)."""
    src, tgt = tmp_path / "c.en", tmp_path / "c.de"
    src.write_text("".join(f"Item {i} costs {i + 7} euros .\n" for i in range(400)),
                   encoding="utf-8")
    tgt.write_text("".join(f"Artikel {i} kostet {i + 7} Euro .\n" for i in range(400)),
                   encoding="utf-8")
    ingest([src, tgt], tmp_path / "ds", format="moses", langs=["en", "de"])
    with pytest.raises(InputError) as caught:
        clean(tmp_path / "ds", tmp_path / "out", workers=1)
    message = str(caught.value)
    assert "negatives made of the corpus' own pairs passed the recipe's rules" in message
    assert "numbers_mismatch" in message and "align.min_score" in message
    # set by hand, the threshold needs no negatives: the same corpus is cleaned
    recipe = tmp_path / "r.toml"
    recipe.write_text("[align]\nmin_score = -10.0\n", encoding="utf-8")
    report = clean(tmp_path / "ds", tmp_path / "out2", recipe=recipe, workers=1)
    assert report.rows_kept == 400


def test_a_jsonl_refused_for_its_keys_says_which_keys_it_read(tmp_path: Path):
    """The first record's keys chose src/tgt; the rest hold en/de: the error names the keys
    read and the option that changes them."""
    jsonl = tmp_path / "k.en-de.jsonl"
    jsonl.write_text(json.dumps({"src": "a", "tgt": "b"}) + "\n" + "".join(
        json.dumps({"en": f"Two dogs {i}.", "de": f"Zwei Hunde {i}."}) + "\n"
        for i in range(200)), encoding="utf-8")
    with pytest.raises(DataLossError) as caught:
        ingest([jsonl], tmp_path / "ds")
    message = str(caught.value)
    assert "missing_key rejects 200 of the 201 records" in message
    assert "(read with keys src,tgt); name the keys that hold the text with --keys" in message
    assert "(keys=)" not in message
    assert len(open_dataset(ingest([jsonl], tmp_path / "ok", keys=["en", "de"]).out)) == 200
