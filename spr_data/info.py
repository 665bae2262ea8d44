"""``info``: what a dataset is (its manifest's figures and lineage) and a few of its rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spr_data.dataset import Dataset, open_dataset
from spr_data.reader import ReaderOptions

__all__ = ["DatasetInfo", "dataset_info"]


@dataclass
class DatasetInfo:
    """An open dataset and its sample rows; ``to_json`` is the CLI's ``--json`` output."""

    dataset: Dataset
    #: the sample rows as stored (raw reject bytes stay bytes)
    samples: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        ds, m = self.dataset, self.dataset.manifest
        return {
            "path": ds.location, "kind": m.kind, "role": m.role, "langs": m.langs,
            "rows": m.rows, "rows_in": m.rows_in, "shards": len(m.shards), "bytes": m.bytes,
            "rejects": m.rejects, "columns": [f.name for f in m.schema],
            "lineage": m.lineage, "samples": [_printable(r) for r in self.samples],
        }


def dataset_info(dataset: str | Path, *, samples: int = 3, random: bool = False, seed: int = 0,
                 reader: ReaderOptions | None = None) -> DatasetInfo:
    """Open ``dataset`` and take ``samples`` rows: the first ones, or with ``random`` rows drawn
    at random (seeded by ``seed``, in id order)."""
    ds = open_dataset(dataset, reader=reader)
    n = min(samples, len(ds))
    picked = (np.sort(np.random.default_rng(seed).choice(len(ds), n, replace=False))
              if random else np.arange(n))
    return DatasetInfo(ds, ds.take(picked).to_pylist())


def _printable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v)
            for k, v in row.items()}
