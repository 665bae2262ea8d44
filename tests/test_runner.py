"""The shard runner and the declared stages: what every shard command shares.

* the waterfall, each reject's ``stage`` and the order of its ``reasons`` follow the declared
  stages (nothing else lists them);
* exact dedup by hash partitions gives the same rows as one partition, for any number of
  partitions and workers;
* accounting is read from the written files: a task that loses one row and repeats another
  (the same count) stops the run before anything is published.
"""

from __future__ import annotations

import gzip
import signal
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pytest

import spr_data.pipeline.clean as clean_module
import spr_data.pipeline.tokenize as tokenize_module
from spr_data import ingest, open_dataset
from spr_data.errors import SprDataError
from spr_data.manifest import MANIFEST_NAME
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import clean
from spr_data.pipeline.executor import Executor, LocalExecutor
from spr_data.pipeline.runner import Unit, read_unit
from spr_data.pipeline.tokenize import tokenize
from spr_data.pipeline.units import unit_rows
from spr_data.qa import langid, lid_model
from spr_data.qa.dedup import DedupStage, duplicate_ids, too_many_targets_ids
from spr_data.qa.stage import stage_of
from spr_data.qa.stages import build_stages
from spr_data.recipe import DedupConfig, load_recipe

T = TypeVar("T")
R = TypeVar("R")


@pytest.fixture(scope="module")
def eng_ben(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runner")
    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], root / "ds",
           langs=["en", "bn"], shard_rows=1000)
    return root / "ds"


def test_the_waterfall_and_the_reasons_follow_the_declared_stages(corpora: Path,
                                                                  tmp_path: Path):
    """On the noisy WMT en-de sample, whose rows fall to every stage."""
    ingest([corpora / "parallel/opennmt_wmt_en-de.train.en.gz",
            corpora / "parallel/opennmt_wmt_en-de.train.de.gz"], tmp_path / "ds",
           langs=["en", "de"], shard_rows=3000)
    report = clean(tmp_path / "ds", tmp_path / "out", workers=2)
    ds = open_dataset(tmp_path / "ds")
    stages = build_stages(load_recipe(None, ds.langs, ds.kind), ds.kind, ds.langs)
    assert [s["name"] for s in report.stages] == [s.name for s in stages]
    of = stage_of(stages)
    rank = {reason: i for i, reason in enumerate(r for s in stages for r in s.reasons)}
    rejects = open_dataset(tmp_path / "out" / REJECTS_DIR)
    rows = rejects.take(np.arange(len(rejects))).to_pylist()
    assert {of[r["reason"]] for r in rows} == {"rules", "langid", "dedup", "align"}
    assert any(len(r["reasons"]) > 1 for r in rows)
    for row in rows:
        assert row["stage"] == of[row["reason"]] and row["reason"] == row["reasons"][0]
        assert [rank[r] for r in row["reasons"]] == sorted(rank[r] for r in row["reasons"])
    for step in report.stages:
        assert all(of[r] == step["name"] for r in step["by_reason"])
    # the kept rows' columns: the input's and what the stages declare, nothing else
    declared = {c for s in stages for c in s.columns}
    kept = open_dataset(tmp_path / "out")
    assert set(kept.schema.names) == set(ds.schema.names) | declared


def test_a_stage_that_adds_an_undeclared_column_stops_the_run():
    from spr_data.pipeline.clean import _score_slice
    from spr_data.qa.normalize import NormalizeStage
    from spr_data.qa.stage import StageOutput
    from spr_data.recipe import NormalizeConfig

    class Leaky(NormalizeStage):
        def apply(self, batch: Any, rejected: Any = None) -> StageOutput:
            out = super().apply(batch, rejected)
            out.columns["secret_score"] = pa.array([0.5] * batch.num_rows)
            return out

    batch = pa.record_batch({"id": pa.array([0, 1], pa.uint64()), "src": ["a", "b"],
                             "tgt": ["x", "y"]})
    with pytest.raises(SprDataError, match="stage normalize returned columns it does not "
                                           "declare: secret_score"):
        _score_slice(batch, [Leaky(NormalizeConfig(), ("src", "tgt"))])


