"""``rules``: cheap, vectorized filters for junk long-tail pairs, per side and across sides.

Scores first (lengths, letter shares, runs), decisions second, one reason per failed rule:
``{rule}_{side}`` for a side's rule (``too_long_tgt``), plain names for rules over the pair
(``length_ratio``, ``copied_source``, ``copied_span``, ``numbers_mismatch``,
``sentence_end_inside``).
"""

from __future__ import annotations

import bisect
import collections
import difflib
import itertools
import math
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.arrays import unique
from spr_data.qa.numbers import mismatches
from spr_data.qa.scripts import (
    CJK,
    SCRIPT_NAMES,
    TextProfile,
    ends_in_letter,
    expected_scripts,
    normalize_lang,
    profile,
    rows_containing,
    utf8_bytes,
    visible_counts,
)
from spr_data.qa.stage import StageOutput
from spr_data.recipe import RulesConfig, SideRules

__all__ = ["MAX_UNENDED_CUT", "PAIR_RULES", "SIDE_RULES", "LengthRatioFit", "RulesStage",
           "ends_sentences", "lost_end", "mojibake_score", "sentence_marks", "sentence_more",
           "unended_shares"]

#: Per-side rules in the order they apply (the first that fails is a row's ``reason``).
SIDE_RULES = ("empty", "too_short", "too_long", "url_only", "html", "boilerplate", "junk",
              "mojibake", "mixed_script", "script_mismatch", "repetition")
PAIR_RULES = ("length_ratio", "spaces_lost", "copied_source", "copied_span", "numbers_mismatch",
              "sentence_end_inside", "cut_short")

_URLISH = (r"(?:https?://|ftp://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
           r"|(?:[A-Za-z]:)?(?:[\\/][\w.-]+){2,}[\\/]?|[\w-]+(?:\.[\w-]+)+/\S*")
_HTML = r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>|&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z]{2,8});"
_BOILERPLATE = (
    r"(?i)lorem ipsum|all rights reserved|(?:enable|requires?) javascript"
    r"|javascript (?:is )?(?:disabled|required)|accept (?:all )?cookies|cookie policy"
    r"|(?:we|(?:this|our) (?:web)?site) uses? cookies\b.{0,80}"
    r"(?:website|site\b|brows|experience|consent|analytics|personali[sz])"
    r"|privacy policy|terms (?:of|and) (?:use|service)|click here"
    r"|powered by (?:wordpress|joomla|drupal)|skip to (?:main )?content|©\s*(?:19|20)\d\d"
)
#: web page furniture, looked for in the rows :data:`_WEB_NEEDLES` or a short length pick:
#: a whole side that is a link or button ("Read more »", "Share on Facebook", "Sign in or
#: register to post comments", "Posted by … on <a date>") or a navigation menu (4 or more
#: short items between ``|``, ``｜``, ``•`` or ``·`` and spaces, in any language). RE2's
#: ``\W`` and ``\s`` are ASCII-only: what may stand around a link is no letter or digit of
#: any script. Of 415,846 real texts (NTREX's 35 languages, LASER Tatoeba, Multi30k,
#: Tatoeba, Microtopia, the mono corpora) it and the cookie notices of ``_BOILERPLATE``
#: matched two, both boilerplate of the WMT sample (a "Posted by" line, a cookie notice).
_WEB_BOILERPLATE = (
    r"(?i)^[^\pL\pN]*(?:read more|continue reading|next page|previous page|back to top"
    r"|share (?:on|via) (?:facebook|twitter|whatsapp|linkedin|e-?mail)"
    r"|share this(?: article| post| page)?|sign (?:in|up)|log ?(?:in|out)"
    r"|sign in or register\b.*|subscribe(?: to (?:our|the) newsletter)?"
    r"|leave a (?:comment|reply)|add to (?:cart|basket|wishlist)"
    r"|print this(?: page| article)?|permalink|contact us|about us"
    r"|posted (?:by [^,.;!?]{1,30}(?: (?:on|at) [^!?]{0,30}\d[^!?]{0,20})?"
    r"|(?:on|at) [^!?]{0,30}\d[^!?]{0,20})"
    r")[^\pL\pN]*$"
    r"|^[^|｜•·]{1,30}(?:[\s\pZ][|｜•·][\s\pZ][^|｜•·]{1,30}){3,}$"
)
#: what a menu holds; and the longest side a link or button is
_WEB_NEEDLES = (b"|", "\uff5c".encode(), "\u2022".encode(), "\u00b7".encode())
_WEB_LINE_CHARS = 60
#: rows of a side judged at a time (see RulesStage.apply)
_SIDE_ROWS = 8192
#: Roughly how many Latin-script characters one character of a dense script is worth, so the
#: length ratio compares like with like (measured on Tatoeba eng-cmn and NTREX). Korean's
#: applies to its Hangul syllables as well as to its Han (English runs 1.93-2.00x a Korean
#: side's characters on Tatoeba and NTREX, 1.06x its weighted length)
_CHAR_WEIGHT = {"zh": 3.0, "ja": 2.2, "ko": 2.0, "yue": 3.0, "wuu": 3.0}
_UNCOUNTED_DENSE = {"ko": "Hangul"}  # a dense script that is not CJK (see scripts.CJK)


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


#: quotes or brackets that open or close a whole side (``“谁？”``, ``"Go."``, ``(Laughs)``),
#: and a bullet or dash before it (``- 滚。``): up to three at each end, so that a run of them
#: (``((((((a))))))``, ``----------- a``, ``***** 5``) is still a symbol pile
_WRAPPING = r"^(?:[\p{Pi}\p{Pf}\p{Ps}\"'•·*\-–—]\s*){1,3}|[\p{Pi}\p{Pf}\p{Pe}\"']{1,3}$"


def _letter_share(texts: pa.Array, prof: TextProfile, floor: float) -> np.ndarray:
    """Letters and digits over visible characters, the quotes or brackets around a whole side
    not counted where the share is under ``floor``. Why: a short sentence in quotes is no
    symbol pile; counted, ``“谁？”`` is one letter of four and ``"Go."`` two of five, and
    quoting both sides of 4,000 real Tatoeba eng-cmn pairs sent 18 to ``junk_tgt``. Only
    rows under ``floor`` with a letter or digit are read again: the rest cannot change."""
    content = prof.letters + prof.digits
    visible = np.maximum(prof.chars - prof.spaces, 1)
    share: np.ndarray = content / visible
    low = np.flatnonzero((share < floor) & (content > 0))
    if low.size:
        stripped = pc.replace_substring_regex(pc.utf8_trim_whitespace(texts.take(pa.array(low))),
                                              _WRAPPING, "")
        inside = profile(stripped)
        share[low] = content[low] / np.maximum(inside.chars - inside.spaces, 1)
    return share


#: Common-script letters that live inside one script's words: the kana prolonged-sound and
#: iteration marks (コーヒー, 〆), the Arabic tatweel, the Vedic signs of Indic scripts. Other
#: Common letters (modifier letters ˆ ˇ ʼ, mathematical 𝐀, ℓ) are no language's letters: they
#: count against a side's script share (cp1252 mojibake turns 0x88 into ˆ).
_ATTACHED_COMMON = {
    "Hiragana": "\u30fc\uff70\uff9e\uff9f\u3031-\u3035\u303c\u3006",
    "Katakana": "\u30fc\uff70\uff9e\uff9f\u3031-\u3035\u303c\u3006",
    "Arabic": "\u0640", "Syriac": "\u0640",
    "Devanagari": "\u1ce1-\u1cfa", "Bengali": "\u1ce1-\u1cfa",
}
_COMMON = SCRIPT_NAMES.index("Common")


def _letters_of(texts: pa.Array, prof: TextProfile, scripts: tuple[str, ...]) -> np.ndarray:
    """Letters of ``scripts``, plus Inherited ones (combining marks take their base's script)
    and the Common letters attached to one of ``scripts`` (ー in kana words)."""
    wanted = {*scripts, "Inherited"}
    columns = [i for i, name in enumerate(SCRIPT_NAMES) if name in wanted]
    own = np.asarray(prof.script_letters[:, columns].sum(axis=1))
    attached = "".join(dict.fromkeys(_ATTACHED_COMMON[s] for s in scripts
                                     if s in _ATTACHED_COMMON))
    rows = np.flatnonzero(prof.script_letters[:, _COMMON] > 0)
    if attached and len(rows):
        counts = pc.count_substring_regex(texts.take(pa.array(rows)), f"[{attached}]")
        own[rows] += _np(counts.fill_null(0)).astype(own.dtype)
    return own


#: What UTF-8 bytes 0x80-0xBF look like when read as cp1252 or Latin-1 (and U+FFFD where
#: cp1252 has no character): the continuation bytes of a multi-byte sequence. Not 0xA0: the
#: no-break space is real French typography ("signalée »"), and normalization makes it a
#: space anyway.
_CONT = "".join(dict.fromkeys(bytes(range(0x80, 0xC0)).decode("cp1252", errors="replace")
                              + bytes(range(0x80, 0xC0)).decode("latin-1"))).replace("\xa0", "")
_CONT_CLASS = "[" + "".join(f"\\x{{{ord(c):04x}}}" for c in _CONT) + "]"
#: A whole UTF-8 sequence read as cp1252: "Ã©" (é), "â€™" (’), "å¥½" (好). Lead bytes
#: C2/C3 cover Latin-1 letters, the most common case; other two-byte leads (Ä, ß, Ð ...)
#: also end real words followed by a quote mark ("Fuß“"), so alone they count half.
_MOJIBAKE_STRONG = (f"[\\x{{c2}}\\x{{c3}}]{_CONT_CLASS}|[\\x{{e0}}-\\x{{ef}}]{_CONT_CLASS}{{2}}"
                    f"|[\\x{{f0}}-\\x{{f4}}]{_CONT_CLASS}{{3}}|\\x{{fffd}}"
                    # normalization turns the no-break space of "à" (C3 A0) into a space and
                    # drops the soft hyphen of "í" (C3 AD) and Latin-1's C1 controls: "Ã"
                    # alone, or a capital lead right after a lower-case letter ("lidÃ",
                    # "StraÃe", "PorÄ™ba"), is no real word
                    f"|(?:^|\\s)\\x{{c3}}(?:\\s|$)"
                    f"|\\p{{Ll}}[\\x{{c3}}-\\x{{de}}](?:{_CONT_CLASS}|[\\s\\p{{P}}\\p{{Ll}}]|$)")
_MOJIBAKE_WEAK = f"[\\x{{c4}}-\\x{{de}}]{_CONT_CLASS}"  # not ß (DF): "Fuß“", and NKo is rare


#: lead bytes of the UTF-8 of ``_CONT`` and U+FFFD (what :func:`_mojibake_candidates` looks for)
_CONT_LEADS = tuple(sorted({c.encode()[0] for c in _CONT + "\ufffd"}))


