"""Benchmark the training iterator and ``audit`` against a map-style torch baseline.

    python benchmarks/bench_iter.py [--rows 1000000] [--audit-rows 14000000] [--batches 400]

In one run, on a synthetic parallel corpus (bench_open_take's generator: 5-30 words a side),
ingested and then tokenized with Llama 2's SentencePiece model:

* **iterator**: ``SprIterableDataset`` with a token budget (``--max-tokens``) through a
  ``DataLoader`` with 0, 2 and 4 workers: samples/s and real (unpadded) tokens/s, per worker
  process too, over ``--batches`` batches after the first one; the first batch's wait (which
  includes planning the epoch) is shown apart;
* **baseline**: the map-style way, in the same run and on the same tokenized data: a
  ``Dataset`` whose ``__getitem__`` reads one row (spr-data's memory-mapped row reader, a
  generous stand-in for the usual per-row read), torch's ``DistributedSampler`` (shuffle, one
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

import torch  # noqa: E402
from bench_open_take import write_corpus  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

from spr_data import ingest, open_dataset  # noqa: E402
from spr_data.pipeline.order import epoch_order, plan, token_plan  # noqa: E402
from spr_data.pipeline.tokenize import tokenize  # noqa: E402
from spr_data.pipeline.torch_data import SprIterableDataset  # noqa: E402
from spr_data.qa.audit import Replay, audit_dataset  # noqa: E402
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


def measure(loader: Any, batches: int) -> dict[str, float]:
    """Wait for the first batch, then time ``batches`` more."""
    started = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - started
    rows = tokens = 0
    started = time.perf_counter()
    for _, batch in zip(range(batches), it, strict=False):
        rows += len(batch["ids"])
        tokens += real_tokens(batch)
    seconds = time.perf_counter() - started
    return {"first": first, "rows_s": rows / seconds, "tokens_s": tokens / seconds,
            "rows_per_batch": rows / batches}


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
    results = []
    for k in args.workers:
        ours = SprIterableDataset(data, max_tokens=args.max_tokens, seed=1)
        loader = DataLoader(ours, batch_size=None, num_workers=k)
        mine = measure(loader, args.batches)
        sampler = DistributedSampler(MapStyle(data), num_replicas=1, rank=0, shuffle=True)
        base_loader = DataLoader(MapStyle(data), sampler=sampler, collate_fn=pad_collate,
                                 batch_size=round(mine["rows_per_batch"]), num_workers=k)
        base = measure(base_loader, args.batches)
        results.append((k, mine, base))
        log(f"workers {k}: done")
    print(f"iterator over {args.rows:,} pre-tokenized pairs, --max-tokens {args.max_tokens}, "
          f"{args.batches} batches after the first (tokens: real, unpadded)")
    print(f"{'workers':>7} | {'spr-data rows/s':>15} {'tokens/s':>11} {'per process':>11} "
          f"{'1st batch':>9} | {'map-style rows/s':>16} {'tokens/s':>11} {'1st batch':>9} | "
          f"{'speed-up':>8}")
    for k, mine, base in results:
        per = mine["tokens_s"] / max(k, 1)
        print(f"{k:>7} | {mine['rows_s']:>15,.0f} {mine['tokens_s']:>11,.0f} {per:>11,.0f} "
              f"{mine['first']:>8.2f}s | {base['rows_s']:>16,.0f} {base['tokens_s']:>11,.0f} "
              f"{base['first']:>8.2f}s | {mine['tokens_s'] / base['tokens_s']:>7.1f}×")
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
    print("targets: ≥ 1M tokens/s per worker process; shuffle memory ≤ 1 MB per worker at "
          "100M rows; audit of 14M rows under 60 s")


if __name__ == "__main__":
    main()
