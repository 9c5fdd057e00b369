"""Runtime commands import only light standard-library modules (each is a fresh
interpreter, and imports dominate its cost), and only hostjob modules declared on the
runtime path; the modules off it write ordinary Python (tests/unit/runtime_path.py
states the rules)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.unit.runtime_path import FORBIDDEN, NOT_OS, lean, on_runtime_path, undeclared

RUNTIME_COMMANDS = [
    ["state", "x"],
    ["start", "x"],
    ["kill", "x"],
    ["delete", "x"],
    ["delete", "--force", "x"],
    ["list"],
    ["create", "-b", "/nonexistent", "x"],
    ["run", "-b", "/nonexistent", "x"],
    ["exec", "x", "true"],
    ["ps", "x"],
    ["pause", "x"],
    ["resume", "x"],
    ["update", "--pids-limit", "5", "x"],
    ["events", "--stats", "x"],
    ["features"],
    ["spec"],
]


def heavy(modules: set[str], allowed: frozenset[str] = frozenset()) -> list[str]:
    """What of ``FORBIDDEN`` (less ``allowed``) a command loaded."""
    return sorted(m for m in modules if m.split(".")[0] in FORBIDDEN - allowed)


def imported_modules(argv: list[str], tmp_path: Path) -> set[str]:
    code = (
        "import sys\n"
        "from hostjob.cli.main import main\n"
        f"main({argv!r})\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    line = next(line for line in result.stderr.splitlines() if line.startswith("MODULES "))
    return set(line.split()[1:])


@pytest.mark.parametrize("argv", RUNTIME_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_runtime_command_imports(argv: list[str], tmp_path: Path) -> None:
    modules = imported_modules(["--root", str(tmp_path / "state"), *argv], tmp_path)
    assert heavy(modules) == [], f"{argv[0]} imports {heavy(modules)}"
    assert sorted(modules & NOT_OS) == [], f"{argv[0]} imports os"
    assert undeclared(modules) == [], "declare in tests/unit/runtime_path.py"
    ours = {m for m in modules if m.startswith("hostjob")}
    assert not any(m.startswith(("hostjob.images", "hostjob.cli.render")) for m in ours)
    assert "hostjob.images.errors" not in ours  # the image side's errors: made by it alone


def test_the_watcher_imports_only_what_it_needs() -> None:
    """A detached container's watcher is a fresh `python -I -S` (one per container, for its
    whole life): it loads the watcher's modules and, once it restarts a process, the
    spawn's -- never anything heavy, the image side or the CLI. Not ``typing`` either:
    it would raise every watcher's PSS by a third (4.3 to 5.8 MiB, medians of 7 runs
    of ``python -I -S`` importing the watcher, with and without ``import typing``);
    ``os``, which it uses, is allowed."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import hostjob.supervisor.watcher\n"
        "first = set(sys.modules)\n"
        "import hostjob.runtime.verbs.restart, hostjob.linux.syscalls\n"
        "sys.stdout.write(' '.join(sorted(first)) + '\\n' + ' '.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(REPO / "src")],
        capture_output=True,
        text=True,
        check=True,
    )
    first, restarting = (set(line.split()) for line in result.stdout.splitlines())
    for modules, allowed in ((first, frozenset()), (restarting, frozenset({"_ctypes"}))):
        assert heavy(modules, allowed) == [], f"the watcher imports {heavy(modules, allowed)}"
        assert not any(m.startswith(("hostjob.images", "hostjob.cli")) for m in modules)
        assert undeclared(modules, lean) == [], "declare in tests/unit/runtime_path.py"
    assert "hostjob.runtime.launch.spawn" not in first  # only once it restarts a process


def test_delete_force_of_an_unknown_id_loads_no_record(tmp_path: Path) -> None:
    """docker's shim follows every `delete` with a `delete --force` of the same ID: that
    one finds no directory, and answers without the record's model or any JSON code."""
    modules = imported_modules(["--root", str(tmp_path), "delete", "--force", "gone"], tmp_path)
    assert "hostjob.runtime.state_root" in modules
    loaded = sorted(
        m for m in modules if m in {"hostjob.runtime.record", "hostjob.boot.jsonio", "_json"}
    )
    assert loaded == [], f"delete --force of an unknown ID loads {loaded}"


# --- the dialect, and only there -----------------------------------------------------------

_PATH_MODULES = ("hostjob.boot.paths", "hostjob.boot.env")


