"""Every image benchmark in one run: unpack throughput, pull+unpack, cached run.

    sudo python3 bench/images/all.py [--quick]

Runs ``unpack.py``, ``pull.py`` and ``run.py`` one after the other with this
interpreter (each prints its own table, ratios and target); ``--quick`` makes the
generated images small (30 MB) and the rounds few, for a smoke run. Exits non-zero
if any of them failed.
"""

from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".."))
from _venv import ensure_venv

ensure_venv()

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small images, few rounds")
    args = parser.parse_args()
    quick = {
        "unpack.py": ["--mb", "30", "--files", "3000", "--rounds", "2"],
        "pull.py": ["--mb", "30", "--layers", "3", "--rounds", "2"],
        "run.py": ["--runs", "10", "--warmup", "2"],
    }
    failed = []
    for script in ("unpack.py", "pull.py", "run.py"):
        print(f"== {script}", flush=True)
        argv = [sys.executable, os.path.join(HERE, script), *(quick[script] if args.quick else [])]
        if subprocess.run(argv, check=False).returncode != 0:
            failed.append(script)
        print(flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
