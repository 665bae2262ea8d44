"""The calibrated alignment decision: negatives from the corpus, the threshold, p_translation.

Real pairs (Multi30k en–de) with junk injected at 25% and 50% go through ``clean``; the junk
is caught and the real pairs kept whatever the junk share, the report estimates that share,
and cleaning a cleaned dataset again removes almost nothing.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spr_data import ingest, open_dataset
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import CleanReport, clean
from spr_data.pipeline.tokenize import tokenize
from spr_data.qa.align import (
    NEGATIVE_KINDS,
    SCORE_EDGES,
    AlignerOptions,
    LexicalAligner,
    calibrate,
    p_translation,
    row_hash,
    synthetic_negatives,
)
from tests.conftest import run_cli

Pair = tuple[str, str]


def multi30k_pairs(corpora: Path, n: int) -> list[Pair]:
    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().split("\n")
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().split("\n")
    return [(s, t.replace("\t", " ")) for s, t in zip(en[:n], de[:n], strict=True)]


def first_quarter(text: str) -> str:
    words = text.split()
    return " ".join(words[:max(1, len(words) // 4)])


def with_junk(pairs: list[Pair], share: float, seed: int) -> tuple[list[Pair], list[str]]:
    """``share`` of the rows replaced by junk: re-paired, shifted blocks, partial targets."""
    rng = random.Random(seed)
    out, kinds = list(pairs), ["real"] * len(pairs)
    rows = list(range(len(pairs) - 1))
    rng.shuffle(rows)
    budget = int(share * len(pairs))
    for i in rows:
        if budget <= 0:
            break
        if kinds[i] != "real" or kinds[i + 1] != "real":
            continue
        kind = ("repaired", "shifted", "partial")[rng.randrange(3)]
        if kind == "repaired":
            out[i] = (pairs[i][0], pairs[rng.randrange(len(pairs))][1])
        elif kind == "partial":
            out[i] = (pairs[i][0], first_quarter(pairs[i][1]))
        else:
            out[i] = (pairs[i][0], pairs[i + 1][1])  # a line of a Moses file off by one
        kinds[i] = kind
        budget -= 1
    return out, kinds


def dataset_of(pairs: list[Pair], root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "c.en").write_text("".join(s + "\n" for s, _ in pairs))
    (root / "c.de").write_text("".join(t + "\n" for _, t in pairs))
    ingest([root / "c.en", root / "c.de"], root / "ds", shard_rows=5000)
    return root / "ds"


def rejected_rows(out: Path) -> dict[int, str]:
    rejects = open_dataset(out / REJECTS_DIR)
    table = rejects.take(np.arange(len(rejects)))
    return dict(zip(table.column("id").to_pylist(), table.column("reason").to_pylist(),
                    strict=True))


def row_of_id(dataset: Path) -> dict[int, int]:
    ds = open_dataset(dataset)
    return {int(i): k for k, i in enumerate(ds.take(np.arange(len(ds))).column("id").to_pylist())}


# ---------------------------------------------------------------------------------------------
# Negatives


def test_negatives_are_of_every_kind_seeded_and_never_a_corpus_pair(corpora: Path):
    pairs = multi30k_pairs(corpora, 3000)
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    neg = synthetic_negatives(src, tgt, share=0.05, seed=7)
    counts = neg.counts()
    assert set(counts) == set(NEGATIVE_KINDS)
    assert all(n >= 0.8 * 0.05 * len(pairs) for n in counts.values()), counts
    again = synthetic_negatives(src, tgt, share=0.05, seed=7)
    assert neg.src.equals(again.src) and neg.tgt.equals(again.tgt)
    assert not neg.tgt.equals(synthetic_negatives(src, tgt, share=0.05, seed=8).tgt)
    corpus = set(pairs)
    made = list(zip(neg.src.to_pylist(), neg.tgt.to_pylist(), strict=True))
    assert not corpus & set(made)
    target_of = dict(pairs)
    for (s, t), kind in zip(made, neg.kinds.tolist(), strict=True):
        if NEGATIVE_KINDS[kind] == "truncated_tgt":
            whole = " ".join(target_of[s].split())  # a cut keeps words, one space apart
            assert whole.startswith(t) and len(t) <= 0.7 * len(target_of[s])


def test_some_kinds_of_negatives_are_the_same_pairs_from_the_same_rows(corpora: Path):
    """The align stage makes its trained-on negatives of two whole sentences only (a cut
    side's negative would hold its row out of training and calibrate nothing): the same pairs
    as when every kind is made, and only their rows drawn."""
    pairs = multi30k_pairs(corpora, 3000)
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    every = synthetic_negatives(src, tgt, share=0.05, seed=7)
    whole = synthetic_negatives(src, tgt, share=0.05, seed=7, kinds=["repaired", "shifted"])
    assert set(whole.counts()[k] for k in ("truncated_tgt", "truncated_src")) == {0}
    pair = np.isin(every.kinds, [0, 1])
    assert whole.src.equals(every.src.filter(pa.array(pair)))
    assert whole.tgt.equals(every.tgt.filter(pa.array(pair)))
    assert set(whole.drawn.tolist()) < set(every.drawn.tolist())
    assert len(whole.drawn) == len(every.drawn) // 2 and set(whole.rows) <= set(whole.drawn)
    from spr_data import InputError

    with pytest.raises(InputError, match="unknown negative kinds"):
        synthetic_negatives(src, tgt, share=0.05, seed=7, kinds=["re-paired"])


def test_a_re_paired_negative_takes_a_target_of_about_its_own_length(corpora: Path):
    """The junk that reaches the align stage passed the length-ratio rule: a re-paired
    negative's target is of about the length of the one it replaces (a random partner's
    differs by a third of a sentence, and its length alone gave it away)."""
    pairs = multi30k_pairs(corpora, 5000)
    src, tgt = pa.array([s for s, _ in pairs]), pa.array([t for _, t in pairs])
    neg = synthetic_negatives(src, tgt, share=0.05, seed=3)
    repaired = neg.kinds == NEGATIVE_KINDS.index("repaired")
    own = np.array([len(pairs[r][1]) for r in neg.rows[repaired]])
    made = np.array([len(t) for t in np.asarray(neg.tgt.to_pylist(), object)[repaired]])
    rng = np.random.default_rng(0)
    random_partner = np.array([len(pairs[i][1]) for i in rng.integers(0, 5000, own.size)])
    assert np.median(np.abs(made - own)) <= 1
    assert np.median(np.abs(random_partner - own)) >= 10


def test_negatives_are_drawn_by_row_id_so_one_row_less_changes_only_its_neighbours(
        corpora: Path):
    pairs = multi30k_pairs(corpora, 3000)
    ids = np.arange(len(pairs), dtype=np.uint64) * 7 + 100  # ids, not positions
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])

    def made(keep: np.ndarray) -> set[tuple[int, int, str, str]]:
        rows = pa.array(np.flatnonzero(keep))
        neg = synthetic_negatives(src.take(rows), tgt.take(rows), share=0.05, seed=3,
                                  keys=ids[keep])
        return set(zip(ids[keep][neg.rows].tolist(), neg.kinds.tolist(), neg.src.to_pylist(),
                       neg.tgt.to_pylist(), strict=True))

    everything = np.ones(len(pairs), bool)
    full = made(everything)
    assert len(full) >= 0.8 * 4 * 0.05 * len(pairs)
    for removed in (0, 1234, 2999):
        less = everything.copy()
        less[removed] = False
        changed = full ^ made(less)
        # the removed row's own negative, a partner or a next row that was it, and a row
        # moving between two kinds' blocks at each of the three block edges
        assert len(changed) <= 2 * 6, changed
    # by position, as before: a corpus one row shorter drew all its negatives anew
    shifted = synthetic_negatives(src.slice(1), tgt.slice(1), share=0.05, seed=3)
    assert len(full & set(zip(ids[1:][shifted.rows].tolist(), shifted.kinds.tolist(),
                              shifted.src.to_pylist(), shifted.tgt.to_pylist(),
                              strict=True))) < 0.1 * len(full)


def test_row_hash_is_uniform_and_fixed_by_its_seed():
    keys = np.arange(200_000, dtype=np.uint64)
    u = row_hash(keys, 0)
    assert u.min() >= 0 and u.max() < 1
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 19_000
    assert np.array_equal(u, row_hash(keys, 0))
    assert abs(np.corrcoef(u, row_hash(keys, 1))[0, 1]) < 0.01
    assert abs(np.corrcoef(u, row_hash(keys, 0, 1))[0, 1]) < 0.01


# ---------------------------------------------------------------------------------------------
# The threshold on generated scores: known mixtures


@pytest.mark.parametrize("share", [0.0, 0.1, 0.25, 0.5])
def test_calibration_holds_at_any_junk_share(share: float):
    rng = np.random.default_rng(3)
    n = 40_000
    junk = int(share * n)
    real = rng.normal(-1.5, 0.4, n - junk)
    corpus = np.concatenate([real, rng.normal(-4.0, 0.7, junk)])
    negatives = rng.normal(-4.0, 0.7, 8000)
    cal = calibrate(corpus, negatives, negative_recall=0.98, max_real_reject=0.02)
    assert abs(cal.misaligned_share - share) <= 0.03
    # where junk and real pairs part, the threshold is that of the negatives alone; without
    # junk, it falls to where a pair would be more likely junk than not: nothing is lost
    if share:
        assert cal.threshold == pytest.approx(np.quantile(negatives, 0.98), abs=0.05)
        assert np.mean(real < cal.threshold) <= 0.02
        assert np.mean(corpus[n - junk:] < cal.threshold) >= 0.97
    else:
        assert cal.threshold < np.quantile(negatives, 0.98) and np.mean(real < cal.threshold) == 0
    p = np.asarray(cal.p_translation)
    assert p.size == SCORE_EDGES.size and np.all(np.diff(p) >= 0) and 0 <= p[0] <= p[-1] <= 1
    assert p_translation(np.array([np.median(real)]), cal.p_translation)[0] > 0.9
    if share:
        assert p_translation(np.array([-4.0]), cal.p_translation)[0] < 0.5
    assert p_translation(np.array([-np.inf]), cal.p_translation)[0] == 0.0


def test_threshold_steps_back_when_negatives_overlap_real_pairs():
    """A model too weak to tell them apart: the estimated real-pair loss caps the threshold."""
    rng = np.random.default_rng(4)
    real = rng.normal(-1.5, 0.4, 30_000)
    corpus = np.concatenate([real, rng.normal(-2.6, 0.5, 10_000)])
    negatives = rng.normal(-2.6, 0.5, 8000)
    cal = calibrate(corpus, negatives, negative_recall=0.98, max_real_reject=0.02)
    assert cal.threshold < np.quantile(negatives, 0.9)
    assert np.mean(real < cal.threshold) <= 0.03
    assert cal.real_rejected <= 0.02 and 0.5 < cal.negatives_rejected < 0.9
    assert abs(cal.misaligned_share - 0.25) <= 0.03


def test_real_pairs_read_off_the_corpus_above_the_negatives_cap_the_threshold():
    """A weak model (a few hundred short pairs: each pair's words learnt from itself): real
    pairs' scores reach well into the negatives', with a low tail heavier than a normal's,
    and the mixture's bound on the junk share (the most the corpus' low tail allows) reads
    a third of the corpus as junk for an eighth; its estimate of the real pairs lost said 2%
    where 11-15% were lost (LASER's Japanese at half junk: 27%). The real pairs' normal,
    fitted on the corpus above the negatives' 95th percentile, caps the threshold."""
    rng = np.random.default_rng(0)
    real = rng.normal(-2.0, 0.5, 4000) - np.abs(rng.normal(0.0, 0.3, 4000))
    junk = rng.normal(-2.8, 0.45, 650)
    negatives = rng.normal(-2.8, 0.45, 900)
    cal = calibrate(np.concatenate([real, junk]), negatives, negative_recall=0.98,
                    max_real_reject=0.02)
    assert np.mean(real < cal.threshold) <= 0.035 and cal.real_rejected == pytest.approx(0.02)
    # the share's range: from what the tail implies (0.10) to the mixture's bound (0.38)
    assert cal.misaligned_share_low <= 650 / 4650 <= cal.misaligned_share
    assert cal.misaligned_share > 0.25 and cal.misaligned_share_low < 0.2
    # (where the model parts them, the cap is below none of the thresholds:
    # test_calibration_holds_at_any_junk_share, the quality sweep byte for byte)


def test_the_real_pairs_tail_is_a_normal_fitted_above_the_cut():
    """The fit is the truncated normal's maximum likelihood: a normal cut at its mean or a
    spread below is found again; too few scores above the cut, or none spread, give no fit,
    and a calibration without one decides as before (no error)."""
    from spr_data.qa.align import _RealTail

    rng = np.random.default_rng(8)
    scores = np.sort(rng.normal(-2.0, 0.5, 20_000))
    for cut in (-2.5, -2.0):
        tail = _RealTail.of(scores, cut)
        assert tail is not None
        assert abs(tail.mean + 2.0) < 0.05 and abs(tail.sd - 0.5) < 0.03
        assert tail.below(tail.quantile(0.02)) == pytest.approx(0.02)
    assert _RealTail.of(scores, float(scores[-50])) is None  # 49 scores above the cut
    assert _RealTail.of(np.full(500, -1.0), -2.0) is None
    flat = np.r_[-1.0 + 1e-8 * rng.normal(0, 1, 500), rng.normal(-3.5, 0.1, 100)]
    cal = calibrate(flat, rng.normal(-3.0, 0.2, 1000), negative_recall=0.98,
                    max_real_reject=0.02)
    assert np.isfinite(cal.threshold) and np.mean(flat[:500] < cal.threshold) == 0


def test_negatives_scored_as_the_corpus_junk_estimate_its_share_and_the_real_loss():
    """Negatives that score lower than the corpus' junk (the model learnt the junk's words
    from that pair alone) make its share look small, and the rest of it look like real pairs
    lost: the cap pulls the threshold deep into the junk. The same negatives scored as the
    junk would be (``cap_negatives``) give the share, and the threshold goes back up."""
    rng = np.random.default_rng(5)
    n, share = 40_000, 0.25
    real = rng.normal(-1.8, 0.5, n - int(share * n))
    junk = rng.normal(-3.9, 0.55, int(share * n))
    corpus = np.concatenate([real, junk])
    z = rng.normal(0.0, 1.0, 400)
    as_scored, as_junk = -4.2 + 0.7 * z, -3.9 + 0.55 * z
    plain = calibrate(corpus, as_scored, negative_recall=0.98, max_real_reject=0.02)
    fresh = calibrate(corpus, as_scored, negative_recall=0.98, max_real_reject=0.02,
                      cap_negatives=as_junk)
    assert plain.misaligned_share_low < share - 0.1  # the estimate that failed
    assert np.mean(junk < plain.threshold) < 0.5 and plain.real_rejected >= 0.019
    assert abs(fresh.misaligned_share_low - share) <= 0.03
    assert np.mean(junk < fresh.threshold) >= 0.8 and np.mean(real < fresh.threshold) <= 0.02
    # the threshold's target is still the negatives as scored (not above their quantile)
    assert fresh.threshold <= np.quantile(as_scored, 0.98)
    with pytest.raises(ValueError, match="cap_negatives"):
        calibrate(corpus, as_scored, negative_recall=0.98, max_real_reject=0.02,
                  cap_negatives=as_junk[:10])


def test_calibration_needs_scores():
    from spr_data import InputError

    with pytest.raises(InputError, match=r"align\.min_score"):
        calibrate(np.zeros(10), np.full(5, -np.inf), negative_recall=0.98,
                  max_real_reject=0.02)


@pytest.mark.parametrize("lang", ["deu", "rus"])
def test_a_negative_scored_as_fresh_scores_as_if_its_rows_were_never_trained(corpora: Path,
                                                                          lang: str):
    """A negative made of two training rows shares its words with them, and EM gives a rare
    word's mass half to each; junk in a corpus mostly holds sides seen nowhere else. Scored
    with ``fresh``, the negative scores about as it does in a model trained without its two
    rows (NTREX: 1,997 long news pairs, where most words are rare)."""
    from tests.junk import ntrex, read_lines

    english = read_lines(corpora / "multiparallel/ntrex128/newstest2019-src.eng.txt.gz")
    pairs = [(a, b) for a, b in zip(english, ntrex(corpora, lang), strict=True)
             if a.strip() and b.strip()]
    k = 80
    negatives = [(pairs[i][0], pairs[k + i][1]) for i in range(k)]

    def trained(rows: list[Pair]) -> LexicalAligner:
        both = rows + negatives
        return LexicalAligner.train(pa.array([p[0] for p in both], pa.large_string()),
                                    pa.array([p[1] for p in both], pa.large_string()),
                                    AlignerOptions("en", lang[:2]))

    src = pa.array([p[0] for p in negatives], pa.large_string())
    tgt = pa.array([p[1] for p in negatives], pa.large_string())
    model = trained(pairs)
    plain = model.scores(src, tgt).score
    assert np.array_equal(model.scores(src, tgt, fresh=np.zeros(k, np.int8)).score, plain)
    fresh = model.scores(src, tgt, fresh=np.full(k, 3, np.int8)).score
    alone = trained(pairs[2 * k:]).scores(src, tgt).score
    assert plain.mean() < fresh.mean() <= alone.mean() + 0.05
    assert np.abs(fresh - alone).mean() < 0.75 * np.abs(plain - alone).mean()
    only_source = model.scores(src, tgt, fresh=np.full(k, 1, np.int8)).score
    assert plain.mean() < only_source.mean() < fresh.mean()  # one side, half the way


def test_a_quarter_of_a_small_corpus_re_paired_is_caught(corpora: Path, tmp_path: Path):
    """NTREX en–de, 1,997 news pairs with a quarter of the rows re-paired (and no other
    junk): the calibration read the junk's share as 0.16 for 0.24, counted the rest as real
    pairs lost, and caught 0.46 of the junk while losing 0.34% of the real pairs."""
    from tests.junk import mixes_for, ntrex, read_lines, score, spr_rejections

    english = read_lines(corpora / "multiparallel/ntrex128/newstest2019-src.eng.txt.gz")
    pairs = [(a, b) for a, b in zip(english, ntrex(corpora, "deu"), strict=True)
             if a.strip() and b.strip()]
    mixed, = mixes_for(pairs, 0.25, kinds=["re_paired"], seed=13, foreign=[], min_per_kind=10)
    (tmp_path / "r.toml").write_text("")
    rejected, report = spr_rejections(mixed, "en-de", tmp_path / "x",
                                      recipe=tmp_path / "r.toml")
    quality = score(mixed, rejected, 0.25)
    assert quality.recall["re_paired"] >= 0.9, quality.summary()
    assert quality.real_rejected <= 0.02, quality.summary()
    low, high = report["align"]["estimated_misaligned_share_range"]
    assert low <= 0.3 and high >= 0.2


def test_a_small_corpus_at_half_junk_keeps_its_real_pairs(corpora: Path, tmp_path: Path):
    """LASER's Tatoeba Japanese (1,000 short pairs, never tuned on) with every junk kind at
    half the rows: the mixture read 43% of the pairs reaching the align stage as junk for
    14%, and the stage took 27% of the real pairs while estimating 1.9%. Capped by the real
    pairs read off the corpus above the negatives, the loss is near the 2% the recipe allows
    (the rules' own aside), and the report says the model tells the pairs apart poorly."""
    from tests.junk import mixes_for, ntrex, read_lines, score, spr_rejections

    base = corpora / "parallel/tatoeba_laser"
    pairs = list(dict.fromkeys(
        (a, b) for a, b in zip(read_lines(base / "tatoeba.jpn-eng.eng"),
                               read_lines(base / "tatoeba.jpn-eng.jpn"), strict=True)
        if a.strip() and b.strip()))
    mixed, = mixes_for(pairs, 0.5, seed=13, foreign=ntrex(corpora, "kor"), min_per_kind=20)
    (tmp_path / "r.toml").write_text("")
    rejected, report = spr_rejections(mixed, "en-ja", tmp_path / "x",
                                      recipe=tmp_path / "r.toml")
    quality = score(mixed, rejected, 0.5)
    by_reason = quality.real_by_reason
    assert by_reason["low_alignment"] <= 0.05 * quality.real, quality.summary()
    assert quality.real_rejected <= 0.06, quality.summary()
    assert report["align"]["estimated_real_rejected"] == pytest.approx(0.02, abs=1e-6)
    low, high = report["align"]["estimated_misaligned_share_range"]
    assert low < 0.2 < 0.35 < high  # 14% of the rows that reach the stage are junk
    assert any("poorly" in w for w in report["align"]["warnings"])


# ---------------------------------------------------------------------------------------------
# Both directions count


def test_a_target_that_translates_a_quarter_scores_low(corpora: Path):
    pairs = multi30k_pairs(corpora, 20_000)
    src = pa.array([s for s, _ in pairs])
    tgt = pa.array([t for _, t in pairs])
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "de"))
    rows = pa.array(np.arange(0, len(pairs), 20))
    s, t = src.take(rows), tgt.take(rows)
    partial = pa.array([first_quarter(x) for x in t.to_pylist()])
    fwd, bwd = model.score_directions(s, partial)
    # the quarter is explained by the source; the source is not explained by the quarter
    assert np.median(fwd) > np.median(bwd) + 1.0
    real, cut = model.score(s, t), model.score(s, partial)
    # the model alone, trained by agreement (the default): 0.918 below the real pairs' 2%
    # quantile, 0.996 below their 5% (each direction alone: 0.995, 0.999); in clean the
    # length-ratio rule takes the rest (the quality sweep's quarter cuts: 0.989 either way)
    assert np.mean(cut < np.quantile(real, 0.02)) >= 0.9
    assert np.mean(cut < np.quantile(real, 0.05)) >= 0.98


