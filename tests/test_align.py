"""Alignment score: tokens, IBM Model 1 tables, separation of re-paired pairs on real corpora,
determinism, persistence, and the edge cases (empty sides, unknown words)."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import spr_data.qa.align as align_module
from spr_data.errors import InputError, SprDataError
from spr_data.pipeline.executor import LocalExecutor
from spr_data.qa.align import (
    EMPTY_SCORE,
    IDENTITY_LINK,
    KNOWN_COUNT,
    UNK_ID,
    AlignerOptions,
    LexicalAligner,
    Vocabulary,
    _known_share,
    _with_identity_links,
    alignment_tokens,
    final_punctuation,
    merged_counts,
    punct_weight,
    size_from_counts,
    stemmed,
    training_rows,
    training_size,
    word_counts,
)
from spr_data.qa.align import _PackedHash as PackedHash

# ---------------------------------------------------------------------------------------------
# Real corpora


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _tatoeba(path: Path) -> tuple[pa.Array, pa.Array]:
    """``eng<TAB>other[<TAB>attribution]``; a BOM on line 1 and blank lines are skipped."""
    src, tgt = [], []
    for line in _lines(path):
        line = line.removeprefix("\ufeff")
        if not line:
            continue
        cols = line.split("\t")
        src.append(cols[0])
        tgt.append(cols[1])
    return pa.array(src), pa.array(tgt)


def _line_pair(src: Path, tgt: Path) -> tuple[pa.Array, pa.Array]:
    a, b = _lines(src), _lines(tgt)
    assert len(a) == len(b)
    return pa.array(a), pa.array(b)


CORPORA = {
    # name: (loader, languages, least recall of re-paired pairs at <= 3% real pairs rejected)
    "tatoeba-eng-cmn": (lambda c: _tatoeba(c / "parallel/tatoeba_manythings_eng-cmn.tsv.gz"),
                        ("en", "zh"), 0.95),
    "multi30k-en-de": (lambda c: _line_pair(c / "parallel/multi30k/train.en.gz",
                                            c / "parallel/multi30k/train.de.gz"),
                       ("en", "de"), 0.98),
    # 4,387 pairs (219 re-paired): a small corpus to learn from, and a noisy figure
    "tatoeba-eng-ben": (lambda c: _tatoeba(c / "parallel/tatoeba_manythings_eng-ben.tsv"),
                        ("en", "bn"), 0.90),
    # real web-crawled pairs: several percent of the *real* pairs are misaligned or in a third
    # language, so they take up the 3% of real rejections themselves
    "opennmt-en-de": (lambda c: _line_pair(c / "parallel/opennmt_wmt_en-de.train.en.gz",
                                           c / "parallel/opennmt_wmt_en-de.train.de.gz"),
                      ("en", "de"), 0.50),
}


def repair(src: pa.Array, tgt: pa.Array, *, share: float = 0.05,
           seed: int = 1) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Give ``share`` of the pairs the target of another random pair; return the mask of them."""
    n = len(src)
    rng = np.random.default_rng(seed)
    bad = np.sort(rng.choice(n, size=round(share * n), replace=False))
    other = rng.integers(0, n - 1, size=bad.size)
    other += other >= bad  # any row but itself
    rows = np.arange(n)
    rows[bad] = other
    mask = np.zeros(n, dtype=bool)
    mask[bad] = True
    return src, tgt.take(pa.array(rows)), mask


def recall_at(scores: np.ndarray, bad: np.ndarray, max_real_rejected: float = 0.03) -> float:
    """Share of ``bad`` pairs below the highest threshold that rejects at most
    ``max_real_rejected`` of the other pairs (rejected means ``score < threshold``)."""
    real = np.sort(scores[~bad])
    threshold = real[math.floor(max_real_rejected * real.size)]
    assert np.mean(real < threshold) <= max_real_rejected
    return float(np.mean(scores[bad] < threshold))


Trained = dict[str, tuple[LexicalAligner, pa.Array, pa.Array, np.ndarray]]


def _train_each(corpora: Path, **options: Any) -> Trained:
    """Each corpus with 5% re-paired pairs, and a model trained on that mixed corpus."""
    out = {}
    for name, (load, (src_lang, tgt_lang), _) in CORPORA.items():
        src, tgt, bad = repair(*load(corpora))
        model = LexicalAligner.train(src, tgt, AlignerOptions(src_lang, tgt_lang, **options))
        out[name] = (model, src, tgt, bad)
    return out


@pytest.fixture(scope="module")
def trained(corpora: Path) -> Trained:
    """The default options: words cut to their stems."""
    return _train_each(corpora)


@pytest.fixture(scope="module")
def trained_whole_words(corpora: Path) -> Trained:
    """Whole words (``stem_chars = 0``), as models were trained before the stems."""
    return _train_each(corpora, stem_chars=0)


@pytest.mark.parametrize("name", list(CORPORA))
def test_repaired_pairs_score_below_real_ones(trained, name, record_property):
    model, src, tgt, bad = trained[name]
    scores = model.score(src, tgt)
    assert scores.dtype == np.float32
    recall = recall_at(scores, bad)
    record_property("recall_at_3pct_real_rejected", recall)
    print(f"{name}: recall {recall:.3f} of {bad.sum()} re-paired pairs at <= 3% real rejected")
    assert recall >= CORPORA[name][2]


def _scored_as(model: LexicalAligner, **options: float) -> LexicalAligner:
    """The same tables scored with other options."""
    return LexicalAligner(dataclasses.replace(model.options, **options), model.src_vocab,
                          model.tgt_vocab, model.keys, model.t_tgt_given_src,
                          model.t_src_given_tgt, model.null_tgt, model.null_src,
                          model.length_log_ratio, src_counts=model.src_counts,
                          tgt_counts=model.tgt_counts, train_pairs=model.train_pairs)


def _recall_with_and_without_cap(models: Trained) -> tuple[list[float], list[float]]:
    with_cap, without = [], []
    for model, src, tgt, bad in models.values():
        with_cap.append(recall_at(model.score(src, tgt), bad, 0.01))
        plain = _scored_as(model, fertility=0.0, idf_power=0.0)
        without.append(recall_at(plain.score(src, tgt), bad, 0.01))
    return with_cap, without


