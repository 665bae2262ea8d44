"""Print the clean quality table: per injected junk kind, the recall on each real corpus,
and the share of real pairs rejected (with the reasons), as in the README.

    python benchmarks/quality_table.py [--corpora ../shared/corpora]

Uses the same injection and corpora as ``tests/test_clean_quality.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spr_data.testing import corpora_dir  # noqa: E402
from tests.junk import INJECTORS  # noqa: E402
from tests.test_clean_quality import CORPORA, PER_KIND, ntrex, run_quality  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpora", type=Path, default=None,
                        help="shared/corpora (default: $SPR_DATA_CORPORA or ../shared/corpora)")
    args = parser.parse_args()
    args.corpora = corpora_dir(args.corpora)
    results = {}
    for name, (load, langs, other) in CORPORA.items():
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = run_quality(load(args.corpora), langs, ntrex(args.corpora, other),
                                        Path(tmp))
    names = list(results)
    print(f"recall per junk kind ({PER_KIND} injected per kind and corpus)\n")
    print("| junk kind | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for kind in INJECTORS:
        print(f"| {kind} | " + " | ".join(f"{results[n].recall[kind]:.2f}" for n in names)
              + " |")
    print("| **real pairs rejected** | "
          + " | ".join(f"{results[n].real_rejected:.2%}" for n in names) + " |")
    print("\nper first reason: rejected rows that were injected junk / real pairs "
          "(precision = junk share)\n")
    reasons = sorted({r for q in results.values()
                      for r in (*q.junk_by_reason, *q.real_by_reason)})
    print("| reason | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for reason in reasons:
        cells = []
        for n in names:
            junk, real = results[n].junk_by_reason[reason], results[n].real_by_reason[reason]
            cells.append(f"{junk} / {real} ({junk / (junk + real):.2f})" if junk + real else "")
        print(f"| `{reason}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
