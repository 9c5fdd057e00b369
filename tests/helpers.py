"""Shared test helpers: configs, bundles, and the hostjob command under test."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
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
