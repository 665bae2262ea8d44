"""Raw corpus files → chunks of records, vectorized, with a reject reason for every bad line.

A *source* is one logical input: a TSV, JSONL, Parquet or plain-text file, or a Moses pair of
two files read in lockstep. Each source yields :class:`RecordChunk` objects: a block of
consecutive records with their text columns decoded, and a reason code for each record that
cannot become a row. Nothing here assigns ids or writes files; ``ingest`` does.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import urllib.parse
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError, SprDataError
from spr_data.langcodes import check_lang
from spr_data.reader import (
    LocalFileSystem,
    RetryingFile,
    RetryPolicy,
    file_size,
    filesystem_for,
    is_network_path,
    is_url,
)
from spr_data.schema import Kind

__all__ = [
    "FORMATS",
    "REJECT_REASONS",
    "RecordChunk",
    "Source",
    "is_utf8_name",
    "path_text",
    "plan_sources",
]

FORMATS = ("tsv", "moses", "jsonl", "parquet", "text")

#: Why ingest could not turn a record into a row, in order of precedence.
REJECT_REASONS = (
    "invalid_utf8",  # bytes that are not UTF-8
    "nul_byte",  # a U+0000 character
    "empty_line",  # a blank line (both lines blank, for a Moses pair)
    "invalid_json",  # JSONL: the line is not a JSON object
    "tsv_field_count",  # TSV: a different number of tab-separated fields than the file's first line
    "missing_key",  # JSONL: a chosen key is absent
    "not_a_string",  # JSONL: a chosen key holds something other than a string
    "null_field",  # Parquet: a chosen column is null
    "empty_field",  # one side (or the text) is empty
)
_CODE = {name: i for i, name in enumerate(REJECT_REASONS)}

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".xz": "xz", ".bz2": "bz2"}
_EXTENSIONS = {".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
               ".txt": "text"}
_LANG = r"[a-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?"
_LANG_SUFFIX = re.compile(rf"^{_LANG}$")
#: suffixes that name a side of a pair, not its language (though each is an ISO 639-3 code:
#: labelling rows "src" would make clean expect Logudorese Sardinian)
_SIDE_SUFFIXES = {"src", "tgt", "trg"}
_LANG_PAIR_IN_NAME = re.compile(r"(?:^|[._-])([a-z]{2,3})-([a-z]{2,3})(?=[._]|$)")

BLOCK_BYTES = 8 << 20
_BOM = b"\xef\xbb\xbf"


@dataclass
class RecordChunk:
    """Consecutive records of one source.

    ``codes`` holds an index into :data:`REJECT_REASONS` per record, or -1 for a good record;
    ``fields`` hold the decoded text columns (their values at rejected records are meaningless);
    ``raw`` returns the raw bytes of the records selected by a mask, so rejects keep them.
    """

    first_line: int
    codes: np.ndarray
    fields: list[pa.Array]
    raw: Callable[[np.ndarray], pa.Array]

    def __len__(self) -> int:
        return len(self.codes)


@dataclass
class InputFile:
    """A raw input file: its size, and the hash and byte count of what was read of it.

    ``path`` gives its name (format, compression, languages); ``url``, when set, is where it
    is read from (``s3://bucket/key``: ``path`` is then the URL's path)."""

    path: Path
    size: int = 0
    bytes_read: int = 0
    lines: int = 0
    #: how reads of it are retried (a file on a NAS); None: the default policy
    retry: RetryPolicy | None = None
    _hash: Any = field(default_factory=hashlib.sha256, repr=False)
    url: str | None = None

    @property
    def compression(self) -> str | None:
        return COMPRESSIONS.get(self.path.suffix.lower())

    @property
    def where(self) -> str:
        """The file as messages and the lineage name it: its URL, or its path."""
        return self.url if self.url is not None else path_text(self.path)

    def open_raw(self) -> RetryingFile:
        """A retrying reader of the file's bytes (the size planned: an early EOF is a fault)."""
        fs = filesystem_for(self.url) if self.url is not None else LocalFileSystem()
        return RetryingFile(fs, self.url if self.url is not None else str(self.path),
                            size=self.size, policy=self.retry)

    def lineage(self) -> dict[str, Any]:
        return {"path": self.where, "bytes": self.size, "sha256": self._hash.hexdigest(),
                "compression": self.compression}


def path_text(path: str | Path) -> str:
    """``path`` as text that encodes as UTF-8, for manifests and messages: a file name may hold
    bytes that are not UTF-8 (Python keeps them as surrogates), shown here as ``\\xff``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_utf8_name(path: str | Path) -> bool:
    """Whether Arrow can open ``path`` by name: it encodes every path as strict UTF-8."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _TrackedReader(io.RawIOBase):
    """Hashes and counts the bytes read from a file, before any decompression."""

    def __init__(self, raw: io.RawIOBase, record: InputFile,
                 on_bytes: Callable[[int], None] | None):
        self._raw, self._record, self._on_bytes = raw, record, on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._raw.readinto(b)  # type: ignore[attr-defined]
        if n:
            self._record._hash.update(memoryview(b)[:n])
            self._record.bytes_read += n
            if self._on_bytes is not None:
                self._on_bytes(n)
        return n or 0

    def close(self) -> None:
        self._raw.close()
        super().close()


def _open_stream(record: InputFile, on_bytes: Callable[[int], None] | None) -> BinaryIO:
    # every read retried if transient, and an early EOF (the file is shorter than its size
    # when planned) is a fault to retry, not the end of the corpus
    raw: Any = record.open_raw()
    if record.url is not None:  # decompressors read 8 KiB at a time: one request each
        raw = io.BufferedReader(raw, buffer_size=BLOCK_BYTES)
    tracked = _TrackedReader(raw, record, on_bytes)
    kind = record.compression
    if kind == "gzip":
        return gzip.GzipFile(fileobj=tracked, mode="rb")  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(tracked)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(tracked)  # type: ignore[arg-type, return-value]
    if kind == "zstd":
        # pyarrow's stream reads concatenated frames (``cat a.zst b.zst``) in bounded memory
        # and fails on a truncated frame (zstandard's stream_reader would stop silently)
        if not pa.Codec.is_available("zstd"):
            raise InputError(f"{record.where} is zstd-compressed, but this pyarrow was built "
                             "without zstd; install pyarrow's wheel from PyPI")
        return pa.CompressedInputStream(tracked, "zstd")  # type: ignore[no-any-return]
    return io.BufferedReader(tracked, buffer_size=1 << 20)  # type: ignore[return-value]


def _read(stream: BinaryIO, record: InputFile) -> bytes:
    """One block of decompressed bytes; compression faults become one-line input errors."""
    try:
        return stream.read(BLOCK_BYTES)
    except EOFError as exc:
        raise _damaged(record, "truncated", exc) from exc
    except (gzip.BadGzipFile, zlib.error, lzma.LZMAError) as exc:
        raise _damaged(record, "corrupt", exc) from exc
    except OSError as exc:
        if record.compression is None or exc.errno is not None:
            raise SprDataError(f"cannot read {record.where}: {exc.strerror or exc}") from exc
        # pyarrow's zstd stream says "Truncated compressed stream" where gzip raises EOFError
        what = "truncated" if "truncated" in str(exc).lower() else "corrupt"
        raise _damaged(record, what, exc) from exc


def _damaged(record: InputFile, what: str, exc: BaseException) -> InputError:
    """The one-line error for a damaged compressed file: which file, how, and what to do."""
    return InputError(f"{record.where} is {what} ({record.compression}: {exc}); "
                      "re-download or re-compress it")


def iter_line_blocks(
    record: InputFile, on_bytes: Callable[[int], None] | None = None
) -> Iterator[pa.Array]:
    """Yield blocks of lines as Arrow binary arrays, without line ends.

    A UTF-8 BOM at the start of the file is dropped, ``\\r\\n`` counts as a line end, and a
    last line without a line feed is still a line. Memory is about two blocks.
    """
    stream = _open_stream(record, on_bytes)
    with stream:
        carry = b""
        at_start = True
        while True:
            data = _read(stream, record)
            at_eof = not data
            buf = carry + data if carry else data
            if at_start and (len(buf) >= len(_BOM) or at_eof):
                at_start = False
                if buf.startswith(_BOM):
                    buf = buf[len(_BOM):]
                _refuse_cr_line_ends(buf[:1 << 16], record)
            del data
            if at_eof:
                if buf:  # the last line; its line feed, if any, ends it
                    yield _split_lines(buf, len(buf) - buf.endswith(b"\n"), record)
                return
            cut = buf.rfind(b"\n")
            if cut < 0 or at_start:
                carry = buf
                continue
            carry = buf[cut + 1:]
            yield _split_lines(buf, cut, record)


def _refuse_cr_line_ends(head: bytes, record: InputFile) -> None:
    """A file whose lines end with CR alone (classic Mac) would read as one huge line."""
    if b"\n" not in head and head.count(b"\r") > 1:
        raise InputError(f"{record.where} ends its lines with CR alone, not LF or "
                         "CRLF; convert them first, e.g. tr '\\r' '\\n' < FILE > FIXED")


def _split_lines(buf: bytes, end: int, record: InputFile) -> pa.Array:
    """The lines of ``buf[:end]`` as a binary array, without copying ``buf`` first."""
    if end and buf[end - 1] == 0x0D:  # the CR of the CRLF that ends this block
        end -= 1
    if buf.find(b"\r\n", 0, end) >= 0:
        buf = buf[:end].replace(b"\r\n", b"\n")
        end = len(buf)
    offsets = pa.array([0, end], pa.int32()).buffers()[1]
    body = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(buf)])
    lines = pc.split_pattern(body, pattern=b"\n").flatten()
    record.lines += len(lines)
    return lines


