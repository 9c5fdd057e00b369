"""detect(): which hierarchies are mounted where, from mountinfo text."""

from __future__ import annotations

from pathlib import Path

import pytest

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from hostjob.errors import CgroupError

HYBRID = """\
24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 24 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
37 30 0:33 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,net_cls,net_prio
38 30 0:34 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,cpuset,clone_children
39 30 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,pids
40 30 0:36 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,freezer
41 30 0:37 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:21 - cgroup cgroup rw,blkio
42 30 0:38 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:22 - cgroup cgroup rw,hugetlb,release_agent=/x
"""

# This VM: cpu and cpuacct in separate hierarchies, hugetlb only in cgroup2.
SPLIT = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

V2 = """\
22 1 8:1 / / rw - ext4 /dev/root rw
28 22 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
29 22 0:25 /user.slice /mnt/elsewhere rw,relatime shared:4 - cgroup2 cgroup2 rw
"""

# Inside a container without a cgroup namespace: the mounts show a sub-cgroup as
# their root; a later bind mount of the real root wins for the same hierarchy.
NAMESPACED = """\
600 590 0:40 /docker/0123abcd /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
601 590 0:41 /docker/0123abcd /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
602 590 0:40 / /host/cgroup/memory rw - cgroup cgroup rw,memory
603 590 0:42 /.. /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
"""

ESCAPED = r"""70 60 0:50 / /mnt/my\040cgroups/mem rw - cgroup cgroup rw,memory
71 60 0:51 / /mnt/tab\011dir rw - cgroup2 cgroup2 rw
"""


def by_mount(mounts: cg.Mounts) -> dict[str, tuple[str, ...]]:
    return {h.mountpoint: h.controllers for h in mounts.hierarchies}


def test_hybrid_host_with_comounted_cpu_cpuacct() -> None:
    m = cg.parse_mountinfo(HYBRID)
    assert m.version == 1
    assert by_mount(m) == {
        "/sys/fs/cgroup/systemd": ("name=systemd",),
        "/sys/fs/cgroup/cpu,cpuacct": ("cpu", "cpuacct"),
        "/sys/fs/cgroup/memory": ("memory",),
        "/sys/fs/cgroup/net_cls,net_prio": ("net_cls", "net_prio"),
        "/sys/fs/cgroup/cpuset": ("cpuset",),  # clone_children is an option, not a controller
        "/sys/fs/cgroup/pids": ("pids",),
        "/sys/fs/cgroup/freezer": ("freezer",),
        "/sys/fs/cgroup/blkio": ("blkio",),
        "/sys/fs/cgroup/hugetlb": ("hugetlb",),  # release_agent= dropped
    }
    assert m.unified is not None and m.unified.mountpoint == "/sys/fs/cgroup/unified"
    cpu, cpuacct = m.hierarchy("cpu"), m.hierarchy("cpuacct")
    assert cpu is cpuacct and cpu is not None
    assert m.hierarchy("rdma") is None


def test_split_cpu_and_cpuacct_as_on_this_vm() -> None:
    m = cg.parse_mountinfo(SPLIT)
    assert m.version == 1
    assert m.hierarchy("cpu") is not m.hierarchy("cpuacct")
    assert by_mount(m)["/sys/fs/cgroup/cpuacct"] == ("cpuacct",)
    assert m.unified is not None and m.unified.version == 2


def test_pure_v2_prefers_sys_fs_cgroup() -> None:
    m = cg.parse_mountinfo(V2)
    assert m.version == 2
    assert m.hierarchies == []
    assert m.unified is not None
    assert (m.unified.mountpoint, m.unified.root) == ("/sys/fs/cgroup", "/")


def test_v2_second_mount_order_does_not_matter() -> None:
    lines = V2.splitlines()
    m = cg.parse_mountinfo("\n".join([lines[0], lines[2], lines[1]]))
    assert m.unified is not None and m.unified.mountpoint == "/sys/fs/cgroup"


def test_namespaced_roots_are_kept_and_root_mount_preferred() -> None:
    m = cg.parse_mountinfo(NAMESPACED)
    memory = m.hierarchy("memory")
    pids = m.hierarchy("pids")
    assert memory is not None and pids is not None
    assert (memory.mountpoint, memory.root) == ("/host/cgroup/memory", "/")
    assert (pids.mountpoint, pids.root) == ("/sys/fs/cgroup/pids", "/docker/0123abcd")
    assert m.unified is not None and m.unified.root == "/.."


