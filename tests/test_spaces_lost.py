"""``spaces_lost``: a side whose words run together (a scraper or a PDF extraction lost its
spaces) keeps its characters and its letters, so neither the length ratio nor a language id
sees it; its mean word length does, measured against the corpus' own.

Real text with long words (German compounds, Tamil, Georgian) stays: the spread is measured
on the batch, and wider where the other side has few words.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.junk import (
    Mix,
    multi30k,
    ntrex_pairs,
    rule_flags,
    spr_rejections,
    tatoeba_ben,
    tatoeba_cmn,
)

Pair = tuple[str, str]


def _flagged(pairs: list[Pair], langs: list[str], **config: object) -> np.ndarray:
    flags: np.ndarray = rule_flags(pairs, langs, "spaces_lost", **config)
    return flags


def _run_together(pairs: list[Pair], share: float, seed: int, side: int = 1
                  ) -> tuple[list[Pair], np.ndarray]:
    """``share`` of the pairs with one side's spaces removed (sides of 4 words or more)."""
    rng = random.Random(seed)
    candidates = [i for i, p in enumerate(pairs) if len(p[side].split()) >= 4]
    junk = np.zeros(len(pairs), dtype=bool)
    junk[rng.sample(candidates, min(len(candidates), int(len(pairs) * share)))] = True
    out = []
    for i, pair in enumerate(pairs):
        changed = list(pair)
        if junk[i]:
            changed[side] = changed[side].replace(" ", "")
        out.append((changed[0], changed[1]))
    return out, junk


@pytest.mark.parametrize(("lang", "code"), [("deu", "de"), ("rus", "ru"), ("hin", "hi"),
                                            ("kor", "ko"), ("tam", "ta")])
@pytest.mark.parametrize("share", [0.1, 0.5])
def test_run_together_targets_are_caught_and_real_news_kept(corpora: Path, lang: str,
                                                            code: str, share: float):
    """NTREX news, a tenth or half of the targets run together: 0.95 of them caught, no real
    pair flagged."""
    pairs, junk = _run_together(ntrex_pairs(corpora, lang), share, seed=7)
    flagged = _flagged(pairs, ["en", code])
    assert flagged[junk].mean() >= 0.95
    assert not flagged[~junk].any(), [pairs[i] for i in np.flatnonzero(flagged & ~junk)[:3]]


@pytest.mark.parametrize(("lang", "code"), [("deu", "de"), ("rus", "ru"), ("tam", "ta")])
def test_both_sides_run_together_in_one_corpus(corpora: Path, lang: str, code: str):
    """A tenth of the sources and a tenth of the targets run together (other rows): each
    side's junk is caught as well as alone. Measured against its partner, a row whose partner
    ran together lies far below the centre; were the spread read on such rows too, it would
    widen, and German targets were caught 0.15."""
    pairs, sources = _run_together(ntrex_pairs(corpora, lang), 0.1, seed=2, side=0)
    candidates = [i for i in range(len(pairs)) if not sources[i]]
    rng = random.Random(4)
    targets = np.zeros(len(pairs), dtype=bool)
    targets[rng.sample([i for i in candidates if len(pairs[i][1].split()) >= 4], 150)] = True
    pairs = [(s, t.replace(" ", "") if targets[i] else t) for i, (s, t) in enumerate(pairs)]
    flagged = _flagged(pairs, ["en", code])
    assert flagged[sources].mean() >= 0.95 and flagged[targets].mean() >= 0.95
    assert not flagged[~sources & ~targets].any()


@pytest.mark.parametrize(("lang", "code"), [("tur", "tr"), ("kat", "ka"), ("fra", "fr")])
def test_real_news_with_long_words_or_short_headlines_is_kept(corpora: Path, lang: str,
                                                             code: str):
    """Turkish and Georgian words run a third longer than English ones, and NTREX's
    headlines are a few words against a sentence: the spread, measured per count of the other
    side's words, takes both in (one spread for every length flagged 2 Turkish pairs)."""
    assert not _flagged(ntrex_pairs(corpora, lang), ["en", code]).any()


def test_either_side_and_short_sentences(corpora: Path):
    """A run-together source is caught as well; Tatoeba's short Bengali sentences (a side of
    4 words is one of 16 letters then) most of the time, Multi30k's captions at 0.99."""
    pairs, junk = _run_together(multi30k(corpora)[:8000], 0.1, seed=3, side=0)
    flagged = _flagged(pairs, ["en", "de"])
    assert flagged[junk].mean() >= 0.95 and flagged[~junk].mean() <= 0.001
    pairs, junk = _run_together(tatoeba_ben(corpora), 0.1, seed=3)
    flagged = _flagged(pairs, ["en", "bn"])
    assert flagged[junk].mean() >= 0.85 and flagged[~junk].mean() <= 0.001


