"""Benchmark: opening and random reads of an spr-data dataset against a naive TSV loader.

Everything is measured in one run, on one synthetic parallel corpus of N pairs (5-30 words a
side; the target side has German umlauts and some Chinese words), generated from ``--seed``:

* ingest: TSV → dataset throughput in MB/s of TSV input (``IngestSummary``) and the peak RSS
  (``VmHWM``) of the process that ran it; the corpus is synced to disk first and is still
  in the page cache, so this is the CPU-and-write cost, not the cost of reading a cold disk;
* open: time to open and RSS growth from just before to just after opening, for spr-data
  (``open_dataset``) and for the baseline it replaces (scan the TSV once, keeping each line's
  byte offset in an ``array('Q')``); plus the time of the first read after opening;
* random reads, with the same random indices for both loaders: single rows (``ds[i]`` against
  ``f.seek(off); f.readline()`` split on tab) and batches of 256 rows (``ds.take(idx)``, an
  Arrow table, against a loop of ``seek`` + ``readline``); and the same batches turned into
  Python strings (``to_pylist``), which is what the baseline hands back anyway.

Each loader is measured in a fresh subprocess of this script (the hidden ``--phase`` flag),
so that memory left by the corpus generator or by the other loader cannot hide its growth;
RSS is read from ``/proc/self/status`` (Linux) after every import is done. Each subprocess
first reads all of its files once, so both loaders start from a warm page cache. Read rates
are the best of ``--repeat`` passes in each of ``--rounds`` processes per loader, the two
loaders' processes taken in turn (the machine may be shared and noisy). MB = 10**6 bytes.

Run it from the repository root, in the environment where spr-data is installed:

    python benchmarks/bench_open_take.py --rows 1000000
    python benchmarks/bench_open_take.py --rows 14000000 --workdir /tmp/spr-bench --keep

The corpus and dataset are written under ``--workdir`` (default: a new directory under
/tmp) and removed at the end unless ``--keep`` is given. A kept work directory can be used
to profile one phase, e.g. ``python -m cProfile -s cumtime benchmarks/bench_open_take.py
--phase read --loader spr-data --workdir /tmp/spr-bench``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import spr_data

BATCH = 256
MB = 1e6
TSV_NAME = "corpus.en-de.tsv"
DATASET_NAME = "dataset"
GEN_CHUNK_ROWS = 50_000
WARM_BLOCK = 8 << 20
CHECK_ROWS = 200

# ---------------------------------------------------------------------------------------------
# Synthetic corpus


@dataclass(frozen=True)
class Vocab:
    """The words of one side and a table that draws word ids with a Zipf-like frequency.

    ``draw`` is a quantized inverse CDF: indexing it with uniform integers is much faster
    than a ``searchsorted`` per word.
    """

    words: pa.Array
    draw: np.ndarray

    @classmethod
    def of(cls, words: list[str], resolution: int = 1 << 20) -> Vocab:
        weights = 1.0 / (np.arange(len(words)) + 2.7)
        cdf = np.cumsum(weights) / weights.sum()
        quantiles = (np.arange(resolution) + 0.5) / resolution
        draw = np.minimum(np.searchsorted(cdf, quantiles), len(words) - 1)
        return cls(pa.array(words, pa.string()), draw)

    def sentences(self, rng: np.random.Generator, lengths: np.ndarray) -> pa.Array:
        """One sentence of ``lengths[i]`` words, joined by spaces, per row."""
        ids = self.draw[rng.integers(0, len(self.draw), int(lengths.sum()))]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), self.words.take(ids)),
                              " ")


def _alphabetic_words(rng: np.random.Generator, count: int, letters: str,
                      weights: Sequence[float]) -> list[str]:
    p = np.asarray(weights, dtype=np.float64)
    lengths = np.clip(rng.poisson(3.8, count) + 1, 1, 16)
    chars = np.array(list(letters))[rng.choice(len(letters), lengths.sum(), p=p / p.sum())]
    return ["".join(w) for w in np.split(chars, np.cumsum(lengths)[:-1])]


def _chinese_words(rng: np.random.Generator, count: int) -> list[str]:
    lengths = rng.integers(1, 4, count)
    codes = rng.integers(0x4E00, 0x9FA6, lengths.sum())
    return ["".join(map(chr, w)) for w in np.split(codes, np.cumsum(lengths)[:-1])]


def make_vocabs(rng: np.random.Generator, src_size: int = 20_000,
                tgt_size: int = 24_000) -> tuple[Vocab, Vocab]:
    """English-like source words; German-like target words (umlauts, ß), 1 in 8 Chinese."""
    latin = "abcdefghijklmnopqrstuvwxyz"
    src = _alphabetic_words(rng, src_size, latin, [1.0] * len(latin))
    n_chinese = tgt_size // 8
    tgt = (_alphabetic_words(rng, tgt_size - n_chinese, latin + "äöüß",
                             [1.0] * len(latin) + [0.4, 0.3, 0.5, 0.3])
           + _chinese_words(rng, n_chinese))
    tgt = [tgt[i] for i in rng.permutation(len(tgt))]  # Chinese words get frequent ids too
    return Vocab.of(src), Vocab.of(tgt)


def corpus_chunk(rng: np.random.Generator, src: Vocab, tgt: Vocab, rows: int) -> pa.Buffer:
    """``rows`` lines ``src<TAB>tgt``, 5-30 words a side, joined by line feeds (none at the end)."""
    src_len = rng.integers(5, 31, rows)
    tgt_len = np.clip(src_len + rng.integers(-4, 5, rows), 5, 30)
    lines = pc.binary_join_element_wise(src.sentences(rng, src_len),
                                        tgt.sentences(rng, tgt_len), "\t")
    return pc.binary_join(pa.ListArray.from_arrays(pa.array([0, rows], pa.int32()), lines),
                          "\n")[0].as_buffer()


def write_corpus(path: Path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    src, tgt = make_vocabs(rng)
    with open(path, "wb") as f:
        for start in range(0, rows, GEN_CHUNK_ROWS):
            f.write(corpus_chunk(rng, src, tgt, min(GEN_CHUNK_ROWS, rows - start)))
            f.write(b"\n")


# ---------------------------------------------------------------------------------------------
# The two loaders


class Loader(Protocol):
    def __len__(self) -> int: ...
    def one(self, i: int) -> dict[str, Any]: ...
    def batch(self, idx: np.ndarray) -> object: ...
    def batch_py(self, idx: np.ndarray) -> object: ...
    def close(self) -> None: ...


class SprLoader:
    """spr-data: ``open_dataset``, ``ds[i]``, ``ds.take(idx)``."""

    name = "spr-data"

    def __init__(self, workdir: Path) -> None:
        self.ds = spr_data.open_dataset(workdir / DATASET_NAME)

    @staticmethod
    def files(workdir: Path) -> list[Path]:
        return sorted((workdir / DATASET_NAME).glob("shard-*.arrow"))

    def __len__(self) -> int:
        return len(self.ds)

    def one(self, i: int) -> dict[str, Any]:
        return self.ds[i]

    def batch(self, idx: np.ndarray) -> pa.Table:
        return self.ds.take(idx)

    def batch_py(self, idx: np.ndarray) -> tuple[list[str], list[str]]:
        table = self.ds.take(idx)
        return table.column("src").to_pylist(), table.column("tgt").to_pylist()

    def close(self) -> None:
        pass


class TsvOffsetLoader:
    """The baseline: byte offset of every line in an ``array('Q')``, then seek + readline."""

    name = "baseline"

    def __init__(self, workdir: Path) -> None:
        path = workdir / TSV_NAME
        self.offsets = array("Q")
        pos = 0
        with open(path, "rb") as f:
            for line in f:
                self.offsets.append(pos)
                pos += len(line)
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()

    @staticmethod
    def files(workdir: Path) -> list[Path]:
        return [workdir / TSV_NAME]

    def __len__(self) -> int:
        return len(self.offsets)

    def one(self, i: int) -> dict[str, Any]:
        self._file.seek(self.offsets[i])
        fields = self._file.readline().decode("utf-8").rstrip("\n").split("\t")
        return {"src": fields[0], "tgt": fields[1]}

    def batch(self, idx: np.ndarray) -> list[dict[str, Any]]:
        return [self.one(i) for i in idx.tolist()]

    batch_py = batch  # it hands back Python strings already

    def close(self) -> None:
        self._file.close()


LOADERS: dict[str, type[SprLoader] | type[TsvOffsetLoader]] = {
    SprLoader.name: SprLoader, TsvOffsetLoader.name: TsvOffsetLoader}


# ---------------------------------------------------------------------------------------------
# Measurements (each runs in its own subprocess; they print one JSON line)


def proc_status_bytes(key: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``RssAnon``...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def warm_page_cache(paths: Sequence[Path]) -> None:
    buf = bytearray(WARM_BLOCK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def best_rate(work: Callable[[], int], repeat: int) -> float:
    """Items per second of the fastest of ``repeat`` calls of ``work`` (which returns items)."""
    best = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        items = work()
        best = max(best, items / (time.perf_counter() - started))
    return best


def random_indices(seed: int, n: int, singles: int, batches: int) -> tuple[list[int], np.ndarray]:
    rng = np.random.default_rng([seed, 1])
    return rng.integers(0, n, singles).tolist(), rng.integers(0, n, (batches, BATCH))


def ingest_phase(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir)
    rss_before = proc_status_bytes("VmRSS")
    summary = spr_data.ingest([workdir / TSV_NAME], workdir / DATASET_NAME, overwrite=True)
    return {"seconds": summary.seconds, "input_bytes": summary.input_bytes,
            "rows": summary.rows, "rejected": sum(summary.rejects.values()),
            "bytes": summary.bytes, "shards": summary.shards, "rss_before": rss_before,
            # VmHWM restarts at exec; ru_maxrss would also count the parent's memory at fork
            "peak_rss": proc_status_bytes("VmHWM")}


def read_phase(args: argparse.Namespace) -> dict[str, Any]:
    cls = LOADERS[args.loader]
    workdir = Path(args.workdir)
    warm_page_cache(cls.files(workdir))
    gc.collect()
    rss_before, anon_before = proc_status_bytes("VmRSS"), proc_status_bytes("RssAnon")
    started = time.perf_counter()
    loader: Loader = cls(workdir)
    open_s = time.perf_counter() - started
    rss_open = proc_status_bytes("VmRSS")
    started = time.perf_counter()
    loader.one(0)
    first_s = time.perf_counter() - started

    singles, batches = random_indices(args.seed, len(loader), args.singles, args.batches)
    check = hashlib.sha256()
    for i in singles[:CHECK_ROWS]:
        row = loader.one(i)
        check.update(f"{row['src']}\t{row['tgt']}\n".encode())

    def read_singles() -> int:
        for i in singles:
            loader.one(i)
        return len(singles)

    def read_batches(take: Callable[[np.ndarray], object]) -> Callable[[], int]:
        def work() -> int:
            for idx in batches:
                take(idx)
            return batches.size
        return work

    result = {
        "rows": len(loader), "open_s": open_s, "open_rss": rss_open - rss_before,
        "first_read_s": first_s, "check": check.hexdigest(),
        "single_rate": best_rate(read_singles, args.repeat),
        "batch_rate": best_rate(read_batches(loader.batch), args.repeat),
        "batch_py_rate": (best_rate(read_batches(loader.batch_py), args.repeat)
                          if cls is SprLoader else None),
        "reads_anon_rss": proc_status_bytes("RssAnon") - anon_before,
        "reads_rss": proc_status_bytes("VmRSS") - rss_before,
    }
    loader.close()
    return result


PHASES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "ingest": ingest_phase, "read": read_phase}


def best_of(kept: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The first round's figures, with each read rate the best of the rounds so far."""
    if not kept:
        return new
    rates = ("single_rate", "batch_rate", "batch_py_rate")
    return {**kept, **{k: max(kept[k], new[k]) for k in rates if kept[k] is not None}}


