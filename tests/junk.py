"""Junk of every kind the clean rules target, mixed into real pairs at a given rate.

Two uses:

* ``mix(corpus, level)``: a corpus in which a share ``level`` of the rows are junk, spread
  evenly over the kinds, made from real pairs that are *not* among the real rows (so that a
  re-paired target or a shifted block never duplicates a real row). Returns the rows and a
  label per row (the kind, or ``None`` for a real pair).
* ``run_quality(corpus, langs, foreign, root, level=...)``: that mix through ``ingest`` and
  ``clean`` with the language pair's recipe, measured: recall per kind, and the share of the
  real pairs rejected with their reasons. The quality tests, ``benchmarks/quality_table.py``
  and throw-away calibration scripts all call it.

``inject`` (a fixed number of junk pairs per kind, the older kinds only) stays for
``benchmarks/bench_clean.py``, whose throughput figures are comparable across commits.
"""

from __future__ import annotations

import gzip
import math
import random
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Pair = tuple[str, str]
Injector = Callable[[Pair, random.Random, Sequence[Pair], Sequence[str]], Pair]

_SYMBOLS = "★☆■□▲△●○◆◇※§¶†‡•◎♪♫#$%&*+=<>|~^@"
_KEYWORDS = ("forum measuring jug glass heat resistant 1 litre or 1.1/2 pint 2.95 fr.",
             "cheap hotels london paris rome book now free wifi parking 24h",
             "mp3 download free ringtone nokia samsung lg sony ericsson 2009")


def _symbols(rng: random.Random) -> str:
    return " ".join("".join(rng.choice(_SYMBOLS) for _ in range(rng.randint(2, 5)))
                    for _ in range(rng.randint(3, 8)))


def _other(rng: random.Random, corpus: Sequence[Pair], pair: Pair) -> Pair:
    while True:
        other = corpus[rng.randrange(len(corpus))]
        if other[1] != pair[1] and other[0] != pair[0]:
            return other


INJECTORS: dict[str, Injector] = {
    "empty_target": lambda p, r, c, f: (p[0], "   "),
    "too_long": lambda p, r, c, f: (" ".join([p[0]] * 120), " ".join([p[1]] * 120)),
    "length_ratio": lambda p, r, c, f: (p[0], " ".join([p[1]] + [_other(r, c, p)[1]
                                                             for _ in range(6)])),
    "symbol_pile": lambda p, r, c, f: (p[0], _symbols(r)),
    "repetition": lambda p, r, c, f: (p[0], p[1] + " " + "!" * r.randint(15, 40)),
    "repeated_word": lambda p, r, c, f: (p[0] + " " + " ".join([p[0].split()[0]] * 8), p[1]),
    "copied_source": lambda p, r, c, f: (p[0], p[0]),
    "numbers": lambda p, r, c, f: (f"{p[0]} ({r.randint(100, 499)})",
                                f"{p[1]} ({r.randint(500, 999)})"),
    "url_only": lambda p, r, c, f: (p[0], f"http://www.example-{r.randint(1, 999)}.com/page?id="
                                       f"{r.randint(1, 99999)}"),
    "html": lambda p, r, c, f: (p[0], f'<div class="c{r.randint(1, 9)}"><a href="/x">{p[1]}</a>'),
    "boilerplate": lambda p, r, c, f: ("All rights reserved. Read our privacy policy.", p[1]),
    "swapped_sides": lambda p, r, c, f: (p[1], p[0]),
    "misaligned": lambda p, r, c, f: (p[0], _other(r, c, p)[1]),
    "wrong_language": lambda p, r, c, f: (p[0], r.choice(f)),
    "keyword_list": lambda p, r, c, f: (r.choice(_KEYWORDS), _other(r, c, p)[1]),
    "duplicate": lambda p, r, c, f: p,
}


