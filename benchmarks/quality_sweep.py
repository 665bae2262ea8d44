"""One line of means per alignment setting: the quality corpora plus two held-out pairs, each
at 0/10/25/50% junk, for comparing changes to the alignment model before they land.

    python benchmarks/quality_sweep.py [--align "iterations = 5" ...] [--json FILE]

The corpora are ``tests/junk.CORPORA`` (the quality tests': Tatoeba eng–cmn and eng–ben,
Multi30k en–de, the OpenNMT WMT en–de sample) with their recipes from ``data_manifests/``, and
Multi30k en–cs and en–fr with the default recipe (no recipe of their own, and never tuned on;
their wrong-language junk is German NTREX). Mixes are those of ``tests/test_clean_quality.py``
(seed 13, at most 8,000 rows a mix, ``--junk-rows``; the corpus alone up to 30,000; ``--corpus``
picks some; ``--levels`` other junk shares, ``--seed`` other mixes). ``--align`` lines are
added to each recipe's ``[align]`` table. About a minute a setting on 2 cores. Prints one line
per corpus and level, then the means over the corpus-levels (24 by default): real pairs
rejected under junk (the WMT sample aside: its own rows hold junk) and with none, and the
recall of the kinds only the alignment model catches. ``--held-out-kinds`` mixes junk made
differently instead (``tests.junk.HELD_OUT_MAKERS``: word salad, half the words replaced, a
sentence appended to either side, a target cut to its half, a source-language target;
nothing was tuned on them), with re-paired junk beside them as the reference.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.testing import corpora_dir  # noqa: E402
from tests.junk import (  # noqa: E402
    CORPORA,
    HELD_OUT_MAKERS,
    load_corpus,
    ntrex,
    read_lines,
    run_quality,
)

LEVELS = (0.0, 0.1, 0.25, 0.5)
HELD_OUT = ("cs", "fr")
ALIGN_KINDS = ("re_paired", "misaligned", "shifted_block", "partial")
NOISY = "opennmt-wmt-en-de"


def recipe_text(langs: str, extra: list[str], rules: list[str] | None = None) -> str:
    """The language pair's recipe (or the default one), with ``extra`` lines in ``[align]``
    and ``rules`` lines in ``[rules]``."""
    path = ROOT / "data_manifests" / f"{langs}.toml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for section, added in (("align", extra), ("rules", rules or [])):
        if not added:
            continue
        lines = "\n".join(added)
        if f"[{section}]" in text:
            text = text.replace(f"[{section}]", f"[{section}]\n{lines}", 1)
        else:
            text = f"{text}\n[{section}]\n{lines}\n"
    return text


def jobs(corpora: Path) -> list[tuple[str, str, Any, list[str], Any]]:
    out = []
    for name, spec in CORPORA.items():
        corpus, _, foreign, japanese = load_corpus(corpora, name)
        out.append((name, spec.langs, corpus, foreign, japanese))
    base = corpora / "parallel/multi30k"
    english = read_lines(base / "train.en.gz")
    for lang in HELD_OUT:
        pairs = list(zip(english, read_lines(base / f"train.{lang}.gz"), strict=True))
        out.append((f"multi30k-en-{lang} (held out)", f"en-{lang}", pairs,
                    ntrex(corpora, "deu"), []))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, default=None)
    parser.add_argument("--align", action="append", default=[],
                        help='a line for [align], e.g. "iterations = 5" (repeatable)')
    parser.add_argument("--rules", action="append", default=[],
                        help='a line for [rules], e.g. "length_ratio_z = 4.0" (repeatable)')
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument("--junk-rows", type=int, default=8000,
                        help="rows of a mix with junk, at most (default 8,000, the quality "
                             "tests'; more than one slice of clean's tests what depends on it)")
    parser.add_argument("--held-out-kinds", action="store_true",
                        help="junk made differently (tests.junk.HELD_OUT_MAKERS) and re-paired "
                             "junk, instead of the quality tests' kinds")
    parser.add_argument("--corpus", action="append", default=[],
                        help="only this corpus (its name as printed; repeatable)")
    parser.add_argument("--seed", type=int, default=13,
                        help="the mixes' seed (13: the quality tests'; another draws other "
                             "real rows and other junk, for the spread of each figure)")
    parser.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                        help="junk shares to mix (default 0 0.1 0.25 0.5; a low share such "
                             "as 0.02 mixes more rows, so each kind still gets 40)")
    args = parser.parse_args()
    corpora = corpora_dir(args.corpora)
    todo = jobs(corpora)
    unknown = set(args.corpus) - {job[0] for job in todo}
    if unknown:
        parser.error(f"unknown --corpus {sorted(unknown)}; known: {[job[0] for job in todo]}")
    work = Path(tempfile.mkdtemp(prefix="spr-quality-sweep-"))
    rows: list[dict[str, Any]] = []
    kinds = [*HELD_OUT_MAKERS, "re_paired"] if args.held_out_kinds else None
    shown = list(kinds) if kinds else list(ALIGN_KINDS)
    try:
        for name, langs, corpus, foreign, japanese in todo:
            if args.corpus and name not in args.corpus:
                continue
            recipe = work / f"{langs}.toml"
            recipe.write_text(recipe_text(langs, args.align, args.rules), encoding="utf-8")
            for level in args.levels:
                quality = run_quality(corpus, langs, foreign, work / f"{langs}-{level}",
                                      level=level, japanese=japanese, seed=args.seed,
                                      recipe=recipe,
                                      kinds=kinds,
                                      max_rows=30000 if level == 0 else args.junk_rows)
                row = {"corpus": name, "level": level, "real_rejected": quality.real_rejected,
                       "recall": quality.recall, "real_by_reason": dict(quality.real_by_reason)}
                rows.append(row)
                recall = " ".join(f"{k} {quality.recall[k]:.2f}" for k in shown
                                  if k in quality.recall)
                others = [v for k, v in quality.recall.items() if k not in shown]
                print(f"{name:<30} {level:>4}: real rejected {quality.real_rejected:6.2%}  "
                      f"{recall}  others >= {min(others, default=1.0):.2f}", flush=True)
                shutil.rmtree(work / f"{langs}-{level}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    junk = [r for r in rows if r["level"] > 0]
    real = [r["real_rejected"] for r in junk if r["corpus"] != NOISY]
    alone = [r["real_rejected"] for r in rows if r["level"] == 0 and r["corpus"] != NOISY]
    if not (junk and real):  # --corpus named only the WMT sample, or no level with junk
        return
    means = " ".join(f"{k} {sum(r['recall'][k] for r in junk) / len(junk):.3f}"
                     for k in shown if all(k in r["recall"] for r in junk))
    settings = ", ".join(args.align + args.rules) or "the recipes"
    print(f"means over {len(rows)} corpus-levels ({settings}): "
          f"real rejected {sum(real) / len(real):.2%} under junk (worst {max(real):.2%}), "
          + (f"{sum(alone) / len(alone):.2%} with none; " if alone else "") + means)


if __name__ == "__main__":
    main()