def iter_text_lines(path: Path) -> Iterator[list[str]]:
    """Blocks of the non-empty lines of a text file, for readers that need strict UTF-8
    (reports, tokenizer training); ingest is the place that keeps invalid lines as rejects."""
    for block in iter_line_blocks(InputFile(path, size=path.stat().st_size)):
        try:
            texts = block.cast(pa.string()).to_pylist()
        except pa.ArrowInvalid:
            raise InputError(f"{path} is not valid UTF-8; ingest it first, which keeps the "
                             "invalid lines as rejects") from None
        yield [t for t in texts if t]


def _decode(lines: pa.Array, codes: np.ndarray) -> pa.Array:
    """Lines as UTF-8 strings; invalid lines get ``invalid_utf8`` and an empty string."""
    try:
        text = lines.cast(pa.string())
    except pa.ArrowInvalid:
        values = []
        for i, raw in enumerate(lines.to_pylist()):
            try:
                values.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                values.append("")
                codes[i] = _CODE["invalid_utf8"]
        text = pa.array(values, pa.string())
    return text


def _mark(codes: np.ndarray, mask: Any, reason: str) -> None:
    """Give ``reason`` to records selected by ``mask`` that have no reason yet."""
    m = mask if isinstance(mask, np.ndarray) else np.asarray(mask, dtype=bool)
    codes[(codes < 0) & m] = _CODE[reason]


