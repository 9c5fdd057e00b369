"""cgroup v1 cpuset: a new cgroup starts with no CPUs and no memory nodes.

A process cannot join a cpuset cgroup with an empty ``cpuset.cpus`` or
``cpuset.mems`` (ENOSPC), so every empty level from the root down is filled in
from its parent. Parents hostjob makes get ``cgroup.clone_children = 1``, so the
kernel fills in the next container's cgroup at mkdir: one read checks it.
"""

from __future__ import annotations

from hostjob.cgroups._fs import Dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec.resources import CPU


def new_parent(path: str) -> None:
    d = Dir(path)
    try:
        d.try_write("cgroup.clone_children", "1")
    finally:
        d.close()


def ensure(leaf: Dir, mountpoint: str, path: str) -> None:
    """Give the cgroup (and any empty ancestor) its parent's CPUs and memory nodes."""
    if leaf.read("cpuset.cpus").strip() and leaf.read("cpuset.mems").strip():
        return
    parent = Dir(mountpoint)
    try:
        cpus = parent.read("cpuset.cpus").strip()
        mems = parent.read("cpuset.mems").strip()
    finally:
        parent.close()
    current = mountpoint
    parts = path.strip("/").split("/")
    for i, part in enumerate(parts):
        current = f"{current}/{part}"
        d = leaf if i == len(parts) - 1 else Dir(current)
        try:
            own = d.read("cpuset.cpus").strip()
            if not own:
                d.write("cpuset.cpus", cpus)
                own = cpus
            own_mems = d.read("cpuset.mems").strip()
            if not own_mems:
                d.write("cpuset.mems", mems)
                own_mems = mems
        finally:
            if d is not leaf:
                d.close()
        cpus, mems = own, own_mems


def apply(d: Dir, c: CPU) -> None:
    if c.cpus:
        d.write("cpuset.cpus", c.cpus)
    if c.mems:
        d.write("cpuset.mems", c.mems)
