"""An overwrite replaces a dataset only once the new one is ready: a run that fails, is
refused or is killed leaves the old dataset where it was, whole and readable, and a killed or
refused run still resumes (without ``--overwrite``) to the bytes of a run never stopped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from spr_data import ingest, open_dataset, verify_dataset
from spr_data.errors import DataLossError
from spr_data.lock import LOCK_NAME
from spr_data.manifest import MANIFEST_NAME
from spr_data.outdir import REJECTS_DIR, WORK_DIR
from spr_data.pipeline.clean import clean
from tests.conftest import run_cli, sigkill_clean_midway

NO_ALIGN = 'stages = ["normalize", "rules", "langid", "dedup"]\n'
RULES_ONLY = 'stages = ["normalize", "rules"]\n'


def _recipe(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _files(out: Path) -> dict[str, bytes]:
    """Every file under ``out``, by its path there."""
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for p in sorted(out.rglob("*")) if p.is_file()}


def _same_dataset(out: Path, fresh: Path) -> bool:
    """The same files, and the same shard bytes (manifests and reports hold times and paths)."""
    a, b = _files(out), _files(fresh)
    return set(a) == set(b) and all(a[k] == b[k] for k in a if k.endswith(".arrow"))


@pytest.fixture(scope="module")
def multi30k_as(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """3,000 Multi30k pairs ingested as en–de, and as en–fr (a typo'd target language)."""
    root = tmp_path_factory.mktemp("m30k-3000")
    base = corpora / "parallel/multi30k"
    sides = [root / "pairs.src", root / "pairs.tgt"]  # names that say no language
    for lang, side in zip(("en", "de"), sides, strict=True):
        lines = gzip.decompress((base / f"train.{lang}.gz").read_bytes()).decode().splitlines()
        side.write_text("\n".join(lines[:3000]) + "\n", encoding="utf-8")
    ingest(sides, root / "de", langs=["en", "de"])
    ingest(sides, root / "fr", langs=["en", "fr"])
    return {"de": root / "de", "fr": root / "fr"}


def test_a_refused_ingest_overwrite_leaves_the_old_dataset(tmp_path: Path):
    good = tmp_path / "good.en-de.tsv"
    good.write_text("".join(f"a{i}\tb{i}\n" for i in range(200)), encoding="utf-8")
    ds = tmp_path / "ds"
    ingest([good], ds)
    before = _files(ds)
    # most lines hold two fields where three are asked for: refused at the end of the run
    bad = tmp_path / "bad.en-de.tsv"
    bad.write_text("".join(f"a{i}\tb{i}\tc{i}\n" for i in range(3))
                   + "".join(f"x{i}\ty{i}\n" for i in range(3, 120)), encoding="utf-8")
    with pytest.raises(DataLossError):
        ingest([bad], ds, columns=["0", "2"], overwrite=True)
    assert _files(ds) == before and not (ds / WORK_DIR).exists()
    assert verify_dataset(ds).ok and len(open_dataset(ds)) == 200
    refused = run_cli("ingest", bad, "--out", ds, "--columns", "0,2", "--overwrite", "--quiet")
    assert refused.exit_code == 1 and "--allow-heavy-loss" in refused.stderr
    assert _files(ds) == before
    # and an overwrite that succeeds replaces every file of the old dataset
    ingest([bad], ds, columns=["0", "1"], overwrite=True)  # the 3 lines of 3 fields rejected
    assert verify_dataset(ds).ok and len(open_dataset(ds)) == 117
    assert not (ds / WORK_DIR).exists()


def test_a_refused_clean_overwrite_leaves_the_old_output_then_resumes(
        multi30k_as: dict[str, Path], tmp_path: Path):
    recipe = _recipe(tmp_path, NO_ALIGN, "r.toml")
    out = tmp_path / "out"
    clean(multi30k_as["de"], out, recipe=recipe, workers=1)
    before = _files(out)
    # the German side read as French: most rows would go, so the run is refused at its end
    with pytest.raises(DataLossError):
        clean(multi30k_as["fr"], out, recipe=recipe, workers=1, overwrite=True)
    assert {k: v for k, v in _files(out).items() if not k.startswith(WORK_DIR)} == before
    assert verify_dataset(out).ok
    assert len(open_dataset(out)) == json.loads(before[MANIFEST_NAME])["rows"]
    # the refused run's work waits beside it and is what a rerun takes up: no --overwrite
    # is needed to finish the replacement that was asked for
    accepted = clean(multi30k_as["fr"], out, recipe=recipe, workers=1, allow_heavy_loss=True)
    assert accepted.resumed_shards >= 1
    fresh = tmp_path / "fresh"
    clean(multi30k_as["fr"], fresh, recipe=recipe, workers=1, allow_heavy_loss=True)
    assert _same_dataset(out, fresh)  # and no file of the old output is left
    assert verify_dataset(out).ok and not (out / WORK_DIR).exists()


def test_a_run_killed_while_it_removed_the_old_output_is_finished_by_the_rerun(
        multi30k_as: dict[str, Path], tmp_path: Path):
    """The old dataset goes manifest first, just before the new files move in; a run killed
    right after its manifest went leaves the rest of the old files and the record of them:
    the rerun (with or without ``--overwrite``) removes them and publishes the new dataset."""
    recipe = _recipe(tmp_path, NO_ALIGN, "r.toml")
    out = tmp_path / "out"
    clean(multi30k_as["de"], out, recipe=recipe, workers=1)
    with pytest.raises(DataLossError):  # a run that stopped with the old dataset in place
        clean(multi30k_as["fr"], out, recipe=recipe, workers=1, overwrite=True)
    (out / MANIFEST_NAME).unlink()  # what a kill right after the manifest's removal leaves
    accepted = clean(multi30k_as["fr"], out, recipe=recipe, workers=1, allow_heavy_loss=True)
    assert accepted.resumed_shards >= 1
    fresh = tmp_path / "fresh"
    clean(multi30k_as["fr"], fresh, recipe=recipe, workers=1, allow_heavy_loss=True)
    assert _same_dataset(out, fresh) and verify_dataset(out).ok


def test_a_clean_overwrite_refused_by_its_accounting_leaves_the_old_output(
        multi30k_as: dict[str, Path], tmp_path: Path):
    """The last check before publishing (every input id once in the output or the rejects,
    read from the files) refuses an input whose shard repeats an id under a matching hash:
    the old output is still whole."""
    import shutil

    import pyarrow as pa

    from spr_data.fsio import sha256_file

    bad = tmp_path / "bad"
    shutil.copytree(multi30k_as["de"], bad)
    manifest = json.loads((bad / MANIFEST_NAME).read_text())
    shard = bad / manifest["shards"][0]["file"]
    table = pa.ipc.open_file(pa.BufferReader(shard.read_bytes())).read_all()  # not mapped:
    # the file is rewritten below
    ids = table.column("id").to_pylist()
    ids[-1] = ids[0]
    at = table.schema.get_field_index("id")
    table = table.set_column(at, table.schema.field(at), pa.array(ids, table.schema.field(at).type))
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    manifest["shards"][0].update(hash=sha256_file(shard), bytes=shard.stat().st_size)
    (bad / MANIFEST_NAME).write_text(json.dumps(manifest))
    recipe = _recipe(tmp_path, RULES_ONLY, "r.toml")
    out = tmp_path / "out"
    clean(multi30k_as["de"], out, recipe=recipe, workers=1)
    before = _files(out)
    with pytest.raises(Exception, match="more than once"):
        clean(bad, out, recipe=recipe, workers=1, overwrite=True)
    assert {k: v for k, v in _files(out).items() if not k.startswith(WORK_DIR)} == before
    assert verify_dataset(out).ok


def test_an_output_that_is_not_being_replaced_still_needs_overwrite(
        multi30k_as: dict[str, Path], tmp_path: Path):
    """A finished output and a killed run that was not an overwrite: no rerun without
    ``--overwrite`` may replace the dataset."""
    recipe = _recipe(tmp_path, RULES_ONLY, "r.toml")
    out = tmp_path / "out"
    clean(multi30k_as["de"], out, recipe=recipe, workers=1)
    with pytest.raises(Exception, match="overwrite"):
        clean(multi30k_as["de"], out, recipe=_recipe(tmp_path, NO_ALIGN, "other.toml"),
              workers=1)
    assert verify_dataset(out).ok and not (out / WORK_DIR).exists()


def test_a_killed_clean_overwrite_leaves_the_old_output_readable(multi30k_ds: Path,
                                                                 tmp_path: Path):
    """A real SIGKILL in the middle of ``clean --overwrite``: the old output is still the
    dataset, whole; the rerun resumes and gives the bytes of a run never killed."""
    first = _recipe(tmp_path, RULES_ONLY, "first.toml")
    second = _recipe(tmp_path, NO_ALIGN, "second.toml")
    out = tmp_path / "out"
    clean(multi30k_ds, out, recipe=first, workers=1)
    before = _files(out)
    sigkill_clean_midway(multi30k_ds, out, second, overwrite=True)
    left = {k: v for k, v in _files(out).items()
            if not k.startswith(WORK_DIR) and k != LOCK_NAME}  # the killed run's stale lock
    assert left == before
    assert verify_dataset(out).ok and len(open_dataset(out / REJECTS_DIR)) > 0
    report = clean(multi30k_ds, out, recipe=second, workers=1)
    assert report.resumed_shards >= 2
    fresh = tmp_path / "fresh"
    clean(multi30k_ds, fresh, recipe=second, workers=1)
    assert _same_dataset(out, fresh)


def test_an_output_inside_the_input_or_in_a_datasets_rejects_is_refused(
        multi30k_as: dict[str, Path], tmp_path: Path):
    """``--out DS/_rejects --overwrite`` replaced DS's rejected rows (its accounting then
    failed), and ``--out DS/clean`` put a second dataset's shards where readers that list DS
    take them for its rows: both are refused, ``--overwrite`` or not, by every command."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(multi30k_as["de"], ds)
    before = _files(ds)
    recipe = _recipe(tmp_path, RULES_ONLY, "r.toml")
    for out in (ds / "clean", ds / REJECTS_DIR):
        for flags in ((), ("--overwrite",)):
            result = run_cli("clean", ds, "--out", out, "--recipe", recipe, "--workers", "1",
                             "--quiet", *flags)
            assert result.exit_code == 2 and "inside the input dataset" in result.stderr
    (tmp_path / "elsewhere").mkdir()
    (ds / "link").symlink_to(tmp_path / "elsewhere")  # inside DS by its path, not its target
    result = run_cli("clean", ds, "--out", ds / "link" / "c", "--recipe", recipe, "--quiet")
    assert result.exit_code == 2 and "inside the input dataset" in result.stderr
    (ds / "link").unlink()
    tsv = tmp_path / "pairs.en-de.tsv"
    tsv.write_text("".join(f"a{i}\tb{i}\n" for i in range(50)), encoding="utf-8")
    result = run_cli("ingest", tsv, "--out", ds / REJECTS_DIR, "--overwrite", "--quiet")
    assert result.exit_code == 1 and "keeps its rejected rows" in result.stderr
    assert _files(ds) == before and verify_dataset(ds).ok
