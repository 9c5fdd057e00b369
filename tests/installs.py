"""What the tests of installs share (tests/unit/boot/test_codepack_build.py,
tests/integration/test_install.py): the pack's index as a command would read it, the
builders a first command started, waiting for them, and whether a command imports from
the pack."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from hostjob.boot import codepack, codepack_build
from tests.helpers import wait_for


def pack_index(package: Path) -> codepack.Index | None:
    """The index of the pack of the package at ``package`` (empty: an attempt's mark);
    None when no pack lies there (none, or the real ``.pyc`` an install leaves)."""
    opened = codepack.read_index(codepack.pack_path(str(package)))
    if opened is None:
        return None
    os.close(opened[0])
    return opened[3]


def builders(script: Path) -> list[int]:
    """The processes running ``script``: a first command's builder is a fork of it, then
    a fresh interpreter given its path."""
    name = os.fsencode(script)
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if name in _words(pid)]


def _words(pid: str) -> list[bytes]:
    """A process's command line; read again while it is empty but for a kernel thread:
    a process in the middle of an exec shows none."""
    for _ in range(1000):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                flags = int(f.read().rsplit(b")", 1)[1].split()[6])
        except (OSError, IndexError, ValueError):
            return []  # gone
        if words != [b""] or flags & 0x00200000:  # PF_KTHREAD
            return words
        time.sleep(0.001)
    return []


def built(script: Path, package: Path) -> codepack.Index:
    """The pack's index, once the builders of ``script`` have ended (at low priority on a
    busy machine: as long as a builder may last)."""
    assert wait_for(lambda: not builders(script), codepack_build.BUILD_TIMEOUT)
    index = pack_index(package)
    assert index, f"no pack made for {package}"
    return index


def imports_from_the_pack(
    python: str, script: Path, words: list[str] | None = None, env: dict[str, str] | None = None
) -> bool:
    """Whether ``script --version``, started by ``python -v`` (which names the loader of
    every module it imports) after ``words``, imports hostjob.cli.main from the pack."""
    done = subprocess.run(
        [*(words or []), python, "-v", str(script), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return "import 'hostjob.cli.main' # <hostjob.boot.codepack.PackFinder" in done.stderr
