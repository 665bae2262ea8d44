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
    root = tmp_path_factory.mktemp("mislabelled")
    ingest([corpora / "parallel/opennmt_wmt_en-de.train.en.gz",
            corpora / "parallel/opennmt_wmt_en-de.train.de.gz"], root / "ds", langs=["en", "fr"])
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
