"""Manifests are cross-checked against the shards they name, before anything is allocated by
their numbers, and every command that reads one refuses a tampered one with exit 2 and one
line that names the file (no traceback, no MemoryError, no hang).

On a real corpus: Tatoeba eng-ben (4,387 pairs) in one shard.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spr_data.dataset import open_dataset
from spr_data.errors import DatasetError
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.ingest import ingest
from tests.conftest import run_cli

Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def eng_ben(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eb") / "ds"
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], out, langs=["en", "bn"])
    return out


@pytest.fixture
def copy(eng_ben: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(eng_ben, target)
    return target


def _tamper(ds: Path, change: Callable[[Manifest], Manifest | str]) -> None:
    path = ds / "manifest.json"
    changed = change(json.loads(path.read_text()))
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))


def _shard0(m: Manifest, **fields: Any) -> Manifest:
    return {**m, "shards": [{**m["shards"][0], **fields}, *m["shards"][1:]]}


def _rows(m: Manifest, rows: int) -> Manifest:
    return {**_shard0(m, rows=rows), "rows": rows}


def _forged_sizes(m: Manifest, rows: int, size: int) -> Manifest:
    """rows and bytes of shard 0 (and the counts that follow them) forged together."""
    return {**_shard0(m, rows=rows, bytes=size), "rows": rows, "rows_in": rows,
            "id_bound": rows}


def _parent(m: Manifest, parent: Any) -> Manifest:
    return {**m, "lineage": {**m["lineage"], "stage": "clean", "parent": parent}}


# (change, words the one-line error must hold); each is refused by every command below
TAMPERED: dict[str, tuple[Callable[[Manifest], Manifest | str], str]] = {
    # rows + rejects no longer rows_in: every command refuses the manifest (a shard dropped
    # from it, its counts lowered, read as a smaller corpus by clean, tokenize, the iterator)
    "rows too few (10 of 4,387)": (lambda m: _rows(m, 10), "4,377 are unaccounted for"),
    "rows too few, rows_in too (10 of 4,387)": (
        lambda m: {**_rows(m, 10), "rows_in": m["rows_in"] - 4377}, "holds 4,387 rows"),
    "rows 10**18": (lambda m: {**_rows(m, 10**18), "rows_in": 10**18, "id_bound": 10**18},
                    "more than a file of"),
    # consistent with each other, so only the file's real size tells them forged
    "rows 10**17 and bytes 2**62": (lambda m: _forged_sizes(m, 10**17, 2**62),
                                    "its manifest says 4,611,686,018,427,387,904"),
    "empty hash": (lambda m: _shard0(m, hash=""), "hash should be"),
    "hash of the wrong form": (lambda m: _shard0(m, hash="md5:abc"), "hash should be"),
    "nested brackets": (lambda m: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "a shard named like the rejects dir": (lambda m: _shard0(m, file=REJECTS_DIR),
                                           "plain file name"),
    "a shard named 'rejects'": (lambda m: _shard0(m, file="rejects"), "not a file"),
    "a NUL in a shard name": (lambda m: _shard0(m, file="shard\x00.arrow"), "plain file name"),
    "a shard listed twice": (lambda m: {**m, "shards": m["shards"] * 2,
                                        "rows": 2 * m["rows"]}, "listed once"),
}

#: found only in the shards themselves: what verify and audit report (exit 1), as these words
SHARD_LEVEL = {"rows too few, rows_in too (10 of 4,387)": "4387 rows, manifest says 10",
               "a shard named 'rejects'": "missing",
               "rows 10**17 and bytes 2**62": "bytes, manifest says 4611686018427387904"}


@pytest.mark.parametrize("case", TAMPERED)
@pytest.mark.parametrize("command", ["info", "verify", "audit", "clean", "tokenize"])
def test_a_tampered_manifest_is_refused_with_one_line(copy: Path, tmp_path: Path,
                                                      corpora: Path, case: str, command: str):
    change, words = TAMPERED[case]
    if case == "a shard named 'rejects'":
        (copy / "rejects").mkdir()  # what an old layout's rejects directory looks like
    _tamper(copy, change)
    args: list[object] = [command, copy]
    if command == "clean":
        args += ["--out", tmp_path / "out", "--workers", "1"]
    if command == "tokenize":
        args += ["--out", tmp_path / "out", "--tokenizer",
                 corpora / "tokenizers/llama2_tokenizer.model", "--workers", "1"]
    result = _run_bounded(args) if case in BOUNDED else _run_here(args)
    if command in ("verify", "audit") and case in SHARD_LEVEL:
        # what verify and audit are for: the mismatch is their finding (exit 1), one line
        assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
        assert SHARD_LEVEL[case] in result.stderr + result.stdout
        return
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    [line] = result.stderr.strip().splitlines()
    assert words in line and "unexpected" not in line
    assert str(copy) in line  # names the file
    assert not (tmp_path / "out").exists()  # refused before any output was made


#: cases that once allocated by the manifest's numbers or never ended: run in a bounded process
BOUNDED = {"rows 10**18", "nested brackets", "rows 10**17 and bytes 2**62"}


def _run_here(args: list[object]) -> subprocess.CompletedProcess[str]:
    result = run_cli(*args)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _run_bounded(args: list[object]) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of at most 3 GiB of address space and 120 s: a refusal that
    allocates by the manifest's numbers first, or never ends, fails here."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-m", "spr_data.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120, preexec_fn=limit)


def test_a_shard_of_another_schema_is_refused_by_clean(copy: Path, tmp_path: Path,
                                                       corpora: Path):
    """A valid Arrow file in place of a shard, with its hash and size put in the manifest:
    only its footer shows it is not this dataset's."""
    shard = _swap_in_another_schema(copy)
    for command in ("clean", "tokenize"):
        extra = (["--tokenizer", corpora / "tokenizers/llama2_tokenizer.model"]
                 if command == "tokenize" else [])
        result = run_cli(command, copy, "--out", tmp_path / command, "--workers", "1", *extra)
        assert result.exit_code == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert "has columns id, text" in line and str(shard) in line


