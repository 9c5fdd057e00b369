"""The image side is a client of the runtime, in one direction: no module outside
``hostjob.images`` (but the CLI) imports it, not even inside a function or for types;
and the modules of ``hostjob.images`` import each other without a cycle (imports inside
functions and for types counted)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

SRC = REPO / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every hostjob module ``path`` names in an import, wherever the import stands."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m == "hostjob" or m.startswith("hostjob.")}


def modules() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in (SRC / "hostjob").rglob("*.py")}


def test_only_the_cli_imports_the_image_side() -> None:
    offenders = {
        name: sorted(m for m in found if m.startswith("hostjob.images"))
        for name, found in modules().items()
        if not name.startswith(("hostjob.images", "hostjob.cli"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_cycle_inside_images() -> None:
    graph = {
        name: {m for m in found if m in _images() and m != name}
        for name, found in modules().items()
        if name in _images()
    }
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _images() -> set[str]:
    return {
        module_name(p) for p in (SRC / "hostjob" / "images").glob("*.py") if p.name != "__init__.py"
    }
