"""Benchmark the retry-safe reader: an epoch read directly, through the retrying reader,
through the local cache (cold, then warm) and under 1% injected faults, in one run.

    python benchmarks/bench_reader.py [--rows 1000000] [--shard-mb 32] [--epochs 1]

The dataset is bench_open_take's synthetic parallel corpus, ingested into shards of
``--shard-mb``. An epoch is every row once, in spr-data's shuffled order, in batches of 256
(``Dataset.take``), the way the training iterator reads. Modes, each on a freshly opened
dataset (the page cache is warm for all: this measures the reader's own cost, not a disk's):

* ``direct``: the local shards memory-mapped (no reader in the way);
* ``retrying``: the same files declared networked (``LocalFileSystem(network=True)``): each
  shard read whole through ``RetryingFile`` and checked against its manifest hash, never
  mapped (``max_in_memory`` is the shard count, so each shard is read once);
* ``cache cold`` / ``cache warm``: copied to a local cache (verified) and the copies mapped;
  the second run finds them there;
* ``1% faults``: ``FaultyFileSystem(rate=0.01)``, reads of at most 1 MB, with
  ``RetryPolicy()``'s defaults (backoff from 50 ms): EIO, ESTALE, ETIMEDOUT, short reads,
  early EOFs and flipped bits, all retried or re-read.

Each mode's epoch is checked to give the same rows as ``direct``. Targets: the retrying reader
within 10% of direct reads, and ≥ 80% of fault-free throughput under 1% faults.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_open_take import write_corpus  # noqa: E402

from spr_data import ingest, open_dataset  # noqa: E402
from spr_data.pipeline.order import epoch_order, plan  # noqa: E402
from spr_data.reader import LocalFileSystem, ReaderOptions, RetryPolicy  # noqa: E402
from spr_data.testing import FaultyFileSystem  # noqa: E402

BATCH = 256


def epoch(path: Path, reader: ReaderOptions | None, epochs: int) -> tuple[float, str, int]:
    """Seconds for ``epochs`` epochs on a freshly opened dataset, a digest of the ids read."""
    started = time.perf_counter()
    ds = open_dataset(path, reader=reader)
    p = plan(len(ds), batch_size=BATCH, drop_remainder=False)
    digest = hashlib.sha256()
    rows = 0
    for e in range(epochs):
        for b in range(p.batches_per_rank):
            table = ds.take(epoch_order(len(ds), 0, e, p.batch_positions(0, b)))
            digest.update(table.column("id").to_numpy().tobytes())
            digest.update(table.column("tgt").to_numpy(zero_copy_only=False)[-1].encode())
            rows += table.num_rows
    return time.perf_counter() - started, digest.hexdigest(), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shard-mb", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="spr-bench-reader-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ds_path = work / "ds"
        if not (ds_path / "manifest.json").exists():
            write_corpus(work / "corpus.tsv", args.rows, seed=0)
            ingest([work / "corpus.tsv"], ds_path, format="tsv", langs=["en", "de"],
                   shard_bytes=args.shard_mb << 20)
            (work / "corpus.tsv").unlink()
        manifest = open_dataset(ds_path).manifest
        shards = len(manifest.shards)
        networked = LocalFileSystem(network=True)
        faulty = FaultyFileSystem(rate=0.01, seed=0, max_read=1 << 20)
        cache = work / "cache"
        modes: list[tuple[str, ReaderOptions | None]] = [
            ("direct (memory-mapped)", None),
            ("retrying reader", ReaderOptions(filesystem=networked, max_in_memory=shards)),
            ("cache, cold", ReaderOptions(filesystem=networked, cache_dir=str(cache))),
            ("cache, warm", ReaderOptions(filesystem=networked, cache_dir=str(cache))),
            ("retrying reader, 1% faults", ReaderOptions(filesystem=faulty,
                                                         retry=RetryPolicy(),
                                                         max_in_memory=shards)),
        ]
        epoch(ds_path, None, 1)  # warm-up: imports, allocator and page cache for every mode
        results = []
        for name, reader in modes:
            seconds, digest, rows = epoch(ds_path, reader, args.epochs)
            results.append((name, seconds, digest, rows))
            print(f"  {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
        base_digest = results[0][2]
        print(f"{args.rows:,} rows, {shards} shards, {manifest.bytes / 1e6:,.0f} MB; "
              f"{args.epochs} epoch(s) of random batches of {BATCH}")
        print(f"{'mode':<28} {'seconds':>8} {'rows/s':>11} {'vs direct':>10}  same rows")
        direct = results[0][1]
        for name, seconds, digest, rows in results:
            print(f"{name:<28} {seconds:>8.2f} {rows / seconds:>11,.0f} "
                  f"{direct / seconds:>9.0%}  {digest == base_digest}")
        print(f"faults injected: {dict(faulty.injected)}")
        clean = results[1][1]
        print(f"retrying reader: {direct / clean:.0%} of direct (target ≥ 90%); under 1% faults "
              f"{clean / results[4][1]:.0%} of fault-free (target ≥ 80%)")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