def test_a_word_seen_in_one_pair_explains_no_more_than_its_share(trained, trained_whole_words):
    """A rare word of a pair that is not a translation takes EM's mass for every token of the
    other side; capped to its share (``fertility``) and with rare words weighing more
    (``idf_power``), re-paired pairs fall further below the real ones: measured here at 1%
    real pairs rejected, with whole words 0.758 -> 0.775 of them caught over the four corpora
    (0.82 -> 0.88 on Tatoeba eng-cmn). With stems (``stem_chars``) rare forms are rarer, and
    the cap gains less on the mean: 0.780 -> 0.790, 0.853 -> 0.909 on Tatoeba eng-cmn; in the
    whole clean, the cap and the weights still take real pairs lost under junk from 2.00 to
    1.50% (docs/quality.md)."""
    with_cap, without = _recall_with_and_without_cap(trained_whole_words)
    assert np.mean(with_cap) >= np.mean(without) + 0.01, (with_cap, without)
    with_cap, without = _recall_with_and_without_cap(trained)
    assert np.mean(with_cap) >= np.mean(without) + 0.005, (with_cap, without)
    assert with_cap[0] >= without[0] + 0.03, (with_cap, without)  # Tatoeba eng-cmn
    # a sentence of common characters against a word the model cannot know: trained each
    # direction alone, each character's best link is that word, but it may serve only a few
    model = LexicalAligner.train(*trained["tatoeba-eng-cmn"][1:3],
                                 AlignerOptions("en", "zh", agreement=False))
    src, tgt = pa.array(["He saluted the lady."]), pa.array(["今天没有昨天潮湿。"])
    capped = model.score_directions(src, tgt)[0][0]
    uncapped = _scored_as(model, fertility=0.0).score_directions(src, tgt)[0][0]
    assert capped < uncapped - 0.1  # the cap binds: several characters take a weaker link
    np.testing.assert_allclose(model.score(src, tgt), reference_scores(model, src, tgt),
                               rtol=1e-5, atol=1e-5)
    # trained by agreement (the default), the rare word never took the characters: no
    # character links to it above the floor, capped or not
    agreed, *_ = trained["tatoeba-eng-cmn"]
    floor = float(np.log(agreed.options.floor))
    for scored in (agreed, _scored_as(agreed, fertility=0.0)):
        assert scored.score_directions(src, tgt)[0][0] == pytest.approx(floor, abs=1e-5)
    assert floor < capped - 0.5


def test_opennmt_line3_is_misaligned_and_scores_low(trained):
    model, src, tgt, bad = trained["opennmt-en-de"]
    scores = model.score(src, tgt)
    assert src[2].as_py().startswith("&quot; Two soldiers came up to me")
    real = scores[~bad]
    assert np.mean(real < scores[2]) < 0.05  # bottom few percent of the real pairs
    assert src[4].as_py() == "" and scores[4] == EMPTY_SCORE  # line 5: empty English side


def test_translations_of_each_other_score_high(trained):
    model, *_ = trained["multi30k-en-de"]
    scores = model.score(pa.array(["A black dog runs on the grass.", "Two men are cooking."]),
                         pa.array(["Ein schwarzer Hund rennt auf dem Gras.",
                                   "Ein Hund springt über einen Zaun."]))
    assert scores[0] > scores[1] + 1.0


# ---------------------------------------------------------------------------------------------
# Tokens


def test_tokens_split_by_script_and_lowercase():
    texts = pa.array([
        "Hello, World! It's 3.5kg &quot;now&quot;",
        "東京タワーへ行きます",
        "ภาษา ไทย",
        "Größe İSTANBUL বাংলা।ভাষা",
        "",
        None,
        "!!! ...",
    ])
    toks = alignment_tokens(texts)
    rows = [toks.tokens.to_pylist()[a:b] for a, b in
            zip(toks.offsets[:-1], toks.offsets[1:], strict=True)]
    assert rows[0] == ["hello", "world", "it", "s", "3", "5", "kg", "now"]
    assert rows[1] == list("東京タワーへ行きます")
    # a Thai letter or mark means nothing alone: up to three code points make a unit
    assert rows[2] == ["ภาษ", "า", "ไทย"]
    # their digits are digit runs like any others
    thai_year = alignment_tokens(pa.array(["ปี ๒๕๖๓ 1000"])).tokens.to_pylist()
    assert thai_year == ["ปี", "๒๕๖๓", "1000"]
    assert rows[3][0] == "größe" and rows[3][2:] == ["বাংলা", "ভাষা"]
    assert rows[4] == rows[5] == rows[6] == []
    assert len(toks) == 7


def test_tokens_cut_and_sliced_input():
    texts = pa.array(["x y", "a b c d e", "f g"]).slice(1, 2)
    toks = alignment_tokens(texts, max_tokens=3)
    assert toks.lengths.tolist() == [3, 2]
    assert toks.tokens.to_pylist() == ["a", "b", "c", "f", "g"]
    chunked = pa.chunked_array([pa.array([None, "p q r s", ""]), pa.array(["t", None, "u v"])])
    toks = alignment_tokens(chunked, max_tokens=2)
    assert toks.lengths.tolist() == [0, 2, 0, 1, 0, 2]
    assert toks.tokens.to_pylist() == ["p", "q", "t", "u", "v"]
    assert alignment_tokens(chunked).lengths.tolist() == [0, 4, 0, 1, 0, 2]


def test_tokens_cut_to_their_stems():
    """``stem`` keeps each word's first code points (not bytes): inflected forms meet, and
    scripts tokenized by character are as they were."""
    texts = pa.array(["Informationen über HÄUSER und Haus", "東京タワーへ", "ভাষাগুলো ভাষা"])
    toks = alignment_tokens(texts, stem=4)
    rows = [toks.tokens.to_pylist()[a:b] for a, b in
            zip(toks.offsets[:-1], toks.offsets[1:], strict=True)]
    assert rows[0] == ["info", "über", "häus", "und", "haus"]
    assert rows[1] == list("東京タワーへ")
    assert rows[2] == ["ভাষা", "ভাষা"]
    # a stem longer than every word cuts nothing
    assert alignment_tokens(texts, stem=50).tokens == alignment_tokens(texts, stem=0).tokens


def test_a_hangul_block_counts_as_its_letters_in_a_stem():
    """A Korean word is a few syllable blocks of 2-3 letters with its particles attached: 6
    letters keep the stem (기술의 "of the technique" -> 기술, 사진을 "the photo" -> 사진), a block
    is never cut, and a word keeps one block at least."""
    words = pa.array(["기술의", "사진을", "도로에서", "고등학교를", "한", "government",
                      "abc기술의", "學校"], pa.large_string())
    assert stemmed(words, 6).to_pylist() == ["기술", "사진", "도로에", "고등", "한", "govern",
                                             "abc기", "學校"]
    assert stemmed(words, 1).to_pylist()[:2] == ["기", "사"]
    # models saved before counted a block as one code point
    assert stemmed(words, 6, hangul_letters=False).to_pylist()[:3] == ["기술의", "사진을",
                                                                      "도로에서"]


def test_stemming_the_distinct_words_gives_the_tokens_ids_and_counts():
    """Scoring and counting stem each distinct word once: the same ids as stemming every
    token and looking it up, and the same counts per stem (two words with one stem add up)."""
    texts = pa.array(["Häuser und Hausen, HÄUSER!", None, "", "东京 Häuser 42 häusern",
                      "Informationen informieren"])
    vocab = Vocabulary(pa.array(["häu", "inf", "und", "东"], pa.large_string()))
    for stem in (0, 3):
        toks = alignment_tokens(texts, max_tokens=4, stem=stem)
        ids = align_module._encode(texts, vocab, 4, stem)
        assert ids.offsets.tolist() == toks.offsets.tolist()
        assert ids.ids.tolist() == vocab.encode(toks.tokens).tolist()
        counted = dict(word_counts(texts, max_tokens=4, stem=stem).iter_rows())
        tokens = toks.tokens.to_pylist()
        assert counted == {t: tokens.count(t) for t in set(tokens)}
    # Häuser, HÄUSER and the third row's Häuser (its häusern is past the 4 tokens)
    assert dict(word_counts(texts, max_tokens=4, stem=3).iter_rows())["häu"] == 3


