"""Parquet: the chosen columns (names or 0-based indices) hold the text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError
from spr_data.pipeline.sources.base import (
    InputFile,
    RecordChunk,
    Selection,
    Source,
    bools,
    has_nul,
    is_empty,
    is_utf8_name,
    mark,
    open_stream,
    read_block,
)
from spr_data.reader import is_network_path
from spr_data.schema import Kind


class ParquetSource(Source):
    """A Parquet file; the chosen columns (names or 0-based indices) hold the text."""

    format = "parquet"
    extensions: ClassVar[tuple[str, ...]] = (".parquet",)

    def __init__(self, files: list[InputFile], kind: Kind, columns: Sequence[str],
                 fallbacks: Sequence[Sequence[str]] = ()) -> None:
        """``fallbacks``: other candidate columns, used when the file lacks ``columns``."""
        super().__init__(files, kind)
        self.columns = tuple(columns)
        self._fallbacks = [tuple(c) for c in fallbacks]

    @classmethod
    def from_plan(cls, files: list[InputFile], kind: Kind, selection: Selection) -> Source:
        """``--columns`` as given; else the first candidate columns the file has."""
        if selection.columns:
            return cls(files, kind, selection.columns)
        return cls(files, kind, selection.candidates[0], selection.candidates[1:])

    def options(self) -> dict[str, Any]:
        return {"columns": list(self.columns)}

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        record = self.files[0]
        with open_stream(record, on_bytes) as stream:  # hash the file, in bounded reads
            while read_block(stream, record):
                pass
        with _parquet_file(record) as pf:
            yield from self._batches(pf, record)

    def _batches(self, pf: Any, record: InputFile) -> Iterator[RecordChunk]:
        paths = self._resolve(pf.schema_arrow)
        names = list(dict.fromkeys(path[0] for path in paths))  # the top-level columns
        line = 1
        for batch in pf.iter_batches(batch_size=65536, columns=names):
            n = batch.num_rows
            codes = np.full(n, -1, dtype=np.int8)
            fields = []
            for top, *inner in paths:
                col = batch.column(top)
                for part in inner:  # translation.en: a field of a struct column
                    col = pc.struct_field(col, part)
                mark(codes, bools(col.is_null()), "null_field")
                col = col.cast(pa.string()).fill_null("")
                fields.append(col)
            for f in fields:
                mark(codes, has_nul(f), "nul_byte")
            for f in fields:
                mark(codes, is_empty(f), "empty_field")

            def raw(mask: np.ndarray, b: pa.RecordBatch = batch) -> pa.Array:
                rows = b.select(names).filter(pa.array(mask)).to_pylist()
                return pa.array([json.dumps(r, ensure_ascii=False).encode() for r in rows],
                                pa.binary())

            record.lines += n
            yield RecordChunk(line, codes, fields, raw)
            line += n

    def _resolve(self, schema: pa.Schema) -> list[list[str]]:
        """Each chosen column as its path: a top-level column, then the fields of structs
        (``translation.en``: Hugging Face's translation datasets)."""
        for candidate in self._fallbacks:
            if not all(_path(schema, c) for c in self.columns) \
                    and all(_path(schema, c) for c in candidate):
                self.columns = candidate
        self._fallbacks = []
        paths = []
        for c in self.columns:
            name = schema.names[int(c)] if c.isdigit() and int(c) < len(schema.names) else c
            path = _path(schema, name)
            if path is None:
                raise InputError(f"{self.files[0].where} has no column {c!r}; it has: "
                                 f"{', '.join(_column_names(schema))}")
            t = _field(schema, path).type
            if not _is_text(t.value_type if pa.types.is_dictionary(t) else t):
                raise InputError(f"{self.files[0].where}: column {name!r} is {t}, expected a "
                                 "string column; choose text columns with --columns")
            if path in paths:
                raise InputError(f"--columns {','.join(self.columns)} names column "
                                 f"{'.'.join(path)!r} for both sides; choose the column of "
                                 "each side")
            paths.append(path)
        return paths


def _path(schema: pa.Schema, name: str) -> list[str] | None:
    """``name`` as a column and the struct fields below it, or None if the file has none:
    a top-level column of that name, else a dotted path (``translation.en``)."""
    if name in schema.names:
        return [name]
    top, _, rest = name.partition(".")
    if not rest or top not in schema.names:
        return None
    path, t = [top], schema.field(top).type
    for part in rest.split("."):
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        path.append(part)
        t = t.field(part).type
    return path


def _field(schema: pa.Schema, path: list[str]) -> pa.Field:
    field = schema.field(path[0])
    for part in path[1:]:
        field = field.type.field(part)
    return field


def _column_names(schema: pa.Schema) -> list[str]:
    """Top-level columns, and a struct's fields as dotted paths (what --columns takes)."""
    names = []
    for field in schema:
        names.append(field.name)
        if pa.types.is_struct(field.type):
            names += [f"{field.name}.{sub.name}" for sub in field.type]
    return names


def _is_text(t: pa.DataType) -> bool:
    """A string type Arrow casts to ``string``: a dictionary of one (a pandas ``category``
    column) is read through its values."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


@contextmanager
def _parquet_file(record: InputFile) -> Iterator[Any]:
    """The Parquet file of ``record``: memory-mapped when local; read through a Python file
    when its name is not UTF-8, which Arrow cannot open by name, or through the retrying
    reader when it is at a URL."""
    import pyarrow.parquet as pq

    path = record.path
    handle: Any = None
    if record.url is not None:
        handle = record.open_raw()
    elif not is_utf8_name(path):
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    try:
        try:
            pf = pq.ParquetFile(handle if handle is not None else str(path),
                                memory_map=handle is None and not is_network_path(path))
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{record.where} is not a readable Parquet file: {exc}") from exc
        yield pf
    finally:
        if handle is not None:
            handle.close()
