"""``spr-data fertility-report`` on NTREX-128, checked against the tokenizer libraries directly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from spr_data.qa.fertility import fertility_report, read_sources
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
