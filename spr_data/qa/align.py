"""``align`` core: a lexical translation score per sentence pair (IBM Model 1, both directions).

Why: rules and language id look at each side alone; only a translation model notices that two
clean, well-formed sentences are not translations of each other (a shifted line, a re-paired
crawl). IBM Model 1 is the cheapest such model that needs no labelled data: EM over the corpus
being cleaned (or over a trusted one) learns word translation tables ``t(f|e)`` and ``t(e|f)``,
and a pair whose words do not explain each other gets a low score.

Scoring. Tokens come from :func:`alignment_tokens`, each side cut to ``max_score_tokens``
and each word to its first ``stem_chars`` letters (6: code points, a Hangul block counting as
its 2-3 letters; a word's forms learn their links together, in training as in scoring; the
measurements: docs/quality.md, *The align stage in detail*).
The *link strength* of a source word ``e`` and a target word ``f`` is the mean of both
directions' probabilities, ``a(e, f) = (t(f|e) + t(e|f)) / 2``. For a pair with source tokens
``e_1..e_l`` and target tokens ``f_1..f_m``::

    s(tgt|src) = Σ_j w(f_j) log( b_j + ε ) / Σ_j w(f_j)    how well the source covers the target
    s(src|tgt) = Σ_i w(e_i) log( b_i + ε ) / Σ_i w(e_i)    and the other way round
    align_score = ω · worse + (1 - ω) · better - λ · | log((l+1)/(m+1)) - μ | - π · differ

with ``worse``/``better`` the lower/higher of the two directions, ω = ``worse_weight`` (0.5:
both alike), ``differ`` 1 where the two sides end in punctuation of another kind (a question,
an exclamation, anything else: :func:`final_punctuation`) and π = ``punct_weight``, fitted on
the corpus' pairs against its negatives after training (:func:`punct_weight`), and where
``b_j`` is target token ``j``'s best link ``max_i a(e_i, f_j)``, except that a source
token may be the best of at most ``max(2, ⌈fertility · m/l⌉)`` target tokens (``fertility``
1.5): the ones beyond, weakest first, take their second-best link (``b_i`` the same way round);
and ``w(word) = log(1 + N / count)^idf_power`` (``idf_power`` 0.25, ``count`` the word's
training count among ``N`` training pairs; a word outside the vocabulary weighs ~0). ε =
``floor`` (1e-3), λ = ``length_weight`` (0.25) and μ the median of that log length ratio over
the training pairs. Why the fertility limit: EM spreads a rare word's probability over every
word of the pairs it was seen in, so in a non-translation the model was trained on, one rare
word "explains" every token of the other side at about ``1/m`` (each character of
``今天没有昨天潮湿。`` best-linked to *saluted* of "He saluted the lady.", 0.04-0.16); in a
translation, a word is the best partner of one to three. Why the weights: a frequent word (a
function word, 的, 了) finds a partner in any sentence, a rarer one mostly in its translation.
Measured on 15 corpus-levels (5 corpora at 10/25/50% junk, a model trained on each mix, the
threshold that loses 2% of its real pairs): re-paired pairs caught 0.895 → 0.949 (the limit
alone 0.930, the weights alone 0.907), misaligned 0.920 → 0.954; limits of 1.25-2 and 1-3
tokens gave 0.94-0.956. In ``clean`` on 24 corpus-levels (``benchmarks/quality_sweep.py``):
real pairs lost under junk 2.33 → 1.93%, with none 1.09 → 1.09%, re-paired 0.799 → 0.831,
misaligned 0.855 → 0.886, shifted blocks 0.927 → 0.935 (with :func:`calibrate`'s threshold
refined between its steps). The weights trade junk caught for real pairs kept: at a power of
0 / 0.25 / 0.5 (before that refinement), real pairs lost under junk 2.27 / 1.87 / 1.76%,
re-paired 0.827 / 0.827 / 0.809; on the OpenNMT WMT sample, whose own junk is mostly crawled
pairs of one topic that share their names and subject words, 412 / 369 / 342 rows went to
``low_alignment`` (414 before), and of the rows 0.5 kept that were rejected before, 30 of 40
read were not translations. Models saved before these options score as before (both 0).

A word of 3 letters or more that both vocabularies hold (a
name, a number) links to itself at least ``IDENTITY_LINK`` (0.5): see
:func:`_with_identity_links`. A score is in about [log ε - λ·Δ, 0]: 0 means every token has a
certain partner on the other side. Why not the Model 1 likelihood itself,
``1/m Σ_j log(Σ_i t(f_j|e_i)/(l+1))``: on real corpora with 5% re-paired pairs, at a threshold
that rejects 3% of the real pairs, it caught 93% of re-paired pairs on Tatoeba eng–cmn, 94% on
Multi30k en–de and 82% on Tatoeba eng–ben; the best-link score with both directions' tables
catches 97%, 99.6% and 96%. The sum over all source words rewards long sentences full of
frequent words, whatever their partner; the best link does not, and ``t(e|f)`` rescues a rare
word whose frequent partner spreads ``t(·|e)`` thin. The length term adds a little (0-4 points)
and is kept small. (On the OpenNMT WMT sample the figure is about 61%: several percent of its
*real* pairs are misaligned or in a third language and fill the 3% of real pairs rejected.)
Both directions count alike (``worse_weight`` 0.5). Up to this version the worse direction
decided alone (ω = 1, models saved before load so): a target that is the first quarter of the
translation has every word explained by the source but leaves three quarters of the source
unexplained. But the two directions' mean tells two whole sentences from a translation better,
and a cut side is what the length-ratio rule catches (a quarter: 0.99 of them either way).
Measured in ``clean`` on 24 corpus-levels (``benchmarks/quality_sweep.py``, with the
calibration on whole-sentence negatives, see :mod:`spr_data.qa.align_stage`): ω = 1 / 0.75 /
0.5 lost 1.62 / 1.51 / 1.52% of the real pairs under junk, 0.61 / 0.58 / 0.56% with none, and
caught 0.816 / 0.817 / 0.832 of the re-paired pairs, 0.871 / 0.875 / 0.883 of the misaligned
ones; a target cut to its first half 0.60 / 0.56 / 0.54 (a cut to a quarter 0.99 each).
A pair with an empty side (after tokenization) scores ``-inf``: there is nothing to align, and
any finite threshold rejects it.

Training is over-relaxed EM (``relaxation`` η = 2: each step moves ``t_em^η / t_before^(η-1)``,
renormalized): IBM-1's EM converges slowly, and on the quality corpora (6 corpora x 0/10/25/50%
junk) 3 relaxed rounds decide as 5 plain ones did (real pairs lost 2.39 vs 2.36%, re-paired
recall 0.795 vs 0.786), where 3 plain rounds lose 2.95%: EM is most of the training cost.

The two directions train *by agreement* (``agreement``; Liang, Taskar and Klein 2006): after
the first round, each co-occurrence's expected count, in both directions, is the product of its
two posteriors (how much of the target word the source word explains, and of the source word
the target word), not each direction's own. A link both models believe keeps its mass; a link
one direction makes only because the word had nothing better (a rare word of a junk pair taking
a whole sentence, IBM-1's "garbage collector") loses it, so two sentences that are not each
other's translation score lower and real pairs a little higher. Measured offline at a fixed
loss of real pairs (2% of those reaching the stage, the labels choosing the threshold; 6
corpora x 10/25/50% junk, 8,000-row mixes): re-paired, misaligned and shifted junk caught
0.666 -> 0.736 (0.535 -> 0.642 at 1%), better in all 18 corpus-levels (with other mixes,
seed 7: 0.655 -> 0.742, 15 of 18 better); 30,000-row mixes 0.958 -> 0.961. The cost: a target
that is part of the translation looks more like one (cut to its first half, 0.58 -> 0.31
below the real pairs' 2% quantile on Multi30k; in ``clean`` 0.54 -> 0.52). What it changed in
``clean``: docs/quality.md, *Quality on real pairs*.

Memory and time are bounded: at most ``max_train_pairs`` pairs (a seeded subsample), each side
cut to ``max_train_tokens`` tokens, vocabularies capped at ``max_vocab`` words per side (the
rest is one UNK id), at most ``max_table_entries`` word pairs in the table (the most frequent
co-occurrences), work in chunks of ``chunk_cooc`` co-occurrences. All of it is vectorized
numpy over flattened (pair, e, f) co-occurrences; float sums run in a fixed order, so the same
corpus, options and seed give bit-identical models and scores.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import itertools
import json
import math
import shutil
import statistics
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from spr_data.arrays import joined, unique
from spr_data.errors import InputError, SprDataError
from spr_data.fsio import atomic_write_bytes
from spr_data.heap import release_heap

if TYPE_CHECKING:  # imported where used: a worker that never tokenizes (the score step's)
    import polars as pl  # imports spr_data.pipeline.clean in 0.22 s without it, 0.30 s with

__all__ = [
    "EMPTY_SCORE",
    "FIRST_WORD_ID",
    "FORMAT_VERSION",
    "KNOWN_COUNT",
    "NEGATIVE_KINDS",
    "NULL_ID",
    "SCORE_EDGES",
    "SMALLEST_SAMPLE",
    "TOKEN_PATTERN",
    "UNK_ID",
    "AlignerOptions",
    "AlignmentTokens",
    "Calibration",
    "LexicalAligner",
    "Negatives",
    "PairScores",
    "PartialFit",
    "TaskMap",
    "Vocabulary",
    "alignment_tokens",
    "calibrate",
    "final_punctuation",
    "merged_counts",
    "p_translation",
    "punct_weight",
    "row_hash",
    "shifted_from_cross",
    "shifted_runs",
    "size_from_counts",
    "synthetic_negatives",
    "training_rows",
    "training_size",
    "word_counts",
]

I64 = NDArray[np.int64]
U32 = NDArray[np.uint32]
I32 = NDArray[np.int32]
F32 = NDArray[np.float32]
F64 = NDArray[np.float64]

#: Token ids: 0 is the NULL word (source side of each direction), 1 stands for every word
#: outside the vocabulary, real words start at 2.
NULL_ID = 0
UNK_ID = 1
FIRST_WORD_ID = 2
#: The score of a pair with an empty side.
EMPTY_SCORE = float("-inf")
#: Version of the saved model layout; :meth:`LexicalAligner.load` refuses other versions.
FORMAT_VERSION = 1

# Scripts written without spaces between words: each character is one unit …
_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
# … but in these a letter (or a vowel or tone mark) means nothing alone: up to 3 code points,
# about a syllable, make a unit. On 548 Tatoeba eng-tha pairs the align stage took 110 real
# pairs a letter at a time, 39 two at a time, 33 three, 56 four. The units are cut from where
# a run starts, not at syllable bounds (a word's units differ with what comes before it in
# its run): a crude split, which a Thai word segmenter would beat. Their digits are digits.
_SYLLABIC = r"[\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]--\p{N}"
#: One alignment token (Rust regex syntax): up to 3 characters of a syllabic unspaced script,
#: one character of another unspaced script, a run of digits, or a run of other letters and
#: marks. Punctuation and symbols are dropped.
TOKEN_PATTERN = (rf"[{_SYLLABIC}]{{1,3}}|[[{_UNSPACED}]--\p{{N}}]|\p{{N}}+"
                 rf"|[[\p{{L}}\p{{M}}]--[{_UNSPACED}]]+")
# HTML/Moses escapes (&apos; &quot; &#39;) are markup, not words, when normalize did not run.
_ENTITY = r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]{1,31});"

# 64-bit Fibonacci hashing constant (2^64 / golden ratio, odd).
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
# Hash load factors: lower is faster (fewer second probes) and larger. Training's table can
# hold millions of pairs, the pruned scoring table is smaller and read far more often.
_TRAIN_LOAD = 0.5
#: co-occurrences of one EM part at most (a task per iteration): its table positions, 4 bytes
#: each, are found once and kept on disk; it holds about 100 bytes a co-occurrence of one block
#: of ``chunk_cooc`` in memory, plus the table and its counts. A part costs more than its
#: co-occurrences: it reads the table and writes a count for every word pair, which the main
#: process reads back. Measured (training on 63k and 79k pairs of bench_clean's corpus, 39M
#: and 47M co-occurrences, 2 workers, medians of 3-4 alternations): parts of 8M (5 and 6 of
#: them) 6.75 and 7.33 s, of 20M (2 and 4) 5.64 and 6.32 s, of 40M (2 and 2) 5.70 and 5.97 s;
#: 8M in multiples of 4 (8 parts) 7.12 and 8.35 s
_PART_COOC = 32_000_000
#: co-occurrences an EM task (and scoring) works on at a time (about 100 bytes each in
#: temporaries)
_EM_BLOCK_COOC = 262_144
_SCORE_LOAD = 0.3
# Keys inserted into a hash at a time: bounds the temporaries of building it.
_INSERT_CHUNK = 1 << 20
# Rows tokenized at a time: bounds the memory of polars' list columns.
_TEXT_ROWS = 16_384


# ---------------------------------------------------------------------------------------------
# Tokens and vocabularies


@dataclass(frozen=True)
class AlignmentTokens:
    """Tokens of a column of texts, flattened: row ``i`` is ``tokens[offsets[i]:offsets[i+1]]``."""

    offsets: I64
    tokens: pa.Array

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def lengths(self) -> I64:
        """Tokens per row."""
        return np.diff(self.offsets)


def _as_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)
            or pa.types.is_string_view(texts.type)):
        raise InputError(f"alignment expects a string array, found {texts.type}; pass the "
                         "src/tgt text columns")
    return texts


def alignment_tokens(texts: pa.Array | pa.ChunkedArray, *,
                     max_tokens: int | None = None, stem: int = 0) -> AlignmentTokens:
    """Lowercased word tokens for alignment, by script rather than by language.

    Space-delimited scripts split on anything that is not a letter, mark or digit; digit runs
    are tokens of their own (numbers match across languages); Han and kana give one token per
    character, Thai, Lao, Khmer and Myanmar one per 3 code points of a run (about a syllable),
    so mixed text (Latin names in Chinese) needs no language hint. HTML escapes are dropped.
    Nulls count as empty. ``max_tokens`` keeps the first tokens of each row; ``stem`` cuts
    each token to its first ``stem`` code points (0: whole words), so that a word's inflected
    forms share their links.
    """
    import polars as pl
    arr = _as_array(texts)
    series = pl.Series(values=arr).fill_null("")
    lists = (series.str.replace_all(_ENTITY, " ").str.to_lowercase()
             .str.extract_all(TOKEN_PATTERN))
    # the flat tokens and their offsets straight from Arrow's list layout: polars' explode and
    # list.head copied every token (a third of the tokenizing time on two-sentence pairs)
    listed = lists.to_arrow()
    if isinstance(listed, pa.ChunkedArray):
        listed = listed.combine_chunks()
    if listed.null_count:  # a null row holds no token, whatever its offsets say
        listed = pc.if_else(pc.is_null(listed), pa.scalar([], listed.type), listed)
    bounds = np.asarray(listed.offsets.to_numpy(), np.int64)
    flat = listed.values.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
    offsets = bounds - bounds[0]
    lengths = np.diff(offsets)
    if max_tokens is not None and lengths.size and int(lengths.max()) > max_tokens:
        # each row's first max_tokens tokens
        position = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)
        flat = flat.filter(pa.array(position < max_tokens))
        lengths = np.minimum(lengths, max_tokens)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
    if not pa.types.is_large_string(flat.type):
        flat = flat.cast(pa.large_string())
    if stem:
        flat = stemmed(flat, stem)
    if offsets[-1] != len(flat):  # pragma: no cover - would be a polars behaviour change
        raise RuntimeError(f"alignment tokens: {offsets[-1]} token counts for {len(flat)} tokens")
    return AlignmentTokens(offsets, flat)


#: final punctuation kinds (:func:`final_punctuation`): a question, an exclamation
_QUESTION = "?？؟⸮፧"
_EXCLAMATION = "!！"
#: closing quotes and brackets a sentence may end with after its punctuation
_CLOSING = " \t\"'”’»›)]}）」』】〉》"


def final_punctuation(texts: pa.Array | pa.ChunkedArray) -> NDArray[np.int8]:
    """Per text, how it ends: 1 a question mark, 2 an exclamation mark, 0 anything else
    (closing quotes and brackets looked through). Why: a question translated is a question;
    two sides that end differently are evidence against a pair, weighed by what the corpus'
    own negatives show (:func:`punct_weight`): 0 where a language pair does not keep it."""
    import polars as pl
    last = (pl.Series(values=_as_array(texts)).fill_null("")
            .str.strip_chars_end(_CLOSING).str.slice(-1))
    kinds: NDArray[np.int8] = (last.is_in(list(_QUESTION)).to_numpy().astype(np.int8)
                               + 2 * last.is_in(list(_EXCLAMATION)).to_numpy().astype(np.int8))
    return kinds


@dataclass(frozen=True)
class Vocabulary:
    """Words of one side, most frequent first; word ``words[i]`` has id ``FIRST_WORD_ID + i``."""

    words: pa.Array

    @classmethod
    def build(cls, counts: pl.DataFrame, *, max_size: int) -> Vocabulary:
        """The ``max_size`` most frequent tokens of ``counts`` (columns ``token``, ``count``).

        Ties are broken by the token's code points, so the ids do not depend on input order.
        """
        top = counts.sort(["count", "token"], descending=[True, False]).head(max_size)
        words = top["token"].to_arrow()
        return cls(words.cast(pa.large_string()))

    @property
    def size(self) -> int:
        """Number of ids, NULL and UNK included."""
        return len(self.words) + FIRST_WORD_ID

    def encode(self, tokens: pa.Array) -> I32:
        """Token ids; words outside the vocabulary get ``UNK_ID``."""
        index = pc.index_in(tokens, value_set=self.words)
        ids = np.asarray(index.fill_null(UNK_ID - FIRST_WORD_ID).to_numpy(), dtype=np.int32)
        out: I32 = ids + np.int32(FIRST_WORD_ID)
        return out

    def to_buffers(self) -> tuple[NDArray[np.uint8], I64]:
        """UTF-8 bytes and offsets: a pickle-free form for ``np.savez``."""
        words = pa.array(self.words.to_pylist(), type=pa.large_string())
        offsets = np.frombuffer(words.buffers()[1], dtype=np.int64, count=len(words) + 1)
        data_buf = words.buffers()[2]
        data = (np.frombuffer(data_buf, dtype=np.uint8, count=int(offsets[-1]))
                if data_buf is not None else np.zeros(0, np.uint8))
        return data.copy(), offsets.copy()

    @classmethod
    def from_buffers(cls, data: NDArray[np.uint8], offsets: I64) -> Vocabulary:
        """Inverse of :meth:`to_buffers`; raises :class:`InputError` on malformed buffers."""
        try:
            words = pa.Array.from_buffers(
                pa.large_string(), int(offsets.size - 1),
                [None, pa.py_buffer(np.ascontiguousarray(offsets, np.int64)),
                 pa.py_buffer(np.ascontiguousarray(data, np.uint8))])
            words.validate(full=True)
        except (pa.ArrowException, ValueError) as exc:
            raise InputError(f"alignment model vocabulary is malformed ({exc}); retrain the "
                             "model") from exc
        return cls(words)


def _merge_counts(frames: list[pl.DataFrame]) -> pl.DataFrame:
    import polars as pl
    return pl.concat(frames).group_by("token").agg(pl.col("count").sum())


@dataclass(frozen=True)
class _Ragged:
    """Token ids of one side: row ``i`` is ``ids[offsets[i]:offsets[i+1]]``."""

    offsets: I64
    ids: I32

    @property
    def lengths(self) -> I64:
        return np.diff(self.offsets)

    def take(self, rows: I64) -> _Ragged:
        lengths = self.lengths[rows]
        offsets = np.zeros(rows.size + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = self.offsets[rows]
        index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(starts - offsets[:-1],
                                                                         lengths)
        return _Ragged(offsets, self.ids[index])


#: Hangul syllable blocks (U+AC00-U+D7A3): each is 2 letters (jamo), 3 with a final
#: consonant, which the block's place in the range tells: every 28th has none
_HANGUL_FIRST, _HANGUL_LAST, _HANGUL_FINALS = 0xAC00, 0xD7A3, 28


def stemmed(words: pa.Array, stem: int, *, hangul_letters: bool = True) -> pa.Array:
    """Each word cut to its first ``stem`` letters: code points, except that a Hangul
    syllable block counts as its 2 or 3 letters and is kept or cut whole (one at least);
    without ``hangul_letters``, as one (how models saved before counted it).

    Why: a Korean word is a few syllable blocks with its particles attached (기술의, 사진을),
    so 6 code points cut nothing and each case form learnt its links alone; 6 letters keep
    the stem (기술, 사진). Measured on LASER's Tatoeba eng-kor (970 distinct pairs), real
    pairs lost with no junk 1.8 -> 1.2%; with re-paired, misaligned and shifted junk at
    10/25/50% of the rows, re-paired caught 0.48/0.26/0.31 -> 0.55/0.38/0.35 (docs/quality.md,
    *Korean stems*)."""
    out = pc.utf8_slice_codeunits(words, 0, stem)  # code points, not bytes
    if not hangul_letters:
        return out
    hangul = np.flatnonzero(np.asarray(pc.match_substring_regex(
        words, "[\uac00-\ud7a3]").fill_null(False).to_numpy(zero_copy_only=False)))
    if not hangul.size:
        return out
    picked = words.take(pa.array(hangul)).fill_null("").to_pylist()
    points = np.frombuffer("".join(picked).encode("utf-32-le"), np.uint32).astype(np.int64)
    lengths = np.fromiter(map(len, picked), np.int64, count=len(picked))
    block = (points >= _HANGUL_FIRST) & (points <= _HANGUL_LAST)
    final = (points - _HANGUL_FIRST) % _HANGUL_FINALS != 0
    letters = np.where(block, np.where(final, 3, 2), 1)
    starts = np.cumsum(lengths) - lengths
    total = np.cumsum(letters)
    # each code point's letters from its word's start, through itself
    within = total - np.repeat(total[starts] - letters[starts], lengths)
    # code points kept: those whose letters so far fit, and the first whatever its size
    keep = np.maximum(np.add.reduceat((within <= stem).astype(np.int64), starts), 1)
    cut = [word[:k] for word, k in zip(picked, keep.tolist(), strict=True)]
    index = np.zeros(len(words), np.int64)
    index[hangul] = np.arange(hangul.size)
    mask = np.zeros(len(words), bool)
    mask[hangul] = True
    return pc.if_else(pa.array(mask), pa.array(cut, out.type).take(pa.array(index)), out)


def _word_codes(texts: pa.Array, *, max_tokens: int, stem: int,
                hangul_letters: bool = True) -> tuple[pa.Array, I32, I64]:
    """:func:`alignment_tokens` as ``(words, codes, lengths)``: token ``j`` is
    ``words[codes[j]]``, row ``i`` holds ``lengths[i]`` tokens. ``words`` are the distinct
    tokens, each then cut to ``stem`` code points (two may become equal).

    Why: stemming the distinct words instead of every token, and looking only them up in a
    vocabulary, gives the same ids for a fraction of the work (131k rows of two sentences,
    3.1M tokens: stemming and encoding them 170 ms, the distinct ones 62 ms with the
    encoding of the tokens into codes)."""
    toks = alignment_tokens(texts, max_tokens=max_tokens)
    encoded = toks.tokens.dictionary_encode()
    words = encoded.dictionary
    if stem:
        words = stemmed(words, stem, hangul_letters=hangul_letters)
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int32)
    return words, codes, toks.lengths


def _word_frame(words: pa.Array, codes: I32) -> pl.DataFrame:
    """Each of ``words`` with how often ``codes`` name it (columns ``token``, ``count``). A
    stem may stand for several words here: :func:`_merge_counts` adds them up."""
    import polars as pl
    return pl.DataFrame({"token": pl.Series(values=words),
                         "count": np.bincount(codes, minlength=len(words)).astype(np.int64)})


def _encode(texts: pa.Array, vocab: Vocabulary, max_tokens: int, stem: int,
            hangul_letters: bool = True) -> _Ragged:
    parts_ids: list[I32] = []
    parts_len: list[I64] = []
    for start in range(0, len(texts), _TEXT_ROWS):
        words, codes, lengths = _word_codes(texts.slice(start, _TEXT_ROWS),
                                            max_tokens=max_tokens, stem=stem,
                                            hangul_letters=hangul_letters)
        parts_ids.append(vocab.encode(words)[codes])
        parts_len.append(lengths)
    return _ragged(parts_len, parts_ids)


# ---------------------------------------------------------------------------------------------
# Co-occurrences and the word-pair table


@dataclass(frozen=True)
class _Block:
    """The co-occurrences of a run of pairs: every (source token, target token) of each pair.

    Source-major: the ``m_of_e[i]`` co-occurrences of source token ``i`` are contiguous from
    ``runs[i]``; ``gf`` is the target token of each, ``keys`` its word pair ``e * V_tgt + f``.
    Token indexes and pair numbers are local to the block.
    """

    n_pairs: int
    src_ids: I32
    tgt_ids: I32
    src_pair: I64
    tgt_pair: I64
    m_of_e: I64
    runs: I64
    gf: I64
    keys: U32


def _block(src: _Ragged, tgt: _Ragged, lo: int, hi: int, tgt_size: int,
           with_keys: bool = True) -> _Block:
    so = src.offsets[lo:hi + 1]
    to = tgt.offsets[lo:hi + 1]
    src_ids = src.ids[so[0]:so[-1]]
    tgt_ids = tgt.ids[to[0]:to[-1]]
    pairs = np.arange(hi - lo, dtype=np.int64)
    src_pair = np.repeat(pairs, np.diff(so))
    tgt_pair = np.repeat(pairs, np.diff(to))
    m_of_e = np.diff(to)[src_pair]
    runs = np.cumsum(m_of_e) - m_of_e
    n = int(runs[-1] + m_of_e[-1]) if runs.size else 0
    gf = np.arange(n, dtype=np.int64) + np.repeat((to[:-1] - to[0])[src_pair] - runs, m_of_e)
    # ids are >= 0, so their int32 bits read as uint32 are the same numbers
    keys = (np.repeat(src_ids.view(np.uint32) * np.uint32(tgt_size), m_of_e)
            + tgt_ids.view(np.uint32)[gf]) if with_keys else np.zeros(0, np.uint32)
    return _Block(hi - lo, src_ids, tgt_ids, src_pair, tgt_pair, m_of_e, runs, gf, keys)


def _blocks(src: _Ragged, tgt: _Ragged, tgt_size: int, budget: int,
            with_keys: bool = True) -> Iterator[_Block]:
    """Consecutive blocks of pairs with at most ``budget`` co-occurrences (one pair at least);
    without ``with_keys``, their word pairs are not made (EM reads their table positions)."""
    cost = np.cumsum(src.lengths * tgt.lengths)
    lo, done = 0, 0
    while lo < cost.size:
        hi = max(int(np.searchsorted(cost, done + budget, side="right")), lo + 1)
        yield _block(src, tgt, lo, hi, tgt_size, with_keys)
        done = int(cost[hi - 1])
        lo = hi


_EMPTY_KEY = np.uint32(0xFFFFFFFF)  # never a key: vocabularies <= 65,002 ids keep keys below


class _PackedHash:
    """A 32-bit key → 32-bit payload map: open addressing, probed in vectorized numpy rounds.

    Each slot is one uint64 (payload << 32 | key), so a probe is a single random read; at the
    load factors used most lookups need one probe. Probe runs never wrap around: the slot
    array grows a tail instead and always ends in empty slots. Why not ``np.searchsorted``
    over the sorted keys: a binary search over millions of keys misses the cache at every
    step (about 1 µs a lookup measured here, against about 20 ns). Keys not in the map get
    ``absent``.
    """

    def __init__(self, keys: U32, payload: U32, absent: int, load: float) -> None:
        self.size = max(16, math.ceil(keys.size / load) + 1)
        self.empty = (np.uint64(absent) << np.uint64(32)) | np.uint64(_EMPTY_KEY)
        self.slots = np.full(self.size + 16, self.empty, dtype=np.uint64)
        for lo in range(0, keys.size, _INSERT_CHUNK):
            self._insert(keys[lo:lo + _INSERT_CHUNK], payload[lo:lo + _INSERT_CHUNK])

    @classmethod
    def from_slots(cls, slots: NDArray[np.uint64], size: int, absent: int) -> _PackedHash:
        """A map rebuilt from another one's ``slots`` and ``size`` (as a task reads it)."""
        self = cls.__new__(cls)
        self.size = size
        self.empty = (np.uint64(absent) << np.uint64(32)) | np.uint64(_EMPTY_KEY)
        self.slots = slots
        return self

    def _insert(self, keys: U32, payload: U32) -> None:
        """Linear probing in rounds: every key still pending is written to its probe slot
        where that slot is empty, and of keys that contend for one slot the one the scatter
        wrote last holds it (read back); the others probe on. Which key wins moves keys
        about, never what a lookup finds. Why not pick the winner by sorting the slots (as
        this did): the sort was most of the time (3.5M keys: 0.49-0.59 s, now 0.20-0.31 s)."""
        packed = (payload.astype(np.uint64) << np.uint64(32)) | keys.astype(np.uint64)
        home = self._home(keys)
        pending = np.arange(keys.size, dtype=np.int64)
        while pending.size:
            want = home[pending]
            free = np.flatnonzero(self.slots[want].astype(np.uint32) == _EMPTY_KEY)
            slot = want[free]
            self.slots[slot] = packed[pending[free]]
            won = free[self.slots[slot] == packed[pending[free]]]
            keep = np.ones(pending.size, dtype=bool)
            keep[won] = False
            pending = pending[keep]
            home[pending] += 1
            if pending.size and int(home[pending].max()) >= self.slots.size - 2:
                tail = np.full(16, self.empty, dtype=np.uint64)
                self.slots = np.concatenate([self.slots, tail])

    def _home(self, keys: U32) -> I64:
        mixed = (keys.astype(np.uint64) * _HASH_MULT) >> np.uint64(32)
        home: I64 = ((mixed * np.uint64(self.size)) >> np.uint64(32)).astype(np.int64)
        return home

    def find(self, query: U32) -> U32:
        """The payload of each query key (``absent`` where the key is not in the map)."""
        slot = self._home(query)
        got = self.slots[slot]
        key = got.astype(np.uint32)
        todo = np.flatnonzero((key != query) & (key != _EMPTY_KEY))
        cur = slot[todo]
        want = query[todo]
        while todo.size:
            cur += 1
            more = self.slots[cur]
            got[todo] = more
            key = more.astype(np.uint32)
            go = (key != want) & (key != _EMPTY_KEY)
            todo, cur, want = todo[go], cur[go], want[go]
        payload: U32 = (got >> np.uint64(32)).astype(np.uint32)
        return payload


