"""Runtime commands import only light standard-library modules (each is a fresh
interpreter, and imports dominate its cost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

# Never on a runtime command's path (`_ctypes` only where a syscall the standard library
# lacks is due: tests/integration/test_runtime_imports.py).
FORBIDDEN = {
    "typing", "logging", "subprocess", "dataclasses", "argparse", "enum", "re", "json",
    "signal", "socket", "ctypes", "_ctypes", "asyncio", "threading", "httpx", "rich", "zstandard",
    "isal", "tarfile", "hashlib", "email", "http", "urllib", "pathlib", "shutil",
    "tempfile", "inspect", "datetime", "uuid", "random",
}  # fmt: skip

# Nor ``os``: importing it is ~1 ms of a command (most of it ``_collections_abc``, for
# ``os.environ``), a third to a half of what a `state` costs above the bare interpreter. The
# runtime path calls ``posix`` and takes path names and the environment from hostjob.boot.paths
# and hostjob.boot.env (tests/unit/boot/test_paths.py holds them to os.path's results).
NOT_OS = {"os", "posixpath", "genericpath", "_collections_abc"}

RUNTIME_COMMANDS = [
    ["state", "x"],
    ["start", "x"],
    ["kill", "x"],
    ["delete", "x"],
    ["list"],
    ["create", "-b", "/nonexistent", "x"],
    ["run", "-b", "/nonexistent", "x"],
]


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


@pytest.mark.parametrize("argv", RUNTIME_COMMANDS, ids=lambda a: a[0])
def test_runtime_command_imports(argv: list[str], tmp_path: Path) -> None:
    modules = imported_modules(["--root", str(tmp_path / "state"), *argv], tmp_path)
    heavy = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN)
    assert heavy == [], f"{argv[0]} imports {heavy}"
    assert sorted(modules & NOT_OS) == [], f"{argv[0]} imports os"
    ours = {m for m in modules if m.startswith("hostjob")}
    assert not any(m.startswith(("hostjob.images", "hostjob.cli.render")) for m in ours)
    assert "hostjob.images.errors" not in ours  # the image side's errors: made by it alone


def test_the_watcher_imports_only_what_it_needs() -> None:
    """A detached container's watcher is a fresh `python -I -S` (one per container, for its
    whole life): it loads the watcher's modules and, once it restarts a process, the
    spawn's -- never anything heavy, the image side or the CLI."""
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
    for modules, allowed in ((first, set()), (restarting, {"_ctypes"})):
        heavy = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN - allowed)
        assert heavy == [], f"the watcher imports {heavy}"
        assert not any(m.startswith(("hostjob.images", "hostjob.cli")) for m in modules)
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
