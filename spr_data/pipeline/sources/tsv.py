"""TSV: tab-separated fields, quotes literal; the first block's most common count of fields
fixes the field count."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError
from spr_data.langcodes import names_a_language
from spr_data.pipeline.sources.base import (
    REASON_CODE,
    InputFile,
    RecordChunk,
    Selection,
    Source,
    bools,
    decode,
    has_nul,
    ints,
    is_empty,
    iter_line_blocks,
    mark,
    take_raw,
)
from spr_data.schema import Kind


class TsvSource(Source):
    """Tab-separated fields; quotes are literal text. The field count most lines of the first
    block of lines have is the file's: a line with another count is ``tsv_field_count``."""

    format = "tsv"
    extensions: ClassVar[tuple[str, ...]] = (".tsv",)

    def __init__(self, files: list[InputFile], kind: Kind, columns: Sequence[int]) -> None:
        super().__init__(files, kind)
        self.columns = tuple(columns)
        self.expected_fields: int | None = None

    @classmethod
    def from_plan(cls, files: list[InputFile], kind: Kind, selection: Selection) -> Source:
        """``--columns`` as 0-based numbers; by default the first one (mono) or two."""
        columns = selection.columns
        cols = _int_columns(columns) if columns else list(range(2 if kind == "parallel" else 1))
        return cls(files, kind, cols)

    def options(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "fields": self.expected_fields}

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        needed = max(self.columns) + 1
        seen_text = False
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = decode(lines, codes)
            mark(codes, has_nul(text), "nul_byte")
            mark(codes, is_empty(text), "empty_line")
            if self.expected_fields is None:
                # the field count most lines of the first block have (of those with the
                # columns asked for): one stray tab on the first line must not make every
                # other line a reject
                nfields = ints(pc.count_substring(text, "\t")) + 1
                candidates = nfields[(codes < 0) & (nfields >= needed)]
                if len(candidates):
                    self.expected_fields = int(np.bincount(candidates).argmax())
            expected = self.expected_fields or needed
            # split at most `expected` times: a line with more fields shows as expected + 1
            parts = pc.split_pattern(text, pattern="\t", max_splits=expected)
            nfields = ints(pc.list_value_length(parts))
            mark(codes, nfields != expected, "tsv_field_count")
            mark(codes, _quoted_across_lines(text, nfields, expected), "tsv_field_count")
            if (nfields < needed).any():  # pad short lines so that every column exists
                padded = pc.binary_join_element_wise(text, "\t" * needed, "")
                parts = pc.split_pattern(padded, pattern="\t", max_splits=expected)
            fields = [pc.list_element(parts, c) for c in self.columns]
            for f in fields:
                mark(codes, is_empty(f), "empty_field")
            if line == 1 and len(lines) and codes[0] < 0 and is_header(
                    [str(f[0].as_py()) for f in fields]):
                codes[0] = REASON_CODE["header"]
            yield RecordChunk(line, codes, fields, take_raw(lines))
            line += len(lines)
            seen_text = seen_text or bool((pc.binary_length(text).to_numpy() > 0).any())
        if self.expected_fields is None and seen_text:
            raise InputError(
                f"no line of {self.files[0].where} has the {needed} tab-separated fields that "
                f"--columns {','.join(map(str, self.columns))} needs (0-based); "
                "check the file's format or choose other --columns"
            )


#: words of a column header besides language codes and names (a trailing number aside:
#: sentence1, sentence2), alone or joined by - _ . or a space (src_text, source sentence)
_HEADER_WORDS = frozenset((
    "src", "tgt", "trg", "source", "target", "text", "sentence", "segment", "translation",
    "original", "reference", "ref", "input", "output", "lang", "language", "id", "string",
    "line", "hypothesis", "hyp", "context", "label"))


#: a column name: letters, digits, and - _ . or spaces between them (no sentence's ending)
_NAME = re.compile(r"[^\W\d_][\w .-]*[^\W_]|[^\W\d_]", re.UNICODE)


