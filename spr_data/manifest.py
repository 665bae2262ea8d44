"""``manifest.json``: what a dataset directory holds. Written last; no manifest, no dataset."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from spr_data.errors import DatasetError
from spr_data.fsio import atomic_write_bytes
from spr_data.schema import (
    KINDS,
    Kind,
    schema_from_b64,
    schema_summary,
    schema_to_b64,
    text_columns,
)

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "Manifest",
    "ShardInfo",
    "min_row_bytes",
    "parse_manifest",
    "read_manifest",
    "write_manifest",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
#: a manifest of a million shards is ~300 MB; anything larger is not one
MAX_MANIFEST_BYTES = 1 << 30
_HASH = re.compile(r"sha256:[0-9a-f]{64}")
ROLES = ("rows", "rejects")


@dataclass(frozen=True)
class ShardInfo:
    """One shard file as the manifest records it."""

    file: str
    rows: int
    bytes: int
    hash: str
    first_id: int | None


@dataclass
class Manifest:
    """The parsed ``manifest.json`` of a dataset directory.

    ``rows_in`` is how many records entered the stage that made the dataset, and ``id_bound``
    an exclusive upper bound of every row id, so the id partition can be checked with a bitmap.
    """

    kind: Kind
    role: str
    langs: list[str]
    schema: pa.Schema
    shards: list[ShardInfo]
    rows_in: int
    id_bound: int
    rejects: dict[str, int] = field(default_factory=dict)
    rejects_dir: str | None = None
    lineage: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "kind": self.kind,
            "role": self.role,
            "langs": self.langs,
            "rows": self.rows,
            "bytes": self.bytes,
            "rows_in": self.rows_in,
            "id_bound": self.id_bound,
            "rejects": dict(sorted(self.rejects.items())),
            "rejects_dir": self.rejects_dir,
            "schema": schema_summary(self.schema),
            "arrow_schema": schema_to_b64(self.schema),
            "shards": [asdict(s) for s in self.shards],
            "lineage": self.lineage,
        }


def write_manifest(directory: Path, manifest: Manifest, *, tag: str | None = None) -> None:
    """Atomically write ``directory/manifest.json``; call it after every shard is durable
    (``tag``: the run's token for the temp name)."""
    text = json.dumps(manifest.to_json(), indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(directory / MANIFEST_NAME, text.encode("utf-8"), tag=tag)


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """A manifest from its bytes (read from anywhere); ``where`` names it in errors."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise DatasetError(f"{where} is {len(raw):,} bytes, more than a manifest can be "
                           f"({MAX_MANIFEST_BYTES:,}); it is not an spr-data manifest")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{where} is not valid JSON: {exc}") from exc
    except RecursionError:  # brackets nested deeper than the parser's stack
        raise DatasetError(f"{where} is not an spr-data manifest: its JSON is nested too "
                           "deeply to read") from None
    return _parse(data, where)


def min_row_bytes(schema: pa.Schema) -> int:
    """The fewest bytes one row of ``schema`` takes in an uncompressed Arrow IPC file: fixed
    widths, plus an offset per variable-width value. ``rows * min_row_bytes <= bytes`` is
    what a shard of ``bytes`` bytes can hold, so a manifest's counts are bounded before
    anything is allocated by them."""
    def width(t: pa.DataType) -> int:
        if pa.types.is_struct(t):
            return sum(width(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_boolean(t) or pa.types.is_null(t):
            return 0
        if pa.types.is_large_string(t) or pa.types.is_large_binary(t) or \
                pa.types.is_large_list(t):
            return 8
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_list(t):
            return 4
        try:
            return max(int(t.bit_width) // 8, 0)
        except ValueError:  # a type without a fixed width: no lower bound from it
            return 0
    return sum(width(f.type) for f in schema)


def read_manifest(directory: Path) -> Manifest:
    """Read and validate ``directory/manifest.json``; every defect is a :class:`DatasetError`."""
    path = directory / MANIFEST_NAME
    if not directory.exists():
        raise DatasetError(f"{directory} does not exist")
    if not directory.is_dir():
        if directory.name == MANIFEST_NAME:
            raise DatasetError(f"{directory} is a dataset's manifest; name the dataset by its "
                               f"directory: {directory.parent}")
        raise DatasetError(f"{directory} is a file, not a dataset directory; make a dataset "
                           f"of it first: spr-data ingest {directory} --out DIR")
    if not path.is_file():
        raise DatasetError(
            f"{directory} is not an spr-data dataset: it has no {MANIFEST_NAME} "
            "(an unfinished or failed run leaves none; run the stage again)"
        )
    if path.stat().st_size > MAX_MANIFEST_BYTES:  # refused before it is read into memory
        raise DatasetError(f"{path} is {path.stat().st_size:,} bytes, more than a manifest can "
                           f"be ({MAX_MANIFEST_BYTES:,}); it is not an spr-data manifest")
    return parse_manifest(path.read_bytes(), str(path))


def _parse(data: Any, path: str | Path) -> Manifest:
    def need(obj: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise DatasetError(f"{path}: missing key {where}{key!r}")
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise DatasetError(f"{path}: key {where}{key!r} should be {names}, found {value!r}")
        return value

    version = need(data, "format_version", int)
    if version != FORMAT_VERSION:
        raise DatasetError(
            f"{path}: format_version {version} is not supported (expected {FORMAT_VERSION}); "
            "upgrade spr-data or re-create the dataset"
        )
    kind = need(data, "kind", str)
    if kind not in KINDS:
        raise DatasetError(f"{path}: kind should be one of {', '.join(KINDS)}, found {kind!r}")
    role = data.get("role", "rows")
    if role not in ROLES:
        raise DatasetError(f"{path}: role should be one of {', '.join(ROLES)}, found {role!r}")
    langs = need(data, "langs", list)
    if not all(isinstance(x, str) for x in langs):
        raise DatasetError(f"{path}: langs should be a list of language codes, found {langs!r}")
    try:
        schema = schema_from_b64(need(data, "arrow_schema", str))
    except (ValueError, pa.ArrowInvalid) as exc:
        raise DatasetError(f"{path}: arrow_schema is not a valid Arrow schema: {exc}") from exc
    shards = []
    row_bytes = min_row_bytes(schema)
    seen_files: set[str] = set()
    for i, s in enumerate(need(data, "shards", list)):
        where = f"shards[{i}]."
        first_id = s.get("first_id") if isinstance(s, dict) else None
        if first_id is not None and not isinstance(first_id, int):
            raise DatasetError(f"{path}: key {where}'first_id' should be int, found {first_id!r}")
        file = need(s, "file", str, where)
        if "/" in file or "\\" in file or file.startswith(".") or not file.isprintable() \
                or file in seen_files or file in (MANIFEST_NAME, data.get("rejects_dir")):
            raise DatasetError(f"{path}: {where}file must be a plain file name of a shard, "
                               f"printable and listed once, found {file!r}")
        seen_files.add(file)
        rows, size = need(s, "rows", int, where), need(s, "bytes", int, where)
        if rows < 0 or size < 0 or size >= 1 << 63:
            raise DatasetError(f"{path}: {where}rows and bytes must not be negative")
        if rows * row_bytes > size:
            raise DatasetError(
                f"{path}: {where}rows is {rows:,}, more than a file of {size:,} bytes can hold "
                f"(each row takes at least {row_bytes} bytes); the manifest is corrupt or "
                "forged: re-create the dataset")
        digest = need(s, "hash", str, where)
        if not _HASH.fullmatch(digest):
            raise DatasetError(f"{path}: {where}hash should be 'sha256:' and 64 hex digits, "
                               f"found {digest[:80]!r}: without it the shard cannot be "
                               "checked; re-create the dataset")
        shards.append(ShardInfo(file, rows, size, digest, first_id))
    total = need(data, "rows", int)
    if total != sum(s.rows for s in shards):
        raise DatasetError(
            f"{path}: rows is {total} but the shards hold {sum(s.rows for s in shards)}"
        )
    rejects = need(data, "rejects", dict)
    if not all(isinstance(v, int) for v in rejects.values()):
        raise DatasetError(f"{path}: rejects should map reasons to counts, found {rejects!r}")
    rejects_dir = data.get("rejects_dir")
    if rejects_dir is not None and (not isinstance(rejects_dir, str) or "/" in rejects_dir
                                    or "\\" in rejects_dir or rejects_dir in ("", ".", "..")
                                    or not rejects_dir.isprintable()):
        raise DatasetError(f"{path}: rejects_dir must be a directory name, found {rejects_dir!r}")
    rows_in, id_bound = need(data, "rows_in", int), need(data, "id_bound", int)
    if not total <= rows_in <= id_bound < 1 << 63:
        raise DatasetError(f"{path}: expected rows ({total}) <= rows_in ({rows_in}) <= id_bound "
                           f"({id_bound}) < 2**63: every row is one of the records that came "
                           "in, each with its own id below id_bound")
    missing = rows_in - total - sum(rejects.values())
    if role == "rows" and missing:
        # every record that came in is a row or a counted reject: a shard left out of the
        # manifest (its counts lowered to match) would otherwise lose its rows in silence
        raise DatasetError(
            f"{path}: the shards hold {total:,} rows and the manifest counts "
            f"{sum(rejects.values()):,} rejects, but {rows_in:,} records came in: "
            + (f"{missing:,} are unaccounted for (a shard left out of the manifest?)"
               if missing > 0 else f"{-missing:,} more rows and rejects than records")
            + "; re-create the dataset, or restore its manifest")
    if role == "rows":
        missing = [c for c in text_columns(kind) if c not in schema.names]  # type: ignore[arg-type]
        if missing:
            raise DatasetError(f"{path}: a {kind} dataset needs column(s) {', '.join(missing)}; "
                               f"its schema has {', '.join(schema.names)}")
    return Manifest(
        kind=kind,
        role=role,
        langs=langs,
        schema=schema,
        shards=shards,
        rows_in=rows_in,
        id_bound=id_bound,
        rejects=rejects,
        rejects_dir=rejects_dir,
        lineage=need(data, "lineage", dict),
        format_version=version,
    )
