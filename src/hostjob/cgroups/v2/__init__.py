"""The job on a cgroup v2 (unified) hierarchy: one directory, every controller in it."""

from __future__ import annotations

from hostjob.cgroups import unified
from hostjob.cgroups._fs import Dir, keyed_value
from hostjob.cgroups._manager import Entry, Manager, OOMWatcher, mkdir_p, rmdirs
from hostjob.cgroups.resources import requirements
from hostjob.errors import CgroupError, CgroupExists

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.spec.resources import Resources


class V2Manager(Manager):
    """The cgroup ``path`` under the cgroup2 mount ``mountpoint``."""

    __slots__ = ("_dir", "mountpoint")

    version = 2
    EXPECTED = ("cpu", "cpuset", "io", "memory", "pids")

    def __init__(self, path: str, mountpoint: str) -> None:
        self.mountpoint = mountpoint.rstrip("/")
        self._dir = Dir(self.mountpoint + path)
        super().__init__(path, [self._dir])

    def entry(self) -> Entry:

        return Entry([], self._dir.path)

    def _available(self) -> set[str]:
        root = Dir(self.mountpoint)
        try:
            return unified.controllers(root)
        finally:
            root.close()

    def check(self, resources: Resources | None) -> None:
        available = self._available()
        self._check(resources, available)
        self._warn_missing(available)

    def create(self, resources: Resources | None = None, *, exclusive: bool = False) -> None:
        available = self._available()
        self._check(resources, available)
        self._warn_missing(available)
        made = mkdir_p(self.mountpoint, self.path)
        try:
            if exclusive and self._dir.path not in made:
                raise CgroupExists(self.path, self._dir.path)
            enabled = unified.enable(self.mountpoint, self.path, self._dir, available)
            if resources is not None:
                self._require(resources, enabled)
                self._apply(resources)
        except BaseException:
            self._dir.close()
            rmdirs(made)
            raise

    def update(self, resources: Resources) -> None:
        if not self.exists():
            raise CgroupError(f"cgroup {self._dir.path} does not exist")
        enabled = unified.controllers(self._dir)
        self._check(resources, enabled)
        self._apply(resources)

    def _require(self, res: Resources, enabled: set[str]) -> None:
        for controller, field in requirements(res, 2):
            if controller not in enabled:
                raise CgroupError(
                    f"cgroup controller {controller!r} could not be enabled for"
                    f" {self._dir.path} but {field} needs it"
                )

    def _apply(self, res: Resources) -> None:
        # runc's order: pids, memory, io, cpu, cpuset, hugetlb, unified last (it overrides).
        d = self._dir
        if res.pids is not None:
            from hostjob.cgroups import pids

            pids.apply(d, res.pids)
        if res.memory is not None:
            from hostjob.cgroups.v2 import memory

            memory.apply(d, res.memory)
        if res.block_io is not None:
            from hostjob.cgroups.v2 import io

            io.apply(d, res.block_io)
        c = res.cpu
        if c is not None:
            from hostjob.cgroups.v2 import cpu, cpuset

            cpu.apply(d, c)
            cpuset.apply(d, c)
        if res.hugepage_limits:
            from hostjob.cgroups.v2 import hugetlb

            hugetlb.apply(d, res.hugepage_limits)
        for key, value in (res.unified or {}).items():
            d.write(key, value)

    # --- freezer, kill ------------------------------------------------------------------

    def freeze(self) -> None:
        unified.freeze(self._dir)

    def thaw(self) -> None:
        unified.thaw(self._dir)

    def frozen(self) -> bool:
        return unified.frozen(self._dir)

    def kill_all(self, sig: int) -> None:
        from hostjob.linux import signals

        if sig == signals.SIGKILL and unified.kill(self._dir):
            return
        self._signal_frozen(sig)

    def wait_empty(self, timeout: float, idle: Callable[[float], object] | None = None) -> bool:
        if idle is not None:  # the caller has work to do between two looks
            return super().wait_empty(timeout, idle)
        # cgroup.events "populated" covers sub-cgroups and wakes us by POLLPRI.
        return unified.wait_event(self._dir, "populated", 0, timeout) is not False

    # --- accounting ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        from hostjob.cgroups import pids
        from hostjob.cgroups.stats import new_stats
        from hostjob.cgroups.v2 import cpu, hugetlb, io, memory

        d = self._dir
        if not self.exists():
            raise CgroupError(f"cgroup {d.path} does not exist")
        out = new_stats()
        cpu.stats(d, out)
        memory.stats(d, out)
        pids.stats(d, out)
        io.stats(d, out)
        hugetlb.stats(d, out)
        return out

    def oom_kill_count(self) -> int:
        return keyed_value(self._dir.read_optional("memory.events"), "oom_kill")

    def oom_watcher(self) -> OOMWatcher:
        from hostjob.cgroups.v2 import memory

        return memory.Watcher(self._dir)
