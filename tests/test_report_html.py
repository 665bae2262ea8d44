"""``report.html``: written by clean beside ``report.json``, self-contained, and what a real
headless browser renders from it shows the numbers of ``report.json``.

The browser is Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it).
Where it is missing the browser tests skip, unless ``CI=true``: then they fail.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from spr_data import open_dataset
from spr_data.outdir import REJECTS_DIR
from spr_data.qa.report_html import find_histograms, render_report
from tests.junk import load_corpus, mix, spr_rejections


def _chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium"
                                         if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found:
        return found
    message = "chromium not installed (apt-get install -y chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI=true needs it")
    pytest.skip(message)


def _browser(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={tmp / 'profile'}", *extra, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)


class _Keys(HTMLParser):
    """Text of every element with a ``data-key``, charts and example tables by name."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, str] = {}
        self.charts: list[str] = []
        self.examples: dict[str, int] = {}
        self._open: list[str | None] = []
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "data-chart" in a:
            self.charts.append(a["data-chart"] or "")
        if tag == "table" and a.get("data-examples"):
            self._table = a["data-examples"]
            self.examples[self._table] = -1  # the header row
        if tag == "tr" and self._table is not None:
            self.examples[self._table] += 1
        key = a.get("data-key")
        if key:
            self.keys[key] = ""
        self._open.append(key)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for key in self._open:
            if key:
                self.keys[key] += data


class _Fetches(HTMLParser):
    """Whatever would make a browser load something: scripts, links, frames, images,
    attributes that point elsewhere, ``url(...)``/``@import`` in styles."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link", "iframe", "img", "object", "embed", "image", "use"):
            self.found.append(tag)
        self._style = tag == "style"
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action", "background") or (
                    name == "style" and value and "url(" in value):
                self.found.append(f"{tag} {name}={value}")

    def handle_data(self, data: str) -> None:
        if self._style and ("url(" in data or "@import" in data):
            self.found.append("style url()")

    def handle_endtag(self, tag: str) -> None:
        self._style = False


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


@pytest.fixture(scope="module")
def cleaned(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real clean run: Multi30k en–de with 25% junk of every kind (3,000 rows)."""
    corpus, _, foreign, _ = load_corpus(corpora, "multi30k-en-de")
    mixed = mix(corpus, 0.25, rows=3000, foreign=foreign, min_per_kind=10, seed=5)
    root = tmp_path_factory.mktemp("report")
    _, report = spr_rejections(mixed, "en-de", root)
    return root / "clean", report


@pytest.mark.slow
def test_clean_writes_a_self_contained_page(cleaned: tuple[Path, dict[str, Any]]):
    out, report = cleaned
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page == render_report(report)  # rendered from the very dict of report.json
    fetches = _Fetches()
    fetches.feed(page)
    assert not fetches.found, f"report.html must need nothing else: {fetches.found[:5]}"
    # a few examples per reason, each a row rejected with that first reason
    rejects = open_dataset(out / REJECTS_DIR)
    first = dict(zip(*(rejects.take(range(len(rejects))).column(c).to_pylist()
                       for c in ("id", "reason")), strict=True))
    assert set(report["examples"]) == {r for r, n in report["by_reason"].items() if n}
    for reason, rows in report["examples"].items():
        assert 1 <= len(rows) <= 3
        assert all(first[row["id"]] == reason for row in rows), reason


@pytest.mark.slow
def test_browser_renders_the_numbers_of_report_json(cleaned: tuple[Path, dict[str, Any]],
                                                    tmp_path: Path):
    out, report = cleaned
    dom = _browser(out / "report.html", tmp_path, "--dump-dom").stdout
    parsed = _Keys()
    parsed.feed(dom)
    keys = parsed.keys
    assert "<svg" in dom
    for key in ("rows_in", "rows_kept", "rows_rejected"):
        assert _number(keys[key]) == report[key], key
    assert report["rows_rejected"] > 0
    for reason, count in report["by_reason"].items():
        assert _number(keys[f"by_reason.{reason}"]) == count, reason
        assert _number(keys[f"all_reasons.{reason}"]) == report["all_reasons"][reason]
    for stage in report["stages"]:
        assert _number(keys[f"stages.{stage['name']}.removed"]) == stage["removed"]
        assert _number(keys[f"stages.{stage['name']}.rows_out"]) == stage["rows_out"]
    histograms = list(find_histograms(report))
    assert any(path.endswith("align_score") or path.startswith("align")
               for path, _, _ in histograms)
    assert parsed.charts == [path for path, _, _ in histograms]
    for path, _, series in histograms:
        for name, counts in series.items():
            assert _number(keys[f"hist.{path}.{name}"]) == sum(counts), (path, name)
    threshold = report["align"]["threshold"]
    shown = [v for k, v in keys.items() if k.startswith("threshold.") and "align" in k]
    assert shown and all(math.isclose(_number(v), threshold, rel_tol=1e-5) for v in shown)
    assert parsed.examples == {r: len(v) for r, v in report["examples"].items()}


@pytest.mark.slow
def test_browser_screenshot(cleaned: tuple[Path, dict[str, Any]], tmp_path: Path):
    out, _ = cleaned
    shot = tmp_path / "report.png"
    _browser(out / "report.html", tmp_path, f"--screenshot={shot}", "--window-size=1200,2400")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a page, not a blank


def test_render_is_generic_and_escapes():
    """Any ``edges`` + counts object is a chart (13A's negatives too); text is escaped."""
    edges = [-3.0, -2.0, -1.0, 0.0]
    report = {
        "out": "x", "rows_in": 10, "rows_kept": 7, "rows_rejected": 3,
        "by_reason": {"low_alignment": 3}, "all_reasons": {"low_alignment": 3},
        "stages": [{"name": "align", "rows_in": 10, "rows_out": 7, "removed": 3,
                    "by_reason": {"low_alignment": 3}}],
        "distributions": {"length_ratio": {"count": 10, "edges": [1.0, 2.0, 3.0],
                                           "histogram": [9, 1]}},
        "align": {"threshold": -1.5, "warnings": ["quantile asked for <b>"],
                  "histograms": {"edges": edges, "kept": [0, 2, 5], "rejected": [3, 0, 0],
                                 "negatives": [40, 9, 1], "corpus": [3, 2, 5]}},
        "recipe": {"rules": {"max_length_ratio": 2.5}},
        "examples": {"low_alignment": [{"id": 4, "src": "<script>alert(1)</script>",
                                        "tgt": "a & b", "align_score": -2.5,
                                        "reasons": ["low_alignment"]}]},
    }
    found = {path: sorted(series) for path, _, series in find_histograms(report)}
    assert found == {"distributions.length_ratio": ["histogram"],
                     "align.histograms": ["corpus", "kept", "negatives", "rejected"]}
    page = render_report(report)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "quantile asked for &lt;b&gt;" in page
    parsed = _Keys()
    parsed.feed(page)
    assert _number(parsed.keys["threshold.align.histograms"]) == -1.5
    assert _number(parsed.keys["threshold.distributions.length_ratio"]) == 2.5
    assert _number(parsed.keys["hist.align.histograms.negatives"]) == 50
    assert json.loads(json.dumps(report)) == report  # the renderer did not touch its input
