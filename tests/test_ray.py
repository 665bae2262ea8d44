"""The Ray executor on a real two-node Ray cluster started on this machine by the fixture:
the same bytes as a local run, a worker killed mid-task, a driver killed and rerun,
accounting, errors and cancellation."""

from __future__ import annotations

import functools
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

import spr_data.pipeline.clean as clean_module
from spr_data import InputError, ingest, open_dataset
from spr_data.fsio import temp_path
from spr_data.outdir import REJECTS_DIR, WORK_DIR
from spr_data.pipeline.clean import clean
from spr_data.pipeline.ray_executor import RayExecutor
from spr_data.pipeline.tokenize import tokenize
from spr_data.writer import REJECTS_SHARD_SUFFIX
from tests.conftest import run_cli

# CI installs the dev extra, Ray included: there a missing Ray fails these tests
ray = pytest.importorskip("ray") if not os.environ.get("CI") else __import__("ray")

T = TypeVar("T")
R = TypeVar("R")

ROWS, SHARD_ROWS = 5000, 1000  # five input shards: five tasks per step, spread over two nodes
#: run metadata that differs between any two runs (clocks, worker counts, where it ran)
VOLATILE = {"seconds", "train_seconds", "score_seconds", "timings", "workers", "created",
            "resumed_shards", "out"}


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A Ray cluster of two nodes of one CPU each, on this machine, for this module."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    node = {"num_cpus": 1, "object_store_memory": 100 << 20, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def corpus(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5,000 Tatoeba eng–cmn pairs (every 5th line: short and long ones) in five shards."""
    root = tmp_path_factory.mktemp("ray-corpus")
    lines = gzip.decompress(
        (corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz").read_bytes()
    ).decode().splitlines()
    (root / "eng-cmn.tsv").write_text("\n".join(lines[::5][:ROWS]) + "\n")
    ingest([root / "eng-cmn.tsv"], root / "ds", langs=["en", "zh"], shard_rows=SHARD_ROWS)
    return root / "ds"


@pytest.fixture(scope="module")
def local_clean(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same corpus cleaned by the local executor (default recipe)."""
    out = tmp_path_factory.mktemp("ray-ref") / "local"
    clean(corpus, out, workers=1)
    return out


def _normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def snapshot(out: Path) -> dict[str, Any]:
    """Every file of a dataset directory: bytes, or for JSON its content without run metadata.
    (report.html is rendered from report.json and shows its timings.)"""
    files: dict[str, Any] = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if not path.is_file() or rel == "report.html":
            continue
        files[rel] = (_normalized(json.loads(path.read_text())) if path.suffix == ".json"
                      else path.read_bytes())
    return files


def assert_same_output(out: Path, reference: Path) -> None:
    got, expected = snapshot(out), snapshot(reference)
    assert sorted(got) == sorted(expected)
    assert [name for name in expected if got[name] != expected[name]] == []


def all_ids(path: Path) -> np.ndarray:
    ds = open_dataset(path)
    return ds.take(np.arange(len(ds))).column("id").to_numpy()


def test_ray_clean_is_byte_identical_to_a_local_clean(corpus: Path, local_clean: Path,
                                                      ray_address: str, tmp_path: Path):
    with RayExecutor(ray_address) as executor:
        assert executor.workers == 2  # one CPU on each of the two nodes
        report = clean(corpus, tmp_path / "ray", executor=executor)
    assert_same_output(tmp_path / "ray", local_clean)
    assert len(json.loads((tmp_path / "ray/manifest.json").read_text())["shards"]) == 5
    # accounting: every input row is kept or rejected, once
    kept, rejected = all_ids(tmp_path / "ray"), all_ids(tmp_path / "ray" / REJECTS_DIR)
    assert len(kept) + len(rejected) == report.rows_in == ROWS
    assert report.rows_kept == len(kept) and report.rows_rejected == len(rejected) > 0
    assert np.array_equal(np.sort(np.concatenate([kept, rejected])), np.sort(all_ids(corpus)))


def test_ray_clean_from_s3_into_s3_is_byte_identical_to_a_local_clean(
        corpus: Path, local_clean: Path, ray_address: str, s3: Any, tmp_path: Path):
    """Input and output on a real S3 server (the ``s3`` fixture): the tasks read the input's
    verified local copies, the run works in --work-dir, and the upload is the local bytes."""
    from tests.test_s3_output import objects

    s3.upload(corpus, "ray/ds")
    with RayExecutor(ray_address) as executor:
        clean(s3.url("ray/ds"), s3.url("ray/clean"), executor=executor,
              work_dir=tmp_path / "run")
    got = tmp_path / "downloaded"
    for name, data in objects(s3, "ray/clean").items():
        (got / name).parent.mkdir(parents=True, exist_ok=True)
        (got / name).write_bytes(data)
    lineage = json.loads((got / "manifest.json").read_text())["lineage"]
    assert lineage["parent"]["path"] == s3.url("ray/ds")
    for manifest in (got / "manifest.json", got / REJECTS_DIR / "manifest.json"):
        data = json.loads(manifest.read_text())
        data["lineage"]["parent"] = json.loads(
            (local_clean / manifest.relative_to(got)).read_text())["lineage"]["parent"]
        manifest.write_text(json.dumps(data))
    assert_same_output(got, local_clean)
    assert not (tmp_path / "run").exists()


def test_ray_tokenize_is_byte_identical_to_a_local_tokenize(local_clean: Path, corpora: Path,
                                                            ray_address: str, tmp_path: Path):
    spec = f"gpt2={corpora / 'tokenizers/gpt2-vocab.json'}"
    tokenize(local_clean, tmp_path / "local", tokenizer=spec, workers=1)
    with RayExecutor(ray_address) as executor:
        report = tokenize(local_clean, tmp_path / "ray", tokenizer=spec, executor=executor)
    assert report.workers == 2
    assert_same_output(tmp_path / "ray", tmp_path / "local")


def test_ray_ingest_of_several_inputs_is_byte_identical_to_one_process(
        corpora: Path, ray_address: str, tmp_path: Path):
    lines = gzip.decompress(
        (corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz").read_bytes()
    ).decode().splitlines()
    inputs = []
    for i in range(3):
        inputs.append(tmp_path / f"part{i}.eng-cmn.tsv.gz")
        part = [*lines[i::3][:2000], "no tab here"]  # one reject each
        inputs[-1].write_bytes(gzip.compress(("\n".join(part) + "\n").encode()))
    ingest(inputs, tmp_path / "local", workers=1, shard_rows=1500)
    with RayExecutor(ray_address) as executor:
        summary = ingest(inputs, tmp_path / "ray", executor=executor, shard_rows=1500)
    assert summary.rejects == {"tsv_field_count": 3} and summary.rows == 6000
    assert_same_output(tmp_path / "ray", tmp_path / "local")
    assert not (tmp_path / "ray" / WORK_DIR).exists()


class KillOnce:
    """A RayExecutor whose decide task for unit 1 kills its own worker process (SIGKILL) once,
    between writing the unit's kept shard and finishing its reject shard: the worker dies
    with half its output on disk, and Ray runs the task again on another worker."""

    def __init__(self, inner: RayExecutor, marker: Path) -> None:
        self.inner, self.marker = inner, marker

    @property
    def workers(self) -> int:
        return self.inner.workers

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        return self.inner.map(functools.partial(_kill_once, fn, str(self.marker)), tasks)


def _kill_once(fn: Callable[[Any], Any], marker: str, task: Any) -> Any:
    """Runs in a Ray worker (pickled by value: the workers do not import the tests)."""
    if getattr(fn, "__name__", "") == "_decide_task" and task.index == 1 \
            and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        write = clean_module.write_shard_file

        def write_then_die(path: Path, batch: Any, *, digest: bool = True,
                           tag: str | None = None) -> Any:
            if path.name.endswith(REJECTS_SHARD_SUFFIX):  # the reject shard, cut short, under
                temp_path(path, tag).write_bytes(b"ARROW1\0\0")  # the worker's recorded token
                os.kill(os.getpid(), signal.SIGKILL)
            return write(path, batch, digest=digest, tag=tag)

        clean_module.write_shard_file = write_then_die
    return fn(task)


@pytest.mark.slow
def test_a_ray_worker_killed_mid_task_is_retried_to_the_same_bytes(
        corpus: Path, local_clean: Path, ray_address: str, tmp_path: Path):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "killed"
    try:
        with RayExecutor(ray_address) as executor:
            clean(corpus, tmp_path / "ray", executor=KillOnce(executor, marker))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    pid = int(marker.read_text())
    assert pid != os.getpid() and not Path(f"/proc/{pid}").exists()  # that worker is dead
    assert_same_output(tmp_path / "ray", local_clean)


@pytest.mark.slow
def test_a_killed_ray_driver_resumes_to_the_same_bytes(corpus: Path, local_clean: Path,
                                                       ray_address: str, tmp_path: Path):
    out = tmp_path / "ray"
    command = [sys.executable, "-c", "from spr_data.cli import app; app()", "clean",
               str(corpus), "--out", str(out), "--executor", "ray", "--ray-address",
               ray_address, "--quiet", "--json"]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not any((out / WORK_DIR).glob("done-*.json")):  # a first unit decided
            assert driver.poll() is None, driver.stderr.read().decode() if driver.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        driver.kill()  # SIGKILL: no cleanup of any kind
        driver.wait()
    assert not (out / "manifest.json").exists()
    rerun = subprocess.run(command, capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["resumed_shards"] >= 1
    assert_same_output(out, local_clean)


def test_a_task_error_is_raised_as_itself_and_cancels_the_tasks_in_flight(ray_address: str):
    with RayExecutor(ray_address) as executor:
        # task 0 fails at once while task 1 sleeps for ten minutes on the other node
        with pytest.raises(ValueError, match="non-negative"):
            for _ in executor.map(time.sleep, [-1.0, 600.0]):
                pass
        deadline = time.monotonic() + 60  # cancelled: its CPU is free long before 600 s
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == 2
        assert sorted(executor.map(abs, [-3, 4, -5])) == [(0, 3), (1, 4), (2, 5)]


@pytest.mark.slow
def test_without_an_address_a_local_ray_is_started_and_stopped(ray_address: str):
    # a Ray cluster runs on this machine (the fixture's): a local run must not join it
    with RayExecutor(workers=1) as executor:
        assert list(executor.map(abs, [-1, -2])) == [(0, 1), (1, 2)]
        assert executor.workers == 1 == ray.cluster_resources()["CPU"]
    assert not ray.is_initialized()
    # a Ray the caller connected is used and left connected
    ray.init(address=ray_address)
    try:
        with RayExecutor() as executor:
            assert executor.workers == 2
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_a_missing_ray_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where it is absent
    with pytest.raises(InputError, match=r"pip install 'spr-data\[ray\]'"):
        _ = RayExecutor().workers


def test_cli_executor_options_are_checked(corpus: Path, tmp_path: Path):
    result = run_cli("clean", corpus, "--out", tmp_path / "o", "--ray-address", "auto")
    assert result.exit_code == 2 and "--ray-address needs --executor ray" in result.stderr
    result = run_cli("tokenize", corpus, "-t", "x", "--out", tmp_path / "o", "--executor", "dask")
    assert result.exit_code == 2 and "--executor is local or ray" in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_ray_address_where_nothing_listens_is_one_line_and_leaves_no_run(corpus: Path,
                                                                          tmp_path: Path):
    """Ray retried such an address for over 10 minutes, deaf to Ctrl-C, after the run had
    written its work directory (which then blocked a local run into the same --out)."""
    import socket

    with socket.socket() as probe:  # a port just free: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_cli("clean", corpus, "--out", tmp_path / "o", "--executor", "ray",
                     "--ray-address", f"127.0.0.1:{port}")
    assert result.exit_code == 2, result.stderr
    assert f"cannot reach Ray at 127.0.0.1:{port}: Connection refused" in result.stderr
    assert time.monotonic() - started < 60
    assert not (tmp_path / "o").exists()


def test_a_run_directory_on_a_local_disk_is_refused_for_a_cluster_of_several_hosts(
        ray_address: str, tmp_path: Path):
    from spr_data.pipeline.executor import check_shared

    with RayExecutor(ray_address) as executor:
        assert executor.hosts == 1  # two nodes, one machine: its disk is theirs
        check_shared(tmp_path, executor)
    mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/export /mnt/shared nfs4 rw 0 0\n"

    class TwoHosts:  # what RayExecutor.hosts says of a cluster over two machines
        hosts, workers = 2, 2

    check_shared("/mnt/shared/run", TwoHosts(), mount_table=mounts)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"--work-dir /data/run is on this machine's own disk"
                       r".* 2 hosts"):
        check_shared("/data/run", TwoHosts(), "--work-dir",  # type: ignore[arg-type]
                     mount_table=mounts)
