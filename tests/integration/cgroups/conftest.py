"""Real cgroups on this host: each test works under its own parent cgroup, and every
directory it leaves (in any hierarchy) is killed empty and removed afterwards."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

import hostjob.cgroups as cg

Spawn = Callable[..., subprocess.Popen[bytes]]


def hierarchy_roots() -> list[str]:
    m = cg.detect()
    roots = [h.mountpoint for h in m.hierarchies]
    if m.unified is not None:
        roots.append(m.unified.mountpoint)
    return roots


def cat(path: str) -> str:
    with open(path) as f:
        return f.read()


def leftovers(path: str) -> list[str]:
    """Directories of cgroup ``path`` (and below) that exist in any hierarchy."""
    found = []
    for root in hierarchy_roots():
        for dirpath, _dirs, _files in os.walk(root + path):
            found.append(dirpath)
    return found


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        pass


def purge(path: str) -> None:
    """Kill whatever runs under ``path`` in every hierarchy and rmdir it all, deepest first."""
    for _ in range(50):
        dirs = sorted(leftovers(path), key=lambda d: d.count("/"), reverse=True)
        if not dirs:
            return
        for d in dirs:
            _write(d + "/freezer.state", "THAWED")
            _write(d + "/cgroup.freeze", "0")
            _write(d + "/cgroup.kill", "1")
            try:
                pids = cat(d + "/cgroup.procs").split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
        for d in dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"cannot clean up cgroups: {leftovers(path)}")


@pytest.fixture
def parent() -> Iterator[str]:
    """A fresh parent cgroup path, e.g. /hostjob-test-1a2b3c4d, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("real cgroups need root")
    name = f"/hostjob-test-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        purge(name)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start processes; ``join`` = cgroup.procs files the child enters before exec."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, join: list[str] | None = None, **kw: object) -> subprocess.Popen[bytes]:
        def enter() -> None:
            # Between fork and exec, as any process can join a job from outside hostjob.
            for path in join or []:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)

        p = subprocess.Popen(list(argv) or ["sleep", "60"], preexec_fn=enter, **kw)  # type: ignore[call-overload]
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (reaped, or a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or the read
        return True


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.01)
    return gone(pid)


def cgroups_of(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cgroup") as f:
        return [line.split(":", 2)[2] for line in f.read().splitlines()]
