"""Datasets and raw inputs on S3, read through pyarrow's S3 client and the retrying reader.

A real S3 server runs on loopback for the module (moto's server mode: the S3 REST API over
HTTP, buckets and objects in memory); a real Tatoeba eng-ben dataset is ingested locally and
its files put into a bucket. Every command that reads a dataset reads it from there, and
what it writes (into a local --out) is byte-identical to the same command on the local copy.
Without moto the module is skipped, unless ``CI=true``: then it fails.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from spr_data import ingest, open_dataset
from spr_data.errors import DatasetError
from spr_data.reader import ArrowFileSystem, ReaderOptions, RetryPolicy
from spr_data.testing import serve_directory
from tests.conftest import run_cli

if os.environ.get("CI", "").lower() == "true":  # CI installs the dev extra: it must run
    from moto import server as moto_server
else:
    moto_server = pytest.importorskip("moto.server",
                                      reason="pip install 'moto[server]' (the dev extra)")

TATOEBA = "parallel/tatoeba_manythings_eng-ben.tsv"
BUCKET = "spr-test"
#: the AWS_* settings the client would otherwise read from this machine (a profile, a real
#: endpoint, the EC2 metadata service): kept out of the tests
_AWS_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN",
            "AWS_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3:
    endpoint: str  # host:port
    client: pafs.S3FileSystem
    local: Path  # the dataset as ingested locally
    raw: Path  # folder of raw inputs (also uploaded under raw/)

    def url(self, key: str, bucket: str = BUCKET) -> str:
        """``s3://bucket/key`` with the endpoint in the URL's query."""
        return f"s3://{bucket}/{key}?endpoint_override={self.endpoint}&scheme=http"

    def upload(self, folder: Path, prefix: str) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.name.startswith(".spr-data"):
                key = f"{BUCKET}/{prefix}/{path.relative_to(folder).as_posix()}"
                with self.client.open_output_stream(key, compression=None) as f:
                    f.write(path.read_bytes())

    def put(self, key: str, data: bytes) -> None:
        with self.client.open_output_stream(f"{BUCKET}/{key}", compression=None) as f:
            f.write(data)

    def enforce_auth(self, on: bool) -> None:
        """Have the server check credentials (moto accepts any by default)."""
        request = urllib.request.Request(
            f"http://{self.endpoint}/moto-api/reset-auth", data=b"0" if on else b"inf",
            headers={"Content-Type": "text/plain"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


def serve_s3(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """The S3 server of a test module (the ``s3`` fixture of ``conftest.py``): started, its
    bucket made, a real dataset and raw corpus put into it; stopped at the end."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    root = tmp_path_factory.mktemp("s3")
    with pytest.MonkeyPatch.context() as env:
        for name in _AWS_ENV:
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        env.setenv("AWS_CONFIG_FILE", str(root / "no-aws-config"))
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(root / "no-aws-credentials"))
        try:
            endpoint = f"127.0.0.1:{port}"
            client = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                                       region="us-east-1", allow_bucket_creation=True)
            client.create_dir(BUCKET)
            raw = root / "raw"
            raw.mkdir()
            (raw / "tatoeba.eng-ben.tsv").write_bytes((corpora / TATOEBA).read_bytes())
            ingest([corpora / TATOEBA], root / "ds", shard_rows=1000)
            s3 = S3(endpoint, client, root / "ds", raw)
            s3.upload(root / "ds", "ds")
            s3.upload(raw, "raw")
            yield s3
        finally:
            server.stop()


def shard_bytes(folder: Path) -> dict[str, bytes]:
    """Every shard of a dataset and of its rejects, by relative name."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("shard-*")) if ".tmp" not in p.name}


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_open_dataset_reads_the_same_rows_as_the_local_copy(s3: S3, tmp_path: Path):
    local = open_dataset(s3.local)
    url = s3.url("ds")
    remote = open_dataset(url)
    assert remote.remote and remote.location == url
    assert remote.manifest.shards == local.manifest.shards and len(local.manifest.shards) > 2
    everything = list(range(len(local)))
    assert remote.take(everything).equals(local.take(everything))
    assert remote[1234] == local[1234]
    assert remote.rejects is not None and local.rejects is not None
    assert remote.rejects.to_pyarrow().equals(local.rejects.to_pyarrow())
    # through a local cache of verified copies: the same rows, in a random order too
    cached = open_dataset(url, cache_dir=tmp_path / "cache")
    order = list(reversed(everything))
    assert cached.take(order).equals(local.take(order))
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == len(local.manifest.shards)


def test_the_endpoint_can_come_from_the_environment(s3: S3, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3.endpoint}")
    ds = open_dataset(f"s3://{BUCKET}/ds")
    assert len(ds) == len(open_dataset(s3.local)) and ds[0] == open_dataset(s3.local)[0]
    result = run_cli("info", f"s3://{BUCKET}/ds", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == len(ds)


def test_info_audit_and_fertility_read_an_s3_dataset(s3: S3, tmp_path: Path):
    url = s3.url("ds")
    info = run_cli("info", url, "--json")
    assert info.exit_code == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["path"] == url and data["rows"] == len(open_dataset(s3.local))
    audit = run_cli("audit", url, "--json")
    assert audit.exit_code == 0, audit.stdout + audit.stderr
    assert json.loads(audit.stdout)["ok"]
    for where, name in ((url, "s3"), (s3.local, "local")):
        report = run_cli("fertility-report", where, "-t", "chars", "--json",
                         tmp_path / f"{name}.json")
        assert report.exit_code == 0, report.stderr
    remote, local = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("s3", "local"))
    assert remote["tokenizers"] == local["tokenizers"]


def test_verify_passes_and_notices_a_corrupted_object(s3: S3, tmp_path: Path):
    ok = run_cli("verify", s3.url("ds"))
    assert ok.exit_code == 0, ok.stderr
    assert "match the manifest" in ok.stdout
    # the same dataset under another prefix, one byte of one shard flipped
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in s3.local.rglob("*"):
        if p.is_file():
            (broken / p.relative_to(s3.local)).parent.mkdir(parents=True, exist_ok=True)
            (broken / p.relative_to(s3.local)).write_bytes(p.read_bytes())
    shard = broken / "shard-00002.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    s3.upload(broken, "broken")
    bad = run_cli("verify", s3.url("broken"), "--retries", "2")
    assert bad.exit_code == 1
    assert "shard-00002.arrow" in bad.stderr and "hash" in bad.stderr
    assert "Traceback" not in bad.stderr
    with pytest.raises(DatasetError, match=r"shard-00002\.arrow"):
        open_dataset(s3.url("broken"), retry=RetryPolicy(attempts=2)).take(range(2000, 3000))


def test_clean_and_tokenize_from_s3_write_the_same_shards_as_from_local(
        s3: S3, corpora: Path, tmp_path: Path):
    from tests.test_clean import NO_ALIGN, recipe_file

    recipe = recipe_file(tmp_path, NO_ALIGN)
    for where, name in ((s3.url("ds"), "s3"), (s3.local, "local")):
        result = run_cli("clean", where, "--out", tmp_path / f"clean-{name}", "--recipe", recipe,
                         "--workers", "1", "--quiet")
        assert result.exit_code == 0, result.stderr
    remote, local = shard_bytes(tmp_path / "clean-s3"), shard_bytes(tmp_path / "clean-local")
    assert remote == local and any(k.startswith("_rejects/") for k in local)
    assert not (tmp_path / "clean-s3/.work").exists()  # the staged copies went with the run
    lineage = json.loads((tmp_path / "clean-s3/manifest.json").read_text())["lineage"]
    assert lineage["parent"]["path"] == s3.url("ds")

    model = corpora / "tokenizers/llama2_tokenizer.model"
    for where, name in ((s3.url("ds"), "s3"), (s3.local, "local")):
        result = run_cli("tokenize", where, "-t", model, "--out", tmp_path / f"tok-{name}",
                         "--workers", "1", "--quiet", "--cache-dir", tmp_path / "cache")
        assert result.exit_code == 0, result.stderr
    assert shard_bytes(tmp_path / "tok-s3") == shard_bytes(tmp_path / "tok-local")
    assert verify_ok(tmp_path / "tok-s3")


def verify_ok(folder: Path) -> bool:
    from spr_data.verify import verify_dataset

    return verify_dataset(folder).ok


def test_train_tokenizer_reads_an_s3_dataset(s3: S3, tmp_path: Path):
    for where, name in ((s3.url("ds"), "s3"), (s3.local, "local")):
        result = run_cli("train-tokenizer", where, "--out", tmp_path / name, "--kind", "bpe",
                         "--vocab-size", "300", "--json")
        assert result.exit_code == 0, result.stderr
    remote, local = (json.loads((tmp_path / n / "training.json").read_text())
                     for n in ("s3", "local"))
    assert remote["segments_fed"] == local["segments_fed"] > 0
    assert (tmp_path / "s3/tokenizer.json").read_bytes() == \
        (tmp_path / "local/tokenizer.json").read_bytes()


def test_the_pytorch_iterators_read_an_s3_dataset_in_their_workers(s3: S3, tmp_path: Path):
    torch_data = pytest.importorskip("spr_data.pipeline.torch_data")
    from torch.utils.data import DataLoader

    def batches(path: str | Path, reader: ReaderOptions | None = None) -> list[list[int]]:
        ds = torch_data.SprIterableDataset(path, batch_size=128, seed=5, columns=["src"],
                                           reader=reader)
        return [[*b["ids"].tolist(), hash(tuple(b["src"]))]
                for b in DataLoader(ds, batch_size=None, num_workers=2, timeout=120)]

    expected = batches(s3.local)
    assert batches(s3.url("ds")) == expected
    assert batches(s3.url("ds"), ReaderOptions(cache_dir=str(tmp_path / "c"))) == expected
    rows = torch_data.SprMapDataset(s3.url("ds"))
    loader = DataLoader(rows, batch_size=500, num_workers=2, timeout=120,
                        collate_fn=lambda r: [x["id"] for x in r])
    assert [i for b in loader for i in b] == \
        open_dataset(s3.local).take(range(len(rows))).column("id").to_pylist()


def test_ingest_reads_raw_inputs_from_s3(s3: S3, corpora: Path, tmp_path: Path):
    url = s3.url("raw/tatoeba.eng-ben.tsv")
    result = run_cli("ingest", url, "--out", tmp_path / "s3", "--shard-rows", "1000", "--quiet")
    assert result.exit_code == 0, result.stderr
    ingest([s3.raw / "tatoeba.eng-ben.tsv"], tmp_path / "local", shard_rows=1000)
    assert shard_bytes(tmp_path / "s3") == shard_bytes(tmp_path / "local")
    manifest = json.loads((tmp_path / "s3/manifest.json").read_text())
    assert manifest["langs"] == ["eng", "ben"]  # from the key's name, as from a file's
    source = manifest["lineage"]["inputs"][0]["files"][0]
    assert source["path"] == url and source["bytes"] == (s3.raw / "tatoeba.eng-ben.tsv").stat(
        ).st_size
    # a Parquet input is read through the retrying reader too (not mapped)
    import pyarrow.parquet as pq

    table = pa.table({"en": ["Go.", "Hi.", "Run!"], "bn": ["যাও।", "নমস্কার!", "দৌড়াও!"]})
    pq.write_table(table, tmp_path / "pairs.en-bn.parquet")
    s3.put("raw/pairs.en-bn.parquet", (tmp_path / "pairs.en-bn.parquet").read_bytes())
    ingest([s3.url("raw/pairs.en-bn.parquet")], tmp_path / "pq-s3")
    ingest([tmp_path / "pairs.en-bn.parquet"], tmp_path / "pq-local")
    assert shard_bytes(tmp_path / "pq-s3") == shard_bytes(tmp_path / "pq-local")
    # a gzipped Moses pair: the languages from the keys' names, decompressed as it is read
    flickr = [corpora / f"parallel/multi30k/test_2016_flickr.{lang}.gz" for lang in ("en", "de")]
    for path in flickr:
        s3.put(f"raw/{path.name}", path.read_bytes())
    ingest([s3.url(f"raw/{p.name}") for p in flickr], tmp_path / "moses-s3")
    ingest(flickr, tmp_path / "moses-local")
    assert shard_bytes(tmp_path / "moses-s3") == shard_bytes(tmp_path / "moses-local")
    assert open_dataset(tmp_path / "moses-s3").langs == ["en", "de"]
    missing = run_cli("ingest", s3.url("raw/nothing.tsv"), "--out", tmp_path / "none")
    assert missing.exit_code == 2
    assert "raw/nothing.tsv" in one_line(missing.stderr)
    assert not (tmp_path / "none").exists()


def test_transient_s3_faults_are_retried_by_the_reader(s3: S3, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture):
    """The flaky loopback server answers path-style S3 reads (GET and HEAD of
    ``/bucket/key``, with ranges), dropping connections, truncating bodies and answering 503
    at random: pyarrow's S3 client reads through it, and what its own retries do not absorb
    the retrying reader does."""
    from spr_data.verify import verify_dataset

    root = tmp_path / "served"
    ingest([s3.raw / "tatoeba.eng-ben.tsv"], root / BUCKET / "ds", shard_rows=250)
    local = open_dataset(root / BUCKET / "ds")
    everything = list(range(len(local)))
    fast = RetryPolicy(attempts=40, base_delay=0.001, max_delay=0.01, deadline=60)
    with serve_directory(root, rate=0.3, seed=3) as server:
        endpoint = f"127.0.0.1:{server.server_address[1]}"
        url = f"s3://{BUCKET}/ds?endpoint_override={endpoint}&scheme=http"
        assert open_dataset(url, retry=fast).take(everything).equals(local.take(everything))
        # a client that never retries by itself: every fault reaches the retrying reader
        client = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                                   region="us-east-1",
                                   retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
        reader = ReaderOptions(filesystem=ArrowFileSystem(client), retry=fast)
        with caplog.at_level(logging.WARNING, logger="spr_data.reader"):
            ds = open_dataset(f"s3://{BUCKET}/ds", reader=reader)
            assert ds.take(everything).equals(local.take(everything))
            assert verify_dataset(f"{BUCKET}/ds", reader=reader).ok  # a path of the client
    assert sum(server.injected.values()) >= 10
    retried = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    assert len(retried) >= 5 and all(f"{BUCKET}/ds/" in m for m in retried)


def test_a_missing_key_or_bucket_is_one_clear_line(s3: S3):
    for args in (("info",), ("verify",), ("audit",)):
        missing = run_cli(*args, s3.url("no-such-dataset"))
        assert missing.exit_code == 2, missing.stderr
        line = one_line(missing.stderr)
        assert s3.url("no-such-dataset") in line and "no such object" in line
    gone = run_cli("info", s3.url("ds", bucket="no-such-bucket"))
    assert gone.exit_code == 2
    assert "no bucket 'no-such-bucket'" in one_line(gone.stderr)
    with pytest.raises(DatasetError, match="not a readable spr-data dataset"):
        open_dataset(s3.url("no-such-dataset"))


def test_bad_credentials_are_one_clear_line(s3: S3, monkeypatch: pytest.MonkeyPatch):
    s3.enforce_auth(True)
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
        result = run_cli("info", s3.url("ds"))
    finally:
        s3.enforce_auth(False)
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert s3.url("ds") in line and "access denied" in line and "AWS_ACCESS_KEY_ID" in line


def test_an_endpoint_nobody_listens_on_fails_at_once(s3: S3):
    port = _free_port()
    result = run_cli("verify", f"s3://{BUCKET}/ds?endpoint_override=127.0.0.1:{port}&scheme=http")
    assert result.exit_code == 1
    line = one_line(result.stderr)  # the object it tried first: the dataset's manifest
    assert f"s3://{BUCKET}/ds/manifest.json?endpoint_override=127.0.0.1:{port}" in line
    assert "cannot reach the endpoint" in line
    assert "attempts failed" not in line  # not retried for minutes: nobody is there


def test_credentials_in_the_url_are_refused_without_echoing_them(s3: S3):
    result = run_cli("info", f"s3://AKIAX:sup3rs3cret@{BUCKET}/ds")
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert "sup3rs3cret" not in line and "AWS_ACCESS_KEY_ID" in line


@pytest.mark.parametrize("command", [
    ["train-tokenizer", "{ds}", "--kind", "bpe", "--vocab-size", "300"],
    ["demo"],
])
def test_an_s3_out_is_refused_with_the_way_out(command: list[str], s3: S3, corpora: Path,
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Commands whose output is not a dataset (a tokenizer, the demo's folder) write to a
    directory only; ``ingest``, ``clean`` and ``tokenize`` upload (``test_s3_output.py``)."""
    monkeypatch.chdir(tmp_path)  # an s3://… taken for a path would make ./s3:/… here
    values = {"tsv": str(s3.raw / "tatoeba.eng-ben.tsv"), "ds": s3.url("ds"),
              "model": str(corpora / "tokenizers/llama2_tokenizer.model")}
    args = [a.format(**values) for a in command]
    result = run_cli(*args, "--out", f"s3://{BUCKET}/out")
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert f"s3://{BUCKET}/out" in line and "not supported" in line and "aws s3 sync" in line
    assert list(tmp_path.iterdir()) == []


def test_fertility_report_files_cannot_be_urls(s3: S3, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    for option in ("--json", "--markdown", "--chart"):
        result = run_cli("fertility-report", s3.url("ds"), "-t", "chars", option,
                         f"s3://{BUCKET}/report")
        assert result.exit_code == 2
        assert "not supported" in one_line(result.stderr)
    assert list(tmp_path.iterdir()) == []
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
