"""The stage protocols: what a QA stage declares, and the two shapes a stage comes in.

A stage never does I/O of datasets or parallelism (the runner in ``spr_data.pipeline`` does),
so it can run as a task anywhere; the protocols live beside the stages so that they never
import the runner. Every stage declares its ``name`` (what the report and the rejects'
``stage`` column show) and ``reasons``: every reason it can reject a row for, in order of
precedence. The order of the declared stages and of their reasons is the waterfall's order,
the order of a reject's ``reasons`` list and which one is its ``reason``: nothing else lists
them.

Each also declares ``columns``, the columns it adds or replaces; the runner refuses a stage
that returns another.

* :class:`RowStage`: a pure function over an Arrow batch (normalize, rules, language id);
  ``setup()`` runs once per worker (load a model), ``apply`` scores then decides.
* :class:`CorpusStage`: a decision that needs the whole corpus (exact dedup, the alignment
  model and its calibration, a quarantine list): ``partial`` per unit in the score step →
  ``combine`` over all units' partials (itself as tasks on the executor, so that it runs
  distributed too) → ``apply`` per unit in the decide step, given the combined state. Both
  per-unit calls get the unit's rows as :data:`UnitRows`, slice by slice, so that a worker
  never holds a unit's rows at once (a unit is up to 131,072 rows).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

import numpy as np
import pyarrow as pa

from spr_data.arrays import joined
from spr_data.schema import ID

__all__ = ["Batch", "CombineContext", "CorpusStage", "RowStage", "Stage", "StageOutput",
           "UnitRows", "stage_of", "unit_ids"]

T = TypeVar("T")
R = TypeVar("R")
#: what a stage's ``apply`` gets: one record batch, or a table (a whole unit's rows)
Batch: TypeAlias = "pa.RecordBatch | pa.Table"
#: what a corpus stage's ``partial`` and ``apply`` get: a unit's rows as record batches in row
#: order, read one at a time; it can be iterated more than once
UnitRows: TypeAlias = "Iterable[pa.RecordBatch]"


@dataclass
class StageOutput:
    """What a stage made of a batch: the columns it adds or replaces (scores, normalized
    text), the rows it rejects per reason (boolean masks, in order of precedence), and, for
    the report, per-unit figures (lists of counts, summed over units)."""

    columns: dict[str, pa.Array] = field(default_factory=dict)
    rejects: list[tuple[str, np.ndarray]] = field(default_factory=list)
    stats: dict[str, list[int]] = field(default_factory=dict)


@runtime_checkable
class RowStage(Protocol):
    """A per-row stage: its decision for a row needs only that row."""

    @property
    def name(self) -> str:
        """What the report and the rejects' ``stage`` column call it."""
        ...

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason it can give, in order of precedence."""
        ...

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column it adds or replaces (the runner refuses any other)."""
        ...

    def setup(self) -> None:
        """Once per worker before the first batch: load what is costly to load. A stage that
        loads much may also have ``release()``: called in each worker when its score step is
        over (the worker goes on to the combine and decide steps), to let go of it."""
        ...

    def apply(self, batch: Batch, rejected: np.ndarray | None = None) -> StageOutput:
        """Score ``batch`` and say which rows to reject and why; ``rejected`` marks rows an
        earlier stage rejected already (a costly stage may skip them)."""
        ...


class CombineContext(Protocol):
    """What a corpus stage's ``combine`` gets from the runner."""

    #: a directory for the stage's files (on the output filesystem; resumable: a file there
    #: that is complete stays valid for a rerun of the same run)
    work: Path
    @property
    def scored(self) -> Sequence[Path]:
        """The per-unit work files of the score step (Arrow IPC), in unit order."""
        ...

    @property
    def partials(self) -> Sequence[Path | None]:
        """This stage's partial of each unit (``.npy``), in unit order."""
        ...

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Run ``fn`` (module-level) over ``tasks`` on the executor."""
        ...

    def rejected_before(self, unit: int, spare: Collection[str] = ()
                        ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Unit ``unit``'s scored rows, which of them a stage declared before this one
        rejects (row stages from the score step, corpus stages by their ``apply``), and which
        of those it rejects for no reason but the ones in ``spare``."""
        ...


@runtime_checkable
class CorpusStage(Protocol):
    """A whole-corpus stage: partial → combine → apply."""

    @property
    def name(self) -> str:
        ...

    @property
    def reasons(self) -> tuple[str, ...]:
        ...

    @property
    def columns(self) -> tuple[str, ...]:
        ...

    def partial(self, rows: UnitRows) -> np.ndarray | None:
        """Per unit in the score step: what ``combine`` needs of the unit's scored ``rows``
        (stored by the runner as one ``.npy`` per unit), or None."""
        ...

    def combine(self, context: CombineContext) -> dict[str, Any]:
        """Once per run: the state ``apply`` needs (JSON; big arrays as files under
        ``context.work``, named in it)."""
        ...

    def apply(self, rows: UnitRows, state: dict[str, Any],
              rejected: np.ndarray) -> StageOutput:
        """Per unit in the decide step: the decision for the unit's ``rows`` (ids included)
        given the combined ``state``; ``rejected`` marks rows rejected before. Columns and
        masks cover the whole unit."""
        ...


Stage = RowStage | CorpusStage


def unit_ids(rows: UnitRows) -> np.ndarray:
    """The ids of a unit's rows, in order (8 bytes a row: a corpus stage may hold them)."""
    return joined([np.asarray(batch.column(ID).to_numpy(), np.uint64) for batch in rows],
                  np.uint64)


def stage_of(stages: Sequence[Stage]) -> dict[str, str]:
    """Each declared reason's stage name."""
    return {reason: stage.name for stage in stages for reason in stage.reasons}
