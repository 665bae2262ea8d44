"""Fault-injection trials behind the README's "Reliability" figures, with real processes.

    python benchmarks/fault_trials.py [--trials N] [--only concurrent-ingest,...]

* concurrent-ingest / concurrent-clean: two runs into one ``--out``, the second started
  0-4 s after the first (uniformly at random); counts the outcomes and whether the result
  verifies and the loser left the winner's files alone.
* kill-parent: SIGKILL or SIGTERM of the parent only during ``clean --workers 2``; counts
  processes of the run still alive 5 s later.
* outage: a loopback HTTP share stopped for 5, 10, 30 and 60 s while a dataset is read
  with the default retry policy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spr_data.dataset import open_dataset
from spr_data.pipeline.ingest import ingest
from spr_data.testing import corpora_dir
from spr_data.verify import verify_dataset
from tests.test_reliability import _alive, _clean_with_workers, _Server

SPR = [sys.executable, "-m", "spr_data.cli"]


def _pairs(corpora: Path) -> tuple[list[str], list[str]]:
    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    return en, de


def concurrent(command: str, trials: int, root: Path, src: Path, rng: random.Random) -> dict:
    outcomes: Counter[str] = Counter()
    for t in range(trials):
        out = root / f"{command}-{t}"
        args = ([*SPR, "ingest", str(src), "--out", str(out), "--langs", "en-de"]
                if command == "ingest"
                else [*SPR, "clean", str(src), "--out", str(out), "--workers", "2"])
        first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0, 4))
        second = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        codes = []
        for p in (first, second):
            _, err = p.communicate()
            codes.append((p.returncode, err.strip().splitlines()[-1:] if err.strip() else []))
        ok = verify_dataset(out).ok
        key = f"exits {sorted(c for c, _ in codes)}, verifies: {ok}"
        outcomes[key] += 1
        print(f"{command} trial {t}: {key}", file=sys.stderr, flush=True)
    return dict(outcomes)


def kill_parent(trials: int, root: Path, ds: Path) -> dict:
    outcomes: Counter[str] = Counter()
    for t in range(trials):
        for sig in (signal.SIGKILL, signal.SIGTERM):
            proc, kids = _clean_with_workers(ds, root / f"kill-{t}-{sig.name}")
            proc.send_signal(sig)
            proc.communicate(timeout=60)
            time.sleep(5)
            alive = [k for k in kids if _alive(k)]
            key = f"{sig.name}: {len(kids)} children, {len(alive)} alive at +5 s"
            outcomes[key] += 1
            print(f"kill trial {t}: {key}", file=sys.stderr, flush=True)
    return dict(outcomes)


def outage(root: Path, ds: Path, seconds: list[int]) -> dict:
    results = {}
    for s in seconds:
        server = _Server(ds.parent)
        remote = open_dataset(f"{server.url}/{ds.name}")
        remote[0]
        server.stop()
        timer = threading.Timer(s, server.start)
        timer.start()
        started = time.monotonic()
        try:
            row = remote[len(remote) - 1]
            ok = row == open_dataset(ds)[len(remote) - 1]
            results[f"{s} s"] = f"survived (read took {time.monotonic() - started:.0f} s), " \
                                f"rows identical: {ok}"
        except Exception as exc:  # the figure is the outcome
            results[f"{s} s"] = f"failed: {exc}"
        timer.join()
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=17, help="of the start delays")
    parser.add_argument("--outages", type=lambda t: [int(x) for x in t.split(",")],
                        default=[5, 10, 30, 60], help="seconds, comma-separated")
    parser.add_argument("--only", default="concurrent-ingest,concurrent-clean,kill-parent,"
                                          "outage")
    args = parser.parse_args()
    only = args.only.split(",")
    rng = random.Random(args.seed)
    corpora = corpora_dir()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        en, de = _pairs(corpora)
        tsv = root / "m30k.tsv"
        tsv.write_text("".join(f"{a}\t{b}\n" for a, b in zip(en, de, strict=True)) * 4)
        (root / "train.en").write_text("\n".join(en) + "\n")
        (root / "train.de").write_text("\n".join(de) + "\n")
        ds = root / "ds"
        ingest([root / "train.en", root / "train.de"], ds, langs=["en", "de"], shard_rows=8000)
        report: dict[str, object] = {}
        if "concurrent-ingest" in only:
            report["concurrent-ingest"] = concurrent("ingest", args.trials, root, tsv, rng)
        if "concurrent-clean" in only:
            report["concurrent-clean"] = concurrent("clean", args.trials, root, ds, rng)
        if "kill-parent" in only:
            report["kill-parent"] = kill_parent(args.trials, root, ds)
        if "outage" in only:
            report["outage"] = outage(root, ds, args.outages)
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
