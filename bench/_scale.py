"""bench/scale: ``list``, ``state`` and ``events --stats`` with many detached containers.

``--count`` (default 200) containers running ``sleep`` are started with each runtime (runc
with ``runc spec``'s config: its own mount, PID, network, IPC and UTS namespaces and a
read-only rootfs, so nothing touches the host; hostjob with the same config, which it runs
as job containers), each in its own ``--root`` and cgroup parent ``/scale-bench/<runtime>``.
Then ``list``, ``list --format json``, ``state ID`` and ``events --stats ID`` are timed,
runtimes interleaved, ratios against runc printed (target: ``list`` <= 1.0x). Finally it
counts resident processes of each runtime (runc keeps none per container; hostjob must
keep none either) and removes everything.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _common import (
    become_subreaper,
    call,
    common_args,
    export,
    harness,
    image,
    machine_meta,
    measure,
    note,
    print_table,
    reap_strays,
    report_problems,
    resolve_runtimes,
    timed,
)
from tests.helpers import KEPT_IN_ROOT

if TYPE_CHECKING:
    import os

OPS = ("list", "list --format json", "state ID", "events --stats ID")
CGROUP_PARENT = "/scale-bench"


class Scale:
    def __init__(self, workdir: Path, runtimes: list[harness.Runtime], count: int) -> None:
        self.workdir = workdir
        self.count = count
        self.rootfs = image.build_rootfs(workdir / "rootfs")
        self.bundles: dict[tuple[str, int], Path] = {}
        self.roots: dict[str, Path] = {}
        for r in runtimes:
            self.roots[r.name] = workdir / f"state-{r.name}"
            self.roots[r.name].mkdir()

    def cmd(self, r: harness.Runtime, *args: str | os.PathLike[str]) -> list[str]:
        return [str(r.client_path), "--root", str(self.roots[r.name]), *map(str, args)]

    def cid(self, r: harness.Runtime, i: int) -> str:
        return f"scale-{r.name}-{i:04d}"

    def bundle(self, r: harness.Runtime, i: int) -> Path:
        # One bundle per container: each has its own cgroup, as a shim would give it.
        return harness.write_bundle(
            self.workdir / f"bundle-{r.name}-{i:04d}",
            self.rootfs,
            ["sleep", "86400"],
            cgroups_path=f"{CGROUP_PARENT}/{r.name}/{i:04d}",
            job_container=r.is_job_container,
        )

    def start_all(self, r: harness.Runtime) -> float:
        t0 = time.perf_counter()
        for i in range(self.count):
            cid = self.cid(r, i)
            if call(self.cmd(r, "create", "--bundle", self.bundle(r, i), cid)) != 0:
                raise harness.HarnessError(f"{r.name} create {cid} failed")
            if call(self.cmd(r, "start", cid)) != 0:
                raise harness.HarnessError(f"{r.name} start {cid} failed")
            reap_strays()
        return time.perf_counter() - t0

    def check(self, r: harness.Runtime) -> None:
        cp = harness.run(self.cmd(r, "list", "--format", "json"))
        import json

        listed = json.loads(cp.stdout or "[]")
        running = [c for c in listed if c.get("status") == "running"]
        if len(running) != self.count:
            raise harness.HarnessError(
                f"{r.name} lists {len(running)} running containers, expected {self.count}"
            )

    def one(self, op: str, r: harness.Runtime, i: int) -> float:
        cid = self.cid(r, i % self.count)
        argv = {
            "list": ("list",),
            "list --format json": ("list", "--format", "json"),
            "state ID": ("state", cid),
            "events --stats ID": ("events", "--stats", cid),
        }[op]
        full = self.cmd(r, *argv)

        def go() -> None:
            if call(full) != 0:
                raise harness.HarnessError(f"{r.name} {op} failed")

        return timed(go)

    def cleanup(self, runtimes: list[harness.Runtime]) -> list[str]:
        problems = []
        for r in runtimes:
            for i in range(self.count):
                call(self.cmd(r, "delete", "--force", self.cid(r, i)))
            reap_strays()
            left = [p.name for p in self.roots[r.name].iterdir() if p.name not in KEPT_IN_ROOT]
            if left:
                problems.append(f"{r.name} left state: {left[:5]}")
        stuck = harness.remove_cgroup(CGROUP_PARENT)
        if stuck:
            problems.append(f"cgroups left: {stuck[:5]}")
        mounts = harness.unmount_all_under(self.workdir)
        if mounts:
            problems.append(f"mounts left: {mounts[:5]}")
        return problems


def resident(r: harness.Runtime) -> int:
    """Processes running the runtime's binary (a monitor per container would show here)."""
    return len(harness.processes_matching(str(r.path)))


def main(argv: list[str] | None = None) -> int:
    p = common_args(__doc__ or "")
    p.set_defaults(runtimes="runc,hostjob")
    p.add_argument("--count", type=int, default=200, help="containers per runtime (200)")
    p.add_argument("--runs", type=int, default=20, help="measured rounds (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="dropped rounds (default 3)")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hostjob-bench-scale-"))
    rc = 0
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            runtimes = resolve_runtimes(args, workdir, stack)
            sc = Scale(workdir, runtimes, args.count)
            stack.callback(report_problems, "scale", functools.partial(sc.cleanup, runtimes))
            become_subreaper()
            for r in runtimes:
                took = sc.start_all(r)
                sc.check(r)
                note(f"{r.name}: {args.count} containers running (create+start: {took:.1f} s)")
            note(f"{args.warmup} warm-up + {args.runs} measured rounds, runtimes interleaved")
            results = measure(OPS, runtimes, sc.one, args.runs, args.warmup)
            print_table(results)
            for r in runtimes:
                print(f"resident {r.name} processes with {args.count} containers: {resident(r)}")
            base = next(x for x in results if x.op == "list" and x.runtime == "runc")
            for x in results:
                if x.op == "list" and x.runtime != "runc":
                    verdict = "ok" if x.median <= base.median else "OVER TARGET"
                    print(
                        f"list ratio {x.runtime}/runc with {args.count} containers: "
                        f"{x.mean / base.mean:.2f}x mean, {x.median / base.median:.2f}x median "
                        f"(target <= 1.0x: {verdict})"
                    )
            export(args.export_json, results, {"bench": "scale", **machine_meta(runtimes)})
    except harness.HarnessError as e:
        print(f"bench/scale: error: {e}", file=sys.stderr)
        rc = 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


__all__ = ["main"]