def _mojibake_candidates(texts: pa.Array) -> np.ndarray:
    """The rows that may match the mojibake patterns: each match holds a ``_CONT`` character
    or U+FFFD (lead bytes C2, C5, C6, CB, E2 and EF in UTF-8), or one of U+00C3..U+00DE
    (C3 83..C3 9E). Rows of plain German (ä is C3 A4) or Bengali are not looked at."""
    raw, offsets = utf8_bytes(texts)
    if not raw.size:
        return np.zeros(len(offsets) - 1, dtype=bool)
    lead = raw >= 0xC2  # cheap first: most rows of most corpora have no such byte
    pos = np.flatnonzero(lead)
    b = raw[pos]
    nxt = raw[np.minimum(pos + 1, len(raw) - 1)]
    hit = np.isin(b, _CONT_LEADS) | (
        (b == 0xC3) & (nxt >= 0x83) & (nxt <= 0x9E))
    out = np.zeros(len(offsets) - 1, dtype=bool)
    out[np.searchsorted(offsets, pos[hit], side="right") - 1] = True
    return out


def mojibake_score(texts: pa.Array) -> np.ndarray:
    """Per row, how many UTF-8 sequences read as cp1252/Latin-1 it holds (a weak one counts
    half), plus U+FFFD replacement characters: text that went through a wrong decoding. A
    row whose words are mostly UTF-8 read as another Windows code page (Cyrillic, Arabic,
    Greek …) scores 1 more."""
    out = np.zeros(len(texts), dtype=np.float64)
    rows = np.flatnonzero(_mojibake_candidates(texts))
    if len(rows):
        some = texts.take(pa.array(rows))
        strong = _np(pc.count_substring_regex(some, _MOJIBAKE_STRONG).fill_null(0))
        weak = _np(pc.count_substring_regex(some, _MOJIBAKE_WEAK).fill_null(0))
        out[rows] = strong + 0.5 * weak
    out += _legacy_mojibake(texts)
    return out


