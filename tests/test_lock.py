"""The output lock and output ownership, with real processes (no mocks of the OS).

Two runs into one ``--out``: the second exits 2 naming the holder, the first's dataset
verifies. A run never deletes a file it did not write. A stale lock of a dead process is
taken over; a live one elsewhere is not.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spr_data.errors import LockError, OutputError
from spr_data.lock import LOCK_NAME, output_lock, process_identity
from spr_data.outdir import REJECTS_DIR, WORK_DIR
from spr_data.pipeline.ingest import ingest
from spr_data.verify import verify_dataset

SPR_DATA = [sys.executable, "-m", "spr_data.cli"]


@pytest.fixture(scope="module")
def big_tsv(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k en-de train, 8 times over (232k real pairs, ~30 MB): an ingest of it runs for
    long enough that a second run can be started while the first holds the lock."""
    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    lines = "".join(f"{a}\t{b}\n" for a, b in zip(en, de, strict=True))
    path = tmp_path_factory.mktemp("big") / "m30k.tsv"
    path.write_text(lines * 8, encoding="utf-8")
    return path


def _run_args(command: str, big_tsv: Path, dataset: Path, out: Path) -> list[object]:
    """The arguments of a run long enough to race: an ingest of the big TSV or a clean."""
    if command == "ingest":
        return [command, big_tsv, "--out", out, "--langs", "en-de"]
    return [command, dataset, "--out", out, "--workers", "2"]


def _start(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([*SPR_DATA, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_lock(out: Path, proc: subprocess.Popen[str]) -> dict[str, object]:
    """Stop ``proc`` the moment it holds the lock of ``out`` (SIGSTOP), and return its record:
    the second run is then started against a holder that cannot finish first."""
    while True:
        try:
            record = json.loads((out / LOCK_NAME).read_text() or "null")
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and record.get("pid") == proc.pid:
            os.kill(proc.pid, signal.SIGSTOP)
            if (out / LOCK_NAME).exists():
                return record
            pytest.fail("the first run finished before it could be paused; use a bigger input")
        if proc.poll() is not None:
            pytest.fail(f"the first run ended early: {proc.communicate()}")
        time.sleep(0.005)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["ingest", "clean"])
def test_a_second_run_into_a_locked_out_exits_2_naming_the_holder(
        command: str, big_tsv: Path, multi30k_ds: Path, tmp_path: Path):
    out = tmp_path / "out"
    args = _run_args(command, big_tsv, multi30k_ds, out)
    first = _start(*args)
    try:
        record = _wait_for_lock(out, first)
        second = subprocess.run([*SPR_DATA, *map(str, args)], capture_output=True, text=True,
                                timeout=120)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2, second.stderr
    [line] = second.stderr.strip().splitlines()
    assert "in use by another run" in line and f"pid {first.pid}" in line
    assert str(record["started"]) in line and socket.gethostname() in line
    assert verify_dataset(out).ok
    assert not (out / LOCK_NAME).exists() and not (out / WORK_DIR).exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["ingest", "clean"])
def test_two_runs_started_together_one_wins_and_the_result_verifies(
        command: str, big_tsv: Path, multi30k_ds: Path, tmp_path: Path):
    out = tmp_path / "out"
    args = _run_args(command, big_tsv, multi30k_ds, out)
    runs = [_start(*args), _start(*args)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in runs]
    codes = sorted(code for code, _ in results)
    loser = next(err for code, err in results if code != 0)
    # the loser met the lock (2) or, started after the winner finished, its dataset (1)
    assert codes[0] == 0 and codes[1] in (1, 2), results
    assert "in use by another run" in loser or "already holds a dataset" in loser
    assert verify_dataset(out).ok


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c",
                             "import json, sys; from spr_data.lock import process_identity; "
                             "print(json.dumps(process_identity('ingest x')))"],
                            stdout=subprocess.PIPE, text=True)
    record, _ = dead.communicate()
    (out / LOCK_NAME).write_text(record)  # what a SIGKILLed holder leaves behind
    with output_lock(out, "test") as lock:
        assert lock.took_over is not None and lock.took_over["pid"] == dead.pid
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (out / LOCK_NAME).exists()


