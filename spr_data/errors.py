"""The exceptions spr-data raises on purpose.

Every message says what was expected, what was found, and what to do next, so the CLI can
print it as one line. ``exit_code`` is what the CLI exits with.
"""

from __future__ import annotations

__all__ = [
    "RESUMABLE",
    "DataLossError",
    "DatasetError",
    "InputError",
    "LockError",
    "OutputError",
    "ReadError",
    "SprDataError",
    "interrupted",
]


class SprDataError(Exception):
    """Base class of the errors spr-data reports as one line instead of a traceback."""

    exit_code: int = 1


class InputError(SprDataError):
    """Bad input or bad usage: a missing or malformed file, options that do not fit."""

    exit_code = 2


class DatasetError(SprDataError):
    """A dataset directory that is not a valid spr-data dataset (no or malformed manifest)."""

    exit_code = 2


class OutputError(SprDataError):
    """The output could not be written: unwritable directory, full disk, existing dataset."""

    exit_code = 1


class LockError(OutputError):
    """The output directory is in use by another run (or cannot be locked): a usage error,
    the run did nothing."""

    exit_code = 2


class ReadError(SprDataError):
    """Reading failed for a reason outside the data: retries ran out on a network fault, or
    the server refused the connection."""

    exit_code = 1


class DataLossError(SprDataError):
    """A run would lose most of its rows for one reason — every record of an input rejected
    by ``ingest``, or more than the recipe's ``max_reason_share`` by one reason in ``clean`` —
    which nearly always means the options do not fit the data (a language-code typo, the
    wrong keys). Nothing is published; the message names the reason and a sample."""

    exit_code = 1


#: the commands whose work a rerun takes up where an interrupted run stopped
RESUMABLE = ("clean", "tokenize")


def interrupted(command: str | None) -> str:
    """The line an interrupted command ends with: a rerun resumes it, or starts again."""
    again = "resume" if command in RESUMABLE else "start again"
    return f"interrupted; rerun the same command to {again}"
