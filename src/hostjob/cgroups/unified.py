"""cgroup v2 core files: controllers, ``cgroup.freeze``, ``cgroup.kill``, ``cgroup.events``.

Used by the v2 manager and, on hybrid hosts, by the v1 manager for its cgroup in
the unified hierarchy (where e.g. ``hugetlb`` or ``cgroup.kill`` may live).
"""

from __future__ import annotations

import errno
import io
import posix
import time

from hostjob.boot import paths
from hostjob.cgroups._fs import Dir, keyed_value
from hostjob.errors import CgroupError, MissingController

FREEZE_TIMEOUT = 10.0


def controllers(d: Dir) -> set[str]:
    text = d.read_optional("cgroup.controllers")
    return set(text.split()) if text else set()


def enable(mountpoint: str, path: str, leaf: Dir, wanted: set[str]) -> set[str]:
    """Enable ``wanted`` controllers down to ``path``; returns those the leaf then has.

    Writes ``cgroup.subtree_control`` of the root and every ancestor (never the
    leaf: a cgroup with processes cannot delegate domain controllers), and only if
    the leaf lacks one: the common case costs one read.
    """
    have = controllers(leaf)
    missing = wanted - have
    if not missing:
        return have
    line = " ".join("+" + c for c in sorted(missing))
    parts = path.strip("/").split("/")
    current = mountpoint
    for part in parts:
        d = Dir(current)
        try:
            if d.try_write("cgroup.subtree_control", line):
                # All at once failed (one controller cannot be enabled): do what can be.
                for c in sorted(missing):
                    d.try_write("cgroup.subtree_control", "+" + c)
        finally:
            d.close()
        current = f"{current}/{part}"
    return controllers(leaf)


def wait_event(d: Dir, key: str, want: int, timeout: float) -> bool | None:
    """Wait until ``cgroup.events`` says ``key want``; None if the cgroup is gone."""
    import select

    deadline = time.monotonic() + timeout
    fd = -1
    poller = None
    try:
        while True:
            try:
                text = d.read_optional("cgroup.events")
            except CgroupError:
                text = None
            if text is None:
                return None
            if keyed_value(text, key) == want:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller is None:
                # kernfs wakes pollers with POLLPRI on change; check once more after
                # arming so a change in between is not missed.
                fd = posix.open(
                    "cgroup.events",
                    posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC,
                    dir_fd=d.fd(),
                )
                posix.read(fd, 4096)
                poller = select.poll()
                poller.register(fd, select.POLLPRI)
                continue
            if poller.poll(min(left, 0.05) * 1000):
                posix.lseek(fd, 0, io.SEEK_SET)
                posix.read(fd, 4096)  # re-arm
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENODEV):
            return None
        raise CgroupError(f"cannot watch {d.path}/cgroup.events: {err.strerror}") from err
    finally:
        if fd >= 0:
            posix.close(fd)


def freeze(d: Dir, timeout: float = FREEZE_TIMEOUT) -> None:
    code = d.try_write("cgroup.freeze", "1")
    if code == errno.ENOENT and paths.isdir(d.path):
        raise MissingController("freezer", "freezing the job (cgroup.freeze)")
    if code:
        d.write("cgroup.freeze", "1")  # raises with the message
    done = wait_event(d, "frozen", 1, timeout)
    if done is None:
        raise CgroupError(f"cannot freeze cgroup {d.path}: it no longer exists")
    if not done:
        d.try_write("cgroup.freeze", "0")  # never leave it half frozen
        raise CgroupError(
            f"cannot freeze cgroup {d.path}: its processes did not stop within {timeout:g}s"
        )


def thaw(d: Dir, timeout: float = FREEZE_TIMEOUT) -> None:
    code = d.try_write("cgroup.freeze", "0")
    if code == errno.ENOENT:
        return  # no freezer: nothing can be frozen
    if code:
        d.write("cgroup.freeze", "0")
    wait_event(d, "frozen", 0, timeout)


def frozen(d: Dir) -> bool:
    text = d.read_optional("cgroup.freeze")
    return text is not None and text.strip() == "1"


def kill(d: Dir) -> bool:
    """SIGKILL the whole subtree atomically (kernel 5.14+); False if the kernel lacks it."""
    code = d.try_write("cgroup.kill", "1")
    if code == errno.ENOENT:
        return not paths.isdir(d.path)  # gone: nothing left to kill
    if code:
        d.write("cgroup.kill", "1")
    return True