def _bool(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _has_nul(text: pa.Array) -> np.ndarray:
    data = text.buffers()[2]
    if data is None or not (np.frombuffer(data, dtype=np.uint8) == 0).any():
        return np.zeros(len(text), dtype=bool)  # the common case, checked at memory speed
    return _bool(pc.match_substring(text, "\x00").fill_null(False))


def _ints(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _is_empty(text: pa.Array) -> np.ndarray:
    return np.asarray(_ints(pc.binary_length(text)) == 0, dtype=bool)


def _take_raw(lines: pa.Array) -> Callable[[np.ndarray], pa.Array]:
    return lambda mask: lines.filter(pa.array(mask))


class Source:
    """One logical input and how to read it into :class:`RecordChunk` objects."""

    format: str
    kind: Kind

    def __init__(self, files: list[InputFile], kind: Kind) -> None:
        self.files = files
        self.kind = kind

    @property
    def records(self) -> int:
        return self.files[0].lines

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {}

    def lineage(self) -> dict[str, Any]:
        return {"format": self.format, **self.options(), "records": self.records,
                "files": [f.lineage() for f in self.files]}


class TextSource(Source):
    """Plain text, one document or sentence per line → mono rows."""

    format = "text"

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = _decode(lines, codes)
            _mark(codes, _has_nul(text), "nul_byte")
            _mark(codes, _is_empty(text), "empty_line")
            yield RecordChunk(line, codes, [text], _take_raw(lines))
            line += len(lines)


class TsvSource(Source):
    """Tab-separated fields; quotes are literal text. The first line fixes the field count."""

    format = "tsv"

    def __init__(self, files: list[InputFile], kind: Kind, columns: Sequence[int]) -> None:
        super().__init__(files, kind)
        self.columns = tuple(columns)
        self.expected_fields: int | None = None

    def options(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "fields": self.expected_fields}

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        needed = max(self.columns) + 1
        seen_text = False
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = _decode(lines, codes)
            _mark(codes, _has_nul(text), "nul_byte")
            _mark(codes, _is_empty(text), "empty_line")
            if self.expected_fields is None:
                nfields = _ints(pc.count_substring(text, "\t")) + 1
                candidates = np.flatnonzero((codes < 0) & (nfields >= needed))
                if len(candidates):
                    self.expected_fields = int(nfields[candidates[0]])
            expected = self.expected_fields or needed
            # split at most `expected` times: a line with more fields shows as expected + 1
            parts = pc.split_pattern(text, pattern="\t", max_splits=expected)
            nfields = _ints(pc.list_value_length(parts))
            _mark(codes, nfields != expected, "tsv_field_count")
            if (nfields < needed).any():  # pad short lines so that every column exists
                padded = pc.binary_join_element_wise(text, "\t" * needed, "")
                parts = pc.split_pattern(padded, pattern="\t", max_splits=expected)
            fields = [pc.list_element(parts, c) for c in self.columns]
            for f in fields:
                _mark(codes, _is_empty(f), "empty_field")
            yield RecordChunk(line, codes, fields, _take_raw(lines))
            line += len(lines)
            seen_text = seen_text or bool((pc.binary_length(text).to_numpy() > 0).any())
        if self.expected_fields is None and seen_text:
            raise InputError(
                f"no line of {self.files[0].where} has the {needed} tab-separated fields that "
                f"--columns {','.join(map(str, self.columns))} needs (0-based); "
                "check the file's format or choose other --columns"
            )


class MosesSource(Source):
    """Two line-aligned files, one sentence per line; their line counts must match."""

    format = "moses"

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
                for _ in src_blocks if src is not None else tgt_blocks:
                    pass  # count the longer file's lines for the error message
                if src is not None or tgt is not None:
                    raise InputError(
                        f"Moses pair has different line counts: {src_file.where} has "
                        f"{src_file.lines} lines, {tgt_file.where} has {tgt_file.lines}; "
                        "the two files must be line-aligned"
                    )
                return
            n = min(len(src), len(tgt))
            s_lines, t_lines = src.slice(0, n), tgt.slice(0, n)
            src, tgt = src.slice(n), tgt.slice(n)
            codes = np.full(n, -1, dtype=np.int8)
            s_text, t_text = _decode(s_lines, codes), _decode(t_lines, codes)
            _mark(codes, _has_nul(s_text) | _has_nul(t_text), "nul_byte")
            s_empty, t_empty = _is_empty(s_text), _is_empty(t_text)
            _mark(codes, s_empty & t_empty, "empty_line")
            _mark(codes, s_empty | t_empty, "empty_field")

            def raw(mask: np.ndarray, s: pa.Array = s_lines, t: pa.Array = t_lines) -> pa.Array:
                m = pa.array(mask)
                return pc.binary_join_element_wise(s.filter(m), t.filter(m), b"\n")

            yield RecordChunk(line, codes, [s_text, t_text], raw)
            line += n


class JsonlSource(Source):
    """One JSON object per line; the chosen keys hold the text."""

    format = "jsonl"

    def __init__(self, files: list[InputFile], kind: Kind, keys: Sequence[str],
                 fallbacks: Sequence[Sequence[str]] = ()) -> None:
        """``keys`` hold the text; when the first JSON object lacks one of them, the first of
        ``fallbacks`` (other candidate keys, e.g. ``src``/``tgt`` after the languages) that it
        has is used instead."""
        super().__init__(files, kind)
        self.keys = tuple(keys)
        self._fallbacks = [tuple(k) for k in fallbacks]

    def options(self) -> dict[str, Any]:
        return {"keys": list(self.keys)}

    def _choose_keys(self, text: pa.Array) -> None:
        """Pick the candidate keys the file's first JSON object holds (one look at it)."""
        for value in text.slice(0, 1000).to_pylist():
            try:
                obj = json.loads(value) if value and value.strip() else None
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                for keys in [self.keys, *self._fallbacks]:
                    if all(k in obj for k in keys):
                        self.keys = keys
                        break
                break
        self._fallbacks = []

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = _decode(lines, codes)
            if self._fallbacks:
                self._choose_keys(text)
            columns: list[list[str]] = [[] for _ in self.keys]
            for i, value in enumerate(text.to_pylist()):
                reason, got = self._parse(value) if codes[i] < 0 else (None, [""] * len(self.keys))
                if reason is not None:
                    codes[i] = _CODE[reason]
                for col, v in zip(columns, got, strict=True):
                    col.append(v)
            fields = [pa.array(col, pa.string()) for col in columns]
            yield RecordChunk(line, codes, fields, _take_raw(lines))
            line += len(lines)

    def _parse(self, value: str) -> tuple[str | None, list[str]]:
        empty = [""] * len(self.keys)
        if not value.strip():
            return "empty_line", empty
        if "\x00" in value:
            return "nul_byte", empty
        try:
            obj = json.loads(value, parse_int=float)  # no 4,300-digit limit: only strings are kept
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
            return "invalid_json", empty
        if not isinstance(obj, dict):
            return "invalid_json", empty
        got = []
        for key in self.keys:
            if key not in obj:
                return "missing_key", empty
            v = obj[key]
            if not isinstance(v, str):
                return "not_a_string", empty
            got.append(v)
        if "\\u" in value and _has_lone_surrogate(got):
            return "invalid_json", empty
        if any("\x00" in v for v in got):
            return "nul_byte", empty
        if any(not v for v in got):
            return "empty_field", empty
        return None, got


def _has_lone_surrogate(values: list[str]) -> bool:
    """Whether a value holds an unpaired ``\\ud800``-style escape: valid JSON syntax, but no
    Unicode text, so it cannot be stored as UTF-8."""
    try:
        for v in values:
            v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class ParquetSource(Source):
    """A Parquet file; the chosen columns (names or 0-based indices) hold the text."""

    format = "parquet"

    def __init__(self, files: list[InputFile], kind: Kind, columns: Sequence[str],
                 fallbacks: Sequence[Sequence[str]] = ()) -> None:
        """``fallbacks``: other candidate columns, used when the file lacks ``columns``."""
        super().__init__(files, kind)
        self.columns = tuple(columns)
        self._fallbacks = [tuple(c) for c in fallbacks]

    def options(self) -> dict[str, Any]:
        return {"columns": list(self.columns)}

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        record = self.files[0]
        with _open_stream(record, on_bytes) as stream:  # hash the file, in bounded reads
            while _read(stream, record):
                pass
        with _parquet_file(record) as pf:
            yield from self._batches(pf, record)

    def _batches(self, pf: Any, record: InputFile) -> Iterator[RecordChunk]:
        names = self._resolve(pf.schema_arrow)
        line = 1
        for batch in pf.iter_batches(batch_size=65536, columns=names):
            n = batch.num_rows
            codes = np.full(n, -1, dtype=np.int8)
            fields = []
            for name in names:
                col = batch.column(name)
                _mark(codes, _bool(col.is_null()), "null_field")
                col = col.cast(pa.string()).fill_null("")
                fields.append(col)
            for f in fields:
                _mark(codes, _has_nul(f), "nul_byte")
            for f in fields:
                _mark(codes, _is_empty(f), "empty_field")

            def raw(mask: np.ndarray, b: pa.RecordBatch = batch) -> pa.Array:
                rows = b.select(names).filter(pa.array(mask)).to_pylist()
                return pa.array([json.dumps(r, ensure_ascii=False).encode() for r in rows],
                                pa.binary())

            record.lines += n
            yield RecordChunk(line, codes, fields, raw)
            line += n

    def _resolve(self, schema: pa.Schema) -> list[str]:
        for candidate in self._fallbacks:
            if not all(c in schema.names for c in self.columns) \
                    and all(c in schema.names for c in candidate):
                self.columns = candidate
        self._fallbacks = []
        names = []
        for c in self.columns:
            name = schema.names[int(c)] if c.isdigit() and int(c) < len(schema.names) else c
            if name not in schema.names:
                raise InputError(f"{self.files[0].where} has no column {c!r}; it has: "
                                 f"{', '.join(schema.names)}")
            t = schema.field(name).type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)
                    or pa.types.is_string_view(t)):
                raise InputError(f"{self.files[0].where}: column {name!r} is {t}, expected a "
                                 "string column; choose text columns with --columns")
            names.append(name)
        return names


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


