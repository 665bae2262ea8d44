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
import random
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError
from spr_data.qa.scripts import CJK, normalize_lang, profile
from spr_data.reader import ReaderOptions
from spr_data.tokenizers import Tokenizer

__all__ = ["TextSource", "chart_html", "fertility_report", "read_sources"]

_BATCH = 4096
#: segments of each input whose pre-tokenizer pieces are looked at (every n/SAMPLE-th one)
PRETOKEN_SAMPLE = 200
#: warning thresholds; MARK_SPLIT_WARN applies to the pre-tokenizer's pieces
MARK_SPLIT_WARN = 0.01
LOW_CHARS_PER_TOKEN = 2.0
HIGH_LATIN_CHARS_PER_TOKEN = 3.5
BALANCE_WARN = 0.25


@dataclass
class TextSource:
    """Segments of one input (a file, or one side of a dataset) and their language."""

    name: str
    lang: str | None
    texts: list[str]
    #: a language per segment (a cleaned dataset's langid column), when the input has one
    seg_langs: list[str] | None = None


def read_sources(inputs: Sequence[str | Path], *, sample: int | None = None,
                 seed: int = 0, reader: ReaderOptions | None = None) -> list[TextSource]:
    """Text files (one segment per line; compression, BOM and CRLF handled) or datasets
    (local, on a network filesystem or at an ``http(s)://`` URL, read as ``reader`` says)."""
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
        sources.append(TextSource(path.name, langs[0] if langs else None, lines))
    if sample is not None:
        rng = random.Random(seed)
        for s in sources:
            if len(s.texts) > sample:
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
        texts = [t for b in ds.iter_batches() for t in b.column(column).to_pylist()]
        lang = ds.langs[i] if i < len(ds.langs) and ds.langs[i] != "und" else None
        side = "text" if len(columns) == 1 else ("src", "tgt")[i]
        seg_langs = None
        if lang is None and f"lid_{side}" in ds.schema.names:  # what clean's langid found
            seg_langs = [x for b in ds.iter_batches() for x in b.column(f"lid_{side}").to_pylist()]
        out.append(TextSource(f"{Path(path).name}:{column}", lang, texts, seg_langs))
    return out


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