def test_longer_words_of_another_language_are_not_run_together(corpora: Path):
    """German words are a quarter longer than English ones; on long sentences (two Multi30k
    captions in one row) the spread is so narrow that a German side among English ones lies
    over 3.5 spreads above, but not twice as long: not ``spaces_lost`` (the language id takes
    such sides). Lower the floor to nothing and some are."""
    pairs = multi30k(corpora)[:6001]
    joined = [(a[0] + " " + b[0], a[1] + " " + b[1]) for a, b in itertools.pairwise(pairs)]
    swapped = [(t, s) if i % 10 == 0 else (s, t) for i, (s, t) in enumerate(joined)]
    assert not _flagged(swapped, ["en", "de"]).any()
    assert _flagged(swapped, ["en", "de"], spaces_lost_floor=1.0)[::10].sum() >= 20


def test_the_real_arabic_rows_that_lost_their_spaces_are_found(corpora: Path):
    """NTREX's Arabic holds rows whose words really run together (``الصينوروسيابشأن``):
    every row flagged holds a word of 15 letters or more, and the rule finds most of those."""
    pairs = ntrex_pairs(corpora, "arb")
    flagged = _flagged(pairs, ["en", "ar"])
    longest = np.array([max(len(w) for w in t.split()) for _, t in pairs])
    assert flagged.sum() >= 20
    assert (longest[flagged] >= 15).all()


def test_sides_written_without_spaces_are_not_judged(corpora: Path):
    """Chinese has no spaces to lose, and a Chinese side with a Latin name in it reads like
    one long word: it is not judged."""
    pairs = tatoeba_cmn(corpora)[:6000]
    pairs += [("I bought an iPhone yesterday at the shop.", "我昨天在商店买了一个iPhone。")] * 10
    assert not _flagged(pairs, ["en", "zh"]).any()


@pytest.mark.parametrize(("pairs", "langs", "side"), [
    (tatoeba_cmn, ["en", "zh"], 0),
    (lambda corpora: ntrex_pairs(corpora, "jpn"), ["en", "ja"], 0),
    (lambda corpora: [(t, s) for s, t in ntrex_pairs(corpora, "zho-CN")], ["zh", "en"], 1),
])
def test_a_side_run_together_opposite_one_without_spaces(corpora: Path, pairs: Any,
                                                         langs: list[str], side: int):
    """Against Chinese or Japanese only the partner's length says how many words the spaced
    side should hold, so that side is judged alone, where the partner says 4 words' worth or
    more and its words are 3 times the usual length: 0.95 of the run-together sides caught
    (English sources of Tatoeba eng-cmn and NTREX en-ja, English targets of NTREX zh-en),
    no real pair flagged; a one-word sentence (`Unbelievable!` / 难以置信！) stays."""
    mixed, junk = _run_together(pairs(corpora), 0.1, seed=5, side=side)
    flagged = _flagged(mixed, langs)
    assert flagged[junk].mean() >= 0.95
    assert not flagged[~junk].any(), [mixed[i] for i in np.flatnonzero(flagged & ~junk)[:3]]


def test_a_batch_too_small_to_measure_is_not_judged(corpora: Path):
    pairs, junk = _run_together(ntrex_pairs(corpora, "deu")[:199], 0.2, seed=1)
    assert junk.any() and not _flagged(pairs, ["en", "de"]).any()


def test_the_recipe_sets_the_spreads_and_turns_it_off(corpora: Path, tmp_path: Path):
    """End to end through ``clean``: rejected as ``spaces_lost``; a looser bar flags fewer,
    and ``reject_spaces_lost = false`` none."""
    pairs, junk = _run_together(multi30k(corpora)[:3000], 0.1, seed=11)
    labels = ["spaces_lost" if j else None for j in junk]
    caught = {}
    for name, keys in (("on", ""), ("loose", "spaces_lost_z = 12.0\n"),
                       ("off", "reject_spaces_lost = false\n")):
        recipe = tmp_path / f"{name}.toml"
        recipe.write_text(f'stages = ["normalize", "rules"]\n[rules]\n{keys}', encoding="utf-8")
        rejected, report = spr_rejections(Mix(pairs, labels), "en-de", tmp_path / name,
                                          recipe=recipe, workers=1)
        caught[name] = np.array([rejected.get(i) == "spaces_lost" for i in range(len(pairs))])
        assert report["by_reason"].get("spaces_lost", 0) == caught[name].sum()
    assert caught["on"][junk].mean() >= 0.95 and not caught["on"][~junk].any()
    assert 0 < caught["loose"].sum() < caught["on"].sum()
    assert not caught["off"].any()
