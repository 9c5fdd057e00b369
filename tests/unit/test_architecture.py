"""hostjob's architecture, pinned: the one test of how its modules may depend on each
other (docs/DEVELOPING.md, "Layers").

Every module's imports are read from its syntax tree, so imports inside functions and
under ``if TYPE_CHECKING:`` count as much as those at the top (a lazy import is still a
dependency, and a type named from above is a dependency on what is above):

* no cycle between modules, whatever their package;
* no module imports one of a higher layer:

    leaf helpers (errors, faults, log, units; the packages boot, linux, seccomp)
      <- spec <- specconv.jobconfig <- specconv <- cgroups <- runtime <- supervisor
      <- images <- cli

  and inside the runtime, by who reads each part:

    status, proc <- record <- bundle <- launch, sandbox <- handle
      <- verbs (a module per verb), delegate <- container (the public façade, one
      call into a verb a method, which nothing below imports);

* no module reads another object's ``_private`` attribute: what another module needs is
  public (the object's own methods, ``self``/``cls``, are its business; a standard
  library module's ``posix._exit`` is not ours).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

from tests.helpers import REPO

SRC = REPO / "src"

# The layer of each module: the longest matching prefix decides. A layer is a pair
# (layer, rank inside it); a module may import its own layer and rank, or below.
LAYERS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(
        (
            "hostjob.boot",
            "hostjob.linux",
            "hostjob.seccomp",
            "hostjob.errors",
            "hostjob.faults",
            "hostjob.log",
            "hostjob.units",
        ),
        (0, 0),
    ),
    "hostjob.spec": (1, 0),
    "hostjob.specconv.jobconfig": (2, 0),
    "hostjob.specconv": (3, 0),
    "hostjob.cgroups": (4, 0),
    "hostjob.runtime.status": (5, 0),
    "hostjob.runtime.proc": (5, 0),
    "hostjob.runtime.state_root": (5, 0),
    "hostjob.runtime.record": (5, 1),
    "hostjob.runtime.users": (5, 1),
    "hostjob.runtime.bundle": (5, 2),
    "hostjob.runtime.launch": (5, 3),
    "hostjob.runtime.sandbox": (5, 3),
    "hostjob.runtime.handle": (5, 4),
    "hostjob.runtime.verbs": (5, 5),
    "hostjob.runtime.delegate": (5, 5),
    "hostjob.runtime.container": (5, 6),
    "hostjob.runtime": (5, 6),  # the package itself (its docstring only)
    "hostjob.supervisor": (6, 0),
    "hostjob.images": (7, 0),
    "hostjob.node": (7, 0),
    "hostjob.cli": (8, 0),
    "hostjob.__main__": (8, 0),
    "hostjob": (8, 0),  # the public API (hostjob/__init__.py): names from every layer, lazily
}
LAYER_NAMES = [
    "leaf helpers",
    "spec",
    "specconv's model",
    "specconv",
    "cgroups",
    "runtime",
    "supervisor",
    "images",
    "top",
]
FACADE = "hostjob.runtime.container"


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


def layer(module: str) -> tuple[int, int]:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def layer_name(module: str) -> str:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    top, rank = LAYERS[best]
    return LAYER_NAMES[top] if top != 5 else f"runtime ({best}, rank {rank})"


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


def edges() -> dict[str, set[str]]:
    """Every import, for types too: a type named from a module is a dependency on it."""
    found: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        found.setdefault(imp.source, set()).add(imp.target)
    return found


def test_the_walk_sees_lazy_and_relative_imports() -> None:
    """The reader itself: a lazy import inside a function counts; a TYPE_CHECKING
    one is marked; every module of the tree is read."""
    container = imports_of("hostjob.runtime.container")
    lazy = [i for i in container if i.target == "hostjob.runtime.verbs.create"]
    assert any(not i.typing_only for i in lazy) and any(i.typing_only for i in lazy)
    typed = [i for i in container if i.target == "hostjob.spec.state" and i.typing_only]
    assert typed
    assert "hostjob.cli.commands.run" in MODULES and "hostjob" in MODULES
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles() -> None:
    found = cycles(edges())
    details = []
    for component in found:
        inside = [i for i in ALL_IMPORTS if i.source in component and i.target in component]
        details.append(sorted(component))
        details.extend(f"    {i!r}" for i in inside)
    assert not found, "import cycles:\n" + "\n".join(map(str, details))


def test_layers_are_one_way() -> None:
    upward = [imp for imp in ALL_IMPORTS if layer(imp.target) > layer(imp.source)]
    lines = [f"{imp!r}: {layer_name(imp.source)} -> {layer_name(imp.target)}" for imp in upward]
    assert not upward, "imports of a higher layer:\n" + "\n".join(lines)


def test_nothing_in_the_runtime_imports_its_facade() -> None:
    """``Container`` is for the library's users, the CLI, the daemon and images: the
    runtime's own modules take a ``Handle``."""
    back = [
        imp
        for imp in ALL_IMPORTS
        if imp.target == FACADE and imp.source.startswith("hostjob.runtime.")
    ]
    assert not back, "the runtime imports its façade:\n" + "\n".join(map(repr, back))


