"""``report.html``: the clean report as one self-contained page a person reads.

Rendered from the very dict that is ``report.json`` (so the two never disagree), with inline
CSS and SVG only: no script, no network, opens from a file on an air-gapped box. It shows the
waterfall (rows in, removed per stage and reason, rows out), every histogram the report holds
(each series — all rows, kept, rejected, synthetic negatives — as a share of its own rows, so
that a 3% series is as readable as a 97% one, with the decision's threshold marked), and a
few example rows per reject reason.

Histograms are found generically: any object in the report with an ``edges`` list and sibling
lists of ``len(edges) - 1`` counts is a chart, so a stage that adds one needs no change here.
Figures carry ``data-key`` attributes naming the report key they show (``rows_in``,
``by_reason.low_alignment``, ``stages.align.removed``, ``hist.<path>.<series>``,
``threshold.<path>`` where ``<path>`` is the histogram's dotted place in the report) so a test
can check the rendered page against ``report.json``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from typing import Any

__all__ = ["find_histograms", "render_report"]

_COLORS = {"kept": "#2b8a3e", "negatives": "#7048e8",
           "corpus": "#1c7ed6", "histogram": "#1c7ed6"}
_OTHER_COLORS = ("#0c8599", "#5c940d", "#862e9c", "#495057")
_LABELS = {"histogram": "all rows"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;
 margin:24px auto;max-width:1100px;color:#212529;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid
 #dee2e6;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#495057;margin-bottom:12px}.meta code{background:#f1f3f5;padding:1px 4px}
.tiles{display:flex;gap:12px;flex-wrap:wrap}.tile{border:1px solid #dee2e6;border-radius:6px;
 padding:8px 14px;min-width:140px}.tile .n{font-size:22px;font-weight:600}
.tile .l{color:#495057;font-size:12px}
table{border-collapse:collapse;margin:6px 0 12px}td,th{border-bottom:1px solid #e9ecef;
 padding:3px 10px;text-align:left;vertical-align:top}th{background:#f8f9fa}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.ex td{font-size:13px}.ex td.t{max-width:400px;overflow-wrap:anywhere}
.ex td.id{color:#868e96;white-space:nowrap}
.ex td.sc{font-size:11px;color:#495057;max-width:260px}
.warn{background:#fff3bf;border:1px solid #fab005;padding:6px 10px;border-radius:4px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.chart{margin:4px 0 18px}svg text{font:11px system-ui,sans-serif;fill:#495057}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(value: Any) -> str:
    """A count with thousands separators (the test strips them)."""
    return f"{int(value):,}" if isinstance(value, (int, float)) else _e(value)


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "–"


def _is_counts(value: Any, length: int) -> bool:
    return (isinstance(value, list) and len(value) == length
            and all(isinstance(v, (int, float)) for v in value))


def find_histograms(report: dict[str, Any]) -> Iterator[tuple[str, list[float],
                                                                 dict[str, list[float]]]]:
    """(dotted path, edges, {series name: counts}) for every histogram in the report."""
    def walk(node: Any, path: str) -> Iterator[tuple[str, list[float], dict[str, list[float]]]]:
        if isinstance(node, dict):
            edges = node.get("edges")
            if (isinstance(edges, list) and len(edges) >= 2
                    and all(isinstance(v, (int, float)) for v in edges)):
                series = {k: v for k, v in node.items()
                          if k != "edges" and _is_counts(v, len(edges) - 1)}
                if series:
                    yield path, edges, series
            for key, value in node.items():
                if key != "recipe":
                    yield from walk(value, f"{path}.{key}" if path else str(key))
    yield from walk(report, "")


def _threshold(report: dict[str, Any], path: str) -> float | None:
    """The decision threshold of the score a histogram shows, where the report has one."""
    name = path.split(".")[-1]
    align = report.get("align") or {}
    if path.startswith("align") or name == "align_score":
        value = align.get("threshold")
        return float(value) if isinstance(value, (int, float)) else None
    explicit = (report.get("thresholds") or {}).get(name)
    if isinstance(explicit, (int, float)):
        return float(explicit)
    rules = (report.get("recipe") or {}).get("rules") or {}
    value = rules.get(f"max_{name}")
    return float(value) if isinstance(value, (int, float)) else None


def _score_name(path: str) -> str:
    parts = path.split(".")
    if parts[0] == "distributions" and len(parts) > 1:
        return parts[1]
    if parts[0] == "align":
        return "align_score"
    return parts[-1]


def _chart(path: str, edges: list[float], series: dict[str, list[float]],
           threshold: float | None) -> str:
    """An SVG of each series as a share of its own rows per bin, stepped, threshold dashed."""
    width, height, left, right, top, bottom = 860, 230, 48, 12, 10, 34
    nbins = len(edges) - 1
    used = [i for i in range(nbins) if any(s[i] for s in series.values())]
    if not used:
        return f'<p data-chart="{_e(path)}">no rows</p>'
    lo = max(0, used[0] - 2)
    hi = min(nbins, used[-1] + 3)
    x0, x1 = float(edges[lo]), float(edges[hi])
    if threshold is not None and math.isfinite(threshold):
        x0, x1 = min(x0, threshold), max(x1, threshold)
    span = (x1 - x0) or 1.0
    shares = {k: [c / (sum(v) or 1) for c in v] for k, v in series.items()}
    ymax = max(max(v[lo:hi]) for v in shares.values()) or 1.0

    def x(value: float) -> float:
        return left + (value - x0) / span * (width - left - right)

    def y(value: float) -> float:
        return top + (1 - value / ymax) * (height - top - bottom)

    parts = [f'<svg width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(path)}">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" '
             f'height="{height - top - bottom}" fill="#fcfcfd" stroke="#dee2e6"/>']
    for k in range(5):  # x ticks
        value = x0 + span * k / 4
        parts.append(f'<text x="{x(value):.1f}" y="{height - 18}" text-anchor="middle">'
                     f'{value:.3g}</text>')
    for k in range(3):  # y ticks: share of the series' rows per bin
        value = ymax * k / 2
        parts.append(f'<text x="{left - 4}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{100 * value:.0f}%</text>')
    others, reds = iter(_OTHER_COLORS), iter(("#c92a2a", "#e8590c", "#a61e4d"))
    colors = {k: _COLORS.get(k) or (next(reds, "#c92a2a") if k.startswith("rejected")
                                    else next(others, "#495057")) for k in series}
    for name, share in shares.items():
        points = [f"{x(float(edges[lo])):.1f},{y(0):.1f}"]
        for i in range(lo, hi):
            points.append(f"{x(float(edges[i])):.1f},{y(share[i]):.1f}")
            points.append(f"{x(float(edges[i + 1])):.1f},{y(share[i]):.1f}")
        points.append(f"{x(float(edges[hi])):.1f},{y(0):.1f}")
        parts.append(f'<polygon points="{" ".join(points)}" fill="{colors[name]}" '
                     f'fill-opacity="0.18" stroke="{colors[name]}" stroke-width="1.5"/>')
    if threshold is not None and math.isfinite(threshold):
        tx = x(threshold)
        parts.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{top}" y2="{height - bottom}" '
                     'stroke="#212529" stroke-width="1.5" stroke-dasharray="5,3"/>')
        parts.append(f'<text x="{tx + 4:.1f}" y="{top + 12}" fill="#212529">threshold '
                     f'{threshold:.4g}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 3}" '
                 f'text-anchor="middle">{_e(_score_name(path))}</text></svg>')
    legend = "".join(
        f'<span><i style="background:{colors[k]}"></i>{_e(_LABELS.get(k, k))} '
        f'(<b data-key="hist.{_e(path)}.{_e(k)}">{_n(sum(v))}</b> rows)</span>'
        for k, v in series.items())
    thr = ("" if threshold is None else
           f' · threshold <b data-key="threshold.{_e(path)}">{threshold:.6g}</b>')
    return (f'<div class="chart" data-chart="{_e(path)}"><h3>{_e(path)}{thr}</h3>'
            f'<div class="legend">{legend}</div>{"".join(parts)}</div>')


def _waterfall(report: dict[str, Any]) -> str:
    rows_in = report.get("rows_in", 0)
    stages = report.get("stages") or []
    width, bar_h, gap, label_w = 860, 18, 6, 150
    scale = (width - label_w - 120) / (rows_in or 1)
    rows = [("input", 0, rows_in, "#1c7ed6")]
    for stage in stages:
        rows.append((stage["name"], stage["rows_out"], stage["removed"], "#c92a2a"))
    rows.append(("kept", 0, report.get("rows_kept", 0), "#2b8a3e"))
    height = len(rows) * (bar_h + gap) + gap
    svg = [f'<svg width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="waterfall">']
    for i, (name, start, length, color) in enumerate(rows):
        top = gap + i * (bar_h + gap)
        x = label_w + start * scale
        w = max(length * scale, 1.0 if length else 0.0)
        svg.append(f'<text x="{label_w - 8}" y="{top + 13}" text-anchor="end">{_e(name)}'
                   '</text>')
        svg.append(f'<rect x="{x:.1f}" y="{top}" width="{w:.1f}" height="{bar_h}" '
                   f'fill="{color}" fill-opacity="0.8"/>')
        sign = "−" if color == "#c92a2a" else ""
        svg.append(f'<text x="{x + w + 6:.1f}" y="{top + 13}">{sign}{_n(length)}</text>')
    svg.append("</svg>")
    table = ['<table><tr><th>stage</th><th class="num">rows in</th><th class="num">removed'
             '</th><th class="num">% of input</th><th class="num">rows out</th>'
             '<th>by reason</th></tr>']
    for stage in stages:
        name = _e(stage["name"])
        reasons = ", ".join(f"{_e(r)} {_n(c)}" for r, c in
                            sorted(stage.get("by_reason", {}).items(), key=lambda t: -t[1]))
        table.append(
            f'<tr><td>{name}</td><td class="num">{_n(stage["rows_in"])}</td>'
            f'<td class="num" data-key="stages.{name}.removed">{_n(stage["removed"])}</td>'
            f'<td class="num">{_pct(stage["removed"], rows_in)}</td>'
            f'<td class="num" data-key="stages.{name}.rows_out">{_n(stage["rows_out"])}</td>'
            f'<td>{reasons}</td></tr>')
    table.append("</table>")
    return "".join(svg) + "".join(table)


def _reasons(report: dict[str, Any]) -> str:
    rows_in = report.get("rows_in", 0)
    by_reason = report.get("by_reason") or {}
    all_reasons = report.get("all_reasons") or {}
    out = ['<table><tr><th>reason</th><th class="num">rows (first reason)</th>'
           '<th class="num">% of input</th><th class="num">rows with this reason (any)</th>'
           '</tr>']
    for reason, count in sorted(by_reason.items(), key=lambda t: (-t[1], t[0])):
        r = _e(reason)
        out.append(f'<tr><td><a id="reason-{r}"></a>{r}</td>'
                   f'<td class="num" data-key="by_reason.{r}">{_n(count)}</td>'
                   f'<td class="num">{_pct(count, rows_in)}</td>'
                   f'<td class="num" data-key="all_reasons.{r}">'
                   f'{_n(all_reasons.get(reason, count))}</td></tr>')
    out.append("</table>")
    return "".join(out)


def _clip(text: Any, limit: int = 300) -> str:
    value = "" if text is None else str(text)
    return _e(value if len(value) <= limit else value[:limit] + "…")


_TEXTS = ("src", "tgt", "text")


def _examples(report: dict[str, Any]) -> str:
    examples = report.get("examples") or {}
    if not examples:
        return "<p>no examples in report.json</p>"
    by_reason = report.get("by_reason") or {}
    out = []
    for reason in sorted(examples, key=lambda r: (-by_reason.get(r, 0), r)):
        rows = examples[reason]
        if not rows:
            continue
        texts = [k for k in _TEXTS if k in rows[0]]
        head = "".join(f"<th>{_e(k)}</th>" for k in texts)
        out.append(f'<h3>{_e(reason)} <small>({_n(by_reason.get(reason, len(rows)))} rows)'
                   f'</small></h3><table class="ex" data-examples="{_e(reason)}">'
                   f'<tr><th>id</th>{head}<th>all reasons</th><th>scores</th></tr>')
        for row in rows:
            cells = "".join(f'<td class="t">{_clip(row.get(k))}</td>' for k in texts)
            scores = " · ".join(f"{k} {_fmt(v)}" for k, v in row.items()
                                if k not in (*_TEXTS, "id", "reasons") and v is not None
                                and not isinstance(v, bool))
            out.append(f'<tr><td class="id">{_e(row.get("id", ""))}</td>{cells}'
                       f'<td>{_e(", ".join(row.get("reasons") or []))}</td>'
                       f'<td class="sc">{_e(scores)}</td></tr>')
        out.append("</table>")
    return "".join(out)


def _fmt(value: Any) -> Any:
    return f"{value:.4g}" if isinstance(value, float) else value


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_inline(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _align(report: dict[str, Any]) -> str:
    align = report.get("align")
    if not align:
        return "<p>the align stage did not run</p>"
    rows = []
    for key, value in align.items():
        if key in ("warnings", "histograms") or isinstance(value, list):
            continue
        if isinstance(value, dict):  # e.g. negatives: count, kinds, rejected_by_kind
            for sub, inner in value.items():
                cell = _e(_inline(inner))
                attr = "" if isinstance(inner, dict) else f' data-key="align.{_e(key)}.{_e(sub)}"'
                rows.append(f"<tr><td>{_e(key)} {_e(sub)}</td><td{attr}>{cell}</td></tr>")
            continue
        rows.append(f'<tr><td>{_e(key)}</td><td data-key="align.{_e(key)}">'
                    f"{_e(_inline(value))}</td></tr>")
    warnings = "".join(f'<p class="warn">{_e(w)}</p>' for w in align.get("warnings") or [])
    return warnings + "<table>" + "".join(rows) + "</table>"


def render_report(report: dict[str, Any]) -> str:
    """The HTML page of a clean report (the dict written as ``report.json``)."""
    rows_in = report.get("rows_in", 0)
    kept = report.get("rows_kept", 0)
    rejected = report.get("rows_rejected", rows_in - kept)
    recipe = report.get("recipe") or {}
    tiles = "".join(
        f'<div class="tile"><div class="n" data-key="{k}">{_n(v)}</div><div class="l">{label}'
        '</div></div>'
        for k, v, label in (("rows_in", rows_in, "rows in"), ("rows_kept", kept,
                            f"kept ({_pct(kept, rows_in)})"),
                            ("rows_rejected", rejected, f"rejected ({_pct(rejected, rows_in)})")))
    charts = "".join(_chart(path, edges, series, _threshold(report, path))
                     for path, edges, series in find_histograms(report))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<title>spr-data clean report: {_e(report.get("out", ""))}</title>'
        f"<style>{_CSS}</style></head><body>"
        f'<h1>clean report</h1><div class="meta"><code>{_e(report.get("out", ""))}</code> · '
        f'recipe <code>{_e(recipe.get("name") or "default")}</code> · '
        f'{_e(report.get("workers", ""))} workers · {_e(report.get("seconds", ""))} s</div>'
        f'<div class="tiles">{tiles}</div>'
        f"<h2>Waterfall</h2>{_waterfall(report)}"
        f"<h2>Reject reasons</h2>{_reasons(report)}"
        f"<h2>Alignment decision</h2>{_align(report)}"
        "<h2>Score distributions</h2><p>Each series as a share of its own rows per bin; the "
        "dashed line is the threshold the decision used.</p>"
        f"{charts or '<p>no histograms in report.json</p>'}"
        f"<h2>Examples per reject reason</h2>{_examples(report)}"
        "</body></html>\n")
