"""The manager of a job's cgroup on this host: ``open_manager`` picks the driver (the v2
manager on a unified host, the v1 manager on a v1 or hybrid one) and imports only that
one; ``refuse_existing`` keeps a new job from taking a cgroup that is there already.
Apart from ``hostjob.cgroups``, which every runtime command loads: a command that only
asks whether a job is frozen, or removes an empty one, never loads a manager."""

from __future__ import annotations

from hostjob.boot import paths
from hostjob.cgroups import Mounts, clean_path, detect, mounts_at
from hostjob.errors import CgroupError, CgroupExists

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cgroups._manager import Manager


def open_manager(path: str, *, root: str | None = None, mounts: Mounts | None = None) -> Manager:
    """The manager of cgroup ``path`` (from ``resolve_path``) on this host.

    ``root`` points it at another tree laid out like ``/sys/fs/cgroup`` or at a
    cgroup2 mount (e.g. ``/sys/fs/cgroup/unified`` on a hybrid host); ``mounts``
    gives the hierarchies outright. No filesystem access happens here beyond
    ``detect()``'s one read of mountinfo (or ``mounts_at``'s scan of ``root``).
    """
    path = clean_path(path, "cgroup path")
    if mounts is None:
        mounts = mounts_at(root) if root is not None else detect()
    if mounts.version == 2 and mounts.unified is not None:
        from hostjob.cgroups.v2 import V2Manager

        return V2Manager(path, mounts.unified.mountpoint)
    if mounts.version == 1:
        from hostjob.cgroups.v1 import V1Manager

        return V1Manager(path, mounts)
    raise CgroupError("no cgroup filesystem is mounted (looked in /proc/self/mountinfo)")


def refuse_existing(path: str, manager: Manager) -> None:
    """A job owns its cgroup: teardown (a failed create, delete, kill --all) kills every
    process in it and removes it. So the cgroup must be one hostjob makes for this
    container: a cgroupsPath naming one that exists already, in any hierarchy (a
    typo'd ``/system.slice``, another job's, an empty one someone prepared), is
    refused before anything is made. runc adopts an existing empty cgroup; hostjob never
    adopts, writes, kills or removes a cgroup it did not make for this container."""
    found = [d for d in manager.dirs() if paths.isdir(d)]
    if found:
        raise CgroupExists(path, found[0], manager.pids())
