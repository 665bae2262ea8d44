"""``spr-data fertility-report`` on NTREX-128, checked against the tokenizer libraries directly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spr_data import tokenizers
from spr_data.pipeline import fertility as F
from spr_data.pipeline.fertility import fertility_report, read_sources
from spr_data.tokenizers import load_tokenizer
from tests.conftest import run_cli

FILES = {"en": "newstest2019-src.eng", "bn": "newstest2019-ref.ben", "hi": "newstest2019-ref.hin",
         "zh": "newstest2019-ref.zho-CN", "ru": "newstest2019-ref.rus",
         "ar": "newstest2019-ref.arb"}


def ntrex(corpora: Path, lang: str) -> Path:
    return corpora / "multiparallel/ntrex128" / f"{FILES[lang]}.txt.gz"


def lines(path: Path) -> list[str]:
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    return [line for line in text.replace("\r\n", "\n").split("\n") if line]


@pytest.fixture(scope="module")
def report(corpora: Path) -> dict:
    tokenizers = corpora / "tokenizers"
    sources = read_sources([ntrex(corpora, lang) for lang in FILES])
    toks = [load_tokenizer(f"gpt2={tokenizers / 'gpt2-vocab.json'}"),
            load_tokenizer(f"llama2={tokenizers / 'llama2_tokenizer.model'}"),
            load_tokenizer("chars")]
    return fertility_report(sources, toks)


def test_chars_per_token_match_the_libraries_within_half_a_percent(corpora: Path, report: dict):
    import sentencepiece as spm
    from tokenizers import ByteLevelBPETokenizer

    tokenizers = corpora / "tokenizers"
    sp = spm.SentencePieceProcessor(model_file=str(tokenizers / "llama2_tokenizer.model"))
    bpe = ByteLevelBPETokenizer(str(tokenizers / "gpt2-vocab.json"),
                                str(tokenizers / "gpt2-merges.txt"))
    for lang in FILES:
        texts = lines(ntrex(corpora, lang))
        chars = sum(len(t) for t in texts)
        direct = {"llama2": chars / sum(len(sp.encode(t)) for t in texts),
                  "gpt2": chars / sum(len(bpe.encode(t).ids) for t in texts)}
        for name, expected in direct.items():
            got = report["tokenizers"][name]["by_lang"][lang]["chars_per_token"]
            assert got == pytest.approx(expected, rel=0.005), (name, lang)
        assert report["tokenizers"]["llama2"]["by_lang"][lang]["tokens"] == \
            sum(len(sp.encode(t)) for t in texts)


def test_characters_exclude_line_breaks_and_the_chars_baseline_is_one(report: dict):
    chars = report["tokenizers"]["chars"]["by_lang"]
    assert all(m["chars_per_token"] == 1.0 for m in chars.values())
    assert chars["bn"]["chars"] == chars["bn"]["tokens"]


def test_scripts_group_segments_despite_danda_and_latin_names(report: dict):
    by_script = report["tokenizers"]["gpt2"]["by_script"]
    assert by_script["Bengali"]["segments"] >= 1990  # U+0964 danda is Common, not Devanagari
    assert by_script["Han"]["segments"] >= 1950 and by_script["Han"]["spaceless_script"]
    assert by_script["Devanagari"]["segments"] >= 1990


def test_parity_on_multi_parallel_lines(report: dict):
    gpt2 = report["tokenizers"]["gpt2"]["by_lang"]
    assert gpt2["en"]["parity"] == 1.0
    assert gpt2["bn"]["parity"] > 3 and gpt2["ru"]["parity"] > 1.5
    assert gpt2["bn"]["parity"] == pytest.approx(gpt2["bn"]["tokens"] / gpt2["en"]["tokens"],
                                                 rel=1e-3)


def test_the_report_flags_the_mark_splitting_trap(report: dict):
    gpt2 = report["tokenizers"]["gpt2"]["by_script"]
    assert gpt2["Devanagari"]["mark_split_rate"] > 0.02
    assert any("gpt2" in w and "combining mark" in w for w in report["warnings"])
    assert any("Bengali gets" in w for w in report["warnings"])


def test_contract_keys(report: dict):
    for data in report["tokenizers"].values():
        for group in ("by_script", "by_lang"):
            for m in data[group].values():
                assert {"chars_per_token", "bytes_per_token", "tokens_per_word",
                        "byte_fallback_rate", "char_share", "token_share"} <= set(m)


def test_tiktoken_ranks_files_load(corpora: Path):
    llama3 = load_tokenizer(str(corpora / "tokenizers/llama3_tokenizer.model"))
    assert llama3.kind == "tiktoken" and llama3.encode(["Hello world"]) == [[9906, 1917]]
    llama4 = load_tokenizer(str(corpora / "tokenizers/llama4_tokenizer.model"))
    text = lines(ntrex(corpora, "bn"))[:200]
    assert sum(map(len, llama4.encode(text))) < sum(map(len, llama3.encode(text)))


def test_gpt2_style_bpe_runs_through_tiktoken_with_the_libraries_ids(corpora: Path):
    from tokenizers import ByteLevelBPETokenizer

    tokenizers = corpora / "tokenizers"
    gpt2 = load_tokenizer(str(tokenizers / "gpt2-vocab.json"))
    bpe = ByteLevelBPETokenizer(str(tokenizers / "gpt2-vocab.json"),
                                str(tokenizers / "gpt2-merges.txt"))
    texts = [t for lang in FILES for t in lines(ntrex(corpora, lang))[:400]]
    texts += ["  two  spaces, tabs\tand 'quotes' don't", "digits 1234567 ৳৫০০", "\u00a0nbsp"]
    assert gpt2._twin is not None
    assert gpt2.encode(texts) == [bpe.encode(t).ids for t in texts]
    assert gpt2._twin is not None  # the check on the first batch passed


def test_a_tokenizer_that_is_not_plain_gpt2_keeps_the_hf_encoder(tmp_path: Path, corpora: Path):
    from tokenizers import Tokenizer as HF
    from tokenizers import models, pre_tokenizers

    tokenizers = corpora / "tokenizers"
    hf = HF(models.BPE.from_file(str(tokenizers / "gpt2-vocab.json"),
                                 str(tokenizers / "gpt2-merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    hf.save(str(tmp_path / "tokenizer.json"))
    prefixed = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert prefixed._twin is None
    assert prefixed.encode(["Hello world"]) == [hf.encode("Hello world").ids]


def test_added_tokens_in_text_go_through_the_hf_encoder(tmp_path: Path, corpora: Path):
    from tokenizers import Tokenizer as HF
    from tokenizers import models, pre_tokenizers

    tokenizers = corpora / "tokenizers"
    hf = HF(models.BPE.from_file(str(tokenizers / "gpt2-vocab.json"),
                                 str(tokenizers / "gpt2-merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.add_special_tokens(["<|endoftext|>"])
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(str(tmp_path / "tokenizer.json"))
    texts = ["one<|endoftext|>two", "plain text"]
    assert tok._twin is not None
    assert tok.encode(texts) == [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert tok.encode(texts)[0][1] == 50256


def test_cli_writes_json_and_markdown_and_strict_fails(corpora: Path, tmp_path: Path):
    result = run_cli("fertility-report", ntrex(corpora, "en"), ntrex(corpora, "hi"),
                     "-t", corpora / "tokenizers/gpt2-vocab.json", "--sample", "300",
                     "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md",
                     "--chart", tmp_path / "r.html", "--strict")
    assert result.exit_code == 1  # GPT-2 splits Devanagari at vowel signs
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["tokenizers"]["gpt2-vocab.json"]["by_lang"]["hi"]["segments"] == 300
    assert "| group |" in (tmp_path / "r.md").read_text()
    chart = (tmp_path / "r.html").read_text()
    assert "<svg" in chart and "Devanagari" in chart and "http://" not in chart.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    ok = run_cli("fertility-report", ntrex(corpora, "en"), "-t", "chars", "--sample", "50")
    assert ok.exit_code == 0


def test_bad_tokenizer_is_a_clear_error(tmp_path: Path, corpora: Path):
    result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", tmp_path / "none.model")
    assert result.exit_code == 2 and "does not exist" in result.stderr
    # half of a GPT-2 pair: the error names the vocab.json to give instead
    merges = corpora / "tokenizers/gpt2-merges.txt"
    result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", merges)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "is a BPE merges file: give its vocab.json" in said
    assert "gpt2-vocab.json" in said and "SentencePiece" not in said


def test_continued_words(report: dict):
    """The share of words that take two tokens or more: most English words are one GPT-2 token,
    almost every Bengali word is several."""
    gpt2 = report["tokenizers"]["gpt2"]["by_lang"]
    assert gpt2["en"]["continued_words"] < 0.3
    assert gpt2["bn"]["continued_words"] > 0.9
    llama2 = report["tokenizers"]["llama2"]["by_lang"]
    assert llama2["en"]["continued_words"] < llama2["ru"]["continued_words"]


def test_invalid_utf8_text_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\ncaf\xe9\n")
    result = run_cli("fertility-report", bad, "-t", "chars")
    assert result.exit_code == 2
    assert "not valid UTF-8" in result.stderr and str(bad) in result.stderr


def test_a_cleaned_dataset_is_grouped_by_its_langid_column(corpora: Path, tmp_path: Path):
    from spr_data import ingest
    from spr_data.pipeline.clean import clean

    files = [corpora / f"multiparallel/ntrex128/newstest2019-ref.{x}.txt.gz"
             for x in ("deu", "fra", "rus")]
    assert ingest(files, tmp_path / "ds").langs == ["und"]  # a mix: no one language
    recipe = tmp_path / "r.toml"
    recipe.write_text('stages = ["normalize", "langid"]\n')
    clean(tmp_path / "ds", tmp_path / "clean", recipe=recipe, workers=1)
    sources = read_sources([tmp_path / "clean"])
    report = fertility_report(sources, [load_tokenizer("chars")])
    by_lang = report["tokenizers"]["chars"]["by_lang"]
    assert {"de", "fr", "ru"} <= set(by_lang)
    assert by_lang["de"]["segments"] > 1900 and by_lang["ru"]["segments"] > 1900


EDGE_TEXTS = ["", " ", "a", "two  spaces", " leading", "trailing ", "tab\there", "nbsp\u00a0here",
              "ideographic\u3000space", "line\u2028separator", "don't stop 123 4567 !!", "a ▁ b",
              "ends with marks \u0995\u09cd\u09b7", "\u09be starts with a vowel sign",
              f"holds the separator {tokenizers._SEPARATOR} inside", "Ünïcödé ÀÉÎ 中文 mixed",
              f"ends with most of the separator {tokenizers._SEPARATOR[:-1]}",
              # ▁ reads as a space to SentencePiece, and Llama 2 has ▁▁ pieces
              "x▁ ▁y", "x▁ \U0001f600", "a ▁ ▁ b", "a m▁ b", "▁lead and trail▁",
              # zero-width characters: NFKC models turn some into spaces
              "see b\u200bc \u200b here", "b\u200bc d", "\u200b", "x \ufeff y \u200c z",
              "ﬁne ligature ¨ diaeresis", "digits 2024 and ½ and ①"]


def word_path_stats(texts: list[str], tok: tokenizers.Tokenizer) -> np.ndarray | None:
    """The report's word-by-word statistics of every segment (None: it encodes them whole)."""
    if not tok.encodes_words:
        return None
    words = F._Words.of(pa.array(texts, pa.large_string()))
    per_word = F._word_stats(words, tok)
    if per_word is None:
        return None
    return F._combine(texts, words, *per_word, F._encode_stats(words.heads, tok), tok)


