"""Run a benchmark under the repository's venv (scripts/install makes it): the image
benches need its packages (httpx, isal, zstandard), and every bench should time the
installed, byte-compiled hostjob rather than src/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"


def ensure_venv() -> None:
    """Re-exec this script with the venv's interpreter unless already there."""
    if Path(sys.prefix).resolve() == (REPO / ".venv").resolve():
        return
    subprocess.run([str(REPO / "scripts" / "install")], check=True, stdout=subprocess.DEVNULL)
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