@dataclass
class SourcePlan:
    """The sources of one ingest call and what they imply about the dataset."""

    sources: list[Source]
    kind: Kind
    langs: list[str]


def _strip_compression(path: Path) -> str:
    name = path.name
    suffix = path.suffix.lower()
    return name[: -len(suffix)] if suffix in COMPRESSIONS else name


def _format_of(path: Path) -> str | None:
    return _EXTENSIONS.get(Path(_strip_compression(path)).suffix.lower())


def _moses_langs(a: Path, b: Path) -> tuple[str, str] | None:
    """``train.en`` + ``train.de`` → ``("en", "de")``; None when the names do not pair up."""
    sa, sb = Path(_strip_compression(a)), Path(_strip_compression(b))
    la, lb = sa.suffix[1:], sb.suffix[1:]
    if sa.stem == sb.stem and la != lb and _LANG_SUFFIX.match(la) and _LANG_SUFFIX.match(lb):
        return la, lb
    return None


def _check_langs_fit_names(langs: Sequence[str] | None, files: Sequence[str],
                           names: tuple[str, str]) -> None:
    """Refuse ``--langs`` that swaps a Moses pair's suffix languages: the first file is always
    the source, so ``q.en q.de --langs de-en`` would store English labelled ``de``."""
    if langs is None or len(langs) != 2:
        return
    for side in (0, 1):
        own, other = names[side], names[1 - side]
        if _lang_closeness(langs[side], other) > _lang_closeness(langs[side], own):
            raise InputError(
                f"--langs {','.join(langs)} contradicts the file names: {files[0]} (the source) "
                f"says {names[0]} and {files[1]} (the target) says {names[1]}; pass --langs "
                f"{names[0]},{names[1]}, or list the files in the order of --langs"
            )