@pytest.fixture(scope="module")
def all_texts(corpora: Path) -> list[str]:
    """Every NTREX-128 segment (35 files, 23 scripts), Tatoeba eng-cmn and odd spacing."""
    texts = [t for path in sorted((corpora / "multiparallel/ntrex128").glob("*.txt.gz"))
             for t in lines(path)]
    pairs = gzip.decompress((corpora / "parallel/tatoeba_manythings_eng-cmn.tsv.gz")
                            .read_bytes()).decode().split("\n")[:5000]
    return texts + [x for p in pairs if p for x in p.split("\t")[:2]] + EDGE_TEXTS


@pytest.mark.parametrize("name", ["gpt2-vocab.json", "llama2_tokenizer.model",
                                  "llama3_tokenizer.model", "llama4_tokenizer.model"])
def test_a_segment_counts_as_its_first_word_plus_its_other_words(
        corpora: Path, all_texts: list[str], name: str):
    """What makes the report fast: the distinct words are encoded once each, and a segment's
    token statistics are its first word's plus its other words' (each as read after a
    space). Checked on every segment against the segments encoded whole."""
    tok = load_tokenizer(str(corpora / "tokenizers" / name))
    assert tok.encodes_words
    words = F._Words.of(pa.array(all_texts, pa.large_string()))
    assert len(words.words) < len(words.occurrence_word) / 2  # words repeat
    stats = word_path_stats(all_texts, tok)
    assert stats is not None
    whole = F._encode_stats(all_texts, tok)
    assert whole[0].sum() > len(all_texts)
    np.testing.assert_array_equal(stats, whole)


