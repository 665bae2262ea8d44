"""Benchmark the training iterator and ``audit`` against map-style torch baselines.

    python benchmarks/bench_iter.py [--rows 1000000] [--audit-rows 14000000] [--batches 400]

In one run, on a synthetic parallel corpus (bench_open_take's generator: 5-30 words a side),
ingested and then tokenized with Llama 2's SentencePiece model:

* **iterator**: ``SprIterableDataset`` with a token budget (``--max-tokens``) through a
  ``DataLoader`` with 0, 2 and 4 workers: batches/s, samples/s and real (unpadded) tokens/s,
  per worker process too, over ``--batches`` batches after the first one; the first batch's
  wait (which includes planning the epoch) is shown apart;
* **numpy baseline** (the one to beat): a hand-written batched map-style dataset, in the same
  run and on the same data: the shards memory-mapped as numpy arrays, one ``__getitems__``
  call per batch that slices each row's token ids and pads them with vectorized numpy, fed the
  very batches of rows the iterator makes (its token plan, computed before the clock starts,
  as a bucketing batch sampler would); its first ``--check`` batches are checked equal,
  tensor by tensor, to the iterator's;
* **per-row baseline**: the usual map-style way: a ``Dataset`` whose ``__getitem__`` reads one
  row (spr-data's memory-mapped row reader), torch's ``DistributedSampler`` (shuffle, one
  replica, as under DDP) and a collate function that pads with ``pad_sequence``, with batches
  of the same mean number of rows;
* **shuffle memory per worker**: what the epoch order and the plan keep (``tracemalloc``),
  for fixed-size batches at 100M rows and for a token budget at 14M rows (row sizes from a
  hash, as the plan only needs a size per row);
* **audit**: ``spr-data audit`` with an epoch replay (8 ranks × 4 workers) of a
  ``--audit-rows`` dataset (0 skips it).

Timing is never a pass/fail test (shared, noisy machines): read the figures beside the targets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bisect  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
from bench_open_take import write_corpus  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

from spr_data import ingest, open_dataset  # noqa: E402
from spr_data.pipeline.audit import Replay, audit_dataset  # noqa: E402
from spr_data.pipeline.order import epoch_order, plan, token_plan  # noqa: E402
from spr_data.pipeline.tokenize import tokenize  # noqa: E402
from spr_data.pipeline.torch_data import SprIterableDataset  # noqa: E402
from spr_data.testing import corpora_dir  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(work: Path, rows: int, tokenizer: Path, *, tokenized: bool) -> Path:
    tsv = work / f"corpus-{rows}.tsv"
    ds = work / f"ds-{rows}"
    if not (ds / "manifest.json").exists():
        started = time.perf_counter()
        write_corpus(tsv, rows, seed=0)
        ingest([tsv], ds, format="tsv", langs=["en", "de"])
        tsv.unlink()
        log(f"built {rows:,} rows in {time.perf_counter() - started:.0f} s")
    if not tokenized:
        return ds
    out = work / f"tok-{rows}"
    if not (out / "manifest.json").exists():
        started = time.perf_counter()
        report = tokenize(ds, out, tokenizer=str(tokenizer))
        log(f"tokenized {rows:,} rows ({sum(report.tokens.values()):,} tokens) in "
            f"{time.perf_counter() - started:.0f} s with {report.workers} workers")
    return out


def real_tokens(batch: dict[str, Any]) -> int:
    return int(batch["src_mask"].sum()) + int(batch["tgt_mask"].sum())


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) of this process and of processes ``pids`` (DataLoader
    workers, from ``/proc``): the figure a busy shared machine disturbs least."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def measure(loader: Any, batches: int) -> dict[str, float]:
    """Wait for the first batch, then time ``batches`` more: wall clock, and CPU time of
    the main process and the workers together."""
    started = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - started
    pids = [w.pid for w in getattr(it, "_workers", [])]  # torch's worker processes
    rows = tokens = done = 0
    cpu = cpu_seconds(pids)
    started = time.perf_counter()
    for _, batch in zip(range(batches), it, strict=False):
        rows += len(batch["ids"])
        tokens += real_tokens(batch)
        done += 1
    seconds = time.perf_counter() - started
    cpu = cpu_seconds(pids) - cpu
    del it
    return {"first": first, "batches_s": done / seconds, "rows_s": rows / seconds,
            "tokens_s": tokens / seconds, "rows_per_batch": rows / max(done, 1),
            "cpu_ms": cpu / max(done, 1) * 1e3}


class NumpyBatches(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The hand-written batched way: shards memory-mapped as numpy arrays; a batch is one
    ``__getitems__(rows)`` call that slices each row's token ids and pads them with
    vectorized numpy into the same tensors the iterator yields."""

    def __init__(self, path: Path) -> None:
        ds = open_dataset(path)
        self.files = [path / s.file for s in ds.manifest.shards]
        self.n = len(ds)
        self.starts: list[int] = []
        self.columns: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.ids: list[np.ndarray] = []

    def __len__(self) -> int:
        return self.n

    def _open(self) -> None:  # in each worker: memory maps do not pickle
        self.starts = [0]
        self.columns = {"src_ids": [], "tgt_ids": []}
        for path in self.files:
            batch = pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0)  # one per shard
            self.ids.append(batch.column("id").to_numpy())
            for name, shards in self.columns.items():
                col = batch.column(name)
                shards.append((col.offsets.to_numpy(), col.values.to_numpy()))
            self.starts.append(self.starts[-1] + batch.num_rows)

    def __getitems__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        if not self.ids:
            self._open()
        where = [(k, i - self.starts[k])
                 for i in rows for k in [bisect.bisect_right(self.starts, i) - 1]]
        out = {"ids": torch.from_numpy(np.array([self.ids[k][j] for k, j in where],
                                                dtype=np.int64))}
        for name, shards in self.columns.items():
            seqs = [shards[k][1][shards[k][0][j]:shards[k][0][j + 1]] for k, j in where]
            lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
            mask = np.arange(lengths.max()) < lengths[:, None]
            padded = np.zeros(mask.shape, dtype=np.int64)
            padded[mask] = np.concatenate(seqs)
            out[name] = torch.from_numpy(padded)
            out[name[:-4] + "_mask"] = torch.from_numpy(mask)
        return out


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The best of several runs: the fastest wall-clock run, with the least CPU per batch
    of any run."""
    runs = [r for r in runs if r]
    if not runs:
        return {}
    fastest = max(runs, key=lambda r: r["batches_s"])
    return {**fastest, "cpu_ms": min(r["cpu_ms"] for r in runs)}


def whole_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The collate function of ``NumpyBatches``: its batch is made already."""
    return batch


