"""The output directory of a stage: what may be in it, and how it is made ready or cleared."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from spr_data.card import CARD_NAME, is_card, write_card
from spr_data.errors import DatasetError, OutputError
from spr_data.fsio import (
    TMP_SUFFIX,
    atomic_write_bytes,
    fsync_path,
    is_token,
    os_error_message,
    temp_token,
)
from spr_data.lock import LOCK_NAME, OutputLock, output_lock
from spr_data.manifest import MANIFEST_NAME, Manifest, read_manifest, write_manifest

__all__ = [
    "CARD_NAME",
    "EXTRA_FILES",
    "REJECTS_DIR",
    "WORK_DIR",
    "OutputLock",
    "check_run",
    "claim",
    "claimed",
    "is_stage_output",
    "output_lock",
    "prepare_output",
    "publish",
    "remove_outputs",
    "retire_replaced",
    "temp_tag",
]

#: Where the rejected rows of a dataset go. The leading ``_`` makes ``pyarrow.dataset`` and
#: Hugging Face ``datasets`` skip it when they discover a directory's files (and the reject
#: shards' own suffix keeps ``**/*.arrow`` globs off them, see ``writer.shard_name``). Datasets
#: written before this read on: readers follow the manifest's ``rejects_dir`` (``rejects``).
REJECTS_DIR = "_rejects"
WORK_DIR = ".work"
_OWNED = {REJECTS_DIR, MANIFEST_NAME, WORK_DIR, CARD_NAME, "report.json", "report.html",
          "align_model.npz"}
#: files a stage writes beside its manifest (the dataset card; clean's report and model)
EXTRA_FILES = (CARD_NAME, "report.json", "report.html", "align_model.npz")
_OUTPUTS = "outputs"
#: in the work state: the files of the dataset an ``overwrite`` run replaces, which stay in
#: place (and readable) until the new dataset is published (:func:`retire_replaced`)
_REPLACED = "replaced"
#: in the work state: one empty file per token a process of the run names its temp files with
_TAGS = "tags"
#: (pid, out) → the token that process uses there (its record is checked on each use)
_tags_made: dict[tuple[int, str], str] = {}


def is_stage_output(name: str) -> bool:
    """Names that spr-data stages write into their output directory (the kinds of file; what
    a run may delete is only what it recorded in its work state, see :func:`claim`)."""
    return name in _OWNED or name.startswith("shard-") or name.endswith(TMP_SUFFIX)


def claim(out: Path, *names: str) -> None:
    """Record in the run's work state that it is about to write ``names`` (paths relative to
    ``out``; a trailing ``/`` names a directory it creates). Called before a file is created,
    so a killed run's leftovers are known by name, and only those are ever removed."""
    work = out / WORK_DIR
    try:
        work.mkdir(exist_ok=True)
        with open(work / _OUTPUTS, "a", encoding="utf-8") as f:
            f.write("".join(n + "\n" for n in names))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise OutputError(os_error_message(exc, work / _OUTPUTS)) from exc


def temp_tag(out: Path) -> str:
    """This process's token for the temp files it makes in ``out`` (and in the directories
    the run makes inside it), recorded in the run's work state (``.work/tags/TOKEN``) before
    its first use: what proves a leftover temp file ``NAME.PID-TOKEN.tmp`` the run's own.
    Each process of a run (the workers too) records its own; a new one when the record is
    gone (a new run)."""
    key = (os.getpid(), os.fspath(out))
    records = Path(out) / WORK_DIR / _TAGS
    tag = _tags_made.get(key)
    if tag is not None and (records / tag).is_file():
        return tag
    tag = secrets.token_hex(4)
    try:
        records.mkdir(parents=True, exist_ok=True)
        os.close(os.open(records / tag, os.O_WRONLY | os.O_CREAT, 0o644))
        fsync_path(records)
        fsync_path(records.parent)
    except OSError as exc:
        raise OutputError(os_error_message(exc, records / tag)) from exc
    _tags_made[key] = tag
    return tag


def _run_tags(out: Path) -> set[str]:
    """The tokens the run (or killed run) working in ``out`` recorded for its temp files."""
    try:
        return {p.name for p in (out / WORK_DIR / _TAGS).iterdir() if is_token(p.name)}
    except OSError:
        return set()


def _is_run_temp(name: str, final: str, tags: set[str]) -> bool:
    """Whether ``name`` is a temp file the run made for ``final``: its form, and a token the
    run recorded (a user's ``shard-00000.arrow.1-abcdef01.tmp`` has the form only)."""
    return temp_token(name, final) in tags


def claimed(out: Path) -> list[str]:
    """What the run (or a killed run) working in ``out`` recorded that it writes."""
    return _names_in(out / WORK_DIR / _OUTPUTS)


