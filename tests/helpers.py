"""Shared test helpers: configs, bundles, and the hostjob command under test."""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# What hostjob keeps in a state root between containers (compiled seccomp profiles): no
# container's, so never a leftover of one.
KEPT_IN_ROOT = frozenset({".seccomp", ".loader"})


def containers_left(root: Path) -> list[str]:
    """What the state root ``root`` holds but hostjob's own caches (``KEPT_IN_ROOT``, kept
    between containers): the containers left, none when it was never made."""
    return sorted(set(os.listdir(root)) - KEPT_IN_ROOT) if root.exists() else []


BUSYBOX = shutil.which("busybox") or "/bin/busybox"
BUSYBOX_APPLETS = (
    "sh", "echo", "cat", "sleep", "true", "false", "env", "id", "ls", "pwd", "stty",
    "grep", "wc", "head", "tail", "touch", "mkdir", "ps", "kill", "umask", "test", "readlink",
)  # fmt: skip
CGROUP_ROOT = "/sys/fs/cgroup"


INSTALL = REPO / "scripts" / "install"


def install_peer(peer: str, commands: list[str] | tuple[str, ...]) -> str | None:
    """Make sure ``commands`` exist, running ``scripts/install --peers PEER`` if not.

    None when they are there; otherwise why they could not be installed. Tests fail
    (never skip) on that: CI starts from a bare machine and installs what it needs."""
    missing = [c for c in commands if shutil.which(c) is None]
    if not missing:
        return None
    done = subprocess.run(
        [str(INSTALL), "--peers", peer], capture_output=True, text=True, timeout=900, check=False
    )
    still = [c for c in commands if shutil.which(c) is None]
    if done.returncode != 0 or still:
        return (
            f"could not install peer {peer!r} (missing: {', '.join(still or missing)}):"
            f" {done.stdout}{done.stderr}"
        )
    return None


def require_peer(peer: str, *commands: str) -> None:
    """install_peer, or fail the test."""
    problem = install_peer(peer, commands)
    if problem:
        import pytest

        pytest.fail(problem, pytrace=False)


def hostjob_cmd() -> list[str]:
    """The hostjob command under test: $HOSTJOB_BIN, the installed one, or src/."""
    explicit = os.environ.get("HOSTJOB_BIN")
    if explicit:
        return [explicit]
    installed = Path(sys.prefix) / "bin" / "hostjob"
    if installed.exists():
        return [str(installed)]
    return [sys.executable, "-m", "hostjob"]


def hostjob_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if hostjob_cmd()[0] == sys.executable:
        env["PYTHONPATH"] = str(REPO / "src")
    env.update(extra or {})
    return env


def new_id(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def base_config(*args: str, **overrides: Any) -> dict[str, Any]:
    """A minimal job-container config.json running ``args`` (default ``true``)."""
    config: dict[str, Any] = {
        "ociVersion": "1.2.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args) or ["true"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": {"path": "rootfs"},
    }
    for key, value in overrides.items():
        config[key] = value
    return copy.deepcopy(config)


def make_rootfs(path: Path) -> Path:
    """A tiny image-like rootfs: busybox and its applets under bin/."""
    (path / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, path / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        link = path / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (path / "etc").mkdir(exist_ok=True)
    (path / "etc" / "image-release").write_text("hostjob test image\n")
    return path


def make_bundle(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "rootfs").exists():
        make_rootfs(directory / "rootfs")
    (directory / "config.json").write_text(json.dumps(config))
    return directory


class Hostjob:
    """Runs the hostjob CLI against one state root."""

    def __init__(self, root: Path, log: Path | None = None) -> None:
        self.root = root
        self.log = log
        self.seen: set[str] = set()  # every container ID seen in the root after a call

    def argv(self, *args: str) -> list[str]:
        words = [*hostjob_cmd(), "--root", str(self.root)]
        if self.log is not None:
            words += ["--log", str(self.log), "--log-format", "json"]
        return [*words, *args]

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = 60,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        # Output goes to files, not pipes: a created container inherits hostjob's
        # stdio (as with runc) and would hold a pipe open until it exits.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            result = subprocess.run(
                self.argv(*args),
                input=input,
                stdout=out,
                stderr=err,
                text=True,
                timeout=timeout,
                env=hostjob_env(env),
                **kwargs,
            )
            out.seek(0)
            err.seek(0)
            if self.root.is_dir():
                self.seen.update(n for n in os.listdir(self.root) if not n.startswith("."))
            return subprocess.CompletedProcess(
                result.args, result.returncode, out.read(), err.read()
            )

    def ok(self, *args: str, **kwargs: Any) -> str:
        result = self(*args, **kwargs)
        assert result.returncode == 0, f"hostjob {' '.join(args)} failed: {result.stderr}"
        assert result.stderr == "", f"stderr on success: {result.stderr!r}"
        return result.stdout

    def fail(self, *args: str, **kwargs: Any) -> str:
        result = self(*args, **kwargs)
        assert result.returncode != 0, f"hostjob {' '.join(args)} should fail: {result.stdout}"
        assert result.stderr.strip(), "a failure must say why on stderr"
        assert len(result.stderr.strip().splitlines()) == 1, f"one-line error: {result.stderr!r}"
        assert "Traceback" not in result.stderr
        return result.stderr.strip()

    def state(self, container_id: str) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self.ok("state", container_id))
        return state

    def status(self, container_id: str) -> str:
        return str(self.state(container_id)["status"])