def test_audit_replay_does_not_allocate_by_forged_rows(copy: Path):
    """rows = 10**9 with bytes to match: the epoch replay (8 bytes a row: 7.45 GiB) is refused
    by the shard's real size, and the other checks fail on it too — a report, not a
    MemoryError, in a process of 3 GiB."""
    _tamper(copy, lambda m: _forged_sizes(m, 10**9, 2**40))
    result = _run_bounded(["audit", copy, "--batch-size", "8", "--json"])
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert "unexpected" not in result.stderr and not report["ok"]
    [problem] = report["epoch_replay"]["problems"]
    assert "its manifest says 1,099,511,627,776" in problem and str(copy) in problem


@pytest.mark.parametrize("command", ["info", "verify", "audit", "clean"])
def test_forged_sizes_over_http_are_refused_before_allocating(copy: Path, tmp_path: Path,
                                                             command: str):
    """The same forgery served over HTTP: every buffer a manifest sizes is checked against the
    server's Content-Length first. Messages name the shard by its URL."""
    from spr_data.testing import serve_directory

    _tamper(copy, lambda m: _forged_sizes(m, 10**17, 2**62))
    shard = json.loads((copy / "manifest.json").read_text())["shards"][0]["file"]
    with serve_directory(copy.parent) as server:
        url = f"{server.url}/{copy.name}"
        args: list[object] = [command, url]
        if command == "clean":
            args += ["--out", tmp_path / "out", "--workers", "1"]
        result = _run_bounded(args)
    output = result.stdout + result.stderr
    assert "unexpected" not in output and "MemoryError" not in output, output[-2000:]
    assert f"{url}/{shard}" in output and "http:/1" not in output  # a URL, not a Path
    assert "its manifest says 4,611,686,018,427,387,904" in output
    if command in ("verify", "audit"):  # their finding: exit 1
        assert result.returncode == 1, output[-2000:]
        return
    assert result.returncode == 2, output[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["info", "fertility-report", "train-tokenizer", "audit"])
def test_a_shard_of_another_schema_is_one_line_everywhere(copy: Path, tmp_path: Path,
                                                         command: str):
    """Not pyarrow's schema text (a line per column): names and types on one line."""
    _swap_in_another_schema(copy)
    args: list[object] = {
        "info": ["info", copy],
        "fertility-report": ["fertility-report", copy, "-t", "bytes"],
        "train-tokenizer": ["train-tokenizer", copy, "--out", tmp_path / "tok", "--kind",
                            "bpe", "--vocab-size", "500"],
        "audit": ["audit", copy, "--json"],
    }[command]
    result = run_cli(*args)
    if command == "audit":
        assert result.exit_code == 1
        problems = [p for check in json.loads(result.stdout).values()
                    if isinstance(check, dict) for p in check.get("problems", [])]
        assert any("has columns id, text (uint64, string)" in p for p in problems), problems
        assert not [p for p in problems if "\n" in p]
        return
    assert result.exit_code == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "has columns id, text (uint64, string), its manifest says id, src, tgt" in line
    assert str(copy) in line


