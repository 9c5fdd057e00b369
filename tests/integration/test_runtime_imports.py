"""The import pin on real containers: every runtime command of a whole lifecycle
imports only light standard-library modules (each command is a fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, base_config, new_id
from tests.unit.test_imports import FORBIDDEN

# What a command may still need: `run` makes itself a subreaper (prctl, via ctypes).
ALLOWED = {"run": {"ctypes"}}


def modules_of(root: Path, argv: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    dump = tmp_path / f"modules-{argv[0]}"
    code = (
        "import sys\n"
        "from hostjob.cli.main import main\n"
        f"code = main({['--root', str(root), *argv]!r})\n"
        f"open({str(dump)!r}, 'w').write(' '.join(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    with open(os.devnull, "w") as null:
        result = subprocess.run(
            [sys.executable, "-S", "-c", code], env=env, stdout=null, stderr=null, timeout=60
        )
    return result.returncode, set(dump.read_text().split())


def test_lifecycle_imports(tmp_path: Path, bundle) -> None:
    root = tmp_path / "state"
    cid = new_id()
    b = bundle(base_config("sleep", "300"))
    steps = [
        ["create", "-b", str(b), cid],
        ["start", cid],
        ["state", cid],
        ["list"],
        ["exec", cid, "true"],
        ["pause", cid],
        ["resume", cid],
        ["ps", "--format", "json", cid],
        ["events", "--stats", cid],
        ["update", "--pids-limit", "50", cid],
        ["kill", cid, "KILL"],
        ["delete", "--force", cid],
        ["run", "-b", str(b), new_id()],
    ]
    b2 = bundle(base_config("true"), "quick")
    steps[-1] = ["run", "-b", str(b2), new_id()]
    for argv in steps:
        code, modules = modules_of(root, argv, tmp_path)
        assert code == 0, argv
        heavy = sorted(
            m for m in modules if m.split(".")[0] in FORBIDDEN - ALLOWED.get(argv[0], set())
        )
        assert heavy == [], f"{argv[0]} imports {heavy}"
        assert not any(m.startswith(("hostjob.images", "hostjob.cli.render")) for m in modules), (
            argv
        )
