#!/usr/bin/python3
"""bench/timeline.py: where one hostjob command's time goes, in-process.

Runs ``hostjob ARGS...`` from the installed package (``scripts/install``) inside this
interpreter with a profile hook on, and prints a tree of hostjob's own calls and of every
import, each with its duration; nodes shorter than ``--min`` milliseconds and deeper than
``--depth`` are left out. The hook slows every Python call, so read the tree for proportions
("the cgroup manager's import is a third of create"), and the plain time of the command from
``bench/lifecycle``. Another process the command forks (the container's init) is not
followed: its set-up shows as the parent's wait for it (``init.spawn``).

    bench/timeline.py [--depth N] [--min MS] -- --root /tmp/s create -b BUNDLE ID
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parent.parent


def site_packages() -> str:
    venv = REPO / ".venv" / "lib"
    found = sorted(venv.glob("python3*/site-packages"))
    if not found:
        sys.exit("timeline: no .venv (run scripts/install --venv)")
    return str(found[-1])


class Tree:
    """Calls of hostjob's functions and imports, as (depth, name, start, ms) in call order."""

    def __init__(self) -> None:
        self.nodes: list[list[object]] = []
        self.stack: list[int] = []  # index into nodes, or -1 for a call not shown

    def hook(self, frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            code = frame.f_code
            name = None
            if code.co_name == "_find_and_load" and "importlib" in code.co_filename:
                name = f"import {frame.f_locals.get('name')}"
            elif "/hostjob/" in code.co_filename:
                name = f"{code.co_filename.split('/hostjob/', 1)[1]}:{code.co_name}"
            if name is None:
                self.stack.append(-1)
                return
            depth = sum(1 for i in self.stack if i >= 0)
            self.stack.append(len(self.nodes))
            self.nodes.append([depth, name, time.perf_counter(), 0.0])
        elif event == "return" and self.stack:
            index = self.stack.pop()
            if index >= 0:
                node = self.nodes[index]
                start = node[2]
                assert isinstance(start, float)
                node[3] = (time.perf_counter() - start) * 1000

    def print(self, depth: int, minimum: float) -> None:
        for level, name, _start, ms in self.nodes:
            assert isinstance(level, int) and isinstance(ms, float)
            if level <= depth and ms >= minimum:
                print(f"{'  ' * level}{ms:7.2f} ms  {name}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=6, help="deepest level shown (default 6)")
    parser.add_argument("--min", type=float, default=0.1, help="shortest node shown, in ms")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then hostjob's arguments")
    ns = parser.parse_args()
    argv = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if not argv:
        parser.error("give the hostjob command after --")
    sys.path.insert(0, site_packages())
    tree = Tree()
    start = time.perf_counter()
    sys.setprofile(tree.hook)
    try:
        from hostjob.cli.main import main as hostjob_main

        code = hostjob_main(argv)
    finally:
        sys.setprofile(None)
    total = (time.perf_counter() - start) * 1000
    sys.stdout.flush()
    tree.print(ns.depth, ns.min)
    print(f"{total:7.2f} ms in all (profiled), exit {code}", file=sys.stderr)
    # As bin/hostjob does: a created container's init holds our stdio; do not linger.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