# ---------------------------------------------------------------------------------------------
# End to end: junk at 25% and 50%, and a second clean of the output


@pytest.fixture(scope="module")
def runs(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("calibration")
    pairs = multi30k_pairs(corpora, 29_000)
    out: dict[str, object] = {}
    for share in (0.25, 0.5):
        mixed, kinds = with_junk(pairs, share, seed=int(share * 100))
        ds = dataset_of(mixed, root / f"j{share}")
        report = clean(ds, root / f"j{share}/out", workers=1)
        out[f"junk{share}"] = (ds, kinds, report)
    return out


def test_rows_scored_for_the_calibration_keep_their_scores_bit_for_bit(
        runs: dict[str, object]):
    """The corpus rows the combine step scored (here: every row the stage decides, the
    corpus being under one sample) are not scored again in the decide step: their
    ``align_score`` is the final model's own score of the pair, to the bit."""
    _, _, report = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(report, CleanReport) and report.align is not None
    assert report.align["corpus_pairs_scored"] > 10_000
    model = LexicalAligner.load(report.out / "align_model.npz",
                                expected_hash=report.align["model_hash"])
    for directory in (report.out, report.out / REJECTS_DIR):
        ds = open_dataset(directory)
        table = ds.take(np.arange(len(ds)))
        scored = _valid(table.column("align_score"))
        assert scored.sum() > 100
        rows = pa.array(np.flatnonzero(scored))
        fresh = model.score(table.column("src").take(rows), table.column("tgt").take(rows))
        kept = table.column("align_score").take(rows).to_numpy()
        assert kept.dtype == np.float32
        np.testing.assert_array_equal(kept.view(np.uint32), fresh.view(np.uint32))


def _valid(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_junk_is_caught_and_real_pairs_kept_at_any_share(runs: dict[str, object], share: float):
    ds, kinds, report = runs[f"junk{share}"]  # type: ignore[misc]
    assert isinstance(report, CleanReport)
    rejected = rejected_rows(report.out)
    where = row_of_id(ds)
    caught = np.zeros(len(kinds), bool)
    caught[[where[i] for i in rejected]] = True
    labels = np.asarray(kinds)
    # the old 2% quantile caught 0.30 at 25% and 0.12 at 50%. Measured here: all kinds
    # 0.93-1.00 at 25%; at 50% cut targets 1.00 but re-paired and shifted ones 0.59 — the
    # estimated loss of real pairs (which caps the threshold) comes out 2.0% where it is 0.3%:
    # the conservative side of a mixture estimate, see docs/quality.md
    low = 0.9 if share < 0.5 else 0.5
    for kind in ("repaired", "shifted", "partial"):
        assert caught[labels == kind].mean() >= (0.95 if kind == "partial" else low), (
            kind, caught[labels == kind].mean())
    assert caught[labels == "real"].mean() <= 0.025
    align = report.align
    assert align is not None and align["method"] == "calibrated" and not align["warnings"]
    # of the rows that reached align (rules take most cut targets first, so the share there
    # is 0.18 and 0.40)
    assert share / 2 <= align["estimated_misaligned_share"] <= share + 0.05


def test_the_seen_calibration_on_a_sample_of_the_trained_rows_decides_the_same(
        runs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Above ``_CALIBRATION_ROWS`` trained-on rows, only a sample of them (by row id) is scored
    for the calibration: the threshold and the decisions stay those of scoring them all.
    (Measured on this mix: 12,000 of 23,000 flips under 1% of the decisions, 4,000 flips
    1.5%; on 1M pairs the default 65,536 of 294,000 flipped none.)"""
    import spr_data.qa.align_stage as align_stage

    ds, _, full = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(full, CleanReport) and full.align is not None
    monkeypatch.setattr(align_stage, "_CALIBRATION_ROWS", 12_000)
    sampled = clean(ds, tmp_path / "out", workers=1)
    assert sampled.align is not None
    assert sampled.align["corpus_pairs_scored"] < 0.6 * full.align["corpus_pairs_scored"]
    assert abs(sampled.align["threshold"] - full.align["threshold"]) < 0.1
    flipped = set(rejected_rows(full.out).items()) ^ set(rejected_rows(sampled.out).items())
    assert len(flipped) <= 0.01 * full.rows_in, len(flipped)


def test_a_sample_whose_words_repeat_is_cut_and_decides_nearly_the_same(
        runs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``align.sample_tolerance``: the training sample is cut to the fewest pairs whose words
    are known nearly as well (its rows of lowest hash); here the floor of 65,536 pairs is
    lowered so that a 23k-row mix can be cut. The rows left out are scored as rows the model
    never saw; the decisions stay nearly those of the whole sample (measured: 25,949 drawn
    pairs cut to 23,552, 0.58% of the decisions other)."""
    import spr_data.qa.align_stage as align_stage

    ds, _, full = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(full, CleanReport) and full.align is not None
    assert full.align["sample_kept"] == full.align["sample_drawn"]  # under 65,536: all
    monkeypatch.setattr(align_stage, "_SMALLEST_SAMPLE", 4096)
    cut = clean(ds, tmp_path / "out", workers=1)
    align = cut.align
    assert align is not None
    assert 4096 <= align["sample_kept"] < 0.95 * align["sample_drawn"]
    assert align["trained_on"] < full.align["trained_on"]
    flipped = set(rejected_rows(full.out).items()) ^ set(rejected_rows(cut.out).items())
    assert len(flipped) <= 0.01 * full.rows_in, len(flipped)


def test_report_and_columns_carry_the_calibration(runs: dict[str, object]):
    _, _, report = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(report, CleanReport)
    data = json.loads((report.out / "report.json").read_text())
    align = data["align"]
    hist = align["histograms"]
    assert len(hist["edges"]) == len(hist["corpus"]) + 1 == len(hist["negatives"]) + 1
    assert sum(hist["negatives"]) == align["negatives"]["count"] > 0
    assert set(align["negatives"]["kinds"]) == set(NEGATIVE_KINDS)
    decided = sum(hist["kept"]) + sum(hist["rejected_low_alignment"]) + sum(
        hist["rejected_other"])
    assert sum(hist["kept"]) == data["rows_kept"]
    assert decided <= data["rows_in"]  # pairs with an empty side have no finite score
    assert sum(hist["rejected_low_alignment"]) >= data["by_reason"]["low_alignment"]
    for directory in (report.out, report.out / REJECTS_DIR):
        table = open_dataset(directory).take(np.arange(200))
        p = table.column("p_translation").to_numpy()
        assert p.dtype == np.float32
        # a row an earlier stage rejected is not scored (align is the last stage here)
        scored = (np.array(table.column("stage").to_pylist()) == "align"
                  if "stage" in table.column_names else np.ones(len(p), bool))
        assert np.all((p[scored] >= 0) & (p[scored] <= 1)) and np.isnan(p[~scored]).all()
        assert table.column("align_score").null_count == np.count_nonzero(~scored)
    kept_p = open_dataset(report.out).take(np.arange(1000)).column("p_translation").to_numpy()
    rejects = open_dataset(report.out / REJECTS_DIR)
    low = [r["p_translation"] for r in rejects.take(np.arange(len(rejects))).to_pylist()
           if r["reason"] == "low_alignment"]
    assert np.median(kept_p) > 0.9 > np.median(low)


def test_cleaning_a_cleaned_dataset_again_removes_almost_nothing(corpora: Path,
                                                                 tmp_path: Path):
    """The real corpus as it is: cleaned, then cleaned again (measured: 0.2% the second time;
    the old 2% quantile removed 2% each time)."""
    ds = dataset_of(multi30k_pairs(corpora, 29_000), tmp_path / "real")
    once = clean(ds, tmp_path / "once", workers=1)
    assert once.by_reason.get("low_alignment", 0) <= 0.01 * once.rows_in
    again = clean(tmp_path / "once", tmp_path / "again", workers=1)
    assert again.rows_in == once.rows_kept
    assert again.rows_rejected <= 0.003 * again.rows_in, again.by_reason


@pytest.mark.slow
@pytest.mark.parametrize(("name", "files", "langs"), [
    ("wmt", ("opennmt_wmt_en-de.train.en.gz", "opennmt_wmt_en-de.train.de.gz"), "en-de"),
    ("eng-ben", ("tatoeba_manythings_eng-ben.tsv",), "en-bn"),
])
def test_the_same_recipe_again_keeps_its_decision(corpora: Path, tmp_path: Path, name: str,
                                                  files: tuple[str, ...], langs: str):
    """A dataset this recipe cleaned, cleaned again with it: the first run's model and
    thresholds decide (retrained and calibrated again, the second clean took another 0.93% of
    the WMT sample and 0.81% of Tatoeba eng-ben); a quarantine then removes just its rows; and
    another recipe decides afresh."""
    ingest([corpora / "parallel" / f for f in files], tmp_path / "ds", langs=langs.split("-"))
    recipe = Path(__file__).resolve().parents[1] / "data_manifests" / f"{langs}.toml"
    once = clean(tmp_path / "ds", tmp_path / "once", recipe=recipe, workers=2)
    again = clean(tmp_path / "once", tmp_path / "again", recipe=recipe, workers=2)
    assert again.align is not None and again.align["method"] == "as cleaned before"
    assert again.align["model_hash"] == once.align["model_hash"]  # type: ignore[index]
    assert again.rows_rejected <= 0.003 * again.rows_in, again.by_reason
    # each row kept was within the fit of its own group: within the nearer one again
    assert once.align["partial_translation"]["fit_unseen"] is not None  # type: ignore[index]
    assert "partial_translation" not in again.by_reason
    kept = open_dataset(tmp_path / "once")
    flagged = kept.take(np.arange(0, len(kept), 997)).column("id").to_pylist()
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in flagged))
    quarantined = clean(tmp_path / "once", tmp_path / "q", recipe=recipe, workers=2,
                        quarantine=tmp_path / "q.jsonl")
    assert quarantined.by_reason.get("quarantined") == len(flagged)
    assert quarantined.rows_rejected - len(flagged) <= 0.003 * quarantined.rows_in
    # the cleaned dataset tokenized, then quarantined: the clean's decision still holds (the
    # tokenized dataset once trained a model of its own and lost 10 more WMT rows), and its
    # text, normalized by that clean, draws no warning
    tokenize(tmp_path / "once", tmp_path / "tok", workers=1,
             tokenizer=str(corpora / "tokenizers/llama2_tokenizer.model"))
    tokenized = clean(tmp_path / "tok", tmp_path / "tok-q", recipe=recipe, workers=2,
                      quarantine=tmp_path / "q.jsonl")
    assert tokenized.align is not None and tokenized.align["method"] == "as cleaned before"
    assert tokenized.by_reason == quarantined.by_reason and not tokenized.warnings
    assert (sorted(open_dataset(tmp_path / "tok-q").take(np.arange(tokenized.rows_kept))
                   .column("id").to_pylist())
            == sorted(open_dataset(tmp_path / "q").take(np.arange(quarantined.rows_kept))
                      .column("id").to_pylist()))
    other = tmp_path / "other.toml"
    other.write_text(recipe.read_text() + "\n[dedup]\nmax_targets_per_source = 50\n")
    afresh = clean(tmp_path / "once", tmp_path / "afresh", recipe=other, workers=2)
    assert afresh.align is not None and afresh.align["method"] == "calibrated"


@pytest.mark.slow
def test_a_row_quarantined_before_training_changes_no_other_decision(corpora: Path,
                                                                     tmp_path: Path):
    """Negatives, partners, cut lengths and the training sample are drawn by row id: one row
    less (here quarantined, so that the ids stay) leaves the rest decided as before. Drawn by
    position, it changed 0.98% of Tatoeba eng-ben's decisions (1.9% of the WMT sample's)."""
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], tmp_path / "ds",
           langs=["en", "bn"])
    recipe = Path(__file__).resolve().parents[1] / "data_manifests/en-bn.toml"
    whole = clean(tmp_path / "ds", tmp_path / "whole", recipe=recipe, workers=2)
    (tmp_path / "q.jsonl").write_text('{"id": 1000}\n')
    less = clean(tmp_path / "ds", tmp_path / "less", recipe=recipe, workers=2,
                 quarantine=tmp_path / "q.jsonl")
    assert less.align is not None and less.align["method"] == "calibrated"
    before = set(rejected_rows(tmp_path / "whole")) - {1000}
    after = set(rejected_rows(tmp_path / "less")) - {1000}
    assert len(before) >= 25  # decisions to compare (31 here; 41 before EM by agreement)
    assert len(before ^ after) <= 0.0005 * whole.rows_in, sorted(before ^ after)


