"""The code stays lint-clean, formatted and `mypy --strict` clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def tool(name: str) -> str:
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (scripts/install installs the test extras)")
    return path


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_check() -> None:
    result = run(tool("ruff"), "check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = run(tool("ruff"), "format", "--check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run(tool("mypy"), "--strict", "src/hostjob")
    assert result.returncode == 0, result.stdout + result.stderr
