"""``spr-data clean``: accounting, resumability, determinism, recipes and quarantine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import spr_data.pipeline.clean as clean_module
from spr_data import InputError, OutputError, ingest, open_dataset, verify_dataset
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import clean
from tests.conftest import run_cli, sigkill_clean_midway

NO_ALIGN = 'stages = ["normalize", "rules", "langid", "dedup"]\n'


def recipe_file(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def multi30k(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k en-de train (29,000 pairs) in 8 shards, with some junk appended."""
    root = tmp_path_factory.mktemp("m30k")
    base = corpora / "parallel/multi30k"
    import gzip

    en = gzip.decompress((base / "train.en.gz").read_bytes()).decode().splitlines()
    de = gzip.decompress((base / "train.de.gz").read_bytes()).decode().splitlines()
    en += ["Two dogs play in the snow.", "http://example.com/x", "@@@ ### !!!",
           "A woman walks her dog along the beach at sunset.", "Two children play in a park."]
    de += ["Two dogs play in the snow.", "Ein Hund.", "Zwei Hunde.",
           "Eine Frau geht mit ihrem Hund along the beach at sunset.",
           "Zwei Kinder spielen in einem Park. Zwei Kinder spielen in einem Park."]
    (root / "c.en").write_text("\n".join(en) + "\n")
    (root / "c.de").write_text("\n".join(de) + "\n")
    ingest([root / "c.en", root / "c.de"], root / "ds", shard_rows=4000)
    return root / "ds"


def all_ids(path: Path) -> np.ndarray:
    ds = open_dataset(path)
    return ds.take(np.arange(len(ds))).column("id").to_numpy()


def test_every_row_is_kept_or_rejected_exactly_once(multi30k: Path, tmp_path: Path):
    report = clean(multi30k, tmp_path / "out", recipe=recipe_file(tmp_path, NO_ALIGN),
                   workers=1)
    kept, rejected = all_ids(tmp_path / "out"), all_ids(tmp_path / "out" / REJECTS_DIR)
    assert len(kept) + len(rejected) == report.rows_in == len(open_dataset(multi30k))
    assert np.array_equal(np.sort(np.concatenate([kept, rejected])), np.sort(all_ids(multi30k)))
    assert verify_dataset(tmp_path / "out").ok
    data = json.loads((tmp_path / "out/report.json").read_text())
    assert data["rows_in"] == data["rows_kept"] + data["rows_rejected"]
    # the report a person opens holds the run's time, as the one returned does
    assert 0 < data["seconds"] == round(report.seconds, 3)
    assert set(data["timings"]) == {"score", "decide", "dedup"} and data["resumed_shards"] == 0
    assert sum(data["by_reason"].values()) == data["rows_rejected"]
    assert data["stages"][-1]["rows_out"] == data["rows_kept"]
    rejects = open_dataset(tmp_path / "out" / REJECTS_DIR)
    assert {"reason", "reasons", "stage"} <= set(rejects.schema.names)
    by_src = {r["src"]: r for r in rejects.take(range(len(rejects))).to_pylist()}
    assert by_src["Two dogs play in the snow."]["reason"] == "copied_source"
    assert by_src["@@@ ### !!!"]["reason"] == "junk_src"
    assert "url_only_src" in by_src["http://example.com/x"]["reasons"]
    assert by_src["A woman walks her dog along the beach at sunset."]["reason"] == "copied_span"
    assert "repetition_tgt" in by_src["Two children play in a park."]["reasons"]


def test_output_is_identical_for_any_number_of_workers(multi30k: Path, tmp_path: Path):
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "one", recipe=recipe, workers=1)
    clean(multi30k, tmp_path / "two", recipe=recipe, workers=2)
    for sub in ("", REJECTS_DIR):
        one = json.loads((tmp_path / "one" / sub / "manifest.json").read_text())
        two = json.loads((tmp_path / "two" / sub / "manifest.json").read_text())
        assert one["shards"] == two["shards"]  # same files, rows and sha256


