"""Shared fixtures: where the real corpora are, and a CLI runner that keeps stdout/stderr apart."""

from __future__ import annotations

import gzip
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

from spr_data.cli import app
from spr_data.testing import corpora_path

settings.register_profile("fast", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile("thorough", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


CORPORA = corpora_path()


@pytest.fixture(scope="session")
def corpora() -> Path:
    """``../shared/corpora`` (or ``$SPR_DATA_CORPORA``): the real data the tests run on."""
    if not (CORPORA / "SOURCES.md").is_file():
        pytest.fail(f"real corpora not found at {CORPORA}; set SPR_DATA_CORPORA to the "
                    "shared/corpora folder")
    return CORPORA


@pytest.fixture(scope="module")
def s3(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real S3 server on loopback for the module (see ``tests/test_s3.py``)."""
    from tests.test_s3 import serve_s3

    yield from serve_s3(corpora, tmp_path_factory)


@pytest.fixture(scope="session")
def multi30k_ds(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k en-de train (29,000 real pairs) ingested in 4 shards: a clean of it with
    2 workers runs for several seconds, long enough to interrupt or race."""
    from spr_data import ingest

    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    root = tmp_path_factory.mktemp("m30k")
    (root / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (root / "train.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    ingest([root / "train.en", root / "train.de"], root / "ds", langs=["en", "de"],
           shard_rows=8000)
    return root / "ds"


@contextmanager
def small_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``mnt`` (root, Linux) for full-disk tests; the test
    is skipped where the machine does not let us mount one."""
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: object) -> CliResult:
    """Run ``spr-data ARGS`` in-process, like a user would, with stdout and stderr separate."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr)


def sigkill_clean_midway(dataset: Path, out: Path, recipe: Path, *,
                         overwrite: bool = False) -> None:
    """A real ``clean`` process SIGKILLed once two units are decided (fails the test if it
    finished first)."""
    import signal
    import sys
    import time

    code = ("import sys; from spr_data.pipeline.clean import clean; "
            "clean(sys.argv[1], sys.argv[2], recipe=sys.argv[3], workers=1, "
            f"overwrite={overwrite})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(dataset), str(out), str(recipe)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list((out / ".work").glob("done-*.json"))) >= 2:
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail("the clean run finished before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
