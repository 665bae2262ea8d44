"""``boilerplate``: web page furniture on either side is rejected; real sentences that talk
about the same things are not."""

from __future__ import annotations

from pathlib import Path

from tests.junk import ntrex, ntrex_pairs, rule_flags

FURNITURE = [
    "We use cookies to improve your experience on our website.",
    "This site uses cookies. By continuing to browse you agree to our use of cookies.",
    "Share on Facebook",
    "Sign in or register to post comments",
    "Next page",
    "Read more »",
    "Subscribe to our newsletter",
    "Posted by admin on 3 May 2015",
    "Home | About us | Products | Contact",
    # a menu in any language or script
    "Startseite | Über uns | Produkte | Kontakt",
    "ホーム · 会社概要 · 製品 · お問い合わせ",
    "Главная • О нас • Продукты • Контакты",
]
SENTENCES = [
    "I want to read more books this year.",
    "She signed in at the front desk.",
    "He posted the letter on Monday.",
    "Please share the cake with your sister.",
    "The next page of the report shows the results.",
    "Cookies were served with the coffee.",
    "Home is where the heart is.",
    "The vote was 3 | 4 | 5 in the three rounds, he wrote.",
]


def test_web_page_furniture_is_boilerplate_on_either_side():
    pairs = [(text, "Ein Satz auf Deutsch.") for text in FURNITURE]
    assert rule_flags(pairs, ["en", "de"], "boilerplate_src").all()
    swapped = [(t, s) for s, t in pairs]
    assert rule_flags(swapped, ["de", "en"], "boilerplate_tgt").all()


def test_sentences_about_the_same_things_are_kept():
    pairs = [(text, "Ein Satz auf Deutsch.") for text in SENTENCES]
    assert not rule_flags(pairs, ["en", "de"], "boilerplate_src").any()


def test_no_real_news_sentence_of_any_ntrex_language_is_boilerplate(corpora: Path):
    """NTREX's English against each of its translations (the translations as targets)."""
    langs = {"deu": "de", "fra": "fr", "rus": "ru", "jpn": "ja", "zho-CN": "zh", "hin": "hi",
             "arb": "ar", "kor": "ko", "vie": "vi", "tha": "th"}
    english = ntrex_pairs(corpora, "deu")
    assert not rule_flags(english, ["en", "de"], "boilerplate_src").any()
    for lang, code in langs.items():
        pairs = [("A sentence.", t) for t in ntrex(corpora, lang) if t.strip()]
        assert not rule_flags(pairs, ["en", code], "boilerplate_tgt").any(), lang
