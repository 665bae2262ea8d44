"""Plain text: one document or sentence per line, a mono corpus."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar

import numpy as np

from spr_data.errors import InputError
from spr_data.pipeline.sources.base import (
    InputFile,
    RecordChunk,
    Selection,
    Source,
    decode,
    has_nul,
    is_empty,
    iter_line_blocks,
    mark,
    take_raw,
)
from spr_data.schema import Kind


class TextSource(Source):
    """Plain text, one document or sentence per line → mono rows."""

    format = "text"
    extensions: ClassVar[tuple[str, ...]] = (".txt",)
    fixed_kind: ClassVar[Kind | None] = "mono"

    @classmethod
    def from_plan(cls, files: list[InputFile], kind: Kind, selection: Selection) -> Source:
        if kind != "mono":
            raise InputError(f"{files[0].where} is plain text, which makes a mono corpus; "
                             "pass --lang L rather than --langs")
        return cls(files, kind)

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = decode(lines, codes)
            mark(codes, has_nul(text), "nul_byte")
            mark(codes, is_empty(text), "empty_line")
            yield RecordChunk(line, codes, [text], take_raw(lines))
            line += len(lines)
