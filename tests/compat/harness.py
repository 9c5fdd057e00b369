"""Real clients (containerd + ctr, podman + conmon) and OCI runtimes, set up with every path in a
scratch directory, for the compat tests (``conftest.py``) and the benchmarks (``bench/``).

Nothing here is a mock: ``Containerd`` starts Debian's containerd 1.6, ``Podman`` drives
Debian's podman 4.3, both with their state under a temp dir, and both can list what a container
left behind (mounts, cgroups, runtime state, shim/conmon processes) after the client removed it.

Machine facts this module works around (see the class docstrings for details):

* no systemd: cgroupfs everywhere;
* RLIMIT_NOFILE hard limit 20000 and no CAP_SYS_RESOURCE, and podman/conmon run with
  RLIMIT_NPROC 32768 (= ``kernel.pid_max`` here): podman's ``default_ulimits`` are set to fit;
* a hybrid cgroup host whose cgroup2 holds a controller (hugetlb), which crun 1.8 refuses
  ("cgroups in hybrid mode not supported"): crun is given to the clients through a wrapper that
  hides the cgroup2 mount in a private mount namespace (``CrunHybridWrapper``), or, for the
  benchmarks, those controllers are moved to v1 hierarchies for the duration of the run and moved
  back after (``V1ControllerMounts``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.helpers import install_peer, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CTR_NAMESPACE = "test"
DEFAULT_RUNTIMES = "runc,crun,hostjob"


class HarnessError(Exception):
    """A client or runtime could not be installed, started or cleaned up."""


# ---------------------------------------------------------------------------------------------
# small helpers


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture text output; raise HarnessError on timeout (never hang)."""
    args = [os.fspath(a) for a in argv]
    try:
        cp = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"timed out after {timeout}s: {' '.join(args)}") from e
    if check and cp.returncode != 0:
        raise HarnessError(f"exit {cp.returncode}: {' '.join(args)}\n{cp.stdout}{cp.stderr}")
    return cp


def require_root() -> None:
    if os.geteuid() != 0:
        raise HarnessError("the compat suite needs root (real cgroups, mounts and daemons)")


def ensure_peer(peer: str, commands: Iterable[str]) -> None:
    """Make sure ``commands`` exist; if not, run ``scripts/install --peers PEER`` once."""
    problem = install_peer(peer, tuple(commands))
    if problem:
        raise HarnessError(problem)


