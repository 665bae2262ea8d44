"""JSONL: one JSON object per line; the chosen keys hold the text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from spr_data.pipeline.sources.base import (
    REASON_CODE,
    InputFile,
    RecordChunk,
    Selection,
    Source,
    decode,
    iter_line_blocks,
    take_raw,
)
from spr_data.schema import Kind


class JsonlSource(Source):
    """One JSON object per line; the chosen keys hold the text."""

    format = "jsonl"
    extensions: ClassVar[tuple[str, ...]] = (".jsonl", ".ndjson")

    def __init__(self, files: list[InputFile], kind: Kind, keys: Sequence[str],
                 fallbacks: Sequence[Sequence[str]] = ()) -> None:
        """``keys`` hold the text; when the first JSON object lacks one of them, the first of
        ``fallbacks`` (other candidate keys, e.g. ``src``/``tgt`` after the languages) that it
        has is used instead."""
        super().__init__(files, kind)
        self.keys = tuple(keys)
        self._fallbacks = [tuple(k) for k in fallbacks]

    @classmethod
    def from_plan(cls, files: list[InputFile], kind: Kind, selection: Selection) -> Source:
        """``--keys`` as given; else the first candidate keys the file's first object has."""
        if selection.keys:
            return cls(files, kind, selection.keys)
        return cls(files, kind, selection.candidates[0], selection.candidates[1:])

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
                    if all(lookup(obj, k)[0] for k in keys):
                        self.keys = keys
                        break
                break
        self._fallbacks = []

    def chunks(self, on_bytes: Callable[[int], None] | None = None) -> Iterator[RecordChunk]:
        line = 1
        for lines in iter_line_blocks(self.files[0], on_bytes):
            codes = np.full(len(lines), -1, dtype=np.int8)
            text = decode(lines, codes)
            if self._fallbacks:
                self._choose_keys(text)
            columns: list[list[str]] = [[] for _ in self.keys]
            for i, value in enumerate(text.to_pylist()):
                reason, got = self._parse(value) if codes[i] < 0 else (None, [""] * len(self.keys))
                if reason is not None:
                    codes[i] = REASON_CODE[reason]
                for col, v in zip(columns, got, strict=True):
                    col.append(v)
            fields = [pa.array(col, pa.string()) for col in columns]
            yield RecordChunk(line, codes, fields, take_raw(lines))
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
            found, v = lookup(obj, key)
            if not found:
                return "missing_key", empty
            if not isinstance(v, str):
                return "not_a_string", empty
            got.append(v)
        if "\\u" in value and _has_lone_surrogate(got):
            return "invalid_json", empty
        if any("\x00" in v for v in got):
            return "nul_byte", empty
        if any(not v or v.isspace() for v in got):
            return "empty_field", empty
        return None, got


def lookup(obj: dict[str, Any], key: str) -> tuple[bool, Any]:
    """Whether ``obj`` holds ``key``, and its value: a key as it is, else a dotted path into
    nested objects (``translation.en`` of Hugging Face's ``{"translation": {"en": …}}``)."""
    if key in obj:
        return True, obj[key]
    node: Any = obj
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _has_lone_surrogate(values: list[str]) -> bool:
    """Whether a value holds an unpaired ``\\ud800``-style escape: valid JSON syntax, but no
    Unicode text, so it cannot be stored as UTF-8."""
    try:
        for v in values:
            v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
