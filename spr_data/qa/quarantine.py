"""``quarantine``: rows a training run flagged (``FiniteStepGuard``'s file), rejected by id.

A corpus stage with nothing to combine but the list itself: its ids are read and checked
once, stored sorted in the run's work directory, and each unit looks its ids up there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spr_data.arrays import member, unique
from spr_data.errors import InputError
from spr_data.fsio import TMP_SUFFIX
from spr_data.qa.stage import CombineContext, StageOutput, UnitRows, unit_ids

__all__ = ["QuarantineStage", "read_quarantine"]


def read_quarantine(path: str | Path) -> np.ndarray:
    """Row ids from a quarantine file: JSONL of ``{"row_ids": [...]}``, ``{"id": n}`` or ``n``."""
    p = Path(path)
    ids: list[int] = []
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM, as some editors write, is fine
    except FileNotFoundError:
        raise InputError(f"quarantine file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read quarantine file {p}: {exc}") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{number}: not JSON ({exc.msg})") from None
        values = item.get("row_ids", item.get("ids", [item["id"]] if "id" in item else None)) \
            if isinstance(item, dict) else [item]
        if not isinstance(values, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64
                for v in values):
            raise InputError(f"{p}:{number}: expected a row id, a list 'row_ids' of row ids, "
                             f"or 'id'; found {line.strip()[:80]}")
        ids.extend(values)
    return unique(np.asarray(ids, dtype=np.uint64))


@dataclass(frozen=True)
class QuarantineStage:
    """Rejects the rows whose ids any of the quarantine files at ``paths`` lists (one file a
    rank, under DDP)."""

    paths: tuple[str, ...]
    name: str = "quarantine"
    reasons: tuple[str, ...] = ("quarantined",)
    columns: tuple[str, ...] = ()

    def partial(self, rows: UnitRows) -> None:
        return None

    def combine(self, context: CombineContext) -> dict[str, Any]:
        ids = unique(np.concatenate([read_quarantine(p) for p in self.paths]))
        path = context.work / "quarantine.npy"
        tmp = path.with_name(path.name + TMP_SUFFIX)
        with open(tmp, "wb") as f:
            np.save(f, ids, allow_pickle=False)
        tmp.replace(path)
        return {"ids": str(path), "count": len(ids)}

    def apply(self, rows: UnitRows, state: dict[str, Any],
              rejected: np.ndarray) -> StageOutput:
        ids = unit_ids(rows)
        hit = member(ids, np.load(state["ids"], allow_pickle=False))  # sorted: read_quarantine
        return StageOutput(rejects=[("quarantined", hit)], stats={"quarantined": [int(hit.sum())]})
