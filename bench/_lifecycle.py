"""bench/lifecycle: ``RUNTIME run`` of /bin/true and ``create`` + ``start`` + wait + ``delete``
on the same bundle content, for each runtime, interleaved in one run; ratios against runc.
Then each command on its own (``create``, ``start``, ``state``, ``kill``, ``delete`` of a
container running ``sleep``), and for hostjob the time above a bare ``python -S -c pass``
of its own interpreter started the same way: the interpreter's floor, which every command
of a Python runtime pays, against what is hostjob's own cost.

Every runtime gets the same config (``runc spec``'s, non-terminal: its own PID, network, IPC,
UTS and mount namespaces, /proc, /dev, /sys mounts, read-only rootfs; hostjob ignores the
namespaces and mounts it does not honour), the same busybox rootfs, its own ``--root`` and its
own cgroup ``/compat-bench/<runtime>`` under a temp dir. create+start+delete is timed as a
shim does it: ``create --pid-file``, ``start``, reap the init's exit status as subreaper,
``delete``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from _common import (
    BASELINE,
    Result,
    become_subreaper,
    call,
    common_args,
    export,
    harness,
    image,
    machine_meta,
    measure,
    note,
    print_ab,
    print_table,
    reap_strays,
    report_problems,
    resolve_runtimes,
    timed,
    wait_status,
)
from tests.helpers import KEPT_IN_ROOT

if TYPE_CHECKING:
    import os

OPS = ("run /bin/true", "create+start+delete")
COMMANDS = ("create", "start", "state", "kill", "delete")
FLOOR = "python -S -c pass"
CGROUP_PARENT = "/compat-bench"


class Lifecycle:
    def __init__(
        self, workdir: Path, runtimes: list[harness.Runtime], seccomp: Path | None = None
    ) -> None:
        self.workdir = workdir
        self.rootfs = image.build_rootfs(workdir / "rootfs")
        self.bundles: dict[str, Path] = {}
        self.sleepers: dict[str, Path] = {}
        self.roots: dict[str, Path] = {}
        for r in runtimes:
            self.bundles[r.name] = harness.write_bundle(
                workdir / f"bundle-{r.name}",
                self.rootfs,
                ["/bin/true"],
                cgroups_path=f"{CGROUP_PARENT}/{r.name}",
                job_container=r.is_job_container,
            )
            self.sleepers[r.name] = harness.write_bundle(
                workdir / f"sleeper-{r.name}",
                self.rootfs,
                ["/bin/sleep", "1000"],
                cgroups_path=f"{CGROUP_PARENT}/{r.name}-sleeper",
                job_container=r.is_job_container,
            )
            self.roots[r.name] = workdir / f"state-{r.name}"
            self.roots[r.name].mkdir()
        if seccomp is not None:  # every runtime's configs get the same linux.seccomp
            profile = json.loads(seccomp.read_text())
            for bundle in (*self.bundles.values(), *self.sleepers.values()):
                config = json.loads((bundle / "config.json").read_text())
                config["linux"]["seccomp"] = profile
                (bundle / "config.json").write_text(json.dumps(config, indent=2))

    def cmd(self, r: harness.Runtime, *args: str | os.PathLike[str]) -> list[str]:
        return [str(r.client_path), "--root", str(self.roots[r.name]), *map(str, args)]

    def cid(self, r: harness.Runtime) -> str:
        return f"bench-{r.name}"

    def run(self, r: harness.Runtime) -> None:
        rc = call(self.cmd(r, "run", "--bundle", self.bundles[r.name], self.cid(r)))
        if rc != 0:
            raise harness.HarnessError(f"{r.name} run exited {rc}")
        reap_strays()

    def create_start_delete(self, r: harness.Runtime) -> None:
        cid = self.cid(r)
        pidfile = self.workdir / f"{r.name}.pid"
        rc = call(
            self.cmd(r, "create", "--bundle", self.bundles[r.name], "--pid-file", pidfile, cid)
        )
        if rc != 0:
            raise harness.HarnessError(f"{r.name} create exited {rc}")
        init = int(pidfile.read_text())
        if call(self.cmd(r, "start", cid)) != 0:
            raise harness.HarnessError(f"{r.name} start failed")
        st = wait_status(init)  # the init is our child: we are its subreaper
        if st != 0:
            raise harness.HarnessError(f"{r.name}: /bin/true exited {st}")
        if call(self.cmd(r, "delete", cid)) != 0:
            raise harness.HarnessError(f"{r.name} delete failed")
        reap_strays()

    def each_command(self, r: harness.Runtime) -> dict[str, float]:
        """create, start, state, kill and delete of a sleeping container, each timed."""
        cid = f"{self.cid(r)}-each"
        pidfile = self.workdir / f"{r.name}-each.pid"
        bundle = self.sleepers[r.name]
        argv = {
            "create": self.cmd(r, "create", "--bundle", bundle, "--pid-file", pidfile, cid),
            "start": self.cmd(r, "start", cid),
            "state": self.cmd(r, "state", cid),
            "kill": self.cmd(r, "kill", cid, "KILL"),
            "delete": self.cmd(r, "delete", cid),
        }
        times: dict[str, float] = {}
        for command in COMMANDS:
            if command == "delete":
                wait_status(int(pidfile.read_text()))  # the killed init, our orphan
            rc = -1

            def step(command: str = command) -> None:
                nonlocal rc
                rc = call(argv[command])

            times[command] = timed(step)
            if rc != 0:
                raise harness.HarnessError(f"{r.name} {command} exited {rc}")
        reap_strays()
        return times

    def check(self, r: harness.Runtime) -> None:
        """One verbose round first, so that a broken runtime says why."""
        cp = harness.run(self.cmd(r, "run", "--bundle", self.bundles[r.name], self.cid(r)))
        harness.run(self.cmd(r, "delete", "--force", self.cid(r)))
        reap_strays()
        if cp.returncode != 0:
            raise harness.HarnessError(
                f"{r.name} cannot run the bench bundle (exit {cp.returncode}):\n"
                f"{cp.stdout}{cp.stderr}"
            )
        self.create_start_delete(r)
        self.each_command(r)

    def cleanup(self, runtimes: list[harness.Runtime]) -> list[str]:
        problems = []
        for r in runtimes:
            for cid in (self.cid(r), f"{self.cid(r)}-each"):
                harness.run(self.cmd(r, "delete", "--force", cid), timeout=60)
            left = [p.name for p in self.roots[r.name].iterdir() if p.name not in KEPT_IN_ROOT]
            if left:
                problems.append(f"{r.name} left state: {left}")
        reap_strays()
        stuck = harness.remove_cgroup(CGROUP_PARENT)
        if stuck:
            problems.append(f"cgroups left: {stuck}")
        mounts = harness.unmount_all_under(self.workdir)
        if mounts:
            problems.append(f"mounts left: {mounts}")
        return problems


def main(argv: list[str] | None = None) -> int:
    p = common_args(__doc__ or "")
    p.add_argument("--runs", type=int, default=30, help="measured rounds (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="dropped rounds (default 3)")
    p.add_argument(
        "--seccomp",
        type=Path,
        help="a runtime-spec seccomp profile (JSON) every runtime's config gets as linux.seccomp",
    )
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hostjob-bench-lifecycle-"))
    rc = 0
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            runtimes = resolve_runtimes(args, workdir, stack)
            lc = Lifecycle(workdir, runtimes, args.seccomp)
            stack.callback(report_problems, "lifecycle", functools.partial(lc.cleanup, runtimes))
            become_subreaper()
            for r in runtimes:
                lc.check(r)

            def one(op: str, r: harness.Runtime, i: int) -> float:
                if op == OPS[0]:
                    return timed(lambda: lc.run(r))
                return timed(lambda: lc.create_start_delete(r))

            note(f"{args.warmup} warm-up + {args.runs} measured rounds, runtimes interleaved")
            results = measure(OPS, runtimes, one, args.runs, args.warmup)
            print_table(results)
            per_command = measure_commands(lc, runtimes, args.runs, args.warmup)
            print()
            print_command_table(per_command, runtimes)
            if any(r.name == BASELINE for r in runtimes):
                print_ab(per_command)
            export(
                args.export_json,
                results + per_command,
                {"bench": "lifecycle", **machine_meta(runtimes)},
            )
    except harness.HarnessError as e:
        print(f"bench/lifecycle: error: {e}", file=sys.stderr)
        rc = 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


def interpreter_of(path: Path) -> list[str]:
    """The interpreter line of a script (``#!/venv/bin/python -S``), as argv."""
    with open(path, "rb") as f:
        first = f.readline().decode().strip()
    if not first.startswith("#!"):
        raise harness.HarnessError(f"{path} is not a script: no interpreter floor to measure")
    return first[2:].split()


def measure_commands(
    lc: Lifecycle, runtimes: list[harness.Runtime], runs: int, warmup: int
) -> list[Result]:
    """Each command of a lifecycle on its own, runtimes interleaved (rotating order), and
    the floor (hostjob's interpreter doing nothing) once per round beside them."""
    results = {(c, r.name): Result(c, r.name) for c in COMMANDS for r in runtimes}
    hostjob = next((r for r in runtimes if r.name == "hostjob"), None)
    floor = Result(FLOOR, "hostjob")
    floor_argv = [*interpreter_of(hostjob.client_path), "-c", "pass"] if hostjob else []
    order = list(runtimes)
    for i in range(warmup + runs):
        for r in order:
            times = lc.each_command(r)
            if i >= warmup:
                for command, t in times.items():
                    results[(command, r.name)].times.append(t)
        if floor_argv:
            t = timed(lambda: _check_call(floor_argv))
            if i >= warmup:
                floor.times.append(t)
        order = order[1:] + order[:1]
    out = [results[(c, r.name)] for c in COMMANDS for r in runtimes]
    return out + ([floor] if floor.times else [])


def _check_call(argv: list[str]) -> None:
    if call(argv) != 0:
        raise harness.HarnessError(f"{' '.join(argv)} failed")


def print_command_table(results: list[Result], runtimes: list[harness.Runtime]) -> None:
    """Medians per command; hostjob/runc; hostjob's time above its interpreter's floor."""
    med = {(r.op, r.runtime): r.median for r in results}
    floor = med.get((FLOOR, "hostjob"))
    names = [r.name for r in runtimes]
    head = f"{'command (median ms)':<22}" + "".join(f"{n:>10}" for n in names)
    if "hostjob" in names:
        head += f"{'hj/runc':>9}{'hj - floor':>12}"
    if BASELINE in names:
        head += f"{'hj/base':>9}"
    print(head)
    print("-" * len(head))
    for command in COMMANDS:
        line = f"{command:<22}" + "".join(f"{med[(command, n)] * 1e3:10.1f}" for n in names)
        if "hostjob" in names:
            hj = med[(command, "hostjob")]
            line += f"{hj / med[(command, 'runc')]:9.2f}"
            line += f"{(hj - floor) * 1e3:12.1f}" if floor is not None else f"{'-':>12}"
            if BASELINE in names:
                line += f"{hj / med[(command, BASELINE)]:9.2f}"
        print(line)
    if floor is not None:
        print(f"{'floor: ' + FLOOR:<22}" + f"{floor * 1e3:10.1f}  (hostjob's interpreter)")


__all__ = ["main"]