def run_phase(args: argparse.Namespace, workdir: Path, phase: str,
              *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase,
           "--workdir", str(workdir), "--seed", str(args.seed), "--singles", str(args.singles),
           "--batches", str(args.batches), "--repeat", str(args.repeat), *extra]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class Row:
    metric: str
    spr: float | None
    base: float | None
    fmt: str
    higher_is_better: bool

    def ratio(self) -> str:
        """How many times better spr-data is (>1: better), whichever way "better" points."""
        if self.spr is None or self.base is None or self.spr <= 0 or self.base <= 0:
            return "-"
        r = self.spr / self.base if self.higher_is_better else self.base / self.spr
        return f"{r:,.2f}x"

    def cells(self) -> list[str]:
        show = [("-" if v is None else format(v, self.fmt)) for v in (self.spr, self.base)]
        return [self.metric, *show, self.ratio()]


def table(rows: Sequence[Row]) -> str:
    header = ["metric", "spr-data", "baseline", "ratio"]
    lines = [header, *(r.cells() for r in rows)]
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    text = []
    for k, line in enumerate(lines):
        text.append("  ".join([line[0].ljust(widths[0])]
                              + [cell.rjust(w) for cell, w in zip(line[1:], widths[1:],
                                                                     strict=True)]))
        if k == 0:
            text.append("  ".join("-" * w for w in widths))
    return "\n".join(text)


