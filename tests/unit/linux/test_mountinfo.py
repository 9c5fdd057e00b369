"""mountinfo parsing: escapes, non-ASCII paths, the mount that holds a path."""

from __future__ import annotations

from hostjob.linux import mountinfo

TEXT = (
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
    "40 27 0:40 / /run/hostjob/c1/rootfs rw - overlay overlay rw,lowerdir=l,upperdir=/var/u,workdir=/var/w\n"
    "41 27 0:41 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
    "42 27 0:42 / /mnt/café rw - tmpfs tmpfs rw\n"
    "43 31 0:29 /sub /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
    "garbage line\n"
)


def test_parse() -> None:
    mounts = mountinfo.parse(TEXT)
    assert [m.point for m in mounts] == [
        "/proc", "/", "/run/hostjob/c1/rootfs", "/mnt/with space", "/mnt/café", "/sys/fs/cgroup/cpu",
    ]  # fmt: skip
    cgroup = mounts[-1]
    assert (cgroup.root, cgroup.fstype, cgroup.options) == ("/sub", "cgroup", "rw,cpu,cpuacct")


def test_unescape() -> None:
    assert mountinfo.unescape("/a\\040b\\011c\\134d") == "/a b\tc\\d"
    assert mountinfo.unescape("/café\\040x") == "/café x"  # non-ASCII survives


def test_queries_on_this_host(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mountinfo"
    path.write_text(TEXT)
    monkeypatch.setattr(mountinfo, "MOUNTINFO", str(path))
    assert mountinfo.mounts_under("/run/hostjob") == ["/run/hostjob/c1/rootfs"]
    assert mountinfo.mounts_under("/mnt/with space") == ["/mnt/with space"]
    held = mountinfo.mount_of("/run/hostjob/c1/rootfs/etc/passwd")
    assert held is not None and held.fstype == "overlay" and "upperdir=/var/u" in held.options
    root = mountinfo.mount_of("/etc")
    assert root is not None and root.point == "/"
    assert mountinfo.is_mountpoint("/proc")
