"""``verify`` notices any difference between the shards and the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from spr_data import ingest, verify_dataset
from spr_data.fsio import sha256_file
from tests.conftest import run_cli


def build(tmp_path: Path) -> Path:
    src = tmp_path / "c.tsv"
    src.write_bytes(b"".join(b"s %d\tt %d\n" % (i, i) for i in range(3000)) + b"\n\xff\tx\n")
    ingest([src], tmp_path / "ds", shard_rows=1000)
    return tmp_path / "ds"


def test_a_fresh_dataset_verifies(tmp_path: Path):
    ds = build(tmp_path)
    report = verify_dataset(ds)
    assert report.ok and report.rows == 3000 and report.rejects and report.rejects.rows == 2
    result = run_cli("verify", ds)
    assert result.exit_code == 0 and "ok" in result.stdout


def test_a_flipped_byte_is_named_by_shard(tmp_path: Path):
    ds = build(tmp_path)
    shard = ds / "shard-00001.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    result = run_cli("verify", ds)
    assert result.exit_code == 1
    assert "shard-00001.arrow" in result.stderr and "hash" in result.stderr
    assert "shard-00000" not in result.stderr


def test_missing_and_resized_shards(tmp_path: Path):
    ds = build(tmp_path)
    (ds / "shard-00000.arrow").unlink()
    with open(ds / "shard-00002.arrow", "ab") as f:
        f.write(b"junk")
    report = verify_dataset(ds)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "shard-00000.arrow: missing" in text and "shard-00002.arrow:" in text


def test_a_shard_file_the_manifest_does_not_list_is_named(tmp_path: Path):
    """A stray shard beside the manifest: pyarrow reads its rows as the dataset's, so the
    directory no longer opens as exactly its rows. Its own reject shard dir too; a user's
    notes file is not a shard."""
    import pyarrow.dataset as pds

    ds = build(tmp_path)
    (ds / "shard-00099.arrow").write_bytes((ds / "shard-00001.arrow").read_bytes())
    (ds / "notes.txt").write_text("mine")
    found = pds.dataset(ds, format="ipc", exclude_invalid_files=True)
    assert found.count_rows() == 4000  # what other tools read
    result = run_cli("verify", ds)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1
    assert "shard-00099.arrow: a shard file the manifest does not list" in said
    assert "notes.txt" not in said
    (ds / "shard-00099.arrow").unlink()
    assert run_cli("verify", ds).exit_code == 0


def test_a_shard_that_differs_only_in_nullability_says_so(tmp_path: Path):
    """Same column names and types, one column's nullability flipped (its hash and size put
    in the manifest): the message says what differs, not the same names twice."""
    ds = build(tmp_path)
    shard = ds / "shard-00000.arrow"
    with pa.OSFile(str(shard)) as source:
        table = pa.ipc.open_file(source).read_all()
    fields = [f.with_nullable(not f.nullable) if f.name == "src" else f for f in table.schema]
    table = table.cast(pa.schema(fields, metadata=table.schema.metadata))
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["shards"][0].update(hash=sha256_file(shard), bytes=shard.stat().st_size)
    (ds / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("verify", ds)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "shard-00000.arrow: columns id, src" in said
    assert "differ from the manifest's" in said and "in nullability or metadata" in said


def test_duplicated_ids_break_the_partition(tmp_path: Path):
    """A shard rewritten with another shard's ids (and a matching hash) is still caught."""
    ds = build(tmp_path)
    path = ds / "shard-00001.arrow"
    with pa.memory_map(str(ds / "shard-00000.arrow")) as f:
        first = pa.ipc.open_file(f).read_all()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, first.schema) as w:
        w.write_table(first.combine_chunks())
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["shards"][1].update(bytes=path.stat().st_size, hash=sha256_file(path), first_id=0)
    (ds / "manifest.json").write_text(json.dumps(manifest))
    report = verify_dataset(ds)
    assert not report.ok
    assert any("more than once" in p for p in report.all_problems())


