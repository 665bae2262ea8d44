"""spr-data: raw corpora → clean, sharded, memory-mapped Arrow datasets for safe training.

The names below are imported when first used (PEP 562), so that ``import spr_data`` is
instant: the ``spr-data`` command then catches a Ctrl-C during its own imports
(``spr_data.__main__``) instead of dying in a traceback inside pyarrow's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spr_data._version import __version__

if TYPE_CHECKING:
    from spr_data.dataset import Dataset, open_dataset
    from spr_data.errors import (
        DatasetError,
        InputError,
        OutputError,
        ReadError,
        SprDataError,
    )
    from spr_data.pipeline.audit import IdsRecorder, audit_dataset
    from spr_data.pipeline.ingest import IngestSummary, ingest
    from spr_data.reader import ReaderOptions, RetryPolicy
    from spr_data.verify import VerifyReport, verify_dataset

__all__ = [
    "Dataset",
    "DatasetError",
    "IdsRecorder",
    "IngestSummary",
    "InputError",
    "OutputError",
    "ReadError",
    "ReaderOptions",
    "RetryPolicy",
    "SprDataError",
    "VerifyReport",
    "__version__",
    "audit_dataset",
    "ingest",
    "open_dataset",
    "verify_dataset",
]

#: where each public name lives
_HOMES = {
    "Dataset": "spr_data.dataset", "open_dataset": "spr_data.dataset",
    "DatasetError": "spr_data.errors", "InputError": "spr_data.errors",
    "OutputError": "spr_data.errors", "ReadError": "spr_data.errors",
    "SprDataError": "spr_data.errors",
    "IdsRecorder": "spr_data.pipeline.audit", "audit_dataset": "spr_data.pipeline.audit",
    "IngestSummary": "spr_data.pipeline.ingest", "ingest": "spr_data.pipeline.ingest",
    "ReaderOptions": "spr_data.reader", "RetryPolicy": "spr_data.reader",
    "VerifyReport": "spr_data.verify", "verify_dataset": "spr_data.verify",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'spr_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
