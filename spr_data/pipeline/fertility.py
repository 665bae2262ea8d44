"""Tokenizer fertility per script and per language: the report that catches the Bengali trap.

A byte-level BPE whose pre-tokenizer cuts words at combining marks gives Bengali ~1.4
characters per token while English gets ~3.9, silently inverting a corpus' language balance.
For each tokenizer this measures, per dominant script of each segment and per language:
characters, bytes and words per token, byte-fallback, unknown and *mark-split* rates (tokens
that begin with a combining mark: the signature of that pre-tokenizer), each group's share of
the corpus by characters and by tokens, and parity against a reference language on
multi-parallel inputs (files whose line i means the same thing).
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError
from spr_data.qa.scripts import CJK, normalize_lang, profile
from spr_data.reader import ReaderOptions, location_name
from spr_data.tokenizers import FALLBACK, MARK, UNKNOWN, WORD_INITIAL, Tokenizer

__all__ = ["TextSource", "chart_html", "fertility_report", "read_sources"]

log = logging.getLogger(__name__)

_BATCH = 4096
#: segments of each input whose pre-tokenizer pieces are looked at (every n/SAMPLE-th one)
PRETOKEN_SAMPLE = 64
#: warning thresholds; MARK_SPLIT_WARN applies to the pre-tokenizer's pieces
MARK_SPLIT_WARN = 0.01
LOW_CHARS_PER_TOKEN = 2.0
HIGH_LATIN_CHARS_PER_TOKEN = 3.5
BALANCE_WARN = 0.25
#: Tokenizer kinds that are yardsticks (one token per byte, per character): never warned about.
BASELINES = ("bytes", "chars")


@dataclass
class TextSource:
    """Segments of one input (a file, or one side of a dataset) and their language."""

    name: str
    lang: str | None
    texts: list[str]
    #: a language per segment (a cleaned dataset's langid column), when the input has one
    seg_langs: list[str] | None = None
    #: lines the input held before ``--sample`` (line-parallel inputs hold as many)
    lines: int | None = None
    #: inputs declared line-parallel share a group: the two sides of one dataset
    parallel_group: str | None = None


def read_sources(inputs: Sequence[str | Path], *, sample: int | None = None,
                 seed: int = 0, reader: ReaderOptions | None = None,
                 parallel: bool = False) -> list[TextSource]:
    """Text files (one segment per line; compression, BOM and CRLF handled) or datasets
    (local, on a network filesystem or at an ``http(s)://`` URL, read as ``reader`` says).

    ``parallel`` declares the text files line-parallel (line i of each says the same), for
    parity where their line lengths cannot show it; they must then hold as many lines."""
    from spr_data.pipeline.sources import iter_text_lines, langs_from_name

    sources = []
    for item in inputs:
        path = Path(item)
        if "://" in str(item):
            sources += _dataset_sources(str(item), reader)
            continue
        if not path.exists():
            raise InputError(f"input {path} does not exist")
        if path.is_dir():
            sources += _dataset_sources(str(path), reader)
            continue
        lines = [line for block in iter_text_lines(path) for line in block]
        langs = langs_from_name(path, "mono")
        sources.append(TextSource(path.name, langs[0] if langs else None, lines,
                                  lines=len(lines),
                                  parallel_group="--parallel" if parallel else None))
    declared = [s for s in sources if s.parallel_group == "--parallel"]
    if len({s.lines for s in declared}) > 1:
        raise InputError("parallel=True: the files should hold as many lines, found "
                         + ", ".join(f"{s.name} {s.lines:,}" for s in declared))
    if sample is not None:
        for s in sources:
            if len(s.texts) > sample:
                # inputs of as many lines keep the same ones: multi-parallel files stay parallel
                rng = random.Random(f"{seed}:{len(s.texts)}")
                keep = sorted(rng.sample(range(len(s.texts)), sample))
                s.texts = [s.texts[i] for i in keep]
    return sources


def _dataset_sources(path: str, reader: ReaderOptions | None) -> list[TextSource]:
    from spr_data.dataset import open_dataset
    from spr_data.schema import text_columns

    ds = open_dataset(path, reader=reader)
    out = []
    columns = text_columns(ds.kind)  # type: ignore[arg-type]
    for i, column in enumerate(columns):
        texts = [t or "" for b in ds.iter_batches() for t in b.column(column).to_pylist()]
        lang = ds.langs[i] if i < len(ds.langs) and ds.langs[i] != "und" else None
        side = "text" if len(columns) == 1 else ("src", "tgt")[i]
        seg_langs = None
        if lang is None and f"lid_{side}" in ds.schema.names:  # what clean's langid found
            seg_langs = [x for b in ds.iter_batches() for x in b.column(f"lid_{side}").to_pylist()]
        out.append(TextSource(f"{location_name(path)}:{column}", lang, texts, seg_langs,
                              lines=len(texts), parallel_group=path))
    return out


#: per-segment token statistics (rows of a _token_stats array; fields of _Counts)
_STATS = ("tokens", "fallback", "unknown", "marks", "runs", "continued")
#: segments encoded whole to check the word-by-word counts of each tokenizer
_WORDS_CHECK = 1000
#: below this many segments, encoding them whole is as fast (the checks are a fixed cost)
_WORDS_MIN_SEGMENTS = 20_000
#: rows profiled at once (the profile keeps ~600 bytes a row)
_PROFILE_ROWS = 1 << 16
#: whitespace other than a single space between words: such a segment is encoded whole
_NOT_WORD_SPACED = (r"[\x{9}-\x{d}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
                    r"\x{202f}\x{205f}\x{3000}]|  |^ | $")


@dataclass
class _Counts:
    """Per-segment counts of one source under one tokenizer."""

    chars: np.ndarray
    bytes: np.ndarray
    words: np.ndarray
    tokens: np.ndarray
    fallback: np.ndarray
    unknown: np.ndarray
    marks: np.ndarray
    runs: np.ndarray  # words as the tokens group them (a word-initial token starts one)
    continued: np.ndarray  # of which span two tokens or more
    pretokens: np.ndarray  # pieces the pre-tokenizer made (-1: no pre-tokenizer to ask)
    pretoken_marks: np.ndarray  # of which begin with a combining mark


@dataclass
class _Words:
    """The segments cut at their spaces, each distinct piece kept once: a segment with
    single spaces is its head (the first word) then its other words; any other segment is
    a head of its own."""

    heads: list[str]  # distinct heads
    segment_head: np.ndarray  # per segment: its head
    words: list[str]  # distinct words after a space (without it)
    occurrence_word: np.ndarray  # per occurrence of a word after a space: the word
    occurrence_segment: np.ndarray  # ... and its segment

    @classmethod
    def of(cls, texts: pa.Array) -> _Words:
        spaced = pc.invert(pc.match_substring_regex(texts, _NOT_WORD_SPACED))
        parts = pc.split_pattern(texts, " ")
        heads = pc.if_else(spaced, pc.list_element(parts, 0), texts).dictionary_encode()
        offsets = parts.offsets.to_numpy()
        later = np.ones(offsets[-1], dtype=bool)
        later[offsets[:-1][offsets[:-1] < offsets[-1]]] = False
        parent = pc.list_parent_indices(parts).to_numpy()
        later &= spaced.to_numpy(zero_copy_only=False)[parent]
        words = parts.values.filter(pa.array(later)).dictionary_encode()
        return cls(heads.dictionary.to_pylist(), heads.indices.to_numpy(),
                   words.dictionary.to_pylist(), words.indices.to_numpy(), parent[later])


def _token_stats(flat: np.ndarray, lengths: np.ndarray, tokenizer: Tokenizer) -> np.ndarray:
    """The _STATS of each of ``len(lengths)`` texts whose token ids are ``flat`` end to end."""
    n = len(lengths)
    out = np.zeros((len(_STATS), n), dtype=np.int64)
    out[0] = lengths
    if not len(flat):
        return out
    bits = tokenizer.id_bits[np.minimum(flat, len(tokenizer.id_bits) - 1)]
    ends = np.cumsum(lengths)
    starts = ends - lengths

    def per_text(hit: np.ndarray) -> np.ndarray:
        total = np.concatenate(([0], np.cumsum(hit, dtype=np.int64)))
        counts: np.ndarray = total[ends] - total[starts]
        return counts

    for k, bit in enumerate((FALLBACK, UNKNOWN, MARK), start=1):
        out[k] = per_text(bits & bit != 0)
    if tokenizer.word_initial is not None:
        # a word starts at a word-initial token or at a text's first token
        begins = bits & WORD_INITIAL != 0
        begins[starts[lengths > 0]] = True
        at = np.flatnonzero(begins)
        long_run = np.zeros(len(flat), dtype=bool)
        long_run[at[np.diff(at, append=len(flat)) >= 2]] = True
        out[4] = per_text(begins)
        out[5] = per_text(long_run)
    return out


def _encode_stats(texts: list[str], tokenizer: Tokenizer) -> np.ndarray:
    stats = [_token_stats(*tokenizer.encode_flat(texts[i:i + _BATCH]), tokenizer)
             for i in range(0, len(texts), _BATCH)]
    return np.concatenate(stats, axis=1) if stats else np.zeros((len(_STATS), 0), np.int64)


def _word_stats(words: _Words, tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray] | None:
    """The _STATS of each distinct word that ``tokenizer`` encodes alone (zeros for the
    others), and which those are."""
    alone = tokenizer.encodes_alone(words.words)
    encoded = tokenizer.encode_words([w for w, ok in zip(words.words, alone, strict=True) if ok])
    if encoded is None:
        return None
    stats = np.zeros((len(_STATS), len(words.words)), dtype=np.int64)
    stats[:, alone] = _token_stats(*encoded, tokenizer)
    return stats, alone


def _submit_stats(pool: ThreadPoolExecutor, texts: list[str], words: _Words | None,
                  tokenizer: Tokenizer) -> Callable[[], np.ndarray]:
    """Queue the tasks that give each segment's _STATS under ``tokenizer``: from its words
    and heads when it encodes words alone, else from the segments whole. The callable
    returned waits for them."""
    if words is None or not tokenizer.encodes_words:
        return pool.submit(_encode_stats, texts, tokenizer).result
    by_word = pool.submit(_word_stats, words, tokenizer)
    by_head = pool.submit(_encode_stats, words.heads, tokenizer)

    def collect() -> np.ndarray:
        per_word = by_word.result()
        stats = None if per_word is None else _combine(texts, words, *per_word,
                                                        by_head.result(), tokenizer)
        return stats if stats is not None else _encode_stats(texts, tokenizer)

    return collect


def _spread(n: int, count: int) -> np.ndarray:
    """Up to ``count`` indices spread evenly over ``range(n)``."""
    return np.unique(np.linspace(0, max(n - 1, 0), min(count, n)).astype(np.int64))


def _combine(texts: list[str], words: _Words, per_word: np.ndarray, word_alone: np.ndarray,
             per_head: np.ndarray, tokenizer: Tokenizer) -> np.ndarray | None:
    """Each segment's _STATS as its head's plus its words'; segments with a head or word
    that is not encoded alone are encoded whole. None unless the result equals the
    segments' own on a sample of segments encoded whole."""
    stats = per_head[:, words.segment_head]
    for k in range(len(_STATS)):
        stats[k] += np.bincount(words.occurrence_segment,
                                weights=per_word[k][words.occurrence_word],
                                minlength=len(texts)).astype(np.int64)
    whole = ~tokenizer.encodes_alone(words.heads)[words.segment_head]
    whole[words.occurrence_segment[~word_alone[words.occurrence_word]]] = True
    if whole.any():
        at = np.flatnonzero(whole)
        stats[:, at] = _encode_stats([texts[i] for i in at], tokenizer)
    check = _spread(len(texts), _WORDS_CHECK)
    if np.array_equal(stats[:, check], _encode_stats([texts[i] for i in check], tokenizer)):
        return stats
    log.info("%s: word-by-word counts differ from whole segments; encoding whole",
             tokenizer.name)
    return None


def _text_stats(array: pa.Array, bounds: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each segment's dominant script (profiled a block of one source at a time: an ASCII
    source takes a fast path), characters, bytes and whitespace-separated words."""
    scripts = [profile(array.slice(i, min(b, i + _PROFILE_ROWS) - i)).dominant_script()
               for a, b in itertools.pairwise(bounds) for i in range(a, b, _PROFILE_ROWS)]
    scripts.append(np.zeros(0, dtype=str))
    parts = pc.utf8_split_whitespace(array)  # leading/trailing whitespace gives "" parts
    empty = pc.equal(pc.utf8_length(parts.values), 0).to_numpy(zero_copy_only=False)
    words = (pc.list_value_length(parts).to_numpy() - np.bincount(
        pc.list_parent_indices(parts).to_numpy()[empty], minlength=len(array)))
    return (np.concatenate(scripts), np.asarray(pc.utf8_length(array).to_numpy()),
            np.asarray(pc.binary_length(array).to_numpy()), words)


def _pretoken_sample(sources: list[TextSource],
                     tokenizer: Tokenizer) -> list[tuple[np.ndarray, np.ndarray]]:
    return [_pretoken_stats(s.texts, tokenizer) for s in sources]


def _pretoken_stats(texts: list[str], tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """The pre-tokenizer's pieces, and those beginning with a combining mark, on every
    n/PRETOKEN_SAMPLE-th segment (-1 elsewhere): its cuts are a rate, a sample measures it."""
    n = len(texts)
    pretokens = np.full(n, -1, dtype=np.int64)
    pretoken_marks = np.zeros(n, dtype=np.int64)
    for i in range(0, n, max(1, n // PRETOKEN_SAMPLE)):
        pieces = tokenizer.pretokens([texts[i]])
        if pieces is None:
            break
        pretokens[i] = len(pieces)
        pretoken_marks[i] = sum(1 for p in pieces if p and _is_mark(p[0]))
    return pretokens, pretoken_marks


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _group_metrics(c: _Counts, codes: np.ndarray, names: list[str],
                   spaceless: frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """The metrics of each group of segments (``codes`` index ``names``)."""
    groups = len(names)

    def total(values: np.ndarray) -> list[int]:
        sums: list[int] = np.bincount(codes, weights=values,
                                      minlength=groups).astype(np.int64).tolist()
        return sums

    sums = {f: total(getattr(c, f)) for f in _Counts.__dataclass_fields__}
    sampled = c.pretokens >= 0  # the pre-tokenizer's pieces, on a sample of segments
    pieces, piece_marks = total(np.where(sampled, c.pretokens, 0)), total(c.pretoken_marks)
    has_sample = total(sampled)
    segments = np.bincount(codes, minlength=groups).tolist()
    all_chars, all_tokens = max(int(c.chars.sum()), 1), max(int(c.tokens.sum()), 1)
    out = {}
    for g, name in enumerate(names):
        chars, nbytes, tokens, words = (sums[f][g] for f in ("chars", "bytes", "tokens", "words"))
        per = max(tokens, 1)
        out[name] = {
            "segments": segments[g], "chars": chars, "bytes": nbytes, "tokens": tokens,
            "words": words,
            "chars_per_token": round(chars / per, 4), "bytes_per_token": round(nbytes / per, 4),
            "tokens_per_word": round(tokens / max(words, 1), 4),
            "byte_fallback_rate": round(sums["fallback"][g] / per, 5),
            "unknown_rate": round(sums["unknown"][g] / per, 5),
            "mark_split_rate": round(sums["marks"][g] / per, 5),
            "continued_words": round(sums["continued"][g] / max(sums["runs"][g], 1), 5),
            "pretoken_mark_split_rate": (round(piece_marks[g] / max(pieces[g], 1), 5)
                                         if has_sample[g] else None),
            "char_share": round(chars / all_chars, 5),
            "token_share": round(tokens / all_tokens, 5),
            "spaceless_script": name in spaceless,
        }
    return out


def fertility_report(sources: list[TextSource], tokenizers: list[Tokenizer], *,
                     reference: str = "en") -> dict[str, Any]:
    """The report as the CLI's ``--json`` writes it (see the README for every field)."""
    if not sources:
        raise InputError("no input text to measure")
    texts = [t for s in sources for t in s.texts]
    if not texts:
        raise InputError(f"no text to measure: {', '.join(s.name for s in sources)} "
                         "hold no segments")
    array = pa.array(texts, pa.large_string())
    bounds = np.cumsum([0] + [len(s.texts) for s in sources])
    langs = np.concatenate([
        np.array([normalize_lang(lang) if lang else "und" for lang in s.seg_langs], dtype=object)
        if s.seg_langs is not None else
        np.full(len(s.texts), normalize_lang(s.lang) if s.lang else "und", dtype=object)
        for s in sources])
    ref = normalize_lang(reference)
    pairs, not_parallel = parallel_pairs(sources, ref)
    report: dict[str, Any] = {"tokenizers": {}, "warnings": [], "warning_details": [],
                              "reference": ref,
                              "parity": {"pairs": [p.to_json(sources) for p in pairs],
                                         "not_parallel": not_parallel}}

    # the libraries encode in native code without the GIL, as do Arrow and numpy: two
    # threads share the tasks (text statistics; per tokenizer, its words, heads and
    # pre-tokenizer sample)
    with ThreadPoolExecutor(2) as pool:
        # first what does not need the words, while this thread cuts the segments into them;
        # the fast paths are checked on segments spread over the input, not on bare words
        text_stats = pool.submit(_text_stats, array, bounds)
        sample = [texts[i] for i in _spread(len(texts), _WORDS_CHECK)]
        checks = [pool.submit(t.check, sample) for t in tokenizers]
        pretokens = [pool.submit(_pretoken_sample, sources, t) for t in tokenizers]
        words = (_Words.of(array) if len(texts) >= _WORDS_MIN_SEGMENTS
                 and any(t.encodes_words for t in tokenizers) else None)
        for check in checks:
            check.result()
        stats = [_submit_stats(pool, texts, words, t) for t in tokenizers]
        measured = [(collect(), task.result())
                    for collect, task in zip(stats, pretokens, strict=True)]
    scripts, chars, nbytes, nwords = text_stats.result()
    unique_scripts, script_codes = np.unique(scripts, return_inverse=True)
    unique_langs, lang_codes = np.unique(langs, return_inverse=True)
    script_names, lang_names = [str(x) for x in unique_scripts], [str(x) for x in unique_langs]
    for tok, (tok_stats, pretoken) in zip(tokenizers, measured, strict=True):
        pieces = np.concatenate([p for p, _ in pretoken])
        piece_marks = np.concatenate([m for _, m in pretoken])
        counts = _Counts(chars=chars, bytes=nbytes, words=nwords, pretokens=pieces,
                         pretoken_marks=piece_marks, **dict(zip(_STATS, tok_stats, strict=True)))
        per_source = [_Counts(*(getattr(counts, f)[a:b] for f in _Counts.__dataclass_fields__))
                      for a, b in itertools.pairwise(bounds)]
        by_script = _group_metrics(counts, script_codes, script_names, CJK)
        by_lang = _group_metrics(counts, lang_codes, lang_names)
        by_lang.pop("und", None)
        _add_parity(by_lang, sources, per_source, ref, pairs, not_parallel)
        report["tokenizers"][tok.name] = {"kind": tok.kind, "by_script": by_script,
                                          "by_lang": by_lang}
        if tok.kind not in BASELINES:  # a yardstick, not a tokenizer anyone trains with
            details = _warnings(tok.name, by_script, by_lang)
            report["warnings"] += [d["message"] for d in details]
            report["warning_details"] += details
    return report


#: shifts of one input against the other whose length correlations are the negatives
_SHIFTS = (1, 2, 3, 5, 8, 13)
#: how many standard errors (1/sqrt(lines)) the aligned correlation must beat every shifted one
_PARALLEL_MARGIN_SE = 3.0


@dataclass(frozen=True)
class ParallelPair:
    """Input ``source`` is line-parallel with input ``reference`` (indices into the sources)."""

    source: int
    reference: int
    how: str  # "declared" (two sides of one dataset) or "detected" (line lengths)
    correlation: float | None = None  # of the log line lengths, aligned
    shifted: float | None = None  # the highest of the shifted alignments

    def to_json(self, sources: list[TextSource]) -> dict[str, Any]:
        return {"input": sources[self.source].name,
                "reference_input": sources[self.reference].name, "how": self.how,
                "length_correlation": self.correlation, "shifted_correlation": self.shifted}


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.std() == 0 or y.std() == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def line_parallel(a: list[str], b: list[str]) -> tuple[bool, float, float]:
    """Whether line i of ``b`` says what line i of ``a`` says, judged from the data: the lengths
    of translations go together (Gale & Church), so the correlation of the log line lengths
    aligned must beat that of the same files shifted by a few lines — negatives made from the
    inputs themselves, which also catch two files that are merely both sorted by length — by
    ``_PARALLEL_MARGIN_SE`` standard errors. Returns (parallel, aligned, best shifted)."""
    n = len(a)
    if n != len(b) or n < 3:
        return False, 0.0, 0.0
    x = np.log1p(np.fromiter(map(len, a), np.float64, n))
    y = np.log1p(np.fromiter(map(len, b), np.float64, n))
    aligned = _corr(x, y)
    shifted = max(_corr(x, np.roll(y, k)) for k in _SHIFTS if k < n)
    return aligned - shifted > _PARALLEL_MARGIN_SE / math.sqrt(n), round(aligned, 4), \
        round(shifted, 4)


def _lines(s: TextSource) -> int:
    return s.lines if s.lines is not None else len(s.texts)


def parallel_pairs(sources: list[TextSource],
                   ref: str) -> tuple[list[ParallelPair], dict[str, str]]:
    """Each input in another language paired with a reference-language input it is
    line-parallel with — declared (the two sides of one dataset) or detected, and in either
    case of as many lines — and, per language left without one, why parity is not computed.

    Equal line counts alone prove nothing: ``--sample N`` gives every input N lines."""
    refs = [i for i, s in enumerate(sources) if s.lang and normalize_lang(s.lang) == ref]
    pairs: list[ParallelPair] = []
    why: dict[str, str] = {}
    for j, s in enumerate(sources):
        lang = normalize_lang(s.lang) if s.lang else None
        if lang is None or lang == ref:
            continue
        if not refs:
            why.setdefault(lang, f"no input is in the reference language {ref}")
            continue
        reasons = []
        for i in refs:
            r = sources[i]
            if s.parallel_group is not None and s.parallel_group == r.parallel_group:
                pairs.append(ParallelPair(j, i, "declared"))
                break
            if (_lines(s), len(s.texts)) != (_lines(r), len(r.texts)):
                reasons.append(f"{s.name} has {_lines(s):,} lines and {r.name} {_lines(r):,}")
                continue
            parallel, aligned, shifted = line_parallel(r.texts, s.texts)
            if parallel:
                pairs.append(ParallelPair(j, i, "detected", aligned, shifted))
                break
            reasons.append(f"{s.name} and {r.name} have as many lines, but their lengths do "
                           f"not go together line by line (correlation {aligned:.2f}, shifted "
                           f"{shifted:.2f}): not translations of each other")
        else:  # the telling reason: lengths that do not go together, over a line count
            reasons.sort(key=lambda text: "as many lines" not in text)
            why.setdefault(lang, "not line-parallel with an input in the reference language "
                           f"{ref}: {reasons[0]}")
    paired = {normalize_lang(sources[p.source].lang or "") for p in pairs}
    return pairs, {lang: text for lang, text in why.items() if lang not in paired}


def _add_parity(by_lang: dict[str, Any], sources: list[TextSource], counts: list[_Counts],
                ref: str, pairs: list[ParallelPair], not_parallel: dict[str, str]) -> None:
    """Tokens for the same lines in language X over tokens in the reference language, summed
    over X's inputs that are line-parallel with a reference input (``parallel_pairs``); the
    other languages get ``parity: null`` and ``parity_note`` saying why."""
    sums: dict[str, list[int]] = {}
    for p in pairs:
        lang = normalize_lang(sources[p.source].lang or "")
        own, base = sums.setdefault(lang, [0, 0]), counts[p.reference].tokens
        own[0] += int(counts[p.source].tokens.sum())
        own[1] += int(base.sum())
    for lang, m in by_lang.items():
        m["parity"], m["parity_note"] = None, not_parallel.get(lang)
        if lang in sums:
            m["parity"] = round(sums[lang][0] / max(sums[lang][1], 1), 4)
        elif lang == ref and sums:
            m["parity"] = 1.0
        elif lang == ref:
            m["parity_note"] = "no input in another language is line-parallel with it"
        elif m["parity_note"] is None:
            m["parity_note"] = "its segments come from a language-id column, not one input"


def _warnings(name: str, by_script: dict[str, Any],
              by_lang: dict[str, Any]) -> list[dict[str, Any]]:
    """Each warning with its kind, the group it is about, a severity to rank it by (how far
    past its threshold) and a short form, so that the CLI can group them per tokenizer."""
    out: list[dict[str, Any]] = []

    def add(kind: str, group: str, severity: float, short: str, message: str) -> None:
        out.append({"tokenizer": name, "kind": kind, "group": group,
                    "severity": round(severity, 4), "short": short, "message": message})

    latin = by_script.get("Latin", {}).get("chars_per_token", 0.0)
    for script, m in by_script.items():
        rate = m["pretoken_mark_split_rate"]
        if rate is not None and rate > MARK_SPLIT_WARN:
            add("pretoken_mark_split", script, rate, f"{script} {rate:.1%}",
                f"{name}: its pre-tokenizer cuts {script} words at combining marks "
                f"({rate:.1%} of its pieces begin with one, and {m['mark_split_rate']:.1%}"
                " of the tokens): its letter class lacks \\p{M}; keep marks inside "
                "words (train-tokenizer --kind bpe/byte-bpe does)")
        if script not in ("None", "Common", "Latin") and latin > HIGH_LATIN_CHARS_PER_TOKEN \
                and m["chars_per_token"] < LOW_CHARS_PER_TOKEN:
            cpt = m["chars_per_token"]
            add("low_chars_per_token", script, latin / max(cpt, 1e-9),
                f"{script} {cpt:.2f} vs Latin {latin:.2f}",
                f"{name}: {script} gets {cpt:.2f} characters per token "
                f"while Latin gets {latin:.2f}: the model sees far fewer {script} "
                "characters per step than the data mix promises")
    for lang, m in by_lang.items():
        if m["char_share"] and abs(m["token_share"] - m["char_share"]) / m["char_share"] \
                > BALANCE_WARN:
            add("balance", lang, abs(math.log(max(m["token_share"], 1e-9) / m["char_share"])),
                f"{lang} {m['char_share']:.1%}→{m['token_share']:.1%}",
                f"{name}: {lang} is {m['char_share']:.1%} of the characters but "
                f"{m['token_share']:.1%} of the tokens")
    return out


def chart_html(report: dict[str, Any], title: str = "Characters per token by script") -> str:
    """A self-contained HTML page (inline SVG, no scripts, no downloads) with one bar per
    script and tokenizer: characters per token."""
    from html import escape

    names = list(report["tokenizers"])
    scripts = sorted({s for d in report["tokenizers"].values() for s in d["by_script"]
                      if s not in ("None", "Common")})
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
              "#ff9da7"]
    top = max((m["chars_per_token"] for d in report["tokenizers"].values()
               for s, m in d["by_script"].items() if s in scripts), default=1.0)
    bar, gap, left, height = 14, 10, 110, 260
    width = left + len(scripts) * (len(names) * bar + gap) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 90}">']
    for k in range(5):
        y = 20 + height * (1 - k / 4)
        parts.append(f'<line x1="{left - 5}" x2="{width - 10}" y1="{y}" y2="{y}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{left - 10}" y="{y + 4}" text-anchor="end" font-size="11">'
                     f"{top * k / 4:.1f}</text>")
    x = left
    for script in scripts:
        for i, name in enumerate(names):
            m = report["tokenizers"][name]["by_script"].get(script)
            if m:
                h = height * m["chars_per_token"] / top
                parts.append(f'<rect x="{x + i * bar}" y="{20 + height - h:.1f}" '
                             f'width="{bar - 2}" height="{h:.1f}" '
                             f'fill="{colors[i % len(colors)]}"><title>{escape(name)} · '
                             f'{escape(script)}: {m["chars_per_token"]:.2f}</title></rect>')
        parts.append(f'<text transform="translate({x + 4},{height + 30}) rotate(45)" '
                     f'font-size="11">{escape(script)}</text>')
        x += len(names) * bar + gap
    parts.append("</svg>")
    legend = "".join(f'<span style="color:{colors[i % len(colors)]}">■</span> {escape(n)} '
                     for i, n in enumerate(names))
    warnings = "".join(f"<li>{escape(w)}</li>" for w in report["warnings"])
    return (f"<!doctype html><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<body style='font-family:sans-serif'><h2>{escape(title)}</h2><p>{legend}</p>"
            f"{''.join(parts)}<h3>Warnings</h3><ul>{warnings or '<li>none</li>'}</ul></body>")
