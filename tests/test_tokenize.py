"""``spr-data tokenize``: id columns equal to the tokenizer's own output, deterministic,
resumable, accounted for in the lineage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spr_data import ingest, open_dataset
from spr_data.pipeline import tokenize as tokenize_module
from spr_data.pipeline.audit import audit_dataset
from spr_data.pipeline.tokenize import tokenize
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def eng_ben(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tokenize")
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], root / "ds",
           langs=["en", "bn"], shard_rows=1000)
    return root / "ds"


def shard_bytes(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(path.glob("shard-*.arrow"))]


def test_ids_are_the_tokenizers_own_and_fit_uint16(eng_ben: Path, corpora: Path,
                                                   tmp_path: Path):
    import sentencepiece as spm

    model = corpora / "tokenizers/llama2_tokenizer.model"
    report = tokenize(eng_ben, tmp_path / "tok", tokenizer=str(model), workers=1)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    ds = open_dataset(tmp_path / "tok")
    table = ds.take(range(len(ds)))
    assert report.rows == len(ds) == len(open_dataset(eng_ben))
    assert str(ds.schema.field("src_ids").type) == "list<item: uint16>"
    assert table.column("src_ids").to_pylist() == sp.encode(table.column("src").to_pylist())
    assert table.column("tgt_ids").to_pylist() == sp.encode(table.column("tgt").to_pylist())
    assert report.tokens["tgt_ids"] == sum(map(len, table.column("tgt_ids").to_pylist()))
    assert ds.manifest.lineage["tokenizer"]["vocab_size"] == 32000


def test_a_vocabulary_over_65536_gets_uint32(eng_ben: Path, corpora: Path, tmp_path: Path):
    from spr_data.tokenizers import load_tokenizer

    ranks = corpora / "tokenizers/llama3_tokenizer.model"
    tokenize(eng_ben, tmp_path / "tok", tokenizer=str(ranks), workers=1)
    ds = open_dataset(tmp_path / "tok")
    assert str(ds.schema.field("tgt_ids").type) == "list<item: uint32>"
    rows = ds.take(range(0, len(ds), 97))
    llama3 = load_tokenizer(str(ranks))
    assert rows.column("tgt_ids").to_pylist() == llama3.encode(rows.column("tgt").to_pylist())
    assert max(max(r) for r in rows.column("tgt_ids").to_pylist() if r) > 65535


def test_the_output_is_the_same_bytes_for_any_number_of_workers(eng_ben: Path, corpora: Path,
                                                                tmp_path: Path):
    model = str(corpora / "tokenizers/gpt2-vocab.json")
    tokenize(eng_ben, tmp_path / "one", tokenizer=model, workers=1)
    tokenize(eng_ben, tmp_path / "two", tokenizer=model, workers=2)
    assert len(shard_bytes(tmp_path / "one")) == 5
    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "two")


def killed_at_the_fourth_unit(dataset: Path, out: Path, tokenizer: str,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A tokenize run killed in the middle: three units written, the rest not."""
    real = tokenize_module._tokenize_task

    def dies_on_the_fourth(task):  # type: ignore[no-untyped-def]
        if task.index == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(tokenize_module, "_tokenize_task", dies_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        tokenize(dataset, out, tokenizer=tokenizer, workers=1)
    monkeypatch.setattr(tokenize_module, "_tokenize_task", real)


def test_a_killed_run_resumes_to_the_same_bytes(eng_ben: Path, corpora: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    model = str(corpora / "tokenizers/llama2_tokenizer.model")
    tokenize(eng_ben, tmp_path / "clean", tokenizer=model, workers=1)
    killed_at_the_fourth_unit(eng_ben, tmp_path / "killed", model, monkeypatch)
    assert not (tmp_path / "killed/manifest.json").exists()
    report = tokenize(eng_ben, tmp_path / "killed", tokenizer=model, workers=1)
    assert report.resumed_shards == 3
    assert shard_bytes(tmp_path / "killed") == shard_bytes(tmp_path / "clean")
    # another tokenizer cannot pick up that run's work files
    killed_at_the_fourth_unit(eng_ben, tmp_path / "other", model, monkeypatch)
    result = run_cli("tokenize", eng_ben, "-t", corpora / "tokenizers/gpt2-vocab.json",
                     "--out", tmp_path / "other", "--quiet")
    assert result.exit_code == 1 and "unfinished run with another tokenizer" in result.stderr


def test_a_changed_merges_file_is_another_tokenizer(eng_ben: Path, corpora: Path,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    """A GPT-2 tokenizer is its vocab.json and its merges.txt: a run killed with one merges
    file is not resumed with another."""
    import shutil

    for name in ("gpt2-vocab.json", "gpt2-merges.txt"):
        shutil.copy(corpora / "tokenizers" / name, tmp_path / name)
    killed_at_the_fourth_unit(eng_ben, tmp_path / "out", str(tmp_path / "gpt2-vocab.json"),
                              monkeypatch)
    merges = (tmp_path / "gpt2-merges.txt").read_text().splitlines()
    (tmp_path / "gpt2-merges.txt").write_text("\n".join(merges[:20001]) + "\n")
    result = run_cli("tokenize", eng_ben, "-t", tmp_path / "gpt2-vocab.json",
                     "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 1 and "unfinished run with another tokenizer" in result.stderr


def test_audit_accounts_for_the_tokenize_stage(eng_ben: Path, corpora: Path, tmp_path: Path):
    tokenize(eng_ben, tmp_path / "tok", tokenizer=str(corpora / "tokenizers/gpt2-vocab.json"),
             workers=1)
    report = audit_dataset(tmp_path / "tok")
    assert report.ok
    stages = report.checks["accounting"]["stages"]
    assert [s["stage"] for s in stages] == ["tokenize", "ingest"]
    assert stages[0]["rows_in"] == stages[0]["kept"] == len(open_dataset(eng_ben))


def test_cli_json_and_clear_errors(eng_ben: Path, corpora: Path, tmp_path: Path):
    result = run_cli("tokenize", eng_ben, "-t", corpora / "tokenizers/llama2_tokenizer.model",
                     "--out", tmp_path / "tok", "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["id_type"] == "uint16" and data["rows"] == len(open_dataset(eng_ben))
    missing = run_cli("tokenize", eng_ben, "-t", tmp_path / "nope.model", "--out",
                      tmp_path / "x")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    baseline = run_cli("tokenize", eng_ben, "-t", "bytes", "--out", tmp_path / "y")
    assert baseline.exit_code == 2 and "baseline" in baseline.stderr
    again = run_cli("tokenize", eng_ben, "-t", corpora / "tokenizers/llama2_tokenizer.model",
                    "--out", tmp_path / "tok", "--quiet")
    assert again.exit_code == 1 and "--overwrite" in again.stderr


def test_a_corrupt_shard_fails_the_run_instead_of_flowing_on(eng_ben: Path, corpora: Path,
                                                             tmp_path: Path):
    import shutil

    shutil.copytree(eng_ben, tmp_path / "corrupt")
    shard = tmp_path / "corrupt/shard-00002.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    result = run_cli("tokenize", tmp_path / "corrupt", "-t",
                     corpora / "tokenizers/llama2_tokenizer.model", "--out", tmp_path / "tok",
                     "--workers", "1", "--quiet")
    assert result.exit_code == 2 and "shard-00002.arrow does not match" in result.stderr
    assert not (tmp_path / "tok/manifest.json").exists()
    cache = tmp_path / "a-file"
    cache.write_text("x")
    bad_cache = run_cli("tokenize", f"{(tmp_path / 'corrupt').as_uri()}", "-t",
                        corpora / "tokenizers/llama2_tokenizer.model", "--out", tmp_path / "t2",
                        "--cache-dir", cache, "--quiet")
    assert bad_cache.exit_code == 1 and "--cache-dir" in bad_cache.stderr


def test_a_shard_cut_short_after_a_killed_run_is_made_again(eng_ben: Path, corpora: Path,
                                                            tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """The resume rule of every shard command (``spr_data.pipeline.units``): a finished unit
    counts only while its shard is there at the size its marker recorded."""
    model = str(corpora / "tokenizers/gpt2-vocab.json")
    tokenize(eng_ben, tmp_path / "whole", tokenizer=model, workers=1)
    killed_at_the_fourth_unit(eng_ben, tmp_path / "killed", model, monkeypatch)
    assert not list((tmp_path / "killed").glob("shard-*.arrow"))  # staged, not published
    first, second = sorted((tmp_path / "killed/.work/out").glob("shard-*.arrow"))[:2]
    first.write_bytes(first.read_bytes()[:-100])  # cut short
    second.unlink()  # gone
    report = tokenize(eng_ben, tmp_path / "killed", tokenizer=model, workers=1)
    assert report.resumed_shards == 1
    assert shard_bytes(tmp_path / "killed") == shard_bytes(tmp_path / "whole")


def test_clean_of_a_tokenized_dataset_keeps_text_and_ids_together(corpora: Path,
                                                                  tmp_path: Path):
    """A dataset tokenized before it was cleaned: normalize would rewrite text the token ids
    were made from (WMT's ``&apos;s`` as ``'s``, 182 of 1,785 kept rows did, their ids still
    the old text's). It leaves the text as it is and the report says so; a dataset cleaned
    first is normalized as always."""
    import gzip

    import sentencepiece as spm

    from spr_data.pipeline.clean import clean

    base = corpora / "parallel"
    sides = [tmp_path / "wmt.src", tmp_path / "wmt.tgt"]
    for lang, side in zip(("en", "de"), sides, strict=True):
        lines = gzip.decompress((base / f"opennmt_wmt_en-de.train.{lang}.gz").read_bytes())
        side.write_bytes(b"\n".join(lines.split(b"\n")[:2000]) + b"\n")
    ingest(sides, tmp_path / "raw", langs=["en", "de"])
    model = corpora / "tokenizers/llama2_tokenizer.model"
    tokenize(tmp_path / "raw", tmp_path / "tok", tokenizer=str(model), workers=1)
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "rules"]\n')
    report = clean(tmp_path / "tok", tmp_path / "out", recipe=recipe, workers=1)
    assert any("is tokenized (src_ids, tgt_ids)" in w for w in report.warnings)
    kept = open_dataset(tmp_path / "out")
    table = kept.take(range(len(kept)))
    sp = spm.SentencePieceProcessor(model_file=str(model))
    for side in ("src", "tgt"):
        assert table.column(f"{side}_ids").to_pylist() == sp.encode(table.column(side).to_pylist())
    assert sum(table.column("normalized").to_pylist()) > 0  # rows it would have changed
    plain = clean(tmp_path / "raw", tmp_path / "plain", recipe=recipe, workers=1)
    assert not any("tokenized" in w for w in plain.warnings)
    changed = open_dataset(tmp_path / "plain").take(range(len(open_dataset(tmp_path / "plain"))))
    assert "&apos;" not in " ".join(changed.column("src").to_pylist())
    # tokenized after that clean: normalized as this recipe would, no warning; tokenized
    # after a clean that did not normalize: the warning, as for the raw text
    tokenize(tmp_path / "plain", tmp_path / "plain-tok", tokenizer=str(model), workers=1)
    again = clean(tmp_path / "plain-tok", tmp_path / "again", recipe=recipe, workers=1)
    assert not any("tokenized" in w for w in again.warnings)
    rules_only = tmp_path / "rules.toml"
    rules_only.write_text('stages = ["rules"]\n')
    clean(tmp_path / "raw", tmp_path / "unnormalized", recipe=rules_only, workers=1)
    tokenize(tmp_path / "unnormalized", tmp_path / "unnormalized-tok", tokenizer=str(model),
             workers=1)
    later = clean(tmp_path / "unnormalized-tok", tmp_path / "later", recipe=recipe, workers=1)
    assert any("is tokenized (src_ids, tgt_ids)" in w for w in later.warnings)
