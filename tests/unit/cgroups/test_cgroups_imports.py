"""hostjob.cgroups is on every runtime command's path: it must import only light modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[3] / "src")
FORBIDDEN = {"typing", "re", "enum", "dataclasses", "subprocess", "logging", "threading", "json"}


def modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-S", "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_opening_a_manager_is_light() -> None:
    mods = modules_after("import hostjob.cgroups.driver as c; c.open_manager('/x')")
    assert not mods & FORBIDDEN, sorted(mods & FORBIDDEN)
    # The controller modules load only when a limit or stat needs them.
    assert not {m for m in mods if m.startswith(("hostjob.cgroups.v1.", "hostjob.cgroups.v2."))}


def test_every_cgroup_module_is_light() -> None:
    mods = modules_after(
        "import hostjob.cgroups, hostjob.specconv.convert, hostjob.cgroups.stats, hostjob.cgroups.pids\n"
        "import hostjob.cgroups.driver, hostjob.cgroups.unified\n"
        "for v in ('v1', 'v2'):\n"
        "    for m in ('memory', 'cpu', 'cpuset', 'hugetlb'):\n"
        "        __import__(f'hostjob.cgroups.{v}.{m}')\n"
        "import hostjob.cgroups.v1.blkio, hostjob.cgroups.v1.freezer, hostjob.cgroups.v2.io"
    )
    assert not mods & FORBIDDEN, sorted(mods & FORBIDDEN)
