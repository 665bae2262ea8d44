"""What every input format shares: input files, compressed streams, line blocks, record chunks.

A format module (``text``, ``tsv``, ...) holds one :class:`Source` subclass that turns its
files into :class:`RecordChunk` objects with the helpers here; the planner
(:mod:`spr_data.pipeline.sources.plan`) picks the class by format name.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spr_data.errors import InputError, SprDataError
from spr_data.reader import LocalFileSystem, RetryingFile, RetryPolicy, filesystem_for
from spr_data.schema import Kind

#: Why ingest could not turn a record into a row, in order of precedence.
REJECT_REASONS = (
    "invalid_utf8",  # bytes that are not UTF-8
    "nul_byte",  # a U+0000 character
    "empty_line",  # a blank line (both lines blank, for a Moses pair)
    "invalid_json",  # JSONL: the line is not a JSON object
    "tsv_field_count",  # TSV: another number of tab-separated fields than most of the first lines
    "missing_key",  # JSONL: a chosen key is absent
    "not_a_string",  # JSONL: a chosen key holds something other than a string
    "null_field",  # Parquet: a chosen column is null
    "empty_field",  # one side (or the text) is empty
    "header",  # TSV: a first line of column names (src/tgt, en/de, English/German)
)
REASON_CODE = {name: i for i, name in enumerate(REJECT_REASONS)}

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".xz": "xz", ".bz2": "bz2"}

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

    def __getstate__(self) -> dict[str, Any]:
        """A file not read yet travels to a worker that reads it (a hash object does not
        pickle; the worker starts its own)."""
        if self.bytes_read or self.lines:
            raise TypeError(f"{self.where} was read in this process already; plan it again "
                            "to read it elsewhere")
        state = dict(self.__dict__)
        del state["_hash"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._hash = hashlib.sha256()


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


def open_stream(record: InputFile, on_bytes: Callable[[int], None] | None) -> BinaryIO:
    # every read retried if transient, and an early EOF (the file is shorter than its size
    # when planned) is a fault to retry, not the end of the corpus
    raw: Any = record.open_raw()
    if record.url is not None:  # decompressors read 8 KiB at a time: one request each
        raw = io.BufferedReader(raw, buffer_size=BLOCK_BYTES)
    tracked = _TrackedReader(raw, record, on_bytes)
    kind = record.compression
    if kind is not None and record.size == 0:  # gzip and zstd read 0 bytes as empty text
        raise InputError(f"{record.where} is empty (0 bytes), which no {kind} file is, even of "
                         "no text (it has a header): a download or copy that failed? fetch it "
                         "again")
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


def read_block(stream: BinaryIO, record: InputFile) -> bytes:
    """One block of decompressed bytes; compression faults become one-line input errors."""
    try:
        return stream.read(BLOCK_BYTES)
    except EOFError as exc:
        _refuse_grown(record)  # a compressed file still being written ends mid-stream
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
    stream = open_stream(record, on_bytes)
    with stream:
        carry = b""
        at_start = True
        while True:
            data = read_block(stream, record)
            at_eof = not data
            buf = carry + data if carry else data
            if at_start and (len(buf) >= len(_BOM) or at_eof):
                at_start = False
                if buf.startswith(_BOM):
                    buf = buf[len(_BOM):]
                _refuse_cr_line_ends(buf[:1 << 16], record)
            del data
            if at_eof:
                _refuse_grown(record)
                if buf:  # the last line; its line feed, if any, ends it
                    yield _split_lines(buf, len(buf) - buf.endswith(b"\n"), record)
                return
            cut = buf.rfind(b"\n")
            if cut < 0 or at_start:
                carry = buf
                continue
            carry = buf[cut + 1:]
            yield _split_lines(buf, cut, record)


def _refuse_grown(record: InputFile) -> None:
    """A local file longer now than when the run planned it is still being written (or
    downloaded): its last line, read up to the planned size, may be cut mid-sentence."""
    if record.url is not None:
        return
    try:
        now = record.path.stat().st_size
    except OSError:
        return  # gone since: what was read was the planned size, checked by the reader
    if now != record.size:
        raise InputError(f"{record.where} changed while it was read: {record.size:,} bytes when "
                         f"the run started, {now:,} now (a file still being written or "
                         "downloaded?); ingest it once it is complete")


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
    (reports, tokenizer training); ingest is the place that keeps invalid lines as rejects.
    A file named as records (``pairs.tsv``, ``.jsonl``, ``.parquet``: another format's name
    ending) is refused — read as lines, a TSV's pair would be one segment of two languages:
    ingest it and pass the dataset, whose columns are read apart with their languages."""
    name = Path(path.name.lower())
    if name.suffix in COMPRESSIONS:
        name = Path(name.stem)
    if any(name.suffix in cls.extensions for cls in Source.__subclasses__()
           if cls.format != "text"):
        raise InputError(f"{path} holds records, not lines of text (its name says so): "
                         f"ingest it first (spr-data ingest {path} --out DATASET) and pass the "
                         "dataset, whose columns are read apart, each with its language")
    for block in iter_line_blocks(InputFile(path, size=path.stat().st_size)):
        try:
            texts = block.cast(pa.string()).to_pylist()
        except pa.ArrowInvalid:
            raise InputError(f"{path} is not valid UTF-8; ingest it first, which keeps the "
                             "invalid lines as rejects") from None
        yield [t for t in texts if t]