def is_header(fields: Sequence[str]) -> bool:
    """Whether a first line's chosen fields are column names: each one to three words of
    :data:`_HEADER_WORDS` or languages (``src``/``tgt``, ``en``/``de``,
    ``English``/``German``, ``src_text``), no field ending as a sentence does, the fields
    of a pair different, and a field of languages alone one word (``It is so`` is three
    codes). Of 162k real lines (the quality tests' pairs, LASER's Tatoeba, NTREX's 128
    languages), as pairs and as single sides, none reads as one."""
    names = [field.strip() for field in fields]
    if len({name.lower() for name in names}) < len(names):  # "Hindi⇥Hindi", "No.⇥No."
        return False
    for name in names:
        if not _NAME.fullmatch(name):
            return False
        words = [w for w in re.split(r"[-_ .]+", re.sub(r"\d+$", "", name.lower())) if w]
        generic = [w in _HEADER_WORDS or w.removesuffix("s") in _HEADER_WORDS for w in words]
        if not 1 <= len(words) <= 3 or not all(
                g or names_a_language(w) for g, w in zip(generic, words, strict=True)):
            return False
        if not any(generic) and len(words) > 1:
            return False
    return True


#: the most lines a quoted field is read across (a record of a TSV written with CSV quoting)
_QUOTED_LINES = 20


def _quoted_across_lines(text: pa.Array, nfields: np.ndarray, expected: int) -> np.ndarray:
    """The lines of records whose quoted field spans lines, as Python's ``csv`` module and
    pandas write a TSV (``"Watch⏎this."⇥Schau dir das an.``): a line whose last field opens a
    quote (an odd count of ``"``), through the next line that closes one (at most
    :data:`_QUOTED_LINES` on), where the lines' fields, joined at each line end, make the
    file's field count. Read as they are, a piece with enough fields was a pair of half a
    sentence and the next field (a new-user trial: 4 of 5 such broken pairs survived
    clean); now every piece is a ``tsv_field_count`` reject. A record cut by the end of a
    block of lines (8 MB) is read as before."""
    out = np.zeros(len(text), dtype=bool)
    # one piece at least has too few fields; of one column (a mono file), lines are pieces
    # of nothing: a book's quote may open on one line and close on the next
    if expected < 2 or not (nfields < expected).any():
        return out
    odd = _quote_counts(text) % 2 == 1
    if not odd.any():
        return out
    opens = odd & bools(pc.match_substring_regex(text, '(^|\t)"[^\t]*$').fill_null(False))
    for i in np.flatnonzero(opens).tolist():
        if out[i]:
            continue
        closing = np.flatnonzero(odd[i + 1:i + 1 + _QUOTED_LINES])
        if not closing.size:
            continue
        j = i + 1 + int(closing[0])
        if int(nfields[i:j + 1].sum()) - (j - i) == expected:
            out[i:j + 1] = True
    return out


def _quote_counts(text: pa.Array) -> np.ndarray:
    """Per line, its ``"`` characters: found in the data buffer at memory speed and given to
    their lines by search (0.02 s for 42 MB of Tatoeba lines; ``count_substring`` 0.06 s)."""
    n = len(text)
    _, offsets_buf, data_buf = text.buffers()
    width = np.int64 if pa.types.is_large_string(text.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=width, count=n + 1,
                            offset=text.offset * np.dtype(width).itemsize)
    if data_buf is None or not n:
        return np.zeros(n, dtype=np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    at = np.flatnonzero(np.frombuffer(data_buf, dtype=np.uint8, count=hi - lo, offset=lo) == 0x22)
    return np.bincount(np.searchsorted(offsets, at + lo, side="right") - 1, minlength=n)


def _int_columns(columns: Sequence[str]) -> list[int]:
    try:
        cols = [int(c) for c in columns]
    except ValueError:
        raise InputError(f"TSV --columns take 0-based numbers, got {','.join(columns)}") from None
    if any(c < 0 for c in cols):
        raise InputError(f"TSV --columns must not be negative, got {','.join(columns)}")
    if len(set(cols)) < len(cols):
        raise InputError(f"--columns {','.join(columns)} names one column for both sides; "
                         "choose the column of each side")
    return cols
