"""bench/lifecycle: ``RUNTIME run`` of /bin/true and ``create`` + ``start`` + wait + ``delete``
on the same bundle content, for each runtime, interleaved in one run; ratios against runc.

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
import shutil
import sys
import tempfile
from pathlib import Path

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
    wait_status,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os

OPS = ("run /bin/true", "create+start+delete")
CGROUP_PARENT = "/compat-bench"


class Lifecycle:
    def __init__(self, workdir: Path, runtimes: list[harness.Runtime]) -> None:
        self.workdir = workdir
        self.rootfs = image.build_rootfs(workdir / "rootfs")
        self.bundles: dict[str, Path] = {}
        self.roots: dict[str, Path] = {}
        for r in runtimes:
            self.bundles[r.name] = harness.write_bundle(
                workdir / f"bundle-{r.name}",
                self.rootfs,
                ["/bin/true"],
                cgroups_path=f"{CGROUP_PARENT}/{r.name}",
                job_container=r.is_job_container,
            )
            self.roots[r.name] = workdir / f"state-{r.name}"
            self.roots[r.name].mkdir()

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

    def cleanup(self, runtimes: list[harness.Runtime]) -> list[str]:
        problems = []
        for r in runtimes:
            harness.run(self.cmd(r, "delete", "--force", self.cid(r)), timeout=60)
            left = [p.name for p in self.roots[r.name].iterdir()]
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
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hostjob-bench-lifecycle-"))
    rc = 0
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            runtimes = resolve_runtimes(args, workdir, stack)
            lc = Lifecycle(workdir, runtimes)
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
            export(args.export_json, results, {"bench": "lifecycle", **machine_meta(runtimes)})
    except harness.HarnessError as e:
        print(f"bench/lifecycle: error: {e}", file=sys.stderr)
        rc = 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


__all__ = ["main"]
