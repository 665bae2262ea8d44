"""The retry-safe reader: a NAS that fails 1% of reads, and a flaky HTTP server, change
nothing a training loop sees; permanent errors and corruption are reported, not retried."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from spr_data import ingest, open_dataset
from spr_data.cache import ShardCache
from spr_data.errors import DatasetError, InputError, ReadError
from spr_data.reader import (
    TRANSIENT_ERRNOS,
    LocalFileSystem,
    ReaderOptions,
    RetryingFile,
    RetryPolicy,
    fetch_verified,
    is_network_path,
    read_all,
)
from spr_data.testing import FaultyFileSystem, serve_directory

FAST = RetryPolicy(attempts=12, base_delay=0.0005, max_delay=0.002, deadline=30)


@pytest.fixture(scope="module")
def multi30k(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reader")
    base = corpora / "parallel/multi30k"
    ingest([base / "train.en.gz", base / "train.de.gz"], root / "ds", shard_rows=2500)
    return root / "ds"


def epoch_bytes(ds_path: Path | str, **options: object) -> list[bytes]:
    """Every row of an epoch in spr-data's shuffled order, serialized."""
    ds = open_dataset(ds_path, **options)  # type: ignore[arg-type]
    from spr_data.pipeline.order import epoch_order, plan

    p = plan(len(ds), batch_size=500)
    out = []
    for b in range(p.batches_per_rank):
        rows = epoch_order(len(ds), 3, 0, p.batch_positions(0, b))
        table = ds.take(rows)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        out.append(sink.getvalue().to_pybytes())
    return out


def test_an_epoch_through_1_percent_faults_is_byte_identical(multi30k: Path):
    clean = epoch_bytes(multi30k)
    fs = FaultyFileSystem(rate=0.01, seed=1)
    faulty = epoch_bytes(multi30k, filesystem=fs, retry=FAST)
    assert faulty == clean
    assert sum(fs.injected.values()) >= 10 and len(fs.injected) >= 4  # faults really happened


def test_with_a_cache_the_copies_are_verified_and_mapped(multi30k: Path, tmp_path: Path):
    fs = FaultyFileSystem(rate=0.02, seed=2)
    assert epoch_bytes(multi30k, filesystem=fs, retry=FAST, cache_dir=tmp_path / "c") == \
        epoch_bytes(multi30k)
    copies = sorted((tmp_path / "c").glob("*.arrow"))
    assert len(copies) == 12 and not list((tmp_path / "c").glob("*.part-*"))
    manifest = open_dataset(multi30k).manifest
    assert {c.stem for c in copies} == {s.hash.removeprefix("sha256:") for s in manifest.shards}


def test_the_cache_respects_its_limit_and_evicts_the_least_recently_used(multi30k: Path,
                                                                          tmp_path: Path):
    shards = open_dataset(multi30k).manifest.shards
    limit = shards[0].bytes + shards[1].bytes + shards[2].bytes + 10
    cache = ShardCache(tmp_path / "c", limit_bytes=limit, prefetch=0)
    fs = LocalFileSystem(network=True)
    paths = [cache.get(fs, str(multi30k / s.file), s) for s in shards[:3]]
    os.utime(paths[0], (1, 1))  # shard 0 used longest ago
    cache.get(fs, str(multi30k / shards[3].file), shards[3])
    assert cache.used_bytes() <= limit
    assert not paths[0].exists() and paths[1].exists() and paths[2].exists()


def test_a_copy_killed_midway_is_never_used(multi30k: Path, tmp_path: Path):
    shard = open_dataset(multi30k).manifest.shards[0]
    cache_dir = tmp_path / "c"
    cache_dir.mkdir()
    # what a copy killed midway leaves: a part file of a process that no longer exists
    dead = cache_dir / f"{shard.hash.removeprefix('sha256:')}.arrow.part-999999999-1"
    dead.write_bytes((multi30k / shard.file).read_bytes()[:1000])
    cache = ShardCache(cache_dir, prefetch=0)
    assert not dead.exists()
    path = cache.get(LocalFileSystem(network=True), str(multi30k / shard.file), shard)
    assert path.read_bytes() == (multi30k / shard.file).read_bytes()


