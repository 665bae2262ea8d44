"""Script and character-class profiles: the Unicode facts they rest on, and real text.

The script table must say what Unicode's Script property says (not Script_Extensions), the
vectorized counts must agree with a slow per-character reference, and on real corpora every
language must come out in its own script.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spr_data.errors import InputError
from spr_data.qa.scripts import (
    CJK,
    LANGUAGE_SCRIPTS,
    NO_SCRIPT,
    OTHER_SCRIPT,
    SCRIPT_NAMES,
    TextProfile,
    ends_in_letter,
    expected_scripts,
    normalize_lang,
    profile,
    script_ranges,
    scripts_of,
    visible_counts,
)

FIELDS = ("chars", "letters", "digits", "spaces", "punct", "symbols", "other", "cjk", "words",
          "max_char_run")
ROOT = Path(__file__).resolve().parents[1]


def col(name: str) -> int:
    return SCRIPT_NAMES.index(name)


def read_lines(path: Path) -> list[str]:
    """Lines of a (gzipped) text file without their line ends (NTREX ends lines in CRLF)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return [line.rstrip("\r\n") for line in f]


def ntrex_files(corpora: Path) -> list[tuple[str, Path]]:
    folder = corpora / "multiparallel" / "ntrex128"
    return [(p.name.split(".")[1], p) for p in sorted(folder.glob("newstest2019-*.txt.gz"))]


# --- the script table ------------------------------------------------------------------------

def test_table_covers_every_code_point_once_and_stays_small():
    starts, ends, names = script_ranges()
    assert starts[0] == 0 and ends[-1] == 0x10FFFF
    assert np.array_equal(starts[1:], ends[:-1] + 1)
    assert all(a != b for a, b in itertools.pairwise(names)), "ranges are maximal"
    assert len(names) < 3000
    assert {"Latin", "Bengali", "Han", "Common", "Inherited", "Unknown"} <= set(names)
    text = (ROOT / "spr_data" / "qa" / "unicode_scripts.tsv").read_text(encoding="utf-8")
    assert text.startswith("# ") and "polars" in text and "Unicode" in text


def test_table_uses_script_not_script_extensions():
    cps = [0x0964, 0x0965, 0x09CD, 0x0995, 0x200C, 0x200D, 0x0301, 0x30FC, 0x3005, 0x0E01]
    assert scripts_of(cps).tolist() == [
        "Common", "Common",  # DANDA / DOUBLE DANDA: scx={Beng, Deva, ...} but sc=Common
        "Bengali", "Bengali",  # BENGALI SIGN VIRAMA (a mark), BENGALI LETTER KA
        "Inherited", "Inherited", "Inherited",  # ZWNJ, ZWJ, COMBINING ACUTE ACCENT
        "Common", "Han", "Thai",  # KATAKANA-HIRAGANA PROLONGED SOUND MARK, 々, ก
    ]
    assert scripts_of([0xE000, 0x0378, 0x10FFFF]).tolist() == ["Unknown"] * 3
    with pytest.raises(InputError):
        scripts_of([0x110000])


@pytest.mark.slow
def test_table_agrees_with_re2_on_every_character_python_knows():
    """RE2 (inside pyarrow) is an independent engine; both read \\p{Name} as Script."""
    cps = np.array([c for c in range(0x110000) if not 0xD800 <= c < 0xE000
                    and unicodedata.category(chr(c)) not in ("Cn", "Co")])
    ours = scripts_of(cps)
    chars = pa.array([chr(c) for c in cps])
    for name in sorted(set(ours.tolist()) & set(SCRIPT_NAMES)):
        hit = pc.match_substring_regex(chars, rf"\p{{{name}}}").to_numpy(zero_copy_only=False)
        mismatch = np.flatnonzero(hit != (ours == name))
        assert not mismatch.size, f"{name}: first mismatch U+{cps[mismatch[0]]:04X}"


@pytest.mark.slow
def test_generated_table_is_up_to_date():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_unicode_scripts.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.main(["--check"]) == 0


# --- counts against a slow reference --------------------------------------------------------

def column_of(ch: str) -> str:
    name = str(scripts_of([ord(ch)])[0])
    return name if name in SCRIPT_NAMES else OTHER_SCRIPT