def _unescape_mountinfo(s: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mountinfo(pid: int | str = "self") -> list[tuple[str, str, str]]:
    """(mount point, fs type, source) for each line of /proc/PID/mountinfo."""
    rows = []
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            rfields = right.split()
            rows.append(
                (
                    _unescape_mountinfo(fields[4]),
                    rfields[0] if rfields else "",
                    _unescape_mountinfo(rfields[1]) if len(rfields) > 1 else "",
                )
            )
    return rows


def mounts_under(prefix: Path | str) -> list[str]:
    p = os.fspath(prefix).rstrip("/")
    return [mp for mp, _, _ in mountinfo() if mp == p or mp.startswith(p + "/")]


def mounts_mentioning(needle: str) -> list[str]:
    return [f"{mp} ({fs} {src})" for mp, fs, src in mountinfo() if needle in mp or needle in src]


def unmount_all_under(prefix: Path | str) -> list[str]:
    """Lazily unmount everything at or below ``prefix`` (deepest first); return what was there."""
    found = mounts_under(prefix)
    for mp in sorted(found, key=len, reverse=True):
        run(["umount", "-l", mp], timeout=30)
    return found


def processes_matching(*needles: str) -> list[tuple[int, str]]:
    """(pid, cmdline) of every process whose argv contains all ``needles`` (as substrings)."""
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if cmd and all(n in cmd for n in needles):
            out.append((int(d), cmd))
    return out


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def start_daemon(
    argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A client's daemon in a session of its own, its output appended to ``log``."""
    logf = open(log, "ab")  # noqa: SIM115 - handed to the daemon
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
            env=env,
        )
    finally:
        logf.close()


def log_tail(log: Path, n: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop_daemon(proc: subprocess.Popen[bytes], what: str, timeout: float) -> list[str]:
    """SIGTERM a client's daemon, then SIGKILL after ``timeout`` s; the problem, if any."""
    if proc.poll() is not None:
        return []
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return [f"{what} ignored SIGTERM"]
    return []


def kill_shims(shims: list[tuple[int, str]]) -> list[str]:
    """Kill the shim processes a stopped daemon left; the problem, if any."""
    if not shims:
        return []
    kill_pids(p for p, _ in shims)
    return [f"shim processes left: {shims}"]


# ---------------------------------------------------------------------------------------------
# cgroups


def cgroup_hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, named ones, and cgroup2)."""
    return [
        Path(mp)
        for mp, fs, _ in mountinfo()
        if fs in ("cgroup", "cgroup2") and mp.startswith(str(CGROUP_ROOT))
    ]


def cgroup_dirs(path: str) -> list[Path]:
    """The directories of cgroup ``path`` (absolute, from the hierarchy root) that exist."""
    rel = path.strip("/")
    return [h / rel for h in cgroup_hierarchies() if rel and (h / rel).is_dir()]


def remove_cgroup(path: str) -> list[Path]:
    """rmdir cgroup ``path`` and its (empty) descendants in every hierarchy, deepest first.
    Returns the directories that could not be removed (still holding processes)."""
    left = []
    for top in cgroup_dirs(path):
        below = sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        dirs = [*below, top]
        for d in dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                # may be an exiting process still accounted for; retry briefly
                if not wait_for(functools.partial(_try_rmdir, d), 2.0):
                    left.append(d)
    return left


def _try_rmdir(d: Path) -> bool:
    try:
        d.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def cgroup_mode() -> str:
    """'unified', 'hybrid' (v1 controllers + a cgroup2 at /sys/fs/cgroup/unified) or 'legacy'."""
    types = {mp: fs for mp, fs, _ in mountinfo()}
    if types.get(str(CGROUP_ROOT)) == "cgroup2":
        return "unified"
    if types.get(str(CGROUP_ROOT / "unified")) == "cgroup2":
        return "hybrid"
    return "legacy"


def hybrid_v2_controllers() -> list[str]:
    """Controllers bound to the cgroup2 hierarchy of a hybrid host (crun refuses any)."""
    if cgroup_mode() != "hybrid":
        return []
    return (CGROUP_ROOT / "unified" / "cgroup.controllers").read_text().split()


class V1ControllerMounts:
    """Move the controllers of a hybrid host's cgroup2 to v1 hierarchies (as a systemd hybrid
    host has them) for the life of this object, then move them back.

    crun 1.8 refuses to run on a hybrid host whose cgroup2 has any controller. Mounting
    ``/sys/fs/cgroup/<ctrl>`` as v1 takes the controller off cgroup2. Restoring is delicate: a
    v1 hierarchy that still has child cgroups (live or dying) survives its umount invisibly and
    keeps the controller, so ``restore`` waits until the hierarchy has only its root, and
    re-mounts to retry when needed. Child cgroups made by others in the meantime block restoring
    (a warning says so). Used by the benchmarks, where the wrapper's cost would distort crun.
    """

    def __init__(self) -> None:
        self.mounted: list[tuple[str, Path, bool]] = []  # (controller, dir, dir created)
        self.warnings: list[str] = []

    def __enter__(self) -> V1ControllerMounts:
        for ctrl in hybrid_v2_controllers():
            d = CGROUP_ROOT / ctrl
            created = not d.exists()
            d.mkdir(exist_ok=True)
            cp = run(["mount", "-t", "cgroup", "-o", ctrl, "cgroup", d], timeout=30)
            if cp.returncode != 0:
                if created:
                    d.rmdir()
                self.restore()
                why = (cp.stderr.strip().splitlines() or ["?"])[0]
                raise HarnessError(f"cannot mount the {ctrl} controller as v1 at {d}: {why}")
            self.mounted.append((ctrl, d, created))
        left = hybrid_v2_controllers()
        if left:
            self.restore()
            raise HarnessError(f"cgroup2 still has controllers {left} after mounting them as v1")
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @staticmethod
    def _num_cgroups(ctrl: str) -> int:
        for line in Path("/proc/cgroups").read_text().splitlines()[1:]:
            f = line.split()
            if f and f[0] == ctrl:
                return int(f[2])
        return 0

    @classmethod
    def _only_root(cls, ctrl: str) -> bool:
        return cls._num_cgroups(ctrl) <= 1

    @staticmethod
    def _back_in_v2(ctrl: str) -> bool:
        return ctrl in hybrid_v2_controllers()

    def restore(self) -> None:
        for ctrl, d, created in reversed(self.mounted):
            children = [p for p in d.iterdir() if p.is_dir()] if d.is_dir() else []
            if children:
                self.warnings.append(
                    f"{ctrl} stays mounted at {d}: child cgroups {[c.name for c in children]} "
                    f"exist; remove them, then `umount {d}` to give {ctrl} back to cgroup2"
                )
                continue
            # wait for dying cgroups to be freed, or the hierarchy outlives its umount
            only_root = functools.partial(self._only_root, ctrl)
            back_in_v2 = functools.partial(self._back_in_v2, ctrl)
            wait_for(only_root, 20.0, 0.1)
            for _attempt in range(3):
                run(["umount", d], timeout=30)
                if wait_for(back_in_v2, 5.0, 0.1):
                    break
                # the hierarchy survived (a child was still dying): re-attach, wait, retry
                d.mkdir(exist_ok=True)
                run(["mount", "-t", "cgroup", "-o", ctrl, "cgroup", d], timeout=30)
                wait_for(only_root, 20.0, 0.1)
            if created:
                try:
                    d.rmdir()
                except OSError:
                    pass
            if ctrl not in hybrid_v2_controllers():
                self.warnings.append(f"could not give {ctrl} back to cgroup2 (see /proc/cgroups)")
        self.mounted.clear()


CRUN_WRAPPER = """#!/bin/sh
# crun through a private mount namespace in which the hybrid host's cgroup2 mount is hidden:
# crun 1.8 refuses hybrid hosts whose cgroup2 holds a controller. Made by the hostjob compat
# harness; harmless to the host (the umount happens in the private namespace only).
exec unshare --mount --propagation private -- /bin/sh -c \
  'umount -l /sys/fs/cgroup/unified && exec {crun} "$@"' crun "$@"
