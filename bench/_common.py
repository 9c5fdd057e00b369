"""Shared parts of the benchmark scripts (bench/lifecycle, bench/clients).

The clients, runtimes, image and bundle helpers are the compat suite's own
(``tests/compat/harness.py`` and ``tests/compat/image.py``), imported from the repository, so the
benchmarks run exactly what the tests run.

Timing: each command is started with ``posix_spawn`` and waited for, wall clock by
``perf_counter_ns``; runtimes are interleaved round by round (the order rotates every round)
so that drift on the machine hits all of them alike; warm-up rounds are dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from typing import TYPE_CHECKING

from tests.compat import harness, image

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["BASELINE", "REPO", "Result", "harness", "image"]

# The name a --baseline-hostjob runs under: a second hostjob in the same rounds.
BASELINE = "hostjob-base"


# ---- arguments and runtimes -----------------------------------------------------------------


def common_args(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--runtimes",
        default="runc,crun,hostjob",
        help="comma-separated runtimes to compare (default: runc,crun,hostjob)",
    )
    p.add_argument(
        "--hostjob",
        help="the hostjob binary (default: $HOSTJOB_BIN, else the repository's .venv,"
        " installed by scripts/install)",
    )
    p.add_argument(
        "--baseline-hostjob",
        metavar="PATH",
        help="a second hostjob (e.g. an install of the commit before a change), timed as"
        " 'hostjob-base' in the same interleaved rounds: an A/B of a change in one run",
    )
    p.add_argument("--export-json", type=Path, help="write every sample here (JSON)")
    p.add_argument(
        "--crun-hybrid",
        choices=("auto", "mount", "wrap"),
        default="auto",
        help="crun 1.8 refuses a hybrid cgroup host whose cgroup2 holds controllers: 'mount' "
        "moves them to v1 hierarchies for the run and back after; 'wrap' runs crun through a "
        "wrapper that hides cgroup2 in a private mount namespace (adds ~5 ms a call); 'auto' "
        "(default) tries mount, else wraps (a controller enabled in cgroup2's subtree_control "
        "cannot move)",
    )
    return p


def resolve_runtimes(
    args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack
) -> list[harness.Runtime]:
    names = harness.selected_runtime_names(args.runtimes)
    if "runc" not in names:
        names.insert(0, "runc")  # the baseline of every ratio
    if "crun" in names and harness.hybrid_v2_controllers() and args.crun_hybrid != "wrap":
        ctrls = harness.hybrid_v2_controllers()
        try:
            mounts = stack.enter_context(harness.V1ControllerMounts())
        except harness.HarnessError as e:
            if args.crun_hybrid == "mount":
                raise
            note(f"crun: cannot move cgroup2 controllers {ctrls} to v1 ({e}); using the wrapper")
        else:
            stack.callback(_report_restore, mounts)
            note(f"crun: moved cgroup2 controllers {ctrls} to v1 hierarchies for this run")
    hostjob = args.hostjob or os.environ.get("HOSTJOB_BIN")
    if "hostjob" in names and not hostjob:
        hostjob = installed_hostjob()
    runtimes = [harness.make_runtime(n, workdir, hostjob) for n in names]
    if args.baseline_hostjob:
        base = Path(args.baseline_hostjob)
        if not os.access(base, os.X_OK):
            raise harness.HarnessError(f"--baseline-hostjob {base}: not an executable")
        runtimes.append(harness.Runtime(BASELINE, base, is_job_container=True))
    for r in runtimes:
        extra = f" (through {r.client_path})" if r.client_path != r.path else ""
        note(f"{r.name}: {r.path}{extra}")
    return runtimes


def report_problems(what: str, cleanup: Callable[[], list[str]]) -> None:
    """Run a teardown that returns the problems it found; warn about each."""
    for problem in cleanup():
        note(f"WARNING ({what}): {problem}")


def installed_hostjob() -> str:
    """The repository's installed (byte-compiled, non-editable) hostjob, installing it with
    scripts/install if needed: running it from src/ would time the bytecode compiler."""
    import subprocess

    path = REPO / ".venv" / "bin" / "hostjob"
    subprocess.run([str(REPO / "scripts" / "install")], check=True, stdout=subprocess.DEVNULL)
    return str(path)


def _report_restore(mounts: harness.V1ControllerMounts) -> None:
    for w in mounts.warnings:
        note(f"WARNING: {w}")


def note(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


# ---- process spawning -----------------------------------------------------------------------

_DEVNULL = os.open(os.devnull, os.O_RDWR)


def spawn(argv: Sequence[str | os.PathLike[str]], env: dict[str, str] | None = None) -> int:
    """Start ``argv`` with stdio on /dev/null; return its pid."""
    args = [os.fspath(a) for a in argv]
    exe = args[0] if "/" in args[0] else _which(args[0])
    return os.posix_spawn(
        exe,
        args,
        env if env is not None else os.environ,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, _DEVNULL, 0),
            (os.POSIX_SPAWN_DUP2, _DEVNULL, 1),
            (os.POSIX_SPAWN_DUP2, _DEVNULL, 2),
        ],
    )


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    if not found:
        raise harness.HarnessError(f"{name} not found on PATH")
    return found


def wait_status(pid: int) -> int:
    """Wait for ``pid``; its exit status (128+N when killed by signal N)."""
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)


def call(argv: Sequence[str | os.PathLike[str]], env: dict[str, str] | None = None) -> int:
    return wait_status(spawn(argv, env))


def become_subreaper() -> None:
    """Orphans (a container's init after ``create`` exits) become our children, as they do
    for the containerd shim and conmon: we reap their exit status."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_strays() -> None:
    """Reap exited orphans (a runtime's intermediate processes) without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---- measuring ------------------------------------------------------------------------------


class Result:
    """Samples (seconds) of one operation with one runtime."""

    __slots__ = ("op", "runtime", "times")

    def __init__(self, op: str, runtime: str) -> None:
        self.op = op
        self.runtime = runtime
        self.times: list[float] = []

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def stddev(self) -> float:
        return statistics.stdev(self.times) if len(self.times) > 1 else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def as_json(self) -> dict[str, object]:
        return {
            "command": f"{self.op} [{self.runtime}]",
            "op": self.op,
            "runtime": self.runtime,
            "mean": self.mean,
            "stddev": self.stddev,
            "median": self.median,
            "min": min(self.times),
            "max": max(self.times),
            "times": self.times,
        }


def measure(
    ops: Sequence[str],
    runtimes: Sequence[harness.Runtime],
    one: Callable[[str, harness.Runtime, int], float],
    runs: int,
    warmup: int,
) -> list[Result]:
    """Call ``one(op, runtime, i)`` (returns seconds) for ``warmup + runs`` rounds, runtimes
    interleaved with a rotating order; keep the last ``runs`` samples of each."""
    results = {(op, r.name): Result(op, r.name) for op in ops for r in runtimes}
    order = list(runtimes)
    total = warmup + runs
    for i in range(total):
        for op in ops:
            for r in order:
                t = one(op, r, i)
                if i >= warmup:
                    results[(op, r.name)].times.append(t)
        order = order[1:] + order[:1]
        if sys.stderr.isatty():
            print(f"\r# round {i + 1}/{total}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return [results[(op, r.name)] for op in ops for r in runtimes]


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e9


def print_table(results: Sequence[Result], baseline: str = "runc") -> None:
    """Means, spread and ratios against ``baseline`` (mean/mean and median/median)."""
    base = {r.op: r for r in results if r.runtime == baseline}
    head = (
        f"{'operation':<28} {'runtime':<12} {'mean ms':>9} {'± ms':>7} {'median':>8} "
        f"{'min':>7} {'n':>4} {'vs runc':>7} {'vs runc(med)':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        b = base.get(r.op)
        ratio = f"{r.mean / b.mean:.2f}" if b else "-"
        ratio_med = f"{r.median / b.median:.2f}" if b else "-"
        print(
            f"{r.op:<28} {r.runtime:<12} {r.mean * 1e3:9.1f} {r.stddev * 1e3:7.1f} "
            f"{r.median * 1e3:8.1f} {min(r.times) * 1e3:7.1f} {len(r.times):4d} "
            f"{ratio:>7} {ratio_med:>12}"
        )
    if any(r.runtime == BASELINE for r in results):
        print_ab(results)


def print_ab(results: Sequence[Result], a: str = "hostjob", b: str = BASELINE) -> None:
    """``a`` against ``b`` round by round (their times are paired by round, the rounds
    interleaved): the geometric mean of the paired ratios and its 95% interval, which
    holds when the machine's speed drifts between rounds."""
    by = {(r.op, r.runtime): r.times for r in results}
    for op in dict.fromkeys(r.op for r in results):
        xs, ys = by.get((op, a)), by.get((op, b))
        if not xs or not ys:
            continue
        logs = [math.log(x / y) for x, y in zip(xs, ys, strict=False) if x > 0 and y > 0]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
        print(
            f"{op:<28} {a}/{b}: {math.exp(mean):.3f}"
            f" (95%: {math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}, n={len(logs)})"
        )


def export(path: Path | None, results: Sequence[Result], meta: dict[str, object]) -> None:
    if path is None:
        return
    path.write_text(json.dumps({"meta": meta, "results": [r.as_json() for r in results]}, indent=1))
    note(f"samples written to {path}")


def machine_meta(runtimes: Sequence[harness.Runtime]) -> dict[str, object]:
    return {
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "cgroup_mode": harness.cgroup_mode(),
        "runtimes": {r.name: str(r.path) for r in runtimes},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