def test_a_persistent_bit_flip_is_reported_with_the_shard(multi30k: Path):
    shard = open_dataset(multi30k).manifest.shards[4]
    fs = FaultyFileSystem(rate=0.0)
    fs.flip_always.add(str(multi30k / shard.file))
    ds = open_dataset(multi30k, filesystem=fs, retry=FAST)
    ds.take([0, 1])  # other shards read fine
    with pytest.raises(DatasetError, match=f"shard .*{shard.file}.*do not match"):
        ds.take([4 * 2500 + 1])


def test_permanent_errors_fail_at_once_and_name_the_file(multi30k: Path):
    shard = multi30k / open_dataset(multi30k).manifest.shards[2].file
    fs = FaultyFileSystem(rate=0.0)
    fs.denied.add(str(shard))
    ds = open_dataset(multi30k, filesystem=fs, retry=FAST)
    opens = fs.opens
    with pytest.raises(InputError, match=f"cannot read {shard}: Permission denied"):
        ds.take([2 * 2500])
    assert fs.opens == opens  # no second attempt
    with pytest.raises(InputError, match="Is a directory"):
        RetryingFile(LocalFileSystem(), str(multi30k), size=10).read(5)


def test_a_file_that_vanishes_mid_epoch_is_reported_not_hung_on(multi30k: Path):
    fs = FaultyFileSystem(rate=0.0)
    ds = open_dataset(multi30k, filesystem=fs, retry=FAST)
    ds.take(range(0, 5000, 7))
    fs.vanish(str(multi30k / ds.manifest.shards[7].file))
    with pytest.raises(InputError, match=r"cannot read .*shard-00007.* No such file"):
        list(ds.iter_batches())


def test_retries_run_out_with_file_offset_attempts_and_errno(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 100)
    fs = FaultyFileSystem(rate=1.0, kinds=("ETIMEDOUT",))
    f = RetryingFile(fs, str(path), policy=RetryPolicy(attempts=3, base_delay=0.0001))
    f.seek(1000)
    with caplog.at_level(logging.WARNING, logger="spr_data.reader"), \
            pytest.raises(ReadError, match=r"f.bin at byte 1000: 3 attempts failed; last "
                                              r"error: (ETIMEDOUT|ESTALE)"):
        f.read(10)
    assert "attempt 2/3" in caplog.text and "at byte 1000" in caplog.text


