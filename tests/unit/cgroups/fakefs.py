"""Fake cgroupfs trees that behave like the kernel's, for the managers' unit tests.

A fake is a real directory tree in a temp dir. ``install(monkeypatch)`` wraps the
four primitives of ``hostjob.cgroups._fs`` (mkdir, rmdir, read, write): the real
operation still happens on the tree (so ``O_NOFOLLOW``, ENOENT and friends are
real), and the fake adds what the kernel would do around it:

v2 (``FakeCgroup2``)
  * a new cgroup gets the core files, and the interface files of exactly the
    controllers enabled in its parent's ``cgroup.subtree_control``;
  * ``cgroup.subtree_control`` takes ``+c``/``-c`` (EINVAL for a controller the
    cgroup lacks), and adds/removes the children's files;
  * ``cgroup.procs`` moves a process (EBUSY in a cgroup that delegates domain
    controllers), lists only live processes; ``cgroup.events`` reports
    ``populated`` (live processes in the subtree) and ``frozen``;
  * ``cgroup.kill`` SIGKILLs the subtree; ``cgroup.freeze`` freezes at once;
  * ``cpu.max``, ``io.max``, ``io.weight`` merge what is written as the kernel does;
    ``cpu.weight`` and ``pids.max`` validate;
  * rmdir fails with EBUSY while processes or sub-cgroups remain.

v1 (``FakeCgroup1``): one directory per hierarchy (``cpu,cpuacct`` co-mounted,
``cpuset``, ``memory``...), new cgroups get their controllers' files, cpuset starts
empty (ENOSPC on join) unless the parent has ``cgroup.clone_children``,
``memory.memsw.limit_in_bytes`` must stay >= ``memory.limit_in_bytes`` (EINVAL),
``cpu.shares`` is clamped to [2, 262144], ``freezer.state`` freezes at once.

The processes in a fake cgroup are real (tests start ``sleep``), so signals are real.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

from hostjob.cgroups import _fs
from tests.helpers import alive

MAX = "max"
HUGE_SIZES = ("2MB", "1GB")

_real_mkdir = _fs.mkdir
_real_rmdir = _fs.rmdir
_real_read_at = _fs.read_at
_real_write_at = _fs.write_at
_real_read_path = _fs.read_path


def _fd_path(dirfd: int) -> str:
    return os.readlink(f"/proc/self/fd/{dirfd}")


def _einval() -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def _ebusy() -> OSError:
    return OSError(errno.EBUSY, os.strerror(errno.EBUSY))


class _Fake:
    """What both fakes share: hooking, path mapping, live-pid bookkeeping."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.writes: list[tuple[str, str]] = []  # (path, value), in order

    def owns(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/")

    def install(self, monkeypatch: object) -> None:
        mp = monkeypatch
        mp.setattr(_fs, "mkdir", self._mkdir)  # type: ignore[attr-defined]
        mp.setattr(_fs, "rmdir", self._rmdir)  # type: ignore[attr-defined]
        mp.setattr(_fs, "read_at", self._read_at)  # type: ignore[attr-defined]
        mp.setattr(_fs, "write_at", self._write_at)  # type: ignore[attr-defined]
        mp.setattr(_fs, "read_path", self._read_path)  # type: ignore[attr-defined]

    # -- hooks ------------------------------------------------------------------------

    def _mkdir(self, path: str) -> bool:
        made = _real_mkdir(path)
        if made and self.owns(path):
            self.populate(path)
        return made

    def _rmdir(self, path: str) -> None:
        if not self.owns(path) or not os.path.isdir(path):
            _real_rmdir(path)
            return
        with os.scandir(path) as it:
            entries = list(it)
        if any(e.is_dir() for e in entries) or self.live_pids(path):
            raise _ebusy()
        for entry in entries:
            os.unlink(entry.path)
        _real_rmdir(path)

    def _read_at(self, dirfd: int, name: str) -> bytes:
        path = _fd_path(dirfd)
        if self.owns(path):
            self.refresh(path, name)
        return _real_read_at(dirfd, name)

    def _read_path(self, path: str) -> bytes:
        directory, name = os.path.split(path)
        if self.owns(directory) and os.path.isdir(directory):
            self.refresh(directory, name)
        return _real_read_path(path)

    def _write_at(self, dirfd: int, name: str, data: bytes) -> None:
        path = _fd_path(dirfd)
        if not self.owns(path):
            _real_write_at(dirfd, name, data)
            return
        value = data.decode()
        self.writes.append((f"{path}/{name}", value))
        # The real open first: a missing file or a symlink fails as it would.
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        os.close(fd)
        content = self.on_write(path, name, value)
        _real_write_at(dirfd, name, content.encode())

    # -- helpers -----------------------------------------------------------------------

    def read(self, path: str, name: str) -> str:
        with open(os.path.join(path, name)) as f:
            return f.read()

    def put(self, path: str, name: str, content: str) -> None:
        with open(os.path.join(path, name), "w") as f:
            f.write(content)

    def own_pids(self, path: str) -> list[int]:
        try:
            text = self.read(path, "cgroup.procs")
        except FileNotFoundError:
            return []
        return [int(x) for x in text.split() if alive(int(x))]

    def live_pids(self, path: str) -> list[int]:
        pids = list(self.own_pids(path))
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                pids += self.live_pids(entry.path)
        return pids

    def move_pid(self, top: str, path: str, pid: int) -> None:
        """Take ``pid`` out of every cgroup of the hierarchy at ``top``, into ``path``."""
        for directory, _dirs, files in os.walk(top):
            if "cgroup.procs" in files and directory != path:
                pids = self.own_pids(directory)
                if pid in pids:
                    pids.remove(pid)
                    self.put(directory, "cgroup.procs", "".join(f"{p}\n" for p in pids))
        pids = [p for p in self.own_pids(path) if p != pid] + [pid]
        self.put(path, "cgroup.procs", "".join(f"{p}\n" for p in pids))

    # -- per version -------------------------------------------------------------------

    def populate(self, path: str) -> None:
        raise NotImplementedError

    def refresh(self, path: str, name: str) -> None:
        raise NotImplementedError

    def on_write(self, path: str, name: str, value: str) -> str:
        raise NotImplementedError


# --- cgroup v2 ---------------------------------------------------------------------------


def _v2_files(controller: str, bfq: bool) -> dict[str, str]:
    if controller == "memory":
        return {
            "memory.current": "0\n",
            "memory.min": "0\n",
            "memory.low": "0\n",
            "memory.high": "max\n",
            "memory.max": "max\n",
            "memory.peak": "0\n",
            "memory.swap.current": "0\n",
            "memory.swap.max": "max\n",
            "memory.swap.events": "high 0\nmax 0\nfail 0\n",
            "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
            "memory.oom.group": "0\n",
            "memory.stat": "anon 0\nfile 0\nkernel 0\nshmem 0\npgfault 0\n",
        }
    if controller == "cpu":
        return {
            "cpu.weight": "100\n",
            "cpu.max": "max 100000\n",
            "cpu.max.burst": "0\n",
            "cpu.idle": "0\n",
        }
    if controller == "cpuset":
        return {
            "cpuset.cpus": "\n",
            "cpuset.mems": "\n",
            "cpuset.cpus.effective": "0-1\n",
            "cpuset.mems.effective": "0\n",
        }
    if controller == "io":
        files = {"io.max": "", "io.weight": "default 100\n", "io.stat": ""}
        if bfq:
            files["io.bfq.weight"] = "default 100\n"
        return files
    if controller == "pids":
        return {"pids.current": "0\n", "pids.max": "max\n", "pids.events": "max 0\n"}
    if controller == "hugetlb":
        files = {}
        for size in HUGE_SIZES:
            files.update(
                {
                    f"hugetlb.{size}.current": "0\n",
                    f"hugetlb.{size}.max": "max\n",
                    f"hugetlb.{size}.events": "max 0\n",
                    f"hugetlb.{size}.rsvd.current": "0\n",
                    f"hugetlb.{size}.rsvd.max": "max\n",
                }
            )
        return files
    return {}


_CORE2 = {
    "cgroup.procs": "",
    "cgroup.threads": "",
    "cgroup.subtree_control": "\n",
    "cgroup.events": "populated 0\nfrozen 0\n",
    "cgroup.freeze": "0\n",
    "cgroup.kill": "",
    "cgroup.type": "domain\n",
    "cgroup.max.depth": "max\n",
    # cpu.stat exists without the cpu controller (usage only), as in the kernel.
    "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
}


class FakeCgroup2(_Fake):
    """A cgroup2 mount at ``root`` whose root cgroup has ``controllers``."""

    def __init__(
        self,
        root: Path,
        controllers: tuple[str, ...] = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids"),
        bfq: bool = False,
        kill_file: bool = True,
    ) -> None:
        super().__init__(root)
        self.controllers = controllers
        self.bfq = bfq
        self.kill_file = kill_file
        os.makedirs(self.root, exist_ok=True)
        for name, content in _CORE2.items():
            self.put(self.root, name, content)
        self.put(self.root, "cgroup.controllers", " ".join(controllers) + "\n")
        # The root cgroup has no freeze/kill/events files.
        for name in ("cgroup.freeze", "cgroup.kill", "cgroup.events"):
            os.unlink(os.path.join(self.root, name))

    def path(self, cgroup: str) -> str:
        return self.root + cgroup

    def enabled(self, path: str) -> list[str]:
        return self.read(path, "cgroup.subtree_control").split()

    def populate(self, path: str) -> None:
        for name, content in _CORE2.items():
            if name == "cgroup.kill" and not self.kill_file:
                continue
            self.put(path, name, content)
        parent_enabled = self.enabled(os.path.dirname(path))
        self.put(path, "cgroup.controllers", " ".join(parent_enabled) + "\n")
        for controller in parent_enabled:
            for name, content in _v2_files(controller, self.bfq).items():
                self.put(path, name, content)
        if "cpu" in parent_enabled:
            self.put(
                path,
                "cpu.stat",
                "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"
                "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
            )

    def refresh(self, path: str, name: str) -> None:
        if name == "cgroup.procs" and os.path.exists(os.path.join(path, name)):
            self.put(path, name, "".join(f"{p}\n" for p in self.own_pids(path)))
        elif name == "cgroup.events" and os.path.exists(os.path.join(path, name)):
            populated = 1 if self.live_pids(path) else 0
            self.put(path, name, f"populated {populated}\nfrozen {self.frozen_state(path)}\n")
        elif name == "pids.current" and os.path.exists(os.path.join(path, name)):
            self.put(path, name, f"{len(self.live_pids(path))}\n")

    def frozen_state(self, path: str) -> int:
        while self.owns(path) and path != self.root:
            try:
                if self.read(path, "cgroup.freeze").strip() == "1":
                    return 1
            except FileNotFoundError:
                return 0
            path = os.path.dirname(path)
        return 0

    def on_write(self, path: str, name: str, value: str) -> str:
        current = self.read(path, name)
        if name == "cgroup.subtree_control":
            return self._subtree_control(path, value)
        if name == "cgroup.procs":
            pid = int(value)
            if path != self.root and self.enabled(path):
                raise _ebusy()  # no internal processes
            if not alive(pid):
                raise OSError(errno.ESRCH, os.strerror(errno.ESRCH))
            self.move_pid(self.root, path, pid)
            return self.read(path, name)
        if name == "cgroup.kill":
            if value.strip() != "1":
                raise _einval()
            for pid in self.live_pids(path):
                os.kill(pid, signal.SIGKILL)
            return ""
        if name == "cgroup.freeze":
            if value.strip() not in ("0", "1"):
                raise _einval()
            return value.strip() + "\n"
        if name == "cpu.weight":
            if not value.strip().isdigit() or not 1 <= int(value) <= 10000:
                raise _einval()
            return value.strip() + "\n"
        if name == "cpu.max":
            fields = value.split()
            period = fields[1] if len(fields) > 1 else current.split()[1]
            quota = fields[0]
            if quota != MAX and not quota.isdigit():
                raise _einval()
            return f"{quota} {period}\n"
        if name in ("memory.max", "memory.low", "memory.swap.max", "pids.max") or (
            name.startswith("hugetlb.") and name.endswith(".max")
        ):
            v = value.strip()
            if v != MAX and not v.isdigit():
                raise _einval()
            return v + "\n"
        if name == "io.max":
            return self._io_max(current, value)
        if name in ("io.weight", "io.bfq.weight"):
            return self._io_weight(current, value)
        return value

    def _subtree_control(self, path: str, value: str) -> str:
        available = self.read(path, "cgroup.controllers").split()
        enabled = self.enabled(path)
        for token in value.split():
            sign, controller = token[0], token[1:]
            if sign not in "+-" or controller not in available:
                raise _einval()
        for token in value.split():
            sign, controller = token[0], token[1:]
            if sign == "+" and controller not in enabled:
                enabled.append(controller)
            elif sign == "-" and controller in enabled:
                enabled.remove(controller)
        enabled = [c for c in self.controllers if c in enabled]
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                self._sync_child(entry.path, enabled)
        return " ".join(enabled) + "\n"

    def _sync_child(self, child: str, enabled: list[str]) -> None:
        self.put(child, "cgroup.controllers", " ".join(enabled) + "\n")
        for controller in self.controllers:
            files = _v2_files(controller, self.bfq)
            for name, content in files.items():
                exists = os.path.exists(os.path.join(child, name))
                if controller in enabled and not exists:
                    self.put(child, name, content)
                elif controller not in enabled and exists:
                    os.unlink(os.path.join(child, name))

    @staticmethod
    def _io_max(current: str, value: str) -> str:
        device, *settings = value.split()
        lines = {}
        for line in current.splitlines():
            dev, _, rest = line.partition(" ")
            lines[dev] = dict(kv.split("=") for kv in rest.split())
        entry = lines.setdefault(device, dict.fromkeys(("rbps", "wbps", "riops", "wiops"), MAX))
        for setting in settings:
            key, _, v = setting.partition("=")
            if key not in entry or (v != MAX and not v.isdigit()):
                raise _einval()
            entry[key] = v
        return "".join(
            f"{dev} " + " ".join(f"{k}={v}" for k, v in kv.items()) + "\n"
            for dev, kv in sorted(lines.items())
        )

    @staticmethod
    def _io_weight(current: str, value: str) -> str:
        fields = value.split()
        key, weight = ("default", fields[0]) if len(fields) == 1 else (fields[0], fields[1])
        if not weight.isdigit() or not 1 <= int(weight) <= 10000:
            raise _einval()
        lines = dict(line.split() for line in current.splitlines() if line.strip())
        lines[key] = weight
        return "".join(f"{k} {v}\n" for k, v in lines.items())


# --- cgroup v1 ----------------------------------------------------------------------------


def _v1_files(controller: str) -> dict[str, str]:
    big = "9223372036854771712\n"
    if controller == "memory":
        files = {"cgroup.event_control": ""}
        for prefix in ("memory", "memory.memsw", "memory.kmem", "memory.kmem.tcp"):
            files.update(
                {
                    f"{prefix}.usage_in_bytes": "0\n",
                    f"{prefix}.max_usage_in_bytes": "0\n",
                    f"{prefix}.failcnt": "0\n",
                    f"{prefix}.limit_in_bytes": big,
                }
            )
        files.update(
            {
                "memory.soft_limit_in_bytes": big,
                "memory.swappiness": "60\n",
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                "memory.use_hierarchy": "1\n",
                "memory.stat": "cache 0\nrss 0\nmapped_file 0\ntotal_cache 0\ntotal_rss 0\n",
            }
        )
        return files
    if controller == "cpu":
        return {
            "cpu.shares": "1024\n",
            "cpu.cfs_period_us": "100000\n",
            "cpu.cfs_quota_us": "-1\n",
            "cpu.cfs_burst_us": "0\n",
            "cpu.rt_period_us": "1000000\n",
            "cpu.rt_runtime_us": "0\n",
            "cpu.idle": "0\n",
            "cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        }
    if controller == "cpuacct":
        return {
            "cpuacct.usage": "0\n",
            "cpuacct.usage_percpu": "0 0 \n",
            "cpuacct.usage_all": "cpu user system\n0 0 0\n1 0 0\n",
            "cpuacct.stat": "user 0\nsystem 0\n",
        }
    if controller == "cpuset":
        return {"cpuset.cpus": "\n", "cpuset.mems": "\n", "cpuset.effective_cpus": "\n"}
    if controller == "pids":
        return {"pids.current": "0\n", "pids.max": "max\n"}
    if controller == "freezer":
        return {"freezer.state": "THAWED\n", "freezer.self_freezing": "0\n"}
    if controller == "blkio":
        return {
            "blkio.bfq.weight": "100\n",
            "blkio.bfq.weight_device": "",
            "blkio.throttle.read_bps_device": "",
            "blkio.throttle.write_bps_device": "",
            "blkio.throttle.read_iops_device": "",
            "blkio.throttle.write_iops_device": "",
            "blkio.throttle.io_service_bytes_recursive": "Total 0\n",
            "blkio.throttle.io_serviced_recursive": "Total 0\n",
        }
    if controller == "hugetlb":
        files = {}
        for size in HUGE_SIZES:
            files.update(
                {
                    f"hugetlb.{size}.limit_in_bytes": big,
                    f"hugetlb.{size}.usage_in_bytes": "0\n",
                    f"hugetlb.{size}.max_usage_in_bytes": "0\n",
                    f"hugetlb.{size}.failcnt": "0\n",
                }
            )
        return files
    return {}


class FakeCgroup1(_Fake):
    """``root`` laid out like /sys/fs/cgroup on a v1 host (``mounts_at(root)`` reads it)."""

    DEFAULT = ("cpu,cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "hugetlb")

    def __init__(self, root: Path, hierarchies: tuple[str, ...] = DEFAULT, systemd: bool = True):
        super().__init__(root)
        self.hierarchies = list(hierarchies) + (["systemd"] if systemd else [])
        for h in self.hierarchies:
            top = os.path.join(self.root, h)
            os.makedirs(top)
            self.put(top, "cgroup.procs", "")
            self.put(top, "cgroup.clone_children", "0\n")
            for controller in h.split(","):
                for name, content in _v1_files(controller).items():
                    self.put(top, name, content)
            if "cpuset" in h:
                self.put(top, "cpuset.cpus", "0-1\n")
                self.put(top, "cpuset.mems", "0\n")
            if "freezer" in h:  # the root cgroup cannot be frozen
                os.unlink(os.path.join(top, "freezer.state"))

    def top(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        return os.path.join(self.root, rel.split("/")[0])

    def path(self, hierarchy: str, cgroup: str) -> str:
        return os.path.join(self.root, hierarchy) + cgroup

    def controllers(self, path: str) -> list[str]:
        return os.path.basename(self.top(path)).split(",")

    def populate(self, path: str) -> None:
        parent = os.path.dirname(path)
        self.put(path, "cgroup.procs", "")
        self.put(path, "cgroup.clone_children", "0\n")
        for controller in self.controllers(path):
            for name, content in _v1_files(controller).items():
                self.put(path, name, content)
        if (
            "cpuset" in self.controllers(path)
            and self.read(parent, "cgroup.clone_children")[0] == "1"
        ):
            self.put(path, "cpuset.cpus", self.read(parent, "cpuset.cpus"))
            self.put(path, "cpuset.mems", self.read(parent, "cpuset.mems"))

    def refresh(self, path: str, name: str) -> None:
        if name == "cgroup.procs" and os.path.exists(os.path.join(path, name)):
            self.put(path, name, "".join(f"{p}\n" for p in self.own_pids(path)))
        elif name == "pids.current" and os.path.exists(os.path.join(path, name)):
            self.put(path, name, f"{len(self.live_pids(path))}\n")

    def on_write(self, path: str, name: str, value: str) -> str:
        v = value.strip()
        if name == "cgroup.procs":
            pid = int(v)
            if not alive(pid):
                raise OSError(errno.ESRCH, os.strerror(errno.ESRCH))
            if "cpuset" in self.controllers(path) and not self.read(path, "cpuset.cpus").strip():
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.move_pid(self.top(path), path, pid)
            return self.read(path, name)
        if name == "freezer.state":
            if v not in ("FROZEN", "THAWED"):
                raise _einval()
            self.put(path, "freezer.self_freezing", "1\n" if v == "FROZEN" else "0\n")
            return v + "\n"
        if name == "cpu.shares":
            return f"{min(max(int(v), 2), 262144)}\n"
        if name == "memory.limit_in_bytes":
            limit = _num(v)
            memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw) and limit > _num(self.read(path, os.path.basename(memsw))):
                raise _einval()
            return f"{limit}\n"
        if name == "memory.memsw.limit_in_bytes":
            if _num(v) < _num(self.read(path, "memory.limit_in_bytes")):
                raise _einval()
            return f"{_num(v)}\n"
        if name == "cpuset.cpus" or name == "cpuset.mems":
            return v + "\n"
        if name.endswith("_device"):
            return self.read(path, name) + v + "\n"
        return value


def _num(text: str) -> int:
    v = text.strip()
    return 9223372036854771712 if v == "-1" else int(v)