"""


def crun_client_path(crun: Path, workdir: Path) -> Path:
    """The path to hand to clients for crun: crun itself, or on a hybrid host with cgroup2
    controllers a wrapper named ``crun`` that hides cgroup2 from it (see CRUN_WRAPPER)."""
    if not hybrid_v2_controllers():
        return crun
    d = workdir / "crun-hybrid"
    d.mkdir(parents=True, exist_ok=True)
    w = d / "crun"
    w.write_text(CRUN_WRAPPER.format(crun=crun))
    w.chmod(0o755)
    return w


# ---------------------------------------------------------------------------------------------
# runtimes


class Runtime:
    """An OCI runtime under test.

    ``path`` is the real binary; ``client_path`` what the clients are given (a wrapper for crun
    on a hybrid host); ``default_root`` the state dir it uses when the caller passes no ``--root``
    (podman as root passes none). ``is_job_container``: processes run on the host (hostjob) —
    tests switch their namespace/sandbox expectations on it.
    """

    __slots__ = ("client_path", "default_root", "is_job_container", "name", "path")

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        is_job_container: bool = False,
        default_root: Path | None = None,
        client_path: Path | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.client_path = client_path or path
        self.is_job_container = is_job_container
        self.default_root = default_root or Path("/run") / name

    def __repr__(self) -> str:
        return f"Runtime({self.name!r}, {self.path})"


def selected_runtime_names(spec: str | None = None) -> list[str]:
    """``COMPAT_RUNTIMES`` (comma separated; default ``runc,crun,hostjob``)."""
    raw = spec if spec is not None else os.environ.get("COMPAT_RUNTIMES", DEFAULT_RUNTIMES)
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for n in names:
        if n not in ("runc", "crun", "hostjob"):
            raise HarnessError(f"unknown runtime {n!r} in COMPAT_RUNTIMES (runc, crun, hostjob)")
    return names


HOSTJOB_FROM_SRC = """#!/bin/sh
# hostjob from the work tree ({src}) with {python}: made by the compat harness because neither
# HOSTJOB_BIN nor a hostjob beside the test interpreter exists. Clients (podman) may call the
# runtime with a near-empty environment, so the path is set here.
PYTHONPATH={src} exec {python} -m hostjob "$@"
"""


def find_hostjob(explicit: str | None = None, workdir: Path | None = None) -> Path:
    """The hostjob executable to hand to clients, as ``tests.helpers.hostjob_cmd`` finds it:
    ``explicit`` (``--hostjob``), else ``$HOSTJOB_BIN``, else ``hostjob`` beside the running
    interpreter (an installed venv), else a wrapper in ``workdir`` that runs
    ``<interpreter> -m hostjob`` on the work tree's ``src/``."""
    for c in (
        explicit,
        os.environ.get("HOSTJOB_BIN"),
        str(Path(sys.executable).parent / "hostjob"),
    ):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c).absolute()
    if explicit or os.environ.get("HOSTJOB_BIN"):
        raise HarnessError(
            f"hostjob binary not executable: {explicit or os.environ['HOSTJOB_BIN']}"
        )
    if workdir is None:
        raise HarnessError("hostjob not found: set HOSTJOB_BIN, or run scripts/install")
    w = workdir / "hostjob-src" / "hostjob"
    w.parent.mkdir(parents=True, exist_ok=True)
    w.write_text(HOSTJOB_FROM_SRC.format(src=REPO / "src", python=sys.executable))
    w.chmod(0o755)
    return w


def make_runtime(name: str, workdir: Path, hostjob: str | None = None) -> Runtime:
    """Resolve a runtime by name, installing runc/crun through scripts/install if missing."""
    if name in ("runc", "crun"):
        ensure_peer(name, [name])
        path = Path(shutil.which(name) or name).resolve()
        if name == "crun":
            return Runtime(name, path, client_path=crun_client_path(path, workdir))
        return Runtime(name, path)
    if name == "hostjob":
        return Runtime("hostjob", find_hostjob(hostjob, workdir), is_job_container=True)
    raise HarnessError(f"unknown runtime {name!r}")


# ---------------------------------------------------------------------------------------------
# bundles


