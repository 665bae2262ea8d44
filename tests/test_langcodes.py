"""Language codes are checked where they enter, and a typo is refused with what it meant."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from spr_data import InputError, ingest
from spr_data.langcodes import _COUNTRY_LANGUAGE, LanguageCodeError, check_lang, problem, suggest
from spr_data.pipeline.sources import parse_langs
from spr_data.qa.scripts import normalize_lang
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("code", [
    "en", "de", "bn", "zh", "EN", "eng", "deu", "ger", "cmn", "yue", "fil", "ceb", "und", "mul",
    "zh-Hant", "zh-Hans-CN", "zh_CN", "pt-BR", "sr-Latn-RS", "es-419", "de-CH-1996",
    "ca-valencia", "zh-yue", "en-x-private", "iw", "sh", "als", "sla",
])
def test_real_codes_and_tags_are_accepted(code: str):
    assert problem(code) is None
    assert check_lang(code) == code


@pytest.mark.parametrize(("code", "meant"), [
    ("ge", "de"),   # the typo of the issue: de one key away
    ("jp", "ja"),   # a country code for the language
    ("cn", "zh"),
    ("gr", "el"),
    ("dw", "de"),
    ("englsh", None),
])
def test_a_wrong_code_is_refused_with_a_hint(code: str, meant: str | None):
    why = problem(code)
    assert why is not None and repr(code) in why
    if meant is not None:
        assert meant in suggest(code), suggest(code)
        assert "did you mean" in why and f"{meant} (" in why


@pytest.mark.parametrize(("tag", "part"), [
    ("zh-Hnat", "'Hnat' is not a script"), ("pt-BX", "'BX' is not a region"),
    ("en-", "empty subtag"), ("en-US-GB", "two region"), ("en-x", "private-use"),
    ("e1", "not a language code"),
])
def test_bad_subtags_are_named(tag: str, part: str):
    why = problem(tag)
    assert why is not None and part in why, why


def test_suggestions_are_ranked_by_how_common_the_language_is():
    """``ge`` is one edit from many codes; German (lid.176's third most common language) comes
    before Hebrew and Belarusian, and each language once (de, not also deu and ger)."""
    near = suggest("ge", limit=5)
    assert near[0] == "ka"  # GE is Georgia's country code
    assert near.index("de") < near.index("he")
    names = {normalize_lang(c) for c in near}
    assert len(names) == len(near)


def test_country_hints_are_for_codes_that_are_no_language_codes():
    for country, lang in _COUNTRY_LANGUAGE.items():
        assert problem(country) is not None, country
        assert problem(lang) is None, lang


def test_every_language_the_lid_stage_knows_is_accepted():
    """The codes normalize_lang and the script table know (what clean compares with) pass."""
    from spr_data.qa.scripts import LANGUAGE_SCRIPTS

    assert [c for c in LANGUAGE_SCRIPTS if problem(c) is not None] == []


def test_parse_langs_checks_each_code():
    assert parse_langs("en-de") == ["en", "de"]
    assert parse_langs("en,sr-Latn-RS") == ["en", "sr-Latn-RS"]
    with pytest.raises(LanguageCodeError, match=r"did you mean ka .*de"):
        parse_langs("en-ge")


def test_ingest_refuses_a_typo_in_langs_before_writing(corpora: Path, tmp_path: Path):
    en = corpora / "parallel/opennmt_wmt_en-de.train.en.gz"
    de = corpora / "parallel/opennmt_wmt_en-de.train.de.gz"
    result = run_cli("ingest", en, de, "--langs", "en-ge", "--out", tmp_path / "ds")
    assert result.exit_code == 2
    assert "'ge' is not a language code" in result.stderr and "de (German)" in result.stderr
    assert not (tmp_path / "ds").exists()
    with pytest.raises(LanguageCodeError, match="--lang"):
        ingest([corpora / "mono/ben_wiki_sipc.txt.gz"], tmp_path / "m", langs=["bq"])


def test_a_wrong_code_in_a_file_name_is_refused(tmp_path: Path):
    (tmp_path / "train.en").write_text("Hello\n")
    (tmp_path / "train.ge").write_text("Hallo\n")
    with pytest.raises(LanguageCodeError, match=r"train\.en .*pass --langs"):
        ingest([tmp_path / "train.en", tmp_path / "train.ge"], tmp_path / "ds")
    summary = ingest([tmp_path / "train.en", tmp_path / "train.ge"], tmp_path / "ds",
                     langs=["en", "de"])
    assert summary.langs == ["en", "de"] and summary.rows == 1


def test_the_table_is_generated_from_what_it_says():
    """tools/gen_language_codes.py --check: the shipped table is what the generator makes
    (skipped where Debian's iso-codes are not installed)."""
    if not Path("/usr/share/iso-codes/json/iso_639-3.json").is_file():
        pytest.skip("iso-codes not installed")
    done = subprocess.run([sys.executable, str(ROOT / "tools/gen_language_codes.py"),
                           "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_side_suffixes_are_no_languages(tmp_path: Path):
    """train.src + train.tgt name the sides: the rows are not labelled Logudorese Sardinian
    (ISO 639-3 ``src``), which clean would then expect."""
    (tmp_path / "train.src").write_text("Hello world\n")
    (tmp_path / "train.tgt").write_text("Hallo Welt\n")
    summary = ingest([tmp_path / "train.src", tmp_path / "train.tgt"], tmp_path / "ds")
    assert summary.langs == ["und", "und"] and summary.rows == 1


@pytest.mark.parametrize(("names", "langs", "said"), [
    (("val.en", "val.de"), ["en", "fr"], "val.de says de for the target, not fr"),
    (("val.en", "val.de"), ["en", "dee"], "val.de says de for the target, not dee"),  # Dewoin
    (("val.en", "val.de"), ["de", "en"], "(the source) says en"),  # swapped
    (("pairs.eng-cmn.tsv",), ["cmn", "eng"], "pairs.eng-cmn.tsv's name says eng-cmn"),
    (("pairs.en-de.tsv",), ["en", "fr"], "pairs.en-de.tsv says de for the target, not fr"),
])
def test_langs_a_file_name_contradicts_are_refused(tmp_path: Path, names: tuple[str, ...],
                                                   langs: list[str], said: str):
    files = []
    for name in names:
        files.append(tmp_path / name)
        files[-1].write_text("Hello world\tHallo Welt\n" if name.endswith(".tsv")
                             else "Hello world\n")
    with pytest.raises(InputError, match=re.escape(said)):
        ingest(files, tmp_path / "ds", langs=langs)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(("names", "langs"), [
    (("train.eng", "train.deu"), ["en", "de"]),  # other codes of the same languages
    (("train.zh", "train.en"), ["zh-CN", "en"]),
    (("train.en", "train.zh"), ["eng", "cmn"]),
    (("pairs.en-zh.tsv",), ["en", "yue"]),  # no ISO 639-1 code for Cantonese: not surely other
    (("train.src", "train.tgt"), ["en", "de"]),  # the sides' names, not languages
    (("train.en", "train.no"), ["en", "nb"]),  # Bokmål, named by its macrolanguage
])
def test_langs_a_file_name_allows_are_accepted(tmp_path: Path, names: tuple[str, ...],
                                              langs: list[str]):
    files = []
    for name in names:
        files.append(tmp_path / name)
        files[-1].write_text("Hello world\tHallo Welt\n" if name.endswith(".tsv")
                             else "Hello world\n")
    assert ingest(files, tmp_path / "ds", langs=langs).langs == langs


def test_a_moses_pair_named_apart_gives_its_languages(corpora: Path, tmp_path: Path):
    """NTREX's files: other stems (src, ref), a .txt before .gz. As a Moses pair, each name's
    code labels its side, and --langs they contradict is refused (swapped, or another
    language); read as text files (no --format), a pair asked for by --langs is refused with
    the option that reads them as one."""
    folder = corpora / "multiparallel/ntrex128"
    files = [folder / "newstest2019-src.eng.txt.gz", folder / "newstest2019-ref.rus.txt.gz"]
    summary = ingest(files, tmp_path / "ds", format="moses")
    assert summary.langs == ["eng", "rus"] and summary.rows == 1997
    with pytest.raises(InputError, match=r"contradicts the file names: \S*src\.eng\.txt\.gz "
                                         r"\(the source\) says eng"):
        ingest(files, tmp_path / "swapped", format="moses", langs=["ru", "en"])
    with pytest.raises(InputError, match=r"ref\.rus\.txt\.gz says rus for the target, not de"):
        ingest(files, tmp_path / "other", format="moses", langs=["en", "de"])
    with pytest.raises(InputError, match=r"are text input, a mono corpus; for the two "
                                         r"line-aligned files of a pair, pass --format moses"):
        ingest(files, tmp_path / "text", langs=["en", "ru"])
    assert not any((tmp_path / d).exists() for d in ("swapped", "other", "text"))


@pytest.mark.parametrize(("names", "langs"), [
    (("a.txt", "b.txt"), ["und", "und"]),  # no code in either name
    (("corpus.en.txt", "corpus.xx.txt"), ["und", "und"]),  # xx is no language code
    (("one.de.txt", "two.de.txt"), ["und", "und"]),  # the same code twice: no pair's
])
def test_a_moses_pair_whose_names_give_no_pair_stays_und(tmp_path: Path,
                                                        names: tuple[str, str],
                                                        langs: list[str]):
    for name in names:
        (tmp_path / name).write_text("Hello world\n")
    files = [tmp_path / name for name in names]
    assert ingest(files, tmp_path / "ds", format="moses").langs == langs


def test_two_text_files_named_apart_only_by_language_are_not_one_mono_corpus(tmp_path: Path):
    """``train.en.txt train.de.txt`` became a mono ``und`` corpus of both languages' lines;
    they are refused with the two ways to say what they are, each of which works."""
    for name, line in (("train.en.txt", "Two dogs play.\n"), ("train.de.txt", "Zwei Hunde.\n"),
                       ("notes.en.txt", "A note.\n")):
        (tmp_path / name).write_text(line * 20)
    pair = [tmp_path / "train.en.txt", tmp_path / "train.de.txt"]
    with pytest.raises(InputError, match=r"look like the two sides of a pair.*--format moses"):
        ingest(pair, tmp_path / "ds")
    parallel = ingest(pair, tmp_path / "parallel", format="moses")
    assert (parallel.kind, parallel.langs, parallel.rows) == ("parallel", ["en", "de"], 20)
    mixed = ingest(pair, tmp_path / "mixed", langs=["und"])
    assert (mixed.kind, mixed.rows) == ("mono", 40)
    # names that say more than a language apart: two corpora, a multilingual mono mix
    other = ingest([tmp_path / "train.de.txt", tmp_path / "notes.en.txt"], tmp_path / "mix")
    assert (other.kind, other.langs, other.rows) == ("mono", ["und"], 40)


def test_inputs_of_different_pairs_are_refused_not_labelled_und(tmp_path: Path):
    """As und-und, language id and the alignment model would check nothing."""
    for name in ("a.en", "a.de", "b.en", "b.fr"):
        (tmp_path / name).write_text("Hello world\n")
    files = [tmp_path / n for n in ("a.en", "a.de", "b.en", "b.fr")]
    with pytest.raises(InputError, match=r"different language pairs \(en-de, en-fr\)"):
        ingest(files, tmp_path / "ds")
    assert ingest(files, tmp_path / "ok", langs=["en", "mul"]).langs == ["en", "mul"]


@pytest.mark.parametrize(("name", "chosen", "lang"), [
    ("pairs.eng-cmn.tsv", {"columns": ["0"]}, "eng"),
    ("pairs.eng-cmn.tsv", {"columns": ["1"]}, "cmn"),
    ("pairs.en-bn.jsonl", {"keys": ["bn"]}, "bn"),
    ("pairs.en-bn.jsonl", {"keys": ["text"]}, "und"),  # a field the name says nothing of
    ("news.zh-cn.txt", {}, "zh-cn"),  # one field: a region, not a pair
])
def test_one_field_of_a_pair_named_file_is_that_fields_language(
        tmp_path: Path, name: str, chosen: dict[str, list[str]], lang: str):
    """Not the pair read as one code (a mono dataset labelled ``eng-cmn``)."""
    path = tmp_path / name
    path.write_text('{"en": "Hello world", "bn": "হ্যালো", "text": "Hello"}\n'
                    if name.endswith(".jsonl") else "Hello world\t你好世界\n")
    summary = ingest([path], tmp_path / "ds", **chosen)
    assert summary.kind == "mono" and summary.langs == [lang]


def test_a_lang_the_chosen_column_contradicts_is_refused(tmp_path: Path):
    path = tmp_path / "pairs.eng-cmn.tsv"
    path.write_text("Hello world\t你好世界\n")
    said = r"--lang zh contradicts the file name: \S*pairs\.eng-cmn\.tsv says eng, not zh; "
    with pytest.raises(InputError, match=said + "pass --lang eng"):
        ingest([path], tmp_path / "ds", langs=["zh"], columns=["0"])
    assert ingest([path], tmp_path / "ok", langs=["zh"], columns=["1"]).langs == ["zh"]