#: the most frequent words of each side whose word pairs :class:`_LinkTable` keeps in a
#: dense matrix: 1,024² float32, 4 MB
_DENSE_WORDS = 1023


class _LinkTable:
    """Link strengths by word pair: a dense matrix for the pairs of the ``_DENSE_WORDS``
    most frequent words of each side (ids are most frequent first), the hash for the rest.

    Why: a lookup in the hash is a random read of a table of megabytes; most co-occurrences
    are of frequent words, and a small matrix is read from the cache. Measured on
    ``benchmarks/bench_clean.py``'s corpus (its 1M-pair model, 65,536 pairs, 37M
    co-occurrences): 82% of them in the matrix, looking all of them up 579 → 468 ms, the
    same float32 bits."""

    def __init__(self, table: _PackedHash, src_size: int, tgt_size: int) -> None:
        self.table = table
        self.tgt_size = tgt_size
        self.rows = min(_DENSE_WORDS, src_size)  # ids at or past these are in the last row
        self.cols = min(_DENSE_WORDS, tgt_size)  # or column, whose entries are NaN
        e = np.repeat(np.arange(self.rows + 1, dtype=np.uint32), self.cols + 1)
        f = np.tile(np.arange(self.cols + 1, dtype=np.uint32), self.rows + 1)
        dense = table.find(e * np.uint32(tgt_size) + f).view(np.float32).copy()
        dense[(e == self.rows) | (f == self.cols)] = np.nan
        self.dense: F32 = dense

    def find(self, block: _Block, src_tok: NDArray[np.uint32]) -> F32:
        """The link strength of each co-occurrence of ``block`` (``src_tok``: the block's
        source token of each); 0 where the model has none."""
        row = (np.minimum(block.src_ids, self.rows).astype(np.uint32)
               * np.uint32(self.cols + 1))
        col = np.minimum(block.tgt_ids, self.cols).astype(np.uint32)
        link: F32 = self.dense[np.repeat(row, block.m_of_e) + col[block.gf]]
        # a link is never NaN, so NaN marks the co-occurrences outside the matrix
        rest = np.flatnonzero(np.isnan(link))
        if rest.size:
            keys = (block.src_ids.view(np.uint32)[src_tok[rest]] * np.uint32(self.tgt_size)
                    + block.tgt_ids.view(np.uint32)[block.gf[rest]])
            link[rest] = self.table.find(keys).view(np.float32)
        return link


#: the weight of a word outside the vocabulary (not 0: a side of such words alone still
#: scores its floor)
_UNK_WEIGHT = 1e-3
#: a token may always be the best link of this many tokens of the other side
_MIN_FERTILITY = 2
_LOW32 = np.uint64(0xFFFFFFFF)


def _left_out(block: _Block, link: F32, src_tok: NDArray[np.uint32], mine: NDArray[np.bool_],
              counts: tuple[I64, I64], identity: I64,
              train_tokens: int) -> tuple[F32, tuple[F64, F64]]:
    """The links of the pairs ``mine`` marks (pairs the model was trained on) without what each
    pair taught the model itself, and each token's weight factor: the share of its word's
    count the other pairs hold (1 for the other pairs' tokens).

    Why: EM learns a word seen once from its own pair alone, junk included, so a pair of rare
    words links itself whatever it is; a negative made of corpus sentences was never trained
    on and does not (measured on NTREX, 1,937 long news pairs, with 25% junk: re-paired junk
    caught 0.51 in German). How, from the link strengths alone: each occurrence of a word seen
    ``c`` times holds ``1/c`` of its mass, spread over its pair's other side in proportion to
    the links; the ``k`` occurrences of a word in the pair gave the word pair ``S`` (their
    shares summed over the other side's occurrences of the partner), so ``a' = (a·c - S) /
    (c - k)`` in each direction (``c`` and ``k`` the source word's for one, the target word's
    for the other; 0 where ``k`` is ``c``), kept within [0, 1], and the two directions are
    averaged as the links are; each token weighs ``(c - k) / c``. Only the first
    ``train_tokens`` tokens of each side were trained on: the rest keep their links and
    weights. An approximation of EM's leave-one-out (the posteriors of the last round read
    from the links). A word both sides hold (:func:`_with_identity_links`) keeps its identity
    link and its weight: that evidence is not learnt."""
    own_src = mine[block.src_pair] & (_positions(block.src_pair, block.n_pairs) < train_tokens)
    own_tgt = mine[block.tgt_pair] & (_positions(block.tgt_pair, block.n_pairs) < train_tokens)
    at = np.flatnonzero(own_src[src_tok] & own_tgt[block.gf])
    i, j = src_tok[at].astype(np.int64), block.gf[at]
    value = link.astype(np.float64)
    v = value[at]
    # each own token's word within its pair, and how often the pair holds it
    word_e, k_e = _own_counts(block.src_pair, block.src_ids, own_src)
    word_f, k_f = _own_counts(block.tgt_pair, block.tgt_ids, own_tgt)
    c_src, c_tgt = (np.maximum(c[ids], 1).astype(np.float64)  # training counts, UNK's too
                    for c, ids in ((counts[0], block.src_ids), (counts[1], block.tgt_ids)))
    both = np.zeros(at.size)
    for token, word, partner, c, k in ((i, word_e[i], block.tgt_ids[j], c_src, k_e),
                                       (j, word_f[j], block.src_ids[i], c_tgt, k_f)):
        total = np.bincount(token, v, minlength=c.size)[token]
        share = np.divide(v, total, out=np.zeros_like(v), where=total > 0)
        # what the pair gave each of its word pairs: the shares of all their co-occurrences
        _, word_pair = np.unique(word * np.int64(1 << 20) + partner, return_inverse=True)
        given = np.bincount(word_pair, share)[word_pair]
        ct, kt = c[token], k[token].astype(np.float64)
        rest = np.divide(v * ct - given, ct - kt, out=np.zeros_like(v), where=ct > kt)
        both += np.clip(rest, 0.0, 1.0)
    out = value.copy()
    out[at] = both / 2
    same = identity[block.src_ids][i] == block.tgt_ids[j]
    out[at[same]] = np.maximum(out[at[same]], IDENTITY_LINK)
    weight_src = np.where(own_src, (c_src - k_e) / c_src, 1.0)
    weight_tgt = np.where(own_tgt, (c_tgt - k_f) / c_tgt, 1.0)
    weight_src[i[same]] = 1.0
    weight_tgt[j[same]] = 1.0
    return (out.astype(np.float32),
            (np.maximum(weight_src, _UNK_WEIGHT), np.maximum(weight_tgt, _UNK_WEIGHT)))