def _names_in(record: Path) -> list[str]:
    """The paths a work-state file lists, one a line (none that would leave ``out``)."""
    try:
        text = record.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    names = []
    for line in text.splitlines():
        parts = Path(line.rstrip("/")).parts
        if line and ".." not in parts and not Path(line).is_absolute():  # never outside out
            names.append(line)
    return list(dict.fromkeys(names))


def _dataset_files(out: Path) -> list[str]:
    """The files of the dataset in ``out`` as its manifests list them (the replaced dataset on
    ``--overwrite``); a manifest that cannot be read is refused rather than guessed at."""
    try:
        manifest = read_manifest(out)
    except DatasetError as exc:
        raise OutputError(f"{out} holds a manifest that cannot be read, so which files are the "
                          f"dataset's is unknown ({exc}); remove the directory yourself or "
                          "choose another --out") from None
    names = [MANIFEST_NAME, *EXTRA_FILES, *(s.file for s in manifest.shards)]
    if (out / CARD_NAME).exists() and not is_card(out / CARD_NAME):
        names.remove(CARD_NAME)  # a README.md of the user's own, beside an older dataset
    if manifest.rejects_dir and (out / manifest.rejects_dir / MANIFEST_NAME).is_file():
        rejects = _dataset_files(out / manifest.rejects_dir)
        names += [f"{manifest.rejects_dir}/{n}" for n in rejects] + [manifest.rejects_dir + "/"]
    return names


def _strangers(out: Path, owned: list[str], tags: set[str]) -> list[str]:
    """Entries of ``out`` (and of the directories spr-data owns in it) that no run wrote."""
    files = {n for n in owned if not n.endswith("/")}
    dirs = {n.rstrip("/") for n in owned if n.endswith("/")}
    found = []

    def walk(directory: Path, prefix: str) -> None:
        for p in directory.iterdir():
            rel = prefix + p.name
            if rel in (LOCK_NAME, WORK_DIR) or rel in files:
                continue
            if rel in dirs and p.is_dir() and not p.is_symlink():
                walk(p, rel + "/")
                continue
            if any(_is_run_temp(p.name, Path(f).name, tags) and str(Path(f).parent) == str(
                    Path(rel).parent) for f in files):
                continue
            found.append(rel)

    walk(out, "")
    return sorted(found)


def prepare_output(out: Path, *, overwrite: bool, resume: bool = False,
                   option: str = "--out") -> bool:
    """Make ``out`` ready for a stage (call it holding :func:`output_lock`); return whether it
    was created (always False now: the lock creates the directory).

    An existing dataset is replaced only with ``overwrite``, and then only the files its
    manifests list. It stays in place, readable, while the run works (the run writes under
    its work directory): a run that fails or is stopped leaves it as it was. Its files are
    recorded in the work state and removed, manifest first, only when the new dataset is
    published (:func:`retire_replaced`). Leftovers of an unfinished run are the files its work
    state recorded: cleared, unless ``resume`` and the run is resumable (an unfinished
    ``overwrite`` run resumes without ``overwrite`` too). Anything else in ``out`` — a file
    spr-data did not write — is refused and left alone: a run never deletes a file it did not
    write.
    """
    try:
        if out.exists() and not out.is_dir():
            raise OutputError(f"{option} {out} is a file; choose a directory")
        _refuse_rejects_dir(out, option)
        has_manifest = (out / MANIFEST_NAME).exists()
        work = out / WORK_DIR
        if not has_manifest and _names_in(work / _REPLACED):
            retire_replaced(out)  # a run killed while it removed the dataset it replaces
        resuming = resume and (work / "run.json").is_file()
        if has_manifest and not overwrite and not (resuming and _names_in(work / _REPLACED)):
            raise OutputError(f"{out} already holds a dataset; pass overwrite=True to replace it")
        if work.exists() and not (work.is_dir() and (not any(work.iterdir()) or any(
                (work / n).exists() for n in ("run.json", _OUTPUTS, _TAGS, _REPLACED)))):
            raise OutputError(f"{work} was not made by spr-data; move it away or choose "
                              f"another {option}")
        old = _dataset_files(out) if has_manifest else []
        run_files = claimed(out)
        tags = _run_tags(out)
        strangers = _strangers(out, old + run_files, tags) if out.is_dir() else []
        if strangers:
            raise OutputError(
                f"{out} is not empty and is not an spr-data dataset (it holds "
                f"{', '.join(strangers[:3])}, which spr-data did not write); choose a new or "
                "empty directory, or move those files away")
        if not (resuming and not overwrite):
            remove_outputs(out, keep=old)
        if has_manifest:
            work.mkdir(exist_ok=True)
            atomic_write_bytes(work / _REPLACED, "".join(n + "\n" for n in old).encode())
        return False
    except OSError as exc:
        raise OutputError(os_error_message(exc, out, option)) from exc