def test_an_early_eof_is_a_fault_when_the_size_is_known(tmp_path: Path):
    """Over a network an early EOF may be a blip: retried, then a read error. On a local
    disk the file really is shorter (cut, or rewritten while read): one clear error at once,
    not minutes of retries."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(ReadError, match="early EOF at byte 100 of 150"):
        read_all(RetryingFile(LocalFileSystem(network=True), str(path), size=150,
                              policy=RetryPolicy(attempts=2, base_delay=0.0001)))
    local = RetryingFile(LocalFileSystem(network=False), str(path), size=150,
                         policy=RetryPolicy(attempts=5, base_delay=10.0))
    started = time.monotonic()
    with pytest.raises(InputError, match=r"f\.bin holds 100 bytes where 150 were expected"):
        read_all(local)
    assert time.monotonic() - started < 5 and local.retries == 0
    sha = "sha256:" + hashlib.sha256(b"x" * 100).hexdigest()
    fs = FaultyFileSystem(rate=0.3, seed=5, max_read=7)
    assert bytes(fetch_verified(fs, str(path), size=100, sha256=sha, policy=FAST)) == b"x" * 100
    assert fs.injected["flip"] and fs.injected["short"] and fs.injected["eof"]


def test_through_a_flaky_http_server_the_epoch_is_identical(multi30k: Path):
    with serve_directory(multi30k.parent, rate=0.1, seed=4) as server:
        remote = epoch_bytes(f"{server.url}/{multi30k.name}", retry=FAST)
        assert remote == epoch_bytes(multi30k)
        assert sum(server.injected.values()) >= 1
        with pytest.raises(DatasetError, match="not a readable spr-data dataset"):
            open_dataset(f"{server.url}/nope", retry=FAST)
        # the rejects beside the dataset come over the same path
        rejects = open_dataset(f"{server.url}/{multi30k.name}", retry=FAST).rejects
        assert rejects is not None and rejects.remote


def test_network_mounts_are_recognised_from_the_mount_table():
    table = ("/dev/vda1 / ext4 rw 0 0\n"
             "nas:/export /mnt/nas nfs4 rw 0 0\n"
             "//srv/share /mnt/smb cifs rw 0 0\n"
             "sshfs#me@host: /mnt/ssh fuse.sshfs rw 0 0\n"
             "/dev/vdb /mnt/nas/local ext4 rw 0 0\n")
    assert is_network_path("/mnt/nas/data/shard.arrow", table)
    assert is_network_path("/mnt/smb/x", table) and is_network_path("/mnt/ssh/y", table)
    assert not is_network_path("/mnt/nas/local/z", table)  # a local disk mounted inside
    assert not is_network_path("/home/me/data", table)
    assert not is_network_path("/mnt/nasty", table)


def test_a_dataset_on_a_network_mount_is_never_memory_mapped(multi30k: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    def no_mmap(*args: object, **kwargs: object) -> None:
        raise AssertionError("a network file was memory-mapped")

    ds = open_dataset(multi30k, filesystem=LocalFileSystem(network=True))
    monkeypatch.setattr(pa, "memory_map", no_mmap)
    assert ds.remote and len(ds.take(range(0, 29000, 1000))) == 29
    assert sum(s is not None for s in ds._shards) <= ReaderOptions().max_in_memory


def test_bad_reader_options_are_clear_errors():
    with pytest.raises(InputError, match="verify='sometimes'"):
        ReaderOptions(verify="sometimes")
    assert errno.ESTALE in TRANSIENT_ERRNOS


def test_the_training_iterator_reads_through_faults_in_its_workers(multi30k: Path,
                                                                   tmp_path: Path):
    torch_data = pytest.importorskip("spr_data.pipeline.torch_data")
    from torch.utils.data import DataLoader

    def ids(**options: object) -> list[list[int]]:
        ds = torch_data.SprIterableDataset(multi30k, batch_size=256, seed=2, columns=["src"],
                                           **options)
        return [[*b["ids"].tolist(), hash(tuple(b["src"]))]
                for b in DataLoader(ds, batch_size=None, num_workers=2)]

    faulty = ReaderOptions(filesystem=FaultyFileSystem(rate=0.01, seed=3), retry=FAST)
    assert ids(reader=faulty) == ids()
    cached = ReaderOptions(filesystem=FaultyFileSystem(rate=0.01, seed=4), retry=FAST,
                           cache_dir=str(tmp_path / "cache"))
    assert ids(reader=cached) == ids()


def test_tokenizer_training_through_faults_gives_the_same_model(multi30k: Path,
                                                                tmp_path: Path):
    from spr_data.pipeline.train_tokenizer import train_tokenizer

    options = {"kind": "sentencepiece-unigram", "vocab_size": 1000, "seed": 0}
    train_tokenizer([multi30k], tmp_path / "clean", **options)  # type: ignore[arg-type]
    fs = FaultyFileSystem(rate=0.01, seed=6)
    train_tokenizer([multi30k], tmp_path / "faulty", reader=ReaderOptions(filesystem=fs,
                                                                          retry=FAST),
                    **options)  # type: ignore[arg-type]
    assert sum(fs.injected.values()) > 0
    # the same pieces in the same order, the same ids for any text (SentencePiece's threaded
    # EM leaves last-bit differences in the scores between any two runs, faults or not)
    import sentencepiece as spm

    clean, faulty = (spm.SentencePieceProcessor(model_file=str(tmp_path / d / "tokenizer.model"))
                     for d in ("clean", "faulty"))
    assert [clean.id_to_piece(i) for i in range(1000)] == \
        [faulty.id_to_piece(i) for i in range(1000)]
    texts = [r["src"] + " " + r["tgt"] for r in open_dataset(multi30k).take(range(0, 29000, 97))
             .to_pylist()]
    assert clean.encode(texts) == faulty.encode(texts)


def test_ingest_of_raw_inputs_survives_nas_faults(corpora: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    from spr_data.pipeline.sources import base as sources  # where raw files are opened

    base = corpora / "parallel/multi30k"
    inputs = [base / "train.en.gz", base / "train.de.gz"]
    ingest(inputs, tmp_path / "clean", shard_rows=5000)
    # raw inputs have no hash to check a flipped bit against: every other fault
    fs = FaultyFileSystem(rate=0.05, seed=8, max_read=4096,
                          kinds=("EIO", "ESTALE", "ETIMEDOUT", "short", "eof"))
    monkeypatch.setattr(sources, "LocalFileSystem", lambda: fs)
    ingest(inputs, tmp_path / "faulty", shard_rows=5000, retry=FAST)
    assert sum(fs.injected.values()) >= 10
    for shard in sorted((tmp_path / "clean").glob("shard-*.arrow")):
        assert shard.read_bytes() == (tmp_path / "faulty" / shard.name).read_bytes()


def test_the_cache_prefetches_the_next_shards(multi30k: Path, tmp_path: Path):
    ds = open_dataset(multi30k, filesystem=LocalFileSystem(network=True),
                      cache_dir=tmp_path / "c")
    ds.take([10])  # shard 0
    assert ds._cache is not None
    ds._cache.drain()  # waits for the background copies
    manifest = open_dataset(multi30k).manifest
    cached = {p.stem for p in (tmp_path / "c").glob("*.arrow")}
    assert cached == {s.hash.removeprefix("sha256:") for s in manifest.shards[:3]}


KILLED_COPY = """
import sys, time
from spr_data.cache import ShardCache
from spr_data.dataset import open_dataset
from spr_data.reader import LocalFileSystem