def dialect(path: Path, *, tests: bool = False) -> list[str]:
    """Where ``path`` writes the runtime path's dialect, as ``line N: what``: ``import
    posix``, ``TYPE_CHECKING = False``, ``hostjob.boot.paths``/``env`` for ``os``'s. A
    test may import ``posix`` to patch what the runtime calls, and test those two."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    patches_posix = any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "setattr"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "posix"
        for node in ast.walk(tree)
    )
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        if "posix" in names and not (tests and patches_posix):
            found.append((node.lineno, "import posix"))
        if any(name in _PATH_MODULES for name in names) and not tests:
            found.append((node.lineno, "hostjob.boot.paths/env"))
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "TYPE_CHECKING" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and node.value.value is False
        ):
            found.append((node.lineno, "TYPE_CHECKING = False"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO / "src").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _python_files(top: Path) -> list[Path]:
    """``top``'s Python files: ``*.py``, and scripts whose first line runs python."""
    found = []
    for path in sorted(top.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py":
            found.append(path)
        elif not path.suffix:
            with open(path, "rb") as f:
                first = f.readline()
            if first.startswith(b"#!") and b"python" in first:
                found.append(path)
    return found


def test_only_the_runtime_path_writes_its_dialect() -> None:
    """Off the runtime path, code reads as ordinary Python (tests/unit/runtime_path.py):
    ``os``, ``from typing import TYPE_CHECKING``. The watcher's own modules keep
    ``typing`` out, and nothing else of the dialect."""
    wrong = []
    for path in (REPO / "src" / "hostjob").rglob("*.py"):
        module = _module_name(path)
        if on_runtime_path(module):
            continue
        uses = dialect(path)
        if lean(module):  # the watcher's
            uses = [u for u in uses if not u.endswith("TYPE_CHECKING = False")]
        wrong += [f"{module}: {use}" for use in uses]
    for top in ("tests", "bench", "scripts"):
        for path in _python_files(REPO / top):
            wrong += [f"{path.relative_to(REPO)}: {use}" for use in dialect(path, tests=True)]
    assert wrong == [], "the runtime path's dialect off it:\n" + "\n".join(wrong)


def test_the_dialect_check_sees_what_it_must(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import posix\n"
        "from posix import getpid\n"
        "from hostjob.boot import paths\n"
        "from hostjob.boot.env import getenv\n"
        "import hostjob.boot.paths\n"
        "TYPE_CHECKING = False\n"
        "def f(monkeypatch):\n"
        "    monkeypatch.setattr(posix, 'fsync', None)\n"
    )
    assert dialect(probe) == [
        "line 1: import posix",
        "line 2: import posix",
        "line 3: hostjob.boot.paths/env",
        "line 4: hostjob.boot.paths/env",
        "line 5: hostjob.boot.paths/env",
        "line 6: TYPE_CHECKING = False",
    ]
    # A test may patch posix and test paths/env, never write TYPE_CHECKING = False.
    assert dialect(probe, tests=True) == ["line 6: TYPE_CHECKING = False"]
    ordinary = tmp_path / "ordinary.py"
    ordinary.write_text(
        "import os\nimport posixpath\nfrom typing import TYPE_CHECKING\nTYPE_CHECKING = True\n"
        "from hostjob.boot import jsonio\n"
    )
    assert dialect(ordinary) == []
    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env python3\nimport posix\n")
    (tmp_path / "notes").write_text("#!/bin/sh\nimport posix\n")
    assert _python_files(tmp_path) == [ordinary, probe, script]


def test_the_declaration_checks_see_what_they_must() -> None:
    """A command that loaded an undeclared module, ``os`` or something heavy is caught."""
    loaded = {"hostjob", "hostjob.runtime.handle", "hostjob.images.pull", "hostjobx", "os"}
    assert undeclared(loaded) == ["hostjob.images.pull"]
    assert undeclared({"hostjob.supervisor.watcher"}) == ["hostjob.supervisor.watcher"]
    assert undeclared({"hostjob.supervisor.watcher"}, lean) == []
    assert undeclared({"hostjob.supervisor.launch"}, lean) == ["hostjob.supervisor.launch"]
    assert on_runtime_path("hostjob.runtime.verbs.create")
    assert not on_runtime_path("hostjob.runtimes") and not on_runtime_path("hostjob.cli.render")
    assert heavy({"typing", "re._parser", "_ctypes", "posix"}) == [
        "_ctypes",
        "re._parser",
        "typing",
    ]
    assert heavy({"_ctypes"}, frozenset({"_ctypes"})) == []
    assert sorted({"os", "posix", "_collections_abc"} & NOT_OS) == ["_collections_abc", "os"]
