"""How the CLI shows results to a person: values summarized to a line, tables that fit the
terminal or give way to a vertical layout, and each command's result (``show_*``, printed
through :mod:`spr_data.console`).

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from spr_data import console
from spr_data.outdir import REJECTS_DIR
from spr_data.reader import join_location

if TYPE_CHECKING:
    from spr_data.info import DatasetInfo
    from spr_data.pipeline.audit import AuditReport
    from spr_data.pipeline.clean import CleanReport
    from spr_data.pipeline.ingest import IngestSummary
    from spr_data.pipeline.tokenize import TokenizeReport
    from spr_data.pipeline.train_tokenizer import TrainResult
    from spr_data.verify import VerifyReport

__all__ = [
    "Column",
    "fertility_markdown",
    "fertility_tables",
    "fit",
    "grouped_warnings",
    "records",
    "show_audit",
    "show_clean",
    "show_fertility",
    "show_info",
    "show_ingest",
    "show_tokenize",
    "show_trained_tokenizer",
    "show_verify",
    "summarize",
    "table",
    "warn_clean",
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
    return "".join(_ESCAPES.get(ch, _code_point(ch) if not ch.isprintable() and ch != " "
                                else ch) for ch in text)


def _code_point(ch: str) -> str:
    """A character as its escape: ``\\x1b`` in ASCII, else its code point, ``\\u00a0``,
    ``\\u3000`` or ``\\U000e0001`` (``\\xa0`` and ``\\x3000`` read as bytes)."""
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x80 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


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


# --- each command's result, as a person reads it ---------------------------------------------

def show_ingest(summary: IngestSummary) -> None:
    data = summary.to_json()
    console.out.print(
        f"[bold]{data['out']}[/]: {data['rows']:,} {data['kind']} rows "
        f"({'-'.join(data['langs'])}) in {data['shards']} shard(s), {data['bytes']:,} bytes; "
        f"{data['rejected']:,} of {data['records']:,} records rejected; "
        f"{data['seconds']} s, {data['input_mb_per_s']} MB/s of input")
    if summary.rejects:
        console.out.print(console.table(None, ["reason", "rejected"],
                                        [[k, f"{v:,}"] for k, v in summary.rejects.items()]))


def _share(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage that is never rounded to 100% or 0% while a row
    is missing or there (9,004 of 9,008 is 99.96%, not 100.0%)."""
    if not whole:
        return "0%"
    share = 100.0 * part / whole
    digits = 1
    while digits < 6 and ((round(share, digits) == 100.0 and part < whole)
                          or (round(share, digits) == 0.0 and part)):
        digits += 1
    return f"{share:.{digits}f}%"


def show_clean(report: CleanReport, out: str | Path) -> None:
    """The kept share, the waterfall of stages and warnings; ``out`` as the user named it."""
    console.out.print(
        f"[bold]{out}[/]: kept {report.rows_kept:,} of {report.rows_in:,} rows "
        f"({_share(report.rows_kept, report.rows_in)}); rejected {report.rows_rejected:,} "
        f"→ {join_location(str(out), REJECTS_DIR)}; {report.seconds:.1f} s")
    rows = []
    for stage in report.stages:
        rows.append([stage["name"], f"{stage['rows_in']:,}",
                     f"-{stage['removed']:,}" if stage["removed"] else "0",
                     f"{stage['rows_out']:,}",
                     ", ".join(f"{r} {n:,}" for r, n in sorted(
                         stage["by_reason"].items(), key=lambda kv: -kv[1]))])
    console.out.print(console.table("waterfall", ["stage", "in", "removed", "out", "reasons"],
                                    rows))
    if report.align:
        console.out.print(f"alignment threshold {report.align['threshold']:.3f} "
                          f"(trained on {report.align['trained_on']:,} pairs); "
                          f"details in {join_location(str(out), 'report.json')}")
    warn_clean(report)