CGROUP_V2 = os.path.isfile("/sys/fs/cgroup/cgroup.controllers")  # unified only (no v1)


def job_file(path: str, v1: tuple[str, str], v2: str) -> Path:
    """A file of a job's cgroup ``path`` on this host: ``v1`` is (controller, file) on a
    v1 or hybrid host, ``v2`` the file on a unified one."""
    if CGROUP_V2:
        return Path(CGROUP_ROOT, path.lstrip("/"), v2)
    controller, name = v1
    return Path(CGROUP_ROOT, controller, path.lstrip("/"), name)


@contextlib.contextmanager
def ext4_mount(base: Path, size: int = 128 << 20) -> Iterator[Path]:
    """An ext4 filesystem of ``size`` bytes on a loop device, mounted at ``base/disk``
    (mode 0755) while the block runs: a real block device, and user xattrs, which tmpfs
    (where /tmp often is) lacks -- the one and, before 6.6, the other."""
    image = base / "disk.img"
    with open(image, "wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mnt = base / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        mnt.chmod(0o755)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        image.unlink()


def has_user_xattrs(path: Path) -> bool:
    """Whether the filesystem of the directory ``path`` keeps ``user.*`` xattrs."""
    probe = path / ".xattr-probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.probe", b"1")
    except OSError as err:
        if err.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        return False
    finally:
        probe.unlink()
    return True


def cgroup_mountpoints() -> list[str]:
    """Where every cgroup hierarchy is mounted, as mountinfo says (v1, hybrid or v2): a
    cgroup v2 host has one, at /sys/fs/cgroup, a v1 host one per controller below it."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fstype in ("cgroup", "cgroup2"):
                points.append(fields[4])
    return sorted(set(points))


def cgroup_dirs(path: str) -> list[str]:
    """Directories for a cgroup path that exist in any mounted hierarchy."""
    found = []
    for mountpoint in cgroup_mountpoints():
        candidate = os.path.join(mountpoint, path.lstrip("/"))
        if os.path.isdir(candidate):
            found.append(candidate)
    return found


def example_count(request: Any, normal: int) -> int:
    """A property test's example count: ``$HOSTJOB_EXAMPLES`` when set, else ``normal``,
    ten times that with ``--long`` (``request`` is pytest's FixtureRequest)."""
    explicit = os.environ.get("HOSTJOB_EXAMPLES")
    if explicit:
        return int(explicit)
    return normal * 10 if request.config.getoption("--long") else normal


def image_leftovers(root: Path, store: Path, cid: str, watcher: int | None = None) -> list[str]:
    """What an image container ``cid`` left: its state in ``root``, its job cgroup,
    mounts under its state, its writable layer, store reference or log in ``store``,
    and its watcher (a pid) if still alive."""
    found = []
    if (root / cid).exists():
        found.append("state")
    found += cgroup_dirs(f"/hostjob/{cid}")
    found += mounts_under(str(root / cid))
    for sub in ("rw", "containers", "logs"):
        directory = store / sub
        if directory.exists():
            found += [f"{sub}/{name}" for name in os.listdir(directory) if cid in name]
    if watcher is not None and alive(watcher):
        found.append(f"watcher {watcher}")
    return found


def mounts_under(path: str) -> list[str]:
    prefix = path.rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == path or p.startswith(prefix)]