def char_class(ch: str) -> str:
    cat = unicodedata.category(ch)
    if ch.isspace() or cat[0] == "Z":
        return "spaces"
    if cat[0] in "LM" or cat == "Nl":
        return "letters"
    if cat == "Nd":
        return "digits"
    if cat[0] == "P":
        return "punct"
    if cat[0] == "S" or cat == "No":
        return "symbols"
    return "other"


def reference(text: str) -> dict[str, object]:
    """The documented rules, one character at a time."""
    counts: dict[str, object] = dict.fromkeys(FIELDS, 0)
    letters = [0] * len(SCRIPT_NAMES)
    classes = [char_class(ch) for ch in text]
    cjk = [c == "letters" and column_of(ch) in CJK for ch, c in zip(text, classes, strict=True)]
    for ch, c, is_cjk in zip(text, classes, cjk, strict=True):
        counts[c] += 1  # type: ignore[operator]
        if c == "letters":
            letters[col(column_of(ch))] += 1
        counts["cjk"] += is_cjk  # type: ignore[operator]
    counts["chars"] = len(text)
    # words: every CJK letter, plus tokens between spaces / CJK letters, minus glued punctuation
    words, i = sum(cjk), 0
    while i < len(text):
        if cjk[i] or classes[i] == "spaces":
            i += 1
            continue
        j = i
        while j + 1 < len(text) and not cjk[j + 1] and classes[j + 1] != "spaces":
            j += 1
        touches = (i > 0 and cjk[i - 1]) or (j + 1 < len(text) and cjk[j + 1])
        wordy = any(c in ("letters", "digits") for c in classes[i:j + 1])
        words += wordy or not touches
        i = j + 1
    counts["words"] = words
    run = best = 0
    for k, ch in enumerate(text):
        run = run + 1 if k and text[k - 1] == ch else 1
        best = max(best, run)
    counts["max_char_run"] = best
    counts["script_letters"] = letters
    return counts


def assert_matches_reference(prof: TextProfile, texts: list[str | None]) -> None:
    assert len(prof) == len(texts)
    for i, text in enumerate(texts):
        want = reference(text or "")
        got = {f: int(getattr(prof, f)[i]) for f in FIELDS}
        got["script_letters"] = prof.script_letters[i].tolist()
        assert got == want, f"row {i}: {text!r}"


INTERESTING = ("ab Zé", "\u0301", "১২৩ বাংলা।", "\u0964\u0965", "\u09cd\u200c\u200d", "中文",
               "。、「」", "ー", "ｰ", "カナ", "ひら", "ไทย", "ລາວ", "ខ្មែរ", "မြန်", "བོད་",
               "한국", "Ⅻ〇", "½²①", "\t\n\r \u3000\xa0", "!!!", "aaa", "\ufeff", "\x00\x1f",
               "ᚠᚢ", "𓀀", "\U0001f600", "٣٤", "\U000e0001", "\ue000")
TEXT = st.lists(st.one_of(st.sampled_from(INTERESTING),
                          st.text(st.characters(blacklist_categories=("Cs",)), max_size=4)),
                max_size=8).map("".join)


@given(texts=st.lists(st.one_of(st.none(), TEXT), max_size=12), data=st.data())
def test_counts_agree_with_a_per_character_reference(texts: list[str | None],
                                                     data: st.DataObject):
    arr = pa.array(texts, pa.string())
    lo = data.draw(st.integers(0, len(texts)))
    hi = data.draw(st.integers(lo, len(texts)))
    assert_matches_reference(profile(arr.slice(lo, hi - lo)), texts[lo:hi])


@given(texts=st.lists(st.one_of(st.none(), TEXT), max_size=12), data=st.data())
def test_ends_in_letter_agrees_with_the_character_categories(texts: list[str | None],
                                                             data: st.DataObject):
    """The last code point decoded from the UTF-8 bytes (1 to 4 of them), letters (and letter
    numbers: Ⅻ) and marks of any script, on sliced arrays too."""
    arr = pa.array(texts, pa.string())
    lo = data.draw(st.integers(0, len(texts)))
    hi = data.draw(st.integers(lo, len(texts)))
    expected = [bool(t) and (unicodedata.category(t[-1])[0] in "LM"
                             or unicodedata.category(t[-1]) == "Nl") for t in texts[lo:hi]]
    assert ends_in_letter(arr.slice(lo, hi - lo)).tolist() == expected