def _tatoeba_ben(corpora: Path) -> list[Pair]:
    lines = (corpora / "parallel/tatoeba_manythings_eng-ben.tsv").read_text("utf-8")
    return [(r[0], r[1]) for r in (line.split("\t") for line in lines.splitlines()) if r]


@pytest.mark.slow
def test_a_difference_in_final_punctuation_weighs_what_the_corpus_shows(corpora: Path,
                                                                        tmp_path: Path):
    """Tatoeba eng-ben with a quarter of its rows re-paired: its questions are questions on
    both sides, a re-paired pair ends otherwise about a quarter of the time, and the fitted
    weight is well above 0. The same corpus with every Bengali question ending in ';' (as a
    Greek one does): the difference is then no evidence (the real questions all differ), the
    weight falls to about 0, and the real questions are not lost for it."""
    pairs, kinds = with_junk(_tatoeba_ben(corpora), 0.25, seed=5)
    greek = [(s, t[:-1] + ";" if t.endswith("?") else t) for s, t in pairs]
    reports, lost = {}, {}
    for name, rows in (("as is", pairs), ("greek", greek)):
        root = tmp_path / name.replace(" ", "_")
        root.mkdir()
        (root / "c.en").write_text("".join(s + "\n" for s, _ in rows))
        (root / "c.bn").write_text("".join(t + "\n" for _, t in rows))
        ingest([root / "c.en", root / "c.bn"], root / "ds")
        reports[name] = clean(root / "ds", root / "out", workers=2)
        rejected = rejected_rows(root / "out")
        questions = [i for i, (s, _) in enumerate(rows) if kinds[i] == "real" and
                     s.endswith("?")]
        lost[name] = sum(i in rejected for i in questions) / len(questions)
    weight = {name: r.align["punct_weight"] for name, r in reports.items()  # type: ignore[index]
              if r.align is not None}
    assert weight["as is"] > 0.2, weight
    # over five draws of the junk (seeds 1-5) the Greek-style weight came out 0-0.29 of the
    # weight as is, the same before and after stop 40's length fit changed which negatives
    # pass the rules (0-0.27): it falls to a fraction, not to 0 exactly
    assert weight["greek"] < 0.35 * weight["as is"], weight
    # not lost for it: a weight left in place would take every Greek-style question (measured
    # 5.4% of the real questions lost as is, 6.5% Greek-style: 8 of 709 more)
    assert lost["greek"] <= lost["as is"] + 0.02, lost