def _lang_closeness(a: str, b: str) -> int:
    """2: the same code; 1: the same base language (``zh-CN``, ``zh``); 0: different.
    Different codes are not a contradiction (``--langs en-de`` for ``train.eng train.deu``)."""
    a, b = a.lower().replace("_", "-"), b.lower().replace("_", "-")
    if a == b:
        return 2
    return int(a.split("-")[0] == b.split("-")[0])


def langs_from_name(path: Path, kind: Kind) -> list[str] | None:
    stem = _strip_compression(path)
    if kind == "parallel":
        m = _LANG_PAIR_IN_NAME.search(stem)
        return [m.group(1), m.group(2)] if m else None
    suffix = Path(Path(stem).stem).suffix[1:] if _format_of(path) else Path(stem).suffix[1:]
    return [suffix] if suffix and _LANG_SUFFIX.match(suffix) else None


def parse_langs(text: str) -> list[str]:
    """``"en-de"`` or ``"en,zh-CN"`` → a list of two codes, each checked
    (:func:`spr_data.langcodes.check_lang`: a typo is refused with what it may have meant)."""
    parts = [p.strip() for p in text.split(",")] if "," in text else text.split("-")
    if len(parts) != 2 or not all(parts):
        raise InputError(f"--langs {text!r} should be SRC-TGT (e.g. en-de) or SRC,TGT "
                         "(e.g. en,zh-CN or en,sr-Latn-RS)")
    return [check_lang(p, where=f"--langs {text}") for p in parts]


