"""Units of work of the shard commands (``clean``, ``tokenize``): their size, and the one rule
a resumed run follows for a unit a killed run finished.

A unit is a slice of the input's rows and becomes one output shard (and, for ``clean``, one
reject shard). When its outputs are written (each atomically), a *marker* ``done-NNNNN.json``
in the run's work directory records the unit's stats and every output file with its size. A
resumed run trusts a marker only while each of those files is still there at that size: a
shard removed or cut short since (a full disk, a hand) is made again, whichever command wrote
it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spr_data.fsio import atomic_write_bytes

__all__ = ["equal_parts", "finished_unit", "mark_unit_finished", "unit_rows"]

_MIN_UNIT_ROWS = 1 << 16
#: at most: a worker's decide step holds a unit's kept rows as one record batch (one shard),
#: about 100 MB at 312,500 rows of two joined sentences; at 5M pairs (units of 524,288 rows at
#: most then) the process tree peaked at 1,018 MB in that step, with 131,072 at 941 MB (in the
#: score step), the same wall time
_MAX_UNIT_ROWS = 1 << 17
#: the marker's key for the outputs it vouches for: file name (relative to the output
#: directory) → bytes
OUTPUTS = "outputs"


#: units come in multiples of this many, of equal size: a single-shard input of 100k rows was
#: one unit of 65,536 and one of 34,464, and one of 2 workers idled through a third of each
#: step that reads every row (score, decide); a 30k one was one unit, one worker
_UNIT_MULTIPLE = 2
#: an input this small is one unit (a shard of a few hundred rows helps no one)
_ONE_UNIT_ROWS = 1 << 13


def unit_rows(rows: int) -> int:
    """Rows per unit of work (and per output shard): a function of the input size alone, so
    the output is the same for any number of workers; small enough to bound each worker's
    memory and to spread a corpus over at least ~16 tasks, and even, so that 2 workers end
    a step together (``_UNIT_MULTIPLE``)."""
    if rows <= _ONE_UNIT_ROWS:
        return max(rows, 1)
    most = min(max(-(-rows // 16), _MIN_UNIT_ROWS), _MAX_UNIT_ROWS)
    return equal_parts(rows, most, multiple=_UNIT_MULTIPLE)


def equal_parts(rows: int, most: int, *, multiple: int = 1) -> int:
    """The size of the fewest parts of about equal size (a multiple of ``multiple`` of them;
    the last shorter by fewer rows than there are parts) that cut ``rows`` into parts of
    at most ``most``: units of work here, a unit's slices in ``clean``."""
    parts = -(-max(rows, 1) // most)
    parts = -(-parts // multiple) * multiple
    return max(1, -(-rows // parts))


def _marker(work: Path, index: int) -> Path:
    return work / f"done-{index:05d}.json"


def finished_unit(work: str | Path, out: str | Path, index: int) -> dict[str, Any] | None:
    """The stats of unit ``index`` if a run already finished it and its outputs are intact
    (each file its marker names, at the recorded size), else ``None``; a marker that no longer
    holds is removed, so the unit is done again."""
    marker = _marker(Path(work), index)
    if not marker.exists():
        return None
    try:
        done = json.loads(marker.read_text())
        outputs = done[OUTPUTS]
        intact = isinstance(outputs, dict) and all(
            (path := Path(out) / name).is_file() and path.stat().st_size == size
            for name, size in outputs.items())
    except (OSError, ValueError, KeyError, TypeError):  # a marker of another version, or torn
        intact = False
    if not intact:
        marker.unlink()
        return None
    result: dict[str, Any] = done
    return result


def mark_unit_finished(work: str | Path, out: str | Path, index: int, stats: dict[str, Any],
                       outputs: list[Path]) -> dict[str, Any]:
    """Write unit ``index``'s marker once its ``outputs`` (files under ``out``) are written:
    its stats and each output's size. Returns what the marker holds."""
    root = Path(out)
    done = {**stats, OUTPUTS: {str(path.relative_to(root)): path.stat().st_size
                               for path in outputs}}
    atomic_write_bytes(_marker(Path(work), index), json.dumps(done).encode())
    return done
