"""The ``spr-data`` command (and ``python -m spr_data``).

Its imports (typer, rich, then each command's own) take about a second; a Ctrl-C in that
second is reported like one at any other time — one line, exit 130 — not as a traceback.
"""

from __future__ import annotations

import signal
import sys

from spr_data.errors import interrupted


def main() -> None:
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    try:
        from spr_data.cli import app
    except KeyboardInterrupt:
        sys.stderr.write(f"error: {interrupted(command)}\n")
        raise SystemExit(128 + signal.SIGINT) from None
    try:
        app()
    except KeyboardInterrupt:  # between the imports and a command's own handler
        sys.stderr.write(f"error: {interrupted(command)}\n")
        raise SystemExit(128 + signal.SIGINT) from None


if __name__ == "__main__":
    main()
