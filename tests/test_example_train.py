"""``examples/train_tiny_mt.py``: the loss falls, and a resumed run sees the exact next batches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_tiny_mt.py"


def load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("train_tiny_mt", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loss_falls_and_a_resume_continues_with_the_exact_next_batches(tmp_path: Path):
    example = load_example()
    full = example.train(tmp_path / "a", steps=36, save_every=18, log_every=12)
    losses = [r["loss"] for r in full]
    assert sum(losses[-6:]) / 6 < 0.8 * sum(losses[:6]) / 6
    assert all(r["stepped"] for r in full)
    # a run that stopped after its checkpoint at step 18, started again with --resume
    first = example.train(tmp_path / "b", steps=18, save_every=18)
    assert [r["ids"] for r in first] == [r["ids"] for r in full[:18]]
    resumed = example.train(tmp_path / "b", steps=36, save_every=18, resume=True)
    assert [r["step"] for r in resumed] == list(range(19, 37))
    assert [r["ids"] for r in resumed] == [r["ids"] for r in full[18:]]
    assert [r["epoch"] for r in resumed] == [r["epoch"] for r in full[18:]]


def test_other_language_pairs_take_langs_and_bad_data_is_one_line(corpora: Path, tmp_path: Path):
    """``--data`` was read as English–Chinese whatever it held: German targets all failed the
    script check, with a traceback. ``--langs`` names the pair; a wrong one is one line."""
    import gzip
    import subprocess
    import sys

    from spr_data import open_dataset

    base = corpora / "parallel/multi30k"
    en, de = (gzip.decompress((base / f"train.{lang}.gz").read_bytes()).decode().splitlines()
              for lang in ("en", "de"))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in list(zip(en, de, strict=True))[:2000]),
                     encoding="utf-8")
    dataset, _ = load_example().prepare(tmp_path / "de", pairs, vocab_size=500,
                                        langs=("en", "de"))
    assert open_dataset(dataset).langs == ["en", "de"] and len(open_dataset(dataset)) > 1900
    run = subprocess.run([sys.executable, str(EXAMPLE), "--work", str(tmp_path / "zh"),
                          "--data", str(pairs), "--steps", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: clean stopped") and "(en-zh)" in run.stderr
