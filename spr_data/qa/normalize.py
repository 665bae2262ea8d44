"""``normalize``: make equal text compare equal; it flags what it changed and drops nothing."""

from __future__ import annotations

import html
import re
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.qa.scripts import byte_flags, utf8_bytes, with_rows
from spr_data.qa.stage import StageOutput
from spr_data.recipe import NormalizeConfig

__all__ = ["CLEANUP_LEADS", "INVISIBLE", "NormalizeStage", "normalize_text"]

#: Control and invisible format characters that carry no meaning in training text: C0/C1
#: controls (tab and line breaks become spaces first), zero-width space, word joiner, BOM,
#: soft hyphen, bidi marks and embeddings. ZWNJ and ZWJ (U+200C/U+200D) are *kept*: Bengali,
#: Devanagari and Persian spelling depends on them.
INVISIBLE = (r"[\x00-\x08\x0E-\x1F\x7F-\x84\x86-\x9F\x{00AD}\x{200B}\x{200E}\x{200F}"
             r"\x{202A}-\x{202E}\x{2060}-\x{2064}\x{2066}-\x{2069}\x{FEFF}]")
#: Whitespace, including no-break and ideographic spaces, tabs and Unicode line separators.
_WS = r"\s\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
#: What collapsing changes: runs of two or more, or any whitespace that is not a plain space
#: (replacing every single space by itself would cost ten times more).
WHITESPACE = rf"[{_WS}]{{2,}}|[{_WS}]*[^ \PZ\x{{20}}]|[\t\n\v\f\r\x{{85}}][{_WS}]*"
_ENTITY = r"&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]{1,31});"


#: First UTF-8 bytes of the characters that ``INVISIBLE`` and ``WHITESPACE`` match but the
#: plain space (C0 controls, DEL; C2: C1 controls, NBSP, soft hyphen; E1: U+1680; E2:
#: U+2000..U+206F; E3: U+3000; EF: U+FEFF), found by asking RE2 about every code point;
#: else only two plain spaces in a row match (tests/test_scripts.py checks both).
CLEANUP_LEADS = bytes(range(0x20)) + b"\x7f\xc2\xe1\xe2\xe3\xef"


def _cleanup_candidates(texts: pa.Array) -> np.ndarray:
    """Rows with a byte of ``CLEANUP_LEADS`` or two spaces in a row: only they can match
    ``INVISIBLE`` or ``WHITESPACE`` (a table lookup per byte and two numpy compares cost
    less than the regex over every row)."""
    raw, offsets = utf8_bytes(texts)
    out = np.zeros(len(offsets) - 1, dtype=bool)
    if not raw.size:
        return out
    space = raw == 0x20
    pos = np.concatenate((np.flatnonzero(byte_flags(raw, CLEANUP_LEADS)),
                          np.flatnonzero(space[1:] & space[:-1]) + 1))
    out[np.searchsorted(offsets, pos, side="right") - 1] = True
    return out


def _from_u0300(texts: pa.Array) -> np.ndarray:
    """Rows with a code point from U+0300 on (a UTF-8 byte from CC on): the others are NFC
    already, as every character below U+0300 is (NFC_Quick_Check=Yes), accented Latin-1
    letters included (ä is C3 A4)."""
    raw, offsets = utf8_bytes(texts)
    out = np.zeros(len(offsets) - 1, dtype=bool)
    pos = np.flatnonzero(raw >= 0xCC)
    out[np.searchsorted(offsets, pos, side="right") - 1] = True
    return out


def _nfc(texts: pa.Array) -> pa.Array:
    """NFC, computed only for the rows that need it (most text already is NFC, and NFC of
    non-ASCII text is the slow part of this stage)."""
    candidates = np.flatnonzero(_from_u0300(texts))
    if not len(candidates):
        return texts
    values = texts.take(pa.array(candidates)).to_pylist()
    todo = [i for i, v in zip(candidates.tolist(), values, strict=True)
            if not unicodedata.is_normalized("NFC", v)]
    if not todo:
        return texts
    return with_rows(texts, todo, pc.utf8_normalize(texts.take(pa.array(todo)), form="NFC"))


_ESCAPED_TWICE = re.compile("&amp;" + _ENTITY[1:])

#: C1 controls as the Windows-1252 characters of the same bytes. Text written in cp1252 and
#: read as Latin-1 carries them for its quotes, dashes and euro signs ("\x93Go\x94" is
#: "“Go”"), and UTF-8 so read for every continuation byte in 0x80-0x9F ("Ã\x84rmel" is
#: "Ärmel"): stripped as controls, those leave "Ãrmel", mojibake no rule can tell. Not
#: U+0085 (a line break, made a space) nor the five bytes cp1252 leaves undefined (stripped).
_C1_AS_CP1252 = {b: bytes([b]).decode("cp1252") for b in range(0x80, 0xA0)
                 if b != 0x85 and b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}
