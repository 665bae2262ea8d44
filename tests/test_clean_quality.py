"""Quality on real pairs: injected junk of every kind is caught, real pairs are kept.

Each corpus from shared/corpora gets 40 junk pairs of each kind (``tests/junk.py``) at random
places with a fixed seed, goes through ``ingest`` and the default ``clean`` recipe, and the
rejected ids are compared with the injected ones. The per-kind recall and the share of real
pairs rejected are what the README's quality table reports (``benchmarks/quality_table.py``).
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from spr_data import ingest, open_dataset
from spr_data.pipeline.clean import clean
from tests.junk import INJECTORS, Pair, inject

PER_KIND = 40


def read_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8").removeprefix("\ufeff").split("\n")[:-1]


def ntrex(corpora: Path, lang: str) -> list[str]:
    """Sentences of another language: NTREX news, for the wrong_language junk."""
    path = corpora / f"multiparallel/ntrex128/newstest2019-ref.{lang}.txt.gz"
    return [line.rstrip("\r") for line in read_lines(path)]


def tatoeba_cmn(corpora: Path) -> list[Pair]:
    rows = [line.split("\t") for line in read_lines(
        corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz") if line]
    return [(r[0], r[1]) for r in rows]


def tatoeba_ben(corpora: Path) -> list[Pair]:
    rows = [line.split("\t") for line in read_lines(
        corpora / "parallel/tatoeba_manythings_eng-ben.tsv") if line]
    return [(r[0], r[1]) for r in rows]


def multi30k(corpora: Path) -> list[Pair]:
    base = corpora / "parallel/multi30k"
    return list(zip(read_lines(base / "train.en.gz"), read_lines(base / "train.de.gz"),
                    strict=True))


#: corpus → (loader, languages, the NTREX language its wrong_language junk comes from)
CORPORA = {"tatoeba-eng-cmn": (tatoeba_cmn, "en-zh", "jpn"),
           "tatoeba-eng-ben": (tatoeba_ben, "en-bn", "hin"),
           "multi30k-en-de": (multi30k, "en-de", "fra")}


@dataclass
class Quality:
    """Recall per injected kind, share of real pairs rejected, and per first reason how many
    rejected rows were junk and how many real (its precision)."""

    recall: dict[str, float]
    real_rejected: float
    junk_by_reason: Counter[str]
    real_by_reason: Counter[str]


def run_quality(pairs: list[Pair], langs: str, foreign: list[str], root: Path) -> Quality:
    mixed, labels = inject(pairs, list(INJECTORS), PER_KIND, seed=7, foreign=foreign)
    (root / "c.src").write_text("".join(s + "\n" for s, _ in mixed), encoding="utf-8")
    (root / "c.tgt").write_text("".join(t + "\n" for _, t in mixed), encoding="utf-8")
    summary = ingest([root / "c.src", root / "c.tgt"], root / "ds", format="moses",
                     langs=langs.split("-"))
    assert summary.records == len(mixed)
    ingest_rejected = set(open_dataset(root / "ds/rejects").take(
        range(summary.records - summary.rows)).column("id").to_pylist())
    recipe = Path(__file__).resolve().parents[1] / "data_manifests" / f"{langs}.toml"
    clean(root / "ds", root / "clean", recipe=recipe, workers=2)
    rejects = open_dataset(root / "clean/rejects")
    table = rejects.take(np.arange(len(rejects)))
    rejected = set(table.column("id").to_pylist()) | ingest_rejected
    recall = {}
    for kind in INJECTORS:
        lines = [i for i, k in labels.items() if k == kind]
        recall[kind] = sum(i in rejected for i in lines) / len(lines)
    real = [i for i in range(len(mixed)) if i not in labels]
    real_rejected = [i for i in real if i in rejected]
    junk_by_reason: Counter[str] = Counter()
    real_by_reason: Counter[str] = Counter()
    for i, reason in zip(table.column("id").to_pylist(), table.column("reason").to_pylist(),
                         strict=True):
        (junk_by_reason if i in labels else real_by_reason)[reason] += 1
    return Quality(recall, len(real_rejected) / len(real), junk_by_reason, real_by_reason)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORPORA))
def test_junk_recall_and_real_pairs_kept(corpora: Path, tmp_path: Path, name: str):
    load, langs, other = CORPORA[name]
    quality = run_quality(load(corpora), langs, ntrex(corpora, other), tmp_path)
    missed = {kind: r for kind, r in quality.recall.items() if r < 0.95}
    assert not missed, f"recall below 0.95: {missed}"
    assert quality.real_rejected <= 0.03, \
        f"{quality.real_rejected:.1%} of real pairs rejected: {quality.real_by_reason}"


def test_opennmt_lines_3_and_5(corpora: Path, tmp_path: Path):
    """Line 3 is a real misaligned pair, line 5 has an empty English side."""
    en = corpora / "parallel/opennmt_wmt_en-de.train.en.gz"
    de = corpora / "parallel/opennmt_wmt_en-de.train.de.gz"
    ingest([en, de], tmp_path / "ds")
    five = open_dataset(tmp_path / "ds/rejects")[0]
    assert (five["origin"]["line"], five["reason"]) == (5, "empty_field")
    clean(tmp_path / "ds", tmp_path / "clean",
          recipe=Path(__file__).resolve().parents[1] / "data_manifests/en-de.toml", workers=2)
    rejects = open_dataset(tmp_path / "clean/rejects")
    by_line = {r["origin"]["line"]: r for r in rejects.take(range(len(rejects))).to_pylist()}
    assert by_line[3]["reason"] == "low_alignment", by_line.get(3)
