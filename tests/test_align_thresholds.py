"""Which threshold decides in the align stage, on generated scores where the truth is known:
the calibration of the rows the model was trained on and of those it was not, a threshold
set by hand, the ``partial_translation`` fit, and the warnings ``report.json`` gives.

(The calibration itself, :func:`spr_data.qa.align.calibrate`, and the whole stage on real
pairs are specified in ``tests/test_align_calibration.py``.)
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pyarrow as pa
import pytest

from spr_data.qa.align import NEGATIVE_KINDS, Negatives, PartialFit
from spr_data.qa.align_stage import AlignStage
from spr_data.recipe import AlignConfig

REPAIRED, SHIFTED, CUT = (NEGATIVE_KINDS.index(k)
                          for k in ("repaired", "shifted", "truncated_tgt"))


def stage(**align: object) -> AlignStage:
    return AlignStage(replace(AlignConfig(), **align), "en", "de")


def negatives(kinds: np.ndarray) -> Negatives:
    """Negatives of these kinds, their texts already let go (as the stage holds them)."""
    n = kinds.size
    empty = pa.array([], pa.large_string())
    return Negatives(empty, empty, kinds.astype(np.int8), np.arange(n), np.arange(n),
                     np.full(n, -1))


def scores(seed: int, real: int, junk: int) -> np.ndarray:
    """Real pairs scoring about -1.5, junk about -4.5 (as a trained model scores them)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(-1.5, 0.4, real), rng.normal(-4.5, 0.7, junk)])


def pair_negatives(seed: int, n: int = 4000) -> tuple[Negatives, np.ndarray]:
    rng = np.random.default_rng(seed)
    return negatives(rng.choice([REPAIRED, SHIFTED], n)), rng.normal(-4.5, 0.7, n)


def decide(st: AlignStage, corpus: np.ndarray, trained: np.ndarray, *, outside: bool = False,
           whole: bool = False, unseen: tuple[Negatives, np.ndarray] | None = None):
    seen_neg, seen_scores = pair_negatives(1)
    return st._thresholds(corpus, trained, (seen_neg, seen_scores, seen_scores),
                          unseen or pair_negatives(2), outside=outside, whole=whole,
                          note=lambda: pytest.fail("the note is read only for an error"))


def test_trained_and_held_out_rows_each_get_the_threshold_of_their_own_negatives():
    corpus = np.concatenate([scores(3, 9000, 1000), scores(4, 900, 100)])
    trained = np.arange(corpus.size) < 10_000
    decided = decide(stage(), corpus, trained)
    assert decided.method == "calibrated" and not decided.warnings
    assert decided.thresholds == {"seen": decided.seen.threshold,
                                  "unseen": decided.unseen.threshold}
    for cal in (decided.seen, decided.unseen):
        assert abs(cal.misaligned_share - 0.1) <= 0.03
        assert -3.6 < cal.threshold < -2.5  # between the real pairs and the junk


def test_a_model_that_never_saw_the_corpus_is_calibrated_once_on_the_held_out_negatives():
    corpus = scores(3, 9000, 1000)
    unseen = pair_negatives(2)
    decided = decide(stage(), corpus, np.zeros(corpus.size, bool), outside=True, unseen=unseen)
    assert decided.seen is decided.unseen
    assert decided.negatives is unseen[0] and decided.negative_scores is unseen[1]


def test_where_every_row_is_trained_the_seen_threshold_decides_them_all():
    corpus = scores(3, 9000, 1000)
    decided = decide(stage(), corpus, np.ones(corpus.size, bool), whole=True)
    assert decided.unseen is decided.seen


def test_held_out_rows_with_no_negatives_of_their_own_are_kept_and_the_report_says_so():
    corpus = np.concatenate([scores(3, 9000, 1000), scores(4, 45, 5)])
    trained = np.arange(corpus.size) < 10_000
    cut_only = (negatives(np.full(50, CUT)), np.full(50, -6.0))
    decided = decide(stage(), corpus, trained, unseen=cut_only)
    assert decided.thresholds["unseen"] == np.finfo(np.float64).min
    assert any("too few rows were held out" in w for w in decided.warnings)
    by_hand = decide(stage(min_score=-3.0), corpus, trained, unseen=cut_only)
    assert by_hand.thresholds == {"seen": -3.0, "unseen": -3.0}
    assert by_hand.method == "min_score" and not by_hand.warnings


