"""Outputs on S3: ``ingest``, ``clean`` and ``tokenize`` with ``--out s3://bucket/prefix``.

The same real S3 server as ``test_s3.py`` (moto's server mode on loopback). A run into S3
works in a local run directory and publishes by upload, manifest last; what lands in the
bucket is byte for byte what the same command writes into a directory, the prefix is locked
and checked first, nothing that spr-data did not write is deleted, and a run that fails
during its upload resumes to the same bytes without leaving a half dataset readable.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from spr_data import ingest, open_dataset
from spr_data.errors import LockError, OutputError
from spr_data.lock import LOCK_NAME, process_identity
from spr_data.pipeline.clean import clean
from spr_data.pipeline.tokenize import tokenize
from spr_data.remote_output import RemoteOutput
from spr_data.verify import verify_dataset
from tests.conftest import run_cli
from tests.test_s3 import BUCKET, S3, one_line

LLAMA2 = "tokenizers/llama2_tokenizer.model"


def objects(s3: S3, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` in the test bucket, by name relative to it."""
    base = f"{BUCKET}/{prefix}"
    found = s3.client.get_file_info(pafs.FileSelector(base, recursive=True,
                                                      allow_not_found=True))
    out = {}
    for info in found:
        if info.type == pafs.FileType.File:
            with s3.client.open_input_stream(info.path, compression=None) as f:
                out[info.path[len(base) + 1:]] = f.read()
    return out


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def same_dataset(remote: dict[str, bytes], local: dict[str, bytes]) -> None:
    """The same files with the same bytes; manifests and cards the same but for the time
    and place of the run (``created``, the lineage's own paths)."""
    assert sorted(remote) == sorted(local)
    for name, data in local.items():
        if name.endswith(("manifest.json", "README.md", "report.json", "report.html")):
            continue
        assert remote[name] == data, name
    for name in (n for n in local if n.endswith("manifest.json")):
        mine, theirs = json.loads(remote[name]), json.loads(local[name])
        mine.pop("lineage"), theirs.pop("lineage")
        assert mine == theirs, name


