"""``shifted_lines``: runs of rows where a pair of files slipped a line are found as runs.

Real Multi30k en–de and Tatoeba eng–cmn pairs, with blocks whose targets are one line off
(either way) put in: the block's rows are flagged, real rows almost never, and a cross pair
the model was trained on (a shifted negative) is not evidence.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spr_data.pipeline.clean import clean
from spr_data.qa.align import AlignerOptions, LexicalAligner, shifted_runs
from tests.junk import mix, spr_rejections, tatoeba_ben, tatoeba_cmn
from tests.test_align_calibration import (
    Pair,
    dataset_of,
    multi30k_pairs,
    rejected_rows,
    row_of_id,
)


def with_slips(pairs: list[Pair], blocks: int, seed: int,
               ) -> tuple[list[Pair], np.ndarray]:
    """``blocks`` runs of 5-20 rows whose targets are one line off, half of them lagging (a
    line lost on the source side) and half leading (lost on the target side); the labels."""
    rng = random.Random(seed)
    out = list(pairs)
    slipped = np.zeros(len(pairs), bool)
    step = len(pairs) // blocks
    for b in range(blocks):
        k = rng.randint(5, 20)
        start = b * step + rng.randrange(1, step - k - 2)
        lead = b % 2 == 0
        for i in range(start, start + k):
            out[i] = (pairs[i][0], pairs[i + 1][1] if lead else pairs[i - 1][1])
        slipped[start:start + k] = True
    return out, slipped


def flagged(pairs: list[Pair], langs: tuple[str, str], **kwargs: object) -> np.ndarray:
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    aligner = LexicalAligner.train(src, tgt, AlignerOptions(*langs))
    return shifted_runs(aligner, src, tgt, aligner.score(src, tgt), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("corpus", "langs"), [("multi30k", ("en", "de")),
                                               ("tatoeba", ("en", "zh"))])
def test_slipped_blocks_are_flagged_and_real_rows_kept(corpora: Path, corpus: str,
                                                       langs: tuple[str, str]):
    real = (multi30k_pairs(corpora, 6000) if corpus == "multi30k"
            else tatoeba_cmn(corpora)[::4][:6000])
    pairs, slipped = with_slips(real, blocks=20, seed=5)
    found = flagged(pairs, langs)
    recall = found[slipped].mean()
    false_alarms = found[~slipped].sum()
    # the rows just outside a block join it through their cross pair (their own line is the
    # block's missing one): allow those two per block, nothing else
    assert recall >= 0.85, recall
    assert false_alarms <= 2 * 20, false_alarms
    assert found[~slipped].mean() < 0.01


def test_a_corpus_without_slips_loses_nothing(corpora: Path):
    found = flagged(multi30k_pairs(corpora, 6000), ("en", "de"))
    assert found.sum() == 0


def test_a_cross_pair_trained_on_is_no_evidence(corpora: Path):
    """The model is trained on (source i, target i+1) for a few neighbouring rows, as clean
    trains on its shifted negatives: those cross pairs are not a slip of the files."""
    pairs = tatoeba_ben(corpora)[:3000]  # a small corpus: a weak model, easily taught
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    taught = np.arange(1000, 1012)  # rows whose (source, next target) the model learns
    train_tgt = tgt.to_pylist()
    for i in taught:  # in place of their own pair, as clean's negatives take a row's place
        train_tgt[i] = pairs[i + 1][1]
    train_src, train_tgt = src, pa.array(train_tgt)
    told = np.zeros(len(pairs), bool)
    told[taught + 1] = True  # (previous source, this target) was trained on
    # each direction's EM alone learns the lesson by heart: without being told, it looks like
    # a slip; by agreement (the default) these twelve one-sided links never took hold
    for agreement, fooled_untold in ((False, True), (True, False)):
        aligner = LexicalAligner.train(train_src, train_tgt,
                                       AlignerOptions("en", "bn", agreement=agreement))
        scores = aligner.score(src, tgt)
        fooled = shifted_runs(aligner, src, tgt, scores)
        assert fooled[1000:1013].any() == fooled_untold, agreement
        assert not shifted_runs(aligner, src, tgt, scores, trained_cross=told).any()


def test_nothing_to_compare_in_two_rows_or_when_turned_off(corpora: Path):
    pairs, _ = with_slips(multi30k_pairs(corpora, 3000), blocks=5, seed=1)
    assert not flagged(pairs, ("en", "de"), min_links=0).any()
    src, tgt = pa.array(["a b", "c d"]), pa.array(["x y", "z w"])
    aligner = LexicalAligner.train(src, tgt, AlignerOptions("en", "de"))
    assert not shifted_runs(aligner, src, tgt, aligner.score(src, tgt)).any()


def test_clean_rejects_slipped_rows_as_shifted_lines(corpora: Path, tmp_path: Path):
    pairs, slipped = with_slips(multi30k_pairs(corpora, 8000), blocks=12, seed=2)
    ds = dataset_of(pairs, tmp_path / "in")
    clean(ds, tmp_path / "out", workers=1)
    row = row_of_id(ds)
    rejected = {row[i]: reason for i, reason in rejected_rows(tmp_path / "out").items()}
    caught = np.mean([i in rejected for i in np.flatnonzero(slipped)])
    assert caught >= 0.95, caught
    assert any(r == "shifted_lines" for r in rejected.values())
    real_lost = [i for i in np.flatnonzero(~slipped) if rejected.get(int(i)) == "shifted_lines"]
    assert len(real_lost) <= 2 * 12
    off = tmp_path / "off.toml"
    off.write_text('name = "no-shift"\n[align]\nshift_links = 0\n')
    clean(ds, tmp_path / "out-off", recipe=off, workers=1)
    assert "shifted_lines" not in set(rejected_rows(tmp_path / "out-off").values())


def test_clean_of_a_real_corpus_finds_no_slip(corpora: Path, tmp_path: Path):
    """Tatoeba eng-ben as it is: clean trains its model with shifted negatives in place of
    some rows; were those cross pairs counted, runs of them would look like slips (9 rows
    here before they were left out)."""
    real = mix(tatoeba_ben(corpora), 0.0, seed=13, max_rows=30000)
    rejected, _ = spr_rejections(real, "en-bn", tmp_path, workers=1)
    assert len(real.pairs) > 4000
    assert "shifted_lines" not in set(rejected.values())


def test_rows_a_rejected_row_separates_are_not_neighbours(corpora: Path):
    """Links join lines next to each other in the file: two rows with a rejected row between
    them are no neighbours' lines, within a slice or across two (their cross pair, scored,
    took real pairs for slipped lines now and then: the quality sweep's Multi30k en–de and
    Tatoeba eng–ben mixes lost 3 real pairs that way)."""
    from spr_data.qa.align_stage import _CrossLinks

    pairs = multi30k_pairs(corpora, 400)
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    links = _CrossLinks(LexicalAligner.train(src, tgt, AlignerOptions("en", "de")))
    alive = np.array([0, 1, 3, 4, 5, 9, 10])  # rows 2 and 6-8 were rejected
    unsure = np.ones(alive.size, dtype=bool)
    # three slices, 0 1 3 | 4 5 | 9 10: a link across one, and a gap across another
    for part in (slice(0, 3), slice(3, 5), slice(5, None)):
        rows = alive[part]
        links.add(src.take(pa.array(rows)), tgt.take(pa.array(rows)), unsure[part], rows)
    down, up = links.scores()
    linked = np.isfinite(down) & np.isfinite(up)
    # per alive row: a link to the alive row before it only where that is the file's row before
    assert linked.tolist() == [False, True, False, True, True, False, True]
    assert down[1] == pytest.approx(float(links.aligner.score(src.take(pa.array([1])),
                                                              tgt.take(pa.array([0])))[0]))