SENTENCEPIECE_OPTIONS = {  # and whether the report may count such a model word by word
    "bpe": ({"model_type": "bpe"}, True),  # nmt_nfkc: zero-width spaces become spaces
    "bpe-identity": ({"model_type": "bpe", "normalization_rule_name": "identity"}, True),
    "bpe-keep-spaces": ({"model_type": "bpe", "normalization_rule_name": "identity",
                         "remove_extra_whitespaces": False}, True),
    "bpe-digits-bytes": ({"model_type": "bpe", "split_digits": True, "byte_fallback": True},
                         True),
    "unigram": ({}, False),  # near-ties in its best path fall with the rounding before them
    "symbol-across-a-space": ({"model_type": "bpe", "user_defined_symbols": ["▁the▁"]},
                              False),
    "suffix": ({"model_type": "bpe", "treat_whitespace_as_suffix": True}, False),
    "no-dummy-prefix": ({"model_type": "bpe", "add_dummy_prefix": False}, False),
    "across-spaces": ({"model_type": "bpe", "split_by_whitespace": False,
                       "max_sentencepiece_length": 24}, False),
}


@pytest.mark.parametrize("options", list(SENTENCEPIECE_OPTIONS))
def test_sentencepiece_models_of_any_options_count_as_whole_segments(
        tmp_path: Path, corpora: Path, options: str):
    """Whatever the model's options, the word-by-word statistics equal the whole segments'
    on every segment, or the report encodes the segments whole: a unigram model, and a model
    whose pieces may span a space or that has no ``▁`` to start each word."""
    import sentencepiece as spm

    train = lines(ntrex(corpora, "en")) + lines(ntrex(corpora, "bn"))[:500]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train), model_prefix=str(tmp_path / "m"), vocab_size=3000,
        minloglevel=2, **SENTENCEPIECE_OPTIONS[options][0])
    tok = load_tokenizer(str(tmp_path / "m.model"))
    texts = train + lines(corpora / "multiparallel/ntrex128/newstest2019-ref.fas.txt.gz")[:300]
    texts += EDGE_TEXTS * 3
    stats = word_path_stats(texts, tok)
    assert (stats is not None) == SENTENCEPIECE_OPTIONS[options][1]
    if stats is not None:
        np.testing.assert_array_equal(stats, F._encode_stats(texts, tok))
    report = fertility_report([F.TextSource("en", "en", texts)], [tok])
    assert report["tokenizers"]["m.model"]["by_lang"]["en"]["tokens"] == \
        sum(map(len, tok.encoder.encode(texts)))