@dataclass
class _Context:
    """A combine context over in-memory units (what the runner builds from its work files)."""

    work: Path
    partials: list[Path | None]
    executor: Executor
    scored: list[Path] = field(default_factory=list)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        return self.executor.map(fn, tasks)

    def rejected_before(self, unit: int, spare: Collection[str] = ()
                        ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        raise AssertionError("dedup needs no earlier decisions")


def _units_with_repeats(corpora: Path) -> list[pa.Table]:
    """Tatoeba eng-cmn pairs cut into 7 units, with rows repeated across units (same text,
    a later id) and many targets for some sources."""
    lines = gzip.decompress(
        (corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz").read_bytes()
    ).decode("utf-8-sig").splitlines()
    pairs = [tuple(line.split("\t")[:2]) for line in lines if line.count("\t") >= 1][:6000]
    rng = np.random.default_rng(5)
    extra = [pairs[i] for i in rng.integers(0, len(pairs), 1500)]
    rows = pairs + extra
    order = rng.permutation(len(rows))
    src = [rows[i][0] for i in order]
    tgt = [rows[i][1] for i in order]
    table = pa.table({"id": pa.array(np.arange(len(rows), dtype=np.uint64)),
                      "src": src, "tgt": tgt})
    return [table.slice(lo, 1100) for lo in range(0, len(rows), 1100)]


@pytest.mark.parametrize("partition_rows", [1 << 20, 1000, 300])
def test_dedup_by_hash_partitions_is_the_same_for_any_partitioning(
        corpora: Path, tmp_path: Path, partition_rows: int):
    units = _units_with_repeats(corpora)
    config = DedupConfig(max_targets_per_source=1)
    stage = DedupStage(config, ("src", "tgt"), partition_rows=partition_rows)
    partials: list[Path | None] = []
    for i, unit in enumerate(units):
        path = tmp_path / f"partial-{i}.npy"
        np.save(path, stage.partial(unit.to_batches()), allow_pickle=False)
        partials.append(path)
    with LocalExecutor(2) as executor:
        state = stage.combine(_Context(tmp_path, partials, executor))
    rows = sum(u.num_rows for u in units)
    assert len(state["partitions"]) == 1 << max(0, int(np.ceil(np.log2(rows / partition_rows))))
    found = {"duplicate": [], "too_many_targets": []}
    for unit in units:
        out = stage.apply(unit.to_batches(), state, np.zeros(unit.num_rows, bool))
        for reason, mask in out.rejects:
            found[reason].append(unit.column("id").to_numpy()[mask])
    everything = pa.concat_tables(units)
    ids = everything.column("id").to_numpy()
    from spr_data.qa.dedup import content_hashes

    texts = [everything.column("src"), everything.column("tgt")]
    expected_dup = duplicate_ids(content_hashes(texts), ids)
    expected_many = too_many_targets_ids(content_hashes(texts[:1]), ids, 1)
    assert len(expected_dup) >= 1000 and len(expected_many) > len(expected_dup)
    assert np.array_equal(np.sort(np.concatenate(found["duplicate"])), expected_dup)
    assert np.array_equal(np.sort(np.concatenate(found["too_many_targets"])), expected_many)


def test_content_hash_is_the_keyed_blake2b_of_the_joined_text(corpora: Path):
    """A row's content hash is BLAKE2b (8 bytes, dedup's key) of its texts joined with NUL,
    a null read as empty: stable across runs, machines and library versions, whatever the
    arrays' types, slicing or chunking."""
    import hashlib

    from spr_data.qa.dedup import _KEY, content_hashes

    def reference(*columns: list[str | None]) -> list[int]:
        return [int.from_bytes(hashlib.blake2b("\x00".join(t or "" for t in parts).encode(),
                                               digest_size=8, key=_KEY).digest(), "little")
                for parts in zip(*columns, strict=True)]

    src = ["Tom ist da.", None, "", "東京タワー", "x" * 5000, "a"]
    tgt = ["Tom is here.", "nothing", None, "Tokyo Tower", "", "\x00"]
    assert content_hashes([pa.array(src), pa.array(tgt)]).tolist() == reference(src, tgt)
    assert content_hashes([pa.array(src)]).tolist() == reference(src)
    sliced = [pa.array(src, pa.large_string()).slice(2, 3), pa.array(tgt).slice(2, 3)]
    assert content_hashes(sliced).tolist() == reference(src[2:5], tgt[2:5])
    assert content_hashes([pa.array([], pa.string())]).tolist() == []
    with gzip.open(corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz", "rt",
                   encoding="utf-8") as f:
        lines = f.read().removeprefix("\ufeff").splitlines()[:3000]
    pairs = [line.split("\t")[:2] for line in lines if "\t" in line]
    eng, cmn = [p[0] for p in pairs], [p[1] for p in pairs]
    assert content_hashes([pa.array(eng), pa.array(cmn)]).tolist() == reference(eng, cmn)


def test_clean_dedups_the_rows_of_the_whole_corpus_reference(corpora: Path, tmp_path: Path):
    """The partitioned dedup inside clean, on Tatoeba eng-cmn (which repeats some pairs), in
    4 shards: the rejected ids are those of the whole-corpus reference (the first row by id of
    each content kept)."""
    ingest([corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz"], tmp_path / "ds",
           langs=["en", "zh"], shard_rows=8000)
    eng_cmn = tmp_path / "ds"
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "dedup"]\n')
    clean(eng_cmn, tmp_path / "out", recipe=recipe, workers=2)
    rejects = open_dataset(tmp_path / "out" / REJECTS_DIR)
    got = np.sort(rejects.take(np.arange(len(rejects))).column("id").to_numpy())
    from spr_data.qa.dedup import content_hashes
    from spr_data.qa.normalize import normalize_text

    ds = open_dataset(eng_cmn)
    table = ds.take(np.arange(len(ds)))
    recipe_obj = load_recipe(recipe, ds.langs, ds.kind)
    texts = [normalize_text(table.column(c).combine_chunks(), recipe_obj.normalize)
             for c in ("src", "tgt")]
    expected = duplicate_ids(content_hashes(texts), table.column("id").to_numpy())
    assert len(expected) >= 50 and np.array_equal(got, expected)


def test_accounting_is_read_from_the_written_files(eng_ben: Path, corpora: Path,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    """A task that writes a shard with one row lost and another repeated (the same count,
    so no sum of counts notices) stops the run before anything is published."""
    real = tokenize_module.write_shard_file

    def loses_a_row(path: Path, batch: Any, *, digest: bool = True) -> Any:
        if path.name == "shard-00002.arrow":
            batch = pa.concat_tables([pa.Table.from_batches([batch.slice(1)]),
                                      pa.Table.from_batches([batch.slice(1, 1)])]
                                     ).combine_chunks().to_batches()[0]
        return real(path, batch, digest=digest)

    monkeypatch.setattr(tokenize_module, "write_shard_file", loses_a_row)
    out = tmp_path / "tok"
    with pytest.raises(SprDataError, match="accounting failed for unit 2"):
        tokenize(eng_ben, out, tokenizer=str(corpora / "tokenizers/gpt2-vocab.json"),
                 workers=1)
    assert not (out / MANIFEST_NAME).exists()
    assert not list(out.glob("shard-*"))  # nothing where a reader would take it for rows


def test_the_largest_units_are_handed_out_first(corpora: Path, tmp_path: Path):
    """Units go to the workers largest first, not in file order, where a short unit met
    early can leave one worker finishing a whole unit last while the others idle; the
    output is the same bytes."""

    class Recording(LocalExecutor):
        def __init__(self) -> None:
            super().__init__(1)
            self.rows: list[list[int]] = []

        def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
            self.rows.append([t.unit.length for t in tasks])  # type: ignore[attr-defined]
            return super().map(fn, tasks)

    recipe = tmp_path / "rules.toml"
    recipe.write_text('stages = ["normalize", "rules"]\n', encoding="utf-8")
    # a cleaned dataset's shards are its units' kept rows: here the first unit's are fewer
    # than the next ones' (most of its targets a lone full stop, which the rules reject)
    lines = (corpora / "parallel/tatoeba_manythings_eng-ben.tsv").read_text(
        encoding="utf-8").splitlines()[:2500]
    lines[:600] = [line.split("\t")[0] + "\t." for line in lines[:600]]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ingest([tmp_path / "pairs.tsv"], tmp_path / "ds", langs=["en", "bn"], shard_rows=1000)
    clean(tmp_path / "ds", tmp_path / "cleaned", recipe=recipe, workers=1)
    sizes = [s.rows for s in open_dataset(tmp_path / "cleaned").manifest.shards]
    assert sizes[0] < sizes[1] and sorted(sizes, reverse=True) != sizes
    executor = Recording()
    clean(tmp_path / "cleaned", tmp_path / "a", recipe=recipe, executor=executor)
    assert executor.rows == [sorted(sizes, reverse=True)] * 2  # score, then decide
    clean(tmp_path / "cleaned", tmp_path / "b", recipe=recipe, workers=2)
    names = [s.file for s in open_dataset(tmp_path / "a").manifest.shards]
    assert len(names) == len(sizes)
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("rows", [8_193, 29_000, 100_000, 300_000, 1_000_000, 5_000_000])
def test_an_input_is_cut_into_an_even_number_of_equal_units(rows: int):
    """2 workers end a step together: at 100k rows the units were 65,536 and 34,464 rows,
    and one worker idled through a third of the score and decide steps. Units stay small
    enough to bound a worker's memory (at most 131,072 rows) and a function of the input
    size alone (the same output for any number of workers)."""
    size = unit_rows(rows)
    units = -(-rows // size)
    assert units % 2 == 0
    assert size <= 1 << 17
    assert rows - (units - 1) * size >= size - units  # the last unit is about as large


@pytest.mark.parametrize("rows", [0, 1, 500, 8_192])
def test_a_small_input_is_one_unit(rows: int):
    assert unit_rows(rows) >= max(rows, 1)


def test_a_single_shard_corpus_is_cleaned_in_two_equal_shards(corpora: Path, tmp_path: Path):
    """Multi30k en-de (29,000 pairs) ingested as one shard: two units of 14,500 rows, each
    its kept and rejected shard."""
    base = corpora / "parallel/multi30k"
    for lang in ("en", "de"):
        (tmp_path / f"c.{lang}").write_bytes(gzip.decompress(
            (base / f"train.{lang}.gz").read_bytes()))
    ingest([tmp_path / "c.en", tmp_path / "c.de"], tmp_path / "ds")
    assert len(open_dataset(tmp_path / "ds").manifest.shards) == 1
    recipe = tmp_path / "rules.toml"
    recipe.write_text('stages = ["normalize", "rules"]\n', encoding="utf-8")
    clean(tmp_path / "ds", tmp_path / "out", recipe=recipe, workers=2)
    kept = open_dataset(tmp_path / "out").manifest.shards
    rejected = open_dataset(tmp_path / "out" / REJECTS_DIR).manifest.shards
    assert [k.rows + r.rows for k, r in zip(kept, rejected, strict=True)] == [14_500] * 2


def _sleep_then_touch(task: tuple[float, str]) -> str:
    seconds, path = task
    time.sleep(seconds)
    Path(path).touch()
    return path


def test_idle_workers_are_stopped_at_once_and_a_running_task_is_waited_for(tmp_path: Path):
    """Releasing the workers (at the end of a run) stops idle ones with SIGTERM
    instead of waiting 0.1-0.2 s each for them to tear their interpreter down; a task of a
    map its caller stopped reading still runs to its end."""
    with LocalExecutor(2) as executor:
        done = dict(executor.map(_sleep_then_touch, [(0.0, str(tmp_path / f"{i}"))
                                                     for i in range(4)]))
        assert len(done) == 4
        processes = list(executor._pool._processes.values())  # type: ignore[union-attr]
        executor.release()
        assert [p.exitcode for p in processes] == [-signal.SIGTERM] * 2
        slow = tmp_path / "slow"
        tasks = executor.map(_sleep_then_touch, [(0.0, str(tmp_path / "fast")),
                                                 (1.0, str(slow))])
        next(tasks)  # the caller reads one result and stops; the other task runs on
        processes = list(executor._pool._processes.values())  # type: ignore[union-attr]
        executor.release()
        assert slow.exists()
        assert [p.exitcode for p in processes] == [0, 0]


def test_the_score_steps_models_are_let_go_when_the_combine_step_starts(
        eng_ben: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Workers go on from the score step to EM and the decide step (fresh processes cost 8%
    of a 100k-pair run, their start-up in the driver's busiest stretch); the language-id
    models they loaded are let go of at the first combine task, not held through EM. One
    worker: every task runs in this process, where the caches can be read."""
    langid._model.cache_clear()
    lid_model.batch_model.cache_clear()
    loaded_at_release: list[int] = []
    release = clean_module._release_row_stages

    def recording(stages: Sequence[Any]) -> None:
        loaded_at_release.append(lid_model.batch_model.cache_info().currsize)
        release(stages)

    monkeypatch.setattr(clean_module, "_release_row_stages", recording)
    clean(eng_ben, tmp_path / "out", workers=1)  # the default recipe: langid, then align
    assert loaded_at_release[0] == 1  # the score step loaded them...
    assert lid_model.batch_model.cache_info().currsize == 0  # ...and nothing after it again
    assert langid._model.cache_info().currsize == 0


def test_a_unit_is_read_in_slices_of_equal_size(eng_ben: Path, monkeypatch: pytest.MonkeyPatch):
    """The rules fit the length ratio on each slice they judge: a unit of 1,000 rows read by
    at most 300 is four slices of 250, not three of 300 and one of 100 (at the real size, a
    unit of 50,000 rows left a last slice of 1,848)."""
    monkeypatch.setattr(clean_module, "_SLICE_ROWS", 300)
    shard = open_dataset(eng_ben).manifest.shards[0]
    unit = Unit(0, str(eng_ben / shard.file), 0, 1000, shard.hash)
    slices = list(clean_module._unit_slices(unit))
    assert [s.num_rows for s in slices] == [250] * 4
    ids = pa.concat_arrays([s.column("id") for s in slices]).to_numpy()
    assert np.array_equal(ids, read_unit(unit).column("id").to_numpy())


def test_text_escaped_twice_is_unescaped_as_text_escaped_once(corpora: Path):
    """The WMT sample's sides hold HTML escapes (``&apos;``, ``&quot;``); a crawl that escaped
    them again (``&amp;apos;``) normalizes to the same text, where one round of unescaping
    left ``&apos;`` for the ``html`` rule (385 of the 663 sides so written, real pairs)."""
    from spr_data.qa.normalize import normalize_text
    from spr_data.recipe import NormalizeConfig

    lines = gzip.decompress((corpora / "parallel/opennmt_wmt_en-de.train.en.gz").read_bytes())
    escaped = [x for x in lines.decode("utf-8").split("\n") if "&" in x][:500]
    assert len(escaped) >= 200
    twice = [x.replace("&", "&amp;") for x in escaped]
    thrice = [x.replace("&", "&amp;") for x in twice]
    config = NormalizeConfig()
    once = normalize_text(pa.array(escaped), config)
    assert normalize_text(pa.array(twice), config).equals(once)
    assert normalize_text(pa.array(thrice), config).equals(once)
    assert not any("&apos;" in x or "&quot;" in x for x in once.to_pylist())
    # the price: a text that wrote an escape as text ("&lt;", escaped once: "&amp;lt;") reads
    # as escaped twice
    assert normalize_text(pa.array(["write &amp;lt; for <"]), config).to_pylist() == \
        ["write < for <"]


def test_c1_controls_are_read_as_the_cp1252_characters_they_were(corpora: Path):
    """Text written in cp1252 and read as Latin-1 carries C1 controls for its quotes and
    dashes; UTF-8 so read carries them for continuation bytes 80-9F. Read as cp1252, the
    first gets its quotes back and the second stays visible to the mojibake rule, where
    stripped as controls ``Ã\\x84rmel`` was ``Ãrmel``, which no rule can tell from text."""
    from spr_data.qa.normalize import normalize_text
    from spr_data.qa.rules import mojibake_score
    from spr_data.recipe import NormalizeConfig

    config = NormalizeConfig()
    windows = "\u201cGo\u201d \u2013 now \u2014 for 5 \u20ac"  # “Go” – now — for 5 €
    as_latin1 = windows.encode("cp1252").decode("latin-1")
    assert any(0x80 <= ord(c) <= 0x9F for c in as_latin1)
    assert normalize_text(pa.array([as_latin1]), config).to_pylist() == [windows]
    # NEL stays a line break (a space), the bytes cp1252 leaves undefined are stripped
    assert normalize_text(pa.array(["a\x85b", "a\x81b"]), config).to_pylist() == ["a b", "ab"]
    assert normalize_text(pa.array(["a\x93b"]), NormalizeConfig(c1_as_cp1252=False)
                          ).to_pylist() == ["ab"]
    real = [x for x in gzip.decompress(
        (corpora / "multiparallel/ntrex128/newstest2019-ref.deu.txt.gz").read_bytes()
    ).decode("utf-8").split("\n") if x.strip()]
    garbled = [x.encode("utf-8").decode("latin-1") for x in real]
    c1 = np.array([any(0x80 <= ord(c) <= 0x9F for c in x) for x in garbled])
    assert c1.sum() >= 500  # Ä Ö Ü ß „ “ –: a continuation byte in 80-9F
    caught = {on: mojibake_score(normalize_text(pa.array(garbled),
                                                NormalizeConfig(c1_as_cp1252=on))) >= 1
              for on in (False, True)}
    # measured on NTREX German: 0.85 with the controls stripped, 1.00 read as cp1252
    assert caught[True][c1].mean() >= 0.99, caught[True][c1].mean()
    assert caught[False][c1].mean() < caught[True][c1].mean()
    assert not (mojibake_score(normalize_text(pa.array(real), config)) >= 1).any()
