"""The stage protocol: a pure function over an Arrow batch that scores, then decides.

A stage never does I/O or parallelism (the runner in ``spr_data.pipeline`` does), so it can
run as a task anywhere; it lives beside the stages so that they never import the runner.
It returns the columns it adds or replaces (scores, normalized text) and, in order of
precedence, the reasons it rejects rows for, each with a boolean mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

__all__ = ["Stage", "StageOutput"]


@dataclass
class StageOutput:
    """What a stage made of a batch."""

    columns: dict[str, pa.Array] = field(default_factory=dict)
    rejects: list[tuple[str, np.ndarray]] = field(default_factory=list)


class Stage(Protocol):
    """One QA step; ``name`` is what the report and the rejects' ``stage`` column show."""

    name: str

    def apply(self, batch: pa.RecordBatch) -> StageOutput:
        """Score ``batch`` and say which rows to reject and why."""
        ...