@given(texts=st.lists(TEXT, max_size=12))
def test_every_character_has_exactly_one_class(texts: list[str]):
    prof = profile(pa.array(texts))
    total = prof.letters + prof.digits + prof.spaces + prof.punct + prof.symbols + prof.other
    assert np.array_equal(total, prof.chars)
    assert np.array_equal(prof.script_letters.sum(axis=1), prof.letters)
    assert np.array_equal(prof.chars, [len(t) for t in texts])
    assert (prof.cjk <= prof.words).all() and (prof.max_char_run <= prof.chars).all()


# --- words and runs -------------------------------------------------------------------------

def test_words_are_whitespace_tokens_for_spaced_scripts_and_letters_for_cjk():
    texts = ["Hello , world !", "I love you.", "我爱你。", "我爱Python。",
             "「こんにちは」と言った。", "Tom 和 Mary 是朋友。", "ราคา 100 บาท", "  ",
             "e-mail: a@b.c  ok", "コーヒー"]
    prof = profile(pa.array(texts))
    assert prof.words.tolist() == [4, 3, 3, 3, 9, 6, 8, 0, 3, 4]
    assert prof.cjk.tolist() == [0, 0, 3, 2, 9, 4, 7, 0, 0, 2]


def test_english_words_are_split_tokens_on_tatoeba(corpora: Path):
    rows = [line.lstrip("\ufeff").split("\t") for line in
            read_lines(corpora / "parallel" / "tatoeba_manythings_eng-cmn.tsv.gz") if line]
    eng = [r[0] for r in rows]
    cmn = [r[1] for r in rows]
    prof_en = profile(pa.array(eng))
    assert prof_en.words.tolist() == [len(t.split()) for t in eng]
    assert not prof_en.cjk.any()
    prof_zh = profile(pa.array(cmn))
    # Chinese: a word per Han character, and Latin names add one word each
    han = prof_zh.script_letters[:, col("Han")]
    assert (prof_zh.words >= han).all()
    assert (prof_zh.words == han).mean() > 0.95
    assert 1.2 < prof_zh.words.sum() / prof_en.words.sum() < 2.0  # measured: 1.4


def test_max_char_run_counts_repeats_within_a_row_only():
    texts = ["!!!!!", "Hello", "ab", "b", "bb", "", "a  b", "ﾟﾟﾟ ok", "\U0001f600" * 7]
    prof = profile(pa.array(texts))
    assert prof.max_char_run.tolist() == [5, 2, 1, 1, 2, 0, 2, 3, 7]


# --- Arrow layouts --------------------------------------------------------------------------

def test_slices_nulls_and_layouts_give_the_same_profile():
    texts = ["Hi.", None, "যাও।", "", "中文字 ok", None, "aaa!!"]
    arr = pa.array(texts, pa.string())
    base = profile(pa.array([t or "" for t in texts]))
    variants = [arr, arr.cast(pa.large_string()), arr.cast(pa.string_view()),
                arr.dictionary_encode(), pa.chunked_array([arr.slice(0, 3), arr.slice(3)])]
    for variant in variants:
        prof = profile(variant)
        for field in (*FIELDS, "script_letters"):
            assert np.array_equal(getattr(prof, field), getattr(base, field)), field
    sliced = profile(arr.slice(2, 3))
    assert sliced.chars.tolist() == [4, 0, 6]
    assert sliced.dominant_script().tolist() == ["Bengali", NO_SCRIPT, "Han"]


