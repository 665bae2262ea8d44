"""Benchmark ``spr-data clean`` against a plain-Python loop implementing the same rules.

A corpus of N pairs is built from real pairs (Multi30k en-de: two random pairs joined into one,
so that pairs are distinct), with 5% junk of every kind from ``tests/junk.py``. It is
ingested, then cleaned three times in fresh subprocesses (pairs/s = rows in / wall seconds,
peak RSS of the run and its workers):

1. rules only (normalize + rules);
2. rules + langid + dedup;
3. the full default recipe with alignment (training time reported separately).

Beside them, in the same run: a plain-Python loop doing normalize + the same rules pair by pair
(on a subsample), and fastText language id alone on both sides (per process).

With ``--executor ray`` each recipe is cleaned a second time on Ray (a local Ray with
``--workers`` CPUs, or the cluster at ``--ray-address``), on the same corpus: its seconds
beside the local ones and the ratio Ray / local, Ray's start-up shown apart.

    python benchmarks/bench_clean.py --pairs 1000000 [--workers 2] [--executor ray]
"""

from __future__ import annotations

import argparse
import gzip
import html
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.testing import corpora_dir  # noqa: E402
from tests.junk import INJECTORS, inject  # noqa: E402

RUN_CLEAN = """
import contextlib, json, resource, sys, time
from spr_data.pipeline.clean import clean
workers, executor, startup = int(sys.argv[4]), None, 0.0
with contextlib.ExitStack() as stack:
    if sys.argv[5] == "ray":
        from spr_data.pipeline.ray_executor import RayExecutor
        started = time.perf_counter()
        executor = stack.enter_context(RayExecutor(sys.argv[6] or None, workers=workers))
        workers = executor.workers  # starts (or joins) Ray
        startup = time.perf_counter() - started
    started = time.perf_counter()
    report = clean(sys.argv[1], sys.argv[2], recipe=sys.argv[3] or None,
                   workers=None if executor else workers, executor=executor)
    seconds = time.perf_counter() - started
# VmHWM restarts at exec; ru_maxrss would still count the benchmark's own memory at fork time
own = int(next(line.split()[1] for line in open("/proc/self/status")
               if line.startswith("VmHWM"))) / 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "startup": startup, "rows_in": report.rows_in,
                  "kept": report.rows_kept,
                  "timings": report.timings,
                  "align": report.align, "rss_mb": max(own, kids), "main_mb": own,
                  "worker_mb": kids}))
"""

#: OpusFilter with the equivalent filters, run by a Python that has it (``--opusfilter-python``)
RUN_OPUSFILTER = """
import json, sys, time
from opusfilter.filters import (CharacterScoreFilter, HtmlTagFilter, LanguageIDFilter,
                                LengthFilter, LengthRatioFilter, NonZeroNumeralsFilter,
                                RepetitionFilter)
src = open(sys.argv[1], encoding="utf-8").read().split("\\n")[:-1]
tgt = open(sys.argv[2], encoding="utf-8").read().split("\\n")[:-1]
pairs = list(zip(src, tgt))
filters = [LengthFilter(1, 250, "word"), LengthRatioFilter(3, "char"),
           CharacterScoreFilter(["Latin", "Latin"], [0.5, 0.5]), RepetitionFilter(),
           NonZeroNumeralsFilter(0.5), HtmlTagFilter()]
if sys.argv[3]:
    filters.append(LanguageIDFilter(["en", "de"], id_method="fasttext",
                                    fasttext_model_path=sys.argv[3], thresholds=[0.5, 0.5]))
started = time.perf_counter()
keep = [True] * len(pairs)
for f in filters:
    for i, score in enumerate(f.score(pairs)):
        if keep[i] and not f.accept(score):
            keep[i] = False
print(json.dumps({"pairs_per_s": len(pairs) / (time.perf_counter() - started),
                  "kept": sum(keep)}))
"""

RECIPES = {
    "rules only": 'stages = ["normalize", "rules"]\n',
    "rules + langid + dedup": 'stages = ["normalize", "rules", "langid", "dedup"]\n',
    "full recipe (with align)": "",
}


