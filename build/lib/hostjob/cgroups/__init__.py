"""Basic cgroup placement (interim; the full v1/v2 package replaces this module).

Every mounted hierarchy (v1 controllers, hybrid unified, or pure v2) gets the
container's cgroup directory; the init joins them all before it execs.
"""

from __future__ import annotations

import errno
import os
import time

from hostjob.runtime.signals import sig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec.runtime import Resources

_mounts: list[tuple[str, str, str]] | None = None  # (mount point, root, fstype)


def _hierarchies() -> list[tuple[str, str, str]]:
    global _mounts
    if _mounts is None:
        found = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                fstype = fields[sep + 1]
                if fstype in ("cgroup", "cgroup2"):
                    found.append((fields[4], fields[3], fstype))
        _mounts = found
    return _mounts


def resolve_path(cgroups_path: str, container_id: str, systemd: bool) -> str:
    if not cgroups_path:
        return f"/hostjob/{container_id}"
    if cgroups_path.startswith("/"):
        return os.path.normpath(cgroups_path)
    return os.path.normpath(f"/hostjob/{cgroups_path}")


class Manager:
    __slots__ = ("dirs", "path", "version")

    def __init__(self, path: str) -> None:
        self.path = path
        mounts = _hierarchies()
        self.version = 2 if all(t == "cgroup2" for _m, _r, t in mounts) else 1
        self.dirs = [m + path for m, _r, _t in mounts]

    def create(self, resources: Resources | None = None) -> None:
        for d in self.dirs:
            os.makedirs(d, exist_ok=True)
        for d in self.dirs:
            if os.path.exists(os.path.join(d, "cpuset.cpus")):
                self._init_cpuset(d)

    @staticmethod
    def _init_cpuset(d: str) -> None:
        chain = []
        cur = d
        while os.path.exists(os.path.join(cur, "cpuset.cpus")):
            chain.append(cur)
            cur = os.path.dirname(cur)
        for c in reversed(chain):
            for name in ("cpuset.cpus", "cpuset.mems"):
                path = os.path.join(c, name)
                with open(path) as f:
                    if f.read().strip():
                        continue
                with open(os.path.join(os.path.dirname(c), name)) as f:
                    value = f.read().strip()
                with open(path, "w") as f:
                    f.write(value)

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def add(self, pid: int) -> None:
        for p in self.procs_files():
            with open(p, "w") as f:
                f.write(str(pid))

    def exists(self) -> bool:
        return any(os.path.isdir(d) for d in self.dirs)

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.dirs[0], "cgroup.procs")) as f:
                return sorted(int(x) for x in f.read().split())
        except OSError:
            return []

    def frozen(self) -> bool:
        return False

    def kill_all(self, sig: int = sig.SIGKILL) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def destroy(self) -> None:
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            self.kill_all(sig.SIGKILL)
            time.sleep(0.005)
        for d in self.dirs:
            for _ in range(200):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY:
                        raise
                    time.sleep(0.005)


def open_manager(path: str, *, root: str | None = None) -> Manager:
    return Manager(path)