def test_a_second_clean_of_a_dirty_corpus_takes_leftover_junk_not_real_pairs(
        runs: dict[str, object], tmp_path: Path):
    ds, kinds, report = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(report, CleanReport) and isinstance(ds, Path)
    again = clean(report.out, tmp_path / "again", workers=1)
    where = row_of_id(ds)
    labels = [kinds[where[i]] for i in rejected_rows(again.out)]  # type: ignore[index]
    assert labels.count("real") <= 0.003 * again.rows_in, Counter(labels)


def test_an_explicit_quantile_is_the_old_rule_with_a_warning(corpora: Path, tmp_path: Path):
    ds = dataset_of(multi30k_pairs(corpora, 4000), tmp_path / "q")
    recipe = tmp_path / "q.toml"
    recipe.write_text("[align]\nquantile = 0.02\n")
    report = clean(ds, tmp_path / "q/out", recipe=recipe, workers=1)
    assert report.align is not None and report.align["method"] == "quantile"
    assert "align.quantile" in report.align["warnings"][0]
    assert report.by_reason.get("low_alignment", 0) == pytest.approx(0.02 * report.rows_in,
                                                                     rel=0.2)
    fixed = tmp_path / "m.toml"
    fixed.write_text("[align]\nmin_score = -2.5\n")
    report = clean(ds, tmp_path / "q/fixed", recipe=fixed, workers=1)
    assert report.align is not None and report.align["method"] == "min_score"
    assert report.align["threshold"] == -2.5 and not report.align["warnings"]