def test_tampered_reject_counts(tmp_path: Path):
    ds = build(tmp_path)
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["rejects"] = {"empty_line": 2}
    (ds / "manifest.json").write_text(json.dumps(manifest))
    report = verify_dataset(ds)
    assert not report.ok and any("rejects" in p for p in report.problems)


def test_verify_json(tmp_path: Path):
    ds = build(tmp_path)
    result = run_cli("verify", ds, "--json")
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["rows"] == 3000 and data["rejects"]["rows"] == 2
    assert (data["manifest_rows"], data["bad_shards"]) == (3000, [])


def test_verify_json_names_the_bad_shard_and_the_rows_the_manifest_lists(tmp_path: Path):
    """``rows`` counts the rows of the shards that passed; with one shard of three corrupt,
    ``manifest_rows`` still says how many the dataset should hold and ``bad_shards`` which
    file failed (before, a script saw ``"rows": 2000`` and nothing else to go on)."""
    ds = build(tmp_path)
    shard = ds / "shard-00001.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    result = run_cli("verify", ds, "--json")
    out = json.loads(result.stdout)
    assert result.exit_code == 1 and out["ok"] is False
    assert (out["rows"], out["manifest_rows"]) == (2000, 3000)
    assert out["bad_shards"] == ["shard-00001.arrow"] and out["rejects"]["bad_shards"] == []


def test_a_hostile_manifest_is_refused_or_checked_without_a_huge_allocation(tmp_path: Path):
    ds = build(tmp_path)
    original = json.loads((ds / "manifest.json").read_text())

    def run_with(**changes: object) -> object:
        (ds / "manifest.json").write_text(json.dumps({**original, **changes}))
        return run_cli("verify", ds)

    for changes, message in [({"id_bound": 10**30}, "< 2**63"), ({"id_bound": 5}, "<= id_bound"),
                             ({"rows_in": 10}, "rows (3000) <= rows_in"),
                             ({"kind": "mono"}, "a mono dataset needs column(s) text")]:
        result = run_with(**changes)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
    # a huge but consistent id range: the ids are checked by sorting, not with a 10 TB bitmap
    assert run_with(id_bound=10**13).exit_code == 0
    # ... and still catch ids that repeat across shards
    with pa.memory_map(str(ds / "shard-00000.arrow")) as f:
        first = pa.ipc.open_file(f).read_all()
    path = ds / "shard-00001.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, first.schema) as w:
        w.write_table(first.combine_chunks())
    shards = [{**s, "hash": sha256_file(path), "bytes": path.stat().st_size,
               "first_id": s["first_id"] if s["file"] != path.name else 0}
              if s["file"] == path.name else s for s in original["shards"]]
    result = run_with(id_bound=10**13, shards=shards)
    assert result.exit_code == 1 and "distinct ids" in result.stderr


def test_a_damaged_shard_header_is_a_clear_error_not_a_crash(tmp_path: Path):
    """A flipped byte in a shard's Arrow metadata (its first kilobyte or so) is found when the
    shard is opened or its batches read: a DatasetError naming the shard and `verify`, never
    pyarrow's own exception (the CLI called that 'unexpected … please report it')."""
    from spr_data import open_dataset
    from spr_data.errors import SprDataError

    ds = build(tmp_path)
    shard = ds / "shard-00000.arrow"
    good = shard.read_bytes()
    caught = 0
    for offset in range(0, 1024, 4):
        damaged = bytearray(good)
        damaged[offset] ^= 0xFF
        shard.write_bytes(bytes(damaged))
        try:
            data = open_dataset(ds)
            data.take([0, 1, 2999])
        except SprDataError as error:
            caught += 1
            assert "shard-00000.arrow" in str(error)
    shard.write_bytes(good)
    assert caught  # some flips land in the metadata
    damaged = bytearray(good)
    damaged[400] ^= 0xFF
    shard.write_bytes(bytes(damaged))
    result = run_cli("info", ds)
    assert "unexpected" not in result.stderr
