"""``/proc/self/mountinfo``, read one way for the whole of hostjob: which mounts are
at or below a path (teardown), whether a path is a mount point (overlays), which
mount holds a path (the writable layer's device), and the cgroup hierarchies.

Light on purpose (``posix`` only, not ``os``: see ``hostjob.boot.paths``): runtime commands read it
on their start-up path.
"""

from __future__ import annotations

import posix

from hostjob.boot import paths

MOUNTINFO = "/proc/self/mountinfo"


class Mount:
    """One line of mountinfo: the mount's root inside its filesystem, where it is
    mounted, the filesystem type and its superblock options."""

    __slots__ = ("fstype", "options", "point", "root")

    def __init__(self, root: str, point: str, fstype: str, options: str) -> None:
        self.root = root
        self.point = point
        self.fstype = fstype
        self.options = options

    def __repr__(self) -> str:
        return f"Mount({self.fstype} at {self.point}, root {self.root})"


def unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as ``\\ooo``."""
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse(text: str) -> list[Mount]:
    """Every mount of a mountinfo text, in mount order (malformed lines skipped)."""
    mounts = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split(" ")
        after = tail.split(" ")
        if not sep or len(fields) < 5 or len(after) < 3:
            continue
        mounts.append(Mount(unescape(fields[3]), unescape(fields[4]), after[0], after[2]))
    return mounts


def read(path: str | None = None) -> list[Mount]:
    with open(path or MOUNTINFO, "rb") as f:
        return parse(f.read().decode("utf-8", "surrogateescape"))


def mounts_under(path: str) -> list[str]:
    """Mount points at or below ``path``, in mount order (deepest last)."""
    prefix = path.rstrip("/") + "/"
    return [m.point for m in read() if m.point == path or m.point.startswith(prefix)]


def is_mountpoint(path: str) -> bool:
    real = paths.realpath(path)
    return any(m.point == real for m in read())


def mount_of(path: str) -> Mount | None:
    """The mount that holds ``path`` (the last of the longest matching mount points)."""
    best: Mount | None = None
    for mount in read():
        point = mount.point
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            best = mount
    return best


def points_of_host_rooted_namespaces() -> set[str]:
    """The mount points of every mount namespace on the host whose processes see the
    host's ``/`` as their root -- the host's own, and those of bind-mode job containers of
    any state root -- but not those of containers with a root of their own (runc's,
    whose mount points are relative to it). A path made for bind mode is removed only
    when none lies at or below it: ``rmdir`` would take other namespaces' mounts on it
    with it."""
    root = posix.stat("/")
    seen: set[str] = set()
    points: set[str] = set()
    for name in posix.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            namespace = posix.readlink(f"/proc/{name}/ns/mnt")
            if namespace in seen:
                continue
            st = posix.stat(f"/proc/{name}/root")
            if (st.st_dev, st.st_ino) != (root.st_dev, root.st_ino):
                continue
            mounts = read(f"/proc/{name}/mountinfo")
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        seen.add(namespace)
        points.update(m.point for m in mounts)
    return points