def test_escaped_mount_points() -> None:
    m = cg.parse_mountinfo(ESCAPED)
    assert by_mount(m) == {"/mnt/my cgroups/mem": ("memory",)}
    assert m.unified is not None and m.unified.mountpoint == "/mnt/tab\tdir"


def test_named_hierarchy_alone_is_not_v1() -> None:
    text = SPLIT.splitlines()
    m = cg.parse_mountinfo("\n".join([text[0], text[4], text[5]]))
    assert m.version == 2


def test_no_cgroups_at_all() -> None:
    m = cg.parse_mountinfo("24 1 8:1 / / rw - ext4 /dev/sda1 rw\ngarbage line\n")
    assert m.version == 0
    with pytest.raises(CgroupError, match="no cgroup filesystem"):
        open_manager("/x", mounts=m)


def test_detect_reads_this_host_once() -> None:
    first = cg.detect()
    assert cg.detect() is first
    assert first.version in (1, 2)


def test_mounts_at_fake_v1_layout(tmp_path: Path) -> None:
    for name in ("cpu,cpuacct", "memory", "systemd"):
        (tmp_path / name).mkdir()
    (tmp_path / "cpu").symlink_to(tmp_path / "cpu,cpuacct")
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    m = cg.mounts_at(str(tmp_path))
    assert m.version == 1
    assert sorted(h.controllers for h in m.hierarchies) == [
        ("cpu", "cpuacct"),
        ("memory",),
        ("name=systemd",),
    ]
    assert m.unified is not None and m.unified.mountpoint == str(tmp_path / "unified")


def test_mounts_at_cgroup2_root(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    m = cg.mounts_at(str(tmp_path) + "/")
    assert m.version == 2 and m.unified is not None
    assert m.unified.mountpoint == str(tmp_path)


def test_open_manager_picks_the_version(tmp_path: Path) -> None:
    v1 = open_manager("/a/b", mounts=cg.parse_mountinfo(SPLIT))
    assert v1.version == 1
    assert v1.procs_files() == [
        "/sys/fs/cgroup/cpu/a/b/cgroup.procs",
        "/sys/fs/cgroup/cpuacct/a/b/cgroup.procs",
        "/sys/fs/cgroup/memory/a/b/cgroup.procs",
        "/sys/fs/cgroup/systemd/a/b/cgroup.procs",
        "/sys/fs/cgroup/unified/a/b/cgroup.procs",
    ]
    v2 = open_manager("a//b/", mounts=cg.parse_mountinfo(V2))
    assert v2.version == 2 and v2.path == "/a/b"
    assert v2.procs_files() == ["/sys/fs/cgroup/a/b/cgroup.procs"]


def test_entry_is_tasks_on_v1_and_the_cgroup2_directory() -> None:
    # The container's processes: v1 through `tasks` (no grace period), cgroup2 by
    # clone3(CLONE_INTO_CGROUP) into the directory (hybrid: the unified mount's).
    entry = open_manager("/a/b", mounts=cg.parse_mountinfo(SPLIT)).entry()
    assert entry.tasks == [
        "/sys/fs/cgroup/cpu/a/b/tasks",
        "/sys/fs/cgroup/cpuacct/a/b/tasks",
        "/sys/fs/cgroup/memory/a/b/tasks",
        "/sys/fs/cgroup/systemd/a/b/tasks",
    ]
    assert entry.unified == "/sys/fs/cgroup/unified/a/b"
    entry = open_manager("/a/b", mounts=cg.parse_mountinfo(V2)).entry()
    assert entry.tasks == [] and entry.unified == "/sys/fs/cgroup/a/b"


def test_manager_protocol_is_exported() -> None:
    from hostjob.cgroups._manager import Manager

    assert cg.Manager is Manager
    with pytest.raises(AttributeError):
        cg.NoSuchThing  # noqa: B018


def test_only_cgroup_mounts_are_parsed_among_many() -> None:
    """A busy node's mountinfo: hundreds of overlay and tmpfs mounts (one of them at a
    path that looks like a cgroup line), the same hierarchies as without them."""
    noise = [
        rf"{1000 + i} 24 0:{90 + i} / /run/k8s/pod{i}/rootfs\040-\040cgroup rw shared:{i} - overlay"
        f" overlay rw,lowerdir=/l{i}"
        for i in range(500)
    ]
    lines = HYBRID.splitlines()
    busy = "\n".join([*lines[:4], *noise, *lines[4:]]) + "\n"
    assert cg.parse_mountinfo(busy).rows() == cg.parse_mountinfo(HYBRID).rows()