def test_non_string_input_is_refused():
    with pytest.raises(InputError, match="string"):
        alignment_tokens(pa.array([1, 2]))


# ---------------------------------------------------------------------------------------------
# Model 1 itself


@pytest.mark.parametrize(("max_entries", "budget"), [(10**6, 10**6), (10**6, 50), (300, 50),
                                                     (40, 30)])
def test_the_table_keeps_the_word_pairs_that_co_occur_most(max_entries: int, budget: int):
    """The table's word pairs are every pair that co-occurs, or, past ``max_entries``, those
    co-occurring at least ``c`` times, ``c`` the smallest count that fits; counted by ranges
    of source words (many here: the small budgets) to the same keys as counting all at once."""
    rng = np.random.default_rng(7)
    src_size, tgt_size = 50, 60
    pairs = [(rng.zipf(1.5, rng.integers(1, 8)) % src_size,
              rng.zipf(1.5, rng.integers(1, 8)) % tgt_size) for _ in range(400)]
    seen: dict[int, int] = {}
    for s, t in pairs:
        for e in s:
            for f in t:
                seen[int(e) * tgt_size + int(f)] = seen.get(int(e) * tgt_size + int(f), 0) + 1
    floor = next(c for c in range(1, max(seen.values()) + 2)
                 if sum(n >= c for n in seen.values()) <= max_entries)
    want = sorted(k for k, n in seen.items() if n >= floor)

    def ragged(sides: list[np.ndarray]) -> Any:
        offsets = np.cumsum([0, *(len(x) for x in sides)]).astype(np.int64)
        return align_module._Ragged(offsets, np.concatenate(sides).astype(np.int32))

    got = align_module._table_keys(ragged([s for s, _ in pairs]), ragged([t for _, t in pairs]),
                                   src_size, tgt_size, max_entries=max_entries, budget=budget)
    assert got.tolist() == want
    assert (floor > 1) == (max_entries < len(seen))


def test_the_parts_counts_are_summed_in_chunks_to_the_same_bits(tmp_path: Path):
    """The driver adds each part's counts file a chunk of word pairs at a time (it never
    holds a whole part beside the totals); the totals are the bits of adding whole arrays in
    part order. A file of the wrong size is an error, not a short sum."""
    rng = np.random.default_rng(3)
    n_keys, tgt_size, src_size = 1_001, 40, 30
    parts = [(rng.random(n_keys) + 1j * rng.random(n_keys), rng.random(tgt_size),
              rng.random(src_size)) for _ in range(3)]
    sums = [np.zeros(n_keys), np.zeros(n_keys), np.zeros(tgt_size), np.zeros(src_size)]
    for i, (counts, null_f, null_e) in enumerate(parts):
        path = tmp_path / f"part-{i}.bin"
        with open(path, "wb") as f:
            for values in (counts, null_f, null_e):
                values.tofile(f)
        align_module._add_part(path, *sums, chunk=64)  # 1,001 = 15 chunks of 64 and one of 41
    whole = [sum((p[0].real for p in parts), np.zeros(n_keys)),
             sum((p[0].imag for p in parts), np.zeros(n_keys)),
             sum((p[1] for p in parts), np.zeros(tgt_size)),
             sum((p[2] for p in parts), np.zeros(src_size))]
    for got, want in zip(sums, whole, strict=True):
        assert got.tobytes() == want.tobytes()
    short = tmp_path / "short.bin"
    short.write_bytes((tmp_path / "part-0.bin").read_bytes()[:-8])
    with pytest.raises(SprDataError, match=r"short\.bin holds 16,568 bytes, not 16,576"):
        align_module._add_part(short, *sums, chunk=64)


def test_counts_by_agreement_are_one_number_a_word_pair_summed_to_the_same_bits(
        tmp_path: Path):
    """After EM's first round by agreement, both directions' count of a word pair is one
    number: a part writes it once (8 bytes a word pair, not 16) and the driver sums it once,
    to the bits of adding whole arrays in part order; a file of the two-count size is an
    error here."""
    rng = np.random.default_rng(5)
    n_keys, tgt_size, src_size = 1_001, 40, 30
    parts = [(rng.random(n_keys), rng.random(tgt_size), rng.random(src_size))
             for _ in range(3)]
    fe, null_f, null_e = np.zeros(n_keys), np.zeros(tgt_size), np.zeros(src_size)
    for i, values in enumerate(parts):
        path = tmp_path / f"part-{i}.bin"
        with open(path, "wb") as f:
            for v in values:
                v.tofile(f)
        align_module._add_part(path, fe, None, null_f, null_e, chunk=64)
    for got, k in ((fe, 0), (null_f, 1), (null_e, 2)):
        want = sum((p[k] for p in parts), np.zeros(got.size))
        assert got.tobytes() == want.tobytes()
    two = tmp_path / "two.bin"
    with open(two, "wb") as f:
        for v in (parts[0][0] + 1j * parts[0][0], parts[0][1], parts[0][2]):
            v.tofile(f)
    with pytest.raises(SprDataError, match=r"two\.bin holds 16,576 bytes, not 8,568"):
        align_module._add_part(two, fe, None, null_f, null_e, chunk=64)