def test_calibrated_output_is_identical_for_any_number_of_workers(runs: dict[str, object],
                                                                  tmp_path: Path):
    """Negatives are seeded and thresholds fixed before the parallel decide step."""
    ds, _, report = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(report, CleanReport) and isinstance(ds, Path)
    clean(ds, tmp_path / "two", workers=2)
    for sub in ("", REJECTS_DIR):
        one = json.loads((report.out / sub / "manifest.json").read_text())
        two = json.loads((tmp_path / "two" / sub / "manifest.json").read_text())
        assert one["shards"] == two["shards"]


def test_a_corpus_too_small_for_negatives_needs_a_threshold_set_by_hand(tmp_path: Path):
    from spr_data import InputError

    pairs = [("A dog runs.", "Ein Hund rennt."), ("Two cats sleep.", "Zwei Katzen schlafen."),
             ("A man sings.", "Ein Mann singt."), ("The girl reads.", "Das Mädchen liest."),
             ("A boy jumps.", "Ein Junge springt.")]
    ds = dataset_of(pairs, tmp_path / "tiny")
    with pytest.raises(InputError, match=r"align\.min_score"):
        clean(ds, tmp_path / "tiny/out", workers=1)
    fixed = tmp_path / "m.toml"
    fixed.write_text("[align]\nmin_score = -6.0\n")
    report = clean(ds, tmp_path / "tiny/fixed", recipe=fixed, workers=1)
    assert report.align is not None and report.align["method"] == "min_score"
    assert json.loads((report.out / "report.json").read_text())["align"]["negatives_rejected"] == 0


