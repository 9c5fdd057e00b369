"""The job on cgroup v1: one directory per mounted hierarchy.

Every hierarchy is joined, named ones (``name=systemd``) included, as runc does;
on a hybrid host the cgroup2 mount (``/sys/fs/cgroup/unified``) is one more
hierarchy: controllers bound only there (e.g. ``hugetlb``) are used there, and
its ``cgroup.kill`` ends the job atomically.
"""

from __future__ import annotations

from hostjob.cgroups._fs import Dir
from hostjob.cgroups._manager import Entry, Manager, OOMWatcher, mkdir_p, rmdirs
from hostjob.errors import CgroupError, CgroupExists, MissingController

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.cgroups import Mounts
    from hostjob.spec.resources import CPU, Resources


def _cpu_set(c: CPU) -> bool:
    return bool(
        c.shares
        or c.quota
        or c.period
        or c.burst is not None
        or c.idle is not None
        or c.realtime_period
        or c.realtime_runtime
    )


class V1Manager(Manager):
    """The cgroup ``path`` in each hierarchy of ``mounts``."""

    __slots__ = ("_by_controller", "_mountpoints", "_unified", "_unified_mount")

    version = 1
    EXPECTED = ("blkio", "cpu", "cpuacct", "cpuset", "freezer", "memory", "pids")

    def __init__(self, path: str, mounts: Mounts) -> None:
        dirs: list[Dir] = []
        self._mountpoints: list[str] = []
        self._by_controller: dict[str, Dir] = {}
        for h in mounts.hierarchies:
            mountpoint = h.mountpoint.rstrip("/")
            d = Dir(mountpoint + path)
            dirs.append(d)
            self._mountpoints.append(mountpoint)
            for controller in h.controllers:
                self._by_controller[controller] = d
        self._unified: Dir | None = None
        self._unified_mount = ""
        if mounts.unified is not None:
            self._unified_mount = mounts.unified.mountpoint.rstrip("/")
            self._unified = Dir(self._unified_mount + path)
            dirs.append(self._unified)
            self._mountpoints.append(self._unified_mount)
        super().__init__(path, dirs)

    def entry(self) -> Entry:

        unified = self._unified.path if self._unified is not None else None
        return Entry([d.path + "/tasks" for d in self._dirs if d is not self._unified], unified)

    def dir(self, controller: str) -> Dir | None:
        """The job's directory in the hierarchy of a v1 controller."""
        return self._by_controller.get(controller)

    def _unified_controllers(self) -> set[str]:
        # unified (cgroup2's core files) is imported where used: delete, ps and the v1
        # freezer never need it.
        from hostjob.cgroups import unified

        if self._unified is None:
            return set()
        root = Dir(self._unified_mount)
        try:
            return unified.controllers(root)
        finally:
            root.close()

    def check(self, resources: Resources | None) -> None:
        available = set(self._by_controller) | self._unified_controllers()
        self._check(resources, available)
        self._warn_missing(available)

    def create(self, resources: Resources | None = None, *, exclusive: bool = False) -> None:
        from hostjob.cgroups import unified

        in_unified = self._unified_controllers()
        available = set(self._by_controller) | in_unified
        self._check(resources, available)
        self._warn_missing(available)
        cpuset = self._by_controller.get("cpuset")
        made: list[str] = []
        try:
            for mountpoint, d in zip(self._mountpoints, self._dirs, strict=True):
                new = mkdir_p(mountpoint, self.path, _cpuset_parent if d is cpuset else None)
                made += new
                if exclusive and d.path not in new:
                    raise CgroupExists(self.path, d.path)
            if cpuset is not None:
                from hostjob.cgroups.v1 import cpuset as _cpuset

                _cpuset.ensure(cpuset, self._mountpoints[self._dirs.index(cpuset)], self.path)
            if self._unified is not None and in_unified:
                enabled = unified.enable(self._unified_mount, self.path, self._unified, in_unified)
                if (
                    resources is not None
                    and resources.hugepage_limits
                    and "hugetlb" not in self._by_controller
                    and "hugetlb" not in enabled
                ):
                    raise CgroupError(
                        f"cgroup controller 'hugetlb' could not be enabled for"
                        f" {self._unified.path} but linux.resources.hugepageLimits needs it"
                    )
            if resources is not None:
                self._apply(resources)
        except BaseException:
            self.close()
            rmdirs(made)
            raise

    def update(self, resources: Resources) -> None:
        from hostjob.cgroups import unified

        if not self.exists():
            raise CgroupError(f"cgroup {self.path} does not exist")
        available = set(self._by_controller)
        if resources.hugepage_limits and self._unified is not None:
            available |= unified.controllers(self._unified)
        self._check(resources, available)
        self._apply(resources)

    def _apply(self, res: Resources) -> None:
        get = self._by_controller.get
        if res.memory is not None and (d := get("memory")) is not None:
            from hostjob.cgroups.v1 import memory

            memory.apply(d, res.memory)
        c = res.cpu
        if c is not None:
            if _cpu_set(c) and (d := get("cpu")) is not None:
                from hostjob.cgroups.v1 import cpu

                cpu.apply(d, c)
            if (c.cpus or c.mems) and (d := get("cpuset")) is not None:
                from hostjob.cgroups.v1 import cpuset

                cpuset.apply(d, c)
        if res.pids is not None and (d := get("pids")) is not None:
            from hostjob.cgroups import pids

            pids.apply(d, res.pids)
        if res.block_io is not None and (d := get("blkio")) is not None:
            from hostjob.cgroups.v1 import blkio

            blkio.apply(d, res.block_io)
        if res.hugepage_limits:
            if (d := get("hugetlb")) is not None:
                from hostjob.cgroups.v1 import hugetlb

                hugetlb.apply(d, res.hugepage_limits)
            elif self._unified is not None:
                from hostjob.cgroups.v2 import hugetlb as hugetlb2

                hugetlb2.apply(self._unified, res.hugepage_limits)

    # --- freezer, kill ------------------------------------------------------------------

    def _freezer(self) -> tuple[Dir, bool]:
        """The directory that freezes the job, and whether it is a v1 freezer."""
        d = self._by_controller.get("freezer")
        if d is not None:
            return d, True
        if self._unified is not None and self._unified.has("cgroup.freeze"):
            return self._unified, False
        raise MissingController("freezer", "freezing the job")

    def freeze(self) -> None:
        d, v1 = self._freezer()
        if v1:
            from hostjob.cgroups.v1 import freezer

            freezer.freeze(d)
        else:
            from hostjob.cgroups import unified

            unified.freeze(d)

    def thaw(self) -> None:
        d, v1 = self._freezer()
        if v1:
            from hostjob.cgroups.v1 import freezer

            freezer.thaw(d)
        else:
            from hostjob.cgroups import unified

            unified.thaw(d)

    def frozen(self) -> bool:
        d, v1 = self._freezer()
        if v1:
            from hostjob.cgroups.v1 import freezer

            return freezer.frozen(d)
        from hostjob.cgroups import unified

        return unified.frozen(d)

    def kill_all(self, sig: int) -> None:
        from hostjob.cgroups import unified
        from hostjob.linux import signals

        if sig == signals.SIGKILL and self._unified is not None and unified.kill(self._unified):
            # Atomic and fork-proof for everything in the unified cgroup; rounds catch
            # any process that joined only v1 hierarchies.
            self._signal_rounds(sig)
            # A process frozen by the v1 freezer acts on SIGKILL only once thawed.
            try:
                if self.frozen():
                    self.thaw()
            except CgroupError:
                pass
            return
        self._signal_frozen(sig)

    # --- accounting ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        from hostjob.cgroups import pids
        from hostjob.cgroups.stats import new_stats
        from hostjob.cgroups.v1 import blkio, cpu, hugetlb, memory

        if not self.exists():
            raise CgroupError(f"cgroup {self.path} does not exist")
        out = new_stats()
        get = self._by_controller.get
        if (d := get("cpu")) is not None:
            cpu.throttling_stats(d, out)
        if (d := get("cpuacct")) is not None:
            cpu.usage_stats(d, out)
        if (d := get("memory")) is not None:
            memory.stats(d, out)
        if (d := get("pids")) is not None:
            pids.stats(d, out)
        if (d := get("blkio")) is not None:
            blkio.stats(d, out)
        if (d := get("hugetlb")) is not None:
            hugetlb.stats(d, out)
        elif self._unified is not None:
            from hostjob.cgroups.v2 import hugetlb as hugetlb2

            hugetlb2.stats(self._unified, out)
        return out

    def _memory(self, what: str) -> Dir:
        d = self._by_controller.get("memory")
        if d is None:
            raise MissingController("memory", what)
        return d

    def oom_kill_count(self) -> int:
        from hostjob.cgroups.v1 import memory

        d = self._by_controller.get("memory")
        return 0 if d is None else memory.oom_kill_count(d)

    def oom_watcher(self) -> OOMWatcher:
        from hostjob.cgroups.v1 import memory

        return memory.Watcher(self._memory("OOM events"))


def _cpuset_parent(path: str) -> None:
    from hostjob.cgroups.v1 import cpuset

    cpuset.new_parent(path)
