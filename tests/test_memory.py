"""Ingest streams: its peak memory does not grow with the size of the input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MEASURE = """
import resource, sys
from spr_data import ingest
ingest([sys.argv[1]], sys.argv[2], shard_bytes=8 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def write_corpus(path: Path, megabytes: int) -> None:
    line = ("a reasonably ordinary English sentence of some length %d\t"
            "ein ziemlich gewöhnlicher deutscher Satz von einiger Länge %d\n")
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < megabytes << 20:
            chunk = "".join(line % (j, j) for j in range(i, i + 20000))
            f.write(chunk)
            written += len(chunk.encode())
            i += 20000


def peak_rss_mb(src: Path, out: Path) -> int:
    result = subprocess.run([sys.executable, "-c", MEASURE, str(src), str(out)],
                            capture_output=True, text=True, check=True)
    return int(result.stdout.strip())


def test_peak_memory_does_not_grow_with_input_size(tmp_path: Path):
    write_corpus(tmp_path / "small.tsv", 24)
    write_corpus(tmp_path / "large.tsv", 144)
    small = peak_rss_mb(tmp_path / "small.tsv", tmp_path / "a")
    large = peak_rss_mb(tmp_path / "large.tsv", tmp_path / "b")
    # 120 MB more input; a loader that holds the input (or its offsets) grows by that much
    assert large - small < 40, (small, large)