def inject(pairs: Sequence[Pair], kinds: Sequence[str], per_kind: int, seed: int = 0,
           foreign: Sequence[str] = ()) -> tuple[list[Pair], dict[int, str]]:
    """The real pairs with ``per_kind`` junk pairs of each kind inserted at random places.

    ``foreign`` holds sentences in a language that is neither side's (``wrong_language``).

    Returns the mixed corpus and, for each junk line (0-based), its kind. A duplicate copies a
    real pair that appears earlier in the corpus, so that the copy is the one to reject.
    """
    rng = random.Random(seed)
    junk: list[tuple[int, Pair, str]] = []
    for kind in kinds:
        for _ in range(per_kind):
            at = rng.randrange(len(pairs))
            source = pairs[at]
            made = INJECTORS[kind](source, rng, pairs, foreign)
            position = at + 1 if kind == "duplicate" else rng.randrange(len(pairs) + 1)
            junk.append((position, made, kind))
    out: list[Pair] = []
    labels: dict[int, str] = {}
    by_position: dict[int, list[tuple[Pair, str]]] = {}
    for position, made, kind in junk:
        by_position.setdefault(position, []).append((made, kind))
    for i in range(len(pairs) + 1):
        for made, kind in by_position.get(i, []):
            labels[len(out)] = kind
            out.append(made)
        if i < len(pairs):
            out.append(pairs[i])
    return out, labels


# --- junk at a rate ------------------------------------------------------------------------

def mojibake(text: str) -> str:
    """``text`` as UTF-8 bytes read back as Windows-1252 (its five unmapped bytes as Latin-1),
    the way a mis-declared web page or CSV export garbles it."""
    out = []
    for byte in text.encode("utf-8"):
        try:
            out.append(bytes([byte]).decode("cp1252"))
        except UnicodeDecodeError:
            out.append(chr(byte))
    return "".join(out)


