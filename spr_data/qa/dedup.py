"""``dedup``: exact duplicates after normalization, decided over the whole dataset.

Each shard contributes a 64-bit content hash per row (a keyed BLAKE2b of the normalized text,
stable across runs, machines and library versions); the decision then needs only the hashes
and ids — 16 bytes a row — sorted once: the first row by id of each content is kept.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

__all__ = ["content_hashes", "duplicate_ids", "too_many_targets_ids"]

_KEY = b"spr-data dedup v1"


def content_hashes(columns: list[pa.Array]) -> np.ndarray:
    """A uint64 hash per row of the given text columns (joined with NUL, which text lacks)."""
    values = [c.fill_null("").to_pylist() for c in columns]
    out = np.empty(len(values[0]) if values else 0, dtype=np.uint64)
    for i, parts in enumerate(zip(*values, strict=True)):
        digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8, key=_KEY).digest()
        out[i] = int.from_bytes(digest, "little")
    return out


def duplicate_ids(hashes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Sorted ids of the rows whose content an earlier id (a smaller one) already has."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.uint64)
    order = np.lexsort((ids, hashes))
    h = hashes[order]
    repeat = np.zeros(len(h), dtype=bool)
    repeat[1:] = h[1:] == h[:-1]
    return np.sort(ids[order][repeat])


def too_many_targets_ids(source_hashes: np.ndarray, ids: np.ndarray, limit: int) -> np.ndarray:
    """Sorted ids of rows beyond the first ``limit`` (by id) that share one source."""
    if len(ids) == 0 or limit <= 0:
        return np.zeros(0, dtype=np.uint64)
    order = np.lexsort((ids, source_hashes))
    h = source_hashes[order]
    starts = np.ones(len(h), dtype=bool)
    starts[1:] = h[1:] != h[:-1]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(h)), 0))
    rank = np.arange(len(h)) - group_start
    return np.sort(ids[order][rank >= limit])
