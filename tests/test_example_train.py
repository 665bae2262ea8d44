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
