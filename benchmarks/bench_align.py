"""Benchmark: the alignment score (``spr_data.qa.align``) against plain-Python IBM Model 1.

One run, one synthetic-but-realistic parallel corpus of N pairs (default 1,000,000): each pair
is 1-3 real English-German sentence pairs (Multi30k train and the OpenNMT WMT sample, from
``shared/corpora``) drawn at random with ``--seed`` and joined with spaces, side by side, so
that lengths, vocabulary and co-occurrences look like a web-mined corpus (about 24 tokens a
side). The corpus is written as an Arrow IPC file of 50,000-row record batches, and read back
batch by batch, the way the stage runner hands batches to a stage.

Measured, each phase in a fresh subprocess of this script (the hidden ``--phase`` flag), so
that the memory of the generator or of another phase cannot hide in its figures:

* train: pick the training rows (``training_rows``: at most ``max_train_pairs``, seeded) while
  streaming the batches, then ``LexicalAligner.train`` (tokenize, vocabularies, counting, EM
  in both directions); wall time and peak RSS (``VmHWM``) of the process;
* score: ``LexicalAligner.score`` over every batch, in pairs per second, with 1 process and
  with ``--workers`` processes (one process per core, as the local executor runs stages);
  wall time includes tokenization; peak RSS per process;
* baseline: the same score computed by plain Python (dicts and loops, the same tokens and the
  same tables) on ``--baseline-pairs`` pairs, checked equal to the vectorized score; and one
  EM iteration of plain-Python IBM Model 1 (dicts) on ``--baseline-train-pairs`` pairs,
  extrapolated to the full training set and iteration count.

Run from the repository root, in the environment where spr-data is installed:

    python benchmarks/bench_align.py                       # 1,000,000 pairs
    python benchmarks/bench_align.py --pairs 100000 --workdir /tmp/spr-align --keep

A kept work directory can be used to profile one phase, e.g.
``python -m cProfile -s cumtime benchmarks/bench_align.py --phase train --workdir
/tmp/spr-align``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spr_data.qa.align import (
    AlignerOptions,
    LexicalAligner,
    alignment_tokens,
    training_rows,
)
from spr_data.testing import corpora_dir

CORPUS = "corpus.arrow"
MODEL = "model.npz"
BATCH_ROWS = 50_000


def peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM), MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------------------------------
# Corpus


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def sentence_pool() -> tuple[list[str], list[str]]:
    """Real en-de sentence pairs: Multi30k train and the OpenNMT WMT sample."""
    par = corpora_dir() / "parallel"
    en = _lines(par / "multi30k" / "train.en.gz") + _lines(par / "opennmt_wmt_en-de.train.en.gz")
    de = _lines(par / "multi30k" / "train.de.gz") + _lines(par / "opennmt_wmt_en-de.train.de.gz")
    if len(en) != len(de):
        raise SystemExit(f"corpus pool: {len(en)} English and {len(de)} German lines")
    return en, de


def write_corpus(path: Path, pairs: int, seed: int) -> None:
    en, de = sentence_pool()
    rng = np.random.default_rng(seed)
    schema = pa.schema([("src", pa.string()), ("tgt", pa.string())])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for start in range(0, pairs, BATCH_ROWS):
            n = min(BATCH_ROWS, pairs - start)
            k = rng.choice([1, 2, 3], size=n, p=[0.5, 0.3, 0.2])
            idx = rng.integers(0, len(en), int(k.sum())).tolist()
            src, tgt, at = [], [], 0
            for count in k.tolist():
                part = idx[at:at + count]
                at += count
                src.append(" ".join([en[j] for j in part]))
                tgt.append(" ".join([de[j] for j in part]))
            writer.write_batch(pa.record_batch([pa.array(src), pa.array(tgt)], schema=schema))


def read_batches(path: Path, which: range | None = None) -> Any:
    """Yield the record batches of the corpus, read one at a time (not memory-mapped)."""
    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_file(source)
        for i in which if which is not None else range(reader.num_record_batches):
            yield reader.get_batch(i)


# ---------------------------------------------------------------------------------------------
# Phases (each in its own process)


def phase_train(workdir: Path, options: AlignerOptions) -> dict[str, Any]:
    t0 = time.perf_counter()
    corpus = workdir / CORPUS
    with pa.OSFile(str(corpus), "rb") as source:
        reader = pa.ipc.open_file(source)
        sizes = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
    total = sum(sizes)
    rows = training_rows(total, max_pairs=options.max_train_pairs, seed=options.seed)
    src_parts, tgt_parts = [], []
    start = 0
    for batch in read_batches(corpus):
        lo, hi = np.searchsorted(rows, [start, start + batch.num_rows])
        take = pa.array(rows[lo:hi] - start)
        src_parts.append(batch.column("src").take(take))
        tgt_parts.append(batch.column("tgt").take(take))
        start += batch.num_rows
    src = pa.chunked_array(src_parts).combine_chunks()
    tgt = pa.chunked_array(tgt_parts).combine_chunks()
    del src_parts, tgt_parts
    t1 = time.perf_counter()
    model = LexicalAligner.train(src, tgt, options)
    t2 = time.perf_counter()
    model.save(workdir / MODEL)
    return {"pairs": total, "train_pairs": len(src), "read_s": t1 - t0, "train_s": t2 - t1,
            "keys": int(model.keys.size), "src_vocab": model.src_vocab.size,
            "tgt_vocab": model.tgt_vocab.size, "model_mb": (workdir / MODEL).stat().st_size / 1e6,
            "peak_rss_mb": peak_rss_mb(), "content_hash": model.content_hash}


def _score_worker(args: tuple[str, int, int]) -> dict[str, Any]:
    workdir, worker, workers = Path(args[0]), args[1], args[2]
    model = LexicalAligner.load(workdir / MODEL)
    with pa.OSFile(str(workdir / CORPUS), "rb") as source:
        n_batches = pa.ipc.open_file(source).num_record_batches
    pairs, total = 0, 0.0
    t0 = time.perf_counter()
    for batch in read_batches(workdir / CORPUS, range(worker, n_batches, workers)):
        scores = model.score(batch.column("src"), batch.column("tgt"))
        pairs += len(scores)
        total += float(np.sum(scores[np.isfinite(scores)], dtype=np.float64))
    return {"pairs": pairs, "score_s": time.perf_counter() - t0, "sum": total,
            "peak_rss_mb": peak_rss_mb()}


def phase_score(workdir: Path, workers: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    single = _score_worker((str(workdir), 0, 1))
    out["1"] = {**single, "pairs_per_s": single["pairs"] / single["score_s"]}
    if workers > 1:
        t0 = time.perf_counter()
        with mp.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(_score_worker, [(str(workdir), w, workers) for w in range(workers)])
        wall = time.perf_counter() - t0  # includes starting the workers and loading the model
        pairs = sum(p["pairs"] for p in parts)
        slowest = max(p["score_s"] for p in parts)
        out[str(workers)] = {"pairs": pairs, "wall_s": wall, "pairs_per_s": pairs / wall,
                             "steady_pairs_per_s": pairs / slowest,
                             "peak_rss_mb": max(p["peak_rss_mb"] for p in parts)}
    return out


# ---------------------------------------------------------------------------------------------
# Plain-Python baseline: dicts and loops


def _token_lists(texts: pa.Array) -> list[list[str]]:
    tokens = alignment_tokens(texts, max_tokens=256)
    flat = tokens.tokens.to_pylist()
    off = tokens.offsets.tolist()
    return [flat[off[i]:off[i + 1]] for i in range(len(off) - 1)]


def baseline_score(model: LexicalAligner, src: list[list[str]],
                   tgt: list[list[str]]) -> list[float]:
    """The same score as ``LexicalAligner.score``, one pair and one word at a time."""
    opts = model.options
    src_id = {w: i + 2 for i, w in enumerate(model.src_vocab.words.to_pylist())}
    tgt_id = {w: i + 2 for i, w in enumerate(model.tgt_vocab.words.to_pylist())}
    v_t = model.tgt_vocab.size
    link: dict[tuple[int, int], float] = {}
    for k, a, b in zip(model.keys.tolist(), model.t_tgt_given_src.tolist(),
                       model.t_src_given_tgt.tolist(), strict=True):
        link[(k // v_t, k % v_t)] = float(np.float32((a + b) / 2))
    out = []
    for s_words, t_words in zip(src, tgt, strict=True):
        es = [src_id.get(w, 1) for w in s_words]
        fs = [tgt_id.get(w, 1) for w in t_words]
        if not es or not fs:
            out.append(float("-inf"))
            continue
        fwd = sum(math.log(max(link.get((e, f), 0.0) for e in es) + opts.floor) for f in fs)
        bwd = sum(math.log(max(link.get((e, f), 0.0) for f in fs) + opts.floor) for e in es)
        gap = abs(math.log((len(es) + 1) / (len(fs) + 1)) - model.length_log_ratio)
        out.append((fwd / len(fs) + bwd / len(es)) / 2 - opts.length_weight * gap)
    return out


def baseline_em_iteration(src: list[list[str]], tgt: list[list[str]]) -> float:
    """One EM iteration of IBM Model 1 (one direction, NULL word) with dicts; returns seconds."""
    t0 = time.perf_counter()
    t: dict[tuple[str, str], float] = defaultdict(lambda: 1e-4)
    count: dict[tuple[str, str], float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    for s_words, t_words in zip(src, tgt, strict=True):
        es = ["<null>", *s_words[:64]]
        for f in t_words[:64]:
            z = sum(t[(e, f)] for e in es)
            for e in es:
                c = t[(e, f)] / z
                count[(e, f)] += c
                total[e] += c
    for (e, f), c in count.items():
        t[(e, f)] = c / total[e]
    return time.perf_counter() - t0


def phase_baseline(workdir: Path, pairs: int, train_pairs: int,
                   options: AlignerOptions, full_train_pairs: int) -> dict[str, Any]:
    model = LexicalAligner.load(workdir / MODEL)
    batch = next(iter(read_batches(workdir / CORPUS)))
    src_arr = batch.column("src").slice(0, pairs)
    tgt_arr = batch.column("tgt").slice(0, pairs)
    t0 = time.perf_counter()
    src, tgt = _token_lists(src_arr), _token_lists(tgt_arr)
    py_scores = baseline_score(model, src, tgt)
    py_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    np_scores = model.score(src_arr, tgt_arr)
    np_s = time.perf_counter() - t0
    py_arr = np.asarray(py_scores, np.float32)
    finite = np.isfinite(np_scores)
    if not np.array_equal(finite, np.isfinite(py_arr)):
        raise SystemExit("baseline and numpy scores disagree on which pairs are empty")
    diff = float(np.max(np.abs(py_arr[finite] - np_scores[finite]), initial=0.0))
    train_src = _token_lists(batch.column("src").slice(0, train_pairs))
    train_tgt = _token_lists(batch.column("tgt").slice(0, train_pairs))
    it_s = baseline_em_iteration(train_src, train_tgt)
    estimate = it_s / train_pairs * full_train_pairs * options.iterations * 2
    return {"pairs": pairs, "python_pairs_per_s": pairs / py_s,
            "numpy_pairs_per_s_same_pairs": pairs / np_s, "max_abs_diff": diff,
            "em_pairs": train_pairs, "em_iteration_s": it_s,
            "train_estimate_s": estimate, "peak_rss_mb": peak_rss_mb()}


# ---------------------------------------------------------------------------------------------
# Driver


def run_phase(args: argparse.Namespace, phase: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--phase", phase, "--workdir", str(args.workdir),
           "--workers", str(args.workers), "--baseline-pairs", str(args.baseline_pairs),
           "--baseline-train-pairs", str(args.baseline_train_pairs),
           "--max-train-pairs", str(args.max_train_pairs), "--seed", str(args.seed)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def options_from(args: argparse.Namespace) -> AlignerOptions:
    return AlignerOptions("en", "de", max_train_pairs=args.max_train_pairs, seed=args.seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-train-pairs", type=int, default=300_000)
    parser.add_argument("--baseline-pairs", type=int, default=2_000)
    parser.add_argument("--baseline-train-pairs", type=int, default=5_000)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--phase", choices=["train", "score", "baseline"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.phase:
        options = options_from(args)
        if args.phase == "train":
            result = phase_train(args.workdir, options)
        elif args.phase == "score":
            result = phase_score(args.workdir, args.workers)
        else:
            meta = json.loads((args.workdir / "train.json").read_text())
            result = phase_baseline(args.workdir, args.baseline_pairs,
                                    args.baseline_train_pairs, options, meta["train_pairs"])
        print(json.dumps(result))
        return

    made = args.workdir is None
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spr-align-bench-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        write_corpus(args.workdir / CORPUS, args.pairs, args.seed)
        gen_s = time.perf_counter() - t0
        train = run_phase(args, "train")
        (args.workdir / "train.json").write_text(json.dumps(train))
        score = run_phase(args, "score")
        base = run_phase(args, "baseline")
    finally:
        if made and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}, numpy {np.__version__}, "
                         f"pyarrow {pa.__version__}",
              "pairs": args.pairs, "generate_s": gen_s, "train": train, "score": score,
              "baseline": base}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    one = score["1"]
    print(f"machine: {report['machine']}")
    print(f"corpus: {args.pairs:,} pairs (1-3 real en-de sentence pairs each), generated in "
          f"{gen_s:.1f} s")
    print(f"train   {train['train_pairs']:,} pairs ({train['pairs']:,} in the corpus): "
          f"{train['train_s']:.1f} s (+{train['read_s']:.1f} s reading the sample); "
          f"table {train['keys']:,} word pairs, vocab {train['src_vocab']:,}/"
          f"{train['tgt_vocab']:,}, model {train['model_mb']:.1f} MB; "
          f"peak RSS {train['peak_rss_mb']:.0f} MiB")
    print(f"score   1 process: {one['pairs_per_s']:,.0f} pairs/s ({one['pairs']:,} pairs in "
          f"{one['score_s']:.1f} s), peak RSS {one['peak_rss_mb']:.0f} MiB")
    if str(args.workers) in score and args.workers > 1:
        many = score[str(args.workers)]
        print(f"score   {args.workers} processes: {many['pairs_per_s']:,.0f} pairs/s wall "
              f"(start-up and model load included), {many['steady_pairs_per_s']:,.0f} pairs/s "
              f"once loaded; peak RSS {many['peak_rss_mb']:.0f} MiB per process")
    print(f"baseline plain Python, same score on {base['pairs']:,} pairs: "
          f"{base['python_pairs_per_s']:,.0f} pairs/s vs numpy "
          f"{base['numpy_pairs_per_s_same_pairs']:,.0f} pairs/s on the same pairs "
          f"(max |diff| {base['max_abs_diff']:.2g})")
    print(f"baseline plain Python EM: one iteration, one direction, {base['em_pairs']:,} pairs "
          f"in {base['em_iteration_s']:.1f} s -> about {base['train_estimate_s'] / 60:.0f} min "
          f"for {train['train_pairs']:,} pairs x 5 iterations x 2 directions")


if __name__ == "__main__":
    main()