def test_the_first_rounds_counts_are_model_1s_from_a_uniform_table():
    """EM's first round does not read its table: from a uniform one, each target word's mass
    is split evenly over the pair's source words and NULL, each source word's over the target
    words and NULL. The counts it adds are those of that definition, written as loops here."""
    rng = np.random.default_rng(5)
    pairs = [(rng.integers(0, 6, rng.integers(1, 5)), rng.integers(0, 7, rng.integers(1, 6)))
             for _ in range(60)]
    src_size, tgt_size = 6, 7
    ref_fe: dict[tuple[int, int], float] = {}
    ref_ef: dict[tuple[int, int], float] = {}
    ref_null_f, ref_null_e = np.zeros(tgt_size), np.zeros(src_size)
    for s, t in pairs:
        for e in s:
            for f in t:
                ref_fe[e, f] = ref_fe.get((e, f), 0.0) + 1 / (len(s) + 1)
                ref_ef[e, f] = ref_ef.get((e, f), 0.0) + 1 / (len(t) + 1)
        for f in t:
            ref_null_f[f] += 1 / (len(s) + 1)
        for e in s:
            ref_null_e[e] += 1 / (len(t) + 1)

    def ragged(sides: list[np.ndarray]) -> Any:
        offsets = np.cumsum([0, *(len(x) for x in sides)]).astype(np.int64)
        return align_module._Ragged(offsets, np.concatenate(sides).astype(np.int32))

    src, tgt = ragged([s for s, _ in pairs]), ragged([t for _, t in pairs])
    keys = np.array(sorted(e * tgt_size + f for e, f in ref_fe), np.uint32)
    index = PackedHash(keys, np.arange(keys.size, dtype=np.uint32), absent=keys.size, load=0.5)
    counts = np.zeros(keys.size + 1, np.complex128)
    null_f, null_e = np.zeros(tgt_size), np.zeros(src_size)
    for block in align_module._blocks(src, tgt, tgt_size, budget=50):  # several blocks
        align_module._uniform_counts(block, index.find(block.keys).astype(np.intp), counts,
                                     null_f, null_e)
    at = {(int(k) // tgt_size, int(k) % tgt_size): i for i, k in enumerate(keys)}
    np.testing.assert_allclose([counts.real[at[k]] for k in ref_fe], list(ref_fe.values()))
    np.testing.assert_allclose([counts.imag[at[k]] for k in ref_ef], list(ref_ef.values()))
    np.testing.assert_allclose(null_f, ref_null_f)
    np.testing.assert_allclose(null_e, ref_null_e)
    assert counts[-1] == 0  # every word pair is in the table


def test_a_later_round_by_agreement_counts_what_both_directions_believe(tmp_path: Path):
    """After the first round, by agreement, each co-occurrence adds the product of its two
    posteriors, how much of the target token the source token explains and of the source
    token the target token, to its word pair, one count for both directions. The part's
    counts are those of that definition, written as loops here, over several blocks."""
    rng = np.random.default_rng(7)
    pairs = [(rng.integers(0, 6, rng.integers(1, 5)), rng.integers(0, 7, rng.integers(1, 6)))
             for _ in range(60)]
    src_size, tgt_size = 6, 7
    keys = np.array(sorted({int(e) * tgt_size + int(f) for s, t in pairs for e in s for f in t}),
                    np.uint32)
    # as the table holds them (float32)
    t_fe = rng.uniform(0.05, 1.0, keys.size).astype(np.float32).astype(np.float64)
    t_ef = rng.uniform(0.05, 1.0, keys.size).astype(np.float32).astype(np.float64)
    null_f, null_e = rng.uniform(0.05, 1.0, tgt_size), rng.uniform(0.05, 1.0, src_size)
    at = {int(k): i for i, k in enumerate(keys)}
    want = np.zeros(keys.size + 1)
    want_null_f, want_null_e = np.zeros(tgt_size), np.zeros(src_size)
    for s, t in pairs:
        link = [[at[int(e) * tgt_size + int(f)] for f in t] for e in s]
        den_f = [sum(t_fe[link[i][j]] for i in range(len(s))) + null_f[f] for j, f in enumerate(t)]
        den_e = [sum(t_ef[link[i][j]] for j in range(len(t))) + null_e[e] for i, e in enumerate(s)]
        for i in range(len(s)):
            for j in range(len(t)):
                k = link[i][j]
                want[k] += (t_fe[k] / den_f[j]) * (t_ef[k] / den_e[i])
        for j, f in enumerate(t):
            want_null_f[f] += null_f[f] / den_f[j]
        for i, e in enumerate(s):
            want_null_e[e] += null_e[e] / den_e[i]
    # the files _em leaves for its tasks: the pairs, the index, and round 1's table
    for side, rows in (("src", [s for s, _ in pairs]), ("tgt", [t for _, t in pairs])):
        np.save(tmp_path / f"{side}_offsets.npy",
                np.cumsum([0, *(len(x) for x in rows)]).astype(np.int64))
        np.save(tmp_path / f"{side}_ids.npy", np.concatenate(rows).astype(np.int32))
    index = PackedHash(keys, np.arange(keys.size, dtype=np.uint32), absent=keys.size, load=0.5)
    np.save(tmp_path / "slots.npy", index.slots)
    table = np.zeros(keys.size + 1, np.complex64)
    table.real[:-1], table.imag[:-1] = t_fe, t_ef
    np.save(tmp_path / "table-1.npy", table)
    np.save(tmp_path / "null-1.npy", np.stack([np.r_[null_f], np.r_[null_e, 0.0]]))
    part = align_module._EPart(0, 0, len(pairs), 0, str(tmp_path), keys.size, src_size,
                               tgt_size, index.size, 50, True)  # blocks of 50 co-occurrences
    Path(align_module._e_step(part)).unlink()  # the first round finds the table positions
    out = Path(align_module._e_step(dataclasses.replace(part, iteration=1)))
    assert out.stat().st_size == 8 * (keys.size + 1 + tgt_size + src_size)  # one count a pair
    got = np.fromfile(out, np.float64)
    np.testing.assert_allclose(got[:keys.size + 1], want, rtol=1e-12)
    np.testing.assert_allclose(got[keys.size + 1:keys.size + 1 + tgt_size], want_null_f,
                               rtol=1e-12)
    np.testing.assert_allclose(got[keys.size + 1 + tgt_size:], want_null_e, rtol=1e-12)


def test_em_learns_word_translations():
    # the textbook example: only co-occurrence statistics tell "das" = "the"
    src = pa.array(["das haus", "das buch", "ein buch", "das haus ist klein"] * 3)
    tgt = pa.array(["the house", "the book", "a book", "the house is small"] * 3)
    model = LexicalAligner.train(src, tgt, AlignerOptions("de", "en", iterations=10,
                                                          prune_below=0.0))
    s_words = ["<null>", "<unk>", *model.src_vocab.words.to_pylist()]
    t_words = ["<null>", "<unk>", *model.tgt_vocab.words.to_pylist()]
    v = model.tgt_vocab.size
    best: dict[str, str] = {}
    for e in ("das", "haus", "buch", "ein"):
        e_id = s_words.index(e)
        rows = np.flatnonzero(model.keys // v == e_id)
        top = rows[np.argmax(model.t_tgt_given_src[rows])]
        best[e] = t_words[int(model.keys[top] % v)]
    assert best == {"das": "the", "haus": "house", "buch": "book", "ein": "a"}
    # each t(.|e) is a distribution
    sums = np.bincount(model.keys // v, weights=model.t_tgt_given_src)
    assert np.allclose(sums[sums > 0], 1.0, atol=1e-5)


def reference_scores(model: LexicalAligner, src: pa.Array, tgt: pa.Array) -> list[float]:
    """The documented formula, one pair and one word at a time."""
    o = model.options
    s_id = {w: i + 2 for i, w in enumerate(model.src_vocab.words.to_pylist())}
    t_id = {w: i + 2 for i, w in enumerate(model.tgt_vocab.words.to_pylist())}
    v = model.tgt_vocab.size
    link = {(int(k) // v, int(k) % v): float(np.float32((a + b) / 2)) for k, a, b in
            zip(model.keys, model.t_tgt_given_src.astype(float), model.t_src_given_tgt,
                strict=True)}
    for word, e in s_id.items():  # a word written the same on both sides: at least 0.5
        if len(word) >= 3 and word in t_id:
            link[e, t_id[word]] = max(link.get((e, t_id[word]), 0.0), IDENTITY_LINK)
    out = []
    s_tok = alignment_tokens(src, max_tokens=o.max_score_tokens)
    t_tok = alignment_tokens(tgt, max_tokens=o.max_score_tokens)
    stem = o.stem_chars or None  # each word cut to its first stem_chars letters
    s_all = [w[:stem] for w in s_tok.tokens.to_pylist()]
    t_all = [w[:stem] for w in t_tok.tokens.to_pylist()]
    for i in range(len(src)):
        es = [s_id.get(w, UNK_ID) for w in s_all[s_tok.offsets[i]:s_tok.offsets[i + 1]]]
        fs = [t_id.get(w, UNK_ID) for w in t_all[t_tok.offsets[i]:t_tok.offsets[i + 1]]]
        if not es or not fs:
            out.append(EMPTY_SCORE)
            continue
        fwd = _side_mean(fs, es, lambda f, e: link.get((e, f), 0.0), model, "tgt")
        bwd = _side_mean(es, fs, lambda e, f: link.get((e, f), 0.0), model, "src")
        gap = abs(math.log((len(es) + 1) / (len(fs) + 1)) - model.length_log_ratio)
        worse, better = min(fwd, bwd), max(fwd, bwd)
        mean = o.worse_weight * worse + (1 - o.worse_weight) * better
        differ = _ends(src[i].as_py()) != _ends(tgt[i].as_py())
        out.append(mean - o.length_weight * gap - o.punct_weight * differ)
    return out


def _ends(text: str | None) -> str:
    """How a text ends: "?" (a question mark of any script), "!" or "" (anything else)."""
    text = (text or "").rstrip(" \t\"'”’»›)]}）」』】〉》")
    last = text[-1:]
    return "?" if last in "?？؟⸮፧" else "!" if last in "!！" else ""


def _side_mean(tokens: list[int], partners: list[int], link, model: LexicalAligner,
               side: str) -> float:
    """The weighted mean log best link of one side's ``tokens``: each token's best partner
    serves at most ``max(2, ceil(fertility * len(tokens) / len(partners)))`` of them, the
    strongest first (an earlier token on a tie); the others take their second best."""
    o = model.options
    links = [[link(t, p) for p in partners] for t in tokens]
    best = [max(row) for row in links]
    choice = [row.index(b) for row, b in zip(links, best, strict=True)]
    second = [max((x for k, x in enumerate(row) if k != c), default=0.0)
              for row, c in zip(links, choice, strict=True)]
    value = list(best)
    if o.fertility > 0:
        cap = max(2, math.ceil(o.fertility * len(tokens) / len(partners)))
        for c in set(choice):
            mine = sorted((j for j in range(len(tokens)) if choice[j] == c),
                          key=lambda j: (-best[j], j))
            for j in mine[cap:]:
                value[j] = second[j]
    counts = model.tgt_counts if side == "tgt" else model.src_counts
    weights = [1.0] * len(tokens)
    if o.idf_power > 0 and counts is not None:
        weights = [math.log1p(model.train_pairs / (max(int(counts[t]), 1)))
                   ** o.idf_power if t != UNK_ID else 1e-3 for t in tokens]
    total = sum(w * math.log(v + o.floor) for w, v in zip(weights, value, strict=True))
    return total / sum(weights)


@pytest.mark.parametrize(("text", "kind"), [
    ("Is it?", 1), ("你好吗？", 1), ("هل هو؟", 1), ('He asked: "Why?"', 1), ("(Why?) ", 1),
    ("Go!", 2), ("走！」", 2), ("Go.", 0), ("তুমি কেমন আছ।", 0), ("", 0), (None, 0),
    ("A?b", 0), ("1 + 1 = ?!", 2)])
def test_final_punctuation_reads_how_a_text_ends(text: str | None, kind: int):
    assert final_punctuation(pa.array([text], pa.string())).tolist() == [kind]


def test_the_punctuation_weight_follows_the_evidence():
    """A difference that negatives show far more often than corpus pairs costs a pair score;
    one both show alike, or that almost never happens, costs nothing."""
    rng = np.random.default_rng(3)
    corpus, negatives = rng.normal(-1.5, 0.5, 4000), rng.normal(-3.5, 0.8, 1000)
    rare = (np.zeros(4000, bool), rng.random(1000) < 0.002)
    telling = (rng.random(4000) < 0.01, rng.random(1000) < 0.3)
    alike = (rng.random(4000) < 0.2, rng.random(1000) < 0.2)
    assert punct_weight(corpus, telling[0], negatives, telling[1]) > 0.5
    assert punct_weight(corpus, alike[0], negatives, alike[1]) < 0.1
    assert punct_weight(corpus, rare[0], negatives, rare[1]) < 0.1
    assert punct_weight(corpus[:0], telling[0][:0], negatives, telling[1]) == 0.0


def test_scores_match_the_formula(trained):
    model, src, tgt, _ = trained["tatoeba-eng-cmn"]
    rows = pa.array(np.arange(0, len(src), 97))
    s, t = src.take(rows), tgt.take(rows)
    expected = np.asarray(reference_scores(model, s, t), dtype=np.float32)
    np.testing.assert_allclose(model.score(s, t), expected, rtol=1e-5, atol=1e-5)
    fwd, bwd = model.score_directions(s, t)
    assert fwd.shape == bwd.shape == (len(s),)


# ---------------------------------------------------------------------------------------------
# Determinism and persistence


@pytest.fixture(scope="module")
def ben(corpora: Path) -> tuple[pa.Array, pa.Array]:
    return _tatoeba(corpora / "parallel/tatoeba_manythings_eng-ben.tsv")


def test_training_is_bit_identical(ben):
    src, tgt = ben
    opts = AlignerOptions("en", "bn", max_table_entries=20_000, chunk_cooc=5_000)
    first = LexicalAligner.train(src, tgt, opts)
    again = LexicalAligner.train(src, tgt, opts)
    assert first.content_hash == again.content_hash
    assert first.keys.size <= 20_000
    np.testing.assert_array_equal(first.score(src, tgt), again.score(src, tgt))
    # another chunk size (an option, so another hash) sums in another order: nearly equal
    other = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", max_table_entries=20_000))
    assert other.content_hash != first.content_hash
    np.testing.assert_allclose(other.score(src, tgt), first.score(src, tgt), atol=1e-3)


def test_a_rare_word_written_the_same_on_both_sides_links_itself():
    """EM cannot learn a link for a name seen once on each side in different pairs; the same
    string on both sides links at ``IDENTITY_LINK`` anyway (3 letters or more: not "a")."""
    src = pa.array(["das haus", "das buch", "ein buch", "marlins spielen", "a b"] * 3)
    tgt = pa.array(["the house", "the book", "a book", "they play marlins", "x y"] * 3)
    model = LexicalAligner.train(src, tgt, AlignerOptions("de", "en"))
    fwd, bwd = model.score_directions(pa.array(["marlins", "a"]), pa.array(["marlins", "a"]))
    assert fwd[0] >= math.log(IDENTITY_LINK) and bwd[0] >= math.log(IDENTITY_LINK)
    assert fwd[1] < math.log(IDENTITY_LINK)  # "a" is too short to count as a name


def test_identity_links_merge_into_a_models_keys_as_a_union():
    """The identity links are merged into a model's sorted keys without sorting them all
    again: the same keys and strengths as the union of both, an identity key already linked
    keeping the stronger link, one not linked getting ``IDENTITY_LINK``."""
    words = pa.array(["aaa", "bbb", "ccc", "dd", "eee"], pa.large_string())
    vocab = Vocabulary(words)  # ids 2..6; identity keys for the 3+ letter words
    size = vocab.size
    identity = np.array([i * size + i for i in (2, 3, 4, 6)], np.uint32)
    keys = np.array([5, 2 * size + 2, 3 * size + 5, 4 * size + 4, 6 * size + 1], np.uint32)
    link = np.array([0.5, 0.1, 0.2, 0.95, 0.3], np.float32)
    for model_keys in (keys, keys[:0]):  # a model's keys (sorted, unique), and none
        strength_of = dict(zip(model_keys.tolist(), link[:model_keys.size].tolist(), strict=True))
        merged, strength = _with_identity_links(model_keys, link[:model_keys.size], vocab, vocab)
        assert merged.dtype == np.uint32
        np.testing.assert_array_equal(merged, np.union1d(model_keys, identity))
        for key, value in zip(merged.tolist(), strength.tolist(), strict=True):
            expected = strength_of.get(key, 0.0)
            if key in identity.tolist():
                expected = max(expected, IDENTITY_LINK)
            assert value == np.float32(expected), key


def test_relaxed_em_gets_in_3_rounds_nearer_convergence_than_plain_em(ben):
    """Over-relaxed EM (the default) moves each step past plain EM's: after 3 rounds its
    scores are nearer those of plain EM run to convergence (20 rounds) than plain EM's own
    after 3, and each t(.|e) is still a distribution (by agreement too)."""
    src, tgt = ben
    alone = {"agreement": False}  # each direction its own EM: the likelihood both climb
    converged = LexicalAligner.train(src, tgt, AlignerOptions(
        "en", "bn", iterations=20, relaxation=1.0, **alone)).score(src, tgt)
    plain = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", iterations=3,
                                                          relaxation=1.0, **alone))
    relaxed = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", iterations=3, **alone))
    assert relaxed.options.relaxation == 2.0
    gap_plain = np.mean(np.abs(plain.score(src, tgt) - converged))
    gap_relaxed = np.mean(np.abs(relaxed.score(src, tgt) - converged))
    assert gap_relaxed < 0.7 * gap_plain, (gap_relaxed, gap_plain)
    v = relaxed.tgt_vocab.size
    rows = np.bincount(relaxed.keys // v, weights=relaxed.t_tgt_given_src)
    assert np.all(rows <= 1.0 + 1e-5)  # pruning only takes mass away
    whole = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", prune_below=0.0))
    v = whole.tgt_vocab.size
    for side, table in ((whole.keys // v, whole.t_tgt_given_src),
                        (whole.keys % v, whole.t_src_given_tgt)):
        sums = np.bincount(side, weights=table)
        # renormalized after each jump
        np.testing.assert_allclose(sums[sums > 0], 1.0, atol=1e-4)


def test_a_model_saved_before_the_newer_options_keeps_its_hash_and_scores(ben, tmp_path: Path):
    """Models saved before ``relaxation``, ``fertility``, ``idf_power``, ``worse_weight``,
    ``punct_weight``, ``stem_chars``, ``agreement`` and ``hangul_letters`` existed have no such
    options: they load as plain EM (each direction alone, whole words, a Hangul block one
    letter) scored by plain best
    links, the worse direction alone deciding, with their stored hash (each option is left out
    of the hashed JSON, and the word counts out of the arrays, at the value that means "as
    before")."""
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", iterations=2,
                                                          relaxation=1.0, fertility=0.0,
                                                          idf_power=0.0, worse_weight=1.0,
                                                          stem_chars=0, agreement=False,
                                                          hangul_letters=False))
    for option in ("relaxation", "fertility", "idf_power", "worse_weight", "punct_weight",
                   "stem_chars", "agreement", "hangul_letters"):
        assert option not in model.options.to_json()
    assert "src_counts" not in model._arrays()
    model.save(tmp_path / "m.npz")
    loaded = LexicalAligner.load(tmp_path / "m.npz", expected_hash=model.content_hash)
    assert (loaded.options.relaxation, loaded.options.fertility, loaded.options.idf_power,
            loaded.options.worse_weight, loaded.options.punct_weight,
            loaded.options.stem_chars, loaded.options.agreement,
            loaded.options.hangul_letters) == (1.0, 0.0, 0.0, 1.0, 0.0, 0, False, False)
    np.testing.assert_array_equal(loaded.score(src, tgt), model.score(src, tgt))
    fwd, bwd = model.score_directions(src, tgt)
    scored = model.scores(src, tgt)
    rows = pa.array(np.arange(0, len(src), 41))  # the worse direction alone, as documented
    np.testing.assert_allclose(scored.score[rows.to_numpy()],
                               reference_scores(model, src.take(rows), tgt.take(rows)),
                               rtol=1e-5, atol=1e-5)
    assert np.all(scored.score[np.isfinite(scored.score)]
                  <= np.minimum(fwd, bwd)[np.isfinite(scored.score)] + 1e-6)
    new = AlignerOptions("en", "bn").to_json()
    assert '"relaxation":2.0' in new and '"fertility":1.5' in new and '"idf_power":0.25' in new
    assert '"worse_weight":0.5' in new and '"agreement":true' in new
    assert '"hangul_letters":true' in new
    weighted = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", iterations=2))
    weighted.save(tmp_path / "w.npz")
    again = LexicalAligner.load(tmp_path / "w.npz", expected_hash=weighted.content_hash)
    assert again.train_pairs == weighted.train_pairs > 0
    np.testing.assert_array_equal(again.score(src, tgt), weighted.score(src, tgt))


@dataclass
class _Tasks:
    """EM's parts on real worker processes, with their files in ``work``."""

    work: Path
    executor: LocalExecutor

    def map(self, fn, tasks):  # type: ignore[no-untyped-def]
        return self.executor.map(fn, tasks)


def test_em_in_parts_on_workers_is_bit_identical_to_one_process(ben, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    """EM's expectation step runs as one task per part of the pairs (parts cut by the data
    alone), summed in part order: the model is the same bits in this process or on two
    worker processes, and nearly the model of one part."""
    src, tgt = ben
    opts = AlignerOptions("en", "bn")
    one_part = LexicalAligner.train(src, tgt, opts)
    monkeypatch.setattr(align_module, "_PART_COOC", 20_000)  # the driver cuts the parts
    here = LexicalAligner.train(src, tgt, opts)
    with LocalExecutor(2) as executor:
        apart = LexicalAligner.train(src, tgt, opts, tasks=_Tasks(tmp_path, executor))
    assert here.content_hash == apart.content_hash
    assert list(tmp_path.iterdir()) == []  # EM's files are removed
    parts = align_module._em_parts(*(align_module._encode(
        side, vocab, opts.max_train_tokens, opts.stem_chars) for side, vocab in
        ((src, here.src_vocab), (tgt, here.tgt_vocab))), 20_000)
    assert len(parts) >= 4
    np.testing.assert_allclose(here.score(src, tgt), one_part.score(src, tgt), atol=1e-3)


def test_scores_do_not_depend_on_batching(ben):
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn"))
    whole = model.score(src, tgt)
    chunked = model.score(pa.chunked_array([src[:1000], src[1000:]]),
                          pa.chunked_array([tgt[:2500], tgt[2500:]]))
    part = model.score(src.slice(1234, 100), tgt.slice(1234, 100))
    np.testing.assert_array_equal(whole, chunked)
    np.testing.assert_array_equal(whole[1234:1334], part)


def test_links_of_frequent_words_from_the_matrix_are_the_hashs(ben, monkeypatch):
    """The dense matrix of the frequent words' links gives the hash's bits, for pairs in it,
    beside it and across its edge (a matrix of 40 words here, so that every kind occurs)."""
    src, tgt = ben
    model = LexicalAligner.train(src[:3000], tgt[:3000], AlignerOptions("en", "bn"))
    expected = model.score(src, tgt)
    monkeypatch.setattr(align_module, "_DENSE_WORDS", 40)
    small = model.with_options()  # the same tables, its lookups not built yet
    table = small._links
    assert table.rows == 40 and table.cols == 40
    s_ids = align_module._encode(src[:500], small.src_vocab, 64, small.options.stem_chars)
    t_ids = align_module._encode(tgt[:500], small.tgt_vocab, 64, small.options.stem_chars)
    inside = outside = 0
    for block in align_module._blocks(s_ids, t_ids, small.tgt_vocab.size, 20_000):
        src_tok = np.repeat(np.arange(block.src_ids.size, dtype=np.uint32), block.m_of_e)
        got = table.find(block, src_tok)
        want = table.table.find(block.keys)
        np.testing.assert_array_equal(got.view(np.uint32), want)
        dense = (block.src_ids[src_tok] < 40) & (block.tgt_ids[block.gf] < 40)
        inside += int(np.count_nonzero(dense & (want != 0)))
        outside += int(np.count_nonzero(~dense & (want != 0)))
    assert inside > 200 and outside > 200, (inside, outside)
    np.testing.assert_array_equal(small.score(src, tgt).view(np.uint32),
                                  expected.view(np.uint32))


def test_subsample_is_the_training_rows(ben):
    src, tgt = ben
    opts = AlignerOptions("en", "bn", max_train_pairs=1500, seed=7)
    rows = training_rows(len(src), max_pairs=1500, seed=7)
    assert rows.size == 1500 and np.all(np.diff(rows) > 0)
    whole = LexicalAligner.train(src, tgt, opts)
    picked = LexicalAligner.train(src.take(pa.array(rows)), tgt.take(pa.array(rows)), opts)
    assert whole.content_hash == picked.content_hash
    other_seed = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", max_train_pairs=1500,
                                                               seed=8))
    assert other_seed.content_hash != whole.content_hash


def test_a_sample_is_cut_only_where_its_words_repeat(corpora: Path):
    """``training_size``: a corpus whose words keep coming (real Multi30k, 29,000 pairs) keeps
    nearly all of them even where the rule may cut to 4,096; the same pairs eight times over
    (each word seen 8x as often) are cut hard; ``tolerance`` 0 and a sample at the smallest
    size keep all."""
    load = CORPORA["multi30k-en-de"][0]
    src, tgt = load(corpora)
    real = training_size(src, tgt, tolerance=0.005, smallest=4096)
    assert 0.8 * len(src) <= real <= len(src)
    eight_src = pa.concat_arrays([src] * 8)
    eight_tgt = pa.concat_arrays([tgt] * 8)
    repeated = training_size(eight_src, eight_tgt, tolerance=0.005, smallest=4096)
    assert repeated < 0.8 * len(eight_src) and repeated % 1024 == 0
    assert training_size(eight_src, eight_tgt, tolerance=0.0, smallest=4096) == len(eight_src)
    assert training_size(src, tgt, tolerance=0.005) == len(src)  # under the default 65,536
    assert training_size(eight_src, eight_tgt, tolerance=0.001, smallest=4096) >= repeated


def test_word_counts_of_parts_size_the_sample_as_the_whole(corpora: Path):
    """The align stage counts a sample's words in the tasks that draw it, unit by unit: the
    parts' counts, merged, size it as the whole sample's text does (stems included)."""
    load = CORPORA["multi30k-en-de"][0]
    src, tgt = load(corpora)
    src, tgt = pa.concat_arrays([src] * 4), pa.concat_arrays([tgt] * 4)
    cuts = [0, 1000, 50_000, 70_001, len(src)]
    counts = [merged_counts([word_counts(side.slice(lo, hi - lo), stem=6)
                             for lo, hi in itertools.pairwise(cuts)]) for side in (src, tgt)]
    whole = training_size(src, tgt, tolerance=0.005, stem=6, smallest=4096)
    assert whole < len(src)  # the words repeat: a cut to check
    assert size_from_counts(len(src), counts, tolerance=0.005, smallest=4096) == whole
    assert sorted(counts[0].tolist()) == sorted(
        word_counts(src, stem=6)["count"].to_list())


def test_the_known_share_is_the_binomial_one():
    """The share of tokens whose word is seen ``KNOWN_COUNT`` times when each occurrence is
    kept with probability p, against the binomial sum written out."""
    counts = np.array([1, 3, 5, 8, 40, 200])
    for keep in (0.1, 0.5, 0.9, 1.0):
        expected = sum(k * sum(math.comb(k, i) * keep ** i * (1 - keep) ** (k - i)
                               for i in range(KNOWN_COUNT, k + 1)) for k in counts)
        assert _known_share(counts, keep) == pytest.approx(expected / counts.sum(), abs=1e-9)


def test_save_load_round_trip(ben, tmp_path):
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn"))
    path = tmp_path / "align.npz"
    model.save(path)
    loaded = LexicalAligner.load(path, expected_hash=model.content_hash)
    assert loaded.content_hash == model.content_hash
    assert loaded.options == model.options
    np.testing.assert_array_equal(loaded.score(src, tgt), model.score(src, tgt))
    with np.load(path, allow_pickle=False) as npz:  # nothing in it needs pickle
        assert all(npz[name].dtype != object for name in npz.files)
    with pytest.raises(InputError, match="another model"):
        LexicalAligner.load(path, expected_hash="sha256:" + "0" * 64)


def test_damaged_model_is_refused(ben, tmp_path):
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn"))
    path = tmp_path / "align.npz"
    model.save(path)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays["t_tgt_given_src"] = arrays["t_tgt_given_src"] * np.float32(0.5)
    np.savez(tmp_path / "changed.npz", **arrays)
    with pytest.raises(InputError, match="damaged"):
        LexicalAligner.load(tmp_path / "changed.npz")
    del arrays["keys"]
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(InputError, match="malformed"):
        LexicalAligner.load(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(InputError, match="cannot read"):
        LexicalAligner.load(tmp_path / "junk.npz")


# ---------------------------------------------------------------------------------------------
# Edge cases


def test_empty_sides_score_minus_inf(ben):
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn"))
    scores = model.score(pa.array(["", "Go.", None, "!!!", "I see."]),
                         pa.array(["যাও।", "", "যাও।", "যাও।", "আমি দেখছি।"]))
    assert scores[:4].tolist() == [EMPTY_SCORE] * 4
    assert np.isfinite(scores[4])
    assert model.score(pa.array([], pa.string()), pa.array([], pa.string())).size == 0


def test_unknown_words_share_one_id(ben):
    src, tgt = ben
    model = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", max_vocab=300))
    assert len(model.src_vocab.words) == 300
    ids = model.src_vocab.encode(alignment_tokens(pa.array(["you zyzzyva"])).tokens)
    assert ids[1] == UNK_ID and ids[0] > UNK_ID
    scores = model.score(pa.array(["Qwxv zyzzyva.", "Go."]), pa.array(["ক্ষ্ম্য।", "যাও।"]))
    assert np.all(np.isfinite(scores))  # unknown on both sides: low, but a score
    full = LexicalAligner.train(src, tgt, AlignerOptions("en", "bn"))
    assert len(full.src_vocab.words) > 300


def test_bad_inputs_are_refused(ben):
    src, tgt = ben
    with pytest.raises(InputError, match="as many targets"):
        LexicalAligner.train(src, tgt[:10], AlignerOptions("en", "bn"))
    with pytest.raises(InputError, match="max_vocab"):
        LexicalAligner.train(src, tgt, AlignerOptions("en", "bn", max_vocab=100_000))
    with pytest.raises(InputError, match="iterations"):
        AlignerOptions("en", "bn", iterations=-1).check()
    with pytest.raises(InputError, match="floor"):
        AlignerOptions("en", "bn", floor=0.0).check()
    with pytest.raises(InputError, match="no pair"):
        LexicalAligner.train(pa.array(["", "..."]), pa.array(["a", "b"]),
                             AlignerOptions("en", "de"))
    model = LexicalAligner.train(src[:200], tgt[:200], AlignerOptions("en", "bn"))
    with pytest.raises(InputError, match="as many targets"):
        model.score(src[:3], tgt[:2])


# ---------------------------------------------------------------------------------------------
# The hash map behind the lookups


@given(st.sets(st.integers(0, 2**32 - 2), max_size=300), st.lists(st.integers(0, 2**32 - 2),
                                                                   max_size=300))
def test_packed_hash_finds_what_a_dict_finds(keys, queries):
    k = np.array(sorted(keys), dtype=np.uint32)
    payload = np.arange(k.size, dtype=np.uint32) * np.uint32(7)
    table = PackedHash(k, payload, absent=123_456, load=0.9)
    expected = {int(key): int(p) for key, p in zip(k, payload, strict=True)}
    q = np.array(list(queries) + sorted(keys), dtype=np.uint32)
    got = table.find(q)
    assert got.tolist() == [expected.get(int(x), 123_456) for x in q]


# ---------------------------------------------------------------------------------------------
# Leave one out


def _corpus_with_a_pair_of_rare_words() -> tuple[pa.Array, pa.Array]:
    """120 pairs of a small word-for-word language (each word in many pairs), then one pair
    whose words are seen nowhere else and do not translate each other, and one of rare words
    whose name both sides spell alike."""
    rng = np.random.default_rng(7)
    src, tgt = [], []
    for _ in range(120):
        words = rng.choice(30, size=6, replace=False)
        src.append(" ".join(f"src{w}" for w in words))
        tgt.append(" ".join(f"tgt{w}" for w in rng.permutation(words)))
    src += ["quokka marmot wombat", "zanzibar src1 src2 src3"]
    tgt += ["hangar lettuce trombone", "zanzibar tgt1 tgt2 tgt3"]
    return pa.array(src), pa.array(tgt)


def test_a_trained_pair_scored_leaving_itself_out_has_no_say_in_its_own_links():
    src, tgt = _corpus_with_a_pair_of_rare_words()
    options = AlignerOptions("xx", "yy", leave_one_out=True, stem_chars=0)
    model = LexicalAligner.train(src, tgt, options)
    trained = np.ones(len(src), bool)
    whole = model.score(src, tgt)
    left_out = model.score(src, tgt, trained=trained)
    floor = float(np.log(options.floor))
    # on the whole model the rare words link each other: the pair is far above the floor
    assert whole[120] > floor + 4.0
    # left out, they are known from no other pair: nothing links them, the pair scores the
    # floor (its length term is 0: three words a side, as the corpus' median ratio)
    assert model.length_log_ratio == 0.0
    assert left_out[120] == pytest.approx(floor, abs=1e-4)
    # the real pairs' words are known from the other pairs: their scores barely move
    assert np.max(np.abs(left_out[:120] - whole[:120])) < 0.01
    # a name both sides spell alike keeps its link and its weight
    assert left_out[121] > left_out[120] + 3.0
    # a pair the model never saw is scored on the whole model; so is every pair where the
    # option is off (the flags are read only with it)
    untrained = model.score(src, tgt, trained=np.zeros(len(src), bool))
    np.testing.assert_array_equal(untrained, whole)
    plain = LexicalAligner.train(src, tgt, dataclasses.replace(options, leave_one_out=False))
    np.testing.assert_array_equal(plain.score(src, tgt, trained=trained), plain.score(src, tgt))
    assert plain.content_hash != model.content_hash


def test_a_word_repeated_in_its_pair_or_past_the_trained_tokens_is_left_out_as_it_was_taught():
    """A pair whose rare words repeat in it taught the model all of their links: left out,
    nothing links them (with a word's tokens counted one by one, the pair kept most of its
    own links and scored higher left out than on the whole model). Tokens past the
    ``max_train_tokens`` a side was trained on taught nothing: a word there keeps what
    another pair taught it."""
    base_src, base_tgt = _corpus_with_a_pair_of_rare_words()
    real_src, real_tgt = base_src.to_pylist()[:120], base_tgt.to_pylist()[:120]
    options = AlignerOptions("xx", "yy", leave_one_out=True, stem_chars=0)
    floor = float(np.log(options.floor))
    for junk in (("quokka quokka marmot wombat", "hangar hangar lettuce trombone"),
                 ("koala koala koala koala numbat", "piano piano piano piano violin")):
        src, tgt = pa.array([*real_src, junk[0]]), pa.array([*real_tgt, junk[1]])
        model = LexicalAligner.train(src, tgt, options)
        left_out = model.score(src, tgt, trained=np.ones(len(src), bool))
        assert model.score(src, tgt)[-1] > floor + 4.0
        assert left_out[-1] == pytest.approx(floor, abs=1e-3)
    # trained on 3 tokens a side: the long pair taught only its first three words' links
    short = dataclasses.replace(options, max_train_tokens=3)
    src = pa.array([*real_src, "dingo src3", "quokka marmot wombat dingo"])
    tgt = pa.array([*real_tgt, "tuba tgt3", "hangar lettuce trombone tuba"])
    model = LexicalAligner.train(src, tgt, short)
    left_out = model.score(src, tgt, trained=np.ones(len(src), bool))
    # the rare words it was trained on weigh nothing; dingo-tuba, past them, is what the
    # other pair taught: the pair is linked by it alone
    assert left_out[-1] > floor + 4.0


def test_leave_one_out_needs_the_word_counts():
    with pytest.raises(InputError, match="leave_one_out needs idf_power"):
        AlignerOptions("en", "de", leave_one_out=True, idf_power=0.0).check()
    # an option at its old value is not saved: models saved before it keep their hash
    assert "leave_one_out" not in AlignerOptions("en", "de").to_json()
    assert '"leave_one_out":true' in AlignerOptions("en", "de", leave_one_out=True).to_json()