def _partial(text: str) -> str | None:
    """The first quarter of ``text`` (in words where it has spaces, else in characters), or
    None where the text is too short for a quarter to differ from a translation."""
    words = text.split()
    if len(words) >= 4:
        return " ".join(words[:len(words) // 4])
    if len(words) == 1 and len(text) >= 8:
        return text[:len(text) // 4]
    return None


def _loose(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def _differ(a: Pair, b: Pair) -> bool:
    """Neither side of ``a`` is (loosely) the same as ``b``'s: a target of one is then not a
    translation of the other's source by repetition."""
    return _loose(a[0]) != _loose(b[0]) and _loose(a[1]) != _loose(b[1])


class _Pool:
    """The corpus pairs that are not real rows of the mix: the material junk is made of.
    Each pair is used at most once, so no two junk rows share a side by construction."""

    def __init__(self, pairs: list[Pair], rng: random.Random) -> None:
        self.pairs, self.rng = pairs, rng
        self.used = [False] * len(pairs)
        self.free = len(pairs)

    def _take(self, i: int) -> Pair:
        self.used[i] = True
        self.free -= 1
        return self.pairs[i]

    def draw(self, accept: Callable[[Pair], bool] = lambda p: True) -> Pair:
        start = self.rng.randrange(len(self.pairs))
        for _ in range(64):
            i = self.rng.randrange(len(self.pairs))
            if not self.used[i] and accept(self.pairs[i]):
                return self._take(i)
        for j in range(len(self.pairs)):  # nearly used up: the next free one that fits
            i = (start + j) % len(self.pairs)
            if not self.used[i] and accept(self.pairs[i]):
                return self._take(i)
        raise ValueError("the corpus has too few pairs left to make this junk; pass fewer "
                         "rows or a lower level")

    def nearest_target(self, pair: Pair) -> Pair:
        """An unused pair whose target is about as long as ``pair``'s (best of 16 candidates)
        and shares neither side with it."""
        candidates = [i for i in (self.rng.randrange(len(self.pairs)) for _ in range(64))
                      if not self.used[i] and _differ(pair, self.pairs[i])][:16]
        if not candidates:
            return self.draw(lambda p: _differ(pair, p))
        best = min(candidates, key=lambda i: abs(len(self.pairs[i][1]) - len(pair[1])))
        return self._take(best)

    def block(self, k: int) -> list[Pair]:
        """``k`` unused pairs that follow each other in the corpus, skipping a pair whose
        source or target (loosely compared) repeats the previous one's, so that no pair of the
        shifted block is a translation (Tatoeba lists a sentence's translations together)."""
        for _ in range(200):
            i = self.rng.randrange(len(self.pairs))
            run: list[int] = []
            while i < len(self.pairs) and len(run) < k and not self.used[i]:
                if not run or _differ(self.pairs[run[-1]], self.pairs[i]):
                    run.append(i)
                i += 1
            if len(run) == k:
                return [self._take(j) for j in run]
        raise ValueError(f"no run of {k} unused corpus pairs left for a shifted block; pass "
                         "fewer rows or a lower level")


@dataclass
class _Material:
    pool: _Pool
    rng: random.Random
    foreign: Sequence[str]
    japanese: Sequence[Pair]


#: how many other pairs' targets an injector takes
_OTHERS = {"length_ratio": 6, "misaligned": 1, "keyword_list": 1}


def _from_injector(kind: str) -> Callable[[_Material], Pair]:
    def make(m: _Material) -> Pair:
        pair = m.pool.draw()
        others = [m.pool.draw(lambda p: _differ(pair, p)) for _ in range(_OTHERS.get(kind, 0))]
        return INJECTORS[kind](pair, m.rng, others, m.foreign)
    return make


def _re_paired(m: _Material) -> Pair:
    source = m.pool.draw()
    return source[0], m.pool.nearest_target(source)[1]


def _partial_pair(m: _Material) -> Pair:
    source = m.pool.draw(lambda p: _partial(p[1]) is not None)
    cut = _partial(source[1])
    assert cut is not None
    return source[0], cut


def _mojibake_pair(m: _Material) -> Pair:
    source = m.pool.draw(lambda p: mojibake(p[1]) != p[1])
    return source[0], mojibake(source[1])


def _japanese(m: _Material) -> Pair:
    return m.japanese[m.rng.randrange(len(m.japanese))]


#: per-row kinds for ``mix``: how each junk row is made from unused corpus pairs
MAKERS: dict[str, Callable[[_Material], Pair]] = {
    **{kind: _from_injector(kind) for kind in INJECTORS if kind != "duplicate"},
    "re_paired": _re_paired,
    "partial": _partial_pair,
    "japanese": _japanese,
    "mojibake": _mojibake_pair,
}
#: every kind ``mix`` makes: the per-row ones, a copy of an earlier real row, and blocks of
#: 5–20 consecutive rows whose targets are one line off (a Moses pair of files out of step)
KINDS: tuple[str, ...] = (*MAKERS, "duplicate", "shifted_block")


def _units(text: str) -> list[str]:
    """Words where ``text`` has spaces, else characters (Chinese, Japanese)."""
    return text.split() if " " in text.strip() else list(text)


def _joined(units: list[str], like: str) -> str:
    return " ".join(units) if " " in like.strip() else "".join(units)


def _word_salad(m: _Material) -> Pair:
    pair = m.pool.draw(lambda p: len(set(_units(p[1]))) >= 4)
    units = _units(pair[1])
    shuffled = units[:]
    while shuffled == units:
        m.rng.shuffle(shuffled)
    return pair[0], _joined(shuffled, pair[1])


def _half_replaced(m: _Material) -> Pair:
    pair = m.pool.draw(lambda p: len(_units(p[1])) >= 4)
    other = _units(m.pool.draw(lambda p: _differ(pair, p))[1])
    units = _units(pair[1])
    for i in m.rng.sample(range(len(units)), len(units) // 2):
        units[i] = m.rng.choice(other)
    return pair[0], _joined(units, pair[1])


def _appended(side: int) -> Callable[[_Material], Pair]:
    def make(m: _Material) -> Pair:
        pair = m.pool.draw()
        other = m.pool.draw(lambda p: _differ(pair, p))
        out = list(pair)
        out[side] = _joined([pair[side], other[side]], pair[side])
        return out[0], out[1]
    return make


def _half_cut(m: _Material) -> Pair:
    pair = m.pool.draw(lambda p: len(_units(p[1])) >= 4)
    units = _units(pair[1])
    return pair[0], _joined(units[:len(units) // 2], pair[1])


def _source_language_target(m: _Material) -> Pair:
    pair = m.pool.draw()
    return pair[0], m.pool.draw(lambda p: _differ(pair, p))[0]


#: kinds no default mix holds and nothing was tuned on (``mix(kinds=...)`` makes them):
#: junk made differently, to check the mechanisms on (``quality_sweep.py --held-out-kinds``).
#: A target whose words are shuffled, whose words are half replaced by another target's, with
#: another sentence appended, cut to its first half; a source with another sentence appended;
#: another source-language sentence as the target.
HELD_OUT_MAKERS: dict[str, Callable[[_Material], Pair]] = {
    "word_salad": _word_salad,
    "half_replaced": _half_replaced,
    "appended_target": _appended(1),
    "appended_source": _appended(0),
    "half_cut": _half_cut,
    "source_language_target": _source_language_target,
}


def default_kinds(*, foreign: Sequence[str] = (), japanese: Sequence[Pair] = ()) -> list[str]:
    """The kinds the given material allows (wrong_language needs ``foreign``, japanese needs
    Japanese pairs)."""
    return [k for k in KINDS if (k != "wrong_language" or foreign)
            and (k != "japanese" or japanese)]


@dataclass
class Mix:
    """Rows of a mixed corpus and, per row, the junk kind or ``None`` for a real pair."""

    pairs: list[Pair]
    labels: list[str | None]

    def count(self) -> Counter[str]:
        return Counter(k for k in self.labels if k is not None)


def _key(pair: Pair) -> Pair:
    return tuple(" ".join(unicodedata.normalize("NFC", s).split()) for s in pair)  # type: ignore[return-value]


def mix(corpus: Sequence[Pair], level: float, *, kinds: Sequence[str] | None = None,
        rows: int | None = None, seed: int = 0, foreign: Sequence[str] = (),
        japanese: Sequence[Pair] = (), min_per_kind: int = 40, max_rows: int = 8000) -> Mix:
    """``rows`` rows (default: as many as the corpus allows, at most ``max_rows``) of which a
    share ``level`` are junk, spread evenly over ``kinds`` (default: all the material allows).

    The real rows are a random sample of the corpus' distinct pairs, in corpus order; junk is
    made from the other pairs and inserted at random places (a duplicate after its original,
    a shifted block as consecutive rows). Raises ValueError where a kind would get fewer than
    ``min_per_kind`` rows (``run_quality`` then splits the kinds over several mixes).
    """
    if not 0.0 <= level < 1.0:
        raise ValueError(f"level must be in [0, 1), got {level}")
    kinds = list(kinds) if kinds is not None else default_kinds(foreign=foreign,
                                                                japanese=japanese)
    unknown = set(kinds) - set(KINDS) - set(HELD_OUT_MAKERS)
    if unknown:
        raise ValueError(f"unknown junk kinds {sorted(unknown)}; known: "
                         f"{(*KINDS, *HELD_OUT_MAKERS)}")
    if "wrong_language" in kinds and not foreign:
        raise ValueError("wrong_language needs foreign sentences")
    if "japanese" in kinds and not japanese:
        raise ValueError("japanese needs (English, Japanese) pairs")
    rng = random.Random(seed)
    seen: set[Pair] = set()
    distinct = []
    for pair in corpus:
        key = _key(pair)
        if key not in seen and pair[0].strip() and pair[1].strip():
            seen.add(key)
            distinct.append(pair)
    if rows is None:
        # corpus pairs a junk row of each kind takes (with a margin for the picky kinds)
        uses = [1 + _OTHERS.get(k, 0) + (k == "re_paired") + 0.1 * (k == "shifted_block")
                + (k in ("half_replaced", "appended_target", "appended_source",
                         "source_language_target"))
                - (k in ("duplicate", "japanese")) for k in kinds]
        per_row = 1 - level + level * (sum(uses) / len(uses) if uses else 0)
        enough = math.ceil(min_per_kind * len(kinds) / level) if level and kinds else 0
        rows = min(int(0.97 * len(distinct) / per_row), max(max_rows, enough))
    n_junk = round(level * rows) if kinds else 0
    n_real = rows - n_junk
    if n_real > len(distinct):
        raise ValueError(f"{rows} rows at level {level} need {n_real} real pairs; the corpus "
                         f"has {len(distinct)} distinct ones")
    per_kind = [n_junk // len(kinds) + (i < n_junk % len(kinds)) for i in range(len(kinds))] \
        if kinds else []
    if n_junk and min(per_kind) < min_per_kind:
        raise ValueError(f"{n_junk} junk rows over {len(kinds)} kinds give {min(per_kind)} a "
                         f"kind (< {min_per_kind}); pass fewer kinds or more rows")
    chosen = sorted(rng.sample(range(len(distinct)), n_real))
    taken = set(chosen)
    real = [distinct[i] for i in chosen]
    pool = _Pool([p for i, p in enumerate(distinct) if i not in taken], rng)
    material = _Material(pool, rng, foreign, japanese)
    # (position among the real rows, order, rows, kind): inserted before real row `position`
    inserts: list[tuple[int, float, list[Pair], str]] = []
    # blocks first, while the pool still has long runs of unused pairs
    order = sorted(zip(kinds, per_kind, strict=True), key=lambda kc: kc[0] != "shifted_block")
    for kind, count in order:
        if kind == "shifted_block":
            left = count
            while left:
                k = min(left, rng.randint(5, 20))
                if 0 < left - k < 5:
                    k = left - 5 if left - 5 >= 5 else left
                block = pool.block(k + 1)
                made = [(block[j][0], block[j + 1][1]) for j in range(k)]
                inserts.append((rng.randrange(n_real + 1), rng.random(), made, kind))
                left -= k
        elif kind == "duplicate":
            for _ in range(count):
                at = rng.randrange(n_real)
                inserts.append((rng.randint(at + 1, n_real), rng.random(), [real[at]], kind))
        else:
            for _ in range(count):
                inserts.append((rng.randrange(n_real + 1), rng.random(),
                                [{**MAKERS, **HELD_OUT_MAKERS}[kind](material)], kind))
    inserts.sort(key=lambda t: (t[0], t[1]))
    pairs: list[Pair] = []
    labels: list[str | None] = []
    j = 0
    for i in range(n_real + 1):
        while j < len(inserts) and inserts[j][0] == i:
            pairs.extend(inserts[j][2])
            labels.extend([inserts[j][3]] * len(inserts[j][2]))
            j += 1
        if i < n_real:
            pairs.append(real[i])
            labels.append(None)
    return Mix(pairs, labels)


# --- real corpora ---------------------------------------------------------------------------

def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (``.gz`` too), without a BOM or line ends."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return [line.rstrip("\r") for line in
            data.decode("utf-8").removeprefix("\ufeff").split("\n")[:-1]]


def ntrex(corpora: Path, lang: str) -> list[str]:
    """Sentences of another language: NTREX news, for the wrong_language junk."""
    return read_lines(corpora / f"multiparallel/ntrex128/newstest2019-ref.{lang}.txt.gz")


def ntrex_pairs(corpora: Path, lang: str) -> list[Pair]:
    """NTREX's English news beside its ``lang`` references, the rows with both sides."""
    english = read_lines(corpora / "multiparallel/ntrex128/newstest2019-src.eng.txt.gz")
    return [(s, t) for s, t in zip(english, ntrex(corpora, lang), strict=True)
            if s.strip() and t.strip()]


def rule_flags(pairs: Sequence[Pair], langs: list[str], rule: str, *,
               batch_rows: int | None = None, **config: Any) -> Any:
    """The rows the rules stage rejects as ``rule`` (a bool array), ``batch_rows`` pairs a
    batch (default: all in one), with ``config`` as the recipe's ``[rules]`` keys."""
    import numpy as np
    import pyarrow as pa

    from spr_data.qa.rules import RulesStage
    from spr_data.recipe import RulesConfig

    size = batch_rows or max(len(pairs), 1)
    parts = []
    for lo in range(0, len(pairs), size):
        chunk = pairs[lo:lo + size]
        batch = pa.RecordBatch.from_arrays([pa.array([s for s, _ in chunk]),
                                            pa.array([t for _, t in chunk])], ["src", "tgt"])
        stage = RulesStage(RulesConfig(**config), ("src", "tgt"), langs)
        parts.append(dict(stage.apply(batch).rejects)[rule])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _tsv(path: Path) -> list[Pair]:
    rows = [line.split("\t") for line in read_lines(path) if line]
    return [(r[0], r[1]) for r in rows]


def tatoeba_cmn(corpora: Path) -> list[Pair]:
    return _tsv(corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz")


def tatoeba_ben(corpora: Path) -> list[Pair]:
    return _tsv(corpora / "parallel/tatoeba_manythings_eng-ben.tsv")


def multi30k(corpora: Path) -> list[Pair]:
    base = corpora / "parallel/multi30k"
    return list(zip(read_lines(base / "train.en.gz"), read_lines(base / "train.de.gz"),
                    strict=True))


def opennmt_wmt(corpora: Path) -> list[Pair]:
    """The OpenNMT WMT en–de sample: web-crawled news, with the real junk such data has."""
    base = corpora / "parallel"
    return list(zip(read_lines(base / "opennmt_wmt_en-de.train.en.gz"),
                    read_lines(base / "opennmt_wmt_en-de.train.de.gz"), strict=True))


def tatoeba_jpn(corpora: Path) -> list[Pair]:
    """(English, Japanese) Tatoeba pairs: a translation, on the wrong side of an en–zh pair."""
    base = corpora / "parallel/tatoeba_laser"
    return list(zip(read_lines(base / "tatoeba.jpn-eng.eng"),
                    read_lines(base / "tatoeba.jpn-eng.jpn"), strict=True))


@dataclass(frozen=True)
class Corpus:
    """A real corpus of the quality tests: how to load it and what its junk is made of."""

    load: Callable[[Path], list[Pair]]
    langs: str
    foreign: str  # the NTREX language of its wrong_language junk
    japanese: bool = False  # en–zh: Japanese pairs as junk


CORPORA: dict[str, Corpus] = {
    "tatoeba-eng-cmn": Corpus(tatoeba_cmn, "en-zh", "fra", japanese=True),
    "multi30k-en-de": Corpus(multi30k, "en-de", "fra"),
    "opennmt-wmt-en-de": Corpus(opennmt_wmt, "en-de", "fra"),
    "tatoeba-eng-ben": Corpus(tatoeba_ben, "en-bn", "hin"),
}


# --- measuring clean on a mix ---------------------------------------------------------------

@dataclass
class Quality:
    """What clean did to a mix: recall per junk kind, and the real pairs it rejected.

    ``real_rejected`` counts every real row rejected; ``real_duplicates`` those whose reason is
    ``duplicate`` (real pairs the corpus repeats after normalization, correct to drop).
    """

    level: float
    rows: int
    junk: Counter[str]
    caught: Counter[str]
    real: int
    real_by_reason: Counter[str]
    junk_by_reason: Counter[str]
    missed: dict[str, list[Pair]] = field(default_factory=dict)
    real_examples: dict[str, list[Pair]] = field(default_factory=dict)
    reports: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recall(self) -> dict[str, float]:
        return {k: self.caught[k] / n for k, n in self.junk.items()}

    @property
    def real_duplicates(self) -> int:
        return self.real_by_reason["duplicate"]

    @property
    def real_rejected(self) -> float:
        """Share of the real rows rejected, their true duplicates aside."""
        return (sum(self.real_by_reason.values()) - self.real_duplicates) / max(1, self.real)

    def merge(self, other: Quality) -> None:
        self.rows += other.rows
        self.junk.update(other.junk)
        self.caught.update(other.caught)
        self.real += other.real
        self.real_by_reason.update(other.real_by_reason)
        self.junk_by_reason.update(other.junk_by_reason)
        for mine, theirs in ((self.missed, other.missed),
                             (self.real_examples, other.real_examples)):
            for k, v in theirs.items():
                mine[k] = (mine.get(k, []) + v)[:5]
        self.reports += other.reports

    def summary(self) -> str:
        """One line per kind below 0.95 and the real rejects: for an assertion message."""
        low = {k: round(r, 3) for k, r in self.recall.items() if r < 0.95}
        return (f"level {self.level}: recall < 0.95 {low}; real rejected "
                f"{self.real_rejected:.2%} {dict(self.real_by_reason)}; missed e.g. "
                f"{ {k: v[:2] for k, v in self.missed.items() if k in low} }")


def score(mix_: Mix, rejected: dict[int, str], level: float) -> Quality:
    """Compare the rows a filter rejected (row index → reason) with the labels of the mix."""
    quality = Quality(level, len(mix_.pairs), mix_.count(), Counter(), 0, Counter(),
                      Counter())
    for i, (pair, label) in enumerate(zip(mix_.pairs, mix_.labels, strict=True)):
        reason = rejected.get(i)
        if label is None:
            quality.real += 1
            if reason is not None:
                quality.real_by_reason[reason] += 1
                examples = quality.real_examples.setdefault(reason, [])
                if len(examples) < 5:
                    examples.append(pair)
        elif reason is not None:
            quality.caught[label] += 1
            quality.junk_by_reason[reason] += 1
        else:
            missed = quality.missed.setdefault(label, [])
            if len(missed) < 5:
                missed.append(pair)
    return quality


def spr_rejections(mix_: Mix, langs: str, root: Path, *, recipe: Path | None = None,
                   workers: int = 2) -> tuple[dict[int, str], dict[str, Any]]:
    """Run ``ingest`` (Moses files) and ``clean`` on the mix under ``root``: the rejected row
    indices with their first reason, and ``report.json``."""
    import json

    import numpy as np

    from spr_data import ingest, open_dataset
    from spr_data.outdir import REJECTS_DIR
    from spr_data.pipeline.clean import clean

    root.mkdir(parents=True, exist_ok=True)
    (root / "c.src").write_text("".join(s + "\n" for s, _ in mix_.pairs), encoding="utf-8")
    (root / "c.tgt").write_text("".join(t + "\n" for _, t in mix_.pairs), encoding="utf-8")
    summary = ingest([root / "c.src", root / "c.tgt"], root / "ds", format="moses",
                     langs=langs.split("-"))
    if summary.records != len(mix_.pairs):
        raise RuntimeError(f"ingest read {summary.records} records of {len(mix_.pairs)}")
    recipe = recipe or (Path(__file__).resolve().parents[1] / "data_manifests"
                        / f"{langs}.toml")
    clean(root / "ds", root / "clean", recipe=recipe, workers=workers)
    rejected: dict[int, str] = {}
    for directory in (root / "ds" / REJECTS_DIR, root / "clean" / REJECTS_DIR):
        if not (directory / "manifest.json").exists():
            continue
        rejects = open_dataset(directory)
        table = rejects.take(np.arange(len(rejects)))
        for i, reason in zip(table.column("id").to_pylist(),
                             table.column("reason").to_pylist(), strict=True):
            rejected[int(i)] = reason
    report = json.loads((root / "clean" / "report.json").read_text())
    return rejected, report


def mixes_for(corpus: Sequence[Pair], level: float, *, kinds: Sequence[str] | None = None,
              seed: int = 0, foreign: Sequence[str] = (), japanese: Sequence[Pair] = (),
              rows: int | None = None, min_per_kind: int = 40, max_rows: int = 8000) -> list[Mix]:
    """One mix of all ``kinds``, or, where the corpus is too small for each kind to get
    ``min_per_kind`` rows at this level, several mixes that share the kinds out."""
    kinds = list(kinds) if kinds is not None else default_kinds(foreign=foreign,
                                                                japanese=japanese)
    groups = [kinds]
    while True:
        try:
            return [mix(corpus, level, kinds=g, rows=rows, seed=seed + n, foreign=foreign,
                        japanese=japanese, min_per_kind=min_per_kind, max_rows=max_rows)
                    for n, g in enumerate(groups)]
        except ValueError as error:
            if "pass fewer kinds" not in str(error) or len(groups) >= len(kinds):
                raise
            n = len(groups) + 1
            groups = [kinds[i::n] for i in range(n)]


def run_quality(corpus: Sequence[Pair], langs: str, foreign: Sequence[str], root: Path, *,
                level: float = 0.25, kinds: Sequence[str] | None = None, seed: int = 0,
                japanese: Sequence[Pair] = (), rows: int | None = None,
                recipe: Path | None = None, min_per_kind: int = 40,
                max_rows: int = 8000) -> Quality:
    """Junk at ``level`` in real pairs, cleaned with ``langs``' recipe (or ``recipe``), measured.

    Where the corpus is too small for every kind to get ``min_per_kind`` rows at this level,
    the kinds are split over several mixes (each a fresh ingest + clean) and the results
    merged. ``level=0`` measures the real corpus alone (``rows`` of it, at most ``max_rows``).
    """
    mixes = mixes_for(corpus, level, kinds=kinds, seed=seed, foreign=foreign,
                      japanese=japanese, rows=rows, min_per_kind=min_per_kind,
                      max_rows=max_rows)
    total: Quality | None = None
    for n, mixed in enumerate(mixes):
        rejected, report = spr_rejections(mixed, langs, root / f"mix{n}", recipe=recipe)
        quality = score(mixed, rejected, level)
        quality.reports.append(report)
        if total is None:
            total = quality
        else:
            total.merge(quality)
    assert total is not None
    return total


def load_corpus(corpora: Path, name: str) -> tuple[list[Pair], Corpus, list[str], list[Pair]]:
    """A corpus of ``CORPORA`` with its foreign sentences and (for en–zh) Japanese pairs."""
    spec = CORPORA[name]
    return (spec.load(corpora), spec, ntrex(corpora, spec.foreign),
            tatoeba_jpn(corpora) if spec.japanese else [])