class Slow(LocalFileSystem):
    def open(self, path):
        f = super().open(path)
        class Dribble:
            def seek(self, *a): return f.seek(*a)
            def readinto(self, b):
                time.sleep(0.05)
                return f.readinto(memoryview(b)[:4096])
            def close(self): f.close()
        return Dribble()

ds = open_dataset(sys.argv[1])
info = ds.manifest.shards[0]
ShardCache(sys.argv[2], prefetch=0).get(Slow(), sys.argv[1] + "/" + info.file, info)
"""


def test_a_copy_killed_by_sigkill_leaves_nothing_that_is_used(multi30k: Path, tmp_path: Path):
    import signal
    import subprocess
    import sys
    import time

    cache_dir = tmp_path / "c"
    child = subprocess.Popen([sys.executable, "-c", KILLED_COPY, str(multi30k), str(cache_dir)])
    deadline = time.monotonic() + 60
    while not list(cache_dir.glob("*.part-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # some bytes written, far from all
    child.send_signal(signal.SIGKILL)
    child.wait()
    parts = list(cache_dir.glob("*.part-*"))
    assert parts and not list(cache_dir.glob("*.arrow"))
    shard = open_dataset(multi30k).manifest.shards[0]
    cache = ShardCache(cache_dir, prefetch=0)  # the dead process's part file goes
    assert not any(p.exists() for p in parts)
    path = cache.get(LocalFileSystem(network=True), str(multi30k / shard.file), shard)
    assert path.read_bytes() == (multi30k / shard.file).read_bytes()


def test_pyarrow_urls_read_through_the_retrying_reader(multi30k: Path):
    url = multi30k.resolve().as_uri()  # file:// here; s3://, gs://, hdfs:// the same way
    ds = open_dataset(url, retry=FAST)
    assert ds.remote and ds.location == url
    assert epoch_bytes(url, retry=FAST) == epoch_bytes(multi30k)
    with pytest.raises(DatasetError, match="not a readable spr-data dataset"):
        open_dataset(url + "-missing", retry=FAST)


def test_verify_and_clean_read_a_networked_dataset(multi30k: Path, tmp_path: Path):
    from spr_data.pipeline.clean import clean
    from spr_data.verify import verify_dataset
    from tests.test_clean import NO_ALIGN, recipe_file

    fs = FaultyFileSystem(rate=0.01, seed=9)
    reader = ReaderOptions(filesystem=fs, retry=FAST)
    report = verify_dataset(multi30k, reader=reader)
    assert report.ok and report.rows == 29000
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "remote", recipe=recipe, workers=1, reader=reader)
    clean(multi30k, tmp_path / "local", recipe=recipe, workers=1)
    for shard in sorted((tmp_path / "local").glob("shard-*.arrow")):
        assert shard.read_bytes() == (tmp_path / "remote" / shard.name).read_bytes()
    assert not (tmp_path / "remote/.work").exists()  # the staged copies went with the work dir
    fs.flip_always.add(str(multi30k / "shard-00003.arrow"))
    broken = verify_dataset(multi30k, reader=reader)
    assert not broken.ok and "shard-00003.arrow" in broken.all_problems()[0]


def test_a_prefetch_that_fails_at_once_does_not_deadlock(multi30k: Path, tmp_path: Path):
    import threading

    shards = open_dataset(multi30k).manifest.shards
    fs = FaultyFileSystem(rate=0.0)
    for s in shards:
        fs.vanish(str(tmp_path / "gone" / s.file))
    cache = ShardCache(tmp_path / "c", prefetch=2)

    def hammer() -> None:
        for _ in range(300):
            cache.prefetch_shards([(fs, str(tmp_path / "gone" / s.file), s) for s in shards])

    worker = threading.Thread(target=hammer, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()


def test_a_forked_loader_worker_reads_through_a_cache_opened_before_the_fork(multi30k: Path,
                                                                             tmp_path: Path):
    torch_data = pytest.importorskip("spr_data.pipeline.torch_data")
    from torch.utils.data import DataLoader

    reader = ReaderOptions(filesystem=LocalFileSystem(network=True),
                           cache_dir=str(tmp_path / "c"))
    ds = torch_data.SprMapDataset(multi30k, reader=reader)
    assert ds[0]["id"] == 0  # opened here: the prefetch thread has work queued
    loader = DataLoader(ds, batch_size=64, num_workers=1, timeout=60,
                        multiprocessing_context="fork", collate_fn=lambda r: [x["id"] for x in r])
    ids = [i for batch in loader for i in batch]
    assert ids == list(range(29000))


def test_seeking_a_retrying_file_moves_its_handle(tmp_path: Path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(100)))
    f = RetryingFile(LocalFileSystem(), str(path))
    assert f.read(10) == bytes(range(10))
    f.seek(0)
    assert f.read(5) == bytes(range(5))
    f.seek(90)
    assert f.read(20) == bytes(range(90, 100))


def test_mount_points_with_escapes_and_utf8_names():
    table = "nas:/x /mnt/my\\040data nfs rw 0 0\nnas:/y /mnt/donn\u00e9es nfs4 rw 0 0\n"
    assert is_network_path("/mnt/my data/ds", table)
    assert is_network_path("/mnt/donn\u00e9es/ds", table)


def test_a_server_that_is_down_fails_at_once_with_a_clear_error():
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ReadError, match=r"ECONNREFUSED.*is the server up") as caught:
        open_dataset(f"http://127.0.0.1:{port}/ds", retry=RetryPolicy(attempts=5))
    assert "attempts failed" not in str(caught.value)  # not retried: nobody is listening


def test_a_negative_cache_limit_is_refused(tmp_path: Path):
    with pytest.raises(InputError, match="limit_bytes >= 0"):
        ShardCache(tmp_path / "c", limit_bytes=-1)
