"""The CLI contract: exit codes, one JSON object on stdout with --json, the demo."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def test_ingest_json_is_one_object_on_stdout(corpora: Path, tmp_path: Path):
    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    result = run_cli("ingest", src, "--out", tmp_path / "ds", "--langs", "en-bn", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)  # exactly one JSON document, nothing else
    assert data["rows"] == 4387 and data["langs"] == ["en", "bn"] and data["kind"] == "parallel"


def test_info_json_describes_the_dataset(corpora: Path, tmp_path: Path):
    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-rows", "1000")
    result = run_cli("info", tmp_path / "ds", "--json", "--samples", "2")
    data = json.loads(result.stdout)
    assert (data["rows"], data["shards"], data["kind"]) == (4387, 5, "parallel")
    assert len(data["samples"]) == 2 and data["samples"][0]["id"] == 0
    assert data["lineage"]["stage"] == "ingest"
    human = run_cli("info", tmp_path / "ds")
    assert human.exit_code == 0 and "4,387" in human.stdout


def test_info_random_samples_are_seeded_spread_and_distinct(corpora: Path, tmp_path: Path):
    """``--random``: what a person reads to judge a clean run (100 kept, 100 rejected)."""
    src = corpora / "parallel/tatoeba_manythings_eng-ben.tsv"
    run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-rows", "1000")

    def ids(*extra: str) -> list[int]:
        result = run_cli("info", tmp_path / "ds", "--json", "--samples", "100", *extra)
        return [row["id"] for row in json.loads(result.stdout)["samples"]]

    drawn = ids("--random", "--seed", "7")
    assert drawn == ids("--random", "--seed", "7") != ids("--random", "--seed", "8")
    assert len(set(drawn)) == 100 and drawn == sorted(drawn)
    assert max(drawn) > 3000 and drawn != list(range(100))  # from every shard, not the head
    assert ids() == list(range(100))


def test_mono_with_lang(corpora: Path, tmp_path: Path):
    src = corpora / "mono/ben_wiki_sipc.txt.gz"
    result = run_cli("ingest", src, "--out", tmp_path / "ds", "--lang", "bn", "--json")
    assert json.loads(result.stdout)["kind"] == "mono"


def test_bad_usage_exits_2(tmp_path: Path):
    assert run_cli("ingest", "--out", tmp_path / "ds").exit_code == 2  # no input
    src = tmp_path / "c.tsv"
    src.write_bytes(b"a\tb\n")
    both = run_cli("ingest", src, "--out", tmp_path / "ds", "--langs", "en-de", "--lang", "en")
    assert both.exit_code == 2 and "not both" in both.stderr
    bad_langs = run_cli("ingest", src, "--out", tmp_path / "ds", "--langs", "english")
    assert bad_langs.exit_code == 2 and "SRC-TGT" in bad_langs.stderr
    bad_size = run_cli("ingest", src, "--out", tmp_path / "ds", "--shard-bytes", "lots")
    assert bad_size.exit_code == 2


def test_demo_runs_end_to_end(tmp_path: Path):
    result = run_cli("demo", "--out", tmp_path / "demo", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    tatoeba = data["datasets"]["tatoeba-eng-cmn"]
    opennmt = data["datasets"]["opennmt-en-de"]
    assert tatoeba["verified"] and opennmt["verified"]
    assert tatoeba["rows"] == 2000 and tatoeba["sample"]["src"]
    assert opennmt["first_reject"]["reason"] == "empty_field"
    assert opennmt["first_reject"]["origin"]["line"] == 5
    for dataset in (tatoeba, opennmt):
        assert dataset["clean"]["verified"]
        assert dataset["clean"]["rows_kept"] + dataset["clean"]["rows_rejected"] == \
            dataset["rows"]
    human = run_cli("demo", "--out", tmp_path / "demo2")
    assert human.exit_code == 0 and "verify: ok" in human.stdout
    again = run_cli("demo", "--out", tmp_path / "demo2", "--json")  # its own outputs: replaced
    assert again.exit_code == 0, again.stderr


def test_demo_does_not_write_among_a_users_files(tmp_path: Path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = run_cli("demo", "--out", mine)
    assert result.exit_code == 1 and "holds files of its own (notes.txt)" in result.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    result = run_cli("demo", "--out", tmp_path / "file" / "sub")
    assert result.exit_code == 1 and "unexpected" not in result.stderr


def test_version():
    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout.startswith("spr-data ")