def test_a_batch_profiled_in_runs_of_rows_counts_as_in_one_pass(corpora: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """Text beyond ``_PROFILE_BYTES`` is profiled in runs of rows (bounded temporaries): the
    counts are those of one pass, whatever the runs (NTREX in every script, nulls, empties)."""
    import spr_data.qa.scripts as scripts

    lines: list[str | None] = []
    for _, path in ntrex_files(corpora)[::4]:
        lines += read_lines(path)[:300]
    lines[::97] = [None] * len(lines[::97])
    lines[1::89] = [""] * len(lines[1::89])
    arr = pa.array(lines, pa.string()).slice(5)
    whole = profile(arr)
    for limit in (1, 1000, 65_536):
        monkeypatch.setattr(scripts, "_PROFILE_BYTES", limit)
        runs = profile(arr)
        for field in (*FIELDS, "script_letters"):
            assert np.array_equal(getattr(runs, field), getattr(whole, field)), (limit, field)


@given(texts=st.lists(st.one_of(st.none(), TEXT), max_size=12), data=st.data())
def test_visible_counts_are_the_profile_s(texts: list[str | None], data: st.DataObject):
    """What a length reads (the align stage's length fit), counted alone: the profile's
    non-space characters and CJK letters, on slices and nulls too."""
    arr = pa.array(texts, pa.string())
    lo = data.draw(st.integers(0, len(texts)))
    hi = data.draw(st.integers(lo, len(texts)))
    part = arr.slice(lo, hi - lo)
    visible, cjk = visible_counts(part)
    prof = profile(part)
    assert np.array_equal(visible, prof.chars - prof.spaces)
    assert np.array_equal(cjk, prof.cjk)


def test_visible_counts_in_runs_of_rows_are_those_of_one_pass(corpora: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    import spr_data.qa.scripts as scripts

    lines: list[str | None] = []
    for _, path in ntrex_files(corpora)[::4]:
        lines += read_lines(path)[:300]
    lines[::97] = [None] * len(lines[::97])
    arr = pa.chunked_array([pa.array(lines, pa.string()).slice(5)])
    prof = profile(arr)
    for limit in (1, 1000, 65_536):
        monkeypatch.setattr(scripts, "_PROFILE_BYTES", limit)
        visible, cjk = visible_counts(arr)
        assert np.array_equal(visible, prof.chars - prof.spaces), limit
        assert np.array_equal(cjk, prof.cjk), limit


def test_null_slots_that_own_bytes_count_as_empty():
    # Arrow lets a null slot span bytes; those must not leak into any row
    data = pa.py_buffer("abc中文xyz".encode())
    offsets = pa.py_buffer(np.array([0, 3, 9, 12], dtype=np.int32).tobytes())
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    arr = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
    assert profile(arr).chars.tolist() == [3, 0, 3]


def test_empty_arrays_and_empty_rows():
    for arr in (pa.array([], pa.string()), pa.array(["a"]).slice(1)):
        prof = profile(arr)
        assert len(prof) == 0
        assert prof.script_letters.shape == (0, len(SCRIPT_NAMES))
        assert prof.dominant_script().tolist() == []
        assert prof.script_share(["Latin"]).tolist() == []
    for arr in (pa.array(["", None, ""]), pa.array([None, None, None])):
        prof = profile(arr)
        assert prof.chars.tolist() == [0, 0, 0] and prof.words.tolist() == [0, 0, 0]
        assert prof.dominant_script().tolist() == [NO_SCRIPT] * 3
        assert prof.script_share(["Latin"]).tolist() == [0.0] * 3


def test_bad_inputs_are_reported_not_crashed_on():
    with pytest.raises(InputError, match="string"):
        profile(pa.array([1, 2]))
    bad = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array(
        [0, 2], dtype=np.int32).tobytes()), pa.py_buffer(b"\xff\xfe")])
    with pytest.raises(InputError, match="UTF-8"):
        profile(bad)
    with pytest.raises(InputError, match="unknown script"):
        profile(pa.array(["x"])).script_share(["Bangla"])


# --- scripts on real text -------------------------------------------------------------------

def test_bengali_danda_is_common_punctuation_and_bengali_dominates(corpora: Path):
    rows = read_lines(corpora / "parallel" / "tatoeba_manythings_eng-ben.tsv")
    ben = [r.split("\t")[1] for r in rows if r]
    prof = profile(pa.array(ben))
    with_danda = np.array(["\u0964" in t for t in ben])
    assert with_danda.mean() > 0.5
    assert prof.script_letters[:, col("Devanagari")].sum() == 0
    assert (prof.punct[with_danda] >= 1).all()
    assert (prof.dominant_script() == "Bengali").mean() >= 0.99
    first = profile(pa.array(["যাও।"]))
    assert first.script_letters[0, col("Bengali")] == 3 and first.punct[0] == 1
    assert first.script_share(["Bengali"])[0] == 1.0


