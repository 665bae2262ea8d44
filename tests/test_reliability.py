"""Faults an operator meets, injected for real: the parent of a run killed alone, Ctrl-C,
SIGTERM, a share that goes away for a minute, a full disk under train-tokenizer.

No mocks of the OS: real processes, real signals, a real loopback HTTP server.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

import pytest

from spr_data.dataset import open_dataset
from spr_data.errors import DatasetError, ReadError
from spr_data.lock import LOCK_NAME
from spr_data.reader import LocalFileSystem, RetryPolicy, fetch_verified, is_network_path
from spr_data.verify import verify_dataset
from tests.conftest import small_tmpfs

SPR_DATA = [sys.executable, "-m", "spr_data.cli"]


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc: the workers and the resource tracker)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited


def _clean_with_workers(ds: Path, out: Path, *, new_session: bool = False,
                        ) -> tuple[subprocess.Popen[str], set[int]]:
    """Start ``clean --workers 2`` and return it once both workers run."""
    proc = subprocess.Popen([*SPR_DATA, "clean", str(ds), "--out", str(out), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kids = _children(proc.pid)
        workers = [k for k in kids if "spawn_main" in _cmdline(k)]
        if len(workers) >= 2:
            return proc, kids
        if proc.poll() is not None:
            pytest.fail(f"clean ended before its workers started: {proc.communicate()}")
        time.sleep(0.02)
    pytest.fail("the workers did not start")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent(multi30k_ds: Path, tmp_path: Path, sig: signal.Signals):
    """Only the parent is killed (the OOM killer, ``kill PID``): 5 s later no process of the
    run is alive, and a rerun resumes to a dataset that verifies."""
    out = tmp_path / "out"
    proc, kids = _clean_with_workers(multi30k_ds, out)
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    time.sleep(5)
    alive = [k for k in kids if _alive(k)]
    assert not alive, [(k, _cmdline(k)) for k in alive]
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
    if sig == signal.SIGTERM:
        assert not (out / LOCK_NAME).exists()  # released on the way out
        return
    rerun = subprocess.run([*SPR_DATA, "clean", str(multi30k_ds), "--out", str(out),
                            "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert verify_dataset(out).ok


@pytest.mark.slow
def test_ctrl_c_prints_one_line_and_the_rerun_resumes(multi30k_ds: Path, tmp_path: Path):
    """SIGINT to the whole process group, as a terminal sends it."""
    out = tmp_path / "out"
    proc, kids = _clean_with_workers(multi30k_ds, out, new_session=True)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["error: interrupted; rerun the same command to resume"]
    time.sleep(1)
    assert not [k for k in kids if _alive(k)]
    assert not (out / LOCK_NAME).exists()
    rerun = subprocess.run([*SPR_DATA, "clean", str(multi30k_ds), "--out", str(out),
                            "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert verify_dataset(out).ok


_INTERRUPT_AT_START = """
import os, signal, sys, threading, time
from spr_data.pipeline.executor import LocalExecutor

def nap(x):
    time.sleep(1)
    return x

if __name__ == "__main__":
    try:
        with LocalExecutor(2) as executor:
            tasks = executor.map(nap, [1, 2, 3, 4])
            threading.Timer(0.05, os.killpg, (0, signal.SIGINT)).start()
            list(tasks)
    except KeyboardInterrupt:
        sys.exit("interrupted")
"""


@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_c_while_workers_start_reaches_only_the_parent(tmp_path: Path, attempt: int):
    """A Ctrl-C in the first instant, while the workers are still importing Python, is the
    parent's alone: no worker prints "Fatal Python error" or a traceback."""
    script = tmp_path / "interrupt.py"
    script.write_text(_INTERRUPT_AT_START)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, start_new_session=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["interrupted"]


