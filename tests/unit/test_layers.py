"""hostjob's modules depend on each other one way only (docs/DEVELOPING.md, "Layers").

Every module's imports are read from its syntax tree, so imports inside functions
count as much as those at the top (a lazy import is still a dependency):

* no cycle between modules, whatever their package;
* no module imports one of a higher layer, not even for a type annotation:

    leaf helpers (errors, flock, fsutil, jsonio, log, linux, mountinfo, units, faults, codepack,
                  paths, env)
      <- spec <- job <- config <- cgroups <- runtime <- images <- cli

Imports under ``if TYPE_CHECKING:`` never run: they count for the layers (a lower
layer must not name a higher one's types) but not for cycles (a package's
``__init__`` may hand out a type that its own submodules annotate with).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

from tests.helpers import REPO

SRC = REPO / "src"

# Layer of each module: the longest matching prefix decides.
LAYERS = {
    "hostjob.codepack": 0,
    "hostjob.env": 0,
    "hostjob.errors": 0,
    "hostjob.faults": 0,
    "hostjob.flock": 0,
    "hostjob.fsutil": 0,
    "hostjob.jsonio": 0,
    "hostjob.linux": 0,
    "hostjob.log": 0,
    "hostjob.mountinfo": 0,
    "hostjob.paths": 0,
    "hostjob.units": 0,
    "hostjob.spec": 1,
    "hostjob.job": 2,
    "hostjob.config": 3,
    "hostjob.cgroups": 4,
    "hostjob.runtime": 5,
    "hostjob.images": 6,
    "hostjob.cli": 7,
    "hostjob.__main__": 7,
    "hostjob": 7,  # the public API (hostjob/__init__.py): names from every layer, lazily
}
LAYER_NAMES = ["leaf helpers", "spec", "job", "config", "cgroups", "runtime", "images", "top"]


class Import(NamedTuple):
    source: str
    target: str
    line: int
    typing_only: bool

    def __repr__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.typing_only else ""
        return f"{self.source}:{self.line} imports {self.target}{kind}"


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted((SRC / "hostjob").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _known(name: str) -> str | None:
    """The hostjob module ``name`` is, or lies in (``hostjob.x.y`` -> ``hostjob.x``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package(module, path).split(".")
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the module pkg.sub; `from mod import name` mod.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        for name in targets:
            if name == "hostjob" or name.startswith("hostjob."):
                target = _known(name)
                if target is not None and target != module:
                    found.append(Import(module, target, getattr(node, "lineno", 0), typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return found


ALL_IMPORTS = [imp for module in MODULES for imp in imports_of(module)]


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(set(edges).union(*edges.values())):
        if node not in index:
            visit(node)
    return found


def runtime_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        if not imp.typing_only:
            edges.setdefault(imp.source, set()).add(imp.target)
    return edges


def test_the_walk_sees_lazy_and_relative_imports() -> None:
    """The reader itself: a lazy import inside a function counts; a TYPE_CHECKING
    one is marked; every module of the tree is read."""
    container = imports_of("hostjob.runtime.container")
    lazy = [i for i in container if i.target == "hostjob.runtime.hooks"]
    assert lazy and not lazy[0].typing_only
    typed = [i for i in container if i.target == "hostjob.spec.state" and i.typing_only]
    assert typed
    assert "hostjob.cli.commands.run" in MODULES and "hostjob" in MODULES
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles() -> None:
    found = cycles(runtime_edges())
    details = []
    for component in found:
        inside = [i for i in ALL_IMPORTS if i.source in component and i.target in component]
        details.append(sorted(component))
        details.extend(f"    {i!r}" for i in inside if not i.typing_only)
    assert not found, "import cycles:\n" + "\n".join(map(str, details))


def test_layers_are_one_way() -> None:
    upward = [imp for imp in ALL_IMPORTS if layer(imp.target) > layer(imp.source)]
    lines = [
        f"{imp!r}: {LAYER_NAMES[layer(imp.source)]} -> {LAYER_NAMES[layer(imp.target)]}"
        for imp in upward
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(lines)


def test_every_module_has_a_layer() -> None:
    assert all(m == "hostjob" or m.startswith("hostjob.") for m in MODULES)
    leaves = [m for m in MODULES if layer(m) == 0]
    # A new top-level module must be placed in LAYERS on purpose, not fall to the top.
    unplaced = [m for m in MODULES if m.count(".") == 1 and m not in LAYERS]
    assert not unplaced, f"add to LAYERS: {unplaced}"
    assert set(leaves) == {p for p, rank in LAYERS.items() if rank == 0}