def report_rows(ing: dict[str, Any], spr: dict[str, Any], base: dict[str, Any]) -> list[Row]:
    mb_s = ing["input_bytes"] / MB / ing["seconds"]
    return [
        Row("ingest throughput (MB/s of TSV)", mb_s, None, ",.1f", True),
        Row("ingest peak RSS, VmHWM (MB)", ing["peak_rss"] / MB, None, ",.1f", False),
        Row("open time (s)", spr["open_s"], base["open_s"], ",.4f", False),
        Row("RSS growth on open (MB)", spr["open_rss"] / MB, base["open_rss"] / MB, ",.1f",
            False),
        Row("first read after open (ms)", spr["first_read_s"] * 1e3,
            base["first_read_s"] * 1e3, ",.3f", False),
        Row("random single-row reads (rows/s)", spr["single_rate"], base["single_rate"], ",.0f",
            True),
        Row(f"random batch-{BATCH} reads (rows/s)", spr["batch_rate"], base["batch_rate"],
            ",.0f", True),
        Row("  same, to Python str (rows/s)", spr["batch_py_rate"], base["batch_rate"],
            ",.0f", True),
        Row("RSS growth after all reads (MB)", spr["reads_rss"] / MB, base["reads_rss"] / MB,
            ",.1f", False),
        Row("  of which anonymous (MB)", spr["reads_anon_rss"] / MB,
            base["reads_anon_rss"] / MB, ",.1f", False),
    ]


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def targets(ing: dict[str, Any], spr: dict[str, Any], base: dict[str, Any], rows: int) -> str:
    mb_s = ing["input_bytes"] / MB / ing["seconds"]
    speedup = spr["batch_rate"] / base["batch_rate"]
    single = spr["single_rate"] / base["single_rate"]
    scale = "" if rows >= 14_000_000 else f" (measured at N={rows:,}; the target is for 14M)"
    return "\n".join([
        "targets: open a 14M-row dataset in < 0.5 s with < 50 MB RSS growth; batch-of-256 "
        "random reads >= 3x baseline; single-row reads >= 1x baseline; ingest >= 100 MB/s of TSV",
        f"  open {spr['open_s']:.4f} s < 0.5 s: {verdict(spr['open_s'] < 0.5)}; "
        f"RSS growth {spr['open_rss'] / MB:.1f} MB < 50 MB: "
        f"{verdict(spr['open_rss'] < 50 * MB)}{scale}",
        f"  batch-{BATCH} reads {speedup:.2f}x baseline >= 3x: {verdict(speedup >= 3)}",
        f"  single-row reads {single:.2f}x baseline >= 1x: {verdict(single >= 1)}",
        f"  ingest {mb_s:.1f} MB/s >= 100 MB/s: {verdict(mb_s >= 100)}",
    ])