def _as_fresh(block: _Block, link: F32, src_tok: NDArray[np.uint32], fresh: NDArray[np.int8],
              counts: tuple[I64, I64], train_tokens: int) -> F32:
    """The links of the pairs ``fresh`` marks as if a side of theirs occurred nowhere else in
    training (bit 1: the source, bit 2: the target; each also trained on once in its own row).

    Why: a negative made of two corpus rows shares each side with a row the model is trained
    on, while a corpus' junk pair mostly holds sides seen nowhere else. EM splits a word's mass
    over every pair it occurs in, so a word the negative shares with its row links to the
    negative's other side with about ``(c - k) / c`` of the strength it would have alone
    (``c`` its training count, ``k`` its occurrences in the shared side): a rare word's half.
    Undone per direction (``a = (t(f|e) + t(e|f)) / 2``: each direction's share scaled by its
    own word's ``c / (c - k)``, the mean of the two applied to ``a``), capped at 1."""
    fresh_src = (fresh[block.src_pair] & 1).astype(bool) & (
        _positions(block.src_pair, block.n_pairs) < train_tokens)
    fresh_tgt = (fresh[block.tgt_pair] & 2).astype(bool) & (
        _positions(block.tgt_pair, block.n_pairs) < train_tokens)
    if not (fresh_src.any() or fresh_tgt.any()):
        return link
    factors = []
    for side, own, ids, c in ((block.src_pair, fresh_src, block.src_ids, counts[0]),
                              (block.tgt_pair, fresh_tgt, block.tgt_ids, counts[1])):
        k = _own_counts(side, ids, own)[1].astype(np.float64)
        cnt = np.maximum(c[ids], 1).astype(np.float64)
        factors.append(np.where(own & (cnt > k), cnt / np.maximum(cnt - k, 1.0), 1.0))
    scale = (factors[0][src_tok] + factors[1][block.gf]) / 2
    out: F32 = np.minimum(link.astype(np.float64) * scale, 1.0).astype(np.float32)
    return out


def _positions(pair: I64, n_pairs: int) -> I64:
    """Each token's position in its side of its pair (tokens of a pair are contiguous)."""
    first = np.zeros(n_pairs, np.int64)
    np.cumsum(np.bincount(pair, minlength=n_pairs)[:-1], out=first[1:])
    return np.arange(pair.size, dtype=np.int64) - first[pair]


def _groups(pair: I64, ids: I32, own: NDArray[np.bool_]) -> I64:
    """A number for each (pair, word) of the ``own`` tokens, the same for a word's tokens in
    one pair (the other tokens: numbers of their own, never shared)."""
    key = pair.astype(np.int64) * np.int64(1 << 20) + ids
    key[~own] = -1 - np.arange(int(np.count_nonzero(~own)), dtype=np.int64)
    _, inverse = np.unique(key, return_inverse=True)
    return inverse.astype(np.int64)


def _own_counts(pair: I64, ids: I32, own: NDArray[np.bool_]) -> tuple[I64, I64]:
    """Per token: its :func:`_groups` number, and how often its word occurs among the
    ``own`` tokens of its pair."""
    word = _groups(pair, ids, own)
    return word, np.bincount(word[own], minlength=word.size)[word]


def _capped_links(block: _Block, link: F32, src_tok: NDArray[np.uint32], l_len: I64,
                  m_len: I64, fertility: float) -> tuple[F32, F32]:
    """Each target token's and each source token's best link, where a token may be the best
    of at most ``max(2, ⌈fertility · m/l⌉)`` tokens of the other side (``⌈fertility · l/m⌉``
    the other way): the tokens beyond, weakest first, take their second-best link.

    Why, and what it was measured to do: the module docstring.

    Best and argmax come from one pass over packed ``(link bits, ~partner)`` words: a float32
    that is not negative orders as its bits do, and the lowest partner wins a tie.
    """
    n_src, n_tgt = block.src_ids.size, block.tgt_ids.size
    # each target token: its best source token; each source token (its co-occurrences are one
    # run): its best target token
    packed = np.zeros(n_tgt, np.uint64)
    np.maximum.at(packed, block.gf, _packed(link, src_tok))
    best_f, arg_f = _unpacked(packed)
    best_e, arg_e = _unpacked(np.maximum.reduceat(_packed(link, block.gf), block.runs))
    cap_f = np.maximum(_MIN_FERTILITY, np.ceil(fertility * m_len / l_len)).astype(np.int64)
    cap_e = np.maximum(_MIN_FERTILITY, np.ceil(fertility * l_len / m_len)).astype(np.int64)
    # the co-occurrence of (source token i, target token j) is runs[i] + j - first[pair]
    first = np.zeros(block.n_pairs, np.int64)
    np.cumsum(m_len[:-1], out=first[1:])
    # the second best of the tokens beyond their partner's cap, read from their own
    # co-occurrences only (a max is the same bits in any order)
    out_f = best_f.copy()
    over = _beyond(arg_f, best_f, cap_f[block.tgt_pair], n_src)
    if over.size:  # the best link of another source token of the pair
        pair = block.tgt_pair[over]
        src_first = np.zeros(block.n_pairs, np.int64)
        np.cumsum(l_len[:-1], out=src_first[1:])
        count = l_len[pair]
        seg = np.cumsum(count) - count
        tok = np.arange(int(count.sum())) + np.repeat(src_first[pair] - seg, count)
        values = link[block.runs[tok] + np.repeat(over - first[pair], count)]
        values[tok == np.repeat(arg_f[over], count)] = 0
        out_f[over] = np.maximum(np.maximum.reduceat(values, seg), np.float32(0))
    out_e = best_e.copy()
    over = _beyond(arg_e, best_e, cap_e[block.src_pair], n_tgt)
    if over.size:  # the best link of another target token: the rest of the token's run
        count = block.m_of_e[over]
        seg = np.cumsum(count) - count
        values = link[np.arange(int(count.sum())) + np.repeat(block.runs[over] - seg, count)]
        values[seg + arg_e[over] - first[block.src_pair[over]]] = 0
        out_e[over] = np.maximum.reduceat(values, seg)
    return out_f, out_e


_HIGH, _LOW = (1, 0) if sys.byteorder == "little" else (0, 1)


def _packed(link: F32, partner: NDArray[Any]) -> NDArray[np.uint64]:
    """``link``'s bits in the high 32 bits, ``~partner`` in the low ones: the maximum is the
    strongest link, and of equal ones the lowest partner."""
    out = np.empty(link.size, np.uint64)
    words = out.view(np.uint32)
    words[_HIGH::2] = link.view(np.uint32)
    np.invert(partner, out=words[_LOW::2], casting="unsafe")
    return out


def _unpacked(packed: NDArray[np.uint64]) -> tuple[F32, I64]:
    link: F32 = (packed >> np.uint64(32)).astype(np.uint32).view(np.float32)
    partner: I64 = (_LOW32 - (packed & _LOW32)).astype(np.int64)
    return link, partner


