"""The output directory of a stage: what may be in it, and how it is made ready or cleared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from spr_data.errors import OutputError
from spr_data.fsio import TMP_SUFFIX, atomic_write_bytes, os_error_message
from spr_data.manifest import MANIFEST_NAME

__all__ = [
    "REJECTS_DIR",
    "WORK_DIR",
    "check_run",
    "is_stage_output",
    "prepare_output",
    "remove_outputs",
]

REJECTS_DIR = "rejects"
WORK_DIR = ".work"
_OWNED = {REJECTS_DIR, MANIFEST_NAME, WORK_DIR, "report.json", "align_model.npz"}


def is_stage_output(name: str) -> bool:
    """Names that spr-data stages write into their output directory (and may clear)."""
    return name in _OWNED or name.startswith("shard-") or name.endswith(TMP_SUFFIX)


def prepare_output(out: Path, *, overwrite: bool, resume: bool = False) -> bool:
    """Make ``out`` ready for a stage; return whether this call created it.

    An existing dataset is replaced only with ``overwrite`` (its manifest goes first, so it is
    never half a dataset). Leftovers of an unfinished run are cleared — unless ``resume`` and
    the run left a work directory: then they are what the run resumes from. A directory
    holding anything else is refused.
    """
    try:
        if out.exists() and not out.is_dir():
            raise OutputError(f"--out {out} is a file; choose a directory")
        if (out / MANIFEST_NAME).exists() and not overwrite:
            raise OutputError(f"{out} already holds a dataset; pass --overwrite to replace it")
        if out.is_dir():
            strangers = [p.name for p in out.iterdir() if not is_stage_output(p.name)]
            if strangers:
                raise OutputError(
                    f"{out} is not empty and is not an spr-data dataset (it holds "
                    f"{', '.join(sorted(strangers)[:3])}); choose a new or empty directory"
                )
            (out / MANIFEST_NAME).unlink(missing_ok=True)
            if not (resume and not overwrite and (out / WORK_DIR).is_dir()):
                remove_outputs(out, created=False)
            return False
        out.mkdir(parents=True)
        return True
    except OSError as exc:
        raise OutputError(os_error_message(exc, out)) from exc


def remove_outputs(out: Path, *, created: bool) -> None:
    """Remove what stages wrote in ``out`` (all of ``out`` if this run created it)."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    if not out.is_dir():
        return
    for p in out.iterdir():
        if not is_stage_output(p.name):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def check_run(work: Path, identity: dict[str, Any], *, overwrite: bool) -> None:
    """Record what a resumable run is (inputs, options, version) in ``work/run.json``, or check
    that the unfinished run found there is the same one: resuming another run's work files
    would mix two outputs."""
    run_file = work / "run.json"
    if run_file.exists() and not overwrite:
        found = json.loads(run_file.read_text())
        for key, expected in identity.items():
            if found.get(key) != expected:
                raise OutputError(
                    f"{work.parent} holds an unfinished run with another {key} (expected "
                    f"{expected}, found {found.get(key)}); pass --overwrite to start over")
        return
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_file, json.dumps(identity, indent=2).encode())