def test_bengali_hasanta_zwnj_stays_bengali(corpora: Path):
    lines = read_lines(corpora / "mono" / "ben_poetry_public_domain.txt.gz")[:5000]
    prof = profile(pa.array(lines))
    zwnj = np.array(["\u09cd\u200c" in t for t in lines])
    assert zwnj.any()
    assert (prof.other[zwnj] >= 1).all()  # ZWNJ is a format character, not a letter
    assert (prof.dominant_script()[prof.letters > 0] == "Bengali").mean() > 0.99


def test_chinese_news_is_han_with_a_measurable_latin_share(corpora: Path):
    lines = read_lines(corpora / "multiparallel" / "ntrex128" /
                       "newstest2019-ref.zho-CN.txt.gz")
    prof = profile(pa.array(lines))
    dominant = prof.dominant_script()
    assert (dominant == "Han").mean() >= 0.95
    latin = prof.script_letters[:, col("Latin")]
    assert 0.02 < latin.sum() / prof.letters.sum() < 0.15  # names, acronyms (about 6%)
    assert ((latin > 0) & (dominant == "Han")).sum() > 100
    share = prof.script_share(["Han"])
    assert 0.85 < share.mean() < 0.99


@pytest.mark.parametrize("index", range(35))
def test_each_ntrex_language_is_dominantly_in_its_expected_script(corpora: Path, index: int):
    files = ntrex_files(corpora)
    assert len(files) == 35  # English source + 34 translations
    lang, path = files[index]
    lines = read_lines(path)
    assert len(lines) == 1997 and not any("\r" in t for t in lines)
    scripts = expected_scripts(lang)
    assert scripts is not None, lang
    dominant = profile(pa.array(lines)).dominant_script()
    assert np.isin(dominant, scripts).mean() >= 0.95, (lang, scripts)


def test_bom_and_tab_are_not_letters():
    prof = profile(pa.array(["\ufeffHi.", "a\tb"]))
    assert prof.other.tolist() == [1, 0] and prof.letters.tolist() == [2, 2]
    assert prof.spaces.tolist() == [0, 1] and prof.words.tolist() == [1, 2]


# --- dominant script and share --------------------------------------------------------------

def test_dominant_script_ignores_common_and_inherited():
    texts = ["123 !?", "ᚠᚢᚦ", "ab中", "ーー", "e\u0301", "中文ab"]
    prof = profile(pa.array(texts))
    assert prof.dominant_script().tolist() == [NO_SCRIPT, OTHER_SCRIPT, "Latin", NO_SCRIPT,
                                               "Latin", "Han"]


def test_script_share_treats_common_and_inherited_letters_as_neutral():
    texts = ["cafe\u0301", "コーヒー", "abc中", "", "123", "Привет hi"]
    prof = profile(pa.array(texts))
    assert prof.script_share(["Latin"]).tolist() == [1.0, 0.5, 0.75, 0.0, 0.0, 2 / 8]
    assert prof.script_share(expected_scripts("ja") or ()).tolist()[1] == 1.0
    assert prof.script_share(["Cyrillic", "Latin"])[5] == 1.0


# --- languages ------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "iso1"), [
    ("en", "en"), ("eng", "en"), ("cmn", "zh"), ("zh-CN", "zh"), ("zho-TW", "zh"),
    ("zh_Hant_TW", "zh"), ("ben", "bn"), ("pes", "fa"), ("fas", "fa"), ("arb", "ar"),
    ("eng-GB", "en"), ("ger", "de"), ("iw", "he"), ("__label__fr", "fr"), ("yue", "yue"),
    ("fil", "fil"), ("und", "und"), ("", ""), ("SPA", "es"), ("nob", "nb"),
])
def test_normalize_lang_gives_iso_639_1_where_one_exists(code: str, iso1: str):
    assert normalize_lang(code) == iso1