#: Windows code pages whose letters UTF-8 is often misread as (cp1252 above): Central
#: European, Cyrillic, Greek, Turkish, Hebrew, Arabic, Baltic
_CODE_PAGES = ("cp1250", "cp1251", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257")


def _pair_pattern(code_pages: tuple[str, ...]) -> str:
    """A UTF-8 lead byte then a continuation byte, both as one of ``code_pages`` reads them."""
    def chars(lo: int, hi: int) -> str:
        read = "".join(bytes(range(lo, hi)).decode(page, errors="ignore") for page in code_pages)
        return "".join(f"\\x{{{ord(c):04x}}}" for c in dict.fromkeys(read.replace("\xa0", "")))
    return f"[{chars(0xC2, 0xF5)}][{chars(0x80, 0xC0)}]"


_PAIR_PATTERNS = {page: _pair_pattern((page,)) for page in _CODE_PAGES}
_ANY_PAIR = _pair_pattern(_CODE_PAGES)


def _two_non_ascii(texts: pa.Array) -> np.ndarray:
    """Rows with two characters beyond ASCII side by side (a continuation byte, then a lead
    byte), which every match of :data:`_ANY_PAIR` holds: the regex, its classes hundreds of
    characters long, scanned 8,192 English rows in 17 ms; this scan of the bytes takes 1.5."""
    raw, offsets = utf8_bytes(texts)
    out = np.zeros(len(offsets) - 1, dtype=bool)
    if raw.size < 2:
        return out
    at = np.flatnonzero((raw[:-1] >= 0x80) & (raw[:-1] < 0xC0) & (raw[1:] >= 0xC2))
    out[np.searchsorted(offsets, at, side="right") - 1] = True
    return out


def _legacy_mojibake(texts: pa.Array) -> np.ndarray:
    """1 where a row reads as UTF-8 misread as one of :data:`_CODE_PAGES` (see
    :func:`_misread_row`): "Р”Р°" is "Да" read as cp1251, "ط§ظ„" "ال" read as cp1256.

    Only rows whose lead-continuation pairs (as the page reads them) are at least a quarter of
    their non-ASCII characters are tried: a misread text is almost all such pairs, while real
    Ukrainian or Urdu text holds a few (Сі, Ні), and trying every such row cost 20-28 µs each."""
    out = np.zeros(len(texts), dtype=np.float64)
    some = np.flatnonzero(_two_non_ascii(texts))
    if len(some):
        some = some[_np(pc.match_substring_regex(texts.take(pa.array(some)), _ANY_PAIR)
                        .fill_null(False)).astype(bool)]
    if not len(some):
        return out
    candidates = texts.take(pa.array(some))
    # bytes beyond one a character: about the non-ASCII characters (a regex counting them
    # took 7 µs a row of NTREX Ukrainian)
    foreign = (_np(pc.binary_length(candidates).fill_null(0))
               - _np(pc.utf8_length(candidates).fill_null(0)))
    for page, pattern in _PAIR_PATTERNS.items():
        pairs = _np(pc.count_substring_regex(candidates, pattern).fill_null(0))
        dense = (pairs > 0) & (4 * pairs >= foreign)
        rows = some[dense]
        for i, text in zip(rows.tolist(), candidates.filter(pa.array(dense)).to_pylist(),
                           strict=True):
            if not out[i] and text:
                out[i] = float(_misread_row(text, page))
    return out


def _misread_row(text: str, page: str) -> bool:
    """Whether most of the words of ``text`` that are not ASCII are UTF-8 read as ``page``
    (:func:`_misread`). Word by word, because normalization has turned some bytes
    into spaces (cp1251 reads the second byte of "Р" as a no-break space); a lone character
    cannot be judged (the "Р" of "Р С–Рє", normalized), nor a word that ends in the lead byte
    of such a space ("St.Â Martin")."""
    words = [w for w in text.split() if len(w) > 1 and not w.isascii() and not w.endswith("Â")]
    return 2 * sum(_misread(w, page) for w in words) > len(words)


#: Greek letters but µ and Ω (micro and ohm: NFC makes U+2126 Ω, and "10µm", "5kΩ" are units)
_GREEK = r"\x{0370}-\x{03A8}\x{03AA}-\x{03BB}\x{03BD}-\x{03FF}\x{1F00}-\x{1FFF}"
#: a run of Cyrillic or Greek letters inside a Latin word, or of Latin ones inside a Cyrillic
#: or Greek word: a letter swapped for its look-alike ("Тhе", "hоusе", "кiнець")
_SANDWICH = (rf"\p{{Latin}}[\p{{Cyrillic}}{_GREEK}]+\p{{Latin}}"
             rf"|[\p{{Cyrillic}}{_GREEK}]\p{{Latin}}+[\p{{Cyrillic}}{_GREEK}]")
#: … but a Latin i alone in a Cyrillic word: Ukrainian and Belarusian written on a keyboard
#: without і (9 of LASER's 1,000 Ukrainian Tatoeba sides: "вiн був бiдний"), a spelling
#: habit, not spam
_LATIN_I = r"\p{Cyrillic}[iI]+\p{Cyrillic}"
_LOOK_ALIKE = [SCRIPT_NAMES.index(name) for name in ("Latin", "Cyrillic", "Greek")]
#: words with a look-alike run inside from which a side is rejected: one is a typo (a Latin
#: i in a Ukrainian word), two are letters swapped on purpose or a broken encoding
_MIXED_WORDS = 2


def mixed_script(prof: TextProfile, texts: pa.Array) -> np.ndarray:
    """Sides with :data:`_MIXED_WORDS` words whose letters switch from Latin to Cyrillic or
    Greek and back (or the other way round) inside them: look-alike letters swapped in to
    dodge a filter, UTF-8 read as cp1251 ("FГјr"). A Greek letter at a word's end ("TGFβ",
    "IFNγ") is no switch back, nor a Latin i in a Cyrillic word (:data:`_LATIN_I`).
    Measured on the 463,345 sides of NTREX's 35 languages, LASER's Tatoeba sets, Microtopia,
    Multi30k, the Bengali and Hindi monolingual files and the quality corpora: none but 4
    of the WMT sample's cp1251 rows. Only rows with letters of two of the three scripts are
    read."""
    out = np.zeros(len(texts), dtype=bool)
    present = np.asarray(prof.script_letters[:, _LOOK_ALIKE] > 0)
    rows = np.flatnonzero(present.sum(axis=1) >= 2)
    if rows.size:
        picked = texts.take(pa.array(rows))
        counts = [_np(pc.count_substring_regex(picked, pattern).fill_null(0))
                  for pattern in (_SANDWICH, _LATIN_I)]
        out[rows] = counts[0] - counts[1] >= _MIXED_WORDS
    return out


def _scripts(text: str) -> set[str]:
    """The scripts of the letters of ``text``, by the first word of their Unicode names."""
    return {unicodedata.name(c, "?").split(" ")[0] for c in text if c.isalpha()}


def _misread(word: str, page: str) -> bool:
    """Whether ``word`` is another word's UTF-8 read as ``page``: it encodes back to valid
    UTF-8, whose letters are of one script, and one the word's letters are of already. A real
    word rarely is: "Fuß“" in cp1250 reads back as "Fu" and an NKo letter, Ukrainian "Ні" in
    cp1251 as a Greek letter; "Р”Р°" reads back as Cyrillic "Да", "VerfГјgt" as Latin."""
    try:
        fixed = word.encode(page).decode("utf-8")
    except UnicodeError:
        return False
    scripts = _scripts(fixed)
    return fixed != word and len(scripts) == 1 and scripts <= _scripts(word)


def _matches(texts: pa.Array, pattern: str) -> np.ndarray:
    return _np(pc.match_substring_regex(texts, pattern).fill_null(False)).astype(bool)


def _matches_on(texts: pa.Array, candidates: np.ndarray, pattern: str) -> np.ndarray:
    """``pattern`` on the ``candidates`` rows (a mask); False elsewhere."""
    rows = np.flatnonzero(candidates)
    out = np.zeros(len(texts), dtype=bool)
    if len(rows):
        out[rows] = _matches(texts.take(pa.array(rows)), pattern)
    return out


#: ``_HTML`` needs ``<`` or ``&``; ``url_only`` looks at rows with ``://``, ``www.``, ``@`` or
#: ``/`` (``://`` holds ``/``, so it need not be looked for)
_HTML_NEEDLES = (b"<", b"&")
_URL_NEEDLES = (b"www.", b"@", b"/")


def word_runs_over(texts: pa.Array, limit: int) -> np.ndarray:
    """``max_word_run(texts) > limit``, with :func:`max_word_run` run on candidate rows only.

    ``limit + 1`` equal words in a row, one space apart, need ``limit`` spaces with equal
    gaps between them and the same byte (of the lower-cased text) before each and after each:
    a cheap test on the positions of the spaces that real text passes rarely.
    """
    n = len(texts)
    if limit < 2 or n == 0:
        return np.asarray(max_word_run(texts) > limit, dtype=bool)
    raw, offsets = utf8_bytes(pc.utf8_lower(texts.fill_null("")))
    out = np.zeros(n, dtype=bool)
    spaces = np.flatnonzero(raw == 0x20)
    if len(spaces) and spaces[-1] == len(raw) - 1:
        spaces = spaces[:-1]  # no word after it (and raw[0 - 1], below, is a harmless wrap)
    if len(spaces) < limit:
        return out
    before = raw[spaces - 1]
    after = raw[spaces + 1]
    gap = np.diff(spaces)
    # pair t: spaces t and t + 1 may separate two of the equal words
    pair = (gap >= 2) & (before[1:] == before[:-1]) & (after[1:] == after[:-1])
    width = limit - 1  # pairs in a window of limit spaces, all with one gap
    same_gap = gap[1:] == gap[:-1]
    if width <= 8:  # a few shifted ANDs
        ok = pair[: len(pair) - width + 1].copy()
        for k in range(1, width):
            ok &= pair[k: len(pair) - width + 1 + k]
            ok &= same_gap[k - 1: len(same_gap) - width + 1 + k]
    else:  # window sums
        cp = np.concatenate(([0], np.cumsum(pair)))
        ok = cp[width:] - cp[:-width] == width
        cd = np.concatenate(([0], np.cumsum(~same_gap)))
        ok &= (cd[width - 1:] - cd[:-(width - 1)]) == 0
    starts = np.flatnonzero(ok)
    if not len(starts):
        return out
    rows = unique(np.searchsorted(offsets, spaces[starts], side="right") - 1)
    out[rows] = max_word_run(texts.take(pa.array(rows))) > limit
    return out


#: one word of a copied stretch: a run of letters, or one Han, kana, Hangul or Thai character
#: (scripts written without spaces between words); digits are no words (numbers are copied
#: into any translation)
_COPY_WORD = re.compile(r"[\u0e00-\u0e4f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                        r"\uac00-\ud7af\uf900-\ufaff]|[^\W\d_]+")
#: quotation marks and brackets: a stretch inside them is cited (a sign's text, a title, the
#: original of a quote in parentheses), the way translations keep it
_CITE = set("\"'`“”„‟«»‹›‘’‚「」『』（）()[]【】〈〉《》")
_URL = re.compile(_URLISH + r"|@\w+")  # and @handles


def _cited(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` has a quotation mark or bracket just before or after it
    (among the two characters other than spaces on each side; an apostrophe between two
    letters, as in "can't", is none)."""
    near: list[int] = []
    for p, step in ((start - 1, -1), (end, 1)):
        found = 0
        while 0 <= p < len(text) and found < 2:
            if not text[p].isspace():
                near.append(p)
                found += 1
            p += step
    return any(text[p] in _CITE and not (text[p] in "'’" and 0 < p < len(text) - 1
                                         and text[p - 1].isalpha() and text[p + 1].isalpha())
               for p in near)


def copied_span(src: str, tgt: str) -> str | None:
    """The stretch of words one side copies from the other where it is junk, else None.

    Junk: stretches of at least 3 words in a row, written the same (case aside) on both
    sides, that together make at least half of the shorter side's words — a bilingual line
    (the translation and its source), a machine translation that left half the sentence as
    it was, or all of it with a word changed here and there. Not junk, so
    ``None``: names and titles (half the stretch's words or more capitalized, a sentence's
    first word aside: "Game of Thrones star Kit Harington", "Rio de la Plata"), a stretch
    cited in quotation marks or brackets on either side (a sign's text, the original of a
    quote), URLs, e-mail addresses and @handles (left out before comparing), numbers and
    one-letter Latin words (not counted). A whole side copied beside half as many words again
    on the other is junk whatever its capitals and quotation marks: a headline or a quote
    beside its translation is still a bilingual line. Measured on 224,378 real pairs (Tatoeba,
    Multi30k, NTREX's 32 languages, the WMT sample, microtopia): docs/quality.md, *Copied
    text: measurements*."""
    a, b = _URL.sub(" ", src), _URL.sub(" ", tgt)
    # one Latin letter is no word to count: a clitic ("I'd", "can't") or an article
    words_a = [w for w in _COPY_WORD.finditer(a) if len(w.group()) > 1 or not w.group().isascii()]
    words_b = [w for w in _COPY_WORD.finditer(b) if len(w.group()) > 1 or not w.group().isascii()]
    if len(words_a) < 3 or len(words_b) < 3:
        return None
    matcher = difflib.SequenceMatcher(
        None, [w.group().casefold() for w in words_a], [w.group().casefold() for w in words_b],
        autojunk=False)
    match = matcher.find_longest_match(0, len(words_a), 0, len(words_b))
    size = match.size
    shorter, longer = sorted((len(words_a), len(words_b)))
    if size < 3:
        return None
    if 2 * size < shorter:
        # the stretches of 3 words or more, in order on both sides: a copy with a word
        # changed here and there is cut into several ("Videos are circulating on social
        # sagte showing the moment of impact.")
        copied = sum(block.size for block in matcher.get_matching_blocks() if block.size >= 3)
        if 2 * copied < shorter:
            return None
    run = words_a[match.a:match.a + size]
    start, end = run[0].start(), run[-1].end()
    if size == shorter and longer - size >= max(3, size // 2):
        # the whole of one side, and half as many words again beside it on the other (a
        # translation may take fewer words): the side and its translation on one line, a
        # headline or a quotation alike
        return a[start:end]
    # a capital at the start of a sentence says nothing of a name
    opens = int(a[:run[0].start()].rstrip()[-1:] in ("", ".", "!", "?", ":", ";"))
    judged = [w.group() for w in run[opens:]]
    if 2 * sum(1 for w in judged if w[:1].isupper()) >= len(judged):
        return None
    if _cited(a, start, end) or _cited(b, words_b[match.b].start(),
                                       words_b[match.b + size - 1].end()):
        return None
    return a[start:end]


#: sentence end marks (Latin, CJK, Devanagari and Bengali, Arabic, Armenian, Ethiopic,
#: Tibetan, Burmese, Khmer; the ASCII bar written for a danda, the semicolon for the Greek
#: question mark)
_END_MARKS = ".!?…。！？।॥|؟۔։፡።፧།။។;\u037e"
#: the full stops among them, which a shuffle carries inside (a question or exclamation mark
#: inside is often a quotation: Tamil and Sinhala put the verb of saying after it; the
#: Tibetan shad ends clauses too, and took 25 of NTREX's 1,997 Tibetan pairs)
_FULL_STOPS = ".।۔։።။។"
#: what may close a sentence after its mark: quotes and brackets (a Chinese side's closing
#: quote is often an opening one)
_CLOSERS = "\"'“”‘’«»＂)\\]」』）》】〉"
#: a side that ends a sentence: an end mark and closers, or a Japanese closing quote alone
#: (no 。 before 」 is the convention)
_SENTENCE_END = rf"(?:[{re.escape(_END_MARKS)}][{_CLOSERS}\s]*|[」』][{_CLOSERS}\s]*)$"
#: a sentence end inside a side: a word of two letters or a letter and its signs (not an
#: abbreviation: U.S., a.m., a one-letter initial), its full stop, and a word that does not
#: start with a capital (a letter of a script without case counts); or a CJK end mark and
#: then more text
_END_INSIDE = (r"(?:^|[^\p{L}\p{M}\p{N}.])\p{L}[\p{L}\p{M}]+"
               rf"[{_FULL_STOPS}]\s+[\p{{Ll}}\p{{Lo}}]|[。！？][^\s。！？{_CLOSERS}]")
#: what any such end has, in classes quick to compile: a full stop, a space and no capital
#: A-Z, digit, quote or bracket after it, or a CJK end mark with more text after it
_MARK_INSIDE = rf"[{_FULL_STOPS}]\s+[^\sA-Z0-9\"'(\[]|[。！？]."
#: a side of more than one sentence (or with an abbreviation): an end mark with more text
#: after it
_MORE_AFTER_END = (rf"[{re.escape(_END_MARKS)}][{_CLOSERS}]*\s+\S"
                   rf"|[。！？][^\s。！？{_CLOSERS}]")
#: a sentence end with a sentence after it: a word's last two letters in lower case (not
#: "Mr." or "U.S.") or a letter of a script without case (not a digit: "30. September" is a
#: German date), maybe a space (Moses tokenized), a full stop, question or exclamation mark,
#: its closers, a space and a capital or a letter without case, maybe behind an opening quote
#: or bracket; or a CJK end mark and more text
_NEXT_SENTENCE = (rf"(?:\p{{Ll}}\p{{Ll}}|\p{{Lo}}|\p{{M}}) ?[{re.escape(_FULL_STOPS)}!?]"
                  rf"[{_CLOSERS}]*\s+[\"'“‘«(\[]*[\p{{Lu}}\p{{Lo}}]"
                  rf"|[。！？][{_CLOSERS}]*\s*[^\s。！？{_CLOSERS}]")
#: a side is not judged where the batch leaves more of its single sentences without an end
#: mark than this (against a side that ends one; among the pairs no other rule rejects):
#: 0-2.5% in Tatoeba, Multi30k, the WMT sample and most NTREX languages (Arabic 5%, Amharic
#: and French 8%; with a quarter of the rows junk, cut sides among them, 14-15%), 49% in
#: microblog Chinese (Microtopia), 97% in Thai (no end mark) and 78% in NTREX's Armenian
#: (an ASCII colon for its full stop)
_MAX_UNENDED = 0.25
#: with fewer single sentences than this the share is not known, and the side is not judged;
#: it is measured on at most this many rows of a batch
_MIN_SINGLE = 100
_SAMPLE_ROWS = 4096


def sentence_ends_inside(src: pa.Array, tgt: pa.Array,
                         judged: np.ndarray | None = None) -> np.ndarray:
    """Pairs where one side is one sentence with its end mark, and the other has its sentence
    end inside and none at its end: the words of a side shuffled (word salad), its end mark
    carried along with the word it followed. Why the other side must end one sentence: a
    side of two sentences with no mark on the last is common where both sides are so
    (titles, lowercased corpora) or where the other has two as well. A side is judged only
    in a batch where its single sentences seldom go without their mark (:data:`_MAX_UNENDED`,
    measured on the ``judged`` rows: those no other rule rejects, so that cut sides do not
    count): elsewhere its multi-sentence ones do not either. Measured: no real pair of
    Tatoeba eng-cmn and eng-ben, Multi30k en-de/cs/fr, the WMT sample and LASER's Tatoeba
    test sets (149,974), 7 of NTREX's 67,898 in 35 languages (0.01%), 4 of Microtopia's 8,000
    microblog pairs (1,269 where every side was judged); shuffled targets caught 0.44-0.88
    where a corpus' sides end with a full stop (the WMT sample's often do not: 0.00)."""
    sides = (src, tgt)
    # anchored at the end only, RE2 reads each text backwards from its end
    ends = [_matches(side, _SENTENCE_END) for side in sides]
    # how often each side leaves a single sentence unended, on an even sample of the judged
    # rows (the unanchored patterns read every text whole)
    pool = np.arange(len(src)) if judged is None else np.flatnonzero(judged)
    sample = pool[::max(1, -(-len(pool) // _SAMPLE_ROWS))]
    more = [_matches(side.take(pa.array(sample)), _MORE_AFTER_END) for side in sides]
    shares = unended_shares(np.stack([e[sample] for e in ends]), np.stack(more))
    out = np.zeros(len(src), dtype=bool)
    for this, other in ((1, 0), (0, 1)):
        if not ends_sentences(shares[this]):
            continue
        # the other side one sentence, this one more; the quick pattern before the Unicode
        # classes of _END_INSIDE, which take ~3 ms to compile on each call
        rows = ends[other] & ~ends[this]
        rows &= _matches_on(sides[this], rows, _MARK_INSIDE)
        rows &= ~_matches_on(sides[other], rows, _MORE_AFTER_END)
        out |= _matches_on(sides[this], rows, _END_INSIDE)
    return out


def sentence_marks(src: pa.Array, tgt: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per side (rows of two) and pair: the side ends with a sentence end mark; it holds one
    with more text after it (two sentences, or an abbreviation)."""
    sides = (src, tgt)
    return (np.stack([_matches(side, _SENTENCE_END) for side in sides]),
            np.stack([_matches(side, _MORE_AFTER_END) for side in sides]))


def unended_shares(ends: np.ndarray, more: np.ndarray) -> list[float | None]:
    """Per side, how often it leaves a single sentence without its end mark where the other
    side ends one (``ends``, ``more``: :func:`sentence_marks`); None under
    :data:`_MIN_SINGLE` such pairs, where the share is not known."""
    shares: list[float | None] = []
    for this, other in ((0, 1), (1, 0)):
        single = ends[other] & ~more[other] & ~more[this]
        shares.append(None if single.sum() < _MIN_SINGLE
                      else float(1.0 - ends[this][single].mean()))
    return shares


def ends_sentences(share: float | None, at_most: float = _MAX_UNENDED) -> bool:
    """A side whose single sentences seldom go without their end mark (``share``: from
    :func:`unended_shares`, no more than ``at_most``): only there does a missing one say
    something."""
    return share is not None and share <= at_most


#: a side whose missing end mark tells it was cut short: fewer of its single sentences go
#: without one, where the other side ends its own, than this. Measured on kept pairs whose
#: sides say about as much as each other: NTREX's English against French, German, Russian,
#: Chinese 0.4-0.8%, their translations 0.2-1.9%; Multi30k's German 0.3%, French 0.1%, its
#: English against French 0.4% (the French leaves the mark off where the English does); but
#: its English against German 3.8% and Czech 3.1%, terse captions translated into a sentence
#: ("Person hanging upside down from poles" / "Eine Person die mit dem Kopf nach unten von
#: Stangen hängt.": judged at 2.5 spreads, 31 of its 29,000 real pairs went), its Czech
#: 4.0%, NTREX's English headlines against Amharic and Burmese 2.3-3.5%
MAX_UNENDED_CUT = 0.02


def lost_end(src: pa.Array, tgt: pa.Array, judged: tuple[bool, bool]) -> np.ndarray:
    """Per pair, +1 where the source ends its sentence and the target has no end mark, -1
    the other way round, 0 elsewhere (int8); a side counts only where ``judged`` (the
    corpus' sides of that kind end their sentences: :func:`ends_sentences` at
    :data:`MAX_UNENDED_CUT`).

    Why: a side cut short (a truncated crawl, a segment that lost its end) stops before its
    mark; the align stage's ``partial_translation`` asks less of a side that says less where
    it also lost the end the other side has (down to ``align.partial_z_sentence``, the less
    the rarer a missing mark is among the corpus' real pairs). Alone it says little: titles
    and captions go without one."""
    out = np.zeros(len(src), dtype=np.int8)
    if not any(judged):
        return out
    ends = [_matches(side, _SENTENCE_END) for side in (src, tgt)]
    if judged[1]:
        out[ends[0] & ~ends[1]] = 1
    if judged[0]:
        out[ends[1] & ~ends[0]] = -1
    return out


def sentence_more(src: pa.Array, tgt: pa.Array) -> np.ndarray:
    """Per pair, +1 where the source holds a sentence end with another sentence after it and
    the target holds none, -1 the other way round, 0 elsewhere (int8).

    Why: the next line glued onto a side, or a sentence split that went wrong, leaves that
    side a sentence more; the align stage's ``partial_translation`` asks less of a side that
    says more where it also holds a sentence more (``align.partial_z_sentence``). Alone it
    says little: an abbreviation ("Mr. Smith") or a translation that splits a sentence in
    two reads the same."""
    more = [_matches(side, _NEXT_SENTENCE) for side in (src, tgt)]
    out: np.ndarray = more[0].astype(np.int8) - more[1].astype(np.int8)
    return out


def copied_spans(src: pa.Array, tgt: pa.Array, rows: np.ndarray) -> np.ndarray:
    """:func:`copied_span` is not None, for the pairs at ``rows`` (a bool per row of ``src``).

    A stretch that makes half of the shorter side holds one of its quarters whole (a window
    of half a length holds one cell of a grid a quarter long), so only pairs where a quarter
    of the shorter side, case aside, appears in the longer one are compared word by word:
    1.3% of the 224,378 real pairs of :func:`copied_span`, 0.3% of ``bench_clean.py``'s
    100k corpus, at 1.8 µs a pair in all."""
    out = np.zeros(len(src), dtype=bool)
    if not len(rows):
        return out
    s_low = pc.utf8_lower(src).to_pylist()
    t_low = pc.utf8_lower(tgt).to_pylist()
    candidates = []
    for k in rows.tolist():
        s, t = s_low[k] or "", t_low[k] or ""
        short, long = (s, t) if len(s) <= len(t) else (t, s)
        q = len(short) // 4
        if q >= 3 and (short[:q] in long or short[q:2 * q] in long
                       or short[2 * q:3 * q] in long or short[3 * q:] in long):
            candidates.append(k)
    if candidates:
        picked = np.asarray(candidates)
        at = pa.array(picked)
        for i, s, t in zip(picked, src.take(at).to_pylist(), tgt.take(at).to_pylist(),
                           strict=True):
            out[i] = copied_span(s or "", t or "") is not None
    return out


def cut_short(src: pa.Array, tgt: pa.Array, judged: np.ndarray,
                 scripts: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)
                 ) -> np.ndarray:
    """Rows where one side stops where no sentence ends while the other ends its sentence:
    a segment cut at a length limit, a truncated crawl (``… und ich musste mich von ih``).

    A cut mostly falls inside a word, and the piece it leaves is not a word the corpus
    writes: the side's last word is seen nowhere else in the batch's side whole (the last
    words of rows that end in a letter aside: they may be pieces too) but starts a longer
    word there (``ihr``, ``ihre``). A cut between words often leaves a common word that ends
    no sentence there (``… aufgrund seines Einsatzes bei``, ``… over the``). A real side that
    goes without its end mark ends in a whole word that may end a sentence ("… gewann die
    Auszeichnung" / "… won the award."). Only last words of letters of the side's
    ``scripts`` (where known; not of a script written without spaces) are judged: a name in
    another script has too few words beside it to be read against. Rows of ``judged`` only.

    Calibrated on the side's own last words of sentences (the word before an end mark), read
    as a side's last word is, each leaving itself out: the share of them the two tests would
    flag says how many real sides without their mark they would. The flags are believed only
    at :data:`_MIN_EXCESS` times that (a corpus whose sides are cut gives far more; a clean
    one gives about that, and none stand), and not in a side of under :data:`_MIN_WORDS`
    words. Cost: words are read in rows spread over the batch that hold about
    :data:`_READ_WORDS` words (and the rows judged); where flags may stand, the pieces not
    seen whole there are looked for among all the batch's words."""
    out = np.zeros(len(src), dtype=bool)
    if not len(src) or not judged.any():
        return out
    for side, other, own in ((src, tgt, scripts[0]), (tgt, src, scripts[1])):
        letters = _word_letters(own)
        if letters is None:
            continue
        raw, _ = utf8_bytes(side)
        words = int(np.count_nonzero(raw == 0x20)) + len(side)  # about: spaces part them
        if words < _MIN_WORDS:
            continue
        letter_end = ends_in_letter(side)
        candidates = judged & letter_end
        candidates &= _matches_on(other, candidates, _SENTENCE_END)
        rows = np.flatnonzero(candidates)
        if not len(rows):
            continue
        # words are read in rows spread over the batch and the candidates': each row's last
        # word apart (a letter-ended row's may be a piece; a sentence's is counted apart, to
        # read the corpus' own last words)
        step = max(1, words // _READ_WORDS)
        read = unique(np.concatenate([np.arange(0, len(src), step), rows]))
        texts = side.take(pa.array(read))
        inner, read_last = _read_words(texts)
        judgeable = _np(pc.match_substring_regex(read_last, letters)).astype(bool)
        judgeable &= _np(pc.utf8_length(read_last)) <= _MAX_CUT_WORD
        at = np.searchsorted(read, rows)
        rows, at = rows[judgeable[at]], at[judgeable[at]]
        if not len(rows):
            continue
        last_words = read_last.to_pylist()
        lasts = [last_words[k] for k in at.tolist()]
        ended = _matches(texts, _SENTENCE_END) & judgeable
        final_words = [last_words[k] for k in np.flatnonzero(ended).tolist()]
        ends = collections.Counter(final_words)
        test = _LastWords(inner, ends, sorted(set(inner).union(ends, lasts)))
        suspects = {row: word for row, word in zip(rows.tolist(), lasts, strict=True)
                    if test.cut(word)}
        # the corpus' own last words of sentences, read as a side's last word is (each
        # leaving itself out; without the second look in the whole batch, so more are
        # taken): how many real sides without their mark would be flagged. Only flags well
        # above that are believed.
        mistaken = sum(1 for word in final_words if test.cut(word, own=1))
        expected = (mistaken + 1) / (len(final_words) + 2) * len(rows)
        if len(suspects) <= _MIN_EXCESS * expected:  # the flags are some of the suspects
            continue
        # a piece not read whole in the rows read may be whole in another row of the batch
        pieces = {word for word in suspects.values() if word not in inner}
        seen = pieces.intersection(_word_counts(side, letter_end)) if pieces else set()
        flagged = [row for row, word in suspects.items() if word not in seen]
        if len(flagged) > _MIN_EXCESS * expected:
            out[flagged] = True
    return out


#: the words a batch's side must hold for :func:`cut_short` to judge it (in fewer, a real
#: word is seen nowhere else too often: before the calibration below, 18 of LASER's 307
#: Tamil Tatoeba pairs, verb stems like பேசு whose inflected forms were seen) …
_MIN_WORDS = 10_000
#: … and about how many of them it reads whole words in (rows spread over the batch)
_READ_WORDS = 30_000
#: how many times the flags a side's real last words would get :func:`cut_short`'s flags
#: must be to be believed (so two of three are cuts)
_MIN_EXCESS = 3.0
#: how often a word must occur in the words read for ending no sentence there to say that a
#: side ending in it was cut between words (at 10: real pairs flagged 4 -> 28 of 136,300)
_COMMON_WORD = 30
#: the longest last word judged, in characters (a cut leaves a piece shorter than its word)
_MAX_CUT_WORD = 24
_NOT_WORD = r"[^\p{L}\p{M}\p{N}]+"
_WORD_CHAR = r"[\p{L}\p{M}\p{N}]"


@dataclass(frozen=True)
class _LastWords:
    """What the words read in a batch's side say of a side's last word (:func:`cut_short`)."""

    #: each word's count, but for the rows' last words
    inner: dict[str, int]
    #: the last words of sentences (before an end mark)
    ends: collections.Counter[str]
    #: every word read, sorted (for the words a piece starts)
    ordered: list[str]

    def cut(self, word: str, own: int = 0) -> bool:
        """``word`` reads as where a cut stopped: a piece, seen nowhere whole but starting a
        longer word, or a common word that ends no sentence (``von``, ``the``). ``own``: how
        often ``word`` is counted among ``ends`` as itself (1 for a sentence's own last word)."""
        if word not in self.inner:
            return self.ends[word] <= own and _starts_longer(self.ordered, word)
        return self.inner[word] >= _COMMON_WORD and self.ends[word] <= own


def _word_letters(scripts: tuple[str, ...] | None) -> str | None:
    """A regex for a word of ``scripts``' letters (any script written with spaces where not
    known); None where every one of them is written without spaces."""
    if scripts is None:
        banned = "".join(rf"\p{{{name}}}" for name in sorted(CJK))
        return rf"^[^{banned}]+$"
    spaced = [name for name in scripts if name not in CJK]
    if not spaced:
        return None
    return "^[" + "".join(rf"\p{{{name}}}" for name in spaced) + r"\p{Inherited}\p{N}]+$"


def _starts_longer(ordered: list[str], word: str) -> bool:
    """Some word of ``ordered`` (sorted) is ``word`` and more."""
    at = bisect.bisect_right(ordered, word)
    return at < len(ordered) and ordered[at].startswith(word)


def _spaced_pieces(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The pieces of ``texts`` between spaces, one after another, and each row's offsets into
    them (``n + 1``)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    lists = pc.split_pattern(texts, " ")
    offsets = np.asarray(lists.offsets.to_numpy(), dtype=np.int64) - int(lists.offsets[0].as_py())
    return lists.flatten(), offsets


def _counted(pieces: pa.Array) -> dict[str, int]:
    """How often each word of ``pieces`` occurs, in lower case (runs of letters, marks and
    digits): the distinct pieces split at the rest (one regex over far fewer strings), summed
    in Arrow."""
    distinct = pc.value_counts(pc.utf8_lower(pieces))
    split = pc.split_pattern_regex(distinct.field(0), _NOT_WORD)
    words = pa.table({"word": pc.list_flatten(split),
                      "n": distinct.field(1).take(pc.list_parent_indices(split))})
    summed = words.group_by("word").aggregate([("n", "sum")]).to_pydict()
    found = dict(zip(summed["word"], summed["n_sum"], strict=True))
    found.pop("", None)
    return found


def _word_counts(texts: pa.Array | pa.ChunkedArray, drop_last: np.ndarray) -> dict[str, int]:
    """How often each word of ``texts`` occurs (:func:`_counted`), but for the last piece
    (between spaces) of the rows of ``drop_last``: a side's last word that may be a piece."""
    pieces, offsets = _spaced_pieces(texts)
    keep = np.ones(len(pieces), dtype=bool)
    drop = np.flatnonzero(drop_last & (offsets[1:] > offsets[:-1]))
    keep[offsets[drop + 1] - 1] = False
    return _counted(pieces.filter(pa.array(keep)))


def _read_words(texts: pa.Array) -> tuple[dict[str, int], pa.Array]:
    """How often each word of ``texts`` occurs but for each row's last piece, and each row's
    last word: the last run of letters, marks and digits in the last piece that holds one
    (past the marks and spaces after it: ``Hund .``, ``« Hund » .``), "" where there is none;
    all in lower case by Arrow (Python's ``str.lower`` makes Turkish ``İ`` two code points,
    Arrow one)."""
    pieces, offsets = _spaced_pieces(texts)
    if not len(pieces):  # every row null
        return {}, pa.array([""] * len(texts), pa.string())
    sizes = offsets[1:] - offsets[:-1]
    last = np.maximum(offsets[1:] - 1, 0)
    keep = np.ones(len(pieces), dtype=bool)
    keep[last[sizes > 0]] = False
    counts = _counted(pieces.filter(pa.array(keep)))
    # each row's last piece with a word character: the latest such piece up to the row's end,
    # if it lies in the row
    wordy = _np(pc.match_substring_regex(pieces, _WORD_CHAR).fill_null(False)).astype(bool)
    latest = np.maximum.accumulate(np.where(wordy, np.arange(len(pieces)), -1))[last]
    found = (sizes > 0) & (latest >= offsets[:-1])
    tails = pc.if_else(pa.array(found), pieces.take(pa.array(np.maximum(latest, 0))),
                       pa.scalar("", pieces.type))
    split = pc.split_pattern_regex(pc.utf8_lower(tails), _NOT_WORD).to_pylist()
    lasts = [next((word for word in reversed(words) if word), "") for words in split]
    return counts, pa.array(lasts, pa.string())


def repeated_whole(texts: pa.Array) -> np.ndarray:
    """Sides that are one phrase written 2 or 3 times (with one byte, or none, between the
    copies): "X. X." — a crawl that doubled a segment. The phrase must hold 3 words whose
    letters take 12 bytes of UTF-8 (about 4 Chinese characters, 12 Latin letters): "Bye
    bye.", "Knock knock.", "对不起，对不起" are real. Candidates by comparing a few bytes of the
    copies (numpy over the UTF-8 buffer), then the copies whole."""
    n = len(texts)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    raw, offsets = utf8_bytes(texts)
    start = offsets[:-1]
    length = offsets[1:] - start
    for k, gap in ((2, 1), (2, 0), (3, 1), (3, 0)):
        unit, extra = np.divmod(length - (k - 1) * gap, k)
        ok = (extra == 0) & (unit >= 8)
        rows = np.flatnonzero(ok & ~out)
        if not len(rows):
            continue
        u, o = unit[rows], start[rows]
        for j in (0, 1, 2, 3):  # the first bytes of every copy agree
            for c in range(1, k):
                same = raw[o + j] == raw[o + c * (u + gap) + j]
                rows, u, o = rows[same], u[same], o[same]
        for i, unit_len, at in zip(rows.tolist(), u.tolist(), o.tolist(), strict=True):
            first = raw[at:at + unit_len].tobytes()
            if all(raw[at + c * (unit_len + gap):at + c * (unit_len + gap) + unit_len]
                   .tobytes() == first for c in range(1, k)):
                words = size = 0
                for word in _COPY_WORD.finditer(first.decode("utf-8", errors="replace")):
                    words, size = words + 1, size + len(word.group().encode())
                    if words >= 3 and size >= 12:
                        out[i] = True
                        break
    return out


def max_word_run(texts: pa.Array) -> np.ndarray:
    """Longest run of one word repeated back to back, case-insensitively, per row."""
    n = len(texts)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    words = pc.split_pattern(pc.utf8_lower(texts.fill_null("")), pattern=" ")
    flat = pc.list_flatten(words)
    row = _np(pc.list_parent_indices(words))
    nonempty = _np(pc.binary_length(flat)) > 0
    out[row[nonempty]] = 1
    if len(flat) < 2:
        return out
    same = _np(pc.equal(flat.slice(1), flat.slice(0, len(flat) - 1))).astype(bool)
    same &= (row[1:] == row[:-1]) & nonempty[1:]
    # length of the run of equal neighbours ending at each position, then the longest per row
    count = np.cumsum(same)
    run = count - np.maximum.accumulate(np.where(same, 0, count))
    np.maximum.at(out, row[1:][same], run[same] + 1)
    return out


def _densest(x: np.ndarray, share: float) -> tuple[float, float]:
    """Midpoint of the shortest interval that holds ``share`` of ``x``, and the standard
    deviation a normal distribution holding that share in that interval would have."""
    v = np.sort(x)
    k = max(2, math.ceil(share * len(v)))
    widths = v[k - 1:] - v[: len(v) - k + 1]
    i = int(np.argmin(widths))
    half = float(widths[i]) / 2
    return float(v[i] + v[i + k - 1]) / 2, half / _NORMAL_QUANTILE[share]


#: x with P(|Z| < x) = share, for a standard normal Z
_NORMAL_QUANTILE = {0.25: 0.3186, 0.5: 0.6745}


@dataclass(frozen=True)
class LengthRatioFit:
    """How the log length ratio of a corpus' translations is distributed, measured on it.

    ``x = log((src + s) / (tgt + s))`` in length units. Its centre is the corpus' own
    (languages differ: German runs ~20% longer than English, Chinese ~3x shorter in
    characters even after weighting); its spread shrinks with length like counting noise,
    ``var = floor + per_char / (L + s)`` with ``L`` the length the longer side predicts for
    both (so a side cut to a quarter does not widen its own band). The fit starts from the
    densest quarter of the ratios, reads them as a mixture of translations, a broad
    background and a lump on each side (EM, :meth:`_unmixed`), then is refitted on the rows
    within three spreads that it gives a fair chance of being translations (sigma clipping,
    the spread in four bins of length), so junk — half the rows re-paired, cut or appended,
    say — neither drags the centre nor widens the band much. Measured at 3 spreads and a
    floor of 2x: 0.0-0.5% of real Tatoeba, Multi30k and NTREX pairs, and 0.95-1.0 of targets
    cut to a quarter.
    """

    center: float
    floor: float
    per_char: float
    rows: int

    #: fewer rows than this give no fit; the prior (measured on Tatoeba, Multi30k, NTREX:
    #: spread 0.15-0.3 in log ratio, about 1/L counting noise) stands in. ``per_char`` is
    #: at least ``COUNTING_NOISE``
    MIN_ROWS: ClassVar[int] = 200
    PRIOR: ClassVar[tuple[float, float, float]] = (0.0, 0.04, 1.0)
    BINS: ClassVar[int] = 4
    COUNTING_NOISE: ClassVar[float] = 1.0
    CLIP: ClassVar[float] = 3.0
    ROUNDS: ClassVar[int] = 4
    #: EM rounds of the mixture (:meth:`_unmixed`: 10 left the spread at half junk 1.16x that
    #: of the real pairs alone, 20 1.09x, 30 1.06x), the most rows it is fitted on, and the
    #: least probability of being a translation a row the clipping after it reads has. A
    #: trade: 0.01 let the junk back in (at half junk 1.49x), 0.3 cut the translations' own
    #: tails (the length rule alone on short Tatoeba pairs, a quarter junk: 0.75% of the real
    #: pairs lost, 0.18% before the side normals); 0.1: 1.17x and 0.45%; 0.2: 1.09x and 0.64%
    MIX_ROUNDS: ClassVar[int] = 20
    MIX_ROWS: ClassVar[int] = 4096
    MIN_P_TRANSLATION: ClassVar[float] = 0.2
    #: the least distance, in the translations' spreads, of a side normal of the mixture
    SIDE_OFF: ClassVar[float] = 2.0
    #: variance of a standard normal cut at ±3
    CLIPPED_VARIANCE: ClassVar[float] = 0.9733

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray, s: float) -> LengthRatioFit:
        """Fit on the lengths of the rows that passed the side rules (junk among them)."""
        both = (a > 0) & (b > 0)
        a, b = a[both], b[both]
        if len(a) < cls.MIN_ROWS:
            return cls(*cls.PRIOR, rows=len(a))
        x = np.log((a + s) / (b + s))
        # start from the densest quarter of the ratios (a mode, not the median): junk that
        # lies to one side moves it least
        center, spread = _densest(x, 0.25)
        fit = cls(center, max(spread ** 2 - cls.COUNTING_NOISE * float(np.median(
            1.0 / (np.maximum(a, b) + s))), 0.05 ** 2), cls.COUNTING_NOISE, rows=len(a))
        # the mixture, fitted on an even sample of the rows (its EM rounds cost the most)
        fit, translation = fit._unmixed(a, b, x, s, max(1, -(-len(a) // cls.MIX_ROWS)))
        # then sigma clipping from there, among the rows the mixture does not give to the
        # background: a mixture of two normals gives the translations' own tails (free
        # translations) to the background too, and its band alone took 0.60% of the real
        # pairs of 11 corpora with no junk, sigma clipping 0.45%; clipping among all rows,
        # each round let more of the junk back (targets cut to their half, at 50% junk:
        # 0.50 caught after one round, 0.43 after two, 0.35 after three)
        translation = translation >= cls.MIN_P_TRANSLATION
        for _ in range(cls.ROUNDS):
            inside = (np.abs(fit.z(a, b, s)) < cls.CLIP) & translation
            if inside.sum() < cls.MIN_ROWS:
                break
            fit = cls._fit(a, b, x, s, inside.astype(np.float64), cls.CLIPPED_VARIANCE)
        return replace(fit, rows=len(a))

    def _unmixed(self, a: np.ndarray, b: np.ndarray, x: np.ndarray, s: float, step: int
                 ) -> tuple[LengthRatioFit, np.ndarray]:
        """The translations' fit, the ratios read as a mixture of it and a background, by EM on
        every ``step``-th row; and each row's probability of being a translation under it.

        The background: a broad normal (junk spread over the ratios: re-paired, shifted) and
        one normal on each side of the translations, :attr:`SIDE_OFF` of their spreads off or
        more, each a translation moved one way (its variance a translation's plus its own): a
        side cut short or a sentence appended moves the ratio one way, by about as much each
        time. Why not sigma clipping alone: where half the rows are junk, the junk within three
        spreads widened the spread, which let more junk in, round after round, until the band
        held it (NTREX at 50% junk: floor 0.15 against the translations' 0.03). Why the side
        normals: with the broad one alone, a lump of such junk beside the translations was
        read as translations. Replayed on the rules stage's batches (docs/quality.md, *The
        length ratio at half junk*), the spread came out 1.33x / 1.73x that of a fit on the
        real pairs alone at a quarter / half of the rows cut or appended (NTREX, 9 languages),
        1.89x (up to 3.2x) with junk of that one kind at half; with them 1.09x / 1.09x / 1.05x.
        """
        sample = slice(None, None, step)
        a_, b_, x_ = a[sample], b[sample], x[sample]
        fit = self
        spread = math.sqrt(float(np.median(fit.variance(a_, b_, s))))
        # translations; broad; a side cut or appended, to the left and to the right: a
        # translation moved one way, so its variance is a translation's plus its own
        shares = np.array([0.5, 0.2, 0.15, 0.15])
        broad_center = float(np.mean(x_))
        broad_var = 4.0 * max(float(np.var(x_)), spread ** 2)
        side_centers = [fit.center - 3.0 * spread, fit.center + 3.0 * spread]
        side_extra = [spread ** 2, spread ** 2]

        def responsibilities(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
            var = fit.variance(a, b, s)
            dens = [_normal(x, fit.center, var), _normal(x, broad_center, broad_var)]
            dens += [_normal(x, c, var + e) for c, e in zip(side_centers, side_extra,
                                                            strict=True)]
            joint = np.stack(dens, axis=1) * shares
            out: np.ndarray = joint / np.maximum(joint.sum(axis=1, keepdims=True),
                                                 np.finfo(np.float64).tiny)
            return out

        for _ in range(self.MIX_ROUNDS):
            resp = responsibilities(a_, b_, x_)
            if resp[:, 0].sum() < self.MIN_ROWS // 4:
                break  # no translations left to fit: keep the last fit
            shares = np.maximum(resp.mean(axis=0), 1e-4)
            fit = self._fit(a_, b_, x_, s, resp[:, 0], 1.0)
            var = fit.variance(a_, b_, s)
            spread = math.sqrt(float(np.median(var)))
            weight = resp[:, 1]
            if weight.sum() > 1.0:
                broad_center = float(np.sum(weight * x_) / weight.sum())
                broad_var = max(float(np.sum(weight * (x_ - broad_center) ** 2) / weight.sum()),
                                4.0 * spread ** 2)
            for k, side in enumerate((-1.0, 1.0)):
                weight = resp[:, k + 2]
                if weight.sum() <= 1.0:
                    continue
                center = float(np.sum(weight * x_) / weight.sum())
                # on its side, SIDE_OFF spreads off or more
                center = fit.center + side * max(side * (center - fit.center),
                                                  self.SIDE_OFF * spread)
                side_centers[k] = center
                side_extra[k] = max(float(np.sum(weight * ((x_ - center) ** 2 - var))
                                          / weight.sum()), 0.0)
        return fit, responsibilities(a, b, x)[:, 0]

    @classmethod
    def _fit(cls, a: np.ndarray, b: np.ndarray, x: np.ndarray, s: float, weight: np.ndarray,
             kept_variance: float) -> LengthRatioFit:
        """Centre and spread of the rows as ``weight`` counts them (the bins of length, and
        the length each bin's spread is taken at, from every row it counts at all); each
        bin's variance divided by ``kept_variance`` (what a unit normal keeps where the rows
        were cut)."""
        total = float(weight.sum())
        center = float(np.sum(weight * x) / total)
        h = 1.0 / (np.maximum(a, b * math.exp(center)) + s)
        # few, wide bins: lengths are whole numbers, and in a narrow bin the ratios sit on a
        # lattice (Tatoeba's short pairs)
        bins = min(cls.BINS, int(total) // (cls.MIN_ROWS // 4))
        counted = np.sort(h[weight > 0])
        edges = np.unique(np.quantile(counted, np.linspace(0.0, 1.0, bins + 1)))
        hs, vs = [], []
        if len(edges) >= 2:
            at = np.clip(np.searchsorted(edges, h, side="right") - 1, 0, len(edges) - 2)
            counts = np.bincount(at, weights=weight, minlength=len(edges) - 1)
            squares = np.bincount(at, weights=weight * (x - center) ** 2,
                                  minlength=len(edges) - 1)
            # each bin's rows are a run of the sorted lengths: its median is the run's
            ends = np.searchsorted(counted, edges, side="left")
            ends[-1] = len(counted)
            for j in np.flatnonzero(counts >= cls.MIN_ROWS // 4):
                vs.append(float(squares[j] / counts[j]) / kept_variance)
                hs.append(float(np.median(counted[ends[j]:ends[j + 1]])))
        if not vs:
            return cls(center, cls.PRIOR[1], cls.PRIOR[2], rows=len(a))
        per_char, floor = 0.0, 0.0
        if len(hs) >= 2 and np.ptp(hs) > 0:
            per_char, floor = (float(v) for v in np.polyfit(hs, vs, 1))
        if per_char < cls.COUNTING_NOISE:
            # a length is a count: its log varies by about 1/L from counting alone, whatever
            # a corpus of short sentences only (where no slope shows) suggests; the rest of
            # the spread is the floor
            per_char = cls.COUNTING_NOISE
            floor = float(np.median(np.asarray(vs) - per_char * np.asarray(hs)))
        return cls(center, max(floor, 0.05 ** 2), per_char, rows=len(a))

    def z(self, a: np.ndarray, b: np.ndarray, s: float = 1.0) -> np.ndarray:
        """Signed distance of each pair's log ratio from the centre, in spreads (src longer
        is positive)."""
        x = np.log((a + s) / (b + s))
        return np.asarray((x - self.center) / np.sqrt(self.variance(a, b, s)))

    def variance(self, a: np.ndarray, b: np.ndarray, s: float = 1.0) -> np.ndarray:
        """The log ratio's variance for translations of these lengths."""
        return np.asarray(self.floor + self.per_char / (self.length(a, b) + s))

    def length(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The length the longer side predicts for both (what the spread shrinks with)."""
        return np.asarray(np.maximum(a, b * math.exp(self.center)))


#: bins of the other side's word count in which :func:`spaces_lost` measures the spread, the
#: least rows below the centre (where the spread is read) a bin needs to count, and the least
#: rows a side is judged on at all
_WORD_BINS = (1, 2, 3, 4, 6, 9, 14, 25)
_MIN_BELOW_ROWS = 25
_MIN_SPACED_ROWS = 200
#: brackets, and what parts words in :func:`_spaced_words`: a word holds a letter or digit
_BRACKETS = tuple(c.encode() for c in "()[]{}（）")
_BRACKETS_OR_SPACES = re.compile(r"[\s()\[\]{}（）]+")
_WORDY = re.compile(r"[^\W_]")
#: the least words a side without spaces must say, by its length, for its spaced partner to be
#: judged alone (:func:`spaces_lost`), and how many times the usual length that partner's
#: words must be: measured on Tatoeba eng-cmn (at 2x with no least, 32 of its 29,155 real
#: pairs flagged, `Definitely!` / 必须的！; at 3x and 4 words, none, and 0.96 of its English
#: sides run together caught)
_MIN_DENSE_WORDS = 4.0
_DENSE_FLOOR = 3.0
#: the least spread of a log mean word length a fit may give (rows of nearly one length)
_MIN_WORD_SPREAD = 0.05
#: the clip around the centre, in spreads, and the median absolute deviation of a standard
#: normal cut there over the uncut one's
_CLIP_SPREADS = 3.0
_CLIPPED_MAD = 0.996


def _word_length_z(x: np.ndarray, n: np.ndarray, fit_on: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """``x`` (a log mean word length) in spreads above the corpus' own, and its distance
    above it, the two measured on the rows themselves. The centre: the densest quarter of
    ``x`` (run-together sides lie above it, so the mode holds where a median would move with
    them). The spread: from the rows below the centre, where run-together sides never are
    (the median distance, as a normal's), then from both sides within 3 of those spreads, in
    each bin of ``n``, the other side's word count; ``var = floor + per_word / n`` through the
    bins (few words, more noise). With half the targets run together, a median and its
    absolute deviation lost 0.3-0.5 of them. Fitted on the rows ``fit_on`` (default all);
    None where no bin holds enough rows below the centre to measure a spread on (a batch of
    a few hundred short sentences spread over the bins)."""
    fitted = np.ones(len(x), dtype=bool) if fit_on is None else fit_on
    center = _densest(x[fitted], 0.25)[0]
    inv, var = [], []
    edges = (*_WORD_BINS, np.inf)
    for lo, hi in itertools.pairwise(edges):
        inside = fitted & (n >= lo) & (n < hi)
        below = inside & (x < center)
        if int(below.sum()) >= _MIN_BELOW_ROWS:
            spread = float(np.median(center - x[below])) / _NORMAL_QUANTILE[0.5]
            # then both sides, within 3 of those spreads: a language whose long words come
            # in more often than its short ones (Korean's 카트리나(Katrina)는) widens it
            near = inside & (np.abs(x - center) < _CLIP_SPREADS * spread)
            inv.append(1.0 / float(np.median(n[below])))
            var.append((float(np.median(np.abs(x[near] - center))) / _NORMAL_QUANTILE[0.5]
                        / _CLIPPED_MAD) ** 2)
    if not var:
        return None
    floor, per_word = var[0], 0.0
    if len(inv) >= 2 and np.ptp(inv) > 0:
        per_word, floor = (float(v) for v in np.polyfit(inv, var, 1))
        if per_word < 0:  # no more noise with fewer words: one spread for all
            per_word, floor = 0.0, float(np.median(var))
    floor = max(floor, _MIN_WORD_SPREAD ** 2)
    return np.asarray((x - center) / np.sqrt(floor + per_word / n)), x - center


def _spaced_words(prof: TextProfile, texts: pa.Array, bracketed: np.ndarray) -> np.ndarray:
    """Per row, its words as :func:`spaces_lost` counts them: the profile's, and where a
    bracket touches a word, the word on each side of it (``카트리나(Katrina)는``: 3; commas
    and hyphens do not part words: text that lost its spaces keeps them, and they would part
    it into words of about the usual length). 0 where the row holds a letter of a script
    written without spaces (:data:`~spr_data.qa.scripts.CJK`). ``bracketed``: the rows with
    a bracket (few: read one by one)."""
    words = np.where(prof.cjk > 0, 0, prof.words)
    rows = np.flatnonzero(bracketed & (words > 0))
    if len(rows):
        for row, text in zip(rows, texts.take(pa.array(rows)).to_pylist(), strict=True):
            parted = sum(1 for w in _BRACKETS_OR_SPACES.split(text or "") if _WORDY.search(w))
            whole = sum(1 for w in (text or "").split() if _WORDY.search(w))
            words[row] += max(parted - whole, 0)
    return words


def spaces_lost(content: tuple[np.ndarray, np.ndarray], words: tuple[np.ndarray, np.ndarray],
                units: tuple[np.ndarray, np.ndarray], judged: np.ndarray, z: float,
                floor: float) -> np.ndarray:
    """Rows where one side's words run together (``DieKatzeschläftaufderMatte.``): text whose
    spaces a scraper or PDF extraction lost, which neither the length ratio (the same
    characters) nor a language id (the same letters) sees.

    Per side, its mean word length (letters and digits over words) is measured against the
    corpus' own twice: alone, and over the other side's. A side that lies more than ``z``
    spreads above both (each spread measured on these rows, wider where the other side has
    few words: :func:`_word_length_z`), and over ``floor`` times the length they predict, is
    flagged. Why a floor: words of another language are a quarter longer (German for
    English), and on long sentences that is more than 3.5 spreads; words that lost the spaces
    between them are as long as 2, 4, 10 of them. Sides written without spaces (a letter of a
    :data:`~spr_data.qa.scripts.CJK` script in them: Han, kana, Bopomofo, Yi, Thai, Lao,
    Khmer, Myanmar, Tibetan; ``words`` 0) are not judged. Their spaced partners are judged
    alone, the words they should hold read off the dense side's length (``units``, in Latin
    letters), and only where that says 4 words or more and their words are 3 times the usual
    length: a short sentence may be one long word (``Unbelievable!`` / 难以置信！). A side
    of a batch with fewer than 200 pairs to judge it on is not judged, nor one whose spread
    cannot be measured. Measured at 3.5 spreads and 2x on 136,445 real pairs (NTREX's 32
    languages, the quality corpora), 32 flagged, 30 of them NTREX Arabic rows that did lose
    their spaces; sides of 4 words or more with their spaces removed, on the tests' corpora:
    0.94-1.0 flagged (``tests/test_spaces_lost.py``; held-out sets, docs/quality.md:
    0.66-1.0)."""
    least = math.log(floor)
    sides = [(np.asarray(w, dtype=np.float64), np.asarray(c, dtype=np.float64),
              np.asarray(u, dtype=np.float64)) for w, c, u in zip(words, content, units,
                                                                  strict=True)]
    # each side alone first, then against its partner on the rows whose partner is not run
    # together alone: such a row lies far below the relative measure's centre and, read as a
    # translation's spread, widened it (NTREX en-de with a tenth of the sources run together:
    # targets run together caught 0.975 -> 0.15)
    alone_flags = [np.zeros(len(judged), dtype=bool) for _ in sides]
    candidates: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None] = []
    for k, ((own_words, own_content, _), (other_words, other_content, other_units)) in \
            enumerate((sides, sides[::-1])):
        spaced = judged & (own_words > 0) & (own_content > 0)
        both = spaced & (other_words > 0) & (other_content > 0)
        rows = np.flatnonzero(both | (spaced & (other_words == 0) & (other_units > 0)))
        measured = None
        if len(rows) >= _MIN_SPACED_ROWS:
            own, n_other = _own_length(own_content, own_words, rows, other_words, other_units,
                                       both)
            measured = _word_length_z(own, n_other)
        if measured is None:
            candidates.append(None)
            continue
        (alone, above), paired = measured, both[rows]
        # against a side without spaces, only its length says how many words there were:
        # a short sentence may be one long word (`Unbelievable!`, 难以置信！)
        flagged = (alone > z) & (above > least) & (
            paired | ((n_other >= _MIN_DENSE_WORDS) & (above > math.log(_DENSE_FLOOR))))
        alone_flags[k][rows[flagged]] = True
        candidates.append((rows, paired, own, n_other, flagged))
    out = np.zeros(len(judged), dtype=bool)
    for k, candidate in enumerate(candidates):
        if candidate is None:
            continue
        rows, paired, own, n_other, flagged = candidate
        other_words, other_content, _ = sides[1 - k]
        pairs = rows[paired]
        partner_whole = ~alone_flags[1 - k][pairs]
        relative = None
        if int(partner_whole.sum()) >= _MIN_SPACED_ROWS:
            relative = _word_length_z(own[paired] - np.log(other_content[pairs]
                                                           / other_words[pairs]),
                                      n_other[paired], fit_on=partner_whole)
        if relative is None:  # no partner to measure against: its pairs are not judged
            flagged = flagged & ~paired
        else:
            flagged = flagged.copy()
            flagged[paired] &= (relative[0] > z) & (relative[1] > least)
        out[rows[flagged]] = True
    return out


def _own_length(content: np.ndarray, words: np.ndarray, rows: np.ndarray,
                other_words: np.ndarray, other_units: np.ndarray, paired: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """For :func:`spaces_lost`, on ``rows``: a side's log mean word length, and the words its
    partner says: its own, or for a side without spaces (Chinese) its length over the words'
    usual length (the side's densest quarter, which run-together sides do not move)."""
    own = np.log(content[rows] / words[rows])
    usual = math.exp(_densest(own, 0.25)[0])
    n_other = np.where(paired[rows], other_words[rows],
                       np.maximum(other_units[rows] / usual, 1.0))
    return own, n_other


def _normal(x: np.ndarray, center: float, var: np.ndarray | float) -> np.ndarray:
    """A normal density at ``x`` without its constant factor (the same for every component of
    a mixture, so it cancels in the responsibilities)."""
    out: np.ndarray = np.exp(-0.5 * (x - center) ** 2 / var) / np.sqrt(var)
    return out


def _length_units(texts: pa.Array, lang: str, prof: TextProfile | None = None) -> np.ndarray:
    """Each text's length in Latin-letter units: visible characters, a CJK letter weighing
    more (from ``prof``, or counted alone)."""
    visible, cjk = (visible_counts(texts) if prof is None
                    else (prof.chars - prof.spaces, prof.cjk))
    weight = _CHAR_WEIGHT.get(lang, 1.0)
    units: np.ndarray = np.asarray((visible - cjk) + cjk * weight, dtype=np.float64)
    if lang in _UNCOUNTED_DENSE:  # Hangul: dense, but not CJK (a word is not one letter)
        script = _UNCOUNTED_DENSE[lang]
        letters = (prof.script_letters[:, SCRIPT_NAMES.index(script)] if prof is not None
                   else _np(pc.count_substring_regex(texts, rf"\p{{{script}}}").fill_null(0)))
        units += np.asarray(letters, dtype=np.float64) * (weight - 1.0)
    return units


class RulesStage:
    """Per-side rules from :class:`SideRules`, pair rules from :class:`RulesConfig`."""

    name = "rules"

    def __init__(self, config: RulesConfig, text_columns: tuple[str, ...], langs: list[str]):
        self.config = config
        self.text_columns = text_columns
        self.langs = [normalize_lang(lang) for lang in langs] or ["und"] * len(text_columns)
        if len(self.langs) < len(text_columns):
            self.langs = self.langs + [self.langs[-1]] * (len(text_columns) - len(self.langs))

    @property
    def sides(self) -> tuple[str, ...]:
        return ("text",) if len(self.text_columns) == 1 else ("src", "tgt")

    @property
    def reasons(self) -> tuple[str, ...]:
        """Each side's rules in :data:`SIDE_RULES` order, side by side, then the pair rules."""
        pair = PAIR_RULES if len(self.text_columns) == 2 else ()
        return (*(f"{rule}_{side}" for side in self.sides for rule in SIDE_RULES), *pair)

    @property
    def columns(self) -> tuple[str, ...]:
        pair = ("length_ratio", "length_ratio_z") if len(self.text_columns) == 2 else ()
        return (*(f"{side}_{score}" for side in self.sides
                  for score in ("script_share", "letter_share")), *pair)

    def setup(self) -> None:
        pass

    def _side_config(self, i: int) -> SideRules:
        return self.config.src if i == 0 else self.config.tgt

    def length_fit(self, batch: pa.RecordBatch) -> LengthRatioFit:
        """How the log length ratio of these pairs is distributed (all of them: pairs that
        passed the side rules), as :meth:`apply` fits it on each batch. Why: pairs judged
        against a corpus rather than among themselves (the align stage's negatives, half of
        them with a side cut) pass it to :meth:`apply`; fitted on such a batch (with sigma
        clipping alone, before the mixture), the variance floor came out 20-230x the corpus'
        own (12 of the quality sweep's mixes)."""
        return LengthRatioFit.of(*self._units(batch), self.config.length_ratio_smoothing)

    def length_z(self, batch: pa.RecordBatch,
                 fit: LengthRatioFit) -> tuple[np.ndarray, np.ndarray]:
        """Each pair's length ratio against ``fit`` (a corpus'), in its spreads, and the length
        the spread is taken at (:meth:`LengthRatioFit.length`)."""
        a, b = self._units(batch)
        return fit.z(a, b, self.config.length_ratio_smoothing), fit.length(a, b)

    def _units(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """Both sides' lengths in Latin-letter units (:func:`_length_units`)."""
        a, b = (_length_units(batch.column(name), lang)
                for name, lang in zip(self.text_columns, self.langs, strict=True))
        return a, b

    def apply(self, batch: pa.RecordBatch, rejected: np.ndarray | None = None, *,
              length_fit: LengthRatioFit | None = None) -> StageOutput:
        """The side rules, then the pair rules; the length ratio judged against
        ``length_fit`` (default: fitted on this batch's pairs that pass the side rules).

        Each side is judged ``_SIDE_ROWS`` rows at a time (its rules read a row alone): the
        character-level temporaries of a 32,768-row batch peaked at 64 MB (numpy's, traced),
        and a worker's heap keeps what it once held."""
        out = StageOutput()
        units: list[np.ndarray] = []
        content: list[np.ndarray] = []
        digits: list[np.ndarray] = []
        words: list[np.ndarray] = []
        for i, name in enumerate(self.text_columns):
            texts = batch.column(name)
            parts = [self._side(texts.slice(lo, _SIDE_ROWS), i)
                     for lo in range(0, max(len(texts), 1), _SIDE_ROWS)]
            side = self.sides[i]
            for k, score in enumerate(("script_share", "letter_share")):
                out.columns[f"{side}_{score}"] = pa.array(
                    np.concatenate([part[0][k] for part in parts]).astype(np.float32))
            out.rejects += [(reason, np.concatenate([part[1][r][1] for part in parts]))
                            for r, (reason, _) in enumerate(parts[0][1])]
            units.append(np.concatenate([part[2] for part in parts]))
            content.append(np.concatenate([part[3] for part in parts]))
            digits.append(np.concatenate([part[4] for part in parts]))
            words.append(np.concatenate([part[5] for part in parts]))
        if len(self.text_columns) == 2:
            side_rejected = np.zeros(batch.num_rows, dtype=bool)
            for _, mask in out.rejects:
                side_rejected |= mask
            out.rejects += self._pair_rejects(batch, units, content, digits, words, side_rejected,
                                              out, length_fit)
        return out

    def _side(self, texts: pa.Array, i: int) -> tuple[
            tuple[np.ndarray, np.ndarray], list[tuple[str, np.ndarray]], np.ndarray,
            np.ndarray, np.ndarray, np.ndarray]:
        """Side ``i``'s rules over ``texts``: its script and letter shares, its rejects, and
        per row what the pair rules read: the length units, the letters and digits, the digits
        alone, and the words ``spaces_lost`` counts (0 where the row holds letters of a
        script written without spaces, and where the rule is off)."""
        prof = profile(texts)
        scripts = expected_scripts(self.langs[i])
        weight = _CHAR_WEIGHT.get(self.langs[i], 1.0)
        if scripts:  # a Han character outweighs a Latin letter of a name inside it
            own = _letters_of(texts, prof, scripts) * weight
            share = own / np.maximum(own + prof.letters - own / weight, 1e-9)
        else:
            share = np.ones(len(texts))
        letter_share = _letter_share(texts, prof, self._side_config(i).min_letter_share)
        spacing = len(self.text_columns) == 2 and self.config.reject_spaces_lost
        needles = rows_containing(texts, _HTML_NEEDLES, _URL_NEEDLES, _WEB_NEEDLES,
                                  *([_BRACKETS] if spacing else []))
        rejects = self._side_rejects(texts, prof, share, letter_share, self.sides[i],
                                     self._side_config(i), scripts is not None, needles[:3])
        words = (_spaced_words(prof, texts, needles[3]) if spacing
                 else np.zeros(len(texts), dtype=np.int64))
        return ((share, letter_share), rejects, _length_units(texts, self.langs[i], prof),
                prof.letters + prof.digits, prof.digits, words)

    def _side_rejects(self, texts: pa.Array, prof: TextProfile, share: np.ndarray,
                      letter_share: np.ndarray, side: str, cfg: SideRules,
                      known_script: bool, needles: list[np.ndarray]
                      ) -> list[tuple[str, np.ndarray]]:
        """``needles``: the rows that may hold HTML, a URL or a menu
        (:func:`~spr_data.qa.scripts.rows_containing`)."""
        empty = prof.chars == 0
        present = ~empty
        html_needle, url_needle, web_needle = needles
        rejects = [
            ("empty", empty),
            ("too_short", present & ((prof.chars < cfg.min_chars) | (prof.words < cfg.min_words))),
            ("too_long", (prof.chars > cfg.max_chars) | (prof.words > cfg.max_words)),
            ("url_only", present & self._url_only(texts, url_needle)
             if cfg.reject_url_only else None),
            ("html", _matches_on(texts, html_needle, _HTML)
             if cfg.reject_html else None),
            ("boilerplate", _matches(texts, _BOILERPLATE) | _matches_on(
                texts, web_needle | (prof.chars <= _WEB_LINE_CHARS), _WEB_BOILERPLATE)
             if cfg.reject_boilerplate else None),
            ("junk", present & (letter_share < cfg.min_letter_share)),
            ("mojibake", mojibake_score(texts) >= 1.0 if cfg.reject_mojibake else None),
            ("mixed_script", mixed_script(prof, texts) if cfg.reject_mixed_script else None),
            ("script_mismatch", (prof.letters > 0) & (share < cfg.min_script_share)
             if known_script else None),
            ("repetition", (prof.max_char_run > cfg.max_char_run)
             | word_runs_over(texts, cfg.max_word_run) | repeated_whole(texts)),
        ]
        return [(f"{rule}_{side}", mask) for rule, mask in rejects if mask is not None]

    def _url_only(self, texts: pa.Array, needle: np.ndarray) -> np.ndarray:
        """Rows with a URL, e-mail address or path and no letter or digit outside them
        (``needle``: the rows holding ``://``, ``www.``, ``@`` or ``/``)."""
        has = _matches_on(texts, needle, _URLISH)
        rows = np.flatnonzero(has)
        if not len(rows):
            return has
        rest = pc.replace_substring_regex(texts.take(pa.array(rows)), _URLISH, "")
        out = np.zeros(len(texts), dtype=bool)
        out[rows] = ~_matches(rest, r"[\pL\pN]")
        return out

    def _pair_rejects(self, batch: pa.RecordBatch, units: list[np.ndarray],
                      content: list[np.ndarray], digits: list[np.ndarray],
                      words: list[np.ndarray], side_rejected: np.ndarray, out: StageOutput,
                      length_fit: LengthRatioFit | None) -> list[tuple[str, np.ndarray]]:
        cfg = self.config
        src, tgt = (batch.column(c) for c in self.text_columns)
        s = cfg.length_ratio_smoothing
        a, b = (np.asarray(u, dtype=np.float64) for u in units)
        ratio = (np.maximum(a, b) + s) / (np.minimum(a, b) + s)
        fit = (LengthRatioFit.of(a[~side_rejected], b[~side_rejected], s) if length_fit is None
               else length_fit)
        z = fit.z(a, b, s)
        off = np.abs(np.log((a + s) / (b + s)) - fit.center)
        out.columns["length_ratio"] = pa.array(ratio.astype(np.float32))
        out.columns["length_ratio_z"] = pa.array(z.astype(np.float32))
        too_far = (np.abs(z) > cfg.length_ratio_z) & (off > math.log(cfg.length_ratio_floor))
        length_ratio = (ratio > cfg.max_length_ratio) | too_far
        rejects = [("length_ratio", length_ratio)]
        if cfg.reject_spaces_lost:
            rejects.append(("spaces_lost", spaces_lost(
                (content[0], content[1]), (words[0], words[1]), (units[0], units[1]),
                ~side_rejected & ~length_ratio, cfg.spaces_lost_z, cfg.spaces_lost_floor)))
        if cfg.reject_copied:
            # only rows with as many letters and digits on both sides can be copies
            candidates = np.flatnonzero((content[0] == content[1]) & (content[0] > 0))
            copied = np.zeros(len(src), dtype=bool)
            if len(candidates):
                rows = pa.array(candidates)

                def letters_only(texts: pa.Array) -> pa.Array:
                    return pc.replace_substring_regex(pc.utf8_lower(texts.take(rows)),
                                                      r"[^\pL\pN]+", "")

                same = pc.equal(letters_only(src), letters_only(tgt)).fill_null(False)
                copied[candidates] = _np(same).astype(bool)
            rejects.append(("copied_source", copied))
            # a long stretch of one side copied into the other (a bilingual line, a half
            # left untranslated): the pairs no side rule took
            rejects.append(("copied_span", copied_spans(
                src, tgt, np.flatnonzero(~side_rejected & ~copied))))
        if cfg.numbers_must_match:
            mismatch = np.zeros(len(src), dtype=bool)
            both = np.flatnonzero((digits[0] > 0) & (digits[1] > 0))
            if len(both):
                rows = pa.array(both)
                # dates, times, separators and number words are read every way they may be
                # meant (spr_data.qa.numbers): only numbers that plainly differ are a mismatch
                found = mismatches(src.take(rows).to_pylist(), tgt.take(rows).to_pylist())
                mismatch[both] = np.asarray(found, dtype=bool)
            rejects.append(("numbers_mismatch", mismatch))
        if cfg.reject_end_inside:
            rejects.append(("sentence_end_inside", sentence_ends_inside(
                src, tgt, ~side_rejected & ~np.logical_or.reduce([m for _, m in rejects]))))
        if cfg.reject_cut_short:
            rejects.append(("cut_short", cut_short(
                src, tgt, ~side_rejected & ~np.logical_or.reduce([m for _, m in rejects]),
                (expected_scripts(self.langs[0]), expected_scripts(self.langs[1])))))
        return rejects