def test_a_ctrl_c_while_a_worker_is_started_waits_until_it_is_started():
    """The pool starts a worker inside ``submit`` and then sends it what it needs to start.
    A Ctrl-C that another thread of the parent takes (pyarrow's, the progress bar's) made
    Python raise KeyboardInterrupt in the middle of that, and the half-started worker
    printed an ``EOFError`` traceback under the one-line message. It is raised once the
    worker has what it needs."""
    from spr_data.pipeline.executor import _submit

    go, signalled = threading.Event(), threading.Event()

    def ctrl_c_on_another_thread() -> None:  # started before SIGINT is blocked, as they are
        go.wait(10)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        signalled.set()

    sent: list[str] = []

    class Pool:
        def submit(self, fn: object, *task: object) -> str:
            go.set()
            signalled.wait(10)
            time.sleep(0.05)  # lines run here: where the KeyboardInterrupt used to land
            sent.append("everything the worker needs")
            return "a future"

    sender = threading.Thread(target=ctrl_c_on_another_thread)
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        _submit(Pool(), print)  # type: ignore[arg-type]
    sender.join()
    assert sent == ["everything the worker needs"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("trigger", ["typer", "pyarrow"])
def test_ctrl_c_during_the_imports_is_one_line(tmp_path: Path, trigger: str):
    """The command's first second is imports: typer's (before any command runs), then the
    command's own (pyarrow). SIGINT is sent the moment ``-X importtime`` reports a module of
    ``trigger`` loaded, so it lands in the middle of them."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "spr_data", "info",
                             str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("import time:") and f" {trigger}" in line.split("|")[-1]:
            os.kill(proc.pid, signal.SIGINT)
            break
    else:
        pytest.fail(f"{trigger} was never imported: {''.join(lines[-5:])}")
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    said = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert said == ["error: interrupted; rerun the same command to start again"], rest[-3000:]
    assert proc.returncode == 130


# --- a share that goes away for a minute ---------------------------------------------------

class _Server:
    """The project's loopback HTTP server (range requests), stoppable and restartable on the
    same port: an outage is the port refusing connections, as when a NAS or an object-store
    gateway restarts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self.start()

    def start(self) -> None:
        from spr_data.testing import _FlakyServer

        server = _FlakyServer.__new__(_FlakyServer)
        ThreadingHTTPServer.__init__(server, ("127.0.0.1", self.port), _handler())
        server.root, server.rate, server.injected = self.root.resolve(), 0.0, Counter()
        server._rng, server._lock = random.Random(0), threading.Lock()
        self.port = server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server

    def stop(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None


def _handler() -> type:
    from spr_data.testing import _Handler

    return _Handler


@pytest.fixture
def outage_server(multi30k_ds: Path) -> Iterator[_Server]:
    server = _Server(multi30k_ds.parent)
    yield server
    if server._server is not None:
        server.stop()


@pytest.mark.slow
def test_a_60_second_outage_is_survived_with_the_default_policy(
        multi30k_ds: Path, outage_server: _Server, caplog: pytest.LogCaptureFixture):
    """The server is stopped after the first shard is read and started again 60 s later; the
    read in between waits it out (RetryPolicy's defaults), and every row is the local one."""
    remote = open_dataset(f"{outage_server.url}/{multi30k_ds.name}")
    local = open_dataset(multi30k_ds)
    assert remote.remote and remote[0] == local[0]
    outage_server.stop()
    restart = threading.Timer(60, outage_server.start)
    restart.start()
    caplog.set_level(logging.WARNING, logger="spr_data.reader")
    try:
        last = len(local) - 1
        assert remote[last] == local[last]  # another shard: read across the outage
    finally:
        restart.cancel()
        restart.join()
    waits = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
    assert waits and "connection refused" in waits[0] and "attempt 2, waited" in waits[0]
    assert any(float(m.split("waited ")[1].split("s")[0]) >= 50 for m in waits)
    assert remote.take(range(len(local))).equals(local.take(range(len(local))))


def test_a_server_never_reached_still_fails_at_once():
    """The outage rule does not make a wrong address wait 5 minutes."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ReadError, match="is the server up"):
        open_dataset(f"http://127.0.0.1:{port}/ds")


def test_fuse_mounts_count_as_network():
    table = ("/dev/vda1 / ext4 rw 0 0\n"
             "bindfs /mnt/bind fuse rw 0 0\n"
             "remote: /mnt/rclone fuse.rclone rw 0 0\n")
    assert is_network_path("/mnt/bind/ds", table) and is_network_path("/mnt/rclone/ds", table)
    assert not is_network_path("/home/ds", table)


def test_the_default_policy_retries_by_deadline():
    """Backoff grows to its cap and the sum of the waits reaches the deadline, whatever the
    count: 60 s of outage is a few dozen attempts, all within the 300 s deadline."""
    policy = RetryPolicy()
    rng = random.Random(0)
    waits = [policy.wait(i, rng) for i in range(1, 200)]
    assert policy.attempts is None
    assert all(b <= policy.max_delay for b in waits) and waits[-1] >= policy.max_delay / 2
    total = list(itertools.accumulate(waits))
    assert next(i for i, t in enumerate(total) if t >= 60) < 30


def test_a_checksum_mismatch_is_read_again_uncached_before_it_is_corrupt(tmp_path: Path):
    """A flipped bit on the first read only (in transit): the re-read, after a pause and with
    the page cache dropped, gets the right bytes; a file that stays wrong is corrupt."""
    path = tmp_path / "shard"
    path.write_bytes(b"y" * 4096)
    good = "sha256:" + hashlib.sha256(b"y" * 4096).hexdigest()

    class FlipOnce(LocalFileSystem):
        def __init__(self) -> None:
            super().__init__(network=True)
            self.opens, self.dropped = 0, 0

        def open(self, p: str) -> BinaryIO:
            self.opens += 1
            if self.opens == 1:
                return io.BytesIO(b"x" + b"y" * 4095)  # type: ignore[return-value]
            return super().open(p)

        def drop_cache(self, p: str) -> None:
            self.dropped += 1
            super().drop_cache(p)

    fs = FlipOnce()
    assert bytes(fetch_verified(fs, str(path), size=4096, sha256=good)) == b"y" * 4096
    assert fs.dropped == 1
    path.write_bytes(b"z" * 4096)
    with pytest.raises(DatasetError, match="corrupt"):
        fetch_verified(LocalFileSystem(network=True), str(path), size=4096, sha256=good)


# --- train-tokenizer on a full disk --------------------------------------------------------

@pytest.mark.parametrize("kind", ["byte-bpe", "sentencepiece-unigram"])
def test_train_tokenizer_on_a_full_disk_is_one_line_and_leaves_no_temp_file(
        corpora: Path, tmp_path: Path, kind: str):
    """A real 32 KiB tmpfs (root, Linux): the tokenizer does not fit."""
    with small_tmpfs(tmp_path / "small", "32k") as mnt:
        result = subprocess.run(
            [*SPR_DATA, "train-tokenizer", str(corpora / "parallel/multi30k/train.en.gz"),
             "--out", str(mnt / "tok"), "--kind", kind, "--vocab-size", "2000"],
            capture_output=True, text=True, timeout=300)
        assert result.returncode == 1, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert "no space left on device" in line and str(mnt / "tok") in line
        left = sorted(p.name for p in (mnt / "tok").iterdir()) if (mnt / "tok").exists() \
            else []
        assert not [n for n in left if n.endswith(".tmp") or ".tmp." in n], left



_TRAIN_UNTIL_INTERRUPTED = """
import sys
from spr_data.pipeline.train_tokenizer import train_tokenizer

def progress(phase, done, total):
    # "sample": the first segments are fed (SentencePiece pulls them from its iterator);
    # "train" at 0: the stream is over, SentencePiece trains in C++
    if phase == sys.argv[3] and (phase == "sample" or done == 0):
        print(phase, flush=True)

try:
    train_tokenizer([sys.argv[1]], sys.argv[2], kind="sentencepiece-unigram",
                    vocab_size=2000, on_progress=progress)
except KeyboardInterrupt:
    sys.exit("interrupted")
print("finished", flush=True)
"""


@pytest.mark.parametrize("phase", ["sample", "train"])
def test_train_tokenizer_interrupted_leaves_no_temp_file(corpora: Path, tmp_path: Path,
                                                          phase: str):
    """SIGINT while SentencePiece is fed (it turns an exception raised in its iterator into
    a RuntimeError of its own) or while it trains (C++: Python's handler runs when it returns,
    after it wrote its PREFIX.model and PREFIX.vocab): an interrupt either way, not "cannot
    train", and none of the trainer's files is left."""
    script = tmp_path / "train.py"
    script.write_text(_TRAIN_UNTIL_INTERRUPTED)
    out = tmp_path / "tok"
    proc = subprocess.Popen([sys.executable, str(script),
                             str(corpora / "parallel/multi30k/train.en.gz"), str(out), phase],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[1])
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"{phase}\n"
    os.kill(proc.pid, signal.SIGINT)
    said, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and err.strip().splitlines() == ["interrupted"], (said, err)
    assert not out.exists()  # no temp file, no work state: the directory it made is gone


_KILLED_TRAINER = """
import os, signal, sys
from pathlib import Path
from spr_data.fsio import temp_path
from spr_data.outdir import temp_tag

out = Path(sys.argv[1])
out.mkdir()
prefix = temp_path(out / "tokenizer", temp_tag(out))  # as train-tokenizer names its files
for suffix in (".model", ".vocab"):
    Path(str(prefix) + suffix).write_bytes(b"what SentencePiece wrote")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_rerun_removes_the_temp_files_a_killed_train_tokenizer_left(corpora: Path,
                                                                      tmp_path: Path):
    """Killed outright (SIGKILL: no cleanup runs), train-tokenizer leaves the trainer's files
    under a token its work state recorded first; the rerun removes exactly those. A file of
    like name that no run recorded stays."""
    out = tmp_path / "tok"
    killed = subprocess.run([sys.executable, "-c", _KILLED_TRAINER, str(out)],
                            capture_output=True, timeout=60, cwd=Path(__file__).parents[1])
    assert killed.returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.glob("tokenizer.*.tmp.*"))
    assert len(left) == 2
    (out / "tokenizer.1-abcdef01.tmp.model").write_text("mine")
    rerun = subprocess.run([*SPR_DATA, "train-tokenizer",
                            str(corpora / "parallel/multi30k/train.en.gz"), "--out", str(out),
                            "--kind", "sentencepiece-bpe", "--vocab-size", "1000"],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "tokenizer.1-abcdef01.tmp.model", "tokenizer.model", "training.json"]