def machine_info() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return (f"machine: {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), {model}; "
            f"{platform.platform()}\n"
            f"software: Python {platform.python_version()}, pyarrow {pa.__version__}, "
            f"numpy {np.__version__}, spr-data {spr_data.__version__}")


# ---------------------------------------------------------------------------------------------
# Driver


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def timed(label: str, work: Callable[[], Any]) -> Any:
    log(f"{label}...")
    started = time.perf_counter()
    result = work()
    log(f"{label}: {time.perf_counter() - started:.1f} s")
    return result


def benchmark(args: argparse.Namespace, workdir: Path) -> None:
    tsv = workdir / TSV_NAME
    timed(f"generating {args.rows:,} pairs into {tsv}",
          lambda: write_corpus(tsv, args.rows, args.seed))
    # Write the corpus back to disk now, or ingest would compete with that writeback.
    timed("syncing", os.sync)
    ing = timed("ingesting (subprocess)", lambda: run_phase(args, workdir, "ingest"))
    spr: dict[str, Any] = {}
    base: dict[str, Any] = {}
    for r in range(args.rounds):  # in turn, so that a busy spell of the machine hits both
        spr = best_of(spr, timed(f"measuring spr-data (subprocess, round {r + 1})",
                                 lambda: run_phase(args, workdir, "read", "--loader",
                                                   SprLoader.name)))
        base = best_of(base, timed(f"measuring baseline (subprocess, round {r + 1})",
                                   lambda: run_phase(args, workdir, "read", "--loader",
                                                     TsvOffsetLoader.name)))

    print(machine_info())
    print(f"corpus: N = {args.rows:,} pairs, TSV {ing['input_bytes'] / MB:,.1f} MB "
          f"(seed {args.seed}); dataset {ing['bytes'] / MB:,.1f} MB in {ing['shards']} "
          f"shard(s), {ing['rows']:,} rows, {ing['rejected']:,} rejected")
    print(f"reads: {args.singles:,} single rows, {args.batches:,} batches of {BATCH}, same "
          f"random indices for both; best of {args.repeat} passes in each of {args.rounds} "
          "processes per loader, taken in turn; page cache warmed first")
    print(f"ingest ran in {ing['seconds']:.1f} s; RSS after imports, before ingest "
          f"{ing['rss_before'] / MB:.1f} MB (included in the peak)")
    print()
    print(table(report_rows(ing, spr, base)))
    print("ratio: how many times better spr-data is (baseline/spr-data for costs, "
          "spr-data/baseline for rates)")
    print("RSS after reads counts the touched pages of memory-mapped shards (file-backed, "
          "reclaimable page cache); 'anonymous' is the process's private memory")
    same = spr["check"] == base["check"] and spr["rows"] == base["rows"] == args.rows
    print(f"check: both loaders return the same {CHECK_ROWS} random rows and "
          f"{args.rows:,} rows in all: {'yes' if same else 'NO'}")
    print()
    print(targets(ing, spr, base, args.rows))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="pairs in the corpus")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where to write the corpus and dataset (default: a new /tmp dir)")
    p.add_argument("--keep", action="store_true", help="keep the corpus and dataset")
    p.add_argument("--seed", type=int, default=0, help="seed of the corpus and the indices")
    p.add_argument("--singles", type=int, default=20_000, help="random single-row reads")
    p.add_argument("--batches", type=int, default=2_000, help=f"random batches of {BATCH}")
    p.add_argument("--repeat", type=int, default=3, help="passes per read rate (best kept)")
    p.add_argument("--rounds", type=int, default=2,
                   help="fresh processes per loader, taken in turn (best rate kept)")
    p.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    p.add_argument("--loader", choices=sorted(LOADERS), default=SprLoader.name,
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase and args.workdir is None:
        p.error("--phase needs --workdir")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase:
        print(json.dumps(PHASES[args.phase](args)))
        return 0
    created = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="spr-bench-")) if created else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        benchmark(args, workdir)
    finally:
        if not args.keep:
            if created:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                (workdir / TSV_NAME).unlink(missing_ok=True)
                shutil.rmtree(workdir / DATASET_NAME, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
