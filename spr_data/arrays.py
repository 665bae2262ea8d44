"""Numpy helpers on the hot paths of id and hash sets.

``np.unique`` in numpy 2.3+ takes a hash-based path that measured 19 s on 14M uint64 values
here, where sorting them takes 0.9 s; ``unique`` sorts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["unique"]


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (as ``np.unique``, by sorting)."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