def test_a_corpus_of_a_few_dozen_pairs_trains_on_every_row(corpora: Path, tmp_path: Path):
    """The whole corpus fits the training sample: the negatives are added to training rather
    than swapped in for their rows, so every row is decided as one the model saw, by the one
    threshold (none is held out to be decided by a model that never saw it)."""
    ds = dataset_of(multi30k_pairs(corpora, 30), tmp_path / "small")
    report = clean(ds, tmp_path / "small/out", workers=1)
    assert report.align is not None and report.align["method"] == "calibrated"
    assert report.align["every_row_trained"]
    assert report.align["threshold_unseen"] == report.align["threshold"]
    assert report.align["trained_on"] > 30  # the rows and the negatives
    assert "Infinity" not in (report.out / "report.json").read_text()
    assert not any("held out" in w for w in report.align["warnings"])
    assert report.rows_kept + report.rows_rejected == 30
    shown = run_cli("clean", ds, "-o", tmp_path / "small/cli", "--workers", "1", "-q")
    assert shown.exit_code == 0


def test_a_model_too_weak_for_its_corpus_is_reported(corpora: Path, tmp_path: Path,
                                                    runs: dict[str, object]):
    """548 Tatoeba eng-tha pairs (too few for a distant language pair): a threshold that
    keeps the corpus' pairs rejects under half of the negatives made of them, and the report
    says so, on the CLI too. On Multi30k with junk the model tells them apart, and it does
    not."""
    base = corpora / "parallel/tatoeba_laser"
    en = (base / "tatoeba.tha-eng.eng").read_text(encoding="utf-8").splitlines()
    th = (base / "tatoeba.tha-eng.tha").read_text(encoding="utf-8").splitlines()
    root = tmp_path / "tha"
    root.mkdir()
    (root / "c.en").write_text("".join(x + "\n" for x in en), encoding="utf-8")
    (root / "c.th").write_text("".join(x + "\n" for x in th), encoding="utf-8")
    ingest([root / "c.en", root / "c.th"], root / "ds")
    report = clean(root / "ds", root / "out", workers=1)
    assert report.align is not None and report.align["negatives_rejected"] < 0.5
    assert any("tells the corpus' pairs from negatives made of them poorly" in w
               for w in report.align["warnings"])
    shown = run_cli("clean", root / "ds", "-o", root / "cli", "--workers", "1", "-q")
    assert "warning: align: the alignment model tells" in " ".join(shown.stderr.split())
    for share in (0.25, 0.5):
        _, _, dirty = runs[f"junk{share}"]  # type: ignore[misc]
        assert isinstance(dirty, CleanReport) and dirty.align is not None
        assert not dirty.align["warnings"]