def test_held_out_rows_far_more_misaligned_than_trained_ones_are_reported():
    # random rows of one corpus: a model that scores those it saw much higher than those it
    # did not tells seen from unseen, not translations from junk
    corpus = np.concatenate([scores(3, 9500, 500), scores(4, 600, 400)])
    trained = np.arange(corpus.size) < 10_000
    decided = decide(stage(), corpus, trained)
    assert decided.unseen.misaligned_share - decided.seen.misaligned_share > 0.1
    assert any("held out of training look" in w for w in decided.warnings)


def test_a_quantile_asked_for_rejects_that_share_and_warns_with_the_calibrated_value():
    corpus = scores(3, 9000, 1000)
    trained = np.ones(corpus.size, bool)
    decided = decide(stage(quantile=0.02), corpus, trained, whole=True)
    assert decided.method == "quantile"
    assert decided.thresholds["seen"] == decided.thresholds["unseen"] == pytest.approx(
        np.quantile(corpus, 0.02))
    assert f"({decided.seen.threshold:.3f} here)" in decided.warnings[0]


def test_partial_translation_is_fitted_on_the_kept_rows_or_not_checked_with_a_reason():
    rng = np.random.default_rng(5)
    n = 4000
    corpus = scores(3, n - 400, 400)
    trained = np.ones(n, bool)
    thresholds = {"seen": -3.0, "unseen": -3.0}
    length = rng.integers(5, 40, n).astype(float)
    signs = np.stack([rng.normal(0.2, 0.3, n), rng.standard_normal(n), length])
    signs[:2, n - 400:] += 3.0  # the junk says more: a fit that took it would be wider
    # every side ends its sentence but the targets of 10 real pairs
    ends, more = np.ones((2, n), bool), np.zeros((2, n), bool)
    ends[1, :10] = False
    marks = (ends, more)
    warnings: list[str] = []
    fit = stage()._says_more(corpus, trained, thresholds, signs[0], (signs[1], signs[2]),
                             marks, _length_fit(), one_group=True, warnings=warnings)
    assert fit is not None and not warnings
    # both sides end their sentences (the targets all but 10 of ~1,000 even pairs): a missing
    # mark counts, the more the rarer it is
    assert fit["judged_by_end"] == [True, True]
    assert fit["unended"][0] == 0.0 and 0.0 < fit["unended"][1] < 0.02
    assert fit["z_lost_end"][0] == pytest.approx(2.537, abs=1e-3)  # the 1-in-1,000 floor
    assert 2.537 < fit["z_lost_end"][1] < 3.5
    kept = corpus >= -3.0  # the rows the threshold keeps, and only they, make the fit
    assert fit["fit"] == asdict(PartialFit.of(*signs[:, kept]))
    assert fit["fit"] != asdict(PartialFit.of(*signs))
    assert fit["fit"] == fit["fit_unseen"] and fit["rejected"] == fit["rejected_unseen"]
    assert 0.0 <= fit["rejected"] < 0.01  # a fit of these rows rejects next to none of them
    assert stage(partial_z=0.0)._says_more(corpus, trained, thresholds, signs[0],
                                           (signs[1], signs[2]), marks, _length_fit(),
                                           one_group=True, warnings=warnings) is None
    assert not warnings  # turned off: nothing to say
    assert stage()._says_more(corpus, trained, thresholds, signs[0], None, marks, None,
                              one_group=True, warnings=warnings) is None
    assert "no rules stage" in warnings[-1]
    few = stage()._says_more(corpus[:3], trained[:3], thresholds, signs[0, :3],
                             (signs[1, :3], signs[2, :3]), (ends[:, :3], more[:, :3]),
                             _length_fit(), one_group=True, warnings=warnings)
    assert few is None and "too few pairs to fit" in warnings[-1]


def _length_fit():
    """A length fit of translations of equal length (what the report shows beside the
    partial-translation fit)."""
    from spr_data.qa.rules import LengthRatioFit

    rng = np.random.default_rng(6)
    a = rng.integers(10, 60, 2000).astype(float)
    return LengthRatioFit.of(a, a * np.exp(rng.normal(0.0, 0.1, a.size)), 1.0)