# The verbs one verb's module may import: ``run`` is create, start and delete in one
# process, and a failed create tears down as delete does; every other verb stands alone,
# so that its command loads no other verb's code (``kill`` never loads ``create``).
VERBS = "hostjob.runtime.verbs"
VERB_USES = {"run": {"create", "start", "delete"}, "create": {"delete"}}


def test_a_verb_imports_no_other_verb_but_those_it_is_made_of() -> None:
    verbs = [m for m in MODULES if m.startswith(f"{VERBS}.")]
    assert {f"{VERBS}.{v}" for v in ("start", "state", "kill", "pause", "update")} <= set(verbs)
    crossing = [
        imp
        for imp in ALL_IMPORTS
        if imp.source in verbs
        and imp.target.startswith(f"{VERBS}.")
        and imp.target.rpartition(".")[2] not in VERB_USES.get(imp.source.rpartition(".")[2], ())
    ]
    assert not crossing, "a verb imports another:\n" + "\n".join(map(repr, crossing))


def test_only_the_cli_and_the_public_api_import_the_image_side() -> None:
    users = {
        imp.source
        for imp in ALL_IMPORTS
        if imp.target.startswith("hostjob.images") and not imp.source.startswith("hostjob.images")
    }
    assert all(u.startswith("hostjob.cli") or u == "hostjob" for u in users), sorted(users)


def test_every_module_has_a_layer() -> None:
    assert all(m == "hostjob" or m.startswith("hostjob.") for m in MODULES)
    leaves = [m for m in MODULES if layer(m) == (0, 0)]
    # A new top-level module must be placed in LAYERS on purpose, not fall to the top.
    unplaced = [m for m in MODULES if m.count(".") == 1 and m not in LAYERS]
    assert not unplaced, f"add to LAYERS: {unplaced}"
    assert {m.split(".")[1] for m in leaves} == {
        p.split(".")[1] for p, rank in LAYERS.items() if rank == (0, 0)
    }
    runtime = [m for m in MODULES if m.startswith("hostjob.runtime.")]
    unranked = [m for m in runtime if layer(m) == LAYERS["hostjob.runtime"] and m != FACADE]
    assert not unranked, f"give these a rank inside the runtime: {unranked}"


# --- private attributes -------------------------------------------------------------------


class Reach(NamedTuple):
    module: str
    line: int
    text: str

    def __repr__(self) -> str:
        return f"{self.module}:{self.line} reads {self.text}"


def _module_aliases(tree: ast.Module) -> set[str]:
    """The names a file binds to modules that are not hostjob's (``import posix``,
    ``import signal as sig``, ``from os import path``): their ``_private`` names are the
    standard library's business."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("hostjob"):
                    found.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and not node.level
            and not node.module.startswith("hostjob")
        ):
            found.update(alias.asname or alias.name for alias in node.names)
    # ... and the names given one of them (``c: Any = _ctypes``, for the type checker)
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value
            if isinstance(value, ast.Name) and value.id in found:
                found.add(node.target.id)
    return found


def private_reaches(module: str) -> list[Reach]:
    """``x._name`` in ``module`` where ``x`` is neither ``self`` nor ``cls`` nor a
    module of the standard library (``_name``: one underscore, not a dunder), and
    ``from hostjob.x import _name`` of another module's private name. A package's own
    private modules (``hostjob.cgroups._fs``) are the package's: imported as modules,
    they are not attributes of an object."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    foreign = _module_aliases(tree)
    found: list[Reach] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not name.startswith("_") or name.startswith("__"):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls", *foreign):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "super":
                continue
            found.append(Reach(module, node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hostjob"):
            base = node.module or ""
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{base}.{alias.name}" not in MODULES:
                    found.append(Reach(module, node.lineno, f"{base}.{alias.name}"))
    return found


def test_no_module_reads_another_objects_private_attributes() -> None:
    found = [reach for module in MODULES for reach in private_reaches(module)]
    assert not found, "private attributes read from outside:\n" + "\n".join(map(repr, found))


def test_the_private_reach_check_sees_what_it_must(tmp_path: Path, monkeypatch) -> None:
    code = (
        "import posix\n"
        "from hostjob.runtime.handle import _private\n"
        "class A:\n"
        "    def f(self, o):\n"
        "        return o._x, self._y, posix._exit, super()._z, o.__class__, o.x._y\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(code)
    monkeypatch.setitem(MODULES, "hostjob.probe", path)
    found = [reach.text for reach in private_reaches("hostjob.probe")]
    assert found == ["hostjob.runtime.handle._private", "o._x", "o.x._y"]


# --- module size --------------------------------------------------------------------------

MAX_LINES = 500


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


# --- the top level ------------------------------------------------------------------------

MAX_TOP_LEVEL_MODULES = 8


def test_the_top_level_holds_few_modules_of_its_own() -> None:
    """``src/hostjob/`` keeps the few modules every layer shares (the error tree, the log,
    units, fault points); the rest lives in a package named for its one job."""
    top = sorted(
        p.stem
        for p in (SRC / "hostjob").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"top-level modules: {top}"


# --- function length ----------------------------------------------------------------------

MAX_FUNCTION_LINES = 100


def test_no_function_is_over_the_length_limit() -> None:
    """A function longer than a screenful or two does several things: cut it at its
    steps (a verb at its fault points, a child's set-up at what it sets up)."""
    over = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{module}.{node.name} ({path.name}:{node.lineno}): {lines}")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"