def build_corpus(corpora: Path, n: int, seed: int) -> list[tuple[str, str]]:
    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    rng = random.Random(seed)
    pairs = []
    for _ in range(int(n * 0.95)):
        a, b = rng.randrange(len(en)), rng.randrange(len(en))
        pairs.append((f"{en[a]} {en[b]}", f"{de[a]} {de[b]}"))
    fr = gzip.decompress((base / "train.fr.gz").read_bytes()).decode().splitlines()
    per_kind = max(1, (n - len(pairs)) // len(INJECTORS))
    mixed, _ = inject(pairs, list(INJECTORS), per_kind, seed=seed, foreign=fr)
    return mixed


_URL = re.compile(r"(?:https?://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HTML = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_NUM = re.compile(r"\d+")


def python_rules(src: str, tgt: str) -> str | None:
    """The same checks as normalize + rules, one pair at a time (the baseline)."""
    sides = []
    for text in (src, tgt):
        text = unicodedata.normalize("NFC", html.unescape(text))
        text = " ".join(text.split())
        sides.append(text)
    for text in sides:
        if not text:
            return "empty"
        if len(text) > 1000 or len(text.split()) > 250:
            return "too_long"
        visible = [c for c in text if not c.isspace()]
        good = sum(1 for c in visible if unicodedata.category(c)[0] in "LMN")
        if good / max(len(visible), 1) < 0.5:
            return "junk"
        run = best = 1
        for a, b in itertools.pairwise(text):
            run = run + 1 if a == b else 1
            best = max(best, run)
        if best > 10:
            return "repetition"
        if _URL.fullmatch(text.strip()) or _HTML.search(text):
            return "url_or_html"
    a, b = len(sides[0]), len(sides[1])
    if (max(a, b) + 8) / (min(a, b) + 8) > 3.0:
        return "length_ratio"
    if re.sub(r"\W+", "", sides[0].lower()) == re.sub(r"\W+", "", sides[1].lower()):
        return "copied_source"
    na, nb = set(_NUM.findall(sides[0])), set(_NUM.findall(sides[1]))
    if na and nb and not (na <= nb or nb <= na):
        return "numbers_mismatch"
    return None


def _tree_rss_mb(root: int) -> float:
    """The summed RSS of ``root`` and every process under it (from /proc), in MB."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21])  # pages
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - tree
        tree |= frontier
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(rss.get(p, 0) for p in tree) * page / 1e6


def run_sampled(cmd: list[str]) -> tuple[str, float]:
    """Run ``cmd``; its stdout, and the peak of its process tree's summed RSS (MB), sampled
    every 50 ms (the workers' and the main process' memory at the same moment)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0.0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out, err)
    return out, peak[0]


def measure_python(pairs: list[tuple[str, str]], sample: int) -> float:
    subset = pairs[:sample]
    started = time.perf_counter()
    for s, t in subset:
        python_rules(s, t)
    return len(subset) / (time.perf_counter() - started)


def measure_langid(pairs: list[tuple[str, str]], sample: int) -> float:
    from spr_data.qa.langid import _model

    model = _model().f
    subset = pairs[:sample]
    started = time.perf_counter()
    for s, t in subset:
        model.predict(s.replace("\n", " ") + "\n", 1, 0.0, "replace")
        model.predict(t.replace("\n", " ") + "\n", 1, 0.0, "replace")
    return len(subset) / (time.perf_counter() - started)


def measure_opusfilter(python: Path, pairs: list[tuple[str, str]], work: Path) -> None:
    from spr_data.qa.langid import model_path

    (work / "o.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (work / "o.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    for label, model in (("OpusFilter, rules", ""),
                         ("OpusFilter, rules + langid", str(model_path()))):
        result = subprocess.run([str(python), "-c", RUN_OPUSFILTER, str(work / "o.en"),
                                 str(work / "o.de"), model], capture_output=True, text=True)
        if result.returncode != 0:
            print(f"{label:<28} failed: {result.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"{label:<28} {r['pairs_per_s']:>10,.0f}   (1 process, {len(pairs):,} pairs)")


def measure_task_overhead(workers: int, address: str, tasks: int = 400) -> None:
    """Seconds per trivial task, local processes vs Ray (workers already started): what a
    task costs beyond its work, against a unit of work of 65,536+ rows (seconds)."""
    from spr_data.pipeline.executor import LocalExecutor
    from spr_data.pipeline.ray_executor import RayExecutor

    for label, make in (("local processes", lambda: LocalExecutor(workers)),
                        ("Ray", lambda: RayExecutor(address or None, workers=workers))):
        with make() as executor:
            list(executor.map(abs, range(-workers, 0)))  # the workers are up
            started = time.perf_counter()
            for _ in executor.map(abs, range(-tasks, 0)):
                pass
            per_task = (time.perf_counter() - started) / tasks
        print(f"{'  task overhead, ' + label:<28} {per_task * 1000:>10.1f} ms a task "
              f"({tasks} trivial tasks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--opusfilter-python", type=Path, default=None,
                        help="a Python with opusfilter (and fasttext-predict) installed")
    parser.add_argument("--executor", choices=["local", "ray"], default="local",
                        help="ray: clean each recipe on Ray too, beside the local run")
    parser.add_argument("--ray-address", default="",
                        help="join this Ray cluster (default: start a local Ray)")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help="comma-separated names of the recipes to run (default: all)")
    args = parser.parse_args()
    unknown = [name for name in args.recipes.split(",") if name not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe {', '.join(map(repr, unknown))}; "
                     f"choose from {', '.join(map(repr, RECIPES))}")
    recipes = {name: RECIPES[name] for name in args.recipes.split(",")}
    args.corpora = corpora_dir(args.corpora)

    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spr-bench-clean-", dir=args.workdir))
    try:
        pairs = build_corpus(args.corpora, args.pairs, args.seed)
        (work / "c.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (work / "c.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        from spr_data import ingest

        summary = ingest([work / "c.en", work / "c.de"], work / "ds")
        print(f"corpus: {len(pairs):,} pairs from Multi30k en-de (5% injected junk of "
              f"{len(INJECTORS)} kinds), {summary.input_bytes / 1e6:.0f} MB, "
              f"{summary.shards} shard(s); workers={args.workers}; ingest {summary.seconds:.1f} s")
        print(f"{'run':<28} {'pairs/s':>10} {'seconds':>8} {'kept':>10} {'tree RSS MB':>12}"
              "  (peak of the summed RSS; main / largest worker alone)")
        for name, text in recipes.items():
            recipe = work / "recipe.toml"
            recipe.write_text(text)

            def run(executor: str, recipe: Path = recipe, text: str = text) -> dict[str, Any]:
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                stdout, tree = run_sampled(
                    [sys.executable, "-c", RUN_CLEAN, str(work / "ds"), str(out),
                     str(recipe) if text else "", str(args.workers), executor,
                     args.ray_address])
                r: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
                r["tree_mb"] = tree
                return r

            r = run("local")
            print(f"{name:<28} {r['rows_in'] / r['seconds']:>10,.0f} {r['seconds']:>8.1f} "
                  f"{r['kept']:>10,} {r['tree_mb']:>12,.0f}  ({r['main_mb']:,.0f} / "
                  f"{r['worker_mb']:,.0f})")
            steps = ", ".join(f"{k} {v:.1f} s" for k, v in r["timings"].items())
            print(f"{'  steps':<28} {steps}")
            if r["align"]:
                print(f"{'  of which align training':<28} {'':>10} "
                      f"{r['timings']['align_train']:>8.1f}   (on {r['align']['trained_on']:,}"
                      " pairs sampled from the rows that passed)")
                decide = r["timings"]["decide"]
                print(f"{'  decide step with scoring':<28} {r['rows_in'] / decide:>10,.0f} "
                      f"{decide:>8.1f}   (align scores, dedup, writing the output)")
            if args.executor == "ray":
                on_ray = run("ray")
                assert on_ray["kept"] == r["kept"], "Ray kept other rows than the local run"
                ratio = on_ray["seconds"] / r["seconds"]
                with_startup = (on_ray["seconds"] + on_ray["startup"]) / r["seconds"]
                print(f"{'  the same on Ray':<28} {on_ray['rows_in'] / on_ray['seconds']:>10,.0f} "
                      f"{on_ray['seconds']:>8.1f} {on_ray['kept']:>10,} {'':>12}  Ray / local "
                      f"{ratio:.2f}x; with Ray's start-up ({on_ray['startup']:.1f} s) "
                      f"{with_startup:.2f}x")
        if args.executor == "ray":
            measure_task_overhead(args.workers, args.ray_address)
        sample = min(len(pairs), 100_000)
        print(f"{'plain-Python rule loop':<28} {measure_python(pairs, sample):>10,.0f}"
              f"   (1 process, {sample:,} pairs)")
        print(f"{'fastText langid, both sides':<28} {measure_langid(pairs, sample):>10,.0f}"
              f"   (1 process, {sample:,} pairs)")
        if args.opusfilter_python:
            measure_opusfilter(args.opusfilter_python, pairs[:20_000], work)
        print("targets (2 cores): rules only >= 150k pairs/s; rules + langid + dedup >= 30k "
              "pairs/s; full recipe >= 30k pairs/s at 1M and 5M, >= 15k at 100k; process tree "
              "RSS < 1 GB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