def _count(texts: list[str], tokenizer: Tokenizer) -> _Counts:
    arr = pa.array(texts, pa.string())
    n = len(texts)
    tokens = np.zeros(n, dtype=np.int64)
    fallback, unknown, marks, runs, continued = (np.zeros(n, dtype=np.int64) for _ in range(5))
    for start in range(0, n, _BATCH):
        ids = tokenizer.encode(texts[start:start + _BATCH])
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                           count=int(lengths.sum()))
        rows = np.repeat(np.arange(len(ids)), lengths)
        stop = start + len(ids)
        tokens[start:stop] = lengths
        for out, flags in ((fallback, tokenizer.byte_fallback), (unknown, tokenizer.unknown),
                           (marks, tokenizer.starts_with_mark)):
            hit = flags[np.minimum(flat, len(flags) - 1)]
            out[start:stop] = np.bincount(rows[hit], minlength=len(ids))
        if tokenizer.word_initial is not None and len(flat):
            # a word starts at a word-initial token or at a segment's first token
            begins = tokenizer.word_initial[np.minimum(flat, len(tokenizer.word_initial) - 1)]
            begins[np.cumsum(lengths)[:-1][lengths[1:] > 0]] = True
            begins[0] = True
            run_id = np.cumsum(begins) - 1
            run_len = np.bincount(run_id)
            run_row = rows[begins]
            runs[start:stop] = np.bincount(run_row, minlength=len(ids))
            continued[start:stop] = np.bincount(run_row[run_len >= 2], minlength=len(ids))
    words = pc.list_value_length(pc.utf8_split_whitespace(arr)).to_numpy()
    pretokens = np.full(n, -1, dtype=np.int64)
    pretoken_marks = np.zeros(n, dtype=np.int64)
    # the pre-tokenizer's cuts are a rate: a sample of each input measures it
    for i in range(0, n, max(1, n // PRETOKEN_SAMPLE)):
        pieces = tokenizer.pretokens([texts[i]])
        if pieces is None:
            break
        pretokens[i] = len(pieces)
        pretoken_marks[i] = sum(1 for p in pieces if p and _is_mark(p[0]))
    return _Counts(np.asarray(pc.utf8_length(arr).to_numpy()),
                   np.asarray(pc.binary_length(arr).to_numpy()), np.asarray(words), tokens,
                   fallback, unknown, marks, runs, continued, pretokens, pretoken_marks)


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _metrics(c: _Counts, sel: np.ndarray, total_chars: int, total_tokens: int,
             spaceless: bool) -> dict[str, Any]:
    chars, nbytes = int(c.chars[sel].sum()), int(c.bytes[sel].sum())
    tokens = int(c.tokens[sel].sum())
    words = int(c.words[sel].sum())
    per = max(tokens, 1)
    return {
        "segments": int(sel.sum()), "chars": chars, "bytes": nbytes, "tokens": tokens,
        "words": words,
        "chars_per_token": round(chars / per, 4), "bytes_per_token": round(nbytes / per, 4),
        "tokens_per_word": round(tokens / max(words, 1), 4),
        "byte_fallback_rate": round(int(c.fallback[sel].sum()) / per, 5),
        "unknown_rate": round(int(c.unknown[sel].sum()) / per, 5),
        "mark_split_rate": round(int(c.marks[sel].sum()) / per, 5),
        "continued_words": round(int(c.continued[sel].sum()) / max(int(c.runs[sel].sum()), 1),
                                 5),
        "pretoken_mark_split_rate": _pretoken_rate(c, sel),
        "char_share": round(chars / max(total_chars, 1), 5),
        "token_share": round(tokens / max(total_tokens, 1), 5),
        "spaceless_script": spaceless,
    }


def _pretoken_rate(c: _Counts, sel: np.ndarray) -> float | None:
    """Share of the sampled pre-tokenizer pieces that begin with a combining mark."""
    sampled = sel & (c.pretokens >= 0)
    if not sampled.any():
        return None
    return round(int(c.pretoken_marks[sampled].sum()) / max(int(c.pretokens[sampled].sum()), 1),
                 5)


def fertility_report(sources: list[TextSource], tokenizers: list[Tokenizer], *,
                     reference: str = "en") -> dict[str, Any]:
    """The report as the CLI's ``--json`` writes it (see the README for every field)."""
    if not sources:
        raise InputError("no input text to measure")
    scripts = np.concatenate([profile(pa.array(s.texts, pa.string())).dominant_script()
                              for s in sources]) if sources else np.array([])
    per_segment: list[str | None] = [
        lang for s in sources
        for lang in (s.seg_langs if s.seg_langs is not None else [s.lang] * len(s.texts))]
    langs = np.array([normalize_lang(lang) if lang else "und" for lang in per_segment],
                     dtype=object)
    ref = normalize_lang(reference)
    report: dict[str, Any] = {"tokenizers": {}, "warnings": [], "reference": ref}
    # SentencePiece and HF release the GIL while they encode: one tokenizer's Python-side
    # work overlaps another's native work
    with ThreadPoolExecutor(2) as pool:
        counted = list(pool.map(lambda tok: [_count(s.texts, tok) for s in sources], tokenizers))
    for tok, per_source in zip(tokenizers, counted, strict=True):
        counts = _Counts(*(np.concatenate([getattr(c, f) for c in per_source])
                           for f in _Counts.__dataclass_fields__))
        total_chars, total_tokens = int(counts.chars.sum()), int(counts.tokens.sum())
        by_script = {
            str(script): _metrics(counts, scripts == script, total_chars, total_tokens,
                                  str(script) in CJK)
            for script in sorted(set(scripts.tolist()))
        }
        by_lang = {
            str(lang): _metrics(counts, langs == lang, total_chars, total_tokens, False)
            for lang in sorted(set(langs.tolist())) if lang != "und"
        }
        _add_parity(by_lang, sources, per_source, ref)
        report["tokenizers"][tok.name] = {"kind": tok.kind, "by_script": by_script,
                                          "by_lang": by_lang}
        report["warnings"] += _warnings(tok.name, by_script, by_lang)
    return report


def _add_parity(by_lang: dict[str, Any], sources: list[TextSource], counts: list[_Counts],
                ref: str) -> None:
    """Tokens for the same lines in language X over tokens in the reference language, on
    sources with as many lines as a reference source (multi-parallel files)."""
    refs = [c for s, c in zip(sources, counts, strict=True)
            if s.lang and normalize_lang(s.lang) == ref]
    if not refs:
        return
    base = refs[0]
    for s, c in zip(sources, counts, strict=True):
        if s.lang and len(c.tokens) == len(base.tokens):
            lang = normalize_lang(s.lang)
            by_lang[lang]["parity"] = round(int(c.tokens.sum()) / max(int(base.tokens.sum()), 1), 4)


def _warnings(name: str, by_script: dict[str, Any], by_lang: dict[str, Any]) -> list[str]:
    out = []
    latin = by_script.get("Latin", {}).get("chars_per_token", 0.0)
    for script, m in by_script.items():
        rate = m["pretoken_mark_split_rate"]
        if rate is not None and rate > MARK_SPLIT_WARN:
            out.append(f"{name}: its pre-tokenizer cuts {script} words at combining marks "
                       f"({rate:.1%} of its pieces begin with one, and {m['mark_split_rate']:.1%}"
                       " of the tokens): its letter class lacks \\p{M}; keep marks inside "
                       "words (train-tokenizer --kind bpe/byte-bpe does)")
        if script not in ("None", "Common", "Latin") and latin > HIGH_LATIN_CHARS_PER_TOKEN \
                and m["chars_per_token"] < LOW_CHARS_PER_TOKEN:
            out.append(f"{name}: {script} gets {m['chars_per_token']:.2f} characters per token "
                       f"while Latin gets {latin:.2f}: the model sees far fewer {script} "
                       "characters per step than the data mix promises")
    for lang, m in by_lang.items():
        if m["char_share"] and abs(m["token_share"] - m["char_share"]) / m["char_share"] \
                > BALANCE_WARN:
            out.append(f"{name}: {lang} is {m['char_share']:.1%} of the characters but "
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