def warn_clean(report: CleanReport) -> None:
    """The run's warnings on stderr, the alignment's too: also with ``--json``, whose stdout
    holds them only inside the report (``warnings``, ``align.warnings``)."""
    for warning in report.warnings:
        console.warn(warning)
    if report.quarantine_not_found:
        console.warn(f"{report.quarantine_not_found:,} quarantine id(s) are not rows of this "
                     "dataset (ids of another dataset?)")
    for warning in (report.align or {}).get("warnings") or []:
        console.warn(f"align: {warning}")


def show_tokenize(report: TokenizeReport, out: str | Path) -> None:
    tokens = ", ".join(f"{name} {count:,}" for name, count in report.tokens.items())
    console.out.print(f"[bold]{out}[/]: {report.rows:,} rows tokenized with "
                      f"{report.tokenizer['name']} ({report.id_type} ids; {tokens} tokens); "
                      f"{report.seconds:.1f} s")


def show_fertility(report: dict[str, Any], *, json_file: Path | None) -> None:
    """The tables on stdout; the warnings grouped on stderr, with where the full list is."""
    for item in fertility_tables(report, width=console.out.width):
        console.out.print(item)
    for line in grouped_warnings(report):
        console.warn(line)
    if report["warnings"]:
        where = f"in {json_file}" if json_file is not None else "with --json FILE"
        console.err.print(f"{len(report['warnings'])} warning(s) in all, each listed {where}",
                          style="dim", highlight=False, markup=False)


