"""``spr-data audit`` catches the 2,000-pair bug, from the data side and from the loader side."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from spr_data import IdsRecorder, audit_dataset, ingest, open_dataset
from spr_data.errors import DatasetError, InputError
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import clean
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def multi30k(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("audit")
    base = corpora / "parallel/multi30k"
    ingest([base / "train.en.gz", base / "train.de.gz"], root / "ds", shard_rows=5000)
    return root / "ds"


def buggy_loader(ds_path: Path) -> list[int]:
    """The 2,000-pair bug: each shard sliced to its first 2,000 pairs."""
    ds = open_dataset(ds_path)
    ids: list[int] = []
    start = 0
    for shard in ds.manifest.shards:
        ids += ds.take(np.arange(start, start + min(2000, shard.rows))).column("id").to_pylist()
        start += shard.rows
    return ids


def test_a_full_epoch_of_every_row_passes(multi30k: Path, tmp_path: Path):
    ds = open_dataset(multi30k)
    order = np.random.default_rng(0).permutation(len(ds))
    with IdsRecorder(tmp_path / "ids.log") as rec:
        for _ in range(2):
            rec.next_epoch()
            for chunk in np.array_split(order, 50):
                rec.record(ds.take(chunk).column("id").to_numpy())
    report = audit_dataset(multi30k, ids_log=tmp_path / "ids.log")
    assert report.ok, report.to_json()
    assert [e["distinct_rows"] for e in report.checks["ids_log"]["epochs"]] == [29000, 29000]
    assert report.checks["content"]["distinct_content"] > 28900


def test_a_resumed_run_continues_its_ids_log(multi30k: Path, tmp_path: Path):
    """Killed 7 batches after its checkpoint, then resumed from it: the log holds each row
    once an epoch (the 7 batches logged after the checkpoint are cut off, and the resumed
    epoch gets no second header)."""
    ds = open_dataset(multi30k)
    chunks = [np.array_split(np.random.default_rng(e).permutation(len(ds)), 50)
              for e in range(2)]

    def ids(rows: np.ndarray) -> np.ndarray:
        return ds.take(rows).column("id").to_numpy()

    log = tmp_path / "ids.log"
    with IdsRecorder(log) as rec:
        rec.next_epoch()
        for k, chunk in enumerate(chunks[0][:27]):
            rec.record(ids(chunk))
            if k == 19:
                saved = rec.state_dict()  # with the checkpoint, after 20 batches
    with IdsRecorder(log, state=saved) as rec:
        for epoch in range(2):
            rec.next_epoch()
            for chunk in chunks[epoch][20 if epoch == 0 else 0:]:
                rec.record(ids(chunk))
    report = audit_dataset(multi30k, ids_log=log)
    assert report.ok, report.to_json()
    epochs = report.checks["ids_log"]["epochs"]
    assert [(e["distinct_rows"], e["repeats"]) for e in epochs] == [(29000, 0), (29000, 0)]
    log.write_text("# epoch 0\n1\n")  # another run's log, shorter than the state says
    with pytest.raises(InputError, match="fewer than the"):
        IdsRecorder(log, state=saved)


def test_an_ids_log_of_spr_datas_loader_passes_with_its_settings(multi30k: Path,
                                                                 tmp_path: Path):
    """A fixed batch size drops the epoch's remainder by design (29,000 rows, 64 a batch: 8
    missed); with the loader's settings given, the log's epochs are judged against what they
    drop, as the replay is; without them, every row is still asked for."""
    pytest.importorskip("torch")
    from spr_data.pipeline.torch_data import SprIterableDataset

    loader = SprIterableDataset(multi30k, batch_size=64, columns=[])
    with IdsRecorder(tmp_path / "ids.log") as rec:
        for epoch in range(2):
            rec.next_epoch()
            loader.set_epoch(epoch)
            for batch in loader:
                rec.record(batch["ids"].numpy())
    given = run_cli("audit", multi30k, "--ids-log", tmp_path / "ids.log", "--batch-size", "64",
                    "--epochs", "2", "--json")
    assert given.exit_code == 0, given.stdout
    epochs = json.loads(given.stdout)["ids_log"]["epochs"]
    assert [(e["missed"], e["dropped_by_design"]) for e in epochs] == [(8, 8), (8, 8)]
    strict = run_cli("audit", multi30k, "--ids-log", tmp_path / "ids.log", "--json")
    assert strict.exit_code == 1 and json.loads(strict.stdout)["ids_log"]["ok"] is False


def test_each_ranks_ids_log_is_checked_together(multi30k: Path, tmp_path: Path):
    """Under DDP each rank logs its own share: the logs given together make the epoch; one
    alone misses the other's rows; logs of different epoch counts are refused."""
    pytest.importorskip("torch")
    from spr_data.pipeline.torch_data import SprIterableDataset

    logs = []
    for rank in range(2):
        loader = SprIterableDataset(multi30k, batch_size=64, columns=[], world_size=2,
                                    rank=rank)
        logs.append(tmp_path / f"ids_rank{rank}.log")
        with IdsRecorder(logs[-1]) as rec:
            for epoch in range(2):
                rec.next_epoch()
                loader.set_epoch(epoch)
                for batch in loader:
                    rec.record(batch["ids"].numpy())
    settings = ["--world-size", "2", "--batch-size", "64", "--epochs", "2", "--json"]
    both = run_cli("audit", multi30k, "--ids-log", logs[0], "--ids-log", logs[1], *settings)
    assert both.exit_code == 0, both.stdout
    assert [e["seen"] for e in json.loads(both.stdout)["ids_log"]["epochs"]] == [28928] * 2
    one = run_cli("audit", multi30k, "--ids-log", logs[0], *settings)
    assert one.exit_code == 1 and json.loads(one.stdout)["ids_log"]["ok"] is False
    assert "give each rank's --ids-log" in json.loads(one.stdout)["ids_log"]["problems"][0]
    again = run_cli("audit", multi30k, "--ids-log", logs[0], "--ids-log", logs[0], *settings)
    assert again.exit_code == 2 and "is given twice" in again.stderr
    (tmp_path / "short.log").write_text("# epoch 0\n1\n2\n")
    mixed = run_cli("audit", multi30k, "--ids-log", logs[0], "--ids-log", tmp_path / "short.log")
    assert mixed.exit_code == 2 and "holds 1 epoch(s)" in mixed.stderr