def test_an_added_token_that_takes_the_space_beside_it(tmp_path: Path, corpora: Path):
    from tokenizers import AddedToken, models, pre_tokenizers
    from tokenizers import Tokenizer as HF

    tokenizers_dir = corpora / "tokenizers"
    hf = HF(models.BPE.from_file(str(tokenizers_dir / "gpt2-vocab.json"),
                                 str(tokenizers_dir / "gpt2-merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.add_tokens([AddedToken("<m>", rstrip=True), AddedToken("<l>", lstrip=True)])
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(str(tmp_path / "tokenizer.json"))
    texts = lines(ntrex(corpora, "en")) + ["<m> 's", "<m> ok", "a <l>", "x <m> y <l> z"] * 5
    stats = word_path_stats(texts, tok)
    assert stats is not None and tok._twin is not None
    np.testing.assert_array_equal(stats, F._encode_stats(texts, tok))
    assert stats[0].sum() == sum(len(hf.encode(t, add_special_tokens=False).ids) for t in texts)


@pytest.mark.parametrize("spec", ["gpt2-vocab.json", "llama2_tokenizer.model",
                                  "llama3_tokenizer.model", "bytes", "chars"])
def test_encode_flat_is_encode_end_to_end(corpora: Path, spec: str):
    tok = load_tokenizer(spec if spec in ("bytes", "chars") else
                         str(corpora / "tokenizers" / spec))
    texts = lines(ntrex(corpora, "bn"))[:300] + lines(ntrex(corpora, "zh"))[:300] + EDGE_TEXTS
    ids = tok.encode(texts)
    flat, lengths = tok.encode_flat(texts)
    assert lengths.tolist() == [len(x) for x in ids]
    assert flat.tolist() == [i for x in ids for i in x]
    if tok.kind == "tiktoken":  # the separator's id never leaks out
        assert all(i < len(tok.unknown) for i in flat.tolist())
        assert ids == [tok.encoder.encode_ordinary(t) for t in texts]


def test_texts_holding_the_joining_separator_are_encoded_one_by_one(corpora: Path):
    llama3 = load_tokenizer(str(corpora / "tokenizers/llama3_tokenizer.model"))
    sep = tokenizers._SEPARATOR
    for texts in ([f"a{sep}b", "next"], [f"ends with {sep[:-1]}", "next"],
                  ["before", f"{sep[1:]} starts"]):
        assert llama3.encode(texts) == [llama3.encoder.encode_ordinary(t) for t in texts]


def test_words_are_whitespace_separated_units_and_empty_inputs_are_an_error():
    chars = load_tokenizer("chars")
    texts = ["", " a  b ", "x", "\tq\u3000r", "three words here"]
    report = fertility_report([F.TextSource("t", "de", texts), F.TextSource("e", "en", [])],
                              [chars])
    assert report["tokenizers"]["chars"]["by_lang"]["de"]["words"] == 0 + 2 + 1 + 2 + 3
    with pytest.raises(F.InputError, match="no text to measure"):
        fertility_report([F.TextSource("e", "en", [])], [chars])


def test_broken_tiktoken_files_are_clear_errors(corpora: Path, tmp_path: Path):
    ranks = (corpora / "tokenizers/llama3_tokenizer.model").read_bytes()
    cases = {"few.model": b"\n".join(ranks.split(b"\n")[:100]) + b"\n",  # bytes without a rank
             "cut.model": ranks[:30000],  # the last line cut: two tokens share a rank
             "garbage.model": ranks + b"garbage line here\n"}
    messages = {"few.model": "no rank for 156 of the 256 bytes",
                "cut.model": "two tokens share a rank",
                "garbage.model": "garbage.model:128001: not a tiktoken ranks line"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", tmp_path / name)
        assert result.exit_code == 2 and messages[name] in result.stderr, result.stderr


def test_tokenizer_names_and_paths(corpora: Path, tmp_path: Path):
    llama2 = corpora / "tokenizers/llama2_tokenizer.model"
    result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", f"a={llama2}",
                     "-t", "a=chars")
    assert result.exit_code == 2 and "two tokenizers are named a" in result.stderr
    result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", tmp_path)
    assert result.exit_code == 2 and "is a directory" in result.stderr
    odd = tmp_path / "run=3"
    odd.mkdir()
    (odd / "tok.model").write_bytes(llama2.read_bytes())
    assert load_tokenizer(str(odd / "tok.model")).name == "tok.model"
    assert load_tokenizer(f"mine={odd / 'tok.model'}").name == "mine"


def test_outputs_are_checked_before_the_work(corpora: Path, tmp_path: Path):
    for option in ("--json", "--markdown", "--chart"):
        result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", "chars", option,
                         tmp_path / "missing/r.out")
        assert result.exit_code == 2 and "does not exist" in result.stderr
        assert result.stdout == ""  # refused before any table was printed
    result = run_cli("fertility-report", ntrex(corpora, "en"), "-t", "chars", "--json", tmp_path)
    assert result.exit_code == 2 and "is a directory" in result.stderr


def test_an_output_file_never_replaces_an_input_or_a_file_it_did_not_write(corpora: Path,
                                                                           tmp_path: Path):
    """``--json`` typed before the inputs takes the first input for the file name: it was
    written over (and a dataset's manifest.json given as --json broke the dataset)."""
    text = tmp_path / "src.eng.txt"
    text.write_bytes(gzip.decompress(ntrex(corpora, "en").read_bytes()))
    before = text.read_bytes()
    for option in ("--json", "--markdown", "--chart"):
        result = run_cli("fertility-report", option, text, ntrex(corpora, "hi"), "-t", "chars")
        assert result.exit_code == 2 and "not a report this option wrote" in result.stderr
        result = run_cli("fertility-report", text, "-t", "chars", option, text)
        assert result.exit_code == 2 and "is one of the inputs" in result.stderr
    assert text.read_bytes() == before
    # its own earlier reports are replaced, as are empty files
    outputs = {"--json": tmp_path / "r.json", "--markdown": tmp_path / "r.md",
               "--chart": tmp_path / "r.html"}
    outputs["--markdown"].write_bytes(b"")
    for _ in range(2):
        args = [a for option, path in outputs.items() for a in (option, path)]
        result = run_cli("fertility-report", text, "-t", "chars", "--sample", "50", *args)
        assert result.exit_code == 0, result.stderr


def test_a_sample_keeps_multi_parallel_inputs_parallel(corpora: Path, tmp_path: Path):
    """The same lines of inputs with as many lines: identical files keep parity 1."""
    copy = tmp_path / "copy.deu.txt.gz"
    copy.write_bytes(ntrex(corpora, "en").read_bytes())
    result = run_cli("fertility-report", ntrex(corpora, "en"), copy, "-t",
                     corpora / "tokenizers/llama2_tokenizer.model", "--sample", "100",
                     "--json", tmp_path / "r.json")
    assert result.exit_code == 0
    by_lang = json.loads((tmp_path / "r.json").read_text())["tokenizers"][
        "llama2_tokenizer.model"]["by_lang"]
    assert by_lang["de"]["parity"] == 1.0 and by_lang["de"]["segments"] == 100
    assert by_lang["de"]["chars"] == by_lang["en"]["chars"]


def test_a_reference_language_without_an_input_is_a_clear_error(corpora: Path):
    result = run_cli("fertility-report", ntrex(corpora, "en"), ntrex(corpora, "bn"), "-t",
                     "chars", "--reference", "fr")
    assert result.exit_code == 2 and "no input is in that language" in result.stderr
    assert "bn, en" in result.stderr
    assert run_cli("fertility-report", ntrex(corpora, "bn"), "-t", "chars").exit_code == 0


def test_a_large_report_counts_by_words_and_matches_the_libraries(
        corpora: Path, all_texts: list[str], monkeypatch: pytest.MonkeyPatch):
    """Through the report itself (threads, checks and all), on 80k segments: the token
    counts equal the libraries' own, each segment encoded alone."""
    import sentencepiece as spm
    from tokenizers import ByteLevelBPETokenizer

    combined = []
    real_combine = F._combine
    monkeypatch.setattr(F, "_combine", lambda *a: combined.append(a[-1].name) or real_combine(*a))
    tokenizers_dir = corpora / "tokenizers"
    toks = [load_tokenizer(f"gpt2={tokenizers_dir / 'gpt2-vocab.json'}"),
            load_tokenizer(f"llama2={tokenizers_dir / 'llama2_tokenizer.model'}"),
            load_tokenizer(f"llama3={tokenizers_dir / 'llama3_tokenizer.model'}")]
    report = fertility_report([F.TextSource("all", "en", all_texts)], toks)
    assert sorted(combined) == ["gpt2", "llama2", "llama3"]  # the word path, not a fallback
    sp = spm.SentencePieceProcessor(model_file=str(tokenizers_dir / "llama2_tokenizer.model"))
    bpe = ByteLevelBPETokenizer(str(tokenizers_dir / "gpt2-vocab.json"),
                                str(tokenizers_dir / "gpt2-merges.txt"))
    direct = {"llama2": sum(map(len, sp.encode(all_texts))),
              "gpt2": sum(len(e.ids) for e in bpe.encode_batch(all_texts)),
              "llama3": sum(len(toks[2].encoder.encode_ordinary(t)) for t in all_texts)}
    for name, tokens in direct.items():
        assert report["tokenizers"][name]["by_lang"]["en"]["tokens"] == tokens, name


@pytest.mark.parametrize("name", ["pairs.en-bn.tsv", "pairs.tsv.gz", "rows.jsonl"])
def test_a_file_of_records_is_refused_with_the_way_to_read_it(tmp_path: Path, name: str):
    """Read as lines, a TSV's line is one segment of two languages joined by a tab (the
    report's 'by lang' table came out empty): ingest it, then pass the dataset."""
    path = tmp_path / name
    path.write_bytes(b"Go.\t\xe0\xa6\xaf\xe0\xa6\xbe\xe0\xa6\x93\n")
    for command in (["fertility-report", path, "-t", "chars"],
                    ["train-tokenizer", path, "--out", tmp_path / "tok", "--kind", "bpe",
                     "--vocab-size", "300"]):
        result = run_cli(*command)
        assert result.exit_code == 2, result.stderr
        assert "holds records, not lines of text" in result.stderr
        assert "spr-data ingest" in result.stderr