def fertility_markdown(report: dict[str, Any]) -> str:
    """The report's tables and every warning as Markdown (``--markdown FILE``)."""
    lines = []
    for title, columns, rows in fertility_rows(report):
        lines += [f"### {title}", "", "| " + " | ".join(c.header for c in columns) + " |",
                  "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    lines += [f"- warning: {w}" for w in report["warnings"]]
    return "\n".join(lines) + "\n"


def show_trained_tokenizer(result: TrainResult, report: dict[str, Any] | None) -> None:
    """What was trained, and its fertility by script on the held-out segments."""
    console.out.print(f"[bold]{result.tokenizer_file}[/]: {result.kind}, "
                      f"{result.vocab_size:,} tokens, "
                      f"trained on {result.segments_fed:,} segments; sampling rates "
                      + ", ".join(f"{g} ×{r:.2f}" for g, r in result.rates.items()))
    for line in result.warnings:
        console.warn(line)
    if report is not None:
        data = next(iter(report["tokenizers"].values()))
        rows = [[script, f"{m['segments']:,}", f"{m['chars_per_token']:.2f}",
                 f"{m['mark_split_rate']:.1%}", f"{m['char_share']:.1%}",
                 f"{m['token_share']:.1%}"] for script, m in data["by_script"].items()]
        columns = [Column("script"), Column("segments", "segs", "right"),
                   Column("chars/token", "c/tok", "right"),
                   Column("mark-split", "mark", "right"),
                   Column("char share", "char%", "right"),
                   Column("token share", "tok%", "right")]
        for item in table("held-out fertility by script", columns, rows,
                          width=console.out.width):
            console.out.print(item)
        for line in grouped_warnings(report):
            console.warn(line)


def show_audit(report: AuditReport, dataset: str) -> None:
    """A line per check (its verdict and figures, then its problems), then the verdict."""
    for name, check in report.checks.items():
        mark = "[green]ok[/]  " if check["ok"] else "[red]FAIL[/]"
        console.out.print(f"{mark} {name:<13} {_audit_figures(name, check)}", soft_wrap=True)
        for problem in check.get("problems", []):
            console.out.print(f"      {problem}", soft_wrap=True)
    verdict = "[green]PASS[/]" if report.ok else "[red]FAIL[/]"
    console.out.print(f"{verdict}: {dataset}")


def _audit_figures(name: str, check: dict[str, Any]) -> str:
    """One line of the figures behind an audit check's verdict."""
    try:
        return _figures(name, check)
    except KeyError:  # the check could not run: its problems say why
        return ""


def _figures(name: str, check: dict[str, Any]) -> str:
    if name == "integrity":
        return (f"{check['rows']:,} rows verified in {check['shards']} "
                f"shard{'' if check['shards'] == 1 else 's'}")
    if name == "accounting":
        return " ← ".join(f"{s['stage']} {s['rows_in']:,} in = {s['kept']:,} kept + "
                          f"{s['rejected']:,} rejected" for s in check["stages"])
    if name == "content":
        return f"{check['distinct_content']:,} distinct of {check['rows']:,} rows"
    if name in ("epoch_replay", "ids_log"):
        parts = []
        for e in check["epochs"]:
            text = (f"epoch {e['epoch']}: {e['distinct_rows']:,} distinct, "
                    f"{e['repeats']:,} repeats, {e['missed']:,} missed")
            design = [f"{e[key]:,} {what}" for key, what in (
                ("dropped_by_design", "dropped"), ("repeated_by_design", "repeated"))
                if e.get(key)]
            if design:  # the last partial batch: no loss, the loader's configuration
                text += f" ({' and '.join(design)} by design)"
            if "batches_per_rank" in e:
                per_rank = sorted(set(e["batches_per_rank"]))
                text += f", {'/'.join(map(str, per_rank))} batches per rank"
            parts.append(text)
        return "; ".join(parts)
    return ""


def show_info(info: DatasetInfo) -> None:
    """The manifest's figures, the lineage (parent, inputs), rejects and the sample rows."""
    ds = info.dataset
    m = ds.manifest
    lineage = m.lineage
    console.out.print(f"[bold]{ds.location}[/]  {m.kind} {m.role} ({'-'.join(m.langs)})")
    console.out.print(f"rows {m.rows:,} of {m.rows_in:,} in, {len(m.shards)} shard(s), "
                      f"{m.bytes:,} bytes; columns: {', '.join(f.name for f in m.schema)}")
    console.out.print(f"made by {lineage.get('stage', '?')} (spr-data "
                      f"{lineage.get('version', '?')}) at {lineage.get('created', '?')}")
    parent = lineage.get("parent")
    if isinstance(parent, dict):
        tokenizer = lineage.get("tokenizer")
        made_with = (f"tokenizer {tokenizer.get('path', '?')} ({tokenizer.get('kind', '?')}, "
                     f"{_number(tokenizer.get('vocab_size'))} tokens, "
                     f"{tokenizer.get('sha256', '?')})" if isinstance(tokenizer, dict)
                     else f"recipe {lineage.get('recipe_hash', '?')}")
        console.out.print(f"  from {parent.get('path')} ({_number(parent.get('rows'))} rows); "
                          f"{made_with}")
    inputs = lineage.get("inputs")
    for i, source in enumerate(inputs if isinstance(inputs, list) else []):
        if not isinstance(source, dict):
            continue
        listed = source.get("files")
        files = ", ".join(str(f.get("path")) for f in (listed if isinstance(listed, list) else [])
                          if isinstance(f, dict))
        console.out.print(f"  input {i}: {source.get('format')} {files} "
                          f"({_number(source.get('records'))} records)")
    if m.rejects:
        console.out.print(console.table("rejects", ["reason", "rows"],
                                        [[k, f"{v:,}"] for k, v in m.rejects.items()]))
    for item in records("sample rows", info.samples, width=console.out.width):
        console.out.print(item)


def _number(value: object) -> str:
    """A count from a manifest's (untyped) lineage: ``1,234``, or ``?`` when it is not one."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def show_verify(report: VerifyReport, dataset: str) -> None:
    """One line when the dataset matches its manifest; else each problem as an error line."""
    if report.ok:
        rejected = report.rejects.rows if report.rejects else 0
        console.out.print(f"[green]ok[/] {dataset}: {report.shards} shard(s), {report.rows:,} "
                          f"rows and {rejected:,} rejects match the manifest")
    else:
        for problem in report.all_problems():
            console.print_error(problem)
