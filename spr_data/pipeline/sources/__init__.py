"""Raw corpus files → chunks of records, vectorized, with a reject reason for every bad line.

A *source* is one logical input: a TSV, JSONL, Parquet or plain-text file, or a Moses pair of
two files read in lockstep. Each source yields :class:`RecordChunk` objects: a block of
consecutive records with their text columns decoded, and a reason code for each record that
cannot become a row. Nothing here assigns ids or writes files; ``ingest`` does.

``base`` holds what the formats share (input files, compressed streams, line blocks, the
``Source`` class); one module per format (``text``, ``tsv``, ``moses``, ``jsonl``,
``parquet``) holds its ``Source`` subclass; ``plan`` picks the formats, the kind and the
languages of an ingest. A new format is one module and one line in ``plan.SOURCES``.
"""

from __future__ import annotations

from spr_data.pipeline.sources.base import (
    BLOCK_BYTES,
    COMPRESSIONS,
    REJECT_REASONS,
    InputFile,
    RecordChunk,
    Selection,
    Source,
    encoded_as,
    is_utf8_name,
    iter_line_blocks,
    iter_text_lines,
    path_text,
)
from spr_data.pipeline.sources.jsonl import JsonlSource
from spr_data.pipeline.sources.moses import MosesSource
from spr_data.pipeline.sources.parquet import ParquetSource
from spr_data.pipeline.sources.plan import (
    FORMATS,
    SOURCES,
    SourcePlan,
    langs_from_name,
    parse_langs,
    plan_sources,
)
from spr_data.pipeline.sources.text import TextSource
from spr_data.pipeline.sources.tsv import TsvSource

__all__ = [
    "BLOCK_BYTES",
    "COMPRESSIONS",
    "FORMATS",
    "REJECT_REASONS",
    "SOURCES",
    "InputFile",
    "JsonlSource",
    "MosesSource",
    "ParquetSource",
    "RecordChunk",
    "Selection",
    "Source",
    "SourcePlan",
    "TextSource",
    "TsvSource",
    "encoded_as",
    "is_utf8_name",
    "iter_line_blocks",
    "iter_text_lines",
    "langs_from_name",
    "parse_langs",
    "path_text",
    "plan_sources",
]