def test_ingest_clean_and_tokenize_into_s3_write_what_they_write_into_a_directory(
        s3: S3, corpora: Path, tmp_path: Path):
    from tests.test_clean import NO_ALIGN, recipe_file

    raw = s3.raw / "tatoeba.eng-ben.tsv"
    result = run_cli("ingest", raw, "--out", s3.url("out/ds"), "--shard-rows", "1000",
                     "--work-dir", tmp_path / "run-ingest", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["out"] == s3.url("out/ds")
    ingest([raw], tmp_path / "ds", shard_rows=1000)
    same_dataset(objects(s3, "out/ds"), files(tmp_path / "ds"))
    assert not (tmp_path / "run-ingest").exists()  # the run directory goes once published

    recipe = recipe_file(tmp_path, NO_ALIGN)
    result = run_cli("clean", s3.url("out/ds"), "--out", s3.url("out/clean"), "--recipe",
                     recipe, "--workers", "2", "--quiet", "--work-dir", tmp_path / "run-clean")
    assert result.exit_code == 0, result.stderr
    local = clean(tmp_path / "ds", tmp_path / "clean", recipe=recipe, workers=1)
    remote = objects(s3, "out/clean")
    same_dataset(remote, files(tmp_path / "clean"))
    assert {"report.json", "report.html", "_rejects/manifest.json"} <= set(remote)
    assert json.loads(remote["report.json"])["by_reason"] == local.by_reason
    assert not (tmp_path / "run-clean").exists()
    cleaned = open_dataset(s3.url("out/clean"))
    assert cleaned.to_pyarrow().equals(open_dataset(tmp_path / "clean").to_pyarrow())
    assert verify_dataset(s3.url("out/clean")).ok
    assert cleaned.manifest.lineage["parent"]["path"] == s3.url("out/ds")

    model = corpora / LLAMA2
    report = tokenize(s3.url("out/clean"), s3.url("out/tok"), tokenizer=str(model), workers=1,
                      work_dir=tmp_path / "run-tok")
    assert report.out == s3.url("out/tok")
    tokenize(tmp_path / "clean", tmp_path / "tok", tokenizer=str(model), workers=1)
    same_dataset(objects(s3, "out/tok"), files(tmp_path / "tok"))
    assert LOCK_NAME not in objects(s3, "out/tok")  # the lock object goes with the run


def test_the_default_run_directory_is_in_the_users_cache(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = RemoteOutput.of(s3.url("out/default"))
    assert target.run_dir.parent == tmp_path / "cache/spr-data/runs"
    assert target.run_dir.name.startswith("default-")
    assert RemoteOutput.of(s3.url("out/other")).run_dir != target.run_dir  # one per URL
    ingest([s3.raw / "tatoeba.eng-ben.tsv"], s3.url("out/default"))
    assert len(open_dataset(s3.url("out/default"))) > 4000
    assert list((tmp_path / "cache/spr-data/runs").iterdir()) == []


def test_an_s3_prefix_is_replaced_only_on_overwrite_and_only_what_spr_data_wrote(
        s3: S3, tmp_path: Path):
    raw = s3.raw / "tatoeba.eng-ben.tsv"
    url = s3.url("out/replace")
    ingest([raw], url, shard_rows=500, work_dir=tmp_path / "run")
    before = objects(s3, "out/replace")
    assert "shard-00008.arrow" in before
    again = run_cli("ingest", raw, "--out", url, "--work-dir", tmp_path / "run")
    assert again.exit_code == 1  # as for a directory
    assert "already holds a dataset; pass --overwrite" in one_line(again.stderr)
    assert objects(s3, "out/replace") == before
    # --overwrite: the new dataset, and none of the old one's shards left over
    ingest([raw], url, shard_rows=2000, overwrite=True, work_dir=tmp_path / "run")
    after = objects(s3, "out/replace")
    assert sorted(n for n in after if n.startswith("shard-")) == [
        "shard-00000.arrow", "shard-00001.arrow", "shard-00002.arrow"]
    assert len(open_dataset(url)) == len(open_dataset(s3.local))
    # an object of somebody else's: refused, even with --overwrite, and kept
    s3.put("out/replace/notes.txt", b"mine")
    refused = run_cli("ingest", raw, "--out", url, "--overwrite", "--work-dir", tmp_path / "r")
    assert refused.exit_code == 1
    line = one_line(refused.stderr)
    assert "notes.txt" in line and "did not write" in line
    assert objects(s3, "out/replace")["notes.txt"] == b"mine"
    assert len(open_dataset(url)) == len(open_dataset(s3.local))


def test_bad_s3_outputs_are_one_clear_line(s3: S3, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    raw = str(s3.raw / "tatoeba.eng-ben.tsv")
    cases = [  # exit 2: a usage error; 1: what the store holds (as for a directory)
        (s3.url("out/x", bucket="no-such-bucket"), "no bucket 'no-such-bucket'", 1),
        (s3.url(""), "not the bucket itself", 2),
        (s3.url("raw/tatoeba.eng-ben.tsv"), "is an object, not a prefix", 1),
        ("https://example.com/out", "an HTTP server cannot be written to", 2),
        (f"s3://AKIAX:sup3rs3cret@{BUCKET}/out", "AWS_ACCESS_KEY_ID", 2),
    ]
    for out, message, code in cases:
        result = run_cli("ingest", raw, "--out", out, "--work-dir", tmp_path / "run")
        assert result.exit_code == code, (out, result.stderr)
        line = one_line(result.stderr)
        assert message in line and "sup3rs3cret" not in line, line
    assert not (tmp_path / "run").exists()
    assert list(tmp_path.iterdir()) == []  # nothing made in the working directory either
    same = run_cli("clean", s3.url("ds"), "--out", s3.url("ds"))
    assert same.exit_code == 2 and "must differ" in one_line(same.stderr)


def test_a_bad_work_dir_is_named_as_the_work_dir(s3: S3, tmp_path: Path):
    """With an s3:// --out the run works in --work-dir: a --work-dir that is a file is that
    option's fault, and the message names it, not --out (ingest and clean)."""
    raw = s3.raw / "tatoeba.eng-ben.tsv"
    (tmp_path / "afile").write_text("mine")
    for args in (["ingest", raw], ["clean", s3.url("ds")]):
        result = run_cli(*args, "--out", s3.url("out/workdir"), "--work-dir",
                         tmp_path / "afile")
        line = one_line(result.stderr)
        assert result.exit_code != 0 and f"--work-dir {tmp_path / 'afile'} is a file" in line, line
        assert (tmp_path / "afile").read_text() == "mine"


def test_an_s3_prefix_in_use_is_refused_and_a_dead_holders_lock_taken_over(
        s3: S3, tmp_path: Path):
    raw = s3.raw / "tatoeba.eng-ben.tsv"
    url = s3.url("out/locked")
    live = {**process_identity("spr-data clean … (another run)"), "token": "0" * 16}
    s3.put(f"out/locked/{LOCK_NAME}", json.dumps(live).encode())
    with pytest.raises(LockError, match="in use by another run"):
        ingest([raw], url, work_dir=tmp_path / "run")
    result = run_cli("ingest", raw, "--out", url, "--work-dir", tmp_path / "run")
    assert result.exit_code == 2
    assert f"pid {os.getpid()}" in one_line(result.stderr)
    assert set(objects(s3, "out/locked")) == {LOCK_NAME}
    dead = {**live, "pid": 2 ** 22 + 12345, "start_ticks": 1}  # no such process
    s3.put(f"out/locked/{LOCK_NAME}", json.dumps(dead).encode())
    result = run_cli("ingest", raw, "--out", url, "--work-dir", tmp_path / "run")
    assert result.exit_code == 0, result.stderr
    assert "took over the stale lock" in result.stderr
    assert LOCK_NAME not in objects(s3, "out/locked")
    assert len(open_dataset(url)) == len(open_dataset(s3.local))


def test_a_clean_into_s3_that_fails_during_its_upload_resumes_to_the_same_bytes(
        s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The store fails after three objects of the upload (over an older dataset, replaced):
    the prefix then holds no dataset at all (the old manifest went first), never a mix;
    the rerun resumes every unit from the run directory and publishes the same bytes."""
    from tests.test_clean import NO_ALIGN, recipe_file

    recipe = recipe_file(tmp_path, NO_ALIGN)
    url = s3.url("out/resume")
    ingest([s3.raw / "tatoeba.eng-ben.tsv"], url, work_dir=tmp_path / "old")  # an old dataset
    put = RemoteOutput._put
    stored: list[str] = []
    tried = threading.Lock()  # objects go up several at a time

    def failing_put(self: RemoteOutput, path: Path, name: str) -> None:
        with tried:
            if len(stored) >= 3:
                raise OutputError(f"cannot write {self.where(name)}: the store went away")
            stored.append(name)
        put(self, path, name)

    monkeypatch.setattr(RemoteOutput, "_put", failing_put)
    with pytest.raises(OutputError, match="the store went away"):
        clean(s3.local, url, recipe=recipe, workers=2, overwrite=True,
              work_dir=tmp_path / "run")
    monkeypatch.setattr(RemoteOutput, "_put", put)
    halfway = objects(s3, "out/resume")
    assert "manifest.json" not in halfway and len(stored) == 3
    assert all(name in halfway for name in stored)
    with pytest.raises(Exception, match="not a readable spr-data dataset"):
        open_dataset(url)
    assert (tmp_path / "run/.work/run.json").is_file()  # the run's state, for the rerun

    report = clean(s3.local, url, recipe=recipe, workers=2, work_dir=tmp_path / "run")
    assert report.resumed_shards == len(open_dataset(s3.local).manifest.shards)
    clean(s3.local, tmp_path / "fresh", recipe=recipe, workers=1)
    same_dataset(objects(s3, "out/resume"), files(tmp_path / "fresh"))
    assert not (tmp_path / "run").exists()
