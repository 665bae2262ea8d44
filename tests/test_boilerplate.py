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
    "« Log in »",
    "Subscribe to our newsletter",
    "Posted by admin on 3 May 2015",
    "Posted on 12/03/2014",
    "Home | About us | Products | Contact",
    # a menu in any language or script, its separators between any spaces
    "Startseite\u00a0|\u00a0Über uns\u00a0|\u00a0Produkte\u00a0|\u00a0Kontakt",
    "ホーム ｜ 会社概要 ｜ 製品 ｜ お問い合わせ",
    "Главная • О нас • Продукты • Контакты",
    "Accueil · À propos · Produits · Contact",
]
SENTENCES = [
    "I want to read more books this year.",
    "She signed in at the front desk.",
    "He posted the letter on Monday.",
    "Please share the cake with your sister.",
    "The next page of the report shows the results.",
    "Cookies were served with the coffee.",
    "At Christmas we use cookies to decorate the tree.",
    "The use of cookies by websites is regulated by the EU.",
    "Home is where the heart is.",
    "Log in to your account to continue.",
    "Posted on the wall was a notice.",
    "Posted in Iraq, he served two tours of duty.",
    "Posted by a fan, the video went viral.",
    # a link's words inside a sentence of another script (RE2's \W is ASCII-only)
    "Нажмите кнопку Subscribe, чтобы подписаться.",
    "请点击 Read more 查看全文。",
    "「Log in」ボタンを押してください。",
    # lists that are no menu: quoted titles, a name, a letter of Catalan
    "Il cite « Le Monde » , « Libération » , « Le Figaro » et « Les Échos » ce matin.",
    "Die Titel » Faust « , » Werther « , » Egmont « und » Tasso « stammen von Goethe.",
    "The vote was 3 | 4 | 5 | 6 in the four rounds of the ballot, he wrote.",
    "奥巴马·侯赛因", "La col·lecció és molt gran.",
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