def _swap_in_another_schema(ds: Path) -> Path:
    """A valid Arrow file in place of shard 0, its hash and size put in the manifest: only its
    footer shows it is not this dataset's."""
    from spr_data.fsio import sha256_file

    m = json.loads((ds / "manifest.json").read_text())
    shard = ds / m["shards"][0]["file"]
    table = pa.table({"id": pa.array(range(m["rows"]), pa.uint64()),
                      "text": pa.array(["another dataset's row"] * m["rows"])})
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    _tamper(ds, lambda m: _shard0(m, hash=sha256_file(shard), bytes=shard.stat().st_size))
    return shard


def test_a_lineage_that_loops_ends_audit(copy: Path):
    _tamper(copy, lambda m: _parent(m, {"path": str(copy)}))
    result = run_cli("audit", copy, "--json")
    assert result.exit_code != 0
    assert "comes back to it (a loop)" in result.stdout


def test_info_reads_a_lineage_parent_without_rows(copy: Path):
    """info describes a lineage as recorded (a count it lacks is "?"; the ValueError of
    formatting it was the bug); audit is the command that checks a lineage."""
    _tamper(copy, lambda m: _parent(m, {"path": "/somewhere"}))
    result = run_cli("info", copy)
    assert result.exit_code == 0 and "(? rows)" in result.stdout


def test_an_opened_dataset_notices_it_was_replaced(corpora: Path, tmp_path: Path):
    """A reader that opened a dataset before ``ingest --overwrite`` replaced it raises when it
    next maps a shard, instead of returning the new rows under the old manifest."""
    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    out = tmp_path / "ds"
    ingest([src], out, langs=["en", "bn"], shard_rows=1000)
    ds = open_dataset(out)
    first = ds[0]
    ingest([src], out, langs=["en", "bn"], shard_rows=700, overwrite=True)
    assert ds[0] == first  # the shard mapped before: still the old file, consistently
    with pytest.raises(DatasetError, match="was replaced since it was opened"):
        ds[len(ds) - 1]
    assert open_dataset(out)[len(ds) - 1]["id"] == len(ds) - 1


def test_a_dataset_replaced_on_the_server_is_reported_replaced_not_corrupt(corpora: Path,
                                                                          tmp_path: Path):
    """Over HTTP the manifest is not a file to stat: a shard that no longer matches makes
    the reader fetch the manifest again, and a new one means the dataset was replaced."""
    from spr_data.reader import RetryPolicy
    from spr_data.testing import serve_directory

    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    out = tmp_path / "ds"
    ingest([src], out, langs=["en", "bn"], shard_rows=1000)
    with serve_directory(tmp_path) as server:
        ds = open_dataset(f"{server.url}/ds", retry=RetryPolicy(attempts=3, base_delay=0.001))
        ds[0]
        ingest([src], out, langs=["en", "bn"], shard_rows=700, overwrite=True)
        with pytest.raises(DatasetError, match="was replaced since it was opened") as info:
            ds[len(ds) - 1]
        assert "corrupt" not in str(info.value)


@pytest.mark.parametrize("last_id", ["a repeat", "past id_bound"])
def test_a_shard_rewritten_with_a_bad_id_is_refused_by_clean(copy: Path, tmp_path: Path,
                                                            last_id: str):
    """A shard rewritten with its last row's id changed — to the first row's (a row that
    would be seen twice an epoch) or past the dataset's id_bound — its hash and size put in
    the manifest: the ids of each unit's input and output agree, so only the ids themselves
    show it. clean publishes nothing and names the id (exit 2), as verify does."""
    from spr_data.fsio import sha256_file

    m = json.loads((copy / "manifest.json").read_text())
    shard = copy / m["shards"][0]["file"]
    with pa.OSFile(str(shard)) as source:  # read into memory: the file is rewritten below
        table = pa.ipc.open_file(source).read_all()
    ids = table.column("id").to_pylist()
    ids[-1] = ids[0] if last_id == "a repeat" else m["id_bound"] + 5
    table = table.set_column(table.schema.get_field_index("id"), table.schema.field("id"),
                             pa.array(ids, table.schema.field("id").type))
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    _tamper(copy, lambda m: _shard0(m, hash=sha256_file(shard), bytes=shard.stat().st_size))
    said = ("more than once" if last_id == "a repeat"
            else f"is outside 0..{m['id_bound'] - 1}")
    assert said in " ".join(run_cli("verify", copy).stderr.split() +
                            run_cli("verify", copy).stdout.split())
    result = run_cli("clean", copy, "--out", tmp_path / "out", "--workers", "1")
    message = " ".join(result.stderr.split())
    assert result.exit_code == 2 and said in message and "the dataset is damaged" in message
    assert "Traceback" not in message and not (tmp_path / "out" / "manifest.json").exists()
