"""cgroup v2 cpuset: ``cpuset.cpus``, ``cpuset.mems`` (empty = the parent's, no init needed)."""

from __future__ import annotations

from hostjob.cgroups._fs import Dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec.resources import CPU


def apply(d: Dir, c: CPU) -> None:
    if c.cpus:
        d.write("cpuset.cpus", c.cpus)
    if c.mems:
        d.write("cpuset.mems", c.mems)