def proc_cgroup(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read()


def cgroup_file_of(pid: int, v1: tuple[str, str], v2: str) -> Path:
    """A file (named as for ``job_file``) of the cgroup the process ``pid`` is in: where
    another runtime puts its containers, whatever its rules."""
    for line in proc_cgroup(pid).splitlines():
        _, controllers, path = line.split(":", 2)
        if (controllers == "") if CGROUP_V2 else (v1[0] in controllers.split(",")):
            return job_file(path, v1, v2)
    raise AssertionError(f"process {pid} is in no {v1[0]} cgroup: {proc_cgroup(pid)}")


def wait_for(
    predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.02
) -> bool:
    """Poll ``predicate()`` until it is true (True) or ``timeout`` seconds pass (False,
    after one last look): the one polling loop of the tests."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


# ---- the host's fingerprint: what no test may change -----------------------------------------

FINGERPRINT_SYSCTLS = (
    "kernel/hostname",
    "kernel/domainname",
    "kernel/shm_rmid_forced",
    "net/ipv4/ip_forward",
    "net/ipv4/ip_unprivileged_port_start",
)
"""The sysctls the suite's containers are closest to (a job container shares the host's
namespaces, so one written there would be the host's)."""


def _owner_and_mode(path: str) -> tuple[int, int, str]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, oct(st.st_mode)


def _file_state(path: str) -> str:
    """A file's content, or where it points when it is a symlink (resolv.conf often is)."""
    try:
        if os.path.islink(path):
            return f"symlink to {os.readlink(path)}"
        with open(path, "rb") as f:
            return f.read(1 << 20).decode(errors="replace")
    except FileNotFoundError:
        return "(missing)"


def _links() -> list[tuple[str, str]]:
    """The network links of this network namespace: (name, kind), as ``ip -o link`` lists
    them, read from sysfs so that no tool is needed (bridges and veths named as such)."""
    out = []
    for name in sorted(os.listdir("/sys/class/net")):
        base = f"/sys/class/net/{name}"
        kind = "bridge" if os.path.isdir(f"{base}/bridge") else ""
        try:
            with open(f"{base}/type") as f:
                kind = kind or f"type {f.read().strip()}"
        except OSError:
            kind = kind or "?"
        out.append((name, kind))
    return out


def _tests_own(point: str) -> bool:
    """Whether a mount point is a test run's: anything inside a directory of the temp dir
    (pytest's roots, the project's ``hostjob-*`` and ``hj-*`` dirs, another test run's on
    the machine). The temp dir itself and its direct entries are the host's."""
    tmp = tempfile.gettempdir().rstrip("/") + "/"
    return point.startswith(tmp) and "/" in point[len(tmp) :].strip("/")


def _mounts() -> list[str]:
    """The mount table less the tests' own: mount point, fstype, source and propagation (peer
    group numbers left out: they say nothing about the host's state)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            point = fields[4]
            if _tests_own(point):
                continue
            propagation = ",".join(sorted(o.split(":")[0] for o in fields[6:sep])) or "private"
            fstype, source = fields[sep + 1], fields[sep + 2]
            out.append(f"{point} {fstype} {source} {propagation}")
    return sorted(out)


def host_fingerprint() -> dict[str, object]:
    """What no test may change on the machine it runs on: the hostname and domain name (and a
    few namespaced sysctls), ``/`` and ``/tmp``'s modes and owners, the network links,
    ``/etc/hosts``, ``/etc/hostname``, ``/etc/resolv.conf``, the mount table outside the
    tests' own directories, and the job cgroups (``job_cgroups``). Compare two with
    ``fingerprint_changes``."""
    sysctls = {}
    for name in FINGERPRINT_SYSCTLS:
        try:
            with open(f"/proc/sys/{name}") as f:
                sysctls[name] = f.read().strip()
        except OSError as e:
            sysctls[name] = f"({e.strerror})"
    return {
        "sysctls": sysctls,
        "/": _owner_and_mode("/"),
        "/tmp": _owner_and_mode("/tmp"),
        "links": _links(),
        "/etc/hosts": _file_state("/etc/hosts"),
        "/etc/hostname": _file_state("/etc/hostname"),
        "/etc/resolv.conf": _file_state("/etc/resolv.conf"),
        "mounts": _mounts(),
        "job cgroups": job_cgroups(),
    }


def job_cgroups() -> list[str]:
    """The cgroups below hostjob's default parent, ``/hostjob``, in every hierarchy: a
    container's job whose container was never deleted stays there."""
    return sorted(
        entry.path
        for parent in cgroup_dirs("/hostjob")
        for entry in os.scandir(parent)
        if entry.is_dir(follow_symlinks=False)
    )


def hostjob_temp_entries() -> list[str]:
    """What is named ``hostjob-*`` in the system's temp dir (the tests' and benches'
    scratch dirs and files)."""
    top = tempfile.gettempdir()
    return sorted(os.path.join(top, n) for n in os.listdir(top) if n.startswith("hostjob-"))


def fingerprint_changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """One line per difference between two ``host_fingerprint`` results."""
    problems = []
    for key, old in before.items():
        new = after.get(key)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            gone = [x for x in old if x not in new]
            added = [x for x in new if x not in old]
            problems.append(f"{key}: gone {gone}, added {added}")
        elif isinstance(old, dict) and isinstance(new, dict):
            for k in old:
                if old[k] != new.get(k):
                    problems.append(f"{key} {k}: {old[k]!r} -> {new.get(k)!r}")
        else:
            problems.append(f"{key}: {str(old)[:200]!r} -> {str(new)[:200]!r}")
    return problems


def kernel_version() -> tuple[int, int]:
    """The running kernel's (major, minor): for a test whose expectation differs by kernel
    (the VM lane runs Debian 12's 6.1, this machine a newer one)."""
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