def test_the_sliced_loader_fails_on_its_ids_log(multi30k: Path, tmp_path: Path):
    ids = buggy_loader(multi30k)
    log = tmp_path / "ids.log"
    log.write_text("".join(f"{i}\n" for i in ids))
    result = run_cli("audit", multi30k, "--ids-log", log, "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["ids_log"]["ok"] is False
    epoch = data["ids_log"]["epochs"][0]
    assert epoch["distinct_rows"] == len(set(ids)) == 6 * 2000  # 6 shards of 5,000 (and 4,000)
    assert epoch["missed"] == 29000 - 12000


def test_repeated_ids_in_an_npy_log_fail(multi30k: Path, tmp_path: Path):
    ids = np.array(buggy_loader(multi30k)[:2000] * 14 + list(range(29000))[:1000])
    np.save(tmp_path / "ids.npy", ids)
    epoch = audit_dataset(multi30k, ids_log=tmp_path / "ids.npy").checks["ids_log"]["epochs"][0]
    assert epoch["repeats"] > 20000 and not epoch["ok"]


def test_data_that_repeats_2000_pairs_fails_on_content(corpora: Path, tmp_path: Path):
    """The buggy script's output: the first 2,000 pairs, repeated to the original length."""
    base = corpora / "parallel/multi30k"
    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    (tmp_path / "bug.en").write_text("\n".join((en[:2000] * 15)[:29000]) + "\n")
    (tmp_path / "bug.de").write_text("\n".join((de[:2000] * 15)[:29000]) + "\n")
    ingest([tmp_path / "bug.en", tmp_path / "bug.de"], tmp_path / "bug")
    report = audit_dataset(tmp_path / "bug")
    assert report.checks["integrity"]["ok"] and report.checks["accounting"]["ok"]
    assert not report.checks["content"]["ok"]  # ids are fine; the content is not
    assert report.checks["content"]["distinct_content"] == 2000
    result = run_cli("audit", tmp_path / "bug")
    assert result.exit_code == 1 and "2,000 distinct" in result.stdout


def test_accounting_follows_the_lineage_through_clean(multi30k: Path, tmp_path: Path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "rules", "dedup"]\n')
    clean(multi30k, tmp_path / "clean", recipe=recipe, workers=1)
    report = audit_dataset(tmp_path / "clean")
    stages = report.checks["accounting"]["stages"]
    assert [s["stage"] for s in stages] == ["clean", "ingest"] and report.ok
    assert stages[0]["kept"] + stages[0]["rejected"] == stages[0]["rows_in"] == 29000
    # a row deleted from the cleaned output (shard and manifest rewritten to match) is caught
    import pyarrow as pa

    from spr_data.fsio import sha256_file

    shard = tmp_path / "clean/shard-00000.arrow"
    # read into memory, not through a memory map: the file is rewritten below
    table = pa.ipc.open_file(pa.BufferReader(shard.read_bytes())).read_all().slice(1)
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table.combine_chunks())
    manifest = json.loads((tmp_path / "clean/manifest.json").read_text())
    manifest["shards"][0].update(rows=table.num_rows, bytes=shard.stat().st_size,
                                 hash=sha256_file(shard), first_id=table.column("id")[0].as_py())
    manifest["rows"] -= 1
    (tmp_path / "clean/manifest.json").write_text(json.dumps(manifest))
    # rows + rejects short of rows_in: the manifest itself is refused, by every command
    with pytest.raises(DatasetError, match="1 are unaccounted for"):
        audit_dataset(tmp_path / "clean")
    manifest["rows_in"] -= 3  # and the other way: more rows and rejects than came in
    (tmp_path / "clean/manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="2 more rows and rejects than records"):
        audit_dataset(tmp_path / "clean")
    manifest["rows_in"] += 3
    manifest["rows_in"] -= 1  # consistent with itself: only the lineage tells
    (tmp_path / "clean/manifest.json").write_text(json.dumps(manifest))
    broken = audit_dataset(tmp_path / "clean")
    assert not broken.checks["accounting"]["ok"]


def test_a_parent_that_is_gone_is_the_one_problem_said(tmp_path: Path):
    """Ingest rejected a row, so the clean's ids are not 0..rows_in; with the parent gone,
    audit said "the id sets differ" of a stage it had no ids to compare with."""
    import shutil

    tsv = tmp_path / "p.en-de.tsv"
    tsv.write_text("".join(f"Two dogs {i}.\tZwei Hunde {i}.\n" if i != 4 else "x\t\n"
                           for i in range(300)), encoding="utf-8")
    ingest([tsv], tmp_path / "raw")
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize"]\n')
    clean(tmp_path / "raw", tmp_path / "clean", recipe=recipe, workers=1)
    shutil.rmtree(tmp_path / "raw")
    accounting = audit_dataset(tmp_path / "clean").checks["accounting"]
    assert not accounting["ok"] and len(accounting["problems"]) == 1
    assert "cannot be opened" in accounting["problems"][0]
    assert accounting["stages"] == [{"stage": "clean", "path": str(tmp_path / "clean"),
                                     "rows_in": 299, "kept": 299, "rejected": 0, "ok": True}]


def test_accounting_follows_a_tree_that_was_moved(corpora: Path, tmp_path: Path):
    """A dataset and the clean made of it, moved together: the lineage's absolute path is
    gone, its path relative to the child still finds the parent (its digest checked)."""
    import shutil

    tree = tmp_path / "tree"
    ingest([corpora / "parallel/multi30k/val.en.gz", corpora / "parallel/multi30k/val.de.gz"],
           tree / "raw")
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "rules", "dedup"]\n')
    clean(tree / "raw", tree / "clean", recipe=recipe, workers=1)
    shutil.move(str(tree), str(tmp_path / "moved"))
    report = audit_dataset(tmp_path / "moved" / "clean")
    stages = report.checks["accounting"]["stages"]
    assert report.ok and [s["stage"] for s in stages] == ["clean", "ingest"]
    assert stages[0]["rows_in"] == 1014