def same_batches(ours: Any, base: Any, count: int) -> bool:
    """Whether the first ``count`` batches of two loaders hold equal tensors."""
    keys = ("ids", "src_ids", "src_mask", "tgt_ids", "tgt_mask")
    pairs = zip(range(count), ours, base, strict=False)
    return all(torch.equal(a[k], b[k]) for _, a, b in pairs for k in keys)


class MapStyle(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The usual map-style dataset: one row per ``__getitem__``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = len(open_dataset(path))
        self.ds: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.ds is None:
            self.ds = open_dataset(self.path)
        return self.ds[i]  # type: ignore[no-any-return]


def pad_collate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from torch.nn.utils.rnn import pad_sequence

    out: dict[str, Any] = {"ids": torch.tensor([r["id"] for r in rows])}
    for side in ("src", "tgt"):
        seqs = [torch.tensor(r[f"{side}_ids"], dtype=torch.long) for r in rows]
        out[f"{side}_ids"] = pad_sequence(seqs, batch_first=True)
        lengths = torch.tensor([len(s) for s in seqs])
        out[f"{side}_mask"] = torch.arange(out[f"{side}_ids"].shape[1]) < lengths[:, None]
    return out


def shuffle_memory() -> dict[str, float]:
    """Bytes the epoch order and the plan hold, beyond the batch being made."""
    out = {}
    tracemalloc.start()
    p = plan(100_000_000, world_size=8, batch_size=64, workers=4)
    for b in p.worker_batches(3)[:100]:
        epoch_order(p.n, 0, 0, p.batch_positions(5, b))
    current, peak = tracemalloc.get_traced_memory()
    out["fixed_100m_kept"], out["fixed_100m_peak"] = current, peak
    tracemalloc.reset_peak()
    started = time.perf_counter()
    tp = token_plan(14_000_000, lambda rows: (rows * 2654435761 % 97) + 3, max_tokens=16384,
                    world_size=8, workers=4)
    out["token_plan_s"] = time.perf_counter() - started
    for b in tp.worker_batches(3)[:100]:
        tp.batch_rows(5, b)
    current, peak = tracemalloc.get_traced_memory()
    out["token_14m_kept"], out["token_14m_peak"] = current, peak
    tracemalloc.stop()
    return out


def main() -> None:
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--audit-rows", type=int, default=14_000_000)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--workers", type=int, nargs="*", default=[0, 2, 4])
    parser.add_argument("--check", type=int, default=50,
                        help="batches checked equal to the numpy baseline's (untimed)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes of the iterator and the numpy baseline, in turn (best kept)")
    parser.add_argument("--no-per-row", action="store_true",
                        help="skip the per-row pad_sequence baseline")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    args = parser.parse_args()
    args.corpora = corpora_dir(args.corpora)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="spr-bench-iter-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    tokenizer = args.corpora / "tokenizers/llama2_tokenizer.model"
    data = build(work, args.rows, tokenizer, tokenized=True)
    planner = SprIterableDataset(data, max_tokens=args.max_tokens, seed=1)
    planner.set_epoch(0)
    # the iterator's own batches, made before any clock starts: the baselines' batch sampler
    plan_rows = [planner.batch_rows(b).tolist()
                 for b in range(min(len(planner), max(args.batches, args.check) + 1))]
    results = []
    for k in args.workers:
        def ours(k: int = k) -> DataLoader:  # type: ignore[type-arg]
            ds = SprIterableDataset(data, max_tokens=args.max_tokens, seed=1)
            ds.set_epoch(0)  # as in a training loop: plans here, the workers get the counts
            return DataLoader(ds, batch_size=None, num_workers=k)

        def numpy_baseline(k: int = k) -> DataLoader:  # type: ignore[type-arg]
            return DataLoader(NumpyBatches(data), batch_sampler=plan_rows,
                              collate_fn=whole_batch, num_workers=k)

        same = same_batches(ours(), numpy_baseline(), args.check)
        mine, base = best([]), best([])
        for _ in range(args.repeat):  # in turn, so that both see the same machine
            mine = best([mine, measure(ours(), args.batches)])
            base = best([base, measure(numpy_baseline(), args.batches)])
        per_row = None
        if not args.no_per_row:
            sampler = DistributedSampler(MapStyle(data), num_replicas=1, rank=0, shuffle=True)
            per_row = measure(DataLoader(MapStyle(data), sampler=sampler, collate_fn=pad_collate,
                                         batch_size=round(mine["rows_per_batch"]),
                                         num_workers=k), args.batches)
        results.append((k, mine, base, per_row, same))
        log(f"workers {k}: done")
    print(f"iterator over {args.rows:,} pre-tokenized pairs, --max-tokens {args.max_tokens}, "
          f"{args.batches} batches after the first (tokens: real, unpadded; "
          f"{os.cpu_count()} CPUs)")
    print(f"{'workers':>7} | {'spr-data batches/s':>18} {'CPU ms/batch':>12} {'tokens/s':>11} "
          f"{'1st batch':>9} | {'numpy batches/s':>15} {'CPU ms/batch':>12} {'same':>4} | "
          f"{'speed-up':>8} {'CPU':>5} | {'per-row tokens/s':>16} {'speed-up':>8}")
    for k, mine, base, per_row, same in results:
        row = (f"{per_row['tokens_s']:>16,.0f} {mine['tokens_s'] / per_row['tokens_s']:>7.2f}×"
               if per_row else f"{'-':>16} {'-':>8}")
        print(f"{k:>7} | {mine['batches_s']:>18,.0f} {mine['cpu_ms']:>12.2f} "
              f"{mine['tokens_s']:>11,.0f} {mine['first']:>8.2f}s | {base['batches_s']:>15,.0f} "
              f"{base['cpu_ms']:>12.2f} {'yes' if same else 'NO':>4} | "
              f"{mine['batches_s'] / base['batches_s']:>7.2f}× "
              f"{base['cpu_ms'] / mine['cpu_ms']:>4.2f}× | {row}")
    print("speed-up: batches/s over the numpy baseline's; CPU: its CPU time per batch over "
          "the iterator's (main process and workers; the steadier figure on a busy machine)")
    print(f"same: the first {args.check} batches of the iterator and of the numpy baseline "
          f"hold equal ids, padded token ids and masks; rates: best of {args.repeat} passes "
          "each, taken in turn")
    mem = shuffle_memory()
    print(f"shuffle memory per worker: fixed batches at 100M rows {mem['fixed_100m_kept']:,} B "
          f"kept (peak {mem['fixed_100m_peak'] / 1e6:.2f} MB while making a batch); token "
          f"budget at 14M rows {mem['token_14m_kept'] / 1e6:.2f} MB kept (peak "
          f"{mem['token_14m_peak'] / 1e6:.2f} MB), planned in {mem['token_plan_s']:.1f} s")
    if args.audit_rows:
        big = build(work, args.audit_rows, tokenizer, tokenized=False)
        started = time.perf_counter()
        report = audit_dataset(big, replay=Replay(world_size=8, workers=4, batch_size=64))
        seconds = time.perf_counter() - started
        print(f"audit of {args.audit_rows:,} rows (integrity, accounting, content, replay "
              f"8 ranks × 4 workers): {seconds:.1f} s, ok={report.ok}")
    print("targets: ≥ 1.0× the numpy baseline at every worker count; ≥ 1M tokens/s per "
          "worker process; shuffle memory ≤ 1 MB per worker at 100M rows; audit of 14M rows "
          "under 60 s")


if __name__ == "__main__":
    main()