def test_a_korean_corpus_keeps_its_pairs_with_case_forms_linked_together(corpora: Path,
                                                                        tmp_path: Path):
    """1,000 Tatoeba eng-kor pairs, all real: a Korean word carries its particles (기술의,
    사진을), so with a stem of 6 code points each case form learnt its links alone and 40 real
    pairs went to ``low_alignment`` (4.0%); stems of 6 letters, a Hangul block counting as its
    2-3, link the forms together."""
    base = corpora / "parallel/tatoeba_laser"
    root = tmp_path / "kor"
    root.mkdir()
    for side, name in (("eng", "c.en"), ("kor", "c.ko")):
        (root / name).write_bytes((base / f"tatoeba.kor-eng.{side}").read_bytes())
    ingest([root / "c.en", root / "c.ko"], root / "ds")
    report = clean(root / "ds", root / "out", workers=1)
    assert report.rows_in == 1000
    assert report.by_reason.get("low_alignment", 0) <= 15, report.by_reason


def test_a_model_from_an_earlier_run_is_reused_not_retrained(corpora: Path, tmp_path: Path):
    """``align.model``: the model a clean of one dirty corpus wrote scores another corpus of
    the same language pair (other pairs, another junk share); its thresholds are calibrated
    on that corpus."""
    pairs = multi30k_pairs(corpora, 29_000)
    first, _ = with_junk(pairs[:14_500], 0.25, seed=1)
    earlier = clean(dataset_of(first, tmp_path / "a"), tmp_path / "a/out", workers=1)
    second, kinds = with_junk(pairs[14_500:], 0.4, seed=2)
    ds = dataset_of(second, tmp_path / "b")
    model = earlier.out / "align_model.npz"
    recipe = tmp_path / "reuse.toml"
    recipe.write_text(f'[align]\nmodel = "{model}"\n')
    report = clean(ds, tmp_path / "b/out", recipe=recipe, workers=1)
    align = report.align
    assert align is not None and align["model"] == str(model) and align["trained_on"] == 0
    assert earlier.align is not None and align["model_hash"] == earlier.align["model_hash"]
    assert "shifted_lines" not in report.by_reason  # see _decide_task
    # leave_one_out scores the pairs a model was trained on: none here, and it says so
    recipe.write_text(f'[align]\nmodel = "{model}"\nleave_one_out = true\n')
    loo = clean(ds, tmp_path / "b/loo", recipe=recipe, workers=1)
    assert loo.align is not None and loo.by_reason == report.by_reason
    assert any("leave_one_out" in w and "changes nothing" in w for w in loo.align["warnings"])
    assert not any("leave_one_out" in w for w in align["warnings"])
    here = clean(ds, tmp_path / "b/here", workers=1)  # the model trained on this corpus
    where = row_of_id(ds)
    labels = np.asarray(kinds)

    def caught(out: Path) -> dict[str, float]:
        hit = np.zeros(len(kinds), bool)
        hit[[where[i] for i in rejected_rows(out)]] = True
        return {kind: float(hit[labels == kind].mean()) for kind in set(kinds)}

    reused, trained = caught(report.out), caught(here.out)
    # junk caught at least about as well as by a model trained here (measured: re-paired 0.90
    # vs 0.71, shifted 0.90 vs 0.74); more real pairs lost (3.6% vs 0.4%): every row is one
    # the model never saw, as rows beyond align.max_train_pairs are for a trained one
    for kind in ("repaired", "shifted", "partial"):
        assert reused[kind] >= trained[kind] - 0.1, (kind, reused, trained)
    assert reused["real"] <= 0.04, (reused, trained)


