"""Benchmark ``fertility-report``: 100k real segments × 3 tokenizers, beside a plain loop.

    python benchmarks/bench_fertility.py [--segments 100000] [--runs 3]

Segments: all 35 NTREX-128 files (23 scripts) then Tatoeba eng-cmn, both sides, to the count.
Tokenizers: GPT-2 (HF byte-level BPE), Llama 2 (SentencePiece), Llama 3 (tiktoken ranks).
Two baselines, in the same run, with each library's own single-sentence call
(``Tokenizer.encode``, ``SentencePieceProcessor.encode``, ``Encoding.encode_ordinary``):
the *tokenize-only* loop adds up characters and tokens per language (far less work than the
report: its floor); the *same-metrics* loop computes per segment what the report computes
(dominant script from the same Unicode table, characters, bytes, words, tokens, byte-fallback,
unknown and mark-initial tokens, words split into several tokens) and adds them up per script
and language — the plain-Python way to get the report. The report runs ``--runs`` times (fresh
tokenizers each time) and its median counts; each loop runs once. All three must agree on every
language's characters per token.
Target: at least 5× the loop, and under 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.pipeline.fertility import TextSource, fertility_report  # noqa: E402
from spr_data.qa.scripts import normalize_lang, script_ranges  # noqa: E402
from spr_data.testing import corpora_dir  # noqa: E402
from spr_data.tokenizers import load_tokenizer  # noqa: E402


def load_segments(corpora: Path, n: int) -> list[TextSource]:
    sources = []
    total = 0
    for path in sorted((corpora / "multiparallel/ntrex128").glob("newstest2019-*.txt.gz")):
        texts = [x for x in gzip.decompress(path.read_bytes()).decode().replace("\r\n", "\n")
                 .split("\n") if x][: n - total]
        sources.append(TextSource(path.name, path.name.split(".")[1], texts))
        total += len(texts)
    pairs = gzip.decompress((corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz")
                            .read_bytes()).decode().removeprefix("\ufeff").split("\n")
    for side, lang in ((0, "en"), (1, "zh")):
        texts = [p.split("\t")[side] for p in pairs if p][: max(0, n - total)]
        sources.append(TextSource(f"tatoeba:{lang}", lang, texts))
        total += len(texts)
    return [s for s in sources if s.texts]


def single(tok):  # type: ignore[no-untyped-def]
    """The library's own one-sentence encode."""
    if tok.kind == "hf":
        return lambda text: tok.encoder.encode(text, add_special_tokens=False).ids
    if tok.kind == "tiktoken":
        return tok.encoder.encode_ordinary
    return tok.encoder.encode


def plain_loop(sources: list[TextSource], tokenizers: list) -> dict:  # type: ignore[type-arg]
    out = {}
    for tok in tokenizers:
        encode = single(tok)
        chars: Counter[str] = Counter()
        tokens: Counter[str] = Counter()
        for s in sources:
            lang = normalize_lang(s.lang) if s.lang else "und"
            for text in s.texts:
                chars[lang] += len(text)
                tokens[lang] += len(encode(text))
        out[tok.name] = {lang: chars[lang] / tokens[lang] for lang in chars}
    return out


_SKIP = {"Common", "Inherited", "Unknown"}


