"""The README's Python snippets run as written, each on its own, in an empty directory.

A snippet that a reader copies and that stops at a ``NameError`` teaches nothing: every
```python block of the sections below is a complete program on the shipped sample, and this
test runs each one (twice where it resumes from its own checkpoint).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: Sections whose ```python blocks must run as written (add a section when its blocks do).
RUNNABLE_SECTIONS = ("## PyTorch iteration", "## Python API", "## Training guards")


def python_blocks(text: str) -> dict[str, list[str]]:
    """The ```python blocks of each ``## `` section of a Markdown text."""
    blocks: dict[str, list[str]] = {}
    section = ""
    for match in re.finditer(r"^(## [^\n]*)$|^```python\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            section = match.group(1).strip()
        else:
            blocks.setdefault(section, []).append(match.group(2))
    return blocks


def test_every_runnable_section_has_its_block() -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    for heading in RUNNABLE_SECTIONS:
        assert any(s.startswith(heading) for s in blocks), f"no ```python block in {heading}"


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning:spr_data"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("heading", RUNNABLE_SECTIONS)
def test_readme_block_runs_as_written(heading: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    codes = [code for section, found in blocks.items() if section.startswith(heading)
             for code in found]
    assert codes
    for i, code in enumerate(codes):
        cwd = tmp_path / f"block-{i}"
        cwd.mkdir()
        done = _run(code, cwd)
        assert done.returncode == 0, f"{heading} block {i}:\n{done.stderr[-3000:]}"
        if "checkpoint" in code:  # a second run resumes from what the first one saved
            again = _run(code, cwd)
            assert again.returncode == 0, f"{heading} block {i}, resumed:\n{again.stderr[-3000:]}"


def test_the_example_picks_threads_from_the_free_cores() -> None:
    """examples/train_tiny_mt.py: torch's one-thread-per-core default is 10× slower on a
    loaded machine; the example asks for the cores that are not busy."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "train_tiny_mt", ROOT / "examples" / "train_tiny_mt.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.pick_threads(cores=4, load=0.2) == 4
    assert example.pick_threads(cores=4, load=1.4) == 3
    assert example.pick_threads(cores=2, load=1.2) == 1
    assert example.pick_threads(cores=2, load=9.0) == 1  # never 0
    assert example.pick_threads(3, cores=2, load=9.0) == 3  # --threads wins
    here = example.pick_threads()
    assert 1 <= here <= len(os.sched_getaffinity(0))


def test_every_rule_of_the_rules_stage_has_a_row_in_the_reasons_table() -> None:
    """A reject reason a user meets in ``report.json`` is explained in the README's table."""
    from spr_data.qa.rules import PAIR_RULES, SIDE_RULES

    text = README.read_text(encoding="utf-8")
    missing = ([rule for rule in SIDE_RULES if f"`{rule}_{{side}}`" not in text]
               + [rule for rule in PAIR_RULES if f"| `{rule}` |" not in text])
    assert not missing, f"rules without a row in the README's reasons table: {missing}"
