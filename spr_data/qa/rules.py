"""``rules``: cheap, vectorized filters for junk long-tail pairs, per side and across sides.

Scores first (lengths, letter shares, runs), decisions second, one reason per failed rule:
``{rule}_{side}`` for a side's rule (``too_long_tgt``), plain names for rules over the pair
(``length_ratio``, ``copied_source``, ``numbers_mismatch``).
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.pipeline.stage import StageOutput
from spr_data.qa.scripts import (
    SCRIPT_NAMES,
    TextProfile,
    expected_scripts,
    normalize_lang,
    profile,
)
from spr_data.recipe import RulesConfig, SideRules

__all__ = ["PAIR_RULES", "SIDE_RULES", "RulesStage"]

#: Per-side rules in the order they apply (the first that fails is a row's ``reason``).
SIDE_RULES = ("empty", "too_short", "too_long", "url_only", "html", "boilerplate", "junk",
              "script_mismatch", "repetition")
PAIR_RULES = ("length_ratio", "copied_source", "numbers_mismatch")

_URLISH = (r"(?:https?://|ftp://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
           r"|(?:[A-Za-z]:)?(?:[\\/][\w.-]+){2,}[\\/]?|[\w-]+(?:\.[\w-]+)+/\S*")
_HTML = r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>|&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z]{2,8});"
_BOILERPLATE = (
    r"(?i)lorem ipsum|all rights reserved|(?:enable|requires?) javascript"
    r"|javascript (?:is )?(?:disabled|required)|(?:this|our) (?:web)?site uses cookies"
    r"|accept (?:all )?cookies|cookie policy|privacy policy|terms (?:of|and) (?:use|service)"
    r"|click here|powered by (?:wordpress|joomla|drupal)|skip to (?:main )?content"
    r"|©\s*(?:19|20)\d\d"
)
#: Roughly how many Latin-script characters one character of a dense script is worth, so the
#: length ratio compares like with like (measured on Tatoeba eng-cmn and NTREX).
_CHAR_WEIGHT = {"zh": 3.0, "ja": 2.2, "ko": 2.0, "yue": 3.0, "wuu": 3.0}


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _letters_of(prof: TextProfile, scripts: tuple[str, ...]) -> np.ndarray:
    """Letters of ``scripts``, plus Common and Inherited ones (ー, combining marks) that
    belong to any script."""
    wanted = {*scripts, "Common", "Inherited"}
    columns = [i for i, name in enumerate(SCRIPT_NAMES) if name in wanted]
    return np.asarray(prof.script_letters[:, columns].sum(axis=1))


def _matches(texts: pa.Array, pattern: str) -> np.ndarray:
    return _np(pc.match_substring_regex(texts, pattern).fill_null(False)).astype(bool)


def _matches_if(texts: pa.Array, *needles: str, pattern: str) -> np.ndarray:
    """``pattern`` on the rows that contain one of ``needles``: most rows never get the regex."""
    any_needle = "|".join(re.escape(x) for x in needles)
    candidates = np.flatnonzero(_matches(texts, any_needle))
    out = np.zeros(len(texts), dtype=bool)
    if len(candidates):
        out[candidates] = _matches(texts.take(pa.array(candidates)), pattern)
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


def _number_sets(texts: pa.Array) -> list[frozenset[str] | None]:
    """Each row's numbers in a lenient canonical form, or None when it has none.

    Separators go and so do leading and trailing zeros: "10,000" and "1万", "3.00" and "3",
    "2,95" and "2.95" compare equal. Lenient on purpose: misaligned pairs are the alignment
    score's job; this rule catches numbers that plainly differ.
    """
    found = pl.Series(texts).fill_null("").str.extract_all(r"\d+(?:[.,]\d+)*").to_list()
    sets: list[frozenset[str] | None] = []
    for groups in found:
        if not groups:
            sets.append(None)
            continue
        values = set()
        for g in groups:
            digits = "".join(str(unicodedata.digit(c, 0)) if not c.isascii() else c
                             for c in g if c not in ",.")
            values.add(digits.strip("0") or "0")
        sets.append(frozenset(values))
    return sets


class RulesStage:
    """Per-side rules from :class:`SideRules`, pair rules from :class:`RulesConfig`."""

    name = "rules"

    def __init__(self, config: RulesConfig, text_columns: tuple[str, ...], langs: list[str]):
        self.config = config
        self.text_columns = text_columns
        self.langs = [normalize_lang(lang) for lang in langs] or ["und"] * len(text_columns)
        if len(self.langs) < len(text_columns):
            self.langs = self.langs + [self.langs[-1]] * (len(text_columns) - len(self.langs))

    def _side_config(self, i: int) -> SideRules:
        return self.config.src if i == 0 else self.config.tgt

    def apply(self, batch: pa.RecordBatch) -> StageOutput:
        out = StageOutput()
        units: list[np.ndarray] = []
        content: list[np.ndarray] = []
        digits: list[np.ndarray] = []
        for i, name in enumerate(self.text_columns):
            texts = batch.column(name)
            prof = profile(texts)
            side = "text" if len(self.text_columns) == 1 else ("src", "tgt")[i]
            scripts = expected_scripts(self.langs[i])
            weight = _CHAR_WEIGHT.get(self.langs[i], 1.0)
            if scripts:  # a Han character outweighs a Latin letter of a name inside it
                own = _letters_of(prof, scripts) * weight
                share = own / np.maximum(own + prof.letters - own / weight, 1e-9)
            else:
                share = np.ones(len(texts))
            visible = np.maximum(prof.chars - prof.spaces, 1)
            letter_share = (prof.letters + prof.digits) / visible
            out.columns[f"{side}_script_share"] = pa.array(share.astype(np.float32))
            out.columns[f"{side}_letter_share"] = pa.array(letter_share.astype(np.float32))
            out.rejects += self._side_rejects(texts, prof, share, letter_share, side,
                                              self._side_config(i), scripts is not None)
            units.append(prof.chars * weight)
            content.append(prof.letters + prof.digits)
            digits.append(prof.digits)
        if len(self.text_columns) == 2:
            out.rejects += self._pair_rejects(batch, units, content, digits, out)
        return out

    def _side_rejects(self, texts: pa.Array, prof: TextProfile, share: np.ndarray,
                      letter_share: np.ndarray, side: str, cfg: SideRules,
                      known_script: bool) -> list[tuple[str, np.ndarray]]:
        empty = prof.chars == 0
        present = ~empty
        rejects = [
            ("empty", empty),
            ("too_short", present & ((prof.chars < cfg.min_chars) | (prof.words < cfg.min_words))),
            ("too_long", (prof.chars > cfg.max_chars) | (prof.words > cfg.max_words)),
            ("url_only", present & self._url_only(texts) if cfg.reject_url_only else None),
            ("html", _matches_if(texts, "<", "&", pattern=_HTML) if cfg.reject_html else None),
            ("boilerplate", _matches(texts, _BOILERPLATE) if cfg.reject_boilerplate else None),
            ("junk", present & (letter_share < cfg.min_letter_share)),
            ("script_mismatch", (prof.letters > 0) & (share < cfg.min_script_share)
             if known_script else None),
            ("repetition", (prof.max_char_run > cfg.max_char_run)
             | (max_word_run(texts) > cfg.max_word_run)),
        ]
        return [(f"{rule}_{side}", mask) for rule, mask in rejects if mask is not None]

    def _url_only(self, texts: pa.Array) -> np.ndarray:
        has = _matches_if(texts, "://", "www.", "@", "/", pattern=_URLISH)
        if not has.any():
            return has
        rest = pc.replace_substring_regex(texts, _URLISH, "")
        return np.asarray(has & ~_matches(rest, r"[\pL\pN]"), dtype=bool)

    def _pair_rejects(self, batch: pa.RecordBatch, units: list[np.ndarray],
                      content: list[np.ndarray], digits: list[np.ndarray],
                      out: StageOutput) -> list[tuple[str, np.ndarray]]:
        cfg = self.config
        src, tgt = (batch.column(c) for c in self.text_columns)
        s = cfg.length_ratio_smoothing
        longer, shorter = np.maximum(*units), np.minimum(*units)
        ratio = (longer + s) / (shorter + s)
        out.columns["length_ratio"] = pa.array(ratio.astype(np.float32))
        rejects = [("length_ratio", ratio > cfg.max_length_ratio)]
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
        if cfg.numbers_must_match:
            mismatch = np.zeros(len(src), dtype=bool)
            both = np.flatnonzero((digits[0] > 0) & (digits[1] > 0))
            if len(both):
                rows = pa.array(both)
                pairs = zip(_number_sets(src.take(rows)), _number_sets(tgt.take(rows)),
                            strict=True)
                for i, (x, y) in zip(both.tolist(), pairs, strict=True):
                    # times and dates are written differently ("3:30" / "3点半", "April 3" /
                    # "4月3日"): only numbers that neither side's set contains are a mismatch
                    if x is not None and y is not None and not (x <= y or y <= x):
                        mismatch[i] = True
            rejects.append(("numbers_mismatch", mismatch))
        return rejects