def test_a_model_of_another_language_pair_or_with_trusted_is_refused(runs: dict[str, object],
                                                                     corpora: Path,
                                                                     tmp_path: Path):
    from spr_data.errors import InputError
    from spr_data.recipe import load_recipe

    _, _, earlier = runs["junk0.25"]  # type: ignore[misc]
    assert isinstance(earlier, CleanReport)
    model = earlier.out / "align_model.npz"
    root = tmp_path / "deen"
    root.mkdir()
    pairs = multi30k_pairs(corpora, 3000)
    (root / "c.de").write_text("".join(t + "\n" for _, t in pairs))
    (root / "c.en").write_text("".join(s + "\n" for s, _ in pairs))
    ingest([root / "c.de", root / "c.en"], root / "ds")  # German → English
    ds = root / "ds"
    recipe = tmp_path / "reuse.toml"
    recipe.write_text(f'[align]\nmodel = "{model}"\n')
    with pytest.raises(InputError, match="trained for en-de, and this dataset is de-en"):
        clean(ds, tmp_path / "out", recipe=recipe, workers=1)
    recipe.write_text(f'[align]\nmodel = "{tmp_path / "nothing.npz"}"\n')
    with pytest.raises(InputError, match="does not exist"):
        clean(ds, tmp_path / "out2", recipe=recipe, workers=1)
    both = tmp_path / "both.toml"
    both.write_text(f'[align]\nmodel = "{model}"\ntrusted = "{earlier.out}"\n')
    with pytest.raises(InputError, match="choose one"):
        load_recipe(both, ["en", "de"])


def test_leave_one_out_catches_the_junk_of_a_small_corpus_of_long_sentences(corpora: Path,
                                                                            tmp_path: Path):
    """NTREX English–German (1,997 news sentences, many words seen once) with a quarter of
    its rows re-paired, misaligned or shifted: on the whole model a junk pair's rare words
    link each other, as a real pair's do. Scored on what the other pairs taught the model
    (``align.leave_one_out``), the negatives look like the junk again (measured: re-paired
    caught 0.51 -> 0.93, real pairs lost 0.89 -> 1.29%); by default, the negatives scored as
    fresh junk estimate the junk's share (calibrate's ``cap_negatives``), and the default
    catches as much (0.51 -> 0.96, real pairs lost 0.89 -> 1.21%)."""
    from tests.junk import ntrex, read_lines, run_quality

    english = read_lines(corpora / "multiparallel/ntrex128/newstest2019-src.eng.txt.gz")
    pairs = [(a, b) for a, b in zip(english, ntrex(corpora, "deu"), strict=True)
             if a.strip() and b.strip()]
    kinds = ["re_paired", "misaligned", "shifted_block"]
    recall, real = {}, {}
    for on in (False, True):
        recipe = tmp_path / f"loo-{on}.toml"
        recipe.write_text(f"[align]\nleave_one_out = {str(on).lower()}\n", encoding="utf-8")
        quality = run_quality(pairs, "en-de", ntrex(corpora, "fra"), tmp_path / f"run-{on}",
                              level=0.25, kinds=kinds, seed=3, recipe=recipe)
        recall[on], real[on] = quality.recall, quality.real_rejected
    for on in (False, True):
        assert recall[on]["re_paired"] >= 0.85, (recall, real)
        assert min(recall[on].values()) >= 0.9 * recall[on]["re_paired"], (recall, real)
        assert real[on] <= 0.02, (recall, real)
