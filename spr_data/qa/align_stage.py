"""``align``: the alignment decision as a corpus stage — train and calibrate once (combine),
score and decide each unit (apply).

*Combine* samples the pairs no earlier stage rejected, trains the lexical model on them with
synthetic negatives in place of some (:mod:`spr_data.qa.align`), scores the corpus sample and
the negatives, calibrates the thresholds and fits how far one side may say more than the
other (:class:`spr_data.qa.align.PartialFit`); the model and the ids it needs are files in the
work directory, named in the state. *Apply* scores a unit's pairs, adds ``align_score``,
``p_translation`` and ``partial_z``, rejects ``low_alignment`` below the threshold,
``partial_translation`` beyond that fit and ``shifted_lines`` where a run of neighbours
translate each other better than their own lines.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spr_data.arrays import joined, member
from spr_data.dataset import open_dataset
from spr_data.errors import InputError, SprDataError
from spr_data.fsio import TMP_SUFFIX, atomic_write_bytes
from spr_data.heap import release_heap
from spr_data.qa.align import (
    NEGATIVE_KINDS,
    SCORE_EDGES,
    SMALLEST_SAMPLE,
    AlignerOptions,
    Calibration,
    LexicalAligner,
    Negatives,
    PartialFit,
    calibrate,
    merged_counts,
    p_translation,
    punct_weight,
    row_hash,
    shifted_from_cross,
    size_from_counts,
    synthetic_negatives,
    word_counts,
)
from spr_data.qa.rules import (
    MAX_UNENDED_CUT,
    LengthRatioFit,
    RulesStage,
    ends_sentences,
    lost_end,
    sentence_marks,
    sentence_more,
    unended_shares,
)
from spr_data.qa.stage import CombineContext, StageOutput, UnitRows
from spr_data.recipe import AlignConfig
from spr_data.schema import ID

__all__ = ["ALIGN_SCORE", "PARTIAL_Z", "P_TRANSLATION", "SCORE_HISTOGRAM_EDGES", "AlignStage"]

ALIGN_SCORE = "align_score"
P_TRANSLATION = "p_translation"
#: how far one side says more than the other, in the corpus' spreads (:class:`PartialFit`)
PARTIAL_Z = "partial_z"
#: the edges of the kept / rejected score histograms in the report
SCORE_HISTOGRAM_EDGES = np.linspace(-20.0, 0.0, 201)
#: ``p_translation`` from which a row is surely a translation (see ``shifted_lines``)
_SURE = 0.99
_SLICE_ROWS = 32768
#: negatives of each kind at least (when the corpus has ten times as many rows): fewer make
#: the threshold, a high quantile of them, a matter of a handful of pairs
_MIN_NEGATIVES_PER_KIND = 200
#: the most the held-out rows' estimated misaligned share may exceed the trained rows' before
#: the report warns: 0.04 at most on the quality sweep's 24 corpus-levels; 0.10-0.33 on 8 of 23
#: clean Tatoeba test sets of 307-1,000 pairs, which lost 2.7-10.4% of their rows when rows
#: were held out of corpora that small (now only of corpora larger than the training sample)
_SEEN_UNSEEN_GAP = 0.1
#: row_hash salt of the training sample (negatives use salts 0-2)
_SAMPLE_SALT = 3
#: the trained-on rows whose scores the seen calibration reads, at most (drawn by row id,
#: salt 4): its histograms and the junk share need tens of thousands of scores, not the
#: whole training sample (300,000 pairs at 1M: scoring them was 4.6 s of the run)
_CALIBRATION_ROWS = 65_536
_CALIBRATION_SALT = 4
#: pairs whose sides say about as much as each other: within this many spreads of the
#: partial_translation fit (where whether a side ends its sentences is read)
_EVEN_SPREADS = 1.0
#: a training sample is never cut below this many pairs (see _smallest_sample)
_SMALLEST_SAMPLE = SMALLEST_SAMPLE
#: the negatives the corpus' misaligned share is estimated from: re-paired pairs only. Cut
#: sides and next lines are sometimes still fair translations (a three-word sentence cut to
#: two, a corpus sorted by source); in the mixture they "explain" real pairs as junk, and the
#: estimated loss of real pairs falls to nothing while the true one grows (measured on
#: Tatoeba eng–cmn at 25% junk: estimated 0.5%, true 5.7%; with re-paired pairs alone 2.0%,
#: true 1.3%)
_MIXTURE_KINDS = ("repaired",)
#: the negatives ``align_score`` is calibrated on: two whole sentences that are not each
#: other's translation. A side cut to 15-50% keeps the words of its own row, and both
#: directions' mean scores it much like a translation: calibrated on every kind, the junk
#: share of a corpus without junk was overestimated and more of its real pairs went
_PAIR_KINDS = [NEGATIVE_KINDS.index("repaired"), NEGATIVE_KINDS.index("shifted")]
#: reasons of earlier stages whose rows the model is still trained on (though not decided):
#: a pair whose words are in the wrong order holds the right words, and IBM-1 reads no order.
#: Without them, on NTREX's 1,937-pair corpora at 50% junk (a sixth shuffled), re-paired
#: junk caught fell 0.651 -> 0.545 when ``sentence_end_inside`` came in (docs/quality.md)
_TRAINED_DESPITE = ("sentence_end_inside",)
_SPARED = "spared"  # the sample files' column: the row is one of those


@dataclass(frozen=True)
class _Prepared:
    """What the align stage trains and calibrates on (:meth:`AlignStage._prepare`)."""

    ids: np.ndarray  # the sample's row ids, in its order
    drawn: int  # pairs drawn before the sample was cut to the fewest that do
    despite: int  # pairs trained on though an earlier stage rejected them (_TRAINED_DESPITE)
    whole: bool  # every row the stage decides is in the sample (and trained on)
    in_train: np.ndarray  # per sample row: trained on (not held out for negatives)
    calib: np.ndarray  # the sample rows whose scores calibrate (_calibration_rows)
    seen_neg: Negatives  # made of trained rows (without their texts, which are on disk)
    unseen_neg: Negatives  # made of held-out rows
    fresh: int  # the seen negatives again, scored as fresh junk: how many
    length_fit: LengthRatioFit | None
    calib_sides: tuple[np.ndarray, np.ndarray] | None  # the calibration rows' length z
    calib_marks: tuple[np.ndarray, np.ndarray]  # their sentence marks (rules.sentence_marks)
    negatives_note: str  # why no negative passed the rules, where none did
    scored: Path  # the work file of pairs to score after training
    trained_ids: np.ndarray  # sorted ids of the rows trained on (empty: outside)
    training: list[pa.Array]  # the texts EM trains on (popped as they are encoded)


@dataclass(frozen=True)
class _Thresholds:
    """What the calibration decided: the thresholds in force and how they were set."""

    method: str  # "calibrated", "min_score" or "quantile"
    seen: Calibration  # of the rows the model was trained on (the unseen one where none was)
    unseen: Calibration
    thresholds: dict[str, float]  # in force: "seen" and "unseen"
    negatives: Negatives  # those the seen threshold read, and their scores
    negative_scores: np.ndarray
    warnings: list[str]
    #: :func:`_separation` of the trained rows and their negatives
    separation: float = 0.0


#: below this :func:`_separation` the report says the model is too weak for its corpus.
#: Measured (default recipe, no junk added): Multi30k en-de 29,000 pairs 1.00, NTREX en-de
#: 0.99, en-ar 0.94, en-ko 0.91; LASER's Tatoeba sets of 234-1,000 short pairs 0.68-0.87
#: (Japanese 0.68, Thai 0.79, Vietnamese 0.80, Telugu 0.86), whose thresholds the real
#: pairs' own tail caps (docs/quality.md, *Small corpora of other pairs*)
_WEAK_SEPARATION = 0.9
#: the estimated junk share from which the threshold is read as what it catches of it
_JUNK_TO_CATCH = 0.05


def _separation(corpus: np.ndarray, negatives: np.ndarray, junk_share: float) -> float:
    """How well the model tells the corpus' real pairs from negatives, whatever threshold the
    junk share leads to: the share of the negatives below the score under which an estimated
    2% of the real pairs lie (the corpus' quantile at the junk share plus 2% of the rest).
    The share of the negatives below the threshold itself says little where the corpus holds
    no junk: the threshold then goes as low as the negatives' lowest scores (Multi30k en-de's
    29,000 real pairs: 0.49 of its negatives below the threshold, 1.00 below this score)."""
    scores = corpus[np.isfinite(corpus)]
    if not scores.size or not negatives.size:
        return 0.0
    cut = float(np.quantile(scores, min(1.0, junk_share + 0.02 * (1.0 - junk_share))))
    return float(np.mean(negatives < cut))


@dataclass(frozen=True)
class AlignStage:
    """``low_alignment``, ``partial_translation`` and ``shifted_lines`` from a lexical model
    trained on the corpus.

    ``rules`` is the recipe's rules stage (or None): the negatives must pass it as the
    corpus' junk had to. ``src_lang``/``tgt_lang`` name the model's language pair.
    """

    config: AlignConfig
    src_lang: str
    tgt_lang: str
    rules: RulesStage | None = None
    #: a dataset this recipe cleaned already (its directory, holding the model and report of
    #: that run): its decision is reused, not made again (see :meth:`combine`)
    cleaned: str | None = None
    name: str = "align"
    reasons: tuple[str, ...] = ("low_alignment", "shifted_lines", "partial_translation")
    columns: tuple[str, ...] = (ALIGN_SCORE, P_TRANSLATION, PARTIAL_Z)
    #: the combine step trains for a minute and grows the main process' heap: the runner
    #: gives it back after (the stage restarts the workers itself before EM)
    heavy_combine: bool = True

    def partial(self, rows: UnitRows) -> None:
        return None

    # -- combine: train and calibrate -------------------------------------------------------

    def combine(self, context: CombineContext) -> dict[str, Any]:
        """Train the model and fix its thresholds (``align.json`` beside the model).

        The thresholds are calibrated on negatives made from the training pairs (see
        :func:`spr_data.qa.align.calibrate`). EM learns links between the words of every pair
        it sees, junk included, so a pair it was trained on scores higher than one it was not
        (measured on Tatoeba eng–ben with 25% re-paired junk: median -3.2 for the junk it
        saw, -6.2 for the same junk unseen). So there are two calibrations:

        * *seen* (rows the model was trained on): re-paired and shifted negatives take the
          place of the rows they are made from in training, as junk takes the place of a pair
          in a corpus — its source then appears nowhere else, its target once more — and are
          scored with the corpus' rows (no cut-side kinds: they calibrate nothing, and the
          rows they held out were decided as unseen, worse: docs/quality.md, *Quality on
          real pairs*);
        * *unseen* (the rows they replaced, and every row beyond ``max_train_pairs``): the
          replaced rows are a random sample of the corpus the model never saw; negatives made
          from them, also unseen, calibrate the threshold for such rows.

        Unless the whole corpus fits the training sample: then the negatives are added to
        training rather than swapped in, every row is seen and one threshold decides all
        (``every_row_trained``). Held out, a fifth of a corpus of 1,000 pairs was decided by a
        model that never saw its words; measured on the quality sweep's 24 corpus-levels, real
        pairs lost under junk 1.18 -> 1.05%, with none 0.40 -> 0.35%, re-paired junk caught
        0.908 -> 0.920; on 23 clean LASER Tatoeba sets of 168-1,000 pairs, 0.5-10.4% of the
        rows removed -> 0.3-4.9% (docs/quality.md, *Every row trained*).

        With ``align.trusted`` the corpus is not trained on, nor with ``align.model`` (a model
        an earlier run wrote, loaded instead of trained): one unseen calibration.
        """
        work = context.work
        paths = {"model": work / "align_model.npz", "info": work / "align.json",
                 "trained_ids": work / "align_trained_ids.npy",
                 "shift_skip_ids": work / "align_shift_skip_ids.npy",
                 "scored_ids": work / "align_scored_ids.npy",
                 "scored": work / "align_scored.npy"}
        state = {name: str(path) for name, path in paths.items()}
        if all(p.exists() for p in paths.values()):
            return {**state, "info": json.loads(paths["info"].read_text())}
        if self.cleaned is not None:
            return self._decided_before(paths)
        cfg = self.config
        outside = bool(cfg.trusted or cfg.model)  # the model never saw this corpus
        sample = self._prepare(context, outside)
        release_heap()
        ids, n, in_train, calib = sample.ids, len(sample.ids), sample.in_train, sample.calib
        seen_neg, unseen_neg, whole = sample.seen_neg, sample.unseen_neg, sample.whole
        training = sample.training
        options = AlignerOptions(src_lang=self.src_lang, tgt_lang=self.tgt_lang,
                                 iterations=cfg.iterations, relaxation=cfg.relaxation,
                                 fertility=cfg.fertility, idf_power=cfg.idf_power,
                                 agreement=cfg.agreement, leave_one_out=cfg.leave_one_out,
                                 worse_weight=cfg.worse_weight, stem_chars=cfg.stem_chars,
                                 max_train_pairs=max(cfg.max_train_pairs, len(training[0])),
                                 seed=cfg.seed)
        trained_on = len(training[0])
        started = time.perf_counter()
        aligner = (self._reused_model() if cfg.model
                   else LexicalAligner.train(*_popped(training), options, tasks=context))
        train_seconds = time.perf_counter() - started
        tmp = work / ("align_model.npz" + TMP_SUFFIX)
        aligner.save(tmp)
        tmp.replace(paths["model"])
        model_hash = aligner.content_hash
        del aligner  # the workers load it from disk; this process holds it no longer
        release_heap()
        # the corpus sample and both sets of negatives, scored as tasks on the workers
        started = time.perf_counter()
        calib_scores, unseen_scores, seen_scores, fresh_scores = _scores_in_tasks(
            context, paths["model"], model_hash, sample.scored,
            [calib.size, len(unseen_neg.kinds), len(seen_neg.kinds), sample.fresh])
        trained_scored = in_train[calib]  # the rest of ``calib`` is the held-out rows
        weight = 0.0
        if cfg.punctuation and not cfg.model:  # a reused model keeps the weight it has
            fit_rows = slice(None) if outside else trained_scored
            fit_neg, fit_scores = ((unseen_neg, unseen_scores) if outside
                                   else (seen_neg, seen_scores))
            pair_kind = np.isin(fit_neg.kinds, _PAIR_KINDS)
            weight = punct_weight(calib_scores[0, fit_rows], calib_scores[1, fit_rows] > 0,
                                  fit_scores[0, pair_kind], fit_scores[1, pair_kind] > 0)
        if weight > 0.0:
            aligner = LexicalAligner.load(paths["model"], expected_hash=model_hash)
            aligner = aligner.with_options(punct_weight=weight)
            aligner.save(tmp)
            tmp.replace(paths["model"])
            model_hash = aligner.content_hash
            del aligner
            for part in (calib_scores, unseen_scores, seen_scores, fresh_scores):
                part[0] -= np.float32(weight) * part[1]
        # the corpus rows scored here are not scored again in the decide step: the same model,
        # its punctuation term as it applies it, so the same float32 bits (at 100k pairs they
        # are 65,536 of the 95,477 rows the stage decides); with both directions' scores
        calib_ids = ids[calib]
        by_id = np.argsort(calib_ids, kind="stable")
        _save(paths["scored_ids"], calib_ids[by_id])
        _save(paths["scored"], calib_scores[[0, 2, 3]][:, by_id].astype(np.float32))
        calib_d = calib_scores[2].astype(np.float64) - calib_scores[3]  # as apply's
        calib_scores, unseen_scores, seen_scores, fresh_scores = (
            part[0] for part in (calib_scores, unseen_scores, seen_scores, fresh_scores))

        score_seconds = time.perf_counter() - started
        decided = self._thresholds(
            calib_scores, trained_scored, (seen_neg, seen_scores, fresh_scores),
            (unseen_neg, unseen_scores), outside=outside, whole=whole,
            note=lambda: sample.negatives_note or _reach_note(context, sample.drawn))
        seen, unseen, thresholds = decided.seen, decided.unseen, decided.thresholds
        seen_negatives, seen_scores = decided.negatives, decided.negative_scores
        method, threshold, warnings = decided.method, thresholds["seen"], decided.warnings
        says_more = self._says_more(calib_scores, trained_scored, thresholds, calib_d,
                                    sample.calib_sides, sample.calib_marks, sample.length_fit,
                                    one_group=outside or whole, warnings=warnings)
        seen_pair = np.isin(seen_negatives.kinds, _PAIR_KINDS)  # what the threshold read
        shifted_kind = seen_neg.kinds == NEGATIVE_KINDS.index("shifted")
        made_from = seen_neg.rows[shifted_kind] if not outside else np.zeros(0, np.int64)
        skip_ids = np.stack([ids[made_from], ids[(made_from + 1) % n]], axis=1)
        skip_ids = skip_ids[np.argsort(skip_ids[:, 0], kind="stable")]
        _save(paths["shift_skip_ids"], skip_ids)
        _save(paths["trained_ids"], sample.trained_ids)
        info = {"method": method, "threshold": threshold,
                "threshold_unseen": thresholds["unseen"], "trained_on": trained_on,
                "sample_drawn": sample.drawn, "sample_kept": n,
                "trained_despite": 0 if outside else sample.despite,
                "every_row_trained": bool(whole),
                "corpus_pairs_scored": int(calib.size), "quantile": cfg.quantile,
                "min_score": cfg.min_score, "trusted": cfg.trusted, "model": cfg.model,
                "model_hash": model_hash, "train_seconds": round(train_seconds, 3),
                "punct_weight": round(weight, 6),
                "score_seconds": round(score_seconds, 3),
                "calibrated_threshold": seen.threshold,
                "calibrated_threshold_unseen": unseen.threshold,
                # the mixture bounds the share from both sides (see calibrate): its midpoint,
                # and the range; measured on Multi30k with 10/25/50% junk, 0.10-0.13 /
                # 0.19-0.31 / 0.41-0.59
                "estimated_misaligned_share": round(
                    (seen.misaligned_share + seen.misaligned_share_low) / 2, 6),
                "estimated_misaligned_share_range": [round(seen.misaligned_share_low, 6),
                                                     round(seen.misaligned_share, 6)],
                "estimated_misaligned_share_unseen": round(unseen.misaligned_share, 6),
                "negatives_rejected": round(float(np.mean(seen_scores[seen_pair] < threshold))
                                            if seen_pair.any() else 0.0, 6),
                "estimated_real_rejected": round(seen.real_rejected, 6),
                "separation": decided.separation,
                # count: the negatives the threshold is calibrated on (_PAIR_KINDS: the
                # histogram's), kinds: every one made, rejected_by_kind: each kind's share
                # below the threshold (cut sides only where the model never saw the corpus,
                # since only whole-sentence kinds are made of training rows: _PAIR_KINDS)
                "negatives": {"count": int(np.count_nonzero(seen_pair)),
                              "kinds": seen_negatives.counts(),
                              "rejected_by_kind": {
                                  kind: round(float(np.mean(
                                      seen_scores[seen_negatives.kinds == i] < threshold)), 6)
                                  for i, kind in enumerate(NEGATIVE_KINDS)
                                  if np.any(seen_negatives.kinds == i)},
                              "unseen_count": int(np.count_nonzero(
                                  np.isin(unseen_neg.kinds, _PAIR_KINDS)))},
                "histograms": {"edges": SCORE_EDGES.round(4).tolist(),
                               "corpus": list(seen.corpus_histogram),
                               "negatives": list(seen.negatives_histogram)},
                "p_translation": list(seen.p_translation),
                "p_translation_unseen": list(unseen.p_translation),
                # how far one side may say more than the other (None: not checked; the
                # rows the model did not see, where too few were held out to fit: not either)
                "partial_translation": says_more,
                "warnings": warnings}
        atomic_write_bytes(paths["info"], json.dumps(info).encode())
        return {**state, "info": info}

    def _prepare(self, context: CombineContext, outside: bool) -> _Prepared:
        """The training sample (the fewest pairs that do, where ``align.model`` or
        ``align.trusted`` is not set: ``outside``), the negatives made of it, the calibration
        rows and the length fit they are judged by; what is scored after training is written
        to a work file, and the training texts are returned alone, so that through training
        this process holds no other text."""
        cfg = self.config
        sized = not outside
        src, tgt, ids, spared, words, alive = _training_pairs(
            context, cfg.max_train_pairs, cfg.seed, sized=sized, stem=cfg.stem_chars)
        src, tgt = src.cast(pa.large_string()), tgt.cast(pa.large_string())
        pa.default_memory_pool().release_unused()  # what reading the units' rows left
        drawn = int(np.count_nonzero(~spared))
        if sized:
            src, tgt, ids, spared = _smallest_sample(src, tgt, ids, spared, cfg, words)
        del words
        # the spared rows are trained on, as the corpus' junk is, and are not decided
        trained_despite = [side.filter(pa.array(spared)) for side in (src, tgt)]
        src, tgt, ids = (src.filter(pa.array(~spared)), tgt.filter(pa.array(~spared)),
                         ids[~spared])
        n = len(src)
        if n == 0:
            raise SprDataError("no pairs left to train the alignment model on"
                               + _reach_note(context, 0) + "; loosen the rules or name "
                               "align.trusted in the recipe")
        share = max(cfg.negatives_share,
                    min(_MIN_NEGATIVES_PER_KIND / n, 0.1))  # two kinds: at most 20% of rows
        # only negatives of two whole sentences take their rows' places in training (see
        # _PAIR_KINDS): a cut side's would hold its row out of training and calibrate nothing
        seen_neg = synthetic_negatives(src, tgt, share=share, seed=cfg.seed, keys=ids,
                                       kinds=[NEGATIVE_KINDS[i] for i in _PAIR_KINDS])
        held = seen_neg.drawn
        in_train = np.ones(n, bool)
        # every row the stage decides is in the sample: the negatives are added to training,
        # not swapped in for their rows, so that no row is decided as one the model never saw
        # (see the docstring); else their rows are held out, the unseen calibration's
        whole = sized and n == alive
        if whole:
            held = held[:0]  # no row is held out: no unseen negatives to make or score
        in_train[held] = False
        held_rows = pa.array(held)
        unseen_neg = synthetic_negatives(src.take(held_rows), tgt.take(held_rows),
                                         share=1.0 / len(NEGATIVE_KINDS), seed=cfg.seed + 1,
                                         keys=ids[held])
        calib = _calibration_rows(ids, in_train, cfg.seed)
        calib_rows = pa.array(calib)
        calib_src, calib_tgt = src.take(calib_rows), tgt.take(calib_rows)
        # the corpus' junk reached align through the rules; so must the negatives, or those
        # the rules would have taken (a length ratio of 10) widen their low tail and the junk
        # share is underestimated (measured: 0.28 for 0.40 on Multi30k with 50% junk)
        length_fit = self._length_fit(calib_src, calib_tgt)
        calib_sides = self._length_z(calib_src, calib_tgt, length_fit)
        calib_marks = sentence_marks(calib_src, calib_tgt)
        made = len(seen_neg.kinds) + len(unseen_neg.kinds)
        seen_neg = seen_neg.only(self._passes_rules(seen_neg.src, seen_neg.tgt, length_fit))
        unseen_neg = unseen_neg.only(self._passes_rules(unseen_neg.src, unseen_neg.tgt,
                                                        length_fit))
        negatives_note = "" if len(seen_neg.kinds) + len(unseen_neg.kinds) or not made else (
            f" (none of the {made:,} negatives made of the corpus' own pairs passed the "
            "recipe's rules: pairs of one template whose numbers differ, say, where a pair "
            "mixed with another is taken for numbers_mismatch before it reaches align)")
        # the seen negatives once more, scored as the corpus' junk would be: each shares its
        # sides with rows the model is also trained on (its own row's source, unless the
        # negative took that row's place, and another row's target), the corpus' junk mostly
        # does not; the share of junk and the real pairs' loss are estimated from these
        # (see calibrate's cap_negatives). None where the model never saw the corpus.
        as_fresh = seen_neg.only(np.zeros(len(seen_neg.kinds), bool)) if outside else seen_neg
        fresh = in_train[as_fresh.rows].astype(np.int8)
        took = as_fresh.partners >= 0
        fresh[took] |= np.int8(2) * in_train[as_fresh.partners[took]].astype(np.int8)
        # what is scored after training goes to a work file now, so that this process holds
        # no text through training but the training pairs, and those only until encoded
        # and whether the model is trained on each (what leave_one_out reads)
        scored = _write_pairs(context.work / "align_pairs.arrow", [
            (calib_src, calib_tgt, in_train[calib] & (not outside), np.zeros(calib.size, np.int8)),
            (unseen_neg.src, unseen_neg.tgt, np.zeros(len(unseen_neg.src), bool),
             np.zeros(len(unseen_neg.src), np.int8)),
            (seen_neg.src, seen_neg.tgt, np.full(len(seen_neg.src), not outside),
             np.zeros(len(seen_neg.src), np.int8)),
            (as_fresh.src, as_fresh.tgt, np.ones(len(as_fresh.src), bool), fresh)])
        del as_fresh
        del calib_src, calib_tgt
        trained_ids = (np.zeros(0, np.uint64) if outside else np.sort(ids[in_train]))
        training = self._training_texts(src, tgt, in_train, seen_neg, trained_despite)
        del trained_despite
        return _Prepared(ids=ids, drawn=drawn, despite=int(np.count_nonzero(spared)),
                         whole=bool(whole), in_train=in_train, calib=calib,
                         seen_neg=seen_neg.without_texts(),
                         unseen_neg=unseen_neg.without_texts(), fresh=len(fresh),
                         length_fit=length_fit, calib_sides=calib_sides,
                         calib_marks=calib_marks,
                         negatives_note=negatives_note, scored=scored,
                         trained_ids=trained_ids, training=training)

    def _thresholds(self, corpus: np.ndarray, trained: np.ndarray,
                    seen: tuple[Negatives, np.ndarray, np.ndarray],
                    unseen: tuple[Negatives, np.ndarray], *, outside: bool, whole: bool,
                    note: Callable[[], str]) -> _Thresholds:
        """The two calibrations (the rows the model was trained on, ``trained``, and those it
        was not) from the corpus sample's scores ``corpus`` and the negatives' (``seen``:
        the negatives, their scores and their scores as fresh junk; ``unseen``), the
        thresholds in force (calibrated, or ``align.min_score`` / ``align.quantile`` where
        the recipe sets one) and the warnings the report gives. ``note``: why the corpus may
        be too small, for the error where it is (read only then: it reads the scored rows)."""
        cfg = self.config
        seen_neg, seen_scores, fresh_scores = seen
        unseen_neg, unseen_scores = unseen
        warnings: list[str] = []
        if outside:
            unseen_cal = self._calibration(corpus[~trained], unseen_neg, unseen_scores, note)
            seen_cal, seen_scores, seen_neg = unseen_cal, unseen_scores, unseen_neg
        else:
            seen_cal = self._calibration(corpus[trained], seen_neg, seen_scores, note,
                                         fresh_scores)
            if whole:  # no row is unseen: its threshold decides nothing, the seen one stands
                unseen_cal = seen_cal
            elif np.isin(unseen_neg.kinds, _PAIR_KINDS).any():
                unseen_cal = self._calibration(corpus[~trained], unseen_neg, unseen_scores,
                                               note)
            else:  # a corpus of a few dozen pairs holds out too few rows to make them of:
                # those rows are kept here (the trained rows' threshold would reject them for
                # being unseen, not for being junk); the lowest float, not -inf, so that
                # report.json stays standard JSON
                unseen_cal = replace(seen_cal, threshold=float(np.finfo(np.float64).min))
                if cfg.min_score is None and cfg.quantile is None:
                    warnings.append("too few rows were held out of training to calibrate a "
                                    "threshold of their own; the align stage keeps them")
        thresholds = {"seen": seen_cal.threshold, "unseen": unseen_cal.threshold}
        if cfg.min_score is not None:
            method = "min_score"
            thresholds = {"seen": cfg.min_score, "unseen": cfg.min_score}
        elif cfg.quantile is not None:
            method = "quantile"
            value = float(np.quantile(corpus, cfg.quantile))
            thresholds = {"seen": value, "unseen": value}
            warnings.append(f"align.quantile = {cfg.quantile:g} rejects that share of the "
                            "pairs whatever the corpus holds (and again each time a cleaned "
                            "dataset is cleaned); drop it for the calibrated threshold "
                            f"({seen_cal.threshold:.3f} here)")
        else:
            method = "calibrated"
        if (not outside and not whole and unseen_cal is not seen_cal
                and unseen_cal.misaligned_share - seen_cal.misaligned_share > _SEEN_UNSEEN_GAP):
            warnings.append(
                f"the rows held out of training look {unseen_cal.misaligned_share:.0%} "
                f"misaligned and the trained rows {seen_cal.misaligned_share:.0%}: both are "
                "random rows of one corpus, so the model tells rows it saw from rows it did "
                "not more than translations from junk (too few pairs for this language pair); "
                "low_alignment may take real pairs: read its examples in report.html, or "
                "train on align.trusted or set align.min_score")
        # weak: where even 2% of the real pairs lost would take few negatives, or where the
        # corpus looks to hold junk and the threshold that keeps its real pairs lets most of
        # such junk through (a corpus with none: the threshold goes low, and rightly)
        junk = seen_cal.misaligned_share
        separation = _separation(corpus[~trained if outside else trained],
                                 seen_scores[np.isin(seen_neg.kinds, _PAIR_KINDS)], junk)
        weak = (f"a threshold that would reject 2% of the real pairs rejects only "
                f"{separation:.0%} of the negatives" if separation < _WEAK_SEPARATION
                else f"the corpus looks {junk:.0%} misaligned, and a threshold that keeps its "
                f"real pairs rejects only {seen_cal.negatives_rejected:.0%} of the negatives"
                if junk >= _JUNK_TO_CATCH and seen_cal.negatives_rejected < 0.5 else "")
        if method == "calibrated" and weak:
            warnings.append(f"the alignment model tells the corpus' pairs from negatives made "
                            f"of them poorly: {weak}; train it on a larger or trusted corpus "
                            "(align.trusted)"
                            + ("" if cfg.leave_one_out or outside else
                               ", or, for a few thousand long sentences, try "
                               "align.leave_one_out = true (docs/quality.md)"))
        if cfg.leave_one_out and outside:
            warnings.append("align.leave_one_out scores the pairs a model was trained on; "
                            "with align.trusted or align.model no pair of this corpus is, "
                            "and it changes nothing")
        return _Thresholds(method, seen_cal, unseen_cal, thresholds, seen_neg, seen_scores,
                           warnings, round(separation, 6))

    def _calibration(self, corpus: np.ndarray, negatives: Negatives, scores: np.ndarray,
                     note: Callable[[], str], as_fresh: np.ndarray | None = None
                     ) -> Calibration:
        """:func:`calibrate` on the negatives that are two whole sentences (see
        ``_PAIR_KINDS``); where there are too few pairs for it and the recipe sets a threshold
        by hand, nothing to estimate."""
        cfg = self.config
        pair_kind = np.isin(negatives.kinds, _PAIR_KINDS)
        kinds, scores = negatives.kinds[pair_kind], scores[pair_kind]
        try:
            return calibrate(corpus, scores, negative_recall=cfg.negative_recall,
                             max_real_reject=cfg.max_real_reject,
                             min_p_translation=cfg.min_p_translation,
                             reference=kinds == NEGATIVE_KINDS.index("repaired"), kinds=kinds,
                             mixture=np.isin(kinds, [NEGATIVE_KINDS.index(k)
                                                     for k in _MIXTURE_KINDS]),
                             cap_negatives=None if as_fresh is None else as_fresh[pair_kind])
        except InputError as error:
            if cfg.min_score is None and cfg.quantile is None:
                raise InputError(str(error) + note()) from None
            return Calibration(threshold=float("-inf"), misaligned_share=0.0,
                               negatives_rejected=0.0, real_rejected=0.0,
                               p_translation=tuple(1.0 for _ in SCORE_EDGES),
                               corpus_histogram=(0,) * (SCORE_EDGES.size - 1),
                               negatives_histogram=(0,) * (SCORE_EDGES.size - 1))

    def _says_more(self, corpus: np.ndarray, trained: np.ndarray, thresholds: dict[str, float],
                   differences: np.ndarray, sides: tuple[np.ndarray, np.ndarray] | None,
                   marks: tuple[np.ndarray, np.ndarray], length_fit: LengthRatioFit | None,
                   *, one_group: bool,
                   warnings: list[str]) -> dict[str, Any] | None:
        """The ``partial_translation`` fit for the report and the decide step (None: not
        checked, with a warning): how far one side may say more than the other, fitted on
        the calibration rows the thresholds keep (junk they reject would widen the spreads),
        the rows the model saw apart from those it did not, as the thresholds are, unless
        every row is decided as one group (``one_group``). Per calibration row: the two
        directions' difference (``differences``), the length fit's signs (``sides``; None
        without a rules stage) and the sentence marks (``marks``). Which sides end their
        sentences (so that one cut short is read by its missing mark) is measured on the
        kept rows whose sides say about as much as each other (:data:`_EVEN_SPREADS`)."""
        cfg = self.config
        if cfg.partial_z <= 0.0:
            return None
        if sides is None or length_fit is None:
            warnings.append("partial_translation reads the length ratio the rules stage "
                            "measures, and this recipe has no rules stage: not checked")
            return None
        signs = np.stack([differences, *sides])
        kept = corpus >= np.where(trained, thresholds["seen"], thresholds["unseen"])
        seen_rows = kept if one_group else kept & trained
        fit = PartialFit.of(*signs[:, seen_rows])
        if fit is None:
            warnings.append("too few pairs to fit how far one side may say more than the "
                            "other; partial_translation is not checked")
            return None
        unseen_rows = kept & ~trained
        fit_unseen = fit if one_group else PartialFit.of(*signs[:, unseen_rows])
        beyond = _beyond(fit, signs[:, seen_rows], cfg.partial_z)
        # each side's habit, read on the pairs whose sides say about as much as each other:
        # few of the corpus' cut sides are among them, and the terse ones of its real pairs
        # (headlines, captions) are, which go without their mark where the other side ends
        # its sentence: NTREX's English headlines read 2.3-3.5% unended against Amharic and
        # Burmese so, 0.6-1.8% on the pairs where the English says no less
        even = kept & (np.abs(fit.u(*signs)) <= _EVEN_SPREADS)
        unended = unended_shares(marks[0][:, even], marks[1][:, even])
        judged = [cfg.partial_z_sentence > 0.0 and ends_sentences(u, MAX_UNENDED_CUT)
                  for u in unended]
        return {"z": cfg.partial_z, "z_sentence": cfg.partial_z_sentence,
                "unended": [None if u is None else round(u, 6) for u in unended],
                "judged_by_end": judged,
                "z_lost_end": [round(_z_lost_end(u, cfg.partial_z, cfg.partial_z_sentence), 6)
                               if u is not None and j else None
                               for u, j in zip(unended, judged, strict=True)],
                "length_fit": asdict(length_fit),
                "fit": asdict(fit), "rejected": beyond,
                "fit_unseen": None if fit_unseen is None else asdict(fit_unseen),
                "rejected_unseen": beyond if one_group else _beyond(
                    fit_unseen, signs[:, unseen_rows], cfg.partial_z)}

    def _training_texts(self, src: pa.Array, tgt: pa.Array, in_train: np.ndarray,
                        seen_neg: Negatives, spared: list[pa.Array]) -> list[pa.Array]:
        """The pairs EM learns from: the corpus sample with the seen negatives in place of the
        rows they were made from, and the ``spared`` rows (:data:`_TRAINED_DESPITE`); a
        trusted dataset's instead; none for a reused model."""
        cfg = self.config
        if cfg.model:
            return [pa.array([], pa.large_string()), pa.array([], pa.large_string())]
        if cfg.trusted:
            trusted = open_dataset(cfg.trusted)
            if trusted.kind != "parallel":
                raise InputError(f"align.trusted {cfg.trusted} is not a parallel dataset")
            table = trusted.take(np.arange(min(len(trusted), cfg.max_train_pairs)))
            return [table.column("src").combine_chunks(), table.column("tgt").combine_chunks()]
        keep = pa.array(np.flatnonzero(in_train))
        return [pa.concat_arrays([src.take(keep), seen_neg.src, spared[0]]),
                pa.concat_arrays([tgt.take(keep), seen_neg.tgt, spared[1]])]

    def _decided_before(self, paths: dict[str, Path]) -> dict[str, Any]:
        """The decision of the run that cleaned this dataset with this recipe: its model, and
        the lower of its two thresholds for every row (each row kept then scored at least its
        own one). Why: the decision for a row must not depend on how many times it is
        cleaned. Retrained on the cleaner rows and calibrated again, a second clean rejected
        another 0.8-0.9% (measured on the WMT sample and Tatoeba eng-ben), and so would every
        clean that only applies a quarantine."""
        assert self.cleaned is not None  # noqa: S101 - called only then
        before = Path(self.cleaned)
        info = json.loads((before / "report.json").read_text())["align"]
        aligner = LexicalAligner.load(before / "align_model.npz",
                                      expected_hash=info["model_hash"])
        lowest = min(info["threshold"], info["threshold_unseen"])
        table = [min(a, b) for a, b in zip(info["p_translation"],
                                           info["p_translation_unseen"], strict=True)]
        tmp = paths["model"].with_name(paths["model"].name + TMP_SUFFIX)
        aligner.save(tmp)
        tmp.replace(paths["model"])
        _save(paths["trained_ids"], np.zeros(0, np.uint64))
        _save(paths["shift_skip_ids"], np.zeros((0, 2), np.uint64))
        _save(paths["scored_ids"], np.zeros(0, np.uint64))
        _save(paths["scored"], np.zeros((3, 0), np.float32))
        says_more = info.get("partial_translation")
        if says_more is not None:
            # each row within the fit of its group then; with leave_one_out the rows the model
            # saw were decided on scores a second clean does not make (it scores every row on
            # the whole model): not checked again
            says_more = None if aligner.options.leave_one_out else {**says_more, "either": True}
        decided = {**info, "method": "as cleaned before", "threshold": lowest,
                   "partial_translation": says_more,
                   "threshold_unseen": lowest, "p_translation": table,
                   "p_translation_unseen": table, "cleaned_before": str(before),
                   "warnings": []}
        atomic_write_bytes(paths["info"], json.dumps(decided).encode())
        return {**{name: str(path) for name, path in paths.items()}, "info": decided}

    def _reused_model(self) -> LexicalAligner:
        """``align.model``: a model an earlier clean wrote, for this language pair only."""
        path = self.config.model
        assert path is not None  # noqa: S101 - called only with align.model set
        if not Path(path).is_file():
            raise InputError(f"align.model {path} does not exist; name the align_model.npz an "
                             "earlier clean wrote into its --out, or drop align.model to train "
                             "one")
        model = LexicalAligner.load(path)
        pair = (model.options.src_lang, model.options.tgt_lang)
        if pair != (self.src_lang, self.tgt_lang):
            raise InputError(f"align.model {path} was trained for {pair[0]}-{pair[1]}, and "
                             f"this dataset is {self.src_lang}-{self.tgt_lang}; name a model "
                             "of this language pair or drop align.model to train one")
        return model

    def _passes_rules(self, src: pa.Array, tgt: pa.Array,
                      length_fit: LengthRatioFit | None) -> np.ndarray:
        """Which pairs the recipe's rules stage would keep (all, without one), their length
        ratio judged against ``length_fit`` (the corpus'), not fitted on these pairs."""
        keep = np.ones(len(src), bool)
        if self.rules is None or not len(src):
            return keep
        for start in range(0, len(src), _SLICE_ROWS):
            batch = pa.RecordBatch.from_arrays([src.slice(start, _SLICE_ROWS),
                                                tgt.slice(start, _SLICE_ROWS)], ["src", "tgt"])
            for _, mask in self.rules.apply(batch, length_fit=length_fit).rejects:
                keep[start:start + batch.num_rows] &= ~np.asarray(mask, bool)
        return keep

    def _length_fit(self, src: pa.Array, tgt: pa.Array) -> LengthRatioFit | None:
        """The corpus' length-ratio fit, made on its calibration rows (``src``, ``tgt``: a
        random sample of the pairs that reached this stage). Why: the negatives must pass the
        length rule as the corpus' junk did, against the corpus' spread; fitted on the
        negatives themselves (half of them with a side cut) its variance floor came out
        0.5-1.1 against the corpus' 0.003-0.05, and 0.4-10% of the re-paired and shifted
        negatives that passed were pairs the corpus' own rule rejects (measured on 12 of the
        quality sweep's mixes)."""
        if self.rules is None or not len(src):
            return None
        return self.rules.length_fit(pa.RecordBatch.from_arrays([src, tgt], ["src", "tgt"]))

    def _length_z(self, src: pa.Array, tgt: pa.Array, fit: LengthRatioFit | None
                  ) -> tuple[np.ndarray, np.ndarray] | None:
        """Each pair's length ratio in ``fit``'s spreads and the length they are taken at (None
        without a rules stage: no corpus fit to judge by)."""
        if self.rules is None or fit is None:
            return None
        return self.rules.length_z(pa.RecordBatch.from_arrays([src, tgt], ["src", "tgt"]), fit)

    def _distance(self, says_more: dict[str, Any], src: pa.Array, tgt: pa.Array,
                  directions: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """:meth:`PartialFit.u` of each pair (``directions``: its forward and backward scores),
        by the fit of the rows the model saw or of those it did not (NaN where that one is
        missing); a dataset cleaned before: the smaller of the two, as each row kept then was
        within its own."""
        length_fit = LengthRatioFit(**says_more["length_fit"])
        sides = self._length_z(src, tgt, length_fit)
        assert sides is not None  # noqa: S101 - a fit exists only with the rules stage
        d = directions[0].astype(np.float64) - directions[1]
        out = np.full(len(d), np.nan)
        for fit, rows in ((says_more["fit"], seen), (says_more["fit_unseen"], ~seen)):
            if fit is not None and rows.any():
                out[rows] = PartialFit(**fit).u(d[rows], sides[0][rows], sides[1][rows])
        if says_more.get("either") and says_more["fit_unseen"] is not None:
            other = PartialFit(**says_more["fit"]).u(d, *sides)
            out = np.where(np.abs(other) < np.abs(out), other, out)
        return out

    # -- apply: score and decide ------------------------------------------------------------

    def apply(self, rows: UnitRows, state: dict[str, Any],
              rejected: np.ndarray) -> StageOutput:
        """Score the unit slice by slice (and the cross pairs of its neighbours, for
        ``shifted_lines``), then decide over the whole unit: a run of shifted lines may
        cross any slice boundary.

        Rows an earlier stage rejected are not scored (their ``align_score`` and
        ``p_translation`` are null), as language id does not ask fastText about rows the
        rules rejected: their reason is known, and scoring is most of the decide step's
        time."""
        info = state["info"]
        aligner = _model(state["model"], info["model_hash"])
        trained = np.load(state["trained_ids"], allow_pickle=False)
        # a reused model may have been trained on this corpus' lines, slipped ones included:
        # it knows their cross pairs, so neighbours cannot be compared with it
        shift = bool(self.config.shift_links) and not self.config.model and self.cleaned is None
        links = _CrossLinks(aligner)
        known = _ScoredBefore(state)
        id_parts, score_parts, seen_parts, whole_parts = [], [], [], []
        # scored leaving itself out, a row falls below its neighbours' cross pairs, which no
        # one trained on: lines out of step are found on the whole model's scores (measured
        # on the quality sweep with leave_one_out, comparing the two: real Tatoeba eng-ben
        # pairs taken as shifted lines up to 429 of 8,000)
        whole_model = shift and aligner.options.leave_one_out
        says_more = info.get("partial_translation")
        z_sentence = 0.0 if says_more is None else says_more.get("z_sentence", 0.0)
        distance_parts: list[np.ndarray] = []  # PartialFit.u per row (NaN: not scored)
        # the pairs sentence_more can decide (past z_sentence): their row in the unit and
        # texts, read once for the unit (its regex takes ~4 ms to compile at each call)
        candidates: list[tuple[np.ndarray, pa.Array, pa.Array]] = []
        start = 0
        for batch in rows:
            n = batch.num_rows
            ids = np.asarray(batch.column(ID).to_numpy(), np.uint64)
            seen = member(ids, trained)
            # in file order, the rows no earlier stage rejected
            alive = np.flatnonzero(~rejected[start:start + n])
            scored = np.full((3, n), np.nan, dtype=np.float32)  # score, forward, backward
            todo = alive[~known.lookup(ids[alive], scored, alive)]
            if todo.size:
                rows_todo = pa.array(todo)
                src_todo, tgt_todo = (batch.column("src").take(rows_todo),
                                      batch.column("tgt").take(rows_todo))
                if says_more is None:
                    scored[0, todo] = aligner.score(src_todo, tgt_todo, trained=seen[todo])
                else:
                    fresh = aligner.scores(src_todo, tgt_todo, trained=seen[todo])
                    scored[:, todo] = (fresh.score, fresh.forward, fresh.backward)
            scores = scored[0]
            if (shift or says_more is not None) and alive.size:
                at = pa.array(alive)
                src_alive, tgt_alive = batch.column("src").take(at), batch.column("tgt").take(at)
            if says_more is not None:
                distance = np.full(n, np.nan)
                if alive.size:
                    distance[alive] = self._distance(says_more, src_alive, tgt_alive,
                                                     scored[1:, alive], seen[alive])
                    near = (np.flatnonzero(np.abs(np.nan_to_num(distance[alive])) > z_sentence)
                            if z_sentence > 0.0 else alive[:0])
                    if near.size:
                        picked = pa.array(near)
                        candidates.append((start + alive[near], src_alive.take(picked),
                                           tgt_alive.take(picked)))
                distance_parts.append(distance)
            if shift and alive.size:
                links.add(src_alive, tgt_alive,
                          _p_values(scores[alive], seen[alive], info) < _SURE, start + alive)
            if whole_model:  # an unseen row's score is the whole model's already
                whole = scores.copy()
                again = np.flatnonzero(seen[alive])
                if again.size:
                    picked = pa.array(again)
                    whole[alive[again]] = aligner.score(src_alive.take(picked),
                                                        tgt_alive.take(picked))
                whole_parts.append(whole)
            id_parts.append(ids)
            score_parts.append(scores)
            seen_parts.append(seen)
            start += n
        ids, scores, seen = (joined(id_parts, np.uint64), joined(score_parts, np.float32),
                             joined(seen_parts, np.bool_))
        unscored = np.isnan(scores)
        threshold = np.where(seen, info["threshold"], info["threshold_unseen"])
        p_values = _p_values(scores, seen, info)
        low_alignment = scores < threshold
        # one side saying more than the other, where the alignment itself keeps the pair
        distance = np.full(len(scores), np.nan)
        one_sided = np.zeros(len(scores), dtype=bool)
        if says_more is not None:
            distance = joined(distance_parts, np.float64)
            past = np.abs(np.nan_to_num(distance)) > says_more["z"]
            # (a dataset cleaned before reads the nearer of two fits, ``either``: a row kept
            # then could go now only if the fits' centres lay some 5 spreads apart)
            if candidates:  # the side that says more: a sentence more too
                near_rows = joined([c[0] for c in candidates], np.int64)
                near_src = pa.concat_arrays([c[1] for c in candidates])
                near_tgt = pa.concat_arrays([c[2] for c in candidates])
                z_lost = [math.inf if z is None else z
                          for z in says_more.get("z_lost_end", [None, None])]
                more = sentence_more(near_src, near_tgt).astype(np.int16)
                lost = lost_end(near_src, near_tgt, (z_lost[0] < math.inf,
                                                     z_lost[1] < math.inf)).astype(np.int16)
                # the side that says more holds a sentence more (z_sentence), or the other side
                # lost the end mark it has (that side's z_lost_end; +1: the target's); where
                # the two disagree, neither counts
                sign = np.where(more != 0, np.where(lost == -more, 0, more), lost)
                need = np.where(more != 0, z_sentence,
                                np.where(lost > 0, z_lost[1], z_lost[0]))
                past[near_rows] |= sign * np.nan_to_num(distance[near_rows]) > need
            one_sided = past & ~low_alignment
        out = StageOutput(columns={
            ALIGN_SCORE: pa.array(scores, mask=unscored),
            P_TRANSLATION: pa.array(np.asarray(p_values, np.float32), mask=unscored),
            PARTIAL_Z: pa.array(distance.astype(np.float32), mask=np.isnan(distance))})
        shifted = np.zeros(len(scores), dtype=bool)
        if shift:
            alive = np.flatnonzero(~rejected)
            trained_cross = _trained_cross(
                ids[alive], np.load(state["shift_skip_ids"], allow_pickle=False))
            down, up = links.scores()
            own = joined(whole_parts, np.float32) if whole_model else scores
            shifted[alive] = shifted_from_cross(own[alive], down, up,
                                                threshold=threshold[alive],
                                                trained_cross=trained_cross,
                                                min_links=self.config.shift_links)
        # a run of slipped lines is the more specific diagnosis for its rows
        out.rejects = [("low_alignment", low_alignment), ("shifted_lines", shifted),
                       ("partial_translation", one_sided)]
        # the report's kept / rejected histograms (rejected: by alignment, or by another
        # reason first)
        final = rejected | low_alignment | one_sided | shifted
        out.stats = {
            "kept": _histogram(scores[~final]),
            "rejected_low_alignment": _histogram(scores[low_alignment]),
            "rejected_other": _histogram(scores[final & ~low_alignment])}
        return out


#: the rarest a missing end mark is taken to be among a corpus' real pairs (one in a
#: thousand): so that a handful of pairs does not buy the whole allowance
_RAREST_UNENDED = 0.001


def _z_lost_end(share: float, z: float, floor: float) -> float:
    """The spreads asked of a pair whose shorter side lost the end mark the other side has,
    in a corpus whose real pairs go without it at the rate ``share``: a cut side always
    lacks it, so its missing mark is 1/share times likelier for junk than for a real pair,
    which moves a normal's tail from ``z`` to sqrt(z² - 2 ln(1/share)) spreads; no lower
    than ``floor`` (``partial_z_sentence``). At the default 4.5: 2.5 for a side that ends
    all but one in a thousand of its sentences, 3.3 at 1%, 3.5 at 2% (NTREX's English
    headlines, translated into a sentence that ends with a full stop, are why less is asked
    where more sides go unended)."""
    odds = 1.0 / max(share, _RAREST_UNENDED)
    return max(floor, math.sqrt(max(z * z - 2.0 * math.log(odds), 0.0)))


def _beyond(fit: PartialFit | None, signs: np.ndarray, z: float) -> float | None:
    """The share of the pairs (``signs``: d, z, length) beyond ``z`` of ``fit``, rounded."""
    if fit is None:
        return None
    return round(float(np.mean(np.abs(fit.u(*signs)) > z)), 6)


def _reach_note(context: CombineContext, reached: int) -> str:
    """Why the align stage may have too few pairs, when the stages before it rejected most
    rows: a wrong language code or swapped sides, not a corpus too small (the clean run's
    heavy-loss check names the reason only once every stage has decided)."""
    rows = 0
    for path in context.scored:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            rows += sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    if not rows or reached > 0.5 * rows:
        return ""
    return (f" (only {reached:,} of the {rows:,} rows passed the stages before align: check "
            "the dataset's languages and sides, `spr-data info`, and the recipe; a run "
            "without the align stage names the reason that took them)")


def _p_values(scores: np.ndarray, seen: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """``p_translation`` of each row, by the table of the rows the model saw or not."""
    values: np.ndarray = np.where(seen, p_translation(scores, info["p_translation"]),
                                  p_translation(scores, info["p_translation_unseen"]))
    return values


class _ScoredBefore:
    """The corpus rows the combine step scored for the calibration, by id: ``align_score``
    and both directions."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.ids = np.load(state["scored_ids"], allow_pickle=False)
        self.scores = np.load(state["scored"], allow_pickle=False)

    def lookup(self, ids: np.ndarray, out: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Write the known scores of ``ids`` to ``out[:, rows]`` (``align_score``, forward,
        backward); return which were known."""
        if self.ids.size == 0:
            return np.zeros(ids.size, dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        found: np.ndarray = self.ids[at] == ids
        out[:, rows[found]] = self.scores[:, at[found]]
        return found


class _CrossLinks:
    """The cross pairs of neighbouring rows no earlier stage rejected, scored slice by slice.

    A link joins a row to the row before it (among those rows, in file order, whichever slice
    it is in); it is scored where either row is unsure (below ``_SURE``): measured at 1M pairs
    with 5% junk, the decide step 47 -> 22 s, the same decisions on every quality mix. Only
    rows next to each other in the file are linked: where an earlier stage rejected the rows
    between two, their cross pairs are no neighbours' lines (no link, which a run bridges as
    a gap; a rejected row's lines scored as links cost the decide step 35% at 1M pairs,
    docs/quality.md, *Shifted lines next to rejected rows*). The last row of a slice is
    carried (copied: the slice can go) to the next."""

    def __init__(self, aligner: LexicalAligner) -> None:
        self.aligner = aligner
        self.rows = 0
        self._carry: tuple[pa.Array, pa.Array, bool, int] | None = None
        self._at: list[np.ndarray] = []
        self._down: list[np.ndarray] = []
        self._up: list[np.ndarray] = []

    def add(self, src: pa.Array, tgt: pa.Array, unsure: np.ndarray, rows: np.ndarray) -> None:
        """The next alive rows of the unit (a slice's, in file order), whether each is
        unsure, and their rows in the unit."""
        if len(src) == 0:
            return
        count = len(src)
        first = self.rows  # this slice's first row among all the unit's alive rows
        if self._carry is not None:  # the row before this slice's first
            src = pa.concat_arrays([self._carry[0], src])
            tgt = pa.concat_arrays([self._carry[1], tgt])
            unsure = np.r_[self._carry[2], unsure]
            rows = np.r_[self._carry[3], rows]
            first -= 1
        last = pa.array([len(src) - 1])
        self._carry = (src.take(last), tgt.take(last), bool(unsure[-1]), int(rows[-1]))
        self.rows += count
        next_to = np.diff(rows) == 1  # the row before it in the file is alive too
        here = np.flatnonzero((unsure[1:] | unsure[:-1]) & next_to) + 1
        if here.size == 0:
            return
        at, before = pa.array(here), pa.array(here - 1)
        self._at.append(first + here)
        self._down.append(self.aligner.score(src.take(at), tgt.take(before)))  # this source,
        self._up.append(self.aligner.score(src.take(before), tgt.take(at)))    # the previous
        # target; back

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """Per alive row of the unit: its link's two cross scores (``-inf``: none scored)."""
        down = np.full(self.rows, -np.inf)
        up = np.full(self.rows, -np.inf)
        if self._at:
            at = np.concatenate(self._at)
            down[at] = np.concatenate(self._down)
            up[at] = np.concatenate(self._up)
        return down, up


#: pairs a scoring task takes at a time: small enough that the workers end about together
#: (at 1M pairs 82k pairs are scored: in tasks of 32,768, one of two workers got two of three)
_SCORE_TASK_ROWS = 8192


@dataclass(frozen=True)
class _ScoreTask:
    model: str
    model_hash: str
    pairs: str
    lo: int
    hi: int


#: the model this process loaded last, by content hash
_LOADED: dict[str, LexicalAligner] = {}


def _model(path: str | Path, model_hash: str) -> LexicalAligner:
    """The model at ``path``, loaded once per process (loading hashes every array and builds
    the lookup table): a worker's next scoring task or unit reuses it."""
    aligner = _LOADED.get(model_hash)
    if aligner is None:
        _LOADED.clear()
        aligner = LexicalAligner.load(path, expected_hash=model_hash)
        _LOADED[model_hash] = aligner
    return aligner


def _score_task(task: _ScoreTask) -> np.ndarray:
    """Rows: ``align_score``, the punctuation mismatch (0/1), forward, backward."""
    aligner = _model(task.model, task.model_hash)
    with pa.memory_map(task.pairs) as source:
        table = pa.ipc.open_file(source).read_all().slice(task.lo, task.hi - task.lo)
    scored = aligner.scores(table.column("src"), table.column("tgt"),
                            trained=table.column("trained").to_numpy(zero_copy_only=False),
                            fresh=table.column("fresh").to_numpy(zero_copy_only=False))
    out = np.stack([scored.score, scored.punct_mismatch.astype(np.float32), scored.forward,
                    scored.backward])
    del table, scored
    release_heap()  # this worker goes on to the decide step
    return out


def _write_pairs(path: Path,
                 sets: list[tuple[pa.Array, pa.Array, np.ndarray, np.ndarray]]) -> Path:
    """The pairs of ``sets``, one after the other, as an Arrow file (``src``, ``tgt``,
    ``trained``: whether the model is trained on the pair, and ``fresh``: its sides to score
    as if not trained on elsewhere, :meth:`spr_data.qa.align.LexicalAligner.scores`')."""
    table = pa.table({
        "src": pa.concat_arrays([a.cast(pa.large_string()) for a, _, _, _ in sets]),
        "tgt": pa.concat_arrays([b.cast(pa.large_string()) for _, b, _, _ in sets]),
        "trained": pa.array(np.concatenate([np.asarray(t, bool) for _, _, t, _ in sets])),
        "fresh": pa.array(np.concatenate([np.asarray(f, np.int8) for *_, f in sets]))})
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    tmp.replace(path)
    return path


def _popped(texts: list[pa.Array]) -> tuple[pa.Array, pa.Array]:
    """Both sides, taken out of ``texts``: the callee then holds the only reference and can
    let them go once it has encoded them."""
    src, tgt = texts.pop(0), texts.pop(0)
    return src, tgt


def _scores_in_tasks(context: CombineContext, model: Path, model_hash: str, pairs: Path,
                     sizes: list[int]) -> list[np.ndarray]:
    """The scores of the pairs in ``pairs`` (sets of ``sizes`` pairs one after the other;
    rows as :func:`_score_task`'s), scored in slices as tasks on the executor (a pair's
    score does not depend on the slice it is scored in)."""
    total = sum(sizes)
    try:
        tasks = [_ScoreTask(str(model), model_hash, str(pairs), lo,
                            min(lo + _SCORE_TASK_ROWS, total))
                 for lo in range(0, total, _SCORE_TASK_ROWS)]
        done = dict(context.map(_score_task, tasks))
    finally:
        pairs.unlink(missing_ok=True)
    scores = (np.concatenate([done[i] for i in range(len(tasks))], axis=1) if tasks
              else np.zeros((4, 0), np.float32))
    bounds = np.cumsum([0, *sizes])
    return [scores[:, lo:hi] for lo, hi in itertools.pairwise(bounds)]


def _calibration_rows(ids: np.ndarray, in_train: np.ndarray, seed: int) -> np.ndarray:
    """Sample rows to score for the calibrations, sorted: every held-out row (the unseen
    calibration's) and at most about ``_CALIBRATION_ROWS`` trained-on ones, drawn by row id."""
    trained = int(np.count_nonzero(in_train))
    sampled = in_train
    if trained > _CALIBRATION_ROWS:
        drawn = row_hash(ids, seed, _CALIBRATION_SALT) < _CALIBRATION_ROWS / trained
        sampled = in_train & drawn
    return np.flatnonzero(~in_train | sampled)


def _histogram(values: np.ndarray) -> list[int]:
    edges = SCORE_HISTOGRAM_EDGES
    values = values.astype(np.float64)
    clipped = np.clip(values[np.isfinite(values)], edges[0], edges[-1])
    counts: list[int] = np.histogram(clipped, bins=edges)[0].tolist()
    return counts


def _save(path: Path, values: np.ndarray) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        np.save(f, values, allow_pickle=False)
    tmp.replace(path)


def _trained_cross(ids: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """Per row, whether (the previous row's source, this row's target) was trained on:
    ``trained`` holds sorted (row id, next row id) pairs of the shifted negatives."""
    out = np.zeros(len(ids), dtype=bool)
    if len(ids) < 2 or len(trained) == 0:
        return out
    at = np.minimum(np.searchsorted(trained[:, 0], ids[:-1]), len(trained) - 1)
    out[1:] = (trained[at, 0] == ids[:-1]) & (trained[at, 1] == ids[1:])
    return out


@dataclass(frozen=True)
class _SampleTask:
    """One unit's part of the training sample: its rows no earlier stage rejected, counted
    (``share`` < 0) or drawn by id at ``share`` into the Arrow file ``path``; with
    ``count_words``, the drawn rows' word counts too (:func:`_words_path`), cut to ``stem``."""

    context: CombineContext
    unit: int
    share: float
    seed: int
    path: str = ""
    count_words: bool = False
    stem: int = 0


def _words_path(path: str) -> Path:
    return Path(path + ".words")


def _sample_task(task: _SampleTask) -> tuple[int, int]:
    """Count (or draw and write) a unit's eligible rows: a task, so that picking the sample
    reads the corpus on the workers, not in the driver. Returns the rows counted or drawn,
    and, counted, how many of them are rejected but spared (:data:`_TRAINED_DESPITE`).

    The drawn rows' words are counted here too, where the rows are read, so that sizing the
    sample (:func:`_smallest_sample`) needs no pass of the driver over the sample's text
    (1M pairs: 300,152 pairs tokenized in the driver, 2.8 s, while the workers idled)."""
    table, rejected, spared = task.context.rejected_before(task.unit, _TRAINED_DESPITE)
    positions = np.flatnonzero(~rejected | spared)
    if task.share < 0:
        return int(positions.size), int(np.count_nonzero(spared))
    if task.share < 1.0:
        unit_ids = table.column(ID).to_numpy()[positions]
        positions = positions[row_hash(unit_ids, task.seed, _SAMPLE_SALT) < task.share]
    picked = table.select(["src", "tgt", ID]).take(pa.array(positions))
    picked = picked.append_column(_SPARED, pa.array(spared[positions]))
    if task.count_words:
        words = [word_counts(picked.column(side).combine_chunks(), stem=task.stem)
                 for side in ("src", "tgt")]
        counted = pa.table({
            "side": pa.array(np.repeat(np.arange(2, dtype=np.uint8),
                                       [len(w) for w in words])),
            "token": pa.concat_arrays([w["token"].to_arrow().cast(pa.large_string())
                                       for w in words]),
            "count": pa.array(np.concatenate([w["count"].to_numpy().astype(np.int64)
                                              for w in words]))})
        _write_arrow(_words_path(task.path), counted)
    _write_arrow(Path(task.path), picked)
    del table, picked
    release_heap()  # this worker goes on to EM's parts
    return int(positions.size), 0


def _write_arrow(path: Path, table: pa.Table) -> None:
    tmp = Path(str(path) + TMP_SUFFIX)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    tmp.replace(path)


def _smallest_sample(src: pa.Array, tgt: pa.Array, ids: np.ndarray, spared: np.ndarray,
                     cfg: AlignConfig, counts: list[np.ndarray]
                     ) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray]:
    """The drawn sample cut to :func:`spr_data.qa.align.training_size`: its rows of lowest
    hash (the ones a smaller ``max_train_pairs`` would have drawn), in their order.

    Measured (``align.sample_tolerance`` 0.005): on ``benchmarks/bench_clean.py``'s corpus
    at 1M pairs (Multi30k's words, repeated), 300,152 drawn pairs cut to 114,688, the align
    step 28.3 → 15.3 s, 40 of the 1M decisions (0.004%) other than from the whole sample. On
    real corpora of 28k pairs, where the cut was allowed below 65,536 for the measurement,
    Multi30k en-de to 24,576 and Tatoeba eng-cmn to 25,600: 0.25% and 0.46% of the decisions
    other (the negatives are drawn anew from the smaller sample too); a tolerance of 0.02
    (17,408 pairs) gave 0.76% and 1.5%. Below 65,536 pairs nothing is cut. ``counts``: the
    sample's word counts per side (:func:`_training_pairs`)."""
    if not counts:  # not counted: no more than the smallest sample was to be drawn
        return src, tgt, ids, spared
    keep = size_from_counts(len(src), counts, tolerance=cfg.sample_tolerance,
                            smallest=_SMALLEST_SAMPLE)
    if keep >= len(src):
        return src, tgt, ids, spared
    order = np.argsort(row_hash(ids, cfg.seed, _SAMPLE_SALT), kind="stable")
    rows = np.sort(order[:keep])
    return src.take(pa.array(rows)), tgt.take(pa.array(rows)), ids[rows], spared[rows]


def _training_pairs(context: CombineContext, limit: int, seed: int, *, sized: bool = False,
                    stem: int = 0
                    ) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray, list[np.ndarray],
                               int]:
    """Rows no earlier stage rejected, or rejected only for :data:`_TRAINED_DESPITE`, a
    uniform sample of them drawn by id (at most about ``limit``; all of them when there are
    no more): their sources, targets, ids, and which are the rejected ones. Drawn by id, a
    row added or removed changes the sample by that row alone. Counted, then drawn, by one
    task per unit (each writes its part to a work file, read back here in unit order).

    With ``sized`` (the sample will be cut to :func:`_smallest_sample`), also the sample's
    word counts per side, counted by the same tasks when it holds more than the smallest
    sample (else empty: nothing is cut). Last, how many rows no earlier stage rejected."""
    import polars as pl  # here: the score step's workers import this module, not polars
    units = range(len(context.scored))
    counts = [counted for _, counted in context.map(
        _sample_task, [_SampleTask(context, u, -1.0, seed) for u in units])]
    total = sum(eligible for eligible, _ in counts)
    alive = total - sum(spared for _, spared in counts)
    share = min(1.0, limit / total) if total else 1.0
    count_words = sized and min(total, limit) > _SMALLEST_SAMPLE
    tasks = [_SampleTask(context, u, share, seed, str(context.work / f"align-sample-{u:05d}"),
                         count_words=count_words, stem=stem)
             for u in units]
    src_parts, tgt_parts, id_parts, spared_parts = [], [], [], []
    words: list[list[pl.DataFrame]] = [[], []]
    try:
        for _ in context.map(_sample_task, tasks):
            pass
        for task in tasks:  # in unit order
            with pa.memory_map(task.path) as source:
                picked = pa.ipc.open_file(source).read_all()
            src_parts.append(picked.column("src").combine_chunks())
            tgt_parts.append(picked.column("tgt").combine_chunks())
            id_parts.append(picked.column(ID).to_numpy())
            spared_parts.append(picked.column(_SPARED).to_numpy(zero_copy_only=False))
            if count_words:
                with pa.memory_map(str(_words_path(task.path))) as source:
                    counted = pl.DataFrame(pa.ipc.open_file(source).read_all())
                for side in (0, 1):
                    words[side].append(counted.filter(pl.col("side") == side)
                                       .select("token", "count"))
    finally:
        for task in tasks:
            Path(task.path).unlink(missing_ok=True)
            _words_path(task.path).unlink(missing_ok=True)
    word_totals = [merged_counts(frames) for frames in words] if count_words else []
    if not src_parts:
        return (pa.array([], pa.string()), pa.array([], pa.string()), np.zeros(0, np.uint64),
                np.zeros(0, bool), word_totals, alive)
    return (pa.concat_arrays(src_parts), pa.concat_arrays(tgt_parts),
            np.concatenate(id_parts).astype(np.uint64), np.concatenate(spared_parts),
            word_totals, alive)
