"""``spr-data demo``: the main job, end to end, on the real sample shipped in ``demo_data/``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from spr_data.dataset import open_dataset
from spr_data.errors import OutputError
from spr_data.fsio import os_error_message
from spr_data.outdir import REJECTS_DIR
from spr_data.pipeline.clean import clean
from spr_data.pipeline.ingest import ingest
from spr_data.reader import check_local_output
from spr_data.verify import verify_dataset

__all__ = ["demo_data_dir", "run_demo"]


def demo_data_dir() -> Path:
    """Where the shipped sample files are (inside the installed package)."""
    return Path(str(resources.files("spr_data") / "demo_data"))


def run_demo(
    out: Path | None = None, *, say: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Ingest the sample corpora, verify them, read rows back, clean them; return what
    happened. Without ``out`` the work happens in a temporary directory that is removed at
    the end (every run would otherwise leave one behind)."""
    if out is not None:
        check_local_output(out)
        _check_demo_out(Path(out))
        return _run_demo(Path(out), say=say, kept=True)
    root = Path(tempfile.mkdtemp(prefix="spr-data-demo-"))
    try:
        return _run_demo(root, say=say, kept=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: what a demo writes into ``--out``: a rerun there replaces them, and nothing else is touched
_DEMO_NAMES = frozenset(f"{name}{suffix}" for name in ("tatoeba-eng-cmn", "opennmt-en-de")
                        for suffix in ("", "-clean"))


def _check_demo_out(out: Path) -> None:
    """A new or empty directory, or one an earlier demo wrote; else a clear error (the demo
    replaces its own datasets and must not write among a user's files)."""
    try:
        if out.exists() and not out.is_dir():
            raise OutputError(f"--out {out} is a file; choose a new or empty directory")
        others = sorted(p.name for p in out.iterdir() if p.name not in _DEMO_NAMES) \
            if out.is_dir() else []
        if others:
            raise OutputError(f"--out {out} holds files of its own ({', '.join(others[:3])}"
                              f"{', …' if len(others) > 3 else ''}); the demo writes only into "
                              "a new or empty directory, or one an earlier demo wrote")
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(os_error_message(exc, out)) from exc


def _run_demo(root: Path, *, say: Callable[[str], None] | None, kept: bool) -> dict[str, Any]:
    def tell(text: str) -> None:
        if say is not None:
            say(text)

    data = demo_data_dir()
    root.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, tuple[list[Path], list[str] | None]] = {
        "tatoeba-eng-cmn": ([data / "tatoeba_eng-cmn.sample.tsv"], ["en", "zh"]),
        "opennmt-en-de": ([data / "opennmt_en-de.sample.en", data / "opennmt_en-de.sample.de"],
                          None),  # languages from the file names
    }
    result: dict[str, Any] = {"out": str(root), "kept": kept, "datasets": {}}
    tell(f"spr-data demo → {root}" + ("" if kept else " (temporary)"))
    for name, (inputs, langs) in jobs.items():
        summary = ingest(inputs, root / name, langs=langs, overwrite=True)
        report = verify_dataset(root / name)
        ds = open_dataset(root / name)
        middle = ds[len(ds) // 2]
        rejects = ds.rejects
        first_reject = rejects[0] if rejects is not None and len(rejects) else None
        result["datasets"][name] = {
            **summary.to_json(), "verified": report.ok, "sample": middle,
            "first_reject": None if first_reject is None else {
                "id": first_reject["id"], "reason": first_reject["reason"],
                "origin": first_reject["origin"]},
        }
        tell(f"\n[bold]ingest[/] {' + '.join(p.name for p in inputs)}")
        tell(f"  {summary.records:,} records → {summary.rows:,} rows in {summary.shards} "
             f"shard(s), {sum(summary.rejects.values()):,} rejected {summary.rejects or ''}")
        tell(f"  verify: {'ok' if report.ok else report.all_problems()}")
        sides = [middle[c] for c in ("src", "tgt", "text") if c in middle]
        tell(f"  row {len(ds) // 2} (id {middle['id']}, line {middle['origin']['line']}): "
             + " ||| ".join(sides))
        if first_reject is not None:
            tell(f"  reject id {first_reject['id']} (line {first_reject['origin']['line']}): "
                 f"{first_reject['reason']}")
        cleaned = clean(root / name, root / f"{name}-clean", workers=1, overwrite=True)
        result["datasets"][name]["clean"] = {
            "rows_kept": cleaned.rows_kept, "rows_rejected": cleaned.rows_rejected,
            "by_reason": cleaned.by_reason, "verified": verify_dataset(root / f"{name}-clean").ok}
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(cleaned.by_reason.items(),
                                                          key=lambda kv: -kv[1]))
        tell(f"[bold]clean[/] → {root / f'{name}-clean'}: kept {cleaned.rows_kept:,} of "
             f"{cleaned.rows_in:,}; rejected {reasons or 'none'}")
    if kept:
        tell(f"\nnext: spr-data info {root / 'tatoeba-eng-cmn-clean'}  ·  "
             f"spr-data info {root / 'opennmt-en-de-clean' / REJECTS_DIR}")
    else:
        tell("\nthe temporary directory is removed now; to look around afterwards: "
             "spr-data demo --out DIR, then spr-data info DIR/tatoeba-eng-cmn-clean  ·  "
             f"spr-data info DIR/opennmt-en-de-clean/{REJECTS_DIR}")
    return result
