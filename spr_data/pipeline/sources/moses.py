"""Moses: two line-aligned files (``train.en``, ``train.de``), one sentence per line."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError
from spr_data.pipeline.sources.base import (
    RecordChunk,
    Source,
    decode,
    encoded_as,
    has_nul,
    is_empty,
    iter_line_blocks,
    mark,
)
from spr_data.schema import Kind


class MosesSource(Source):
    """Two line-aligned files, one sentence per line; their line counts must match, blank
    lines at the end of one of them aside (rejected as ``empty_line``)."""

    format = "moses"
    fixed_kind: ClassVar[Kind | None] = "parallel"
    files_per_source: ClassVar[int] = 2

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        src_file, tgt_file = self.files
        src_blocks = iter_line_blocks(src_file, on_bytes)
        tgt_blocks = iter_line_blocks(tgt_file, on_bytes)
        src: pa.Array | None = None
        tgt: pa.Array | None = None
        line = 1
        while True:
            if src is None or len(src) == 0:
                src = next(src_blocks, None)
            if tgt is None or len(tgt) == 0:
                tgt = next(tgt_blocks, None)
            if src is None or tgt is None:
                if src is None and tgt is None:
                    return
                # the longer file's extra lines: blank ones (a file that ends in an empty
                # line or two) are records of two empty sides, rejected as empty_line;
                # any text there means the files are not line-aligned
                longer = src_blocks if src is not None else tgt_blocks
                block: pa.Array | None = src if src is not None else tgt
                while block is not None:
                    codes = np.full(len(block), -1, dtype=np.int8)
                    text = decode(block, codes)
                    # a line that is not UTF-8 decodes to "" but holds text all the same
                    if not is_empty(text).all() or (codes >= 0).any():
                        for _ in longer:
                            pass  # count the longer file's lines for the error message
                        raise InputError(
                            f"Moses pair has different line counts: {src_file.where} has "
                            f"{src_file.lines} lines, {tgt_file.where} has "
                            f"{tgt_file.lines}; the two files must be line-aligned"
                            + "".join(f"; {f.path.name} is {what}" for f in self.files
                                      if (what := encoded_as(f)) is not None))
                    if len(block):
                        yield _blank_records(line, block)
                        line += len(block)
                    block = next(longer, None)
                return
            n = min(len(src), len(tgt))
            s_lines, t_lines = src.slice(0, n), tgt.slice(0, n)
            src, tgt = src.slice(n), tgt.slice(n)
            codes = np.full(n, -1, dtype=np.int8)
            s_text, t_text = decode(s_lines, codes), decode(t_lines, codes)
            mark(codes, has_nul(s_text) | has_nul(t_text), "nul_byte")
            s_empty, t_empty = is_empty(s_text), is_empty(t_text)
            mark(codes, s_empty & t_empty, "empty_line")
            mark(codes, s_empty | t_empty, "empty_field")

            def raw(mask: np.ndarray, s: pa.Array = s_lines, t: pa.Array = t_lines) -> pa.Array:
                m = pa.array(mask)
                return pc.binary_join_element_wise(s.filter(m), t.filter(m), b"\n")

            yield RecordChunk(line, codes, [s_text, t_text], raw)
            line += n


def _blank_records(line: int, lines: pa.Array) -> RecordChunk:
    """Blank lines one file has beyond the other's end: each an ``empty_line`` reject."""
    codes = np.full(len(lines), -1, dtype=np.int8)
    mark(codes, np.ones(len(lines), dtype=bool), "empty_line")
    empty = pa.array([""] * len(lines), pa.string())
    return RecordChunk(line, codes, [empty, empty], lambda mask: lines.filter(pa.array(mask)))