def plan_sources(
    inputs: Sequence[str | Path],
    *,
    format: str | None = None,
    langs: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    retry: RetryPolicy | None = None,
) -> SourcePlan:
    """Check the inputs exist, detect their formats, and decide the dataset's kind and langs.

    ``langs`` with one code means a mono corpus, with two a parallel one. Without it, the kind
    follows from the format and the number of columns or keys.
    """
    if not inputs:
        raise InputError("no input files given")
    if format is not None and format not in FORMATS:
        raise InputError(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    # a URL input (s3://bucket/key, https://…) is named by its path, read from the URL
    urls: dict[Path, str] = {}
    sizes: dict[Path, int] = {}
    paths = []
    for item in inputs:
        if is_url(item):
            url = str(item)
            name = Path("/" + urllib.parse.urlsplit(url).netloc
                        + urllib.parse.unquote(urllib.parse.urlsplit(url).path))
            urls[name] = url
            sizes[name] = file_size(filesystem_for(url), url, retry)  # missing: one line
            paths.append(name)
            continue
        p = Path(item)
        if not p.exists():
            raise InputError(f"input file {p} does not exist")
        if not p.is_file():
            raise InputError(f"input {p} is not a regular file")
        paths.append(p)

    def shown(p: Path) -> str:
        return urls.get(p, str(p))

    kind: Kind | None = None
    if langs is not None:
        if len(langs) not in (1, 2):
            raise InputError(f"expected one language (mono) or two (parallel), got {list(langs)}")
        kind = "parallel" if len(langs) == 2 else "mono"
        option = "--langs " + ",".join(langs) if len(langs) == 2 else "--lang"
        langs = [check_lang(code, where=option) for code in langs]
    width = len(columns) if columns else len(keys) if keys else None
    if width is not None and width not in (1, 2):
        raise InputError("choose one column/key (mono) or two (source and target)")
    if width is not None:
        width_kind: Kind = "parallel" if width == 2 else "mono"
        if kind is not None and kind != width_kind:
            raise InputError(f"{len(langs or [])} language(s) given but {width} column(s)/key(s)")
        kind = width_kind

    groups: list[tuple[str, list[Path]]] = []
    if format == "moses":
        if len(paths) % 2:
            raise InputError("--format moses takes the files in pairs: SRC TGT [SRC TGT ...]")
        groups = [("moses", paths[i:i + 2]) for i in range(0, len(paths), 2)]
    elif format is not None:
        groups = [(format, [p]) for p in paths]
    else:
        i = 0
        while i < len(paths):
            fmt = _format_of(paths[i])
            if fmt is None and i + 1 < len(paths) and _moses_langs(paths[i], paths[i + 1]):
                groups.append(("moses", paths[i:i + 2]))
                i += 2
                continue
            if fmt is None:
                raise InputError(
                    f"cannot tell the format of {shown(paths[i])} from its name; pass --format "
                    f"{'|'.join(FORMATS)} (a Moses pair is two files such as train.en train.de)"
                )
            groups.append((fmt, [paths[i]]))
            i += 1

    def kind_of(fmt: str) -> Kind:
        if fmt == "moses":
            return "parallel"
        if fmt == "text":
            return "mono"
        return kind or "parallel"

    kinds = {kind_of(fmt) for fmt, _ in groups}
    if len(kinds) > 1 or (kind is not None and kinds != {kind}):
        raise InputError("inputs mix parallel and mono corpora: "
                         + ", ".join(f"{shown(ps[0])} ({kind_of(f)})" for f, ps in groups))
    final_kind = kinds.pop()
    text_names = ["src", "tgt"] if final_kind == "parallel" else ["text"]

    sources: list[Source] = []
    guessed: set[tuple[str, ...]] = set()
    for fmt, ps in groups:
        files = [InputFile(p, size=sizes[p] if p in urls else p.stat().st_size, retry=retry,
                           url=urls.get(p)) for p in ps]
        if fmt == "moses":
            pair = _moses_langs(ps[0], ps[1])
            if pair:
                guessed.add(pair)
                _check_langs_fit_names(langs, [shown(q) for q in ps], pair)
            sources.append(MosesSource(files, final_kind))
            continue
        found = langs_from_name(ps[0], final_kind)
        if found:
            guessed.add(tuple(found))
        # JSONL keys and Parquet columns: named as chosen, else the languages (given, or from
        # the file name: pairs.en-bn.jsonl holds "en" and "bn"), else src/tgt (text)
        lang_keys = list(langs) if langs else found
        candidates = [k for k in (lang_keys, text_names) if k and len(k) == len(text_names)]
        candidates = [k for i, k in enumerate(candidates) if k not in candidates[:i]]
        if fmt == "tsv":
            cols = _int_columns(columns) if columns else list(range(len(text_names)))
            sources.append(TsvSource(files, final_kind, cols))
        elif fmt == "jsonl":
            sources.append(JsonlSource(files, final_kind, keys) if keys else
                           JsonlSource(files, final_kind, candidates[0], candidates[1:]))
        elif fmt == "parquet":
            sources.append(ParquetSource(files, final_kind, columns) if columns else
                           ParquetSource(files, final_kind, candidates[0], candidates[1:]))
        else:
            if final_kind != "mono":
                raise InputError(f"{shown(ps[0])} is plain text, which makes a mono corpus; "
                                 "pass --lang L rather than --langs")
            sources.append(TextSource(files, final_kind))

    if langs is not None:
        final_langs = list(langs)
    elif len(guessed) == 1:
        final_langs = list(guessed.pop())
        if set(final_langs) <= _SIDE_SUFFIXES:  # train.src + train.tgt: sides, no languages
            final_langs = ["und"] * len(final_langs)
        for code in final_langs:  # a name such as train.ge: refuse it rather than label rows
            check_lang(code, where=f"{paths[0].name} (the language its name gives; pass "
                                   f"--lang{'s' if len(final_langs) == 2 else ''} to set it)")
    else:
        final_langs = ["und"] * len(text_names)
    return SourcePlan(sources, final_kind, final_langs)


def _int_columns(columns: Sequence[str]) -> list[int]:
    try:
        cols = [int(c) for c in columns]
    except ValueError:
        raise InputError(f"TSV --columns take 0-based numbers, got {','.join(columns)}") from None
    if any(c < 0 for c in cols):
        raise InputError(f"TSV --columns must not be negative, got {','.join(columns)}")
    return cols