def test_a_reused_pid_is_not_the_holder(tmp_path: Path):
    """A record whose pid is alive but started at another time names a process that died
    (its pid now belongs to another one): stale."""
    out = tmp_path / "out"
    out.mkdir()
    record = {**process_identity("ingest x"), "pid": 1, "start_ticks": -5}
    (out / LOCK_NAME).write_text(json.dumps(record))
    with output_lock(out, "test") as lock:
        assert lock.took_over is not None


def test_a_live_holder_the_lock_did_not_stop_is_refused(tmp_path: Path):
    """A record of a live process (on a filesystem whose locks do not reach every client, the
    flock can be free while its writer runs): refused, naming it."""
    out = tmp_path / "out"
    out.mkdir()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from spr_data.lock import _start_ticks

        record = {**process_identity("clean a --out b"), "pid": alive.pid,
                  "start_ticks": _start_ticks(alive.pid)}
        (out / LOCK_NAME).write_text(json.dumps(record))
        with pytest.raises(LockError, match=f"pid {alive.pid} .*clean a --out b"), \
                output_lock(out, "test"):
            pass
    finally:
        alive.kill()
        alive.wait()
    assert (out / LOCK_NAME).exists()  # not ours to remove


def test_a_record_from_another_host_is_refused_with_the_way_out(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    record = {**process_identity("clean a --out b"), "host": "some-other-host"}
    (out / LOCK_NAME).write_text(json.dumps(record))
    with pytest.raises(LockError, match=f"some-other-host.*remove {out / LOCK_NAME}"), \
            output_lock(out, "test"):
        pass


def test_a_failed_run_removes_the_directory_it_created_and_nothing_else(tmp_path: Path):
    with pytest.raises(RuntimeError), output_lock(tmp_path / "a/b/c", "test") as lock:
        assert lock.created
        raise RuntimeError("boom")
    assert not (tmp_path / "a").exists()
    (tmp_path / "x").mkdir()
    with pytest.raises(RuntimeError), output_lock(tmp_path / "x", "test"):
        raise RuntimeError("boom")
    assert (tmp_path / "x").is_dir()  # it was there before


def test_a_file_as_out_is_refused(tmp_path: Path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="is a file"), output_lock(tmp_path / "f", "test"):
        pass


# --- output ownership: a run deletes only what it wrote ------------------------------------

def test_an_input_inside_out_is_refused_never_deleted(tmp_path: Path):
    out = tmp_path / "d"
    out.mkdir()
    src = out / "shard-input.tsv"
    src.write_bytes(b"a\tb\n")
    result = subprocess.run([*SPR_DATA, "ingest", src, "--out", out], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0 and "shard-input.tsv" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert src.read_bytes() == b"a\tb\n"


@pytest.mark.parametrize("names", [["shard-notes.txt"], ["thesis.tmp"],
                                   [f"{REJECTS_DIR}/mine.txt"], ["manifest.json.tmp"]])
def test_user_files_in_out_are_untouched(tmp_path: Path, names: list[str]):
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n")
    out = tmp_path / "ds"
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("mine")
    with pytest.raises(OutputError, match="spr-data did not write"):
        ingest([src], out)
    for name in names:
        assert (out / name).read_text() == "mine"


def test_user_files_beside_a_dataset_survive_overwrite(tmp_path: Path):
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\nc\td\n")
    out = tmp_path / "ds"
    ingest([src], out)
    (out / "thesis.tmp").write_text("mine")
    with pytest.raises(OutputError, match=r"thesis\.tmp"):
        ingest([src], out, overwrite=True)
    assert (out / "thesis.tmp").read_text() == "mine" and verify_dataset(out).ok
    (out / "thesis.tmp").unlink()
    ingest([src], out, overwrite=True)
    assert verify_dataset(out).ok


def test_a_user_file_named_like_a_temp_file_survives_overwrite(tmp_path: Path):
    """``NAME.<digits>-<8 hex>.tmp`` is the form of spr-data's temp names, not a proof: the
    file beside a shard of the old dataset was not made by any run, so it is refused by
    name, never deleted."""
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\nc\td\n")
    out = tmp_path / "ds"
    ingest([src], out)
    mine = out / "shard-00000.arrow.1-abcdef01.tmp"
    mine.write_text("mine")
    with pytest.raises(OutputError, match=r"shard-00000\.arrow\.1-abcdef01\.tmp"):
        ingest([src], out, overwrite=True)
    assert mine.read_text() == "mine" and verify_dataset(out).ok


_KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from spr_data.fsio import temp_path
from spr_data.outdir import claim, temp_tag

out = Path(sys.argv[1])
claim(out, "shard-00000.arrow")  # as a run does: the name, then its token, then the file
temp_path(out / "shard-00000.arrow", temp_tag(out)).write_bytes(b"half a shard")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runs_temp_files_are_removed_by_the_token_it_recorded(tmp_path: Path):
    """A process killed mid-write leaves a temp file named with a token its work state
    recorded before the file was made: the next run proves it the killed run's and removes
    it; a like-named file of the user's, with a token no run recorded, is refused."""
    out = tmp_path / "ds"
    out.mkdir()
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(out)],
                            capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    [left] = out.glob("shard-00000.arrow.*.tmp")
    mine = out / "shard-00000.arrow.1-abcdef01.tmp"
    mine.write_text("mine")
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n")
    with pytest.raises(OutputError, match=r"shard-00000\.arrow\.1-abcdef01\.tmp"):
        ingest([src], out)
    assert left.exists() and mine.read_text() == "mine"  # refused: nothing removed
    mine.rename(tmp_path / mine.name)
    ingest([src], out)
    assert not left.exists() and verify_dataset(out).ok
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", REJECTS_DIR, "manifest.json", "shard-00000.arrow"]


_NO_FLOCK = r"""
#include <errno.h>
int flock(int fd, int operation) { (void)fd; (void)operation; errno = ENOLCK; return -1; }
"""


def test_a_filesystem_that_cannot_lock_is_one_clear_line(tmp_path: Path):
    """``flock`` failing with ENOLCK, as on an NFS mount without a lock manager: a real
    ``spr-data ingest`` with a preloaded libc shim whose flock fails that way."""
    import shutil

    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build the flock shim")
    (tmp_path / "noflock.c").write_text(_NO_FLOCK)
    shim = tmp_path / "noflock.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", shim, tmp_path / "noflock.c"],
                   check=True, capture_output=True)
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n")
    out = tmp_path / "nested" / "out"
    result = subprocess.run([*SPR_DATA, "ingest", src, "--out", out],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LD_PRELOAD": str(shim)})
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"the filesystem of {out} cannot lock files" in line and "No locks" in line
    assert "choose an --out on a local disk" in line
    assert not (tmp_path / "nested").exists()  # what the run made for its --out is gone


@pytest.mark.slow
def test_leftovers_of_a_killed_ingest_are_cleared_by_its_work_state(big_tsv: Path,
                                                                     tmp_path: Path):
    """SIGKILL mid-run leaves shards, temp files and the work state (which lists them), the
    shards under the work directory, where no tool's discovery reads them as rows: the rerun
    removes exactly those and writes the same dataset as an uninterrupted run."""
    import pyarrow.dataset as pds

    out = tmp_path / "out"
    args = ["ingest", big_tsv, "--out", out, "--langs", "en-de", "--shard-rows", "20000"]
    run = _start(*args)
    while not list((out / WORK_DIR).rglob("shard-*.arrow")) and run.poll() is None:
        time.sleep(0.005)
    run.kill()
    run.wait()
    assert run.returncode == -signal.SIGKILL  # killed with shards written, not finished
    assert not (out / "manifest.json").exists() and not list(out.glob("shard-*"))
    found = pds.dataset(out, format="ipc", exclude_invalid_files=True)
    assert found.count_rows() == 0
    (out / "mine.txt").write_text("x")
    again = subprocess.run([*SPR_DATA, *map(str, args)], capture_output=True, text=True)
    assert again.returncode != 0 and "mine.txt" in again.stderr  # ours or not: refused
    (out / "mine.txt").unlink()
    again = subprocess.run([*SPR_DATA, *map(str, args)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    ref = tmp_path / "ref"
    subprocess.run([*SPR_DATA, "ingest", big_tsv, "--out", ref, "--langs", "en-de",
                    "--shard-rows", "20000"], check=True, capture_output=True)
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    for f in files:
        if f.name.endswith(".arrow") or f.name.endswith(".rejects"):
            assert (out / f).read_bytes() == (ref / f).read_bytes()