def _refuse_rejects_dir(out: Path, option: str) -> None:
    """Refuse the rejects directory of the dataset ``out`` lies in: an output there (even with
    ``overwrite``) would replace that dataset's rejected rows and break its accounting."""
    parent = out.resolve().parent
    if not (parent / MANIFEST_NAME).is_file():
        return
    try:
        rejects_dir = read_manifest(parent).rejects_dir
    except DatasetError:
        return
    if rejects_dir and (parent / rejects_dir).resolve() == out.resolve():
        raise OutputError(f"{option} {out} is where the dataset {parent} keeps its rejected "
                          f"rows; choose a directory of its own")


def retire_replaced(out: Path) -> None:
    """Remove the dataset an ``overwrite`` run replaces (its manifest first, then the files
    it listed), if it is still there: called just before the new dataset's files move into
    ``out``. Only from then on is ``out`` without a dataset, for as long as the moves take."""
    names = _names_in(out / WORK_DIR / _REPLACED)
    if not names:
        return
    try:
        _remove(out, names, _run_tags(out))
        (out / WORK_DIR / _REPLACED).unlink(missing_ok=True)
        fsync_path(out)
    except OSError as exc:
        raise OutputError(os_error_message(exc, out)) from exc


def _remove(out: Path, names: list[str], tags: set[str]) -> None:
    """Remove these files of ``out`` (and the temp files the run made for them, by its
    recorded ``tags``); then the listed directories, deepest first, if that left them
    empty."""
    for name in names:
        if name.endswith("/"):
            continue
        path = out / name
        path.unlink(missing_ok=True)
        if tags and path.parent.is_dir():
            for p in path.parent.iterdir():
                if _is_run_temp(p.name, path.name, tags):
                    p.unlink(missing_ok=True)
    for name in sorted((n for n in names if n.endswith("/")), key=len, reverse=True):
        with contextlib.suppress(OSError):  # not empty: something in it is not ours
            (out / name).rmdir()


def remove_outputs(out: Path, *, created: bool = False, keep: list[str] | None = None) -> None:
    """Remove what the run working in ``out`` recorded that it writes, and its work state;
    never the files of a dataset it was to replace and has not removed yet (recorded by
    :func:`prepare_output`), nor those of ``keep``. (``created`` is kept for callers; the
    directory itself goes with the lock.)"""
    if not out.is_dir():
        return
    spared = {*(keep or ()), *_names_in(out / WORK_DIR / _REPLACED)}
    _remove(out, [n for n in claimed(out) if n not in spared], _run_tags(out))
    shutil.rmtree(out / WORK_DIR, ignore_errors=True)


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
                    f"{work.parent} holds an unfinished run with another {key} (that run's "
                    f"{found.get(key)}, this one's {expected}); rerun with the same {key} to "
                    "resume it, or pass overwrite=True to start over")
        return
    work.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_file, json.dumps(identity, indent=2).encode())


def _remove_dead_temps(out: Path) -> None:
    """Remove the temp files of the run's outputs: at publish time no process renames them any
    more. They are left by a worker killed mid-write whose task then ran again (a Ray retry,
    a resumed run) and wrote the file under a new temp name. Only temp files named with a
    token the run recorded: a file of the same form that the run did not make stays."""
    tags = _run_tags(out)
    finals: dict[Path, set[str]] = {}
    for name in claimed(out):
        if not name.endswith("/"):
            finals.setdefault((out / name).parent, set()).add(Path(name).name)
    for directory, names in finals.items():
        with contextlib.suppress(OSError):
            for p in directory.iterdir():
                final = p.name.rsplit(".", 2)[0]  # NAME.PID-TOKEN.tmp
                if final in names and _is_run_temp(p.name, final, tags):
                    p.unlink(missing_ok=True)


def publish(out: Path, manifest: Manifest, *, rejects: Manifest | None = None) -> None:
    """Publish a finished stage's dataset: the rejects' card and manifest (when ``rejects`` is
    given, into ``out / manifest.rejects_dir``), then the dataset card and, last, the manifest
    of ``out``. The cards are claimed first, like every file a run writes."""
    rejects_dir = manifest.rejects_dir if rejects is not None else None
    names = [CARD_NAME, MANIFEST_NAME]
    if rejects_dir:
        names = [rejects_dir + "/", f"{rejects_dir}/{CARD_NAME}", f"{rejects_dir}/{MANIFEST_NAME}",
                 *names]
    claim(out, *names)
    _remove_dead_temps(out)
    tag = temp_tag(out)
    if rejects is not None and rejects_dir:
        (out / rejects_dir).mkdir(exist_ok=True)
        write_card(out / rejects_dir, rejects, tag=tag)
        write_manifest(out / rejects_dir, rejects, tag=tag)
    write_card(out, manifest, rejects, tag=tag)
    write_manifest(out, manifest, tag=tag)