def same_metrics_loop(sources: list[TextSource], tokenizers: list) -> dict:  # type: ignore[type-arg]
    """The plain loop that computes what the report computes per segment — dominant script
    (a bisect per character in the same Unicode Script table), characters, bytes, words,
    tokens, byte-fallback, unknown and mark-initial tokens, words split into several tokens —
    and adds them up per script and per language."""
    starts, _, names = script_ranges()
    start_list = starts.tolist()
    out = {}
    for tok in tokenizers:
        encode = single(tok)
        fallback, unknown = tok.byte_fallback.tolist(), tok.unknown.tolist()
        marks = tok.starts_with_mark.tolist()
        initial = tok.word_initial.tolist() if tok.word_initial is not None else None
        totals: dict[tuple[str, str], Counter[str]] = {}
        for s in sources:
            lang = normalize_lang(s.lang) if s.lang else "und"
            for text in s.texts:
                ids = encode(text)
                seen: Counter[str] = Counter(
                    names[bisect.bisect_right(start_list, ord(c)) - 1] for c in text)
                real = [(n, k) for k, n in seen.items() if k not in _SKIP]
                script = max(real)[1] if real else "Common"
                c = Counter(chars=len(text), bytes=len(text.encode()), words=len(text.split()),
                            tokens=len(ids))
                c["fallback"] = sum(fallback[i] for i in ids if i < len(fallback))
                c["unknown"] = sum(unknown[i] for i in ids if i < len(unknown))
                c["marks"] = sum(marks[i] for i in ids if i < len(marks))
                if initial is not None:
                    run = 0
                    for j, i in enumerate(ids):
                        if j == 0 or (i < len(initial) and initial[i]):
                            c["runs"] += 1
                            c["continued"] += run >= 2
                            run = 0
                        run += 1
                    c["continued"] += run >= 2
                for key in (("script", script), ("lang", lang)):
                    totals.setdefault(key, Counter()).update(c)
        out[tok.name] = {key[1]: t["chars"] / max(t["tokens"], 1)
                         for key, t in totals.items() if key[0] == "lang"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="report runs (the median counts)")
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    args = parser.parse_args()
    args.corpora = corpora_dir(args.corpora)
    sources = load_segments(args.corpora, args.segments)
    n = sum(len(s.texts) for s in sources)
    t = args.corpora / "tokenizers"
    specs = [f"gpt2={t / 'gpt2-vocab.json'}", f"llama2={t / 'llama2_tokenizer.model'}",
             f"llama3={t / 'llama3_tokenizer.model'}"]
    runs = []
    for _ in range(args.runs):  # fresh tokenizers each time: the twin's check is paid again
        tokenizers = [load_tokenizer(spec) for spec in specs]
        started = time.perf_counter()
        report = fertility_report(sources, tokenizers)
        runs.append(time.perf_counter() - started)
    ours = statistics.median(runs)
    started = time.perf_counter()
    loop = plain_loop(sources, tokenizers)
    base = time.perf_counter() - started
    started = time.perf_counter()
    full = same_metrics_loop(sources, tokenizers)
    full_base = time.perf_counter() - started
    for tok in tokenizers:  # all three agree on every language
        for lang, value in [*loop[tok.name].items(), *full[tok.name].items()]:
            got = report["tokenizers"][tok.name]["by_lang"].get(lang, {}).get("chars_per_token")
            if got is not None and abs(got - value) > 1e-3 * value:
                raise SystemExit(f"mismatch {tok.name} {lang}: {got} vs {value}")
    print(f"{n:,} segments in {len(sources)} inputs × {len(tokenizers)} tokenizers")
    print(f"{'fertility-report':<24} {n * len(tokenizers) / ours:>10,.0f} segment-tokenizations/s"
          f"  {ours:6.1f} s  (median of {', '.join(f'{r:.1f}' for r in runs)} s; scripts, marks, "
          "pre-tokenizer cuts, shares, parity)")
    print(f"{'plain per-sentence loop':<24} {n * len(tokenizers) / base:>10,.0f} "
          f"segment-tokenizations/s  {base:6.1f} s  (characters and tokens per language)")
    print(f"{'same-metrics plain loop':<24} {n * len(tokenizers) / full_base:>10,.0f} "
          f"segment-tokenizations/s  {full_base:6.1f} s  (scripts, words, flags, continued "
          "words per script and language)")
    print(f"speed-up {base / ours:.1f}× the tokenize-only loop, {full_base / ours:.1f}× the "
          "same-metrics loop; targets: ≥ 5× the loop, under 30 s")


if __name__ == "__main__":
    main()