_C1_TABLE = str.maketrans(_C1_AS_CP1252)
#: what it replaces (a part of INVISIBLE: its rows are among the cleanup candidates)
_C1 = r"[\x80-\x84\x86-\x9F]"


def _c1_as_cp1252(texts: pa.Array) -> pa.Array:
    """C1 controls → their cp1252 characters (:data:`_C1_AS_CP1252`), in the rows that hold
    one (found from their UTF-8 bytes: C2 80-9F)."""
    raw, offsets = utf8_bytes(texts)
    if raw.size < 2:
        return texts
    at = np.flatnonzero(raw[:-1] == 0xC2)  # few: the lead of U+0080-U+00BF only
    after = raw[at + 1]
    at = at[(after <= 0x9F) & (after != 0x85)]  # after C2 come 80-BF: C1 is 80-9F
    if not at.size:
        return texts
    rows = np.unique(np.searchsorted(offsets, at, side="right") - 1)
    values = texts.take(pa.array(rows)).to_pylist()
    fixed = pa.array([v.translate(_C1_TABLE) for v in values], pa.string())
    return with_rows(texts.cast(pa.string()), rows, fixed)


def _unescaped(text: str) -> str:
    """HTML entities → characters, and again where the text was escaped twice or three times
    (``&amp;apos;``, ``&amp;amp;quot;``: a crawl that escaped escaped text).

    Why: unescaped once, ``&apos;`` is left, and the ``html`` rule rejected 385 of the 663
    rows of the WMT sample so written (real translations; escaped once, none)."""
    for _ in range(3):
        again = _ESCAPED_TWICE.search(text) is not None
        text = html.unescape(text)
        if not again:
            break
    return text


def normalize_text(texts: pa.Array, config: NormalizeConfig) -> pa.Array:
    """HTML entities → characters, C1 controls → their cp1252 characters, NFC, invisible
    characters out, whitespace collapsed."""
    out = texts
    if config.html_unescape:
        has_entity = pc.match_substring_regex(out, _ENTITY).fill_null(False)
        if pc.any(has_entity).as_py():  # only the rows with an entity go through Python
            rows = np.flatnonzero(has_entity.to_numpy(zero_copy_only=False))
            fixed = pa.array([_unescaped(v) for v in out.take(pa.array(rows)).to_pylist()],
                             pa.string())
            out = with_rows(out.cast(pa.string()), rows, fixed)
    if config.nfc:
        out = _nfc(out)
    # (NFC leaves C1 controls, and the cp1252 characters they become, as they are: the order
    # of the two does not matter)
    wanted = [p for p, on in ((INVISIBLE, config.strip_invisible),
                              (WHITESPACE, config.collapse_whitespace),
                              (_C1, config.c1_as_cp1252)) if on]
    if wanted:  # the replacements run on the rows that need them only
        rows = np.flatnonzero(_cleanup_candidates(out))
        if len(rows):  # of the candidates, those the regex matches
            found = pc.match_substring_regex(out.take(pa.array(rows)), "|".join(wanted))
            rows = rows[np.asarray(found.fill_null(False).to_numpy(zero_copy_only=False),
                                   dtype=bool)]
        if len(rows):
            fixed = out.take(pa.array(rows))
            if config.c1_as_cp1252:
                fixed = _c1_as_cp1252(fixed)
            if config.strip_invisible:
                fixed = pc.replace_substring_regex(fixed, INVISIBLE, "")
            if config.collapse_whitespace:
                fixed = pc.replace_substring_regex(fixed, WHITESPACE, " ")
            out = with_rows(out, rows, fixed)
    if config.collapse_whitespace:
        out = pc.utf8_trim(pc.utf8_trim_whitespace(out), " ")
    return out


class NormalizeStage:
    """Normalizes every text column and adds ``normalized``: whether any of them changed.
    With ``rewrite=False`` (a tokenized dataset, whose token ids were made from its text as
    it is) the text is left as it was and ``normalized`` says which rows it would change."""

    name = "normalize"

    def __init__(self, config: NormalizeConfig, text_columns: tuple[str, ...], *,
                 rewrite: bool = True) -> None:
        self.config = config
        self.text_columns = text_columns
        self.rewrite = rewrite

    #: normalize rewrites text; it rejects nothing
    reasons: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.text_columns, "normalized") if self.rewrite else ("normalized",)

    def setup(self) -> None:
        pass

    def apply(self, batch: pa.RecordBatch, rejected: np.ndarray | None = None) -> StageOutput:
        columns: dict[str, pa.Array] = {}
        changed = np.zeros(batch.num_rows, dtype=bool)
        for name in self.text_columns:
            before = batch.column(name)
            after = normalize_text(before, self.config)
            if self.rewrite:
                columns[name] = after
            changed |= ~pc.equal(before, after).to_numpy(zero_copy_only=False)
        columns["normalized"] = pa.array(changed)
        return StageOutput(columns=columns)