def runc_like_spec(
    rootfs: Path,
    args: Sequence[str],
    *,
    cgroups_path: str | None = None,
    job_container: bool = False,
    env: Sequence[str] = (),
) -> dict[str, object]:
    """A config.json like ``runc spec`` makes (namespaces incl. a mount namespace, /proc, /dev,
    /sys mounts, read-only rootfs), non-terminal. With ``job_container`` it also carries the
    annotation that marks a HostProcess container (hostjob ignores the namespaces)."""
    spec: dict[str, object] = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env],
            "cwd": "/",
            "capabilities": {
                k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                for k in ("bounding", "effective", "permitted")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": os.fspath(rootfs), "readonly": True},
        "hostname": "compat",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": [
                    "nosuid",
                    "noexec",
                    "newinstance",
                    "ptmxmode=0666",
                    "mode=0620",
                    "gid=5",
                ],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            {
                "destination": "/dev/mqueue",
                "type": "mqueue",
                "source": "mqueue",
                "options": ["nosuid", "noexec", "nodev"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
        },
    }
    if cgroups_path:
        linux = spec["linux"]
        assert isinstance(linux, dict)
        linux["cgroupsPath"] = cgroups_path
    if job_container:
        spec["annotations"] = {"microsoft.com/hostprocess-container": "true"}
    return spec


def write_bundle(bundle: Path, rootfs: Path, args: Sequence[str], **kw: object) -> Path:
    bundle.mkdir(parents=True, exist_ok=True)
    spec = runc_like_spec(rootfs, args, **kw)  # type: ignore[arg-type]
    (bundle / "config.json").write_text(json.dumps(spec, indent=2))
    return bundle


# ---------------------------------------------------------------------------------------------
# host paths the clients create outside their scratch dirs


class HostTraces:
    """Remembers which well-known host paths existed before the clients ran, and removes the
    ones that they created (only if empty, or known to be caches of the clients)."""

    DIRS = (
        "/run/containerd/fifo",
        "/run/containerd/s",
        f"/run/containerd/runc/{CTR_NAMESPACE}",
        "/run/containerd/runc",
        "/run/containerd",
        "/run/runc",
        "/run/crun",
    )
    CACHES = ("/var/lib/containers",)  # podman as root keeps its blob-info cache here

    def __init__(self) -> None:
        self.before = {p for p in (*self.DIRS, *self.CACHES) if os.path.lexists(p)}

    def cleanup(self) -> None:
        for p in self.DIRS:
            if p not in self.before:
                try:
                    os.rmdir(p)
                except OSError:
                    pass
        for p in self.CACHES:
            if p not in self.before and os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# containerd


def client_version(program: str, pattern: str = r"\sv?(\d+)\.(\d+)\.\d+") -> tuple[int, int]:
    """(major, minor) of a client, from ``program --version``: the first match of
    ``pattern`` (its two groups)."""
    out = run([program, "--version"], timeout=30, check=True).stdout
    found = re.search(pattern, out)
    if not found:
        raise HarnessError(f"cannot read {program}'s version from {out!r}")
    return int(found.group(1)), int(found.group(2))


@functools.cache
def containerd_version() -> tuple[int, int]:
    """(major, minor) of the containerd on PATH: 1.6 (Debian 12), 1.7 (13), 2.1 (unstable)."""
    ensure_peer("containerd", ["containerd"])
    return client_version("containerd")


def containerd_config_version() -> int:
    """The config format this containerd reads natively: 2 up to 1.7, 3 from 2.0 (whose CRI
    is three plugins: ``io.containerd.cri.v1.runtime``, ``...cri.v1.images`` and the gRPC
    service ``io.containerd.grpc.v1.cri``)."""
    return 3 if containerd_version() >= (2, 0) else 2


# The plugins of containerd 2.x's CRI (one, io.containerd.grpc.v1.cri, before).
CRI_PLUGINS_V3 = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",
                  "io.containerd.cri.v1.images")  # fmt: skip


