"""How the CLI shows results to a person: values summarized to a line, and tables that fit
the terminal or give way to a vertical layout.

A rich table squeezed into 80 columns folds every cell into single letters (17 columns of a
cleaned dataset, a list of 300 token ids, a reject's raw bytes). So nothing here lets rich
fold: each table is measured at its natural width first; if it does not fit, it tries its
short headers, and then lays each row out vertically, one ``name value`` per line. ``--json``
never goes through this module: machines get every value in full.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

__all__ = [
    "Column",
    "fertility_tables",
    "fit",
    "grouped_warnings",
    "records",
    "summarize",
    "table",
]

#: Narrowest share of the line a text column gets in a table before rows go vertical.
MIN_TEXT_WIDTH = 16
_GAP = 2  # cells between two columns (padding 1 + the box's blank vertical)
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells (CJK characters take two), with ``…``."""
    if cell_len(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = cell_len(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def _escape(text: str) -> str:
    """Control characters shown as escapes, so one value stays on one line."""
    if text.isprintable():
        return text
    return "".join(_ESCAPES.get(ch, f"\\x{ord(ch):02x}" if not ch.isprintable() and ch != " "
                                else ch) for ch in text)


def summarize(value: Any, width: int = 60, *, name: str = "") -> str:
    """One line for a value of any column, at most ``width`` cells: text cut with ``…``,
    ``[12 ids: 5, 17, 893, …]`` for a token-id list, ``<bytes 41> …`` for raw bytes,
    ``input=0 line=5`` for a struct, floats to four significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        head = f"<bytes {len(value)}>"
        rest = width - len(head) - 1
        if rest < 4 or not value:
            return head
        return f"{head} {fit(_escape(value.decode('utf-8', 'backslashreplace')), rest)}"
    if isinstance(value, str):
        return fit(_escape(value), width)
    if isinstance(value, dict):
        return fit(" ".join(f"{k}={summarize(v, width, name=k)}" for k, v in value.items()),
                   width)
    if isinstance(value, list | tuple):
        noun = "ids" if name.endswith("ids") else "items"
        head = f"[{len(value)} {noun}"
        if not value:
            return head + "]"
        items = [summarize(v, width, name=name) for v in value]
        shown: list[str] = []
        for i, item in enumerate(items):
            more = ", …" if i + 1 < len(items) else ""
            text = f"{head}: {', '.join([*shown, item])}{more}]"
            if cell_len(text) > width and shown:
                break
            shown.append(item)
        if len(shown) == len(items) and cell_len(f"[{', '.join(items)}]") <= width:
            return f"[{', '.join(items)}]"  # all of it: no count needed
        more = ", …" if len(shown) < len(items) else ""
        return fit(f"{head}: {', '.join(shown)}{more}]", width)
    return fit(_escape(str(value)), width)


@dataclass(frozen=True)
class Column:
    """A table column: its header, a shorter one for narrow terminals, its alignment."""

    header: str
    short: str = ""
    justify: str = "left"


def _render_width(renderable: RenderableType) -> int:
    probe = Console(file=io.StringIO(), width=10_000, color_system=None, highlight=False)
    probe.print(renderable)
    return max((cell_len(line) for line in probe.file.getvalue().splitlines()),  # type: ignore[attr-defined]
               default=0)


def _table(title: str | None, headers: Sequence[str], columns: Sequence[Column],
           rows: Sequence[Sequence[str]]) -> RenderableType:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
              header_style="bold")
    for header, column in zip(headers, columns, strict=True):
        t.add_column(header, justify=column.justify, no_wrap=True,  # type: ignore[arg-type]
                     overflow="ellipsis")
    for row in rows:
        t.add_row(*row)
    # the title on its own line: a table's title is padded to the table's width
    return t if title is None else Group(Text(title, style="italic"), t)


def _wrap_items(items: Iterable[str], width: int, indent: str) -> list[str]:
    """``items`` joined by `` · `` into lines of at most ``width`` cells, never inside one."""
    lines: list[str] = []
    line = ""
    for item in items:
        candidate = f"{line} · {item}" if line else item
        if line and cell_len(indent + candidate) > width:
            lines.append(indent + line)
            line = item
        else:
            line = candidate
    if line:
        lines.append(indent + line)
    return lines


def table(title: str | None, columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
          width: int) -> list[RenderableType]:
    """A table at ``width`` columns without folding a cell: full headers if it fits, else the
    short ones (with a legend), else each row on its own lines (first cell, then the rest as
    ``header value`` items)."""
    keep = [i for i, c in enumerate(columns) if i == 0 or any(r[i] for r in rows)]
    columns = [columns[i] for i in keep]
    rows = [[r[i] for i in keep] for r in rows]
    full = _table(title, [c.header for c in columns], columns, rows)
    if _render_width(full) <= width:
        return [full]
    shorts = [c.short or c.header for c in columns]
    short = _table(title, shorts, columns, rows)
    if _render_width(short) <= width:
        legend = [f"{s}: {c.header}" for s, c in zip(shorts, columns, strict=True)
                  if s != c.header]
        return [short, Text("\n".join(_wrap_items(legend, width, "  ")), style="dim")]
    out: list[RenderableType] = []
    if title:
        out.append(Text(title, style="italic"))
    for row in rows:
        items = [f"{c.header} {v}" for c, v in zip(columns[1:], row[1:], strict=True) if v]
        out.append(Text("\n".join([fit(row[0], width), *_wrap_items(items, width, "    ")])))
    return out


def records(title: str, rows: Sequence[dict[str, Any]], *, width: int) -> list[RenderableType]:
    """Dataset rows: a table when its text columns get at least ``MIN_TEXT_WIDTH`` cells each,
    else one block per row with a ``name  value`` line per column (values cut to the line)."""
    if not rows:
        return []
    names = list(rows[0])
    texty = [n for n in names if any(isinstance(r.get(n), str | bytes | list | tuple | dict)
                                     for r in rows)]
    fixed = {n: max(cell_len(n), *(cell_len(summarize(r.get(n), name=n)) for r in rows))
             for n in names if n not in texty}
    room = width - sum(fixed.values()) - _GAP * (len(names) - 1)
    if room >= MIN_TEXT_WIDTH * len(texty):
        budgets = dict.fromkeys(texty, room // max(len(texty), 1))
        # a text column narrower than its share gives the rest to the others
        natural = {n: max(cell_len(n), *(cell_len(summarize(r.get(n), 10_000, name=n))
                                         for r in rows)) for n in texty}
        spare = sum(max(budgets[n] - natural[n], 0) for n in texty)
        wide = [n for n in texty if natural[n] > budgets[n]]
        for n in texty:
            budgets[n] = min(natural[n], budgets[n]) if n not in wide \
                else budgets[n] + spare // len(wide)
        cells = [[summarize(r.get(n), budgets.get(n, 10_000), name=n) for n in names]
                 for r in rows]
        justify = ["left" if n in texty else "right" for n in names]
        return [_table(title, names, [Column(n, justify=j) for n, j in zip(names, justify,
                                                                           strict=True)],
                       cells)]
    label = max(cell_len(n) for n in names)
    value_width = max(width - label - 4, MIN_TEXT_WIDTH)
    out: list[RenderableType] = [Text(title, style="italic")]
    for i, r in enumerate(rows):
        lines = [f"row {i}"]
        lines += [f"  {n:<{label}}  {summarize(r.get(n), value_width, name=n)}" for n in names]
        out.append(Text("\n".join(lines)))
    return out


_FERTILITY_COLUMNS = [
    Column("group"), Column("segments", "segs", "right"),
    Column("chars/token", "c/tok", "right"), Column("bytes/token", "b/tok", "right"),
    Column("tokens/word", "tok/w", "right"), Column("mark-split", "mark", "right"),
    Column("byte-fallback", "bfall", "right"), Column("char share", "char%", "right"),
    Column("token share", "tok%", "right"), Column("parity", "parity", "right"),
]


def fertility_rows(report: dict[str, Any]) -> list[tuple[str, list[Column], list[list[str]]]]:
    """The report's tables: (title, columns, rows) per tokenizer and grouping."""
    tables = []
    for name, data in report["tokenizers"].items():
        for group in ("by_script", "by_lang"):
            rows = [[key, f"{m['segments']:,}", f"{m['chars_per_token']:.2f}",
                     f"{m['bytes_per_token']:.2f}", f"{m['tokens_per_word']:.2f}",
                     f"{m['mark_split_rate']:.1%}", f"{m['byte_fallback_rate']:.1%}",
                     f"{m['char_share']:.1%}", f"{m['token_share']:.1%}",
                     f"{m['parity']:.2f}" if isinstance(m.get("parity"), int | float)
                     else "—" if m.get("parity_note") else ""]
                    for key, m in data[group].items()]
            tables.append((f"{name} — {group.replace('_', ' ')}", _FERTILITY_COLUMNS, rows))
    return tables


def fertility_tables(report: dict[str, Any], *, width: int) -> list[RenderableType]:
    """Every table of the report, each fitted to ``width``."""
    out: list[RenderableType] = []
    for title, columns, rows in fertility_rows(report):
        out += table(title, columns, rows, width=width)
    # why a language has no parity (the same for every tokenizer): inputs that only look
    # multi-parallel (as many lines after --sample) are not compared
    notes = report.get("parity", {}).get("not_parallel", {})
    if notes:
        lines = [f"parity — {lang}: {why}" for lang, why in sorted(notes.items())]
        out.append(Text("\n".join(lines)))  # wrapped to the terminal, never cut
    return out


#: How many of a kind of warning a grouped line names (the worst first).
WORST = 3


def grouped_warnings(report: dict[str, Any]) -> list[str]:
    """One line per tokenizer: for each kind of warning, how many groups it hit and the worst
    few. The full list is the report's ``warnings`` (``--json FILE``)."""
    by_tokenizer: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for w in report.get("warning_details", []):
        by_tokenizer.setdefault(w["tokenizer"], {}).setdefault(w["kind"], []).append(w)
    from spr_data.pipeline import fertility as f

    text: dict[str, Callable[[int], str]] = {
        "pretoken_mark_split": lambda n: f"its pre-tokenizer cuts words at combining marks in "
        f"{_count(n, 'script')} (over {f.MARK_SPLIT_WARN:.0%} of its pieces; keep \\p{{M}} "
        "inside words)",
        "low_chars_per_token": lambda n: f"{_count(n, 'script')} under "
        f"{f.LOW_CHARS_PER_TOKEN:g} characters per token while Latin is over "
        f"{f.HIGH_LATIN_CHARS_PER_TOKEN:g}",
        "balance": lambda n: f"{_count(n, 'language')} whose token share departs from the "
        f"character share by over {f.BALANCE_WARN:.0%}",
    }
    lines = []
    for name, kinds in by_tokenizer.items():
        parts = []
        for kind, found in kinds.items():
            found = sorted(found, key=lambda w: -w["severity"])
            worst = ", ".join(w["short"] for w in found[:WORST])
            more = f", +{len(found) - WORST} more" if len(found) > WORST else ""
            what = text[kind](len(found)) if kind in text \
                else f"{_count(len(found), 'group')} flagged as {kind}"
            parts.append(f"{what} ({worst}{more})")
        lines.append(f"{name}: " + "; ".join(parts))
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
