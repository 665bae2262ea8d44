"""The README's set-up commands, as written, for ``.ci/run`` and ``tests/test_setup.py``.

``.ci/run`` runs exactly these lines (so CI and the README cannot drift apart):
``python3 tools/setup_commands.py 2`` prints the second one. Standard library only: it runs
before any virtual environment exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["setup_commands"]

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Set-up"


def setup_commands(readme: Path = README) -> list[str]:
    """The lines of the first ```bash block under the "## Set-up" heading."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        raise SystemExit(f"{readme}: no {SECTION!r} section")
    fence = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "```bash"),
                 None)
    if fence is None or any(lines[i].startswith("## ") for i in range(start + 1, fence)):
        raise SystemExit(f"{readme}: no ```bash block in the {SECTION!r} section")
    block: list[str] = []
    for line in lines[fence + 1:]:
        if line.strip() == "```":
            return [b for b in block if b.strip()]
        block.append(line)
    raise SystemExit(f"{readme}: the set-up block is not closed")


def main(argv: list[str]) -> int:
    commands = setup_commands()
    if len(argv) != 1 or not argv[0].isdigit() or not 1 <= int(argv[0]) <= len(commands):
        print(f"usage: setup_commands.py N (1..{len(commands)})", file=sys.stderr)
        return 2
    print(commands[int(argv[0]) - 1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