class Containerd:
    """Debian's containerd (1.6, 1.7 or 2.x) with root, state, sockets, plugin dirs and config
    in ``workdir``, in the config format of its version (2, or 3 from containerd 2.0); the
    snapshotters this host lacks are disabled; overlayfs snapshotter. The CRI plugin is
    disabled unless ``cri`` gives the TOML of its tables (``tests/cri`` does, in the format
    of ``containerd_config_version``; the CRI plugin keeps its own root and state under
    containerd's).

    ``ctr(...)`` runs ``ctr --address SOCK --namespace NS ...``. The runc shim (v2) is the one
    that calls the runtime given with ``--runc-binary``; it keeps runtime state in
    ``/run/containerd/runc/NS/ID`` and its socket in ``/run/containerd/s/<sha256>`` (fixed paths
    in containerd 1.6, not configurable): ``leftovers`` checks both.
    """

    def __init__(
        self, workdir: Path, namespace: str = CTR_NAMESPACE, cri: str | None = None
    ) -> None:
        self.dir = workdir
        self.namespace = namespace
        self.cri = cri
        # the cgroup ``/<namespace>`` is removed at stop only if this daemon's containers made it
        self.cgroup_parent_existed = bool(cgroup_dirs(f"/{namespace}"))
        self.address = workdir / "containerd.sock"
        self.config = workdir / "config.toml"
        self.log = workdir / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ids: list[str] = []

    # -- life cycle
    def write_config(self) -> None:
        """The config in the format of this containerd: version 2, or from 2.0 version 3,
        which has no Go plugin dir and no v1 runtime any more, and whose CRI is three
        plugins."""
        d = self.dir
        version = containerd_config_version()
        cri_plugins = CRI_PLUGINS_V3 if version == 3 else ("io.containerd.grpc.v1.cri",)
        snapshotters = ("btrfs", "zfs", "devmapper", *(("erofs",) if version == 3 else ("aufs",)))
        disabled = [
            *(cri_plugins if self.cri is None else []),
            *(f"io.containerd.snapshotter.v1.{name}" for name in snapshotters),
            "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing",
        ]
        v2_only = "".join(
            f"\n  {line}"
            for line in (
                '[plugins."io.containerd.runtime.v1.linux"]',
                f'  runtime_root = "{d}/runtime-v1"',
                '[plugins."io.containerd.service.v1.tasks-service"]',
                '  rdt_config_file = ""',
            )
            if version == 2
        )
        plugin_dir = "" if version == 3 else f'plugin_dir = "{d}/plugins"\n'
        self.config.write_text(f"""version = {version}
root = "{d}/root"
state = "{d}/state"
{plugin_dir}disabled_plugins = {json.dumps(disabled)}

[grpc]
  address = "{self.address}"

[ttrpc]
  address = "{self.address}.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"{v2_only}
{self.cri or ""}""")

    def start(self, timeout: float = 30) -> Containerd:
        require_root()
        ensure_peer("containerd", ["containerd", "ctr", "containerd-shim-runc-v2"])
        self.dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        self.proc = start_daemon(["containerd", "--config", str(self.config)], self.log)
        ok = wait_for(
            lambda: (
                self.address.exists()
                and self.proc is not None
                and self.proc.poll() is None
                and self.ctr("version", timeout=10).returncode == 0
            ),
            timeout,
            0.1,
        )
        if not ok:
            tail = self.log_tail()
            self.stop()
            raise HarnessError(f"containerd did not start within {timeout}s:\n{tail}")
        return self

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.log, n)

    def ctr(
        self,
        *args: str | os.PathLike[str],
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return run(
            ["ctr", "--address", self.address, "--namespace", self.namespace, *args],
            timeout=timeout,
            check=check,
            input=input,
        )

    def new_id(self, prefix: str) -> str:
        """A fresh container ID, remembered so that ``force_remove_all`` cleans it up."""
        cid = f"{prefix}-{len(self.ids)}-{os.getpid()}"
        self.ids.append(cid)
        return cid

    def import_image(self, archive: Path, ref: str) -> None:
        cp = self.ctr("images", "import", archive, timeout=120)
        if cp.returncode != 0:
            raise HarnessError(f"ctr images import failed: {cp.stdout}{cp.stderr}")
        if ref not in self.ctr("images", "ls", "-q", check=True).stdout.split():
            raise HarnessError(f"{ref} not listed after import: {cp.stdout}")

    # -- inspection
    def tasks(self) -> dict[str, tuple[int, str]]:
        """ID -> (pid, STATUS) from ``ctr task ls``."""
        out = self.ctr("task", "ls", check=True).stdout.splitlines()[1:]
        res = {}
        for line in out:
            f = line.split()
            if len(f) >= 3:
                res[f[0]] = (int(f[1]), f[2])
        return res

    def task_status(self, cid: str) -> str | None:
        t = self.tasks().get(cid)
        return t[1] if t else None

    def wait_status(self, cid: str, status: str, timeout: float = 15) -> bool:
        return wait_for(lambda: self.task_status(cid) == status, timeout, 0.1)

    def containers(self) -> list[str]:
        return self.ctr("containers", "ls", "-q", check=True).stdout.split()

    def shim_socket(self, cid: str) -> Path:
        """containerd 1.6: sha256 of ``<address>/<namespace>/<id>`` under /run/containerd/s."""
        h = hashlib.sha256(f"{self.address}/{self.namespace}/{cid}".encode()).hexdigest()
        return Path("/run/containerd/s") / h

    def runtime_state(self, cid: str) -> Path:
        return Path("/run/containerd/runc") / self.namespace / cid

    def cgroup_path(self, cid: str) -> str:
        """ctr's default spec puts a container in /<namespace>/<id>."""
        return f"/{self.namespace}/{cid}"

    def shims(self, cid: str | None = None) -> list[tuple[int, str]]:
        """Shim processes serving this containerd (``-address SOCK``), or one container."""
        found = processes_matching("containerd-shim", f"-address {self.address}")
        return [(p, c) for p, c in found if cid is None or f" -id {cid} " in f" {c} "]

    def leftovers(self, cid: str, runtime: Runtime | None = None) -> list[str]:
        """Everything container ``cid`` left behind after the client removed it."""
        bad = []
        if cid in self.tasks():
            bad.append(f"task {cid} still listed")
        if cid in self.containers():
            bad.append(f"container {cid} still listed")
        bad += [f"mount {m}" for m in mounts_mentioning(cid)]
        bad += [f"cgroup {d}" for d in cgroup_dirs(self.cgroup_path(cid))]
        for p in (
            self.runtime_state(cid),
            self.shim_socket(cid),
            self.dir / "state" / "io.containerd.runtime.v2.task" / self.namespace / cid,
        ):
            if os.path.lexists(p):
                bad.append(f"path {p}")
        if runtime is not None and (runtime.default_root / cid).exists():
            bad.append(f"runtime state {runtime.default_root / cid}")
        bad += [f"shim process {p}: {c}" for p, c in self.shims(cid)]
        return sorted(set(bad))

    # -- cleanup
    def force_remove(self, cid: str) -> None:
        """Kill and delete task and container ``cid`` whatever their state (teardown)."""
        if cid in self.tasks():
            if self.task_status(cid) == "PAUSED":
                self.ctr("task", "resume", cid, timeout=20)
            self.ctr("task", "kill", "--all", "--signal", "SIGKILL", cid, timeout=20)
            self.wait_status(cid, "STOPPED", 10)
            self.ctr("task", "delete", "--force", cid, timeout=30)
        if cid in self.containers():
            self.ctr("containers", "rm", cid, timeout=30)
        remove_cgroup(self.cgroup_path(cid))

    def force_remove_all(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for cid in set(self.tasks()) | set(self.containers()) | set(self.ids):
            self.force_remove(cid)

    def stop(self) -> list[str]:
        """Delete every task and container, stop containerd, and make sure nothing is left
        (mounts under the work dir, shims, cgroups /NS/*). Returns the problems found (each was
        cleaned up by force)."""
        problems: list[str] = []
        try:
            if self.proc is not None and self.proc.poll() is None:
                left = [t for t in self.tasks()]
                if left:
                    problems.append(f"tasks left at teardown: {left}")
                self.force_remove_all()
        except HarnessError as e:
            problems.append(f"cleanup through ctr failed: {e}")
        if self.proc is not None:
            problems += stop_daemon(self.proc, "containerd", 15)
            self.proc = None
        problems += kill_shims(self.shims())
        mounts = unmount_all_under(self.dir)
        if mounts:
            problems.append(f"mounts left under {self.dir}: {mounts}")
        if not self.cgroup_parent_existed:
            stuck = remove_cgroup(f"/{self.namespace}")
            if stuck:
                problems.append(f"cgroups left: {stuck}")
        for cid in self.ids:
            for p in (self.runtime_state(cid), self.shim_socket(cid)):
                if os.path.lexists(p):
                    problems.append(f"left: {p}")
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()
        return problems


# ---------------------------------------------------------------------------------------------
# podman


def podman_ulimits() -> list[str]:
    """``default_ulimits`` that fit this host: podman as root asks for nofile/nproc of 1048576
    (more than our hard limits; without CAP_SYS_RESOURCE the runtime's setrlimit fails), and
    podman and conmon were seen running with RLIMIT_NPROC 32768 = kernel.pid_max here."""
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    cap = 1 << 20
    nofile = cap if nofile == resource.RLIM_INFINITY else min(nofile, cap)
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    return [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]


@functools.cache
def podman_version() -> tuple[int, int]:
    """(major, minor) of the podman on PATH: 4.3 (Debian 12), 5.4 (13), 5.8 (unstable)."""
    ensure_peer("podman", ["podman"])
    return client_version("podman")


class Podman:
    """Debian's podman (4.3, 5.4 or 5.8) with everything in ``workdir``: ``--root``,
    ``--runroot``, ``--tmpdir``, file events, the cgroup manager ``cgroup_manager``
    (``cgroupfs``; ``systemd`` where systemd is PID 1 on cgroup v2: each container a
    ``libpod-<id>.scope`` in ``machine.slice``, its conmon a ``libpod-conmon-<id>.scope``),
    and its config through the environment:
    ``CONTAINERS_CONF`` (ulimits that fit, no network namespace setup — ``netns = "none"`` —,
    file locks instead of the host-wide SHM lock segment, ``[engine.runtimes]``),
    ``CONTAINERS_STORAGE_CONF`` (overlay in the work dir), ``CONTAINERS_REGISTRIES_CONF`` (no
    registries), ``HOME`` (a policy.json that accepts local archives) and ``TMPDIR``.

    With cgroupfs, containers land in cgroup ``/libpod_parent/libpod-<id>``; conmon in
    ``/libpod_parent/conmon``. podman as root passes no ``--root`` to the runtime, so runtime
    state is in the runtime's default root (``/run/runc``, ``/run/crun``, ``/run/hostjob``).
    podman 5 has no CNI: its network backend is netavark (no network is set up either way).
    """

    def __init__(
        self, workdir: Path, runtimes: Sequence[Runtime] = (), cgroup_manager: str = "cgroupfs"
    ) -> None:
        self.dir = workdir
        self.cgroup_manager = cgroup_manager
        self.root = workdir / "root"
        self.runroot = workdir / "runroot"
        self.tmpdir = workdir / "tmp"
        self.home = workdir / "home"
        self.runtimes = list(runtimes)
        self.env: dict[str, str] = {}
        self.names: list[str] = []
        self.cgroup_parent_existed = bool(cgroup_dirs("/libpod_parent"))

    def setup(self) -> Podman:
        require_root()
        ensure_peer("podman", ["podman", "conmon"])
        d = self.dir
        for p in (
            self.root,
            self.runroot,
            self.tmpdir,
            self.home / ".config" / "containers",
            d / "cni",
        ):
            p.mkdir(parents=True, exist_ok=True)
        runtimes = "\n".join(f'{r.name} = ["{r.client_path}"]' for r in self.runtimes)
        ulimits = json.dumps(podman_ulimits())
        backend = "cni" if podman_version() < (5, 0) else "netavark"
        (d / "containers.conf").write_text(f"""[containers]
default_ulimits = {ulimits}
netns = "none"
log_driver = "k8s-file"

[engine]
cgroup_manager = "{self.cgroup_manager}"
events_logger = "file"
events_logfile_path = "{d}/events.log"
tmp_dir = "{self.tmpdir}"
volume_path = "{self.root}/volumes"
lock_type = "file"
runtime = "runc"

[engine.runtimes]
{runtimes}

[network]
network_backend = "{backend}"
network_config_dir = "{d}/cni"
""")
        (d / "storage.conf").write_text(f"""[storage]
driver = "overlay"
graphroot = "{self.root}"
runroot = "{self.runroot}"

[storage.options.overlay]
mountopt = "nodev"
""")
        (d / "registries.conf").write_text(
            'unqualified-search-registries = []\nshort-name-mode = "disabled"\n'
        )
        (self.home / ".config" / "containers" / "policy.json").write_text(
            json.dumps({"default": [{"type": "insecureAcceptAnything"}]})
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("XDG_", "CONTAINERS_", "CONTAINER_", "PODMAN_", "REGISTRY"))
        }
        env.update(
            CONTAINERS_CONF=str(d / "containers.conf"),
            CONTAINERS_STORAGE_CONF=str(d / "storage.conf"),
            CONTAINERS_REGISTRIES_CONF=str(d / "registries.conf"),
            HOME=str(self.home),
            TMPDIR=str(self.tmpdir),
        )
        self.env = env
        cp = self.podman(
            "info", "--format", "{{.Host.CgroupManager}} {{.Store.GraphRoot}}", timeout=60
        )
        if (
            cp.returncode != 0
            or self.cgroup_manager not in cp.stdout
            or str(self.root) not in cp.stdout
        ):
            raise HarnessError(f"podman info failed or ignored the config: {cp.stdout}{cp.stderr}")
        return self

    def base_args(self, runtime: Runtime | None = None) -> list[str]:
        args = [
            "podman",
            "--root",
            str(self.root),
            "--runroot",
            str(self.runroot),
            "--tmpdir",
            str(self.tmpdir),
            f"--cgroup-manager={self.cgroup_manager}",
            "--events-backend=file",
            "--storage-driver",
            "overlay",
        ]
        if runtime is not None:
            args += ["--runtime", str(runtime.client_path)]
        return args

    def podman(
        self,
        *args: str | os.PathLike[str],
        runtime: Runtime | None = None,
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return run(
            [*self.base_args(runtime), *args],
            timeout=timeout,
            env=self.env,
            check=check,
            input=input,
        )

    def new_name(self, prefix: str) -> str:
        name = f"{prefix}-{len(self.names)}-{os.getpid()}"
        self.names.append(name)
        return name

    def load_image(self, archive: Path, ref: str) -> None:
        cp = self.podman("load", "-i", archive, timeout=120)
        if cp.returncode != 0:
            raise HarnessError(f"podman load failed: {cp.stdout}{cp.stderr}")
        listed = self.podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=True)
        if ref not in listed.stdout.split():
            raise HarnessError(f"{ref} not listed after podman load: {listed.stdout}")

    # -- inspection
    def id_of(self, name: str) -> str:
        """The full ID of the container last named ``name``, from podman's event log: podman
        5 removes a ``--rm`` container's ``--cidfile`` with the container."""
        found = ""
        try:
            lines = (self.dir / "events.log").read_text().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("Type") == "container" and event.get("Name") == name and event.get("ID"):
                found = str(event["ID"])
        if not found:
            raise HarnessError(f"no container named {name} in podman's events")
        return found

    def container_ids(self) -> list[str]:
        return self.podman("ps", "-a", "-q", "--no-trunc", check=True).stdout.split()

    def inspect(self, name: str, fmt: str) -> str:
        return self.podman("inspect", "--format", fmt, name, check=True).stdout.strip()

    def cgroup_path(self, cid: str) -> str:
        if self.cgroup_manager == "systemd":
            return f"/machine.slice/libpod-{cid}.scope"
        return f"/libpod_parent/libpod-{cid}"

    def leftovers(self, cid: str, runtime: Runtime | None = None) -> list[str]:
        bad = []
        if cid in self.container_ids():
            bad.append(f"container {cid[:12]} still listed")
        bad += [f"mount {m}" for m in mounts_mentioning(cid)]
        bad += [f"cgroup {d}" for d in cgroup_dirs(self.cgroup_path(cid))]
        roots = {Path("/run/runc"), Path("/run/crun"), Path("/run/hostjob")}
        if runtime is not None:
            roots.add(runtime.default_root)
        bad += [f"runtime state {r / cid}" for r in sorted(roots) if (r / cid).exists()]
        bad += [f"conmon {p}: {c[:120]}" for p, c in processes_matching("conmon", cid)]
        return sorted(set(bad))

    # -- cleanup
    def teardown(self) -> list[str]:
        problems: list[str] = []
        if self.env:
            try:
                ids = self.container_ids()
                if ids:
                    problems.append(f"containers left at teardown: {[i[:12] for i in ids]}")
                    self.podman("unpause", "--all", timeout=60)
                    self.podman("rm", "--all", "--force", "--time", "0", timeout=120)
                self.podman("system", "reset", "--force", timeout=120)
            except HarnessError as e:
                problems.append(f"cleanup through podman failed: {e}")
        conmons = processes_matching("conmon", str(self.dir))
        if conmons:
            problems.append(f"conmon processes left: {conmons}")
            kill_pids(p for p, _ in conmons)
        mounts = unmount_all_under(self.dir)
        if mounts:
            problems.append(f"mounts left under {self.dir}: {mounts}")
        if self.cgroup_manager == "cgroupfs" and not self.cgroup_parent_existed:
            stuck = remove_cgroup("/libpod_parent")
            if stuck:
                problems.append(f"cgroups left: {stuck}")
        return problems


# ---------------------------------------------------------------------------------------------
# what a container's process sees, per runtime kind

PROBE_SH = (
    'echo "mp=${CONTAINER_SANDBOX_MOUNT_POINT-unset}"; '
    'echo "net=$(readlink /proc/self/ns/net)"; '
    'echo "pid=$(readlink /proc/self/ns/pid)"'
)
"""A shell snippet for the container: prints its sandbox mount point and namespaces."""


def parse_probe(out: str) -> dict[str, str]:
    res = {}
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        if sep and k in ("mp", "net", "pid"):
            res[k] = v.strip()
    return res


def probe_problems(runtime: Runtime, out: str) -> list[str]:
    """What is wrong with PROBE_SH's output for this runtime: a job container (hostjob) must
    see CONTAINER_SANDBOX_MOUNT_POINT and the host's network and PID namespaces; runc and crun
    give the process its own namespaces and set no such variable."""
    got = parse_probe(out)
    if set(got) != {"mp", "net", "pid"}:
        return [f"probe output incomplete: {out!r}"]
    host = {k: os.readlink(f"/proc/self/ns/{k}") for k in ("net", "pid")}
    bad = []
    if runtime.is_job_container:
        if got["mp"] in ("unset", "") or not os.path.isabs(got["mp"]):
            bad.append(f"CONTAINER_SANDBOX_MOUNT_POINT not set: {got['mp']!r}")
        bad += [
            f"{k} namespace {got[k]} is not the host's {host[k]}"
            for k in ("net", "pid")
            if got[k] != host[k]
        ]
    else:
        if got["mp"] != "unset":
            bad.append(f"unexpected CONTAINER_SANDBOX_MOUNT_POINT={got['mp']}")
        bad += [
            f"{k} namespace is the host's ({host[k]})" for k in ("net", "pid") if got[k] == host[k]
        ]
    return bad


def cgroup_frozen(path: str) -> bool | None:
    """Freezer state of cgroup ``path``: v1 freezer.state, else v2 cgroup.events; None if the
    cgroup has no freezer."""
    rel = path.strip("/")
    v1 = CGROUP_ROOT / "freezer" / rel / "freezer.state"
    if v1.exists():
        return v1.read_text().strip() == "FROZEN"
    for h in cgroup_hierarchies():
        ev = h / rel / "cgroup.events"
        if ev.exists():
            return "frozen 1" in ev.read_text()
    return None


def process_cgroups(pid: int) -> list[str]:
    """The cgroup paths of process ``pid`` as the host sees them: one per v1 hierarchy on a
    legacy or hybrid host (the hybrid cgroup2 only tracks processes, and crun run through the
    hybrid wrapper does not use it), else the one cgroup2 path."""
    with open(f"/proc/{pid}/cgroup") as f:
        rows = [line.rstrip("\n").split(":", 2) for line in f if line.strip()]
    v1 = [r[2] for r in rows if r[1]]
    return v1 or [r[2] for r in rows]