@pytest.mark.parametrize(("code", "scripts"), [
    ("en", ("Latin",)), ("eng", ("Latin",)), ("zh", ("Han",)), ("zho", ("Han",)),
    ("cmn", ("Han",)), ("zh-CN", ("Han",)), ("zho-TW", ("Han",)),
    ("ja", ("Han", "Hiragana", "Katakana")), ("jpn", ("Han", "Hiragana", "Katakana")),
    ("ko", ("Hangul", "Han")), ("kor", ("Hangul", "Han")), ("bn", ("Bengali",)),
    ("ben", ("Bengali",)), ("hi", ("Devanagari",)), ("mar", ("Devanagari",)),
    ("ne", ("Devanagari",)), ("nep", ("Devanagari",)), ("ru", ("Cyrillic",)),
    ("uk", ("Cyrillic",)), ("ar", ("Arabic",)), ("fa", ("Arabic",)), ("pes", ("Arabic",)),
    ("ur", ("Arabic",)), ("he", ("Hebrew",)), ("el", ("Greek",)), ("th", ("Thai",)),
    ("ka", ("Georgian",)), ("hy", ("Armenian",)), ("am", ("Ethiopic",)), ("ta", ("Tamil",)),
    ("te", ("Telugu",)), ("gu", ("Gujarati",)), ("pa", ("Gurmukhi",)), ("si", ("Sinhala",)),
    ("km", ("Khmer",)), ("lo", ("Lao",)), ("my", ("Myanmar",)), ("bo", ("Tibetan",)),
    ("ml", ("Malayalam",)), ("kn", ("Kannada",)), ("or", ("Oriya",)), ("de", ("Latin",)),
    ("fr", ("Latin",)), ("cs", ("Latin",)), ("tr", ("Latin",)), ("vi", ("Latin",)),
    ("es", ("Latin",)), ("it", ("Latin",)), ("pt-BR", ("Latin",)), ("nl", ("Latin",)),
    ("pl", ("Latin",)), ("id", ("Latin",)), ("sw", ("Latin",)),
    ("sr-Latn", ("Latin",)), ("srp-Cyrl", ("Cyrillic",)), ("pa-Arab", ("Arabic",)),
    ("aze-Latn", ("Latin",)), ("ckb-Arab", ("Arabic",)), ("zh-Hant", ("Han",)),
    ("und", None), ("mul", None), ("xx", None), ("", None), ("12", None),
])
def test_expected_scripts_of_language_tags(code: str, scripts: tuple[str, ...] | None):
    assert expected_scripts(code) == scripts


def test_every_expected_script_is_a_profile_column():
    for code, scripts in LANGUAGE_SCRIPTS.items():
        assert set(scripts) <= set(SCRIPT_NAMES), code
        assert normalize_lang(code) in LANGUAGE_SCRIPTS, code


def test_dense_scripts_come_first_and_cjk_is_a_column_set():
    assert set(SCRIPT_NAMES[:len(CJK)]) == CJK
    assert SCRIPT_NAMES[-3:] == ("Common", "Inherited", "Unknown")
    assert len(set(SCRIPT_NAMES)) == len(SCRIPT_NAMES)


# --- the byte-level helpers the clean rules run on (issue 16: same answers, less work) --------

EDGES = ["", "a", "<", "&amp;", "www.x", "xwww.", "ww", "w.", "a/b", "@", "  ", " ", "ä", "Ã©",
         "K", "\u212a", "\u017f", "\u0130", "\ufffd", "\x00", "\t", "\u00a0", "\u3000", "\ufeff",
         "好", "\U0001f600", "ab ab ab ab ab", "Ab AB aB ab ab ab", "\u212a \u212a k K k k"]


def _edge_arrays() -> list[pa.Array]:
    rows = [a + b for a in EDGES for b in ("", " ", "w", "ww.")] + [None]
    arr = pa.array(rows, pa.string())
    return [arr, arr.slice(3, 40), arr.cast(pa.large_string()),
            pa.chunked_array([arr[:7], arr[7:]])]


@pytest.mark.parametrize("groups", [[(b"<", b"&")], [(b"www.", b"@", b"/"), (b"  ",)],
                                    [("ä".encode(), "\u212a".encode(), b"ab ab")]])
