"""The package's layout: its import graph is a DAG, and ``qa`` never reaches into ``pipeline``.

``qa`` holds pure stages over Arrow batches; ``pipeline`` holds the runner and the commands
that drive them. Read from the source with ``ast`` (module-level and function-level imports,
``TYPE_CHECKING`` blocks too), so a late import inside a function cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spr_data

ROOT = Path(spr_data.__file__).resolve().parent
PACKAGE = "spr_data"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The package module ``name`` loads: itself, or the nearest enclosing module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every package module ``module`` imports, wherever in the file the import stands."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` loads the submodule; ``from mod import name`` the module.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules) if target.startswith(PACKAGE) else None
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None for a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_graph_is_read() -> None:
    """Guards the guard: a parser that found no edges would pass everything."""
    graph = _graph()
    assert "spr_data.pipeline.clean" in graph
    assert "spr_data.qa.report_html" in graph["spr_data.pipeline.clean"]  # a function-level one
    assert "spr_data.console" in graph["spr_data.cli"]  # ``from spr_data import console``


def test_qa_never_imports_pipeline() -> None:
    graph = _graph()
    bad = sorted(
        f"{src} imports {dst}"
        for src, targets in graph.items()
        if src == "spr_data.qa" or src.startswith("spr_data.qa.")
        for dst in targets
        if dst == "spr_data.pipeline" or dst.startswith("spr_data.pipeline.")
    )
    assert not bad, "qa holds pure stages and must not import pipeline:\n" + "\n".join(bad)


def _folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph with each subpackage (``spr_data.qa``, ``spr_data.pipeline``) as one node.

    Modules can form a DAG while their folders still import each other (a command in qa
    importing pipeline's tokenize, which imports clean, which imports qa's stages); the layers
    are the folders.
    """

    def folder(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {}
    for src, targets in graph.items():
        out.setdefault(folder(src), set()).update(
            folder(dst) for dst in targets if folder(dst) != folder(src)
        )
    return out


@pytest.mark.parametrize("level", ["modules", "folders"])
def test_import_graph_has_no_cycle(level: str) -> None:
    graph = _graph() if level == "modules" else _folders(_graph())
    cycle = _find_cycle(graph)
    assert cycle is None, f"import cycle between {level}: " + " -> ".join(cycle or [])


def test_find_cycle_reports_one() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