def decode(lines: pa.Array, codes: np.ndarray) -> pa.Array:
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
                codes[i] = REASON_CODE["invalid_utf8"]
        text = pa.array(values, pa.string())
    return text


def mark(codes: np.ndarray, mask: Any, reason: str) -> None:
    """Give ``reason`` to records selected by ``mask`` that have no reason yet."""
    m = mask if isinstance(mask, np.ndarray) else np.asarray(mask, dtype=bool)
    codes[(codes < 0) & m] = REASON_CODE[reason]


def bools(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def has_nul(text: pa.Array) -> np.ndarray:
    data = text.buffers()[2]
    if data is None or not (np.frombuffer(data, dtype=np.uint8) == 0).any():
        return np.zeros(len(text), dtype=bool)  # the common case, checked at memory speed
    return bools(pc.match_substring(text, "\x00").fill_null(False))


def ints(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def is_empty(text: pa.Array) -> np.ndarray:
    """Empty or only whitespace (a line of spaces or tabs says nothing either). Only rows
    whose first byte can start a whitespace character are tested whole (Arrow's
    ``utf8_is_space`` over every row cost ingest a sixth of its time)."""
    from spr_data.qa.scripts import utf8_bytes

    raw, offsets = utf8_bytes(text)
    out: np.ndarray = offsets[1:] == offsets[:-1]
    if not len(raw):
        return out
    first = raw[np.minimum(offsets[:-1], len(raw) - 1)]  # each row's first byte
    rows = np.flatnonzero(_SPACE_LEAD[first] & ~out)
    if len(rows):
        out[rows] = np.asarray(pc.utf8_is_space(text.take(pa.array(rows)))
                               .to_numpy(zero_copy_only=False), dtype=bool)
    return out


#: the first bytes of the UTF-8 of every whitespace character (ASCII's, U+001C-001F, U+0085,
#: U+00A0, U+1680, U+2000-200A, U+2028-2029, U+202F, U+205F, U+3000)
_SPACE_LEAD = np.zeros(256, dtype=bool)
_SPACE_LEAD[[*range(0x09, 0x0E), *range(0x1C, 0x21), 0xC2, 0xE1, 0xE2, 0xE3]] = True


def take_raw(lines: pa.Array) -> Callable[[np.ndarray], pa.Array]:
    return lambda mask: lines.filter(pa.array(mask))


@dataclass(frozen=True)
class Selection:
    """Which fields of a record hold the text, as the planner passes them to a format:
    ``columns`` (``--columns``) and ``keys`` (``--keys``) as given, or None; ``candidates``,
    the names to look for otherwise (the languages, then ``src``/``tgt`` or ``text``)."""

    columns: Sequence[str] | None
    keys: Sequence[str] | None
    candidates: list[list[str]]


class Source:
    """One logical input and how to read it into :class:`RecordChunk` objects.

    A format declares what the planner needs to know of it: the name endings that mean it,
    the kind of corpus it always makes, if any, and how many files make one source.
    """

    format: str
    kind: Kind
    #: name endings (after a compression suffix) that mean this format
    extensions: ClassVar[tuple[str, ...]] = ()
    #: the kind every input of this format makes; None: as --langs or the fields say
    fixed_kind: ClassVar[Kind | None] = None
    #: files read together as one source (a Moses pair: 2)
    files_per_source: ClassVar[int] = 1

    def __init__(self, files: list[InputFile], kind: Kind) -> None:
        self.files = files
        self.kind = kind

    @classmethod
    def from_plan(cls, files: list[InputFile], kind: Kind, selection: Selection) -> Source:
        """The source the planner makes of ``files``, with the fields ``selection`` names."""
        return cls(files, kind)

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


#: first bytes of files whose text is not UTF-8 → what to say of them
_SIGNATURES = (
    (b"\xff\xfe", "UTF-16 text (a little-endian byte order mark): convert it to UTF-8 first "
     "(e.g. iconv -f UTF-16 -t UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (a big-endian byte order mark): convert it to UTF-8 first "
     "(e.g. iconv -f UTF-16 -t UTF-8)"),
    (b"\x1f\x8b", "gzip-compressed: name it with .gz, and it is read as such"),
    (b"\xfd7zXZ\x00", "xz-compressed: name it with .xz, and it is read as such"),
    (b"BZh", "bzip2-compressed: name it with .bz2, and it is read as such"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: name it with .zst, and it is read as such"),
    (b"PK\x03\x04", "a zip archive: unzip it first (unzip FILE), and ingest the files in it"),
    (b"\x04\x22\x4d\x18", "lz4-compressed, which ingest does not read: decompress it first "
     "(lz4 -d FILE), or re-compress it with zstd or gzip"),
)


def encoded_as(file: InputFile) -> str | None:
    """What a local input's first bytes say it is, where that is not UTF-8 text (None:
    nothing known, or not a local file, or already read as compressed)."""
    if file.url is not None or file.compression is not None:
        return None
    try:
        with open(file.path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return next((what for magic, what in _SIGNATURES if head.startswith(magic)), None)