def killed_after_three_units(dataset: Path, out: Path, recipe: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean run killed in the middle: three units decided, the rest not."""
    real_decide = clean_module._decide_task
    calls = {"n": 0}

    def dies_after_three(task):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt  # like a kill in the middle of the run
        return real_decide(task)

    monkeypatch.setattr(clean_module, "_decide_task", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        clean(dataset, out, recipe=recipe, workers=1)
    monkeypatch.setattr(clean_module, "_decide_task", real_decide)


def test_a_killed_run_resumes_to_the_same_bytes(multi30k: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "whole", recipe=recipe, workers=1)
    killed_after_three_units(multi30k, tmp_path / "killed", recipe, monkeypatch)
    assert not (tmp_path / "killed/manifest.json").exists()
    scored = len(list((tmp_path / "killed/.work").glob("scored-*.arrow")))
    report = clean(multi30k, tmp_path / "killed", recipe=recipe, workers=1)
    # every unit was scored and three decided before the kill: the report says what was reused
    assert scored > 3 and report.resumed_shards == scored
    whole = json.loads((tmp_path / "whole/manifest.json").read_text())["shards"]
    resumed = json.loads((tmp_path / "killed/manifest.json").read_text())["shards"]
    assert whole == resumed


def test_a_relaunch_with_another_recipe_is_refused(multi30k: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    def dies(task):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(clean_module, "_decide_task", dies)
    with pytest.raises(KeyboardInterrupt):
        clean(multi30k, tmp_path / "out", recipe=recipe_file(tmp_path, NO_ALIGN), workers=1)
    other = recipe_file(tmp_path, NO_ALIGN + "[rules]\nmax_length_ratio = 9.0\n", "o.toml")
    with pytest.raises(OutputError, match="another recipe") as refused:
        clean(multi30k, tmp_path / "out", recipe=other, workers=1)
    # which hash is which, and both ways out
    assert "(that run's sha256:" in str(refused.value)
    assert "this one's sha256:" in str(refused.value)
    assert "rerun with the same recipe to resume it, or pass overwrite=True" in str(
        refused.value)


def test_an_existing_output_needs_overwrite(multi30k: Path, tmp_path: Path):
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "out", recipe=recipe, workers=1)
    result = run_cli("clean", multi30k, "--out", tmp_path / "out", "--recipe", recipe)
    assert result.exit_code == 1 and "--overwrite" in result.stderr
    result = run_cli("clean", multi30k, "--out", tmp_path / "out", "--recipe", recipe,
                     "--overwrite", "--workers", "1", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["rows_in"] == 29005


def test_quarantine_rejects_exactly_the_listed_rows(multi30k: Path, tmp_path: Path):
    quarantine = tmp_path / "q.jsonl"
    quarantine.write_text('\ufeff{"step": 10, "row_ids": [5, 17, 28000]}\n{"id": 99}\n3\n'
                          '{"row_ids": [10000000, 10000001]}\n', encoding="utf-8")  # a BOM;
    # and the last two ids are no rows of the dataset
    report = clean(multi30k, tmp_path / "out", recipe=recipe_file(tmp_path, NO_ALIGN),
                   workers=1, quarantine=quarantine)
    assert report.quarantine_not_found == 2
    rejects = open_dataset(tmp_path / "out" / REJECTS_DIR)
    rows = rejects.take(range(len(rejects))).to_pylist()
    assert sorted(r["id"] for r in rows if r["reason"] == "quarantined") == [3, 5, 17, 99, 28000]
    assert all(r["stage"] == "quarantine" for r in rows if r["reason"] == "quarantined")


def test_several_quarantine_files_reject_the_union_and_are_recorded(multi30k: Path,
                                                                    tmp_path: Path):
    """``--quarantine`` given once a rank (DDP): every file's rows go (only the last file's
    did), an id in two files counts once, and the lineage names each file and its hash."""
    (tmp_path / "rank0.jsonl").write_text('{"row_ids": [5, 17]}\n')
    (tmp_path / "rank1.jsonl").write_text('{"row_ids": [17, 99]}\n{"id": 10000000}\n')
    result = run_cli("clean", multi30k, "--out", tmp_path / "out", "--workers", "1",
                     "--recipe", recipe_file(tmp_path, NO_ALIGN), "--json",
                     "--quarantine", tmp_path / "rank0.jsonl",
                     "--quarantine", tmp_path / "rank1.jsonl")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["by_reason"]["quarantined"] == 3 and report["quarantine_not_found"] == 1
    rejects = open_dataset(tmp_path / "out" / REJECTS_DIR)
    assert sorted(r["id"] for r in rejects.take(range(len(rejects))).to_pylist()
                  if r["reason"] == "quarantined") == [5, 17, 99]
    lineage = open_dataset(tmp_path / "out").manifest.lineage
    assert [q["path"] for q in lineage["quarantine"]] == [
        str((tmp_path / name).resolve()) for name in ("rank0.jsonl", "rank1.jsonl")]
    assert all(q["sha256"].startswith("sha256:") for q in lineage["quarantine"])


def test_a_quarantine_that_takes_every_row_says_so(corpora: Path, tmp_path: Path):
    """The quarantine lists every row left: the error names it (it blamed the rules, and
    told the user to loosen them)."""
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], tmp_path / "ds",
           langs=["en", "bn"])
    ids = open_dataset(tmp_path / "ds").take(range(4387)).column("id").to_pylist()
    (tmp_path / "q.jsonl").write_text(json.dumps({"row_ids": ids}) + "\n")
    result = run_cli("clean", tmp_path / "ds", "--out", tmp_path / "out", "--workers", "1",
                     "--quarantine", tmp_path / "q.jsonl")
    message = " ".join(result.stderr.split())
    assert result.exit_code == 2, message
    took = re.search(r"no row is left for it — the quarantine took ([\d,]+) rows, and the "
                     r"other checks the other (\d+) \(length_ratio", message)
    assert took and int(took[1].replace(",", "")) + int(took[2]) == 4387, message
    assert "loosen the rules" not in message
    # a quarantine that took none of the rows left is not named for a failure it did not make
    (tmp_path / "three.tsv").write_text("Hello there.\tHallo.\nGood night.\tGute Nacht.\n"
                                        "Thank you.\tDanke.\n")
    ingest([tmp_path / "three.tsv"], tmp_path / "three", langs=["en", "de"])
    (tmp_path / "elsewhere.jsonl").write_text('{"row_ids": [100, 101, 102]}\n')
    small = run_cli("clean", tmp_path / "three", "--out", tmp_path / "out3", "--workers", "1",
                    "--quarantine", tmp_path / "elsewhere.jsonl")
    assert small.exit_code == 2 and "quarantine" not in small.stderr
    assert "set align.min_score" in small.stderr


def test_damaged_work_files_are_redone_on_resume(multi30k: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    """A resumed run checks what the killed one left: a work file cut short, a work file of
    another unit (its rows would be lost and others repeated) and an output shard cut short
    are all made again, to the same bytes as a run that was never killed."""
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "whole", recipe=recipe, workers=1)
    killed_after_three_units(multi30k, tmp_path / "killed", recipe, monkeypatch)
    work = tmp_path / "killed/.work"
    cut = work / "scored-00005.arrow"
    cut.write_bytes(cut.read_bytes()[:1000])
    (work / "scored-00006.arrow").write_bytes((work / "scored-00004.arrow").read_bytes())
    # the killed run's shards wait in the work directory, not where a reader would take them
    # for the dataset's
    assert not list((tmp_path / "killed").glob("*.arrow"))
    kept = sorted((work / "out").glob("*.arrow"))[0]
    kept.write_bytes(kept.read_bytes()[:-100])
    report = clean(multi30k, tmp_path / "killed", recipe=recipe, workers=1)
    # of the 8 units, the score step of 6 is reused (units 5 and 6 are scored again)
    assert report.resumed_shards == 6
    for sub in ("", REJECTS_DIR):
        whole = json.loads((tmp_path / "whole" / sub / "manifest.json").read_text())["shards"]
        resumed = json.loads((tmp_path / "killed" / sub / "manifest.json").read_text())["shards"]
        assert whole == resumed
    assert verify_dataset(tmp_path / "killed").ok


def test_a_dataset_without_rows_is_a_clear_error(tmp_path: Path):
    # empty inputs make an empty dataset (inputs whose every record is rejected are refused)
    (tmp_path / "e.en").write_text("")
    (tmp_path / "e.de").write_text("")
    ingest([tmp_path / "e.en", tmp_path / "e.de"], tmp_path / "empty")
    result = run_cli("clean", tmp_path / "empty", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "has no rows to clean" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_dataset_of_unknown_languages_is_cleaned_with_a_warning(corpora: Path,
                                                                  tmp_path: Path):
    """Files whose names give no language make an und-und dataset: the rules' script checks
    and language id have nothing to check a side against, which the run says (report.json and
    stderr); the same files ingested with --langs give no such warning."""
    import gzip
    for name, lang in (("a.txt", "en"), ("b.txt", "de")):
        (tmp_path / name).write_bytes(gzip.decompress(
            (corpora / f"parallel/multi30k/val.{lang}.gz").read_bytes()))
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    ingest(files, tmp_path / "und", format="moses")
    ingest(files, tmp_path / "en-de", format="moses", langs=["en", "de"])
    recipe = recipe_file(tmp_path, NO_ALIGN)
    result = run_cli("clean", tmp_path / "und", "--out", tmp_path / "out", "--recipe", recipe,
                     "--workers", "1")
    assert result.exit_code == 0, result.stderr
    said = ("the dataset's languages are und-und: rules and langid checked no side against a "
            "language or script")
    assert said in " ".join(result.stderr.split())
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(report["warnings"]) == 1 and report["warnings"][0].startswith(said)
    # with --json too: stdout is the report alone, the warning on stderr for the person
    scripted = run_cli("clean", tmp_path / "und", "--out", tmp_path / "out3", "--recipe",
                       recipe, "--workers", "1", "--json")
    assert scripted.exit_code == 0, scripted.stderr
    assert json.loads(scripted.stdout)["warnings"] == report["warnings"]
    assert said in " ".join(scripted.stderr.split())
    known = clean(tmp_path / "en-de", tmp_path / "out2", recipe=recipe, workers=1)
    assert known.warnings == []


def test_a_cleaned_dataset_can_be_cleaned_again(multi30k: Path, tmp_path: Path):
    """Its score columns (alignment score included) are computed afresh, not doubled."""
    first = clean(multi30k, tmp_path / "once", workers=1)
    again = clean(tmp_path / "once", tmp_path / "twice", workers=1)
    assert again.rows_in == first.rows_kept
    names = open_dataset(tmp_path / "twice").schema.names
    assert names.count("align_score") == 1 and verify_dataset(tmp_path / "twice").ok


@pytest.mark.parametrize("line,message", [
    ('{"row_ids": [1, "x"]}', "expected a row id"),
    ('{"id": 18446744073709551616}', "expected a row id"),  # over 64 bits
    ("not json", "not JSON"),
])
def test_a_bad_quarantine_file_names_the_line(multi30k: Path, tmp_path: Path, line: str,
                                             message: str):
    quarantine = tmp_path / "q.jsonl"
    quarantine.write_text('{"row_ids": [1]}\n' + line + "\n")
    result = run_cli("clean", multi30k, "--out", tmp_path / "out", "--quarantine", quarantine)
    assert result.exit_code == 2 and f"{quarantine}:2" in result.stderr and message in result.stderr


@pytest.mark.parametrize("text,message", [
    ("[rules]\nmax_lenght_ratio = 2\n",
     "unknown key rules.max_lenght_ratio; did you mean rules.max_length_ratio?"),
    ("[rules]\nmin_chrs = 2\n", "did you mean rules.min_chars?"),  # a side key, both sides
    ("[align]\nnegativ_recall = 0.9\n", "did you mean align.negative_recall?"),
    ("[rules.src]\nmax_chars = 'many'\n", "rules.src.max_chars should be a whole number"),
    ('stages = ["rules", "normalize"]\n', "in that order"),
    ('stages = ["rules", "magic"]\n', "unknown stage 'magic'"),
    ("[align]\nquantile = 1.5\n", "align.quantile"),
    ("this is = not toml [", "not valid TOML"),
])
def test_recipe_errors_name_the_key(multi30k: Path, tmp_path: Path, text: str, message: str):
    recipe = recipe_file(tmp_path, text)
    result = run_cli("clean", multi30k, "--out", tmp_path / "out", "--recipe", recipe)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and str(recipe) in result.stderr


def test_shipped_recipes_load(multi30k: Path):
    from spr_data.recipe import load_recipe

    shipped = Path(__file__).resolve().parents[1] / "data_manifests"
    files = sorted(shipped.glob("*.toml"))
    assert {f.stem for f in files} >= {"default", "en-zh", "en-de", "en-bn"}
    for f in files:
        assert load_recipe(f, ["en", "de"]).stages[0] == "normalize"


def test_clean_refuses_a_rejects_dataset_and_its_own_input(multi30k: Path, tmp_path: Path):
    from spr_data import DatasetError

    with pytest.raises(DatasetError, match="rejects dataset"):
        clean(multi30k / REJECTS_DIR, tmp_path / "out")
    with pytest.raises(InputError, match="differ"):
        clean(multi30k, multi30k)


def test_kill_9_mid_run_then_resume_gives_the_same_bytes(multi30k: Path, tmp_path: Path):
    """A real SIGKILL of a clean process, then a second run: same shards as an unkilled run."""
    recipe = recipe_file(tmp_path, NO_ALIGN)
    clean(multi30k, tmp_path / "whole", recipe=recipe, workers=1)
    out = tmp_path / "killed"
    sigkill_clean_midway(multi30k, out, recipe)
    assert not (out / "manifest.json").exists()
    report = clean(multi30k, out, recipe=recipe, workers=1)
    assert report.resumed_shards >= 2
    for sub in ("", REJECTS_DIR):
        whole = json.loads((tmp_path / "whole" / sub / "manifest.json").read_text())["shards"]
        resumed = json.loads((out / sub / "manifest.json").read_text())["shards"]
        assert whole == resumed
    assert verify_dataset(out).ok


def test_progress_names_each_step_whole_corpus_ones_included(multi30k: Path, tmp_path: Path):
    """The alignment model's training is half a run: it reports as a step of its own, started
    and done, between the score and decide steps (a score bar standing still said nothing)."""
    heard: list[tuple[str, int, int]] = []
    report = clean(multi30k, tmp_path / "out", workers=1,
                   on_progress=lambda *event: heard.append(event))
    steps = list(dict.fromkeys(step for step, _, _ in heard))
    assert steps == ["score", "dedup", "align", "decide"]
    align = [(done, total) for step, done, total in heard if step == "align"]
    assert align == [(0, report.rows_in), (report.rows_in, report.rows_in)]
