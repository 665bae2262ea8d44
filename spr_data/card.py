"""``README.md``: the dataset card that makes a dataset directory open as exactly its rows.

Hugging Face ``datasets`` reads a directory's ``README.md`` YAML ``configs`` instead of guessing
which files are data: the default config names the row shards, a second config (``rejects``)
the reject shards. Without it, ``datasets.load_dataset(DIR)`` would read ``manifest.json``, or
mix rejected rows into the kept ones. The card lists the manifest's shard files by name (no
globs), so it says exactly what the manifest says.
"""

from __future__ import annotations

import json
from pathlib import Path

from spr_data.fsio import atomic_write_bytes
from spr_data.manifest import Manifest

__all__ = ["CARD_NAME", "REJECTS_CONFIG", "card_text", "is_card", "write_card"]

CARD_NAME = "README.md"
#: the Hugging Face config name of the rejected rows: ``load_dataset(DIR, "rejects")``
REJECTS_CONFIG = "rejects"
#: the card's second line: how a README.md that spr-data wrote is told from a user's own
_MARK = "# spr-data dataset card: rewritten with the manifest; do not edit"


def _config(name: str, files: list[str], *, default: bool) -> list[str]:
    lines = [f"- config_name: {name}"]
    if default:
        lines.append("  default: true")
    lines += ["  data_files:", "  - split: train", "    path:"]
    # JSON strings are valid YAML scalars: any file name is quoted safely
    lines += [f"    - {json.dumps(f, ensure_ascii=False)}" for f in files]
    return lines


def card_text(manifest: Manifest, rejects: Manifest | None = None) -> str:
    """The card of a dataset whose manifest is ``manifest``; ``rejects`` is the manifest of
    the rejects dataset beside it (in ``manifest.rejects_dir``), if any."""
    configs: list[str] = []
    if manifest.shards:
        configs += _config("default", [s.file for s in manifest.shards], default=True)
    n_rejects = 0
    if rejects is not None and manifest.rejects_dir and rejects.shards:
        n_rejects = rejects.rows
        configs += _config(REJECTS_CONFIG, [f"{manifest.rejects_dir}/{s.file}"
                                            for s in rejects.shards], default=not configs)
    langs = "-".join(manifest.langs) or "no languages"
    what = "rejected rows" if manifest.role == "rejects" else "rows"
    body = [
        f"# spr-data {manifest.kind} dataset ({langs}): {manifest.rows:,} {what}",
        "",
        "Written by spr-data beside `manifest.json` (the source of truth: shards, row counts,",
        "hashes, lineage). The `configs` above make `datasets.load_dataset(\"DIR\")` read exactly",
        "the row shards" + (f", and `load_dataset(\"DIR\", \"{REJECTS_CONFIG}\")` the "
                            f"{n_rejects:,} rejected rows with their `reason`." if n_rejects
                            else "."),
        "Open it with `spr_data.open_dataset(\"DIR\")` (memory-mapped), or see the README of",
        "spr-data, section \"The dataset directory\", for polars, pyarrow and duckdb.",
    ]
    if manifest.rejects_dir and not n_rejects:
        body.append(f"No row was rejected: `{manifest.rejects_dir}/` holds no shard.")
    if not manifest.shards:
        body.append("The dataset holds no rows, so it has no data files to load.")
    head = ["---", _MARK]
    head += ["configs:", *configs] if configs else []
    return "\n".join([*head, "---", *body]) + "\n"


def write_card(directory: Path, manifest: Manifest, rejects: Manifest | None = None, *,
               tag: str | None = None) -> None:
    """Atomically write ``directory/README.md`` (before the manifest: the manifest is last;
    ``tag``: the run's token for the temp name)."""
    atomic_write_bytes(directory / CARD_NAME, card_text(manifest, rejects).encode("utf-8"),
                       tag=tag)


def is_card(path: Path) -> bool:
    """Whether ``path`` is a card spr-data wrote (an overwrite replaces only such a README)."""
    try:
        with open(path, "rb") as f:
            return f.read(200).startswith(f"---\n{_MARK}\n".encode())
    except OSError:
        return False