def test_epoch_replay_of_spr_data_order(multi30k: Path):
    from spr_data.pipeline.audit import Replay

    report = audit_dataset(multi30k, replay=Replay(world_size=3, workers=2, batch_size=64,
                                                    seed=1, epochs=2))
    replay = report.checks["epoch_replay"]
    assert replay["ok"], replay["problems"]
    first = replay["epochs"][0]
    assert len(set(first["batches_per_rank"])) == 1
    assert first["distinct_rows"] + first["missed"] == 29000
    assert first["missed"] == first["dropped_by_design"] < 3 * 64
    result = run_cli("audit", multi30k, "--world-size", "2", "--batch-size", "100", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["epoch_replay"]["ok"]
    shown = run_cli("audit", multi30k, "--world-size", "2", "--batch-size", "64")
    # 29,000 rows in steps of 2 x 64: 226 whole steps, the last 72 rows dropped by design
    assert shown.exit_code == 0
    assert "72 missed (72 dropped by design)" in " ".join(shown.stdout.split())


def test_token_budget_replay_matches_what_the_iterator_yields(multi30k: Path, corpora: Path,
                                                              tmp_path: Path):
    from spr_data.pipeline.tokenize import tokenize

    tokenize(multi30k, tmp_path / "tok", workers=1,
             tokenizer=str(corpora / "tokenizers/llama2_tokenizer.model"))
    result = run_cli("audit", tmp_path / "tok", "--world-size", "3", "--workers", "2",
                     "--max-tokens", "1500", "--seed", "5", "--epochs", "2", "--json")
    assert result.exit_code == 0, result.stdout
    replay = json.loads(result.stdout)["epoch_replay"]
    first = replay["epochs"][1]
    assert replay["ok"] and replay["max_tokens"] == 1500
    assert first["distinct_rows"] + first["missed"] == 29000
    torch_data = pytest.importorskip("spr_data.pipeline.torch_data")
    yielded = []
    for rank in range(3):
        ds = torch_data.SprIterableDataset(tmp_path / "tok", max_tokens=1500, seed=5,
                                           world_size=3, rank=rank)
        ds.set_epoch(1)
        batches = list(ds)
        assert len(batches) == first["batches_per_rank"][rank]
        yielded += [i for b in batches for i in b["ids"].tolist()]
    assert len(set(yielded)) == first["distinct_rows"] and len(yielded) == len(set(yielded))
    # a loader with its own window: its ids log passes when audit replays that window
    windowed = [i for rank in range(2) for b in torch_data.SprIterableDataset(
        tmp_path / "tok", max_tokens=1500, seed=5, world_size=2, rank=rank, window=1000)
        for i in b["ids"].tolist()]
    (tmp_path / "ids.log").write_text("".join(f"{i}\n" for i in windowed))
    audit_windowed = ("audit", tmp_path / "tok", "--ids-log", tmp_path / "ids.log",
                      "--world-size", "2", "--max-tokens", "1500", "--seed", "5")
    assert run_cli(*audit_windowed, "--window", "1000").exit_code == 0
    assert run_cli(*audit_windowed).exit_code == 1  # judged against the default window
    no_budget = run_cli("audit", tmp_path / "tok", "--window", "1000", "--batch-size", "8")
    assert no_budget.exit_code == 2 and "give --max-tokens too" in no_budget.stderr
    blocked = run_cli("audit", tmp_path / "tok", "--world-size", "2", "--batch-size", "64",
                      "--block", "4096", "--wrap", "--json")
    epoch = json.loads(blocked.stdout)["epoch_replay"]["epochs"][0]
    assert blocked.exit_code == 0 and epoch["missed"] == 0 and epoch["repeats"] > 0
    text = run_cli("audit", tmp_path / "tok", "--max-tokens", "1500")
    assert text.exit_code == 0 and "batches per rank" in text.stdout
    untokenized = run_cli("audit", multi30k, "--max-tokens", "1500")
    assert untokenized.exit_code == 2 and "spr-data tokenize" in untokenized.stderr


def test_audit_refuses_a_rejects_dataset_and_reports_a_missing_shard(corpora: Path,
                                                                     tmp_path: Path):
    import shutil

    onmt = corpora / "parallel/opennmt_wmt_en-de.train"
    ingest([f"{onmt}.en.gz", f"{onmt}.de.gz"], tmp_path / "ds", shard_rows=3000)
    rejects = run_cli("audit", tmp_path / "ds" / REJECTS_DIR)
    assert rejects.exit_code == 2 and "audit its parent" in rejects.stderr
    shutil.copytree(tmp_path / "ds", tmp_path / "broken")
    (tmp_path / "broken/shard-00001.arrow").unlink()
    broken = run_cli("audit", tmp_path / "broken")
    assert broken.exit_code == 1 and "Traceback" not in broken.stderr + broken.stdout
    assert "FAIL integrity" in broken.stdout and "shard-00001.arrow" in broken.stdout


@pytest.mark.parametrize("name,content,message", [
    ("bin.log", b"\xff\xfe\x00garbage", "not UTF-8"),
    ("big.log", b"1\n99999999999999999999999\n", "out of range"),
    ("order.log", b"# epoch 1\n1\n", "expected '# epoch 0'"),
    ("twice.log", b"# epoch 0\n1\n# epoch 0\n2\n", "expected '# epoch 1'"),
    ("fake.npy", b"1\n2\n", "not a .npy file"),
])
def test_a_malformed_ids_log_is_a_clear_error(multi30k: Path, tmp_path: Path, name: str,
                                              content: bytes, message: str):
    (tmp_path / name).write_bytes(content)
    result = run_cli("audit", multi30k, "--ids-log", tmp_path / name)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_a_float_npy_log_is_refused_and_replay_options_alone_replay(multi30k: Path,
                                                                    tmp_path: Path):
    np.save(tmp_path / "f.npy", np.arange(10) + 0.5)
    floats = run_cli("audit", multi30k, "--ids-log", tmp_path / "f.npy")
    assert floats.exit_code == 2 and "float64" in floats.stderr
    epochs = run_cli("audit", multi30k, "--epochs", "2", "--json")
    assert len(json.loads(epochs.stdout)["epoch_replay"]["epochs"]) == 2


def test_a_configuration_that_reads_nothing_fails(multi30k: Path):
    from spr_data.pipeline.audit import Replay

    report = audit_dataset(multi30k, replay=Replay(world_size=3, batch_size=100_000))
    replay = report.checks["epoch_replay"]
    assert not report.ok and not replay["epochs"][0]["ok"]
    assert "no batch at all" in replay["problems"][0]


def test_accounting_checks_the_parent_is_the_one_recorded(tmp_path: Path, corpora: Path):
    """A parent re-made or changed after its child was cleaned is not the child's parent; and
    a relative parent path works from any working directory."""
    import os
    import shutil

    base = corpora / "parallel/multi30k"
    ingest([base / "train.en.gz", base / "train.de.gz"], tmp_path / "ds", shard_rows=10000)
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "rules"]\n')
    here = os.getcwd()
    os.chdir(tmp_path)
    try:  # recorded as typed by older versions: relative to the working directory
        clean("ds", "clean", recipe=recipe, workers=1)
    finally:
        os.chdir(here)
    lineage = json.loads((tmp_path / "clean/manifest.json").read_text())["lineage"]
    assert Path(lineage["parent"]["path"]).is_absolute()
    manifest = json.loads((tmp_path / "clean/manifest.json").read_text())
    manifest["lineage"]["parent"]["path"] = "ds"  # as older versions wrote it
    (tmp_path / "clean/manifest.json").write_text(json.dumps(manifest))
    assert audit_dataset(tmp_path / "clean").ok
    shutil.rmtree(tmp_path / "ds")  # the parent re-made from other inputs
    ingest([base / "train.de.gz", base / "train.en.gz"], tmp_path / "ds", shard_rows=10000)
    report = audit_dataset(tmp_path / "clean")
    assert not report.ok
    assert any("changed since it was made" in p for p in report.checks["accounting"]["problems"])
