"""Benchmark ``fertility-report``: 100k real segments × 3 tokenizers, beside a plain loop.

    python benchmarks/bench_fertility.py [--segments 100000]

Segments: all 35 NTREX-128 files (23 scripts) then Tatoeba eng-cmn, both sides, to the count.
Tokenizers: GPT-2 (HF byte-level BPE), Llama 2 (SentencePiece), Llama 3 (tiktoken ranks).
The baseline is the obvious per-sentence loop with each library's own single-sentence call
(``Tokenizer.encode``, ``SentencePieceProcessor.encode``, ``Encoding.encode_ordinary``),
adding up characters and tokens per language (no scripts, no mark counts: less work than the
report).
Target: at least 5× the loop, and under 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.qa.fertility import TextSource, fertility_report  # noqa: E402
from spr_data.qa.scripts import normalize_lang  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "corpora")
    args = parser.parse_args()
    sources = load_segments(args.corpora, args.segments)
    n = sum(len(s.texts) for s in sources)
    t = args.corpora / "tokenizers"
    tokenizers = [load_tokenizer(f"gpt2={t / 'gpt2-vocab.json'}"),
                  load_tokenizer(f"llama2={t / 'llama2_tokenizer.model'}"),
                  load_tokenizer(f"llama3={t / 'llama3_tokenizer.model'}")]
    started = time.perf_counter()
    report = fertility_report(sources, tokenizers)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    loop = plain_loop(sources, tokenizers)
    base = time.perf_counter() - started
    for tok in tokenizers:  # the two agree on every language
        for lang, value in loop[tok.name].items():
            got = report["tokenizers"][tok.name]["by_lang"].get(lang, {}).get("chars_per_token")
            if got is not None and abs(got - value) > 1e-3 * value:
                raise SystemExit(f"mismatch {tok.name} {lang}: {got} vs {value}")
    print(f"{n:,} segments in {len(sources)} inputs × {len(tokenizers)} tokenizers")
    print(f"{'fertility-report':<24} {n * len(tokenizers) / ours:>10,.0f} segment-tokenizations/s"
          f"  {ours:6.1f} s  (scripts, marks, pre-tokenizer cuts, shares, parity)")
    print(f"{'plain per-sentence loop':<24} {n * len(tokenizers) / base:>10,.0f} "
          f"segment-tokenizations/s  {base:6.1f} s  (characters and tokens per language)")
    print(f"speed-up {base / ours:.1f}×; targets: ≥ 5× the loop, under 30 s")


if __name__ == "__main__":
    main()
