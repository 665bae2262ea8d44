"""Recipes: every numeric key has an allowed range, and a value outside it is refused by name.

A value outside its range does not fail loudly later: NaN compares false with every threshold
(the check is off), inf is not JSON (the report and manifest become unreadable), and a
threshold no row can pass ends in "no pairs left to train the alignment model", far from the
recipe. So the loader refuses them, naming the key, the value and what is allowed.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from spr_data import InputError, ingest
from spr_data.qa.rules import RulesStage
from spr_data.recipe import (
    AlignConfig,
    Recipe,
    RulesConfig,
    SideRules,
    default_recipe,
    load_recipe,
)
from tests.conftest import run_cli

MANIFESTS = Path(__file__).resolve().parents[1] / "data_manifests"


def load(tmp_path: Path, text: str, langs: tuple[str, ...] = ("en", "de")) -> Recipe:
    path = tmp_path / "r.toml"
    path.write_text(text)
    return load_recipe(path, list(langs))


def refusal(tmp_path: Path, text: str, langs: tuple[str, ...] = ("en", "de")) -> str:
    with pytest.raises(InputError) as info:
        load(tmp_path, text, langs)
    message = str(info.value)
    assert str(tmp_path / "r.toml") in message and "\n" not in message
    return message


@pytest.mark.parametrize("text,key,says", [
    # not finite: NaN turns the check off, inf is not JSON
    ("[rules]\nmax_length_ratio = nan\n", "rules.max_length_ratio", "found nan"),
    ("[rules]\nmax_length_ratio = inf\n", "rules.max_length_ratio", "found inf"),
    ("[rules]\nmax_length_ratio = -inf\n", "rules.max_length_ratio", "finite"),
    ("[rules.src]\nmin_letter_share = nan\n", "rules.src.min_letter_share", "found nan"),
    ("[langid]\nmin_confidence = nan\n", "langid.min_confidence", "found nan"),
    ("[align]\nmin_score = -inf\n", "align.min_score", "found -inf"),
    ("[align]\nquantile = nan\n", "align.quantile", "found nan"),
    # ratios: longer over shorter side is at least 1; the smoothing must not divide by zero
    ("[rules]\nmax_length_ratio = -1\n", "rules.max_length_ratio", "> 1"),
    ("[rules]\nmax_length_ratio = 1\n", "rules.max_length_ratio", "> 1"),
    ("[rules]\nlength_ratio_smoothing = 0\n", "rules.length_ratio_smoothing", "> 0"),
    # shares and probabilities are in [0, 1]
    ("[rules]\nmin_letter_share = 5.0\n", "rules.min_letter_share", "in [0, 1]"),
    ("[rules.tgt]\nmin_script_share = -0.1\n", "rules.tgt.min_script_share", "in [0, 1]"),
    ("[langid]\nmin_confidence = 2\n", "langid.min_confidence", "in [0, 1]"),
    ("[langid]\nmax_expected_p = 1.5\n", "langid.max_expected_p", "in [0, 1]"),
    ("[align]\nquantile = 1.0\n", "align.quantile", "in [0, 1)"),
    ("[align]\nquantile = -0.1\n", "align.quantile", "in [0, 1)"),
    # an align_score is at most about 0: a higher min_score rejects every pair
    ("[align]\nmin_score = 0.5\n", "align.min_score", "≤ 0"),
    # counts
    ("[rules]\nmin_chars = -1\n", "rules.min_chars", "≥ 0"),
    ("[rules]\nmax_chars = 0\n", "rules.max_chars", "≥ 1"),
    ("[rules.tgt]\nmax_words = 0\n", "rules.tgt.max_words", "≥ 1"),
    ("[rules]\nmax_char_run = 0\n", "rules.max_char_run", "≥ 1"),
    ("[rules]\nmax_word_run = 0\n", "rules.max_word_run", "≥ 1"),
    ("[langid]\nmin_chars = -5\n", "langid.min_chars", "≥ 0"),
    # the length-ratio band: spreads from the centre, and a ratio relative to it
    ("[rules]\nlength_ratio_z = 0\n", "rules.length_ratio_z", "> 0"),
    ("[rules]\nlength_ratio_floor = 0.5\n", "rules.length_ratio_floor", "≥ 1"),
    ("[dedup]\nmax_targets_per_source = -1\n", "dedup.max_targets_per_source", "≥ 0"),
    ("[align]\niterations = 0\n", "align.iterations", "≥ 1"),
    ("[align]\nmax_train_pairs = 0\n", "align.max_train_pairs", "≥ 1"),
    ("[align]\nseed = -1\n", "align.seed", "≥ 0"),
    # a minimum above its maximum: no side could pass
    ("[rules]\nmin_chars = 50\nmax_chars = 10\n", "rules.src.min_chars (50)", "max_chars (10)"),
    ("[rules.tgt]\nmin_words = 9\nmax_words = 3\n", "rules.tgt.min_words (9)", "max_words (3)"),
])
def test_a_value_out_of_range_is_refused_naming_key_value_and_range(tmp_path: Path, text: str,
                                                                    key: str, says: str):
    message = refusal(tmp_path, text)
    assert key in message and says in message, message


def test_a_minimum_above_a_default_maximum_is_refused_for_that_side(tmp_path: Path):
    # a Chinese side's max_chars defaults to 400, the English side's to 1000
    message = refusal(tmp_path, "[rules]\nmin_chars = 500\n", ("en", "zh"))
    assert "rules.tgt.min_chars (500)" in message and "rules.tgt.max_chars (400)" in message


def test_min_score_and_quantile_together_are_refused_choose_one(tmp_path: Path):
    # clean would use min_score and silently ignore the quantile
    message = refusal(tmp_path, "[align]\nmin_score = -3.0\nquantile = 0.1\n")
    assert "align.min_score" in message and "align.quantile" in message
    assert "choose one" in message


def test_leave_one_out_without_word_weights_is_refused_when_the_recipe_is_read(tmp_path: Path):
    # the counts it reads are kept with the weights: refused here, not after the rules ran
    message = refusal(tmp_path, "[align]\nleave_one_out = true\nidf_power = 0.0\n")
    assert "align.leave_one_out" in message and "idf_power" in message
    assert load(tmp_path, "[align]\nleave_one_out = true\n").align.leave_one_out is True


def test_min_score_alone_overrides_the_default_quantile(tmp_path: Path):
    recipe = load(tmp_path, "[align]\nmin_score = -3\n")
    assert recipe.align.min_score == -3.0 and isinstance(recipe.align.min_score, float)


@pytest.mark.parametrize("text", [
    "[rules]\nmin_letter_share = 0\nmin_script_share = 1\n",
    "[rules]\nmin_chars = 0\nmin_words = 0\n",
    "[rules]\nmin_chars = 7\nmax_chars = 7\nmin_words = 2\nmax_words = 2\n",
    "[rules]\nmax_length_ratio = 1.01\nlength_ratio_smoothing = 0.5\n",
    "[rules]\nlength_ratio_z = 0.1\nlength_ratio_floor = 1\nreject_mojibake = false\n",
    "[langid]\nscript_evidence = false\n",
    "[rules]\nmax_char_run = 1\nmax_word_run = 1\n",
    "[langid]\nmin_confidence = 0\nmax_expected_p = 1\nmin_chars = 0\n",
    "[dedup]\nmax_targets_per_source = 0\n",
    "[align]\nquantile = 0\niterations = 1\nmax_train_pairs = 1\nseed = 0\n",
    "[align]\nmin_score = 0\n",
])
def test_the_edges_of_each_range_are_allowed(tmp_path: Path, text: str):
    recipe = load(tmp_path, text)
    json.dumps(recipe.to_json(), allow_nan=False)  # what the report and manifest record


@pytest.mark.parametrize("langs,kind", [
    (["en", "de"], "parallel"), (["en", "zh"], "parallel"), (["ja", "en"], "parallel"),
    (["bn"], "mono"), ([], "parallel"),
])
def test_the_built_in_recipe_loads_and_is_valid_json(langs: list[str], kind: str):
    recipe = load_recipe(None, langs, kind)
    assert recipe == default_recipe(langs, kind)
    json.dumps(recipe.to_json(), allow_nan=False)


@pytest.mark.parametrize("lang,chars,words", [
    ("zh", 400, 400), ("ja", 400, 400), ("ko", 400, 400), ("yue", 400, 400),
    ("th", 1000, 1000), ("lo", 1000, 1000), ("km", 1000, 1000), ("my", 1000, 1000),
    ("bo", 1000, 1000), ("tha", 1000, 1000), ("de", 1000, 250), ("ru", 1000, 250),
])
def test_a_sides_length_limits_follow_what_its_script_writes_per_character(
        lang: str, chars: int, words: int):
    """Han, kana and Hangul say in 400 characters what Latin says in 1000; Thai, Lao, Khmer,
    Myanmar and Tibetan need as many characters as Latin, and count each letter as a word."""
    side = default_recipe(["en", lang]).rules.tgt
    assert (side.max_chars, side.max_words) == (chars, words)


@pytest.mark.parametrize("lang,code", [("khm", "km"), ("mya", "my"), ("bod", "bo"),
                                       ("lao", "lo"), ("tha", "th")])
def test_real_news_sentences_of_unspaced_scripts_are_not_too_long(corpora: Path, lang: str,
                                                                   code: str):
    """NTREX's 1,997 news sentences (up to 773 characters in Myanmar): none too long for the
    default recipe, as none of its English sources is."""
    def lines(name: str) -> list[str]:
        path = corpora / f"multiparallel/ntrex128/newstest2019-{name}.txt.gz"
        return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    batch = pa.record_batch({"src": pa.array(lines("src.eng")),
                             "tgt": pa.array(lines(f"ref.{lang}"))})
    stage = RulesStage(default_recipe(["en", code]).rules, ("src", "tgt"), ["en", code])
    rejects = dict(stage.apply(batch).rejects)
    assert not rejects["too_long_src"].any()
    assert not rejects["too_long_tgt"].any(), batch.column("tgt").filter(
        pa.array(rejects["too_long_tgt"]))[0]


@pytest.mark.parametrize("name,langs", [
    ("default", ["en", "de"]), ("en-de", ["en", "de"]), ("en-zh", ["en", "zh"]),
    ("en-bn", ["en", "bn"]),
])
def test_the_shipped_recipes_still_load(name: str, langs: list[str]):
    recipe = load_recipe(MANIFESTS / f"{name}.toml", langs)
    assert recipe.name == name and recipe.align.min_score is None


def test_default_toml_is_the_built_in_recipe_written_out():
    assert load_recipe(MANIFESTS / "default.toml", ["en", "de"]) == default_recipe(["en", "de"])


@pytest.mark.parametrize("make,key", [
    (lambda: Recipe(align=AlignConfig(iterations=0)), "align.iterations"),
    (lambda: replace(default_recipe(["en", "de"]),
                     rules=RulesConfig(max_length_ratio=math.nan)), "rules.max_length_ratio"),
    (lambda: Recipe(rules=RulesConfig(tgt=SideRules(min_chars=10, max_chars=5))),
     "rules.tgt.min_chars"),
])
def test_a_recipe_made_in_code_is_checked_too(make: Callable[[], Recipe], key: str):
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        make()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three en-de pairs: enough for clean to open, nothing to wait for."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "c.en").write_text("A dog runs.\nTwo cats sleep.\nA man reads a book.\n")
    (root / "c.de").write_text("Ein Hund rennt.\nZwei Katzen schlafen.\nEin Mann liest ein Buch.\n")
    ingest([root / "c.en", root / "c.de"], root / "ds")
    return root / "ds"


@pytest.mark.parametrize("text,key", [
    ("[rules]\nmax_length_ratio = nan\n", "rules.max_length_ratio"),
    ("[align]\nmin_score = 0.5\nquantile = 0.1\n", "align.min_score"),
])
def test_clean_exits_2_naming_the_key_before_doing_any_work(tiny: Path, tmp_path: Path,
                                                           text: str, key: str):
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    result = run_cli("clean", tiny, "--out", tmp_path / "out", "--recipe", recipe)
    assert result.exit_code == 2, result.stderr
    assert key in result.stderr and str(recipe) in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_rules_that_leave_no_pair_end_in_a_clear_error_not_an_empty_model(tiny: Path,
                                                                          tmp_path: Path):
    """Every row rejected before the align stage: nothing to train on or decide. The error
    names the rule that took the rows; allowed that loss, the align stage's own error."""
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "rules", "align"]\n[rules.tgt]\nmin_words = 50\n')
    result = run_cli("clean", tiny, "--out", tmp_path / "out", "--recipe", recipe)
    assert result.exit_code == 1
    assert ("clean stopped at the align stage: too_short_tgt rejects 3 of 3 rows"
            in result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("clean", tiny, "--out", tmp_path / "out", "--recipe", recipe,
                     "--allow-heavy-loss")
    assert result.exit_code != 0
    assert "no pairs left to train the alignment model" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