def _beyond(partner: I64, strength: F32, cap: I64, n_partners: int) -> I64:
    """The tokens whose best partner is the best of ``cap`` tokens or more that link it more
    strongly (ties: the earlier token first), ascending. Only partners chosen by more than
    ``cap`` tokens are sorted: in a translation, few are."""
    chosen = np.bincount(partner, minlength=n_partners)
    maybe = np.flatnonzero(chosen[partner] > cap)
    if maybe.size == 0:
        return maybe
    key = ((partner[maybe].astype(np.uint64) << np.uint64(32))
           | (_LOW32 - strength[maybe].view(np.uint32).astype(np.uint64)))
    order = np.argsort(key, kind="stable")
    grouped = partner[maybe][order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    rank = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    over: I64 = np.sort(maybe[order[rank >= cap[maybe][order]]])
    return over


def _partitions(mass: F64, budget: int) -> list[tuple[int, int]]:
    """Ranges of source ids with at most ``budget`` co-occurrences each (one id at least)."""
    cum = np.cumsum(mass)
    out: list[tuple[int, int]] = []
    lo, done = 0, 0.0
    while lo < mass.size:
        hi = max(int(np.searchsorted(cum, done + budget, side="right")), lo + 1)
        out.append((lo, hi))
        done = float(cum[hi - 1])
        lo = hi
    return out


def _table_keys(src: _Ragged, tgt: _Ragged, src_size: int, tgt_size: int, *,
                max_entries: int, budget: int) -> U32:
    """Sorted unique word pairs ``e * tgt_size + f`` that co-occur in a pair.

    When there are more than ``max_entries``, only the pairs that co-occur at least ``c``
    times are kept, ``c`` the smallest count that fits. Counting goes by ranges of source ids
    (a frequent word has a range of its own), so memory stays near ``budget`` co-occurrences
    plus the table, whatever the corpus: a dense ``bincount`` where the range is narrow, a
    sort of 32-bit keys where it is wide.
    """
    src_pair = np.repeat(np.arange(src.lengths.size, dtype=np.int64), src.lengths)
    m_of_e = tgt.lengths[src_pair]
    mass = np.bincount(src.ids, weights=m_of_e, minlength=src_size).astype(np.float64)
    # source tokens grouped by id: a range of ids is a slice of ``by_id``
    by_id = np.argsort(src.ids, kind="stable")
    id_start = np.zeros(src_size + 1, np.int64)
    np.cumsum(np.bincount(src.ids, minlength=src_size), out=id_start[1:])
    kept_keys: list[U32] = []
    kept_counts: list[U32] = []
    total, floor = 0, 1
    for lo, hi in _partitions(mass, budget):
        sel = by_id[id_start[lo]:id_start[hi]]
        if sel.size == 0:
            continue
        keys, counts = _count_range(src, tgt, sel, src_pair, m_of_e, lo, hi, tgt_size, budget)
        keep = counts >= floor
        kept_keys.append(keys[keep])
        kept_counts.append(counts[keep])
        total += int(np.count_nonzero(keep))
        if total > max_entries:
            at_least = np.cumsum(np.bincount(np.concatenate(kept_counts))[::-1])[::-1]
            fits = np.flatnonzero(at_least <= max_entries)  # at_least[c]: entries with >= c
            floor = int(fits[0]) if fits.size else int(at_least.size)
            kept_keys = [k[c >= floor] for k, c in zip(kept_keys, kept_counts, strict=True)]
            kept_counts = [c[c >= floor] for c in kept_counts]
            total = sum(k.size for k in kept_keys)
    if not kept_keys:
        return np.zeros(0, np.uint32)
    out: U32 = np.concatenate(kept_keys)
    return out


def _count_range(src: _Ragged, tgt: _Ragged, sel: I64, src_pair: I64, m_of_e: I64, lo: int,
                 hi: int, tgt_size: int, budget: int) -> tuple[U32, U32]:
    """Co-occurrence counts by word pair for the source tokens ``sel`` (ids in ``[lo, hi)``)."""
    cells = (hi - lo) * tgt_size
    dense = cells <= 4 * budget
    acc = np.zeros(cells if dense else 0, np.int64)
    parts: list[tuple[U32, I64]] = []
    reps = m_of_e[sel]
    cum = np.cumsum(reps)
    start, done = 0, 0
    while start < sel.size:
        stop = max(int(np.searchsorted(cum, done + budget, side="right")), start + 1)
        tok, r = sel[start:stop], reps[start:stop]
        runs = np.cumsum(r) - r
        f_pos = (np.arange(int(r.sum()), dtype=np.int64)
                 + np.repeat(tgt.offsets[src_pair[tok]] - runs, r))
        local = (np.repeat((src.ids[tok] - lo).view(np.uint32) * np.uint32(tgt_size), r)
                 + tgt.ids.view(np.uint32)[f_pos])
        if dense:
            acc += np.bincount(local, minlength=cells)
        else:
            u, c = np.unique(local, return_counts=True)
            parts.append((u, c))
        done = int(cum[stop - 1])
        start = stop
    base = np.uint32(lo * tgt_size)
    if dense:
        nz = np.flatnonzero(acc)
        return nz.astype(np.uint32) + base, acc[nz].astype(np.uint32)
    u = np.concatenate([p[0] for p in parts])
    c = np.concatenate([p[1] for p in parts])
    if len(parts) > 1:
        order = np.argsort(u, kind="stable")
        u, c = u[order], c[order]
        starts = np.flatnonzero(np.concatenate(([True], u[1:] != u[:-1])))
        u, c = u[starts], np.add.reduceat(c, starts)
    return u + base, c.astype(np.uint32)


T = TypeVar("T")
R = TypeVar("R")


class TaskMap(Protocol):
    """Where EM runs its parts: ``map`` runs a module-level function over tasks (on local
    processes, on Ray, or in this process) and ``work`` is a directory every task can read
    and write (the EM's files go in a folder of it, removed at the end)."""

    @property
    def work(self) -> Path:
        ...

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        ...


class _InProcess:
    """Every task in this process, in order; files in a temporary directory."""

    def __init__(self, work: Path) -> None:
        self.work = work

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, task in enumerate(tasks):
            yield i, fn(task)


@dataclass(frozen=True)
class _EPart:
    """One part of EM's expectation step: pairs ``lo .. hi`` in iteration ``iteration``."""

    index: int
    lo: int
    hi: int
    iteration: int
    folder: str
    n_keys: int
    src_size: int
    tgt_size: int
    slots_size: int
    chunk_cooc: int
    agreement: bool


def _ragged_part(folder: Path, side: str, lo: int, hi: int) -> _Ragged:
    offsets = np.load(folder / f"{side}_offsets.npy", mmap_mode="r")[lo:hi + 1]
    ids = np.load(folder / f"{side}_ids.npy", mmap_mode="r")[offsets[0]:offsets[-1]]
    return _Ragged(np.asarray(offsets - offsets[0], np.int64), np.array(ids, np.int32))


def _e_step(task: _EPart) -> str:
    """Expected counts of one part under the iteration's table: each co-occurrence's share of
    its target word (``t(f|e)``) and of its source word (``t(e|f)``), summed per word pair in
    array order (``add.at``), so a part's counts are the same bits wherever it runs. The
    table position of each co-occurrence is found in the first iteration and read back from
    disk in the others. The first iteration's table is uniform, so its shares are known
    without it (:func:`_uniform_counts`)."""
    folder = Path(task.folder)
    src = _ragged_part(folder, "src", task.lo, task.hi)
    tgt = _ragged_part(folder, "tgt", task.lo, task.hi)
    if task.iteration > 0:
        table = np.asarray(np.load(folder / f"table-{task.iteration}.npy", mmap_mode="r"))
        null_f, null_e = np.load(folder / f"null-{task.iteration}.npy", allow_pickle=False)
        null_f, null_e = null_f[:task.tgt_size], null_e[:task.src_size]
    # real: the counts of t(f|e), imaginary: of t(e|f); one scatter for both, each part
    # summed as two float64 scatters would (complex addition adds the parts apart). By
    # agreement the two are one number after the first round: summed once, as float64, and
    # written once (the same bits; a float64 scatter is 1.6x faster than a complex one, and
    # the part's file and the driver's sum are half as large)
    agreed = _one_count(task.iteration, task.agreement)
    counts: NDArray[Any] = np.zeros(task.n_keys + 1, np.float64 if agreed else np.complex128)
    cnt_null_f = np.zeros(task.tgt_size)
    cnt_null_e = np.zeros(task.src_size)
    positions = folder / f"positions-{task.index:05d}.u32"
    index = None
    if task.iteration == 0:
        index = _PackedHash.from_slots(np.load(folder / "slots.npy"), task.slots_size,
                                       absent=task.n_keys)
        write = open(positions.with_name(positions.name + ".tmp"), "wb")  # noqa: SIM115
    else:
        read = open(positions, "rb")  # noqa: SIM115
    try:
        # every sum runs in array order (add.at), so the block size changes no bit: blocks
        # smaller than scoring's keep the two workers' temporaries small
        for block in _blocks(src, tgt, task.tgt_size, min(task.chunk_cooc, _EM_BLOCK_COOC),
                             with_keys=index is not None):
            if index is not None:
                found = index.find(block.keys)
                found.tofile(write)
            else:
                found = np.fromfile(read, np.uint32, count=block.gf.size)
            pos = found.astype(np.intp)
            if task.iteration == 0:
                _uniform_counts(block, pos, counts, cnt_null_f, cnt_null_e)
                continue
            p = table[pos]
            p_fe = p.real.astype(np.float64)
            p_ef = p.imag.astype(np.float64)
            nf = null_f[block.tgt_ids]
            ne = null_e[block.src_ids]
            den_f = np.bincount(block.gf, weights=p_fe, minlength=block.tgt_ids.size) + nf
            den_e = np.add.reduceat(p_ef, block.runs) + ne
            if agreed:  # both directions count what both believe (module docstring)
                both = (p_fe / den_f[block.gf]) * (p_ef / np.repeat(den_e, block.m_of_e))
                np.add.at(counts, pos, both)
            else:
                shares = np.empty(pos.size, np.complex128)
                np.divide(p_fe, den_f[block.gf], out=shares.real)
                np.divide(p_ef, np.repeat(den_e, block.m_of_e), out=shares.imag)
                # add.at, not bincount: no table-sized temporary per block (and faster here)
                np.add.at(counts, pos, shares)
            np.add.at(cnt_null_f, block.tgt_ids, nf / den_f)
            np.add.at(cnt_null_e, block.src_ids, ne / den_e)
    finally:
        (write if index is not None else read).close()
    if index is not None:
        positions.with_name(positions.name + ".tmp").replace(positions)
    out = folder / f"counts-{task.iteration}-{task.index:05d}.bin"
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:  # raw, one array after the other: read back by _add_part
        for values in (counts, cnt_null_f, cnt_null_e):
            values.tofile(f)
    tmp.replace(out)
    del counts, src, tgt
    release_heap()  # what this part grew goes back before the worker's next task
    return str(out)


def _one_count(iteration: int, agreement: bool) -> bool:
    """Whether a round's parts hold one count a word pair, both directions' (by agreement,
    after the uniform first round: :func:`_e_step`), else two."""
    return iteration > 0 and agreement


def _uniform_counts(block: _Block, pos: NDArray[np.intp], counts: NDArray[np.complex128],
                    cnt_null_f: F64, cnt_null_e: F64) -> None:
    """The first iteration's expected counts, added to ``counts`` and the NULL counts: from a
    uniform table every word of a pair (and NULL) takes the same share of each word of the
    other side, ``1/(l+1)`` of a target word and ``1/(m+1)`` of a source word. Why: it is
    the E-step without reading the table or summing the shares per word (measured, training
    on bench_clean's 100k corpus: a part of 17.7M co-occurrences, 1.03 -> 0.55 s). A word pair
    the table left out (``max_table_entries``) still takes its share, which goes nowhere."""
    l_of_pair = np.bincount(block.src_pair, minlength=block.n_pairs)
    share_f = 1.0 / (l_of_pair + 1.0)  # of each target word, per pair
    share_e = 1.0 / (block.m_of_e + 1.0)  # of each source word, per source token
    shares = np.empty(pos.size, np.complex128)
    shares.real = np.repeat(share_f[block.src_pair], block.m_of_e)
    shares.imag = np.repeat(share_e, block.m_of_e)
    np.add.at(counts, pos, shares)
    np.add.at(cnt_null_f, block.tgt_ids, share_f[block.tgt_pair])
    np.add.at(cnt_null_e, block.src_ids, share_e)


#: EM's parts come in multiples of this many: 2 workers end each round together
_PART_MULTIPLE = 2


def _em_parts(src: _Ragged, tgt: _Ragged, budget: int) -> list[tuple[int, int]]:
    """Ranges of pairs with at most about ``budget`` co-occurrences each, a multiple of
    ``_PART_MULTIPLE`` of them: a function of the data alone, so the model is the same bits
    for any number of workers. Why the multiple: 5 parts a round on 2 workers left one idle
    for most of a part each round (0.3-0.5 s of the 1.0-1.4 s rounds at 100k pairs); why
    large parts: ``_PART_COOC``."""
    cost = np.cumsum(src.lengths * tgt.lengths)
    total = int(cost[-1]) if cost.size else 0
    parts = max(1, -(-total // budget))
    parts = -(-parts // _PART_MULTIPLE) * _PART_MULTIPLE
    cuts = np.searchsorted(cost, np.arange(1, parts) * (total / parts), side="right")
    bounds = np.unique(np.r_[0, cuts, cost.size])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]


def _em(pairs: list[_Ragged], keys: U32, src_size: int, tgt_size: int,
        options: AlignerOptions, tasks: TaskMap) -> tuple[F32, F32, F32, F32]:
    """EM for Model 1 in both directions at once: both share the co-occurrences and lookups.

    ``pairs`` holds the source and target ids; it is emptied once they are on disk for the
    tasks (this process needs only the table through EM). Returns ``t(f|e)``, ``t(e|f)`` per
    key, ``t(f|NULL)``, ``t(e|NULL)``; uniform start. The expectation step runs as one task
    per part of the pairs (:func:`_em_parts`, a function of the data alone) on ``tasks``, the
    maximization step here: the parts' counts are summed in part order, so the model is
    bit-identical for the same input on any number of workers. Sums are float64.
    """
    src, tgt = pairs
    n_keys = keys.size
    folder = Path(tempfile.mkdtemp(prefix="em-", dir=tasks.work))
    try:
        index = _PackedHash(keys, np.arange(n_keys, dtype=np.uint32), absent=n_keys,
                            load=_TRAIN_LOAD)
        np.save(folder / "slots.npy", index.slots)
        for side, ragged in (("src", src), ("tgt", tgt)):
            np.save(folder / f"{side}_offsets.npy", ragged.offsets)
            np.save(folder / f"{side}_ids.npy", ragged.ids)
        parts = _em_parts(src, tgt, _PART_COOC)
        slots_size = index.size
        del index, src, tgt
        pairs.clear()
        # and what encoding the pairs grew goes back to the system before EM's tasks start
        # (1M pairs: this process held 464 MB through EM, 101 MB of it in use)
        release_heap()
        table = np.zeros(n_keys + 1, np.complex64)  # real: t(f|e), imag: t(e|f); last: absent
        table.real[:-1] = 1.0 / tgt_size
        table.imag[:-1] = 1.0 / src_size
        null_f = np.full(tgt_size, 1.0 / tgt_size)
        null_e = np.full(src_size, 1.0 / src_size)
        step = options.chunk_cooc
        for iteration in range(options.iterations):
            if iteration > 0:  # the first is uniform: its tasks need no table
                np.save(folder / f"table-{iteration}.npy", table)
                nulls = np.zeros((2, max(src_size, tgt_size)))
                nulls[0, :tgt_size], nulls[1, :src_size] = null_f, null_e
                np.save(folder / f"null-{iteration}.npy", nulls)
            todo = [_EPart(part, lo, hi, iteration, str(folder), n_keys, src_size, tgt_size,
                           slots_size, options.chunk_cooc, options.agreement)
                    for part, (lo, hi) in enumerate(parts)]
            done = dict(tasks.map(_e_step, todo))
            agreed = _one_count(iteration, options.agreement)
            counts_fe = np.zeros(n_keys + 1)
            counts_ef = counts_fe if agreed else np.zeros(n_keys + 1)
            cnt_null_f = np.zeros(tgt_size)
            cnt_null_e = np.zeros(src_size)
            for part in range(len(parts)):  # in part order: the same sums for any workers
                _add_part(Path(done[part]), counts_fe, None if agreed else counts_ef,
                          cnt_null_f, cnt_null_e, step)
                Path(done[part]).unlink()
            (folder / f"table-{iteration}.npy").unlink(missing_ok=True)
            # M-step in fixed chunks of keys: bounded temporaries
            tot_e = np.zeros(src_size)
            tot_f = np.zeros(tgt_size)
            for lo in range(0, n_keys, step):
                k = keys[lo:lo + step]
                tot_e += np.bincount(k // tgt_size, weights=counts_fe[lo:lo + k.size],
                                     minlength=src_size)
                tot_f += np.bincount(k % tgt_size, weights=counts_ef[lo:lo + k.size],
                                     minlength=tgt_size)
            relax = options.relaxation if iteration > 0 else 1.0
            norm_e = np.zeros(src_size)
            norm_f = np.zeros(tgt_size)
            for lo in range(0, n_keys, step):
                k = keys[lo:lo + step]
                sl = slice(lo, lo + k.size)
                src_of, tgt_of = k // tgt_size, k % tgt_size
                table.real[sl] = _relaxed(_safe_div(counts_fe[sl], tot_e[src_of]),
                                          table.real[sl], relax)
                table.imag[sl] = _relaxed(_safe_div(counts_ef[sl], tot_f[tgt_of]),
                                          table.imag[sl], relax)
                if relax != 1.0:
                    norm_e += np.bincount(src_of, weights=table.real[sl], minlength=src_size)
                    norm_f += np.bincount(tgt_of, weights=table.imag[sl], minlength=tgt_size)
            if relax != 1.0:  # the extrapolated rows sum to 1 again
                for lo in range(0, n_keys, step):
                    k = keys[lo:lo + step]
                    sl = slice(lo, lo + k.size)
                    table.real[sl] = _safe_div(table.real[sl].astype(np.float64),
                                               norm_e[k // tgt_size])
                    table.imag[sl] = _safe_div(table.imag[sl].astype(np.float64),
                                               norm_f[k % tgt_size])
            null_f = _safe_div(cnt_null_f, np.full(tgt_size, cnt_null_f.sum()))
            null_e = _safe_div(cnt_null_e, np.full(src_size, cnt_null_e.sum()))
            # the round's counts go before the next round's tasks run: the workers' peak is
            # then, and this process holds the table and the keys alone through it
            del counts_fe, counts_ef
            release_heap()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return (table.real[:-1].astype(np.float32), table.imag[:-1].astype(np.float32),
            null_f.astype(np.float32), null_e.astype(np.float32))


def _add_part(path: Path, counts_fe: F64, counts_ef: F64 | None, cnt_null_f: F64,
              cnt_null_e: F64, chunk: int) -> None:
    """Add a part's counts, as :func:`_e_step` wrote them, to the totals, ``chunk`` word pairs
    at a time: the driver holds the totals and a chunk, not a whole part's counts beside them
    (16 bytes a word pair: 64 MB at the 4M-entry table's limit). Each total is the same sum
    in the same order as adding whole arrays. ``counts_ef`` None: the part holds one count a
    word pair, both directions' (EM by agreement after its first round)."""
    width = 8 if counts_ef is None else 16
    expected = width * counts_fe.size + 8 * (cnt_null_f.size + cnt_null_e.size)
    size = path.stat().st_size
    if size != expected:
        raise SprDataError(f"EM counts {path} holds {size:,} bytes, not {expected:,}")
    with open(path, "rb") as f:
        for lo in range(0, counts_fe.size, chunk):
            count = min(chunk, counts_fe.size - lo)
            if counts_ef is None:
                counts_fe[lo:lo + count] += np.fromfile(f, np.float64, count=count)
            else:
                both = np.fromfile(f, np.complex128, count=count)
                counts_fe[lo:lo + count] += both.real
                counts_ef[lo:lo + count] += both.imag
        for total in (cnt_null_f, cnt_null_e):
            total += np.fromfile(f, np.float64, count=total.size)


def _relaxed(em: F64, before: NDArray[np.float32], relax: float) -> F64:
    """Over-relaxed EM (``relax`` = η > 1): each probability moves past EM's update,
    ``t_em^η / t_before^(η-1)``, before the rows are normalized again (:func:`_em`); plain EM at
    η = 1. Zero stays zero. Why, and what it was measured to do: the module docstring."""
    if relax == 1.0:
        return em
    out = np.zeros(em.size)
    old = before.astype(np.float64)
    ok = (em > 0) & (old > 0)
    out[ok] = np.exp(relax * np.log(em[ok]) - (relax - 1.0) * np.log(old[ok]))
    return out


def _safe_div(num: F64, den: F64) -> F64:
    out = np.zeros(num.size, np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


# ---------------------------------------------------------------------------------------------
# The model


#: options added after models were first saved, and the value a model saved before each one
#: existed was trained and scored with (what :meth:`LexicalAligner.load` assumes)
_OPTIONS_BEFORE: dict[str, float] = {"relaxation": 1.0, "fertility": 0.0, "idf_power": 0.0,
                                      "worse_weight": 1.0, "punct_weight": 0.0,
                                      "stem_chars": 0, "agreement": False,
                                      "hangul_letters": False, "leave_one_out": False}


@dataclass(frozen=True)
class AlignerOptions:
    """Everything that decides a model: saved with it and part of its content hash."""

    src_lang: str
    tgt_lang: str
    iterations: int = 3
    #: over-relaxed EM: each step goes η times as far as plain EM's, in log space (1.0: plain)
    relaxation: float = 2.0
    max_train_pairs: int = 300_000
    seed: int = 0
    #: words per side; the rest share one UNK id (at most 65,000: keys fit 32 bits)
    max_vocab: int = 50_000
    #: tokens per side used in training (the first ones)
    max_train_tokens: int = 64
    #: tokens per side used in scoring; longer sides are scored on their first tokens
    max_score_tokens: int = 256
    #: word pairs in the table during training (those co-occurring most often)
    max_table_entries: int = 4_000_000
    #: after training, word pairs whose link strength is below this are dropped
    prune_below: float = 1e-3
    #: ε in the score: the floor of a token's best link
    floor: float = 1e-3
    #: λ in the score: weight of the length-ratio term
    length_weight: float = 0.25
    #: a token may be the best link of at most ``max(2, ⌈fertility · m/l⌉)`` tokens of the
    #: other side (``m/l``: that side's tokens per token of this one); the tokens beyond it, in
    #: order of link strength, take their second-best link (0: no limit)
    fertility: float = 1.5
    #: each token's log-link is weighted ``log(1 + pairs / count)^idf_power`` in its side's
    #: mean, ``count`` the word's training count (0: every token alike)
    idf_power: float = 0.25
    #: the worse direction's weight in ``align_score``, the better one's ``1 - worse_weight``
    #: (0.5: both alike; 1.0: the worse alone, as models saved before this option scored)
    worse_weight: float = 0.5
    #: subtracted from ``align_score`` where the two sides end in different punctuation (a
    #: question, an exclamation, anything else); fitted on the corpus by :func:`punct_weight`
    #: after training (0: not used)
    punct_weight: float = 0.0
    #: each token is cut to its first ``stem_chars`` code points (0: whole words): a word's
    #: inflected forms share one set of links, learnt from all their pairs
    stem_chars: int = 6
    #: a Hangul syllable block counts as its letters (2 or 3) in ``stem_chars``, not as one
    #: code point (:func:`stemmed`); False in models saved before
    hangul_letters: bool = True
    #: after the first round, both directions' expected counts are the product of the two
    #: posteriors (EM by agreement); False: each direction its own, as models saved before
    agreement: bool = True
    #: a pair the model was trained on is scored on what the other pairs taught it: its own
    #: share of each link is taken out and each word weighs the share of its count the other
    #: pairs hold (:func:`_left_out`); False: every pair on the whole model
    leave_one_out: bool = False
    #: co-occurrences processed at a time (transient memory: about 100 bytes each)
    chunk_cooc: int = 1_000_000

    def check(self) -> None:
        """Raise :class:`InputError` naming the first option out of range."""
        ints = {"iterations": (self.iterations, 0), "max_train_pairs": (self.max_train_pairs, 1),
                "seed": (self.seed, 0), "max_vocab": (self.max_vocab, 1),
                "max_train_tokens": (self.max_train_tokens, 1),
                "max_score_tokens": (self.max_score_tokens, 1),
                "max_table_entries": (self.max_table_entries, 1),
                "chunk_cooc": (self.chunk_cooc, 1), "stem_chars": (self.stem_chars, 0)}
        for name, (value, low) in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"align option {name} must be an integer >= {low}, "
                                 f"found {value!r}")
        for name in ("agreement", "hangul_letters", "leave_one_out"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"align option {name} must be true or false, "
                                 f"found {getattr(self, name)!r}")
        if self.leave_one_out and self.idf_power == 0.0:
            raise InputError("align option leave_one_out needs idf_power > 0: it reads the "
                             "word counts kept with the weights")
        if self.max_vocab > 65_000:
            raise InputError(f"align option max_vocab must be <= 65000, found {self.max_vocab}")
        floats = {"prune_below": (self.prune_below, 0.0, 1.0),
                  "floor": (self.floor, 1e-12, 1.0),
                  "length_weight": (self.length_weight, 0.0, 100.0),
                  "relaxation": (self.relaxation, 1.0, 4.0),
                  "fertility": (self.fertility, 0.0, 100.0),
                  "idf_power": (self.idf_power, 0.0, 4.0),
                  "worse_weight": (self.worse_weight, 0.5, 1.0 + 1e-9),
                  "punct_weight": (self.punct_weight, 0.0, 20.0)}
        for key, (val, lowest, above) in floats.items():
            if not (isinstance(val, float) and lowest <= val < above):
                raise InputError(f"align option {key} must be a float in [{lowest}, {above}), "
                                 f"found {val!r}")

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): what is saved and hashed. An option at the value
        that means "as before it existed" (plain EM, no fertility limit, no weights) is left
        out, as models saved before it existed did: their hashes still hold."""
        fields = dataclasses.asdict(self)
        for name, before in _OPTIONS_BEFORE.items():
            if fields[name] == before:
                del fields[name]
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class PairScores:
    """What :meth:`LexicalAligner.scores` gives per pair (``-inf`` where a side is empty)."""

    #: ``align_score``: both directions' weighted mean, less the length and punctuation terms
    score: F32
    #: ``s(tgt|src)`` and ``s(src|tgt)``, without the length term
    forward: F32
    backward: F32
    #: the two sides end in punctuation of different kinds (:func:`final_punctuation`)
    punct_mismatch: NDArray[np.bool_]


class LexicalAligner:
    """IBM Model 1 tables in both directions, and the pair score they give.

    Build it with :meth:`train` or :meth:`load`; the constructor takes finished arrays.
    ``keys`` are sorted unique uint32 ``e * tgt_vocab.size + f`` (``e`` a source id, ``f`` a
    target id); ``t_tgt_given_src[k]`` is ``t(f|e)`` and ``t_src_given_tgt[k]`` is ``t(e|f)`` for
    that pair; ``null_tgt[f]`` is ``t(f|NULL)`` and ``null_src[e]`` is ``t(e|NULL)``;
    ``length_log_ratio`` is μ of the score's length term; ``src_counts``/``tgt_counts`` (each
    id's training count) and ``train_pairs`` give the token weights where
    ``options.idf_power`` > 0.
    """

    def __init__(self, options: AlignerOptions, src_vocab: Vocabulary, tgt_vocab: Vocabulary,
                 keys: U32, t_tgt_given_src: F32, t_src_given_tgt: F32, null_tgt: F32,
                 null_src: F32, length_log_ratio: float, *, src_counts: I64 | None = None,
                 tgt_counts: I64 | None = None, train_pairs: int = 0) -> None:
        self.options = options
        self.src_counts = src_counts
        self.tgt_counts = tgt_counts
        self.train_pairs = int(train_pairs)
        self.src_vocab = src_vocab
        self.tgt_vocab = tgt_vocab
        self.keys = keys
        self.t_tgt_given_src = t_tgt_given_src
        self.t_src_given_tgt = t_src_given_tgt
        self.null_tgt = null_tgt
        self.null_src = null_src
        self.length_log_ratio = float(length_log_ratio)
        self._check_shapes()
        #: ``"sha256:…"`` of the options and every array: equal hashes, equal scores
        self.content_hash = self._hash()
        self._link_table: _LinkTable | None = None
        self._src_weight = self._weights(src_counts)
        self._tgt_weight = self._weights(tgt_counts)

    @property
    def _links(self) -> _LinkTable:
        """The lookup table of link strengths, built on first use: a model loaded to be saved
        again (with another option, or as a cleaned dataset's decision) never scores. The link
        strength a(e, f) of each key rides in it as float32 bits; 0 if absent."""
        if self._link_table is None:
            link = ((self.t_tgt_given_src.astype(np.float64) + self.t_src_given_tgt) / 2
                    ).astype(np.float32)
            keys, link = _with_identity_links(self.keys, link, self.src_vocab, self.tgt_vocab)
            self._link_table = _LinkTable(
                _PackedHash(keys, link.view(np.uint32), absent=0, load=_SCORE_LOAD),
                self.src_vocab.size, self.tgt_vocab.size)
        return self._link_table

    def _weights(self, counts: I64 | None) -> F64 | None:
        """Each id's weight in its side's mean, ``log(1 + pairs / count)^idf_power`` (None:
        every token alike). Why: a frequent word (a function word, 的, 了) finds a partner in
        any sentence, a rarer one only in its translation; see the module docstring. A word
        outside the vocabulary (UNK) weighs next to nothing: the model knows nothing of it,
        either way (weighed as a word seen once, the rows the model never saw lost 4.3% of
        their real pairs where they lost 3.4%, and 5 points of re-paired recall, measured by
        ``tests/test_align_calibration.py``'s reused model)."""
        power = self.options.idf_power
        if power == 0.0 or counts is None:
            return None
        seen = np.maximum(counts.astype(np.float64), 1.0)
        weight: F64 = np.log1p(max(self.train_pairs, 1) / seen) ** power
        weight[UNK_ID] = _UNK_WEIGHT
        return weight

    # -- training ------------------------------------------------------------------------------

    @classmethod
    def train(cls, src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray,
              options: AlignerOptions, *, tasks: TaskMap | None = None) -> LexicalAligner:
        """EM for IBM Model 1 in both directions on (a seeded subsample of) the pairs.

        Only the rows :func:`training_rows` picks are read: a caller streaming shards can pick
        them itself and pass just those. Pairs with an empty side are left out of training.
        EM's expectation step runs in parts on ``tasks`` (local processes, Ray; default: this
        process). The same pairs, options and seed give a bit-identical model
        (:attr:`content_hash`), wherever and on how many workers the parts run.
        """
        options.check()
        if len(src) != len(tgt):
            raise InputError(f"alignment needs as many targets as sources, found {len(src)} "
                             f"and {len(tgt)}")
        if len(src) > options.max_train_pairs:
            rows = pa.array(training_rows(len(src), max_pairs=options.max_train_pairs,
                                          seed=options.seed))
            src, tgt = src.take(rows), tgt.take(rows)
        src_arr, tgt_arr = _pair_arrays(src, tgt)
        # both sides at once: tokenizing (polars, Arrow) lets go of the GIL (79k pairs of two
        # sentences: 0.85 -> 0.52 s)
        with ThreadPoolExecutor(2) as pool:
            (src_vocab, src_ids), (tgt_vocab, tgt_ids) = pool.map(
                functools.partial(_vocab_and_ids, options=options), (src_arr, tgt_arr))
        del src, tgt, src_arr, tgt_arr  # the ids are what EM needs (a caller may let go too)
        pa.default_memory_pool().release_unused()
        both = np.flatnonzero((src_ids.lengths > 0) & (tgt_ids.lengths > 0))
        if both.size == 0:
            raise InputError("alignment training found no pair with words on both sides; "
                             "check the src/tgt columns or train on a trusted dataset")
        if both.size < src_ids.lengths.size:
            src_ids, tgt_ids = src_ids.take(both), tgt_ids.take(both)
        ratio = np.log((src_ids.lengths + 1) / (tgt_ids.lengths + 1))
        counts = {"src_counts": np.bincount(src_ids.ids, minlength=src_vocab.size),
                  "tgt_counts": np.bincount(tgt_ids.ids, minlength=tgt_vocab.size)}
        counts = {k: v.astype(np.int64) for k, v in counts.items()}
        n_pairs = int(both.size)
        keys = _table_keys(src_ids, tgt_ids, src_vocab.size, tgt_vocab.size,
                           max_entries=options.max_table_entries, budget=options.chunk_cooc)
        pairs = [src_ids, tgt_ids]  # _em lets go of them once the tasks can read them
        del src_ids, tgt_ids
        if tasks is None:
            with tempfile.TemporaryDirectory(prefix="spr-data-align-") as tmp:
                t_fe, t_ef, null_f, null_e = _em(pairs, keys, src_vocab.size, tgt_vocab.size,
                                                 options, _InProcess(Path(tmp)))
        else:
            t_fe, t_ef, null_f, null_e = _em(pairs, keys, src_vocab.size, tgt_vocab.size,
                                             options, tasks)
        link = (t_fe.astype(np.float64) + t_ef) / 2
        keep = np.flatnonzero(link >= options.prune_below)
        weights: dict[str, Any] = ({} if options.idf_power == 0.0
                                   else {**counts, "train_pairs": n_pairs})
        return cls(options, src_vocab, tgt_vocab, keys[keep], t_fe[keep], t_ef[keep], null_f,
                   null_e, float(np.median(ratio)), **weights)

    # -- scoring -------------------------------------------------------------------------------

    def score(self, src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray, *,
              trained: NDArray[np.bool_] | None = None) -> F32:
        """``align_score`` per pair (the module docstring has the formula); ``-inf`` if a side
        is empty. ``trained``: the pairs the model was trained on (with ``leave_one_out``
        they are scored without their own share of the links)."""
        return self._scored(src, tgt, punctuation=self.options.punct_weight > 0.0,
                            trained=trained).score

    def score_directions(self, src: pa.Array | pa.ChunkedArray,
                         tgt: pa.Array | pa.ChunkedArray) -> tuple[F32, F32]:
        """Per pair: ``s(tgt|src)`` and ``s(src|tgt)``, without the length term."""
        scored = self.scores(src, tgt)
        return scored.forward, scored.backward

    def scores(self, src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray, *,
               trained: NDArray[np.bool_] | None = None,
               fresh: NDArray[np.int8] | None = None) -> PairScores:
        """Every score of each pair: ``align_score``, both directions and whether the final
        punctuation differs (``trained``: as :meth:`score`'s). ``fresh``: per pair, the sides
        (1 the source, 2 the target, 3 both) that the model was also trained on once in another
        pair: scored as if it had not been (a negative made of two training rows, scored as the
        corpus' junk would be: :func:`_as_fresh`)."""
        return self._scored(src, tgt, punctuation=True, trained=trained, fresh=fresh)

    def _scored(self, src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray, *,
                punctuation: bool, trained: NDArray[np.bool_] | None = None,
                fresh: NDArray[np.int8] | None = None) -> PairScores:
        """:meth:`scores`; the punctuation is read only with ``punctuation`` (else the
        mismatch is all false)."""
        if len(src) != len(tgt):
            raise InputError(f"alignment needs as many targets as sources, found {len(src)} "
                             f"and {len(tgt)}")
        n = len(src)
        if trained is not None and len(trained) != n:
            raise ValueError(f"trained holds {len(trained)} flags for {n} pairs")
        if not self.options.leave_one_out:
            trained = None
        out = np.empty((3, n), np.float32)
        mismatch = np.zeros(n, np.bool_)
        for start in range(0, n, _TEXT_ROWS):
            stop = min(n, start + _TEXT_ROWS)
            src_part, tgt_part = _pair_arrays(src.slice(start, stop - start),
                                              tgt.slice(start, stop - start))
            s_ids = _encode(src_part, self.src_vocab, self.options.max_score_tokens,
                            self.options.stem_chars,
                            self.options.hangul_letters)
            t_ids = _encode(tgt_part, self.tgt_vocab, self.options.max_score_tokens,
                            self.options.stem_chars,
                            self.options.hangul_letters)
            out[:, start:stop] = self._score_ids(
                s_ids, t_ids, None if trained is None else trained[start:stop],
                None if fresh is None else fresh[start:stop])
            if punctuation:
                mismatch[start:stop] = (final_punctuation(src_part)
                                        != final_punctuation(tgt_part))
        score = out[0]
        if self.options.punct_weight > 0.0:
            score = (score - np.float32(self.options.punct_weight) * mismatch).astype(np.float32)
        return PairScores(score=score, forward=out[1], backward=out[2], punct_mismatch=mismatch)

    def _score_ids(self, src: _Ragged, tgt: _Ragged,
                   trained: NDArray[np.bool_] | None = None,
                   fresh: NDArray[np.int8] | None = None) -> F64:
        """Rows: align_score (without the punctuation term), s(tgt|src), s(src|tgt)."""
        n = src.lengths.size
        out = np.full((3, n), EMPTY_SCORE)
        rows = np.flatnonzero((src.lengths > 0) & (tgt.lengths > 0))
        if rows.size == 0:
            return out
        if rows.size < n:
            src, tgt = src.take(rows), tgt.take(rows)
        left_out = None if trained is None else np.asarray(trained, bool)[rows]
        # as if a side also trained on in another row were not (_as_fresh); a model without
        # its training counts (idf_power 0) scores as it is
        fresh_rows, counts = None, None
        if fresh is not None and self.src_counts is not None and self.tgt_counts is not None:
            fresh_rows, counts = np.asarray(fresh, np.int8)[rows], (self.src_counts,
                                                                   self.tgt_counts)
        l_len = src.lengths
        m_len = tgt.lengths
        fwd = np.empty(rows.size)
        bwd = np.empty(rows.size)
        floor = self.options.floor
        done = 0
        # blocks hold whole pairs, so their size changes no score; smaller ones hold less
        budget = min(self.options.chunk_cooc, _EM_BLOCK_COOC)
        fertility = self.options.fertility
        w_src, w_tgt = self._src_weight, self._tgt_weight
        links = self._links
        for block in _blocks(src, tgt, self.tgt_vocab.size, budget, with_keys=False):
            src_tok = np.repeat(np.arange(block.src_ids.size, dtype=np.uint32), block.m_of_e)
            link = links.find(block, src_tok)
            k = block.n_pairs
            own = None  # each token's share of its count the other pairs hold
            # (leave_one_out needs idf_power > 0, so the counts are kept: options.check)
            if (left_out is not None and self.src_counts is not None
                    and self.tgt_counts is not None and left_out[done:done + k].any()):
                link, own = _left_out(block, link, src_tok, left_out[done:done + k],
                                      (self.src_counts, self.tgt_counts),
                                      self._identity_partner, self.options.max_train_tokens)
            if fresh_rows is not None and counts is not None and fresh_rows[done:done + k].any():
                link = _as_fresh(block, link, src_tok, fresh_rows[done:done + k], counts,
                                 self.options.max_train_tokens)
            if fertility > 0.0:
                lens = slice(done, done + k)
                best_f, best_e = _capped_links(block, link, src_tok, l_len[lens], m_len[lens],
                                               fertility)
            else:
                best_f = np.zeros(block.tgt_ids.size, np.float32)
                np.maximum.at(best_f, block.gf, link)
                best_e = np.maximum.reduceat(link, block.runs)
            log_f = np.log(best_f.astype(np.float64) + floor)
            log_e = np.log(best_e.astype(np.float64) + floor)
            if w_tgt is not None and w_src is not None:
                wf, we = w_tgt[block.tgt_ids], w_src[block.src_ids]
                if own is not None:
                    we, wf = we * own[0], wf * own[1]
                fwd[done:done + k] = (np.bincount(block.tgt_pair, log_f * wf, k)
                                      / np.bincount(block.tgt_pair, wf, k))
                bwd[done:done + k] = (np.bincount(block.src_pair, log_e * we, k)
                                      / np.bincount(block.src_pair, we, k))
            else:
                fwd[done:done + k] = np.bincount(block.tgt_pair, log_f, k) / m_len[done:done + k]
                bwd[done:done + k] = np.bincount(block.src_pair, log_e, k) / l_len[done:done + k]
            done += k
        gap = np.abs(np.log((l_len + 1) / (m_len + 1)) - self.length_log_ratio)
        # ω = 1 gives the worse direction's exact bits (1·x + 0·y is x), as models saved
        # before ``worse_weight`` scored
        w = self.options.worse_weight
        out[0, rows] = (w * np.minimum(fwd, bwd) + (1.0 - w) * np.maximum(fwd, bwd)
                        - self.options.length_weight * gap)
        out[1, rows] = fwd
        out[2, rows] = bwd
        return out

    @functools.cached_property
    def _identity_partner(self) -> I64:
        """The target id of each source id's identical word (:func:`_with_identity_links`'s
        pairs), -1 for none."""
        out = np.full(self.src_vocab.size, -1, np.int64)
        src_ids, tgt_ids = _identity_ids(self.src_vocab, self.tgt_vocab)
        out[src_ids] = tgt_ids
        return out

    def with_options(self, **changes: Any) -> LexicalAligner:
        """The same tables with other scoring options (``punct_weight``, once fitted)."""
        options = dataclasses.replace(self.options, **changes)
        options.check()
        weighted = options.idf_power > 0.0
        return LexicalAligner(options, self.src_vocab, self.tgt_vocab, self.keys,
                              self.t_tgt_given_src, self.t_src_given_tgt, self.null_tgt,
                              self.null_src, self.length_log_ratio,
                              src_counts=self.src_counts if weighted else None,
                              tgt_counts=self.tgt_counts if weighted else None,
                              train_pairs=self.train_pairs if weighted else 0)

    # -- persistence ---------------------------------------------------------------------------

    def _arrays(self) -> dict[str, NDArray[Any]]:
        src_data, src_off = self.src_vocab.to_buffers()
        tgt_data, tgt_off = self.tgt_vocab.to_buffers()
        return {
            "format_version": np.array([FORMAT_VERSION], np.int64),
            "options": np.frombuffer(self.options.to_json().encode(), np.uint8),
            "src_vocab_data": src_data, "src_vocab_offsets": src_off,
            "tgt_vocab_data": tgt_data, "tgt_vocab_offsets": tgt_off,
            "keys": self.keys,
            "t_tgt_given_src": self.t_tgt_given_src, "t_src_given_tgt": self.t_src_given_tgt,
            "null_tgt": self.null_tgt, "null_src": self.null_src,
            "length_log_ratio": np.array([self.length_log_ratio], np.float64),
            # only where they weigh the tokens: a model saved before keeps its hash
            **({} if self.options.idf_power == 0.0 or self.src_counts is None
               or self.tgt_counts is None else
               {"src_counts": self.src_counts, "tgt_counts": self.tgt_counts,
                "train_pairs": np.array([self.train_pairs], np.int64)}),
        }

    def _hash(self) -> str:
        digest = hashlib.sha256()
        for name, arr in self._arrays().items():
            data = np.ascontiguousarray(arr)
            digest.update(f"{name}:{data.dtype.str}:{data.size};".encode())
            digest.update(data.tobytes())
        return "sha256:" + digest.hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the model as one ``.npz`` (no pickle), atomically, with its content hash."""
        arrays = self._arrays()
        arrays["content_hash"] = np.frombuffer(self.content_hash.encode(), np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        atomic_write_bytes(Path(path), buf.getvalue())

    @classmethod
    def load(cls, path: str | Path, *, expected_hash: str | None = None) -> LexicalAligner:
        """Read a model written by :meth:`save` and check its content hash.

        ``expected_hash`` (e.g. from a run's state) must match too: a resumed run then knows
        it scores with the very model it started with.
        """
        try:
            with np.load(Path(path), allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(f"cannot read alignment model {path}: {exc}; retrain it") from exc
        try:
            version = int(arrays["format_version"][0])
            if version != FORMAT_VERSION:
                raise InputError(f"alignment model {path} has format {version}, expected "
                                 f"{FORMAT_VERSION}; retrain it with this version")
            saved = json.loads(arrays["options"].tobytes().decode())
            for name, before in _OPTIONS_BEFORE.items():  # saved before the option existed
                saved.setdefault(name, before)
            options = AlignerOptions(**saved)
            options.check()
            stored = arrays["content_hash"].tobytes().decode()
            model = cls(options,
                        Vocabulary.from_buffers(arrays["src_vocab_data"],
                                                arrays["src_vocab_offsets"]),
                        Vocabulary.from_buffers(arrays["tgt_vocab_data"],
                                                arrays["tgt_vocab_offsets"]),
                        arrays["keys"], arrays["t_tgt_given_src"], arrays["t_src_given_tgt"],
                        arrays["null_tgt"], arrays["null_src"],
                        float(arrays["length_log_ratio"][0]),
                        **({} if options.idf_power == 0.0 else
                           {"src_counts": arrays["src_counts"],
                            "tgt_counts": arrays["tgt_counts"],
                            "train_pairs": int(arrays["train_pairs"][0])}))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InputError(f"alignment model {path} is malformed ({exc!r}); retrain "
                             "it") from exc
        if model.content_hash != stored:
            raise InputError(f"alignment model {path}: expected content hash {stored}, found "
                             f"{model.content_hash}; the file is damaged, retrain it")
        if expected_hash is not None and model.content_hash != expected_hash:
            raise InputError(f"alignment model {path}: expected {expected_hash}, found "
                             f"{model.content_hash}; the run was started with another model")
        return model

    def _check_shapes(self) -> None:
        k = self.keys
        want: dict[str, tuple[NDArray[Any], np.dtype[Any], int]] = {
            "keys": (k, np.dtype(np.uint32), k.size),
            "t_tgt_given_src": (self.t_tgt_given_src, np.dtype(np.float32), k.size),
            "t_src_given_tgt": (self.t_src_given_tgt, np.dtype(np.float32), k.size),
            "null_tgt": (self.null_tgt, np.dtype(np.float32), self.tgt_vocab.size),
            "null_src": (self.null_src, np.dtype(np.float32), self.src_vocab.size),
        }
        if self.options.idf_power > 0.0:
            if self.src_counts is None or self.tgt_counts is None or self.train_pairs < 1:
                raise ValueError("idf_power > 0 needs the training counts of both vocabularies")
            want["src_counts"] = (self.src_counts, np.dtype(np.int64), self.src_vocab.size)
            want["tgt_counts"] = (self.tgt_counts, np.dtype(np.int64), self.tgt_vocab.size)
        for name, (arr, dtype, size) in want.items():
            if arr.dtype != dtype or arr.ndim != 1 or arr.size != size:
                raise ValueError(f"{name}: expected {dtype}[{size}], found {arr.dtype}"
                                 f"{list(arr.shape)}")
        if k.size and (int(k[-1]) >= self.src_vocab.size * self.tgt_vocab.size
                       or bool(np.any(k[1:] <= k[:-1]))):
            raise ValueError("keys are not sorted unique word pairs of the two vocabularies")


# ---------------------------------------------------------------------------------------------
# Internals


#: the link strength a word written the same on both sides has at least (``_IDENTITY_CHARS``
#: letters or more: names, numbers, codes; not "a" or "in")
IDENTITY_LINK = 0.5
_IDENTITY_CHARS = 3


def _identity_ids(src_vocab: Vocabulary, tgt_vocab: Vocabulary) -> tuple[I64, I64]:
    """The source and target ids of every word of at least ``_IDENTITY_CHARS`` letters both
    vocabularies hold (source ids ascending, one target id each)."""
    at = pc.index_in(src_vocab.words, value_set=tgt_vocab.words)
    chars = pc.utf8_length(src_vocab.words)
    same = pc.and_(pc.is_valid(at), pc.greater_equal(chars, _IDENTITY_CHARS))
    src_ids = np.flatnonzero(same.to_numpy(zero_copy_only=False)).astype(np.int64)
    tgt_ids = at.filter(same).to_numpy().astype(np.int64)
    return src_ids + FIRST_WORD_ID, tgt_ids + FIRST_WORD_ID


def _with_identity_links(keys: U32, link: F32, src_vocab: Vocabulary,
                         tgt_vocab: Vocabulary) -> tuple[U32, F32]:
    """``keys`` (sorted, unique) and ``link`` with every word that both vocabularies hold
    linked to itself
    at least ``IDENTITY_LINK``. Why: a name or a number seen once or twice gets no link EM
    can trust, yet the same rare string on both sides is strong evidence of a translation
    (and rare in a pair that is not). Measured on the quality corpora (6 corpora x 0/10/25/50%
    junk): real pairs lost on the Latin-script pairs 0.1-0.35 points fewer, recall of every
    kind the same or higher; 0.9 instead of 0.5, or 2 letters instead of 3, the same."""
    src_ids, tgt_ids = _identity_ids(src_vocab, tgt_vocab)
    if src_ids.size == 0:
        return keys, link
    # sorted and unique already: one target id per source id, source ids ascending
    identity = (src_ids * tgt_vocab.size + tgt_ids).astype(np.uint32)
    # a model's keys are sorted and unique (checked as it is made): the identity keys not
    # among them are inserted in place (np.union1d sorted them all again: 0.24 s of each
    # worker's load of a 344k-key model)
    at_key = np.minimum(np.searchsorted(keys, identity), max(keys.size - 1, 0))
    new = identity[keys[at_key] != identity] if keys.size else identity
    merged = np.insert(keys, np.searchsorted(keys, new), new).astype(np.uint32)
    strength = np.zeros(merged.size, np.float32)
    strength[np.searchsorted(merged, keys)] = link
    at_identity = np.searchsorted(merged, identity)
    strength[at_identity] = np.maximum(strength[at_identity], np.float32(IDENTITY_LINK))
    return merged, strength


#: a word seen this many times in training has a link EM can trust (what
#: :func:`training_size` counts)
KNOWN_COUNT = 5
#: :func:`training_size` never cuts a sample below this many pairs
SMALLEST_SAMPLE = 65_536


def training_size(src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray, *,
                  tolerance: float, max_tokens: int = 64, stem: int = 0,
                  smallest: int = SMALLEST_SAMPLE) -> int:
    """How many of these pairs (a uniform sample of a corpus) the model needs: the fewest,
    at least ``smallest``, whose words are known about as well as from all of them.

    A word's links are learned once it is seen ``KNOWN_COUNT`` times. Of ``n`` pairs drawn
    at random from these ``N``, a word seen ``k`` times here is seen ``Binomial(k, n/N)``
    times, so the share of the tokens whose word is known at ``n`` follows from these pairs'
    word counts alone (no second training). The size is the smallest ``n`` (a multiple of
    ``smallest / 4``) at which that share falls short of its value at ``N`` by at most
    ``tolerance`` on both sides. Why: EM's cost grows with the pairs, the model's knowledge
    with the words it sees often enough; once the words repeat (a large corpus of one
    domain), more pairs cost time and change nearly nothing. Measured: see the stage
    (:mod:`spr_data.qa.align_stage`). A corpus whose words keep coming (real pairs of 10-30k:
    halving them loses 2-9 points of that share) keeps every pair.
    """
    n = len(src)
    if n != len(tgt):
        raise InputError(f"alignment needs as many targets as sources, found {n} and {len(tgt)}")
    if n <= smallest or tolerance <= 0.0:
        return n
    counts = [word_counts(_as_array(side), max_tokens=max_tokens, stem=stem)["count"]
              .to_numpy().astype(np.int64) for side in (src, tgt)]
    return size_from_counts(n, counts, tolerance=tolerance, smallest=smallest)


def size_from_counts(n: int, counts: Sequence[I64], *, tolerance: float,
                     smallest: int = SMALLEST_SAMPLE) -> int:
    """:func:`training_size` of ``n`` pairs from their word counts, one array per side (a
    count per distinct word, in any order): what a caller that counted the words where it
    read the pairs (the align stage's sample tasks, on the workers) asks."""
    if n <= smallest or tolerance <= 0.0:
        return n
    step = max(1, smallest // 4)
    sizes = np.arange(smallest, n, step, dtype=np.int64)
    if sizes.size == 0:
        return n
    shortfall = np.zeros(sizes.size)
    for cf in counts:
        full = _known_share(cf, 1.0)
        shortfall = np.maximum(shortfall, [full - _known_share(cf, m / n) for m in sizes])
    fits = np.flatnonzero(shortfall <= tolerance)
    return int(sizes[fits[0]]) if fits.size else n


def word_counts(texts: pa.Array, *, max_tokens: int = 64, stem: int = 0) -> pl.DataFrame:
    """How often each alignment token occurs in ``texts`` (columns ``token``, ``count``):
    counts of parts of a sample add up (:func:`merged_counts`) to the whole sample's."""
    import polars as pl
    frames = []
    for start in range(0, len(texts), _TEXT_ROWS):
        words, codes, _ = _word_codes(texts.slice(start, _TEXT_ROWS), max_tokens=max_tokens,
                                      stem=stem)
        frames.append(_word_frame(words, codes))
    if not frames:
        return pl.DataFrame({"token": pl.Series([], dtype=pl.String),
                             "count": pl.Series([], dtype=pl.Int64)})
    return _merge_counts(frames)


def merged_counts(frames: Sequence[pl.DataFrame]) -> I64:
    """Per distinct token of ``frames`` (:func:`word_counts` of parts), its total count."""
    if not frames:
        return np.zeros(0, np.int64)
    out: I64 = _merge_counts(list(frames))["count"].to_numpy().astype(np.int64)
    return out


def _known_share(counts: I64, keep: float) -> float:
    """The share of the tokens whose word is seen ``KNOWN_COUNT`` times or more when each
    of its ``counts`` occurrences is kept with probability ``keep``."""
    if counts.size == 0:
        return 1.0
    k, mult = np.unique(counts, return_counts=True)
    if keep >= 1.0:
        known = (k >= KNOWN_COUNT).astype(np.float64)
    else:
        # P(Binomial(k, keep) >= c) = 1 - sum of the first c terms, by their recurrence
        term = np.exp(k * math.log1p(-keep))
        below = term.copy()
        for i in range(KNOWN_COUNT - 1):
            term = term * np.maximum(k - i, 0) / (i + 1) * keep / (1.0 - keep)
            below += term
        known = np.clip(1.0 - below, 0.0, 1.0)
    weight = (k * mult).astype(np.float64)
    return float((weight * known).sum() / weight.sum())


def training_rows(n_rows: int, *, max_pairs: int, seed: int) -> I64:
    """The rows :meth:`LexicalAligner.train` learns from, sorted: all of them when there are at
    most ``max_pairs``, else a uniform sample without replacement drawn from ``seed``."""
    if n_rows <= max_pairs:
        return np.arange(n_rows, dtype=np.int64)
    rng = np.random.default_rng(seed)
    rows: I64 = np.sort(rng.choice(n_rows, size=max_pairs, replace=False)).astype(np.int64)
    return rows


def _pair_arrays(src: pa.Array | pa.ChunkedArray,
                 tgt: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    src_arr, tgt_arr = _as_array(src), _as_array(tgt)
    if len(src_arr) != len(tgt_arr):
        raise InputError(f"alignment needs as many targets as sources, found {len(src_arr)} "
                         f"and {len(tgt_arr)}")
    return src_arr, tgt_arr


def _vocab_and_ids(texts: pa.Array, options: AlignerOptions) -> tuple[Vocabulary, _Ragged]:
    """The training vocabulary of one side and its pairs' token ids, tokenizing once: each
    slice's tokens are kept as indices into the slice's distinct words (4 bytes a token), which
    the vocabulary then maps to ids."""
    import polars as pl
    frames: list[pl.DataFrame] = []
    slices: list[tuple[pa.Array, I32]] = []
    lengths: list[I64] = []
    for start in range(0, len(texts), _TEXT_ROWS):
        words, local, row_lengths = _word_codes(texts.slice(start, _TEXT_ROWS),
                                                max_tokens=options.max_train_tokens,
                                                stem=options.stem_chars,
                                                hangul_letters=options.hangul_letters)
        frames.append(_word_frame(words, local))
        slices.append((words, local))
        lengths.append(row_lengths)
    if not frames:
        frames = [pl.DataFrame({"token": pl.Series([], dtype=pl.String),
                                "count": pl.Series([], dtype=pl.Int64)})]
    vocab = Vocabulary.build(_merge_counts(frames), max_size=options.max_vocab)
    ids = [vocab.encode(words)[local] for words, local in slices]
    return vocab, _ragged(lengths, ids)


def _ragged(lengths: list[I64], ids: list[I32]) -> _Ragged:
    all_lengths = joined(lengths, np.int64)
    offsets = np.zeros(all_lengths.size + 1, np.int64)
    np.cumsum(all_lengths, out=offsets[1:])
    return _Ragged(offsets, joined(ids, np.int32))


# ---------------------------------------------------------------------------------------------
# Calibration on negatives the corpus provides


#: Kinds of synthetic negatives, in the order their codes (0, 1, …) name them.
NEGATIVE_KINDS = ("repaired", "shifted", "truncated_tgt", "truncated_src")
#: Edges of the align_score histograms the calibration works on (and the report shows).
SCORE_EDGES = np.linspace(-20.0, 0.0, 201)
# a truncated side keeps this range of its words (or characters, for a side without spaces)
_CUT_RANGE = (0.15, 0.5)
# … and counts as truncated only when at most this share of its characters is left
_CUT_LEFT = 0.7
# the mixture share is bounded where at least this share of the negatives lie below
_MIXTURE_QUANTILES = np.linspace(0.3, 0.9, 13)
# halvings of the step between two candidate thresholds (see calibrate)
_REFINE_STEPS = 12
# densities are smoothed over this many bins of SCORE_EDGES (0.1 wide) for p_translation
_SMOOTH_BINS = 7
# each mixture bound averaged with its neighbours' (an average of true inequalities is true):
# the tightest of single noisy bounds is biased low, by about 1 point at 8,000 negatives, and
# at a junk share near 1/2 each point of π is 2 points of the real pairs' estimated loss
_SMOOTH_BOUNDS = np.ones(3) / 3


@dataclass(frozen=True)
class Negatives:
    """Pairs that are certainly not translations, made from a corpus' own pairs."""

    src: pa.Array
    tgt: pa.Array
    #: per pair, its kind's index in :data:`NEGATIVE_KINDS`
    kinds: NDArray[np.int8]
    #: per pair, the row it was made from (whose source it keeps, or whose side it cuts)
    rows: I64
    #: every row drawn to make a negative of the kinds asked for (``kinds=``; those whose
    #: negative was left out included); the blocks of the kinds are disjoint
    drawn: I64
    #: per pair, the row whose target it took (-1: a cut side, its own row's)
    partners: I64

    def only(self, keep: NDArray[np.bool_]) -> Negatives:
        """The negatives where ``keep`` is true (``drawn`` unchanged)."""
        rows = pa.array(np.flatnonzero(keep))
        return Negatives(self.src.take(rows), self.tgt.take(rows), self.kinds[keep],
                         self.rows[keep], self.drawn, self.partners[keep])

    def without_texts(self) -> Negatives:
        """The same negatives without their texts (kinds and rows are what calibration
        needs once they are scored)."""
        empty = pa.array([], pa.large_string())
        return Negatives(empty, empty, self.kinds, self.rows, self.drawn, self.partners)

    def counts(self) -> dict[str, int]:
        """Pairs of each kind."""
        found = np.bincount(self.kinds, minlength=len(NEGATIVE_KINDS))
        return {kind: int(n) for kind, n in zip(NEGATIVE_KINDS, found, strict=True)}


def _cut(text: str, fraction: float) -> str:
    words = text.split()
    if len(words) > 1:
        return " ".join(words[:max(1, math.ceil(fraction * len(words)))])
    return text[:max(1, math.ceil(fraction * len(text)))]


def row_hash(keys: NDArray[Any], seed: int, salt: int = 0) -> F64:
    """A uniform number in [0, 1) per key (a row id), fixed by ``seed`` and ``salt``
    (splitmix64 of the three).

    Why draws by id and not by position: a row added to or taken from a corpus then changes the
    draws of that row alone. Drawn by position, a corpus one row shorter got a wholly new set of
    negatives and training sample, and a new threshold: measured on the OpenNMT WMT sample,
    1.9% of its rows decided otherwise when one row was quarantined before a fresh clean.
    """
    with np.errstate(over="ignore"):
        x = np.asarray(keys, dtype=np.uint64) ^ np.uint64(
            (seed * 0x9E3779B97F4A7C15 + salt * 0xD1B54A32D192ED03) % (1 << 64))
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    unit: F64 = (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return unit


def synthetic_negatives(src: pa.Array | pa.ChunkedArray, tgt: pa.Array | pa.ChunkedArray, *,
                        share: float, seed: int, keys: NDArray[Any] | None = None,
                        kinds: Sequence[str] = NEGATIVE_KINDS) -> Negatives:
    """Negatives made from the pairs themselves: about ``share`` of the rows for each kind.

    Why these: they are negatives whatever the corpus holds (a pair re-paired with another's
    target is not a translation, a clean corpus or a half-junk one alike), and they carry the
    corpus' own words, lengths and scripts. Each kind draws its own block of rows (the blocks
    are disjoint, so a caller can train on the negatives *in place of* those rows, as junk
    takes the place of a pair in a corpus). *repaired*: the row's source with a random other
    row's target; *shifted*: with the next row's target (a Moses file off by one line);
    *truncated_tgt* / *truncated_src*: one side cut to 15–50% of its words (characters for a
    side without spaces), at most 70% of its characters left, the other whole. A negative
    equal in a part to its row (two rows with the same source or target, a side too short to
    cut) is left out.

    Every draw is made by :func:`row_hash` of the row's key (``keys``: the row ids; default
    the positions) and ``seed``: a row added or removed changes the negatives made from it
    and its neighbours only. ``kinds`` makes some of the kinds only, from the same rows as when
    all are made (and ``drawn`` holds only their rows).
    """
    n = len(src)
    if n != len(tgt):
        raise InputError(f"negatives need as many targets as sources, found {n} and "
                         f"{len(tgt)}")
    keys = np.arange(n, dtype=np.uint64) if keys is None else np.asarray(keys, np.uint64)
    if keys.size != n:
        raise InputError(f"negatives need a key per pair, found {keys.size} for {n} pairs")
    kinds_n = len(NEGATIVE_KINDS)
    unknown = set(kinds) - set(NEGATIVE_KINDS)
    if unknown:
        raise InputError(f"unknown negative kinds {sorted(unknown)}; known: {NEGATIVE_KINDS}")
    k = min(n // kinds_n, max(1, round(share * n))) if n >= 2 * kinds_n else 0
    # the rows of lowest hash, in blocks of k: kind 0 first
    blocks = np.argsort(row_hash(keys, seed), kind="stable")[:kinds_n * k].reshape(kinds_n, k)
    made_kinds = [NEGATIVE_KINDS.index(name) for name in kinds]
    # a re-paired row's partner: the next row in the order of target length (ties by another
    # hash order): a target of about the same length, as the junk that reaches this stage has
    # passed the length-ratio rule, and as a length-based sentence aligner pairs lines. Random
    # partners were easier than such junk: on 24 corpus-levels re-paired junk was caught at
    # 0.832 against 0.849 now, misaligned 0.883 against 0.902, and on the OpenNMT WMT sample,
    # whose own junk is crawled sentences of one topic, 212 rows went to low_alignment
    # against 320 now (of 40 of the 108 read, most not translations). Any row of the corpus
    # can be a partner (its target then also appears with its own source, as a re-paired
    # crawl's targets mostly do). Tried: partners from the same block, so that both sides
    # appear nowhere else; on the WMT sample the real pairs' loss rose from 5-6% to 10-13%
    target_length = pc.utf8_length(_as_array(tgt).fill_null("")).to_numpy(zero_copy_only=False)
    order = np.lexsort((row_hash(keys, seed, 1), target_length))
    partner_of = np.empty(n, np.int64)
    partner_of[order] = np.roll(order, -1)
    fraction = _CUT_RANGE[0] + (_CUT_RANGE[1] - _CUT_RANGE[0]) * row_hash(keys, seed, 2)
    # as Python strings: only the rows a negative reads (the blocks and their partners), not
    # every pair (at 65,536 pairs this function took 0.157 s that way, 0.111 s now)
    read = unique(np.concatenate([blocks[made_kinds].reshape(-1), partner_of[blocks[0]],
                                     (blocks[1] + 1) % n])) if k else np.zeros(0, np.int64)
    taken = pa.array(read)
    src_of = dict(zip(read.tolist(), _as_array(src).take(taken).to_pylist(), strict=True))
    tgt_of = dict(zip(read.tolist(), _as_array(tgt).take(taken).to_pylist(), strict=True))
    made: list[tuple[str, str, int, int, int]] = []
    for kind, block in enumerate(blocks.tolist()):
        if kind not in made_kinds:
            continue
        for a in sorted(block):
            s, t = src_of[a] or "", tgt_of[a] or ""
            if kind in (0, 1):
                b = int(partner_of[a]) if kind == 0 else (a + 1) % n
                if s != (src_of[b] or "") and t != (tgt_of[b] or ""):
                    made.append((s, tgt_of[b] or "", kind, a, b))
            else:
                side = t if kind == 2 else s
                cut = _cut(side, float(fraction[a]))
                if len(cut) <= _CUT_LEFT * len(side):
                    made.append((s, cut, kind, a, -1) if kind == 2 else (cut, t, kind, a, -1))
    return Negatives(pa.array([m[0] for m in made], pa.large_string()),
                     pa.array([m[1] for m in made], pa.large_string()),
                     np.asarray([m[2] for m in made], dtype=np.int8),
                     np.asarray([m[3] for m in made], dtype=np.int64),
                     np.sort(blocks[made_kinds].reshape(-1)).astype(np.int64),
                     np.asarray([m[4] for m in made], dtype=np.int64))


#: the ridge on :func:`punct_weight`'s logistic coefficients (the data's weight is 1 in all):
#: where the two sides' punctuation almost never differs (Multi30k: 0.2% of the negatives), the
#: weight stays near 0 instead of following a handful of pairs
_PUNCT_RIDGE = 1e-3
_PUNCT_MAX = 5.0


def punct_weight(corpus: NDArray[Any], corpus_mismatch: NDArray[np.bool_],
                 negatives: NDArray[Any], negatives_mismatch: NDArray[np.bool_]) -> float:
    """What a difference in final punctuation is worth in ``align_score`` units, from the
    corpus' pairs and its negatives (scored without it): a logistic regression of corpus pair
    (1) against negative (0) on the score and the difference, each class weighing one half;
    the weight is minus the difference's coefficient over the score's (0 where the
    difference is no evidence against a pair). Why fitted and not fixed: Tatoeba's questions
    are questions on both sides (0.7-1% of its pairs end differently, 20-30% of its re-paired
    negatives), Multi30k has no questions, and a language whose questions end otherwise (a
    Greek ``;``) would otherwise lose its real questions. The corpus' own junk makes the
    corpus class look a little like the negatives, which only shrinks the weight."""
    scores = np.concatenate([np.asarray(corpus, np.float64), np.asarray(negatives, np.float64)])
    mismatch = np.concatenate([np.asarray(corpus_mismatch, np.float64),
                               np.asarray(negatives_mismatch, np.float64)])
    label = np.concatenate([np.ones(len(corpus)), np.zeros(len(negatives))])
    use = np.isfinite(scores)
    n_pos, n_neg = int(np.count_nonzero(use & (label == 1))), int(
        np.count_nonzero(use & (label == 0)))
    if n_pos == 0 or n_neg == 0:
        return 0.0
    x = np.column_stack([np.ones(int(use.sum())), scores[use], mismatch[use]])
    y = label[use]
    weight = np.where(y == 1, 0.5 / n_pos, 0.5 / n_neg)
    ridge = np.diag([0.0, _PUNCT_RIDGE, _PUNCT_RIDGE])
    beta = np.zeros(3)
    for _ in range(50):  # Newton's method: converges in a handful of steps
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -30.0, 30.0)))
        grad = x.T @ (weight * (y - p)) - ridge @ beta
        hess = (x * (weight * p * (1.0 - p))[:, None]).T @ x + ridge
        step = np.linalg.solve(hess + 1e-12 * np.eye(3), grad)
        beta += step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    if beta[1] <= 0.0 or beta[2] >= 0.0:
        return 0.0
    return float(min(_PUNCT_MAX, -beta[2] / beta[1]))


@dataclass(frozen=True)
class Calibration:
    """A threshold on ``align_score`` fixed from negatives, and what it implies."""

    threshold: float
    #: estimated share of misaligned pairs among the corpus pairs scored (every kind of
    #: negative in the mixture: the higher estimate)
    misaligned_share: float
    #: share of the negatives below the threshold
    negatives_rejected: float
    #: estimated share of the real (not misaligned) pairs below the threshold
    real_rejected: float
    #: ``p_translation`` at each edge of :data:`SCORE_EDGES`, non-decreasing
    p_translation: tuple[float, ...]
    corpus_histogram: tuple[int, ...]
    negatives_histogram: tuple[int, ...]
    #: the lower estimate (``mixture`` negatives alone), from which ``real_rejected`` comes;
    #: where the real pairs' tail capped the threshold, what that tail implies, if lower
    misaligned_share_low: float = 0.0

    def p_of(self, scores: NDArray[Any]) -> F32:
        """``p_translation`` of each score."""
        return p_translation(scores, self.p_translation)


def p_translation(scores: NDArray[Any], table: tuple[float, ...] | list[float]) -> F32:
    """``p_translation`` of each score from a :attr:`Calibration.p_translation` table,
    interpolated between the edges of :data:`SCORE_EDGES` (0 for ``-inf``)."""
    values = np.asarray(scores, np.float64)
    p = np.interp(values, SCORE_EDGES, np.asarray(table, np.float64))
    out: F32 = np.where(np.isfinite(values), p, 0.0).astype(np.float32)
    return out


def _histogram(values: F64) -> tuple[int, ...]:
    clipped = np.clip(values[np.isfinite(values)], SCORE_EDGES[0], SCORE_EDGES[-1])
    return tuple(int(c) for c in np.histogram(clipped, bins=SCORE_EDGES)[0])


def calibrate(corpus: NDArray[Any], negatives: NDArray[Any], *, negative_recall: float,
              max_real_reject: float, reference: NDArray[np.bool_] | None = None,
              kinds: NDArray[np.integer[Any]] | None = None,
              mixture: NDArray[np.bool_] | None = None,
              min_p_translation: float = 0.8,
              cap_negatives: NDArray[Any] | None = None) -> Calibration:
    """The threshold and ``p_translation`` from the scores of corpus pairs and of negatives.

    The corpus' scores are a mixture: misaligned pairs, distributed like some mix of the
    negatives' ``kinds`` (``Σ_k w_k F_k``, unknown weights: a corpus may hold re-paired
    pairs and no cut ones), and real pairs (``F_real``, unknown). Below any score ``t``,
    ``F_corpus(t) = Σ_k w_k F_k(t) + (1-π) F_real(t) ≥ Σ_k w_k F_k(t)``. The largest
    ``π = Σ_k w_k`` that keeps this true at the scores below which 30–90% of the negatives lie
    is the estimate of the misaligned share (a small linear program): the bound is tight where
    real pairs are rare. Nothing assumes the corpus is mostly clean: at 50% junk π comes out
    near 0.5.

    The threshold is the score below which ``negative_recall`` of the ``reference`` negatives
    lie (default: all) — it does not move with the junk share — lowered (as far as their
    lowest scores) while it would reject more than ``max_real_reject`` of the real pairs,
    estimated as ``(F_corpus(t) - max_w Σ_k w_k F_k(t)) / (1 - π)`` (the least loss the
    corpus allows), and lowered further to where ``p_translation`` reaches
    ``min_p_translation`` if that is lower: a pair is rejected only where junk is likely
    enough, so a corpus cleaned already loses next to nothing. Why re-paired pairs make the
    reference in :func:`spr_data.pipeline.clean.clean`: they are negatives beyond doubt, while
    a side cut to half of a three-word sentence, or the next line of a corpus sorted by source,
    is sometimes
    still a fair translation; measured on Multi30k en–de with 10–50% junk, 98% of re-paired
    negatives gives 1.3–2.5% of the real pairs rejected and 94–99% of each junk kind, 95% of
    all kinds 2–7% and 99%. ``p_translation(s) = 1 - Σ_k w_k f_k(s) / f_corpus(s)`` from
    smoothed histograms, made non-decreasing in ``s``, with ``w`` the mean of the two fits
    below (re-paired negatives alone, and every kind).

    ``cap_negatives``: the same negatives, scored as the corpus' junk would be (a negative the
    model was trained on shares its sides with rows it was also trained on, the corpus' junk
    mostly does not: :meth:`LexicalAligner.scores`' ``fresh``). Where given, the misaligned
    share and the real pairs' loss, which caps the threshold, are estimated from them; the
    threshold's quantile and ``p_translation`` still read ``negatives``. Why: junk whose words
    the model learnt from that pair alone scores higher than such negatives, mostly in their
    low tail, where the share is fitted, so the share came out low and every point of it was
    counted as real pairs lost: on NTREX en–de with a quarter of its rows re-paired, an
    estimated 1.96% of the real pairs lost for 0.00% really lost, and 0.46 of the junk caught
    (docs/quality.md, *Negatives scored as fresh junk*).
    """
    corpus = np.asarray(corpus, np.float64)
    negatives = np.asarray(negatives, np.float64)
    codes = (np.zeros(negatives.size, np.int64) if kinds is None
             else np.asarray(kinds, np.int64))
    finite = np.isfinite(negatives)
    neg = np.sort(negatives[finite])
    if neg.size == 0 or corpus.size == 0:
        raise InputError("alignment calibration needs scored corpus pairs and negatives; "
                         "set align.min_score in the recipe for a corpus this small")
    fin = np.sort(np.where(np.isfinite(corpus), corpus, -np.inf))
    usable = finite if mixture is None else finite & np.asarray(mixture, bool)
    if not usable.any():
        usable = finite

    def below(sorted_values: F64, t: float) -> float:
        return float(np.searchsorted(sorted_values, t, side="left")) / sorted_values.size

    def fit(scores: F64, use: NDArray[np.bool_]) -> tuple[list[F64], F64, F64, F64]:
        """The kinds' sorted scores, their bounds, the most junk they explain, and the
        corpus' bounds (at 30-90% of all the ``scores``)."""
        grid = [float(t) for t in np.quantile(scores[np.isfinite(scores)], _MIXTURE_QUANTILES)]
        corpus_bounds = np.convolve([below(fin, t) for t in grid], _SMOOTH_BOUNDS, mode="valid")
        kinds_here = [np.sort(scores[use & (codes == k)]) for k in np.unique(codes[use])]
        bounds = np.array([np.convolve([below(g, t) for t in grid], _SMOOTH_BOUNDS,
                                       mode="valid") for g in kinds_here]).T
        return (kinds_here, bounds, _lp_max(np.ones(len(kinds_here)), bounds, corpus_bounds),
                corpus_bounds)

    # two estimates: every kind of negative may "explain" real pairs as junk (a cut side or
    # a next line that is still a fair translation) and overstates the junk; re-paired pairs
    # (``mixture``) alone may miss junk of other shapes and understate it. The loss of real
    # pairs is estimated from the lower one (it errs on the side of keeping real pairs), the
    # posterior from their mean, the share the report gives: from the higher one alone, a
    # short real pair's score looked like junk wherever the corpus' low tail was thin
    # (Tatoeba eng-cmn without junk lost 1.60% of its real pairs, 1.21% from the mean; the
    # junk caught the same at every junk level of the quality sweep but one, by one pair)
    groups, bound_f, weights, bound_c = fit(negatives, usable)
    all_groups, _, all_weights, _ = fit(negatives, finite)
    # p_translation reads the negatives as scored, the share and the cap the fresh ones
    plain, plain_weights, every, every_weights = groups, weights, all_groups, all_weights
    if cap_negatives is not None:
        capped = np.asarray(cap_negatives, np.float64)
        if capped.shape != negatives.shape:
            raise ValueError(f"cap_negatives holds {capped.size} scores for {negatives.size} "
                             "negatives")
        capped_finite = np.isfinite(capped)
        capped_usable = (capped_finite if mixture is None
                         else capped_finite & np.asarray(mixture, bool))
        if capped_usable.any():
            groups, bound_f, weights, bound_c = fit(capped, capped_usable)
            all_groups, _, all_weights, _ = fit(capped, capped_finite)
    share = float(min(1.0, weights.sum()))
    share_high = float(min(1.0, max(all_weights.sum(), share)))

    def real_rejected(t: float) -> float:
        if share >= 1.0:
            return 0.0
        at_t = np.array([below(g, t) for g in groups])
        most = _lp_max(at_t, np.vstack([bound_f, at_t]), np.append(bound_c, below(fin, t)))
        return max(0.0, below(fin, t) - float(at_t @ most)) / (1.0 - share)

    ref = negatives if reference is None else negatives[np.asarray(reference, bool)]
    ref = ref[np.isfinite(ref)]
    if ref.size == 0:
        ref = neg
    threshold = float(np.quantile(ref, negative_recall))
    if real_rejected(threshold) > max_real_reject:
        candidates = np.quantile(ref, np.linspace(0.0, negative_recall, 197))[::-1]
        above = threshold
        for t in (float(t) for t in candidates):
            if real_rejected(t) <= max_real_reject:
                # between the step that fits and the one above it, as high as still fits: the
                # threshold then moves as little as the estimate does when the corpus changes a
                # little (one row quarantined moved it a whole step, 0.015, and 4 decisions)
                low, high = t, above
                for _ in range(_REFINE_STEPS):
                    mid = (low + high) / 2
                    low, high = (mid, high) if real_rejected(mid) <= max_real_reject else (low, mid)
                threshold = low
                break
            above = t
        else:
            threshold = float(candidates[-1])
    corpus_hist = _histogram(corpus)
    neg_hist = _histogram(negatives)

    def junk_histogram(kinds: list[F64], kind_weights: F64) -> F64:
        return sum((np.asarray(_histogram(g), np.float64) * (w / max(g.size, 1))
                    for g, w in zip(kinds, kind_weights, strict=True)),
                   np.zeros(SCORE_EDGES.size - 1))

    posterior = _posterior(corpus_hist, (junk_histogram(plain, plain_weights)
                                         + junk_histogram(every, every_weights)) / 2)
    # and only where junk is likely enough: a corpus without junk (one cleaned already) loses
    # next to nothing, whatever the negatives' quantile says
    threshold = min(threshold, _crossing(posterior, min_p_translation))
    # and no higher than where real pairs, read off the corpus above the negatives, would
    # lose max_real_reject: the mixture's bound is loose where they overlap
    cut = float(np.quantile(neg, _REAL_TAIL_FROM))
    tail = _RealTail.of(fin, cut)
    share_low, tail_loss = share, 0.0
    if tail is not None:
        at_budget = tail.quantile(max_real_reject)
        if at_budget < threshold:
            threshold, tail_loss = at_budget, max_real_reject
            # and the share reaches down to what the tail implies: the corpus above the cut
            # is the real pairs' share above it
            real_pairs = (fin.size - np.searchsorted(fin, cut, side="right")) / max(
                1.0 - tail.below(cut), 1e-9)
            share_low = min(share, max(0.0, 1.0 - real_pairs / fin.size))
        else:
            tail_loss = tail.below(threshold)
    return Calibration(
        threshold=threshold, misaligned_share=share_high, misaligned_share_low=share_low,
        negatives_rejected=below(neg, threshold),
        real_rejected=max(real_rejected(threshold), tail_loss),
        p_translation=posterior,
        corpus_histogram=corpus_hist, negatives_histogram=neg_hist)


#: the real pairs' normal is fitted on the corpus' scores above this quantile of the
#: negatives' (few negatives there: the corpus above it is nearly all real pairs)
_REAL_TAIL_FROM = 0.95


@dataclass(frozen=True)
class _RealTail:
    """The corpus' real pairs as a normal, fitted on the scores above ``cut`` alone (a
    normal truncated there, by maximum likelihood), extrapolated below it.

    Why: the mixture's bound on the junk share is tight only where real pairs are rare
    among the negatives' scores. With a few hundred short pairs (LASER's Tatoeba sets) the
    model learns each pair's words mostly from the pair itself, the real pairs' scores
    spread into the negatives', and the bound read Japanese at half junk as 43% misaligned
    for 14% (real pairs lost: 27%, estimated 1.9%). Real pairs' low tail is heavier than a
    normal's (loose translations), so its quantile is above theirs and caps only a threshold
    that the mixture put too high (docs/quality.md, *Small corpora of other pairs*). The cut
    is read off the negatives as scored, not as fresh junk (``cap_negatives``, lower): the
    higher cut leaves less junk above it."""

    mean: float
    sd: float

    #: fewer corpus scores above the cut than this: no fit
    MIN_ROWS: ClassVar[int] = 100
    GRID: ClassVar[int] = 21
    ROUNDS: ClassVar[int] = 30

    @classmethod
    def of(cls, sorted_scores: F64, cut: float) -> _RealTail | None:
        x = sorted_scores[np.searchsorted(sorted_scores, cut, side="right"):]
        x = x[np.isfinite(x)]
        if x.size < cls.MIN_ROWS or not np.isfinite(cut):
            return None
        n, s1, s2 = float(x.size), float(x.sum()), float(np.square(x).sum())
        spread = float(x.std())
        if spread <= 0.0:
            return None

        def nll(mean: F64, sd: F64) -> F64:
            z = (cut - mean) / sd
            # log of the normal's share above the cut (math.erfc: numpy has no erf)
            log_above = np.log(np.maximum(_erfc(z / math.sqrt(2.0)) / 2.0, 1e-300))
            squares = (s2 - 2.0 * mean * s1 + n * mean * mean) / (2.0 * sd * sd)
            nll_values: F64 = n * np.log(sd) + squares + n * log_above
            return nll_values

        # a grid search that halves its window round by round around the best point: the
        # likelihood is a narrow ridge (a lower mean with a wider sd fits nearly as well),
        # which a window shrinking this slowly can follow. The first window reaches 10 of the
        # scores' spreads below the cut and 6 in sd (the scores above a cut 2 sds over the
        # mean spread about 0.37 of its sd)
        center = ((cut - 10.0 * spread + float(x.mean())) / 2, 3.15 * spread)
        half = ((float(x.mean()) - cut + 10.0 * spread) / 2, 2.85 * spread)
        best = center
        for _ in range(cls.ROUNDS):
            means, sds = np.meshgrid(
                np.linspace(center[0] - half[0], center[0] + half[0], cls.GRID),
                np.linspace(max(center[1] - half[1], 0.01 * spread), center[1] + half[1],
                            cls.GRID), indexing="ij")
            values = nll(means, sds)
            i, j = np.unravel_index(int(np.argmin(values)), values.shape)
            best = center = (float(means[i, j]), float(sds[i, j]))
            half = (half[0] / 2, half[1] / 2)
        if not (np.isfinite(best[0]) and best[1] > 0.0):
            return None
        return cls(*best)

    def quantile(self, share: float) -> float:
        return statistics.NormalDist(self.mean, self.sd).inv_cdf(min(max(share, 1e-9), 0.5))

    def below(self, t: float) -> float:
        if not np.isfinite(t):
            return 0.0 if t < 0 else 1.0
        return statistics.NormalDist(self.mean, self.sd).cdf(t)


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _crossing(table: tuple[float, ...], level: float) -> float:
    """The score where a non-decreasing ``p_translation`` table reaches ``level``."""
    p = np.asarray(table)
    above = np.flatnonzero(p >= level)
    if above.size == 0:
        return float(SCORE_EDGES[-1])
    i = int(above[0])
    if i == 0:
        return float(SCORE_EDGES[0])
    lo, hi = p[i - 1], p[i]
    frac = (level - lo) / (hi - lo) if hi > lo else 1.0
    return float(SCORE_EDGES[i - 1] + frac * (SCORE_EDGES[i] - SCORE_EDGES[i - 1]))


def _lp_max(objective: F64, bounds: F64, limits: F64) -> F64:
    """``w ≥ 0`` maximizing ``objective · w`` with ``bounds @ w ≤ limits`` (a handful of
    variables): the best feasible vertex, every one of them tried."""
    k = objective.size
    rows = np.vstack([bounds, -np.eye(k)])
    rhs = np.concatenate([limits, np.zeros(k)])
    best, best_value = np.zeros(k), 0.0
    picks = np.array(list(itertools.combinations(range(rows.shape[0]), k)))
    mats = rows[picks]
    ok = np.abs(np.linalg.det(mats)) > 1e-12
    if not ok.any():
        return best
    points = np.linalg.solve(mats[ok], rhs[picks[ok]][..., None])[..., 0]
    feasible = np.all(points @ rows.T <= rhs + 1e-9, axis=1)
    if feasible.any():
        values = points[feasible] @ objective
        i = int(np.argmax(values))
        if values[i] > best_value:
            best = np.maximum(points[feasible][i], 0.0)
    return best


def _posterior(corpus_hist: tuple[int, ...], junk_hist: F64) -> tuple[float, ...]:
    """``1 - f_junk / f_corpus`` at each edge (``junk_hist``: the misaligned pairs' estimated
    share of the corpus in each bin): densities smoothed over ±5 bins, clipped to [0, 1],
    then the closest non-decreasing curve (a higher score is never less likely a
    translation), weighted by the corpus' mass so that sparse tails do not bend it."""
    kernel = np.ones(_SMOOTH_BINS) / _SMOOTH_BINS
    f_c = np.convolve(np.asarray(corpus_hist, np.float64), kernel, mode="same")
    f_n = np.convolve(junk_hist, kernel, mode="same")
    f_c /= max(f_c.sum(), 1.0)
    p_junk = np.divide(f_n, f_c, out=np.ones_like(f_c), where=f_c > 0)
    p_bins = _isotonic(np.clip(1.0 - p_junk, 0.0, 1.0), f_c + 1e-12)
    at_edges = np.concatenate([[p_bins[0]], (p_bins[:-1] + p_bins[1:]) / 2, [p_bins[-1]]])
    return tuple(round(float(x), 6) for x in at_edges)


def _isotonic(values: F64, weights: F64) -> F64:
    """The weighted least-squares non-decreasing fit (pool adjacent violators)."""
    means: list[float] = []
    mass: list[float] = []
    sizes: list[int] = []
    for v, w in zip(values.tolist(), weights.tolist(), strict=True):
        means.append(v)
        mass.append(w)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m = mass[-2] + mass[-1]
            means[-2] = (means[-2] * mass[-2] + means[-1] * mass[-1]) / m
            mass[-2] = m
            sizes[-2] += sizes[-1]
            del means[-1], mass[-1], sizes[-1]
    return np.repeat(np.asarray(means), sizes)


# ---------------------------------------------------------------------------------------------
# One side saying more than the other


@dataclass(frozen=True)
class PartialFit:
    """How a corpus' translations spread in *which side says more*: two signs of it, each in
    the corpus' own spreads, and how they go together.

    The signs are ``z``, the length ratio's distance from the corpus' centre in its spreads
    (:meth:`spr_data.qa.rules.LengthRatioFit.z`, source longer positive), and ``d =
    s(tgt|src) - s(src|tgt)``, the two directions' difference (positive where the source's
    words are the worse explained), in spreads of ``floor + per_unit / (length + 1)``: a mean
    over fewer tokens is noisier. A target cut to its half, or a sentence appended to the
    source, moves both one way; a sentence appended to the target or a source cut, both the
    other. For translations, ``u = (z + d) / (√(2 + 2ρ) · scale)``, ``d`` in its spreads, is
    about a standard normal (ρ: their correlation: a longer source has more words the target
    does not explain). Fitted like the length ratio: on the rows within 3 spreads of both, 4
    rounds (sigma clipping), so that junk to one side neither moves the centre nor widens the
    spread; then ``u``'s own spread (its ``scale``), on the rows within :attr:`U_CLIP` of it.

    Why both: each alone tells such junk from translations poorly (the directions' difference
    as a z-score lost 1.77% of the real pairs with no junk at 3 spreads, 0.56% at 4); together,
    and only where both agree, it catches appended and cut sides the length rule and
    ``align_score`` miss (docs/quality.md, *One side says more*). A corpus of short, loosely
    translated pairs (Tatoeba) spreads widely and is left nearly alone: the fit, not a constant,
    decides how far is far.
    """

    center: float
    floor: float
    per_unit: float
    rho: float
    rows: int
    #: ``u``'s own spread, fitted on it alone (clipped at :attr:`U_CLIP`)
    scale: float = 1.0

    #: fewer rows within the spreads than this give no fit (as the length ratio's)
    MIN_ROWS: ClassVar[int] = 200
    CLIP: ClassVar[float] = 3.0
    ROUNDS: ClassVar[int] = 4
    #: the least variance of ``d`` (a corpus of one repeated pair has none)
    MIN_VARIANCE: ClassVar[float] = 1e-4
    #: ``u``'s spread is fitted on the rows within this many of its spreads: junk a little
    #: beyond the translations (a Korean target cut to its half: 2-3 spreads) widens a spread
    #: clipped at 3 and hides itself (measured on the quality sweep, at 4 spreads: appended
    #: and cut sides caught 0.615 / 0.575 / 0.597 clipped at 3, 0.647 / 0.606 / 0.633 at 2)
    U_CLIP: ClassVar[float] = 2.0

    @classmethod
    def of(cls, d: NDArray[Any], z: NDArray[Any], length: NDArray[Any]) -> PartialFit | None:
        """The fit on the pairs the alignment keeps (junk among them), or None where fewer
        than :attr:`MIN_ROWS` finite ones remain."""
        d, z, length = (np.asarray(v, np.float64) for v in (d, z, length))
        ok = np.isfinite(d) & np.isfinite(z) & np.isfinite(length)
        d, z, length = d[ok], z[ok], length[ok]
        if d.size < cls.MIN_ROWS:
            return None
        fit = cls(float(np.median(d)), max(float(np.var(d)), cls.MIN_VARIANCE), 0.0, 0.0,
                  int(d.size))
        inside = np.ones(d.size, bool)
        for _ in range(cls.ROUNDS):
            inside = (np.abs(fit.d_spreads(d, length)) < cls.CLIP) & (np.abs(z) < cls.CLIP)
            if inside.sum() < cls.MIN_ROWS:
                return None
            center = float(np.mean(d[inside]))
            dev2 = (d[inside] - center) ** 2 / _clipped_variance(cls.CLIP)
            design = np.column_stack([np.ones(dev2.size), 1.0 / (length[inside] + 1.0)])
            floor, per_unit = (float(v) for v in np.linalg.lstsq(design, dev2, rcond=None)[0])
            if per_unit < 0.0:  # no length dependence shows: the variance is one number
                floor, per_unit = float(np.mean(dev2)), 0.0
            fit = cls(center, max(floor, cls.MIN_VARIANCE), per_unit, 0.0, int(d.size))
        spreads = fit.d_spreads(d[inside], length[inside])
        # one template's pairs may hold one length ratio: no spread, no correlation (and no
        # warning from numpy dividing by a zero deviation)
        varies = np.std(z[inside]) > 0 and np.std(spreads) > 0
        rho = float(np.corrcoef(z[inside], spreads)[0, 1]) if varies else 0.0
        fit = dataclasses.replace(fit, rho=float(np.clip(rho, -0.9, 0.9)))
        u = fit.u(d, z, length)
        scale = 1.0
        for _ in range(cls.ROUNDS):
            inner = u[np.abs(u) < cls.U_CLIP * scale]
            if inner.size < cls.MIN_ROWS:
                break
            scale = math.sqrt(float(np.mean(inner ** 2)) / _clipped_variance(cls.U_CLIP))
        if not (math.isfinite(scale) and scale > math.sqrt(cls.MIN_VARIANCE)):
            return None  # the pairs do not spread (one pair repeated): nothing to tell by
        return dataclasses.replace(fit, scale=scale)

    def d_spreads(self, d: NDArray[Any], length: NDArray[Any]) -> F64:
        """``d`` from the centre, in its spreads at each pair's length."""
        var = np.maximum(self.floor + self.per_unit / (np.asarray(length, np.float64) + 1.0),
                         self.MIN_VARIANCE)
        out: F64 = (np.asarray(d, np.float64) - self.center) / np.sqrt(var)
        return out

    def u(self, d: NDArray[Any], z: NDArray[Any], length: NDArray[Any]) -> F64:
        """Per pair, how far one side says more than the other, in spreads (source more:
        positive); NaN where a sign is missing."""
        out: F64 = ((np.asarray(z, np.float64) + self.d_spreads(d, length))
                    / (math.sqrt(2.0 + 2.0 * self.rho) * self.scale))
        return out


def _clipped_variance(c: float) -> float:
    """The variance of a standard normal cut at ±c."""
    return 1.0 - 2.0 * c * math.exp(-c * c / 2.0) / (math.sqrt(2.0 * math.pi)
                                                        * math.erf(c / math.sqrt(2.0)))


# ---------------------------------------------------------------------------------------------
# Runs of rows whose targets are a line off


def shifted_runs(aligner: LexicalAligner, src: pa.Array | pa.ChunkedArray,
                 tgt: pa.Array | pa.ChunkedArray, scores: NDArray[Any], *,
                 threshold: NDArray[Any] | float = float("-inf"),
                 trained_cross: NDArray[np.bool_] | None = None,
                 check: NDArray[np.bool_] | None = None, min_links: int = 2,
                 gap: int = 1) -> NDArray[np.bool_]:
    """Rows in a run where the pairs are one line out of step (a Moses pair of files where a
    line went missing on one side): per row, true if it is in such a run.

    Rows are in file order and ``scores`` are their own ``align_score``. Between each row and
    the one before, the two *cross* pairs are scored: this source with the previous target,
    and the previous source with this target. A cross pair is *strong* where it scores above
    both rows' own pairs (the neighbour's line translates this one better than its own, and
    the neighbour's own pair is worse still) and is a translation itself (at least
    ``threshold``, the row's align threshold), *weak* where it beats at least one of them. A
    run is a sequence of weak-or-strong links, in one direction, with at most ``gap`` other
    links between them; a run with ``min_links`` strong links flags every row it touches.
    Where ``trained_cross`` is true for a row, its pair (previous source, this target) is no
    link: the model was trained on that cross pair, as a shifted negative, so it scores high
    whatever the files hold. With ``check``, only the links into rows where it is true are
    scored (the others are no link): ``clean`` checks the links that touch a row not surely a
    translation, since two sure translations side by side are no slip.

    Why a run and not the cross score alone: where a corpus lists near-paraphrases side by
    side (Tatoeba: "That's my coat." / "That's my goal."), a single cross pair beats a real
    pair now and then, but two strong ones out of step in the same direction almost never
    do. Measured on 8,000-row mixes with 10% and 50% junk (strong ≥ 2, gap 1): real pairs
    flagged 0-0.1% (Tatoeba eng-cmn, eng-ben, Multi30k en-de, the OpenNMT WMT sample);
    rows of 5-20-line shifted blocks flagged 0.32-1.00 (0.72-0.74 on Tatoeba eng-cmn, where
    the absolute score alone caught 0.43-0.57); with the threshold, end to end in ``clean``,
    such blocks are caught at 0.73-1.00 (0.35-0.95 before). Requiring strong links only, or three of
    them, caught 10-25 points less; counting weak links as strong flagged 10-23% of Tatoeba
    eng-ben's real pairs (an English sentence listed with several translations in a row).
    """
    n = len(scores)
    down = np.full(n, -np.inf)
    up = np.full(n, -np.inf)
    if n >= 3 and min_links > 0:
        scored = np.arange(1, n) if check is None else np.flatnonzero(check[1:]) + 1
        if scored.size:
            here = pa.array(scored)
            before = pa.array(scored - 1)
            down[scored] = aligner.score(src.take(here), tgt.take(before))  # this source, the
            up[scored] = aligner.score(src.take(before), tgt.take(here))    # previous target; back
    return shifted_from_cross(scores, down, up, threshold=threshold,
                              trained_cross=trained_cross, min_links=min_links, gap=gap)


def shifted_from_cross(scores: NDArray[Any], down: NDArray[Any], up: NDArray[Any], *,
                       threshold: NDArray[Any] | float = float("-inf"),
                       trained_cross: NDArray[np.bool_] | None = None, min_links: int = 2,
                       gap: int = 1) -> NDArray[np.bool_]:
    """:func:`shifted_runs` from the cross scores already made: ``down[i]`` is this source
    with the previous target, ``up[i]`` the previous source with this target (``-inf``: no
    link). Numbers only, so that a caller can score the cross pairs slice by slice and decide
    the runs over all its rows."""
    n = len(scores)
    flagged = np.zeros(n, dtype=bool)
    if n < 3 or min_links <= 0:
        return flagged
    own = np.asarray(scores, dtype=np.float64)
    own_previous = np.r_[-np.inf, own[:-1]]
    best_own = np.maximum(own, own_previous)
    worst_own = np.minimum(own, own_previous)
    untrained = np.ones(n, dtype=bool)
    if trained_cross is not None:
        untrained = ~np.asarray(trained_cross, dtype=bool)
    for cross, usable in ((down, True), (up, untrained)):
        cross64 = np.asarray(cross).astype(np.float64)
        strong = (cross64 > best_own) & (cross64 >= threshold)
        weak = cross64 > worst_own
        strong &= usable
        weak &= usable
        strong[0] = weak[0] = False
        links = np.flatnonzero(weak | strong)
        if links.size == 0:
            continue
        # runs: weak links at most ``gap`` links apart
        starts = np.r_[0, np.flatnonzero(np.diff(links) > gap + 1) + 1]
        ends = np.r_[starts[1:], links.size] - 1
        n_strong = np.add.reduceat(strong[links].astype(np.int64), starts)
        for first, last in zip(links[starts[n_strong >= min_links]],
                               links[ends[n_strong >= min_links]], strict=True):
            flagged[first - 1:last + 1] = True  # a link joins its row and the one before
    return flagged
