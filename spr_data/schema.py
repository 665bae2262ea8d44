"""The one place that defines the columns of spr-data datasets.

Every stage reads and writes these schemas; QA stages may append score columns, but the
names and types below never change meaning.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Literal

import pyarrow as pa

__all__ = [
    "ID",
    "KINDS",
    "ORIGIN",
    "ORIGIN_TYPE",
    "RAW",
    "REASON",
    "Kind",
    "columns_line",
    "id_column",
    "ingest_rejects_schema",
    "rows_schema",
    "schema_from_b64",
    "schema_mismatch",
    "schema_summary",
    "schema_to_b64",
    "text_columns",
    "token_id_columns",
]

Kind = Literal["parallel", "mono"]
KINDS: tuple[Kind, ...] = ("parallel", "mono")

ID = "id"
SRC = "src"
TGT = "tgt"
TEXT = "text"
ORIGIN = "origin"
REASON = "reason"
RAW = "raw"

#: Where a row came from: the index of the input in the manifest's lineage, and the 1-based
#: line (or row, for Parquet) in that input.
ORIGIN_TYPE = pa.struct([pa.field("input", pa.uint32(), nullable=False),
                         pa.field("line", pa.uint64(), nullable=False)])


def text_columns(kind: Kind) -> tuple[str, ...]:
    """The text columns of a corpus kind: ``(src, tgt)`` for parallel, ``(text,)`` for mono."""
    return (SRC, TGT) if kind == "parallel" else (TEXT,)


def id_column(text_column: str) -> str:
    """The token-id column ``tokenize`` adds for a text column: ``src`` → ``src_ids``."""
    return f"{text_column}_ids"


def token_id_columns(kind: Kind, names: Sequence[str]) -> list[str]:
    """The token-id columns among ``names`` (a schema's) of a ``kind`` dataset, in text-column
    order."""
    return [id_column(c) for c in text_columns(kind) if id_column(c) in names]


def rows_schema(kind: Kind) -> pa.Schema:
    """Schema of the rows that ingest writes."""
    return pa.schema(
        [pa.field(ID, pa.uint64(), nullable=False)]
        + [pa.field(name, pa.string(), nullable=False) for name in text_columns(kind)]
        + [pa.field(ORIGIN, ORIGIN_TYPE, nullable=False)]
    )


def ingest_rejects_schema() -> pa.Schema:
    """Schema of the lines ingest could not turn into rows; ``raw`` keeps their exact bytes.

    For a Moses pair, ``raw`` is the source line, a line feed, then the target line.
    """
    return pa.schema([
        pa.field(ID, pa.uint64(), nullable=False),
        pa.field(ORIGIN, ORIGIN_TYPE, nullable=False),
        pa.field(REASON, pa.string(), nullable=False),
        pa.field(RAW, pa.binary(), nullable=False),
    ])


def schema_summary(schema: pa.Schema) -> list[dict[str, object]]:
    """A human-readable form of a schema for the manifest and ``info``."""
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def columns_line(schema: pa.Schema) -> str:
    """A schema on one line, for messages: ``id, text (uint64, string)`` (pyarrow's own text
    takes a line per column, and a hostile name may hold a line break)."""
    names = ", ".join(n if n.isprintable() else repr(n) for n in schema.names)
    types = ", ".join(str(f.type) for f in schema)
    return f"{names[:200]} ({types[:200]})"


def schema_mismatch(shard: str, found: pa.Schema, expected: pa.Schema) -> str:
    """The one-line error for a shard whose schema is not its manifest's."""
    same_text = columns_line(found) == columns_line(expected)
    return (f"shard {shard} has columns {columns_line(found)}, its manifest says "
            f"{columns_line(expected)}"
            + (" (they differ in nullability or metadata)" if same_text else "")
            + "; it is not this dataset's shard: run spr-data verify")


def schema_to_b64(schema: pa.Schema) -> str:
    """The exact Arrow schema (IPC flatbuffer, not pickle) as base64 text."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_b64(text: str) -> pa.Schema:
    """Inverse of :func:`schema_to_b64`."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