def test_rows_containing_is_match_substring_per_needle(groups: list[tuple[bytes, ...]]):
    from spr_data.qa.scripts import rows_containing

    for arr in _edge_arrays():
        got = rows_containing(arr, *groups)
        for mask, needles in zip(got, groups, strict=True):
            want = np.zeros(len(arr), dtype=bool)
            for needle in needles:
                want |= np.asarray(pc.match_substring(arr, needle.decode()).fill_null(False)
                                   .to_numpy(zero_copy_only=False), dtype=bool)
            assert np.array_equal(mask, want), needles


def test_byte_flags_is_isin():
    from spr_data.qa.scripts import byte_flags

    raw = np.frombuffer(bytes(range(256)) * 3, dtype=np.uint8)
    for values in ([0], [0x20, 0xff], list(range(0x80, 0x100))):
        assert np.array_equal(byte_flags(raw, values), np.isin(raw, values))


@pytest.mark.parametrize("text", ["plain ASCII", "Grüße, café", "„quotes“ – €", "中文。",
                                  "emoji \U0001f600 x", "ÿ\u0100"])
def test_every_code_point_width_profiles_like_the_reference(text: str):
    texts = [text, text + " " + text, "", "ab"]
    assert_matches_reference(profile(pa.array(texts)), texts)  # uint8, uint16 and uint32 paths


def test_word_runs_over_is_max_word_run_over_the_limit():
    from spr_data.qa.rules import max_word_run, word_runs_over

    for arr in _edge_arrays():
        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        for limit in (1, 2, 3, 4, 5, 9, 10, 12):
            assert np.array_equal(word_runs_over(arr, limit), max_word_run(arr) > limit), limit


def test_mojibake_candidates_hold_every_row_the_patterns_match():
    from spr_data.qa import rules

    texts = pa.array(EDGES + [a + b for a in ("Ã", "lidÃ", "Ä€", "ß“", "à€™", "ð\x9f\x98\x80")
                              for b in ("", " ", "x", "™", ".")])
    some = pc.count_substring_regex(texts, rules._MOJIBAKE_STRONG).to_numpy(zero_copy_only=False)
    weak = pc.count_substring_regex(texts, rules._MOJIBAKE_WEAK).to_numpy(zero_copy_only=False)
    # the cp1252 part (a row wholly read as another code page adds 1: "Ä€" is "Ā" in cp1250)
    legacy = rules._legacy_mojibake(texts)
    assert np.array_equal(rules.mojibake_score(texts) - legacy, some + 0.5 * weak)
    assert rules.mojibake_score(texts).max() >= 1
    # the code-page part looks at every row one of its pages could have misread
    brute = [float(rules._misread_row(t or "", page))
             for t in texts.to_pylist() for page in rules._CODE_PAGES]
    expected = np.asarray(brute).reshape(len(texts), -1).max(axis=1)
    assert np.array_equal(legacy, expected)


def test_normalize_cleanup_leads_cover_every_character_the_regexes_match():
    from spr_data.qa import normalize

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000 and c != 0x20]
    arr = pa.array(chars, pa.string())
    leads = set()
    for pattern in (normalize.INVISIBLE, f"[{normalize._WS}]", r"[^ \PZ\x{20}]"):
        hit = pc.match_substring_regex(arr, pattern).to_numpy(zero_copy_only=False)
        leads |= {chars[i].encode()[0] for i in np.flatnonzero(hit)}
    assert leads <= set(normalize.CLEANUP_LEADS)
    # with only plain spaces, two in a row is the one way to match
    assert not pc.match_substring_regex(pa.array([" a b "]), normalize.WHITESPACE).to_pylist()[0]
    assert pc.match_substring_regex(pa.array(["a  b"]), normalize.WHITESPACE).to_pylist()[0]


def test_normalize_nfc_only_skips_rows_below_u0300():
    from spr_data.qa.normalize import _nfc

    texts = pa.array(["e\u0301", "é", "Å", "\u212b", "ä", "한", "\u1100\u1161", "ÿ", None])
    want = pc.utf8_normalize(texts.fill_null(""), form="NFC").to_pylist()
    got = _nfc(texts).to_pylist()
    assert got[:-1] == want[:-1] and got[-1] is None
