"""Host mode: the sandbox mount point, volume links, and a host left untouched."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, hostjob_env, mounts_under, new_id


def mount_table(ours: Path) -> list[str]:
    """The host's mount points, minus what other test suites running beside us
    (containerd, podman) mount in their own temp dirs."""
    with open("/proc/self/mountinfo") as f:
        points = sorted(line.split()[4] for line in f)
    return [
        p
        for p in points
        if p.startswith(str(ours)) or not p.startswith(("/tmp/", "/run/containerd", "/run/netns"))
    ]


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_host_mode_mounts_nothing(hj: Hostjob, bundle, tmp_path: Path) -> None:
    b = bundle(base_config("sleep", "300"))
    before_mounts = mount_table(tmp_path)
    before_rootfs = tree(b / "rootfs")
    cid = new_id()
    hj.ok("create", "-b", str(b), cid)
    hj.ok("start", cid)
    assert mount_table(tmp_path) == before_mounts  # no /proc, /sys, /dev, nothing
    assert tree(b / "rootfs") == before_rootfs  # no device nodes, no mount points
    hj.ok("delete", "--force", cid)
    assert mount_table(tmp_path) == before_mounts


def test_rootfs_mount_point(hj: Hostjob, bundle, tmp_path: Path) -> None:
    mount_point = tmp_path / "sandbox" / "deep"
    script = (
        'echo "$CONTAINER_SANDBOX_MOUNT_POINT";'
        ' cat "$CONTAINER_SANDBOX_MOUNT_POINT/etc/image-release"'
    )
    config = base_config("sh", "-c", script + "; sleep 300")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mount_point)}}
    cid = new_id()
    out = tmp_path / "out"
    b = bundle(config)
    with open(out, "w") as stdout:  # the container's stdout, which create hands on
        subprocess.run(
            hj.argv("create", "-b", str(b), cid), stdout=stdout, check=True, env=hostjob_env()
        )
    assert mounts_under(str(mount_point)) == [str(mount_point)]
    assert (mount_point / "etc" / "image-release").read_text() == "hostjob test image\n"
    hj.ok("start", cid)
    deadline = time.monotonic() + 10
    while out.read_text().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.read_text().splitlines() == [str(mount_point), "hostjob test image"]
    hj.ok("delete", "--force", cid)
    assert mounts_under(str(mount_point)) == []
    assert not mount_point.exists()  # created by hostjob, removed by hostjob
    assert not (tmp_path / "sandbox").exists()


def test_mount_point_annotations(hj: Hostjob, bundle, tmp_path: Path) -> None:
    location = tmp_path / "locations"
    config = base_config("sh", "-c", 'echo "$CONTAINER_SANDBOX_MOUNT_POINT"')
    config["annotations"] = {"microsoft.com/hostprocess-rootfs-location": str(location)}
    cid = new_id()
    result = hj("run", "-b", str(bundle(config)), cid)
    assert result.stdout == f"{location / cid}\n", result.stderr
    assert mounts_under(str(location)) == []

    config["annotations"] = {"io.hostjob.rootfs-mount-point": str(tmp_path / "mp2")}
    result = hj("run", "-b", str(bundle(config, "b2")), new_id())
    assert result.stdout == f"{tmp_path / 'mp2'}\n", result.stderr
    assert mounts_under(str(tmp_path / "mp2")) == []


def test_mount_point_existing_empty_dir_is_kept(hj: Hostjob, bundle, tmp_path: Path) -> None:
    mount_point = tmp_path / "existing"
    mount_point.mkdir()
    config = base_config("true")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mount_point)}}
    assert hj("run", "-b", str(bundle(config)), new_id()).returncode == 0
    assert mount_point.is_dir() and mounts_under(str(mount_point)) == []


@pytest.mark.parametrize("bad", ["/", "/proc/x", "/sys", "/dev/shm/x", "relative/path"])
def test_mount_point_refused(hj: Hostjob, bundle, bad: str) -> None:
    config = base_config("true")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": bad}}
    cid = new_id()
    assert "rootfsMountPoint" in hj.fail("create", "-b", str(bundle(config)), cid)
    assert not (hj.root / cid).exists()


def test_mount_point_not_empty_refused(hj: Hostjob, bundle, tmp_path: Path) -> None:
    mount_point = tmp_path / "busy"
    mount_point.mkdir()
    (mount_point / "somebody-elses-file").write_text("x")
    config = base_config("true")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mount_point)}}
    cid = new_id()
    assert "not empty" in hj.fail("create", "-b", str(bundle(config)), cid)
    assert (mount_point / "somebody-elses-file").read_text() == "x"
    assert mounts_under(str(mount_point)) == []
    assert not (hj.root / cid).exists()


def test_readonly_rootfs(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config(
        "sh",
        "-c",
        "touch $CONTAINER_SANDBOX_MOUNT_POINT/new 2>/dev/null && echo writable || echo readonly",
    )
    config["root"]["readonly"] = True
    b = bundle(config)
    assert hj("run", "-b", str(b), new_id()).stdout == "readonly\n"
    assert mounts_under(str(b / "rootfs")) == []
    assert not (b / "rootfs" / "new").exists()


def test_volumes_become_links(hj: Hostjob, bundle, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello").write_text("from the host\n")
    config = base_config("cat", "$CONTAINER_SANDBOX_MOUNT_POINT/var/lib/data/hello")
    config["mounts"] = [
        {
            "destination": "/var/lib/data",
            "type": "bind",
            "source": str(data),
            "options": ["rbind", "rw"],
        },
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    ]
    b = bundle(config)
    before = mount_table(tmp_path)
    cid = new_id()
    hj.ok("create", "-b", str(b), cid)
    link = b / "rootfs" / "var" / "lib" / "data"
    assert link.is_symlink() and os.readlink(link) == str(data)
    assert mount_table(tmp_path) == before
    hj.ok("start", cid)
    time.sleep(0.2)
    hj.ok("delete", "--force", cid)
    assert not link.exists() and not (b / "rootfs" / "var").exists()  # what hostjob made is gone
    result = hj("run", "-b", str(b), new_id())
    assert result.stdout == "from the host\n", result.stderr


def test_a_read_only_volume_is_its_source_bound_read_only(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """A link would let the job write into the source (docker's `-v dir:/data:ro`
    did): a read-only volume is the source bound read-only at the link's place, seen
    host-wide like a link, taken off at delete with the directory made for it. A file
    volume covers the image's file (docker's placeholder) and leaves it as it was."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello").write_text("from the host\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 host\n")
    script = (
        "mp=$CONTAINER_SANDBOX_MOUNT_POINT; cat $mp/var/lib/data/hello $mp/etc/hosts;"
        " touch $mp/var/lib/data/new 2>/dev/null && echo written || echo refused;"
        " echo x >> $mp/etc/hosts 2>/dev/null && echo written || echo refused; sleep 300"
    )
    config = base_config("sh", "-c", script)
    ro = ["rbind", "ro", "rprivate"]
    config["mounts"] = [
        {"destination": "/var/lib/data", "type": "bind", "source": str(data), "options": ro},
        {"destination": "/etc/hosts", "type": "bind", "source": str(hosts), "options": ro},
    ]
    b = bundle(config)
    rootfs = b / "rootfs"
    (rootfs / "etc" / "hosts").touch()  # docker's init layer: an empty placeholder
    before = mount_table(tmp_path)
    cid = new_id()
    out = tmp_path / "out"
    with open(out, "w") as stdout:
        subprocess.run(
            hj.argv("run", "-d", "-b", str(b), cid), stdout=stdout, check=True, env=hostjob_env()
        )
    deadline = time.monotonic() + 10
    while out.read_text().count("\n") < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.read_text().splitlines() == ["from the host", "127.0.0.1 host", "refused", "refused"]
    real = os.path.realpath(rootfs)
    assert mounts_under(real) == [f"{real}/var/lib/data", f"{real}/etc/hosts"]
    assert not (data / "new").exists() and hosts.read_text() == "127.0.0.1 host\n"
    hj.ok("delete", "--force", cid)
    assert mount_table(tmp_path) == before
    assert not (rootfs / "var").exists()
    assert (rootfs / "etc" / "hosts").read_text() == ""  # the placeholder, as it was


def test_a_tmpfs_volume_is_mounted_where_the_job_sees_it(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """docker's and podman's --tmpfs: a tmpfs of the container's own under the mount
    point (its options given to it), unmounted at delete; with a mount point of its
    own, the tmpfs is under that one. The tmpfs mounts of every client's default spec
    (/dev, /dev/shm, containerd's /run) stay the host's."""
    mount_point = tmp_path / "mp"
    script = (
        "mp=$CONTAINER_SANDBOX_MOUNT_POINT; echo data > $mp/scratch/f;"
        " grep -F \" $mp/scratch \" /proc/self/mounts | cut -d' ' -f3,4;"
        " touch $mp/frozen/x 2>/dev/null && echo written || echo refused"
    )
    config = base_config("sh", "-c", script)
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mount_point)}}
    config["mounts"] = [
        {"destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "noexec", "rprivate", "size=1m", "mode=1770"]},
        {"destination": "/frozen", "type": "tmpfs", "source": "tmpfs", "options": ["ro"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["size=1m"]},
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    ]  # fmt: skip
    b = bundle(config)
    before = mount_table(tmp_path)
    result = hj("run", "-b", str(b), new_id())
    fstype_options, written = result.stdout.splitlines()
    fstype, _, options = fstype_options.partition(" ")
    # (6.1's tmpfs also lists inode64, which 6.18's leaves out as its default)
    assert fstype == "tmpfs" and written == "refused", result.stderr
    wanted = {"rw", "nosuid", "nodev", "noexec", "relatime", "size=1024k", "mode=1770"}
    assert set(options.split(",")) - {"inode64"} == wanted, options
    assert mount_table(tmp_path) == before and not mount_point.exists()
    for made in ("scratch", "frozen", "run", "dev"):
        assert not (b / "rootfs" / made).exists(), made


def test_a_tmpfs_that_cannot_be_mounted_is_refused(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("true")
    config["mounts"] = [
        {"destination": "/t", "type": "tmpfs", "source": "tmpfs", "options": ["size=lots"]}
    ]
    b = bundle(config)
    cid = new_id()
    err = hj.fail("create", "-b", str(b), cid)
    assert "tmpfs /t: cannot mount a tmpfs (size=lots)" in err, err
    assert not (hj.root / cid).exists() and not (b / "rootfs" / "t").exists()


def test_volumes_planned_together_and_undone(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """Every link is planned and recorded before any is made (one write of the record):
    two links under one missing directory, one in place of an empty directory of the
    image; delete takes back exactly that -- the directory made, the one replaced."""
    data = tmp_path / "data"
    data.mkdir()
    config = base_config("true")
    config["mounts"] = [
        {"destination": "/etc/extra/hosts", "type": "bind", "source": "/etc/hosts"},
        {"destination": "/etc/extra/hostname", "type": "bind", "source": "/etc/hostname"},
        {"destination": "/srv/data", "type": "bind", "source": str(data)},
    ]
    b = bundle(config)
    rootfs = b / "rootfs"
    (rootfs / "srv" / "data").mkdir(parents=True)  # the image's own, empty
    cid = new_id()
    hj.ok("create", "-b", str(b), cid)
    for dest, source in (("etc/extra/hosts", "/etc/hosts"), ("srv/data", str(data))):
        assert os.readlink(rootfs / dest) == source
    undo = json.loads((hj.root / cid / "state.json").read_text())["undo"]
    real = os.path.realpath(rootfs)
    assert [e[:2] for e in undo] == [
        ["remove", f"{real}/etc/extra"],
        ["remove", f"{real}/etc/extra/hosts"],
        ["remove", f"{real}/etc/extra/hostname"],
        ["restore-dir", f"{real}/srv/data"],
        ["remove", f"{real}/srv/data"],
    ]
    hj.ok("delete", "--force", cid)
    assert not (rootfs / "etc" / "extra").exists()
    assert (rootfs / "srv" / "data").is_dir() and not (rootfs / "srv" / "data").is_symlink()


def test_volume_over_image_file_refused(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("true")
    config["mounts"] = [
        {"destination": "/etc/image-release", "type": "bind", "source": "/etc/hostname"}
    ]
    cid = new_id()
    assert "already exists" in hj.fail("create", "-b", str(bundle(config)), cid)
    assert not (hj.root / cid).exists()


def test_relative_root_and_bind_source(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("cat", "$CONTAINER_SANDBOX_MOUNT_POINT/vol/f")
    config["root"] = {"path": "rootfs"}
    config["mounts"] = [{"destination": "/vol", "type": "bind", "source": "shared"}]
    b = bundle(config)
    (b / "shared").mkdir()
    (b / "shared" / "f").write_text("relative source\n")
    result = hj("run", "-b", str(b), new_id())
    assert result.stdout == "relative source\n", result.stderr


def test_readonly_rootfs_with_mount_point_and_volume(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """Regression (found by the mutated-config CLI test): the volume link was made
    through the bound mount point and removed through it at delete, which by then was
    read-only: delete --force failed with EROFS for ever and left the mount, the mount
    point and the link in the bundle's rootfs; a failed create reported that instead of
    its own error."""
    mp = tmp_path / "mp"
    volume = tmp_path / "vol"
    volume.mkdir()
    config = base_config("sleep", "300")
    config["root"]["readonly"] = True
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mp)}}
    config["mounts"] = [{"destination": "/data", "type": "bind", "source": str(volume)}]
    b = bundle(config)
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    assert os.readlink(mp / "data") == str(volume)
    hj.ok("start", cid)
    hj.ok("delete", "--force", cid)
    assert mounts_under(str(mp)) == [] and not mp.exists()
    assert not (b / "rootfs" / "data").is_symlink()
    # A create that fails later (its cwd cannot be made in the read-only rootfs) says so.
    config["process"]["cwd"] = "/missing"
    (b / "config.json").write_text(__import__("json").dumps(config))
    err = hj.fail("create", "--bundle", str(b), new_id())
    assert "Read-only file system" in err and "/missing" in err, err
    assert mounts_under(str(mp)) == [] and not mp.exists()
    assert not (b / "rootfs" / "data").is_symlink()


def _client_mount(path: Path, source: Path | None = None) -> None:
    """A mount made by the client, as containerd and podman mount a rootfs before create."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "client", str(path)], check=True)
    if source is not None:
        subprocess.run(["cp", "-a", f"{source}/.", str(path)], check=True)


def test_readonly_rootfs_leaves_the_clients_rootfs_mount(hj: Hostjob, bundle) -> None:
    """The read-only bind of a rootfs onto itself comes off at delete, and only it: the
    client's own mount of the rootfs (containerd's overlay) stays, writable."""
    config = base_config("sh", "-c", "touch $CONTAINER_SANDBOX_MOUNT_POINT/x || echo readonly")
    config["root"]["readonly"] = True
    b = bundle(config)
    files = b.parent / "files"
    (b / "rootfs").rename(files)
    rootfs = b / "rootfs"
    _client_mount(rootfs, files)
    try:
        assert hj("run", "-b", str(b), new_id()).stdout == "readonly\n"
        assert mounts_under(str(rootfs)) == [str(rootfs)]  # the client's, and no more
        (rootfs / "still-writable").touch()
    finally:
        subprocess.run(["umount", "-l", str(rootfs)], check=False)


def test_an_undo_before_the_mount_leaves_the_clients_mount(tmp_path: Path) -> None:
    """A crash between recording the bind and making it: the undo entry names the mount
    that was there, so delete --force unmounts nothing (before: the client's mount)."""
    from hostjob.linux import fsutil
    from hostjob.runtime.sandbox.undo import UNMOUNT, undo

    rootfs = tmp_path / "rootfs"
    _client_mount(rootfs)
    try:
        fd = os.open(rootfs, os.O_PATH)
        below = fsutil.mount_id(fd)
        os.close(fd)
        undo([[UNMOUNT, str(rootfs), str(below)]])
        assert mounts_under(str(rootfs)) == [str(rootfs)]
        # with the bind made, exactly it comes off
        subprocess.run(["mount", "--bind", str(rootfs), str(rootfs)], check=True)
        assert mounts_under(str(rootfs)) == [str(rootfs)] * 2
        undo([[UNMOUNT, str(rootfs), str(below)]])
        assert mounts_under(str(rootfs)) == [str(rootfs)]
    finally:
        subprocess.run(["umount", "-l", str(rootfs)], check=False)


def test_the_first_record_holds_the_rootfs_steps(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """A read-only rootfs that is a client's mount, with a volume: the links' and the
    bind's undo entries are in the record's first write, before the cgroup or anything
    of the rootfs is made. A crash right after it: delete --force takes back nothing that
    was not made -- the client's mount stays, no link, the image's directory stays."""
    data = tmp_path / "data"
    data.mkdir()
    config = base_config("true")
    config["root"]["readonly"] = True
    config["mounts"] = [{"destination": "/srv/data", "type": "bind", "source": str(data)}]
    b = bundle(config)
    files = b.parent / "files"
    (b / "rootfs").rename(files)
    (files / "srv" / "data").mkdir(parents=True)
    rootfs = b / "rootfs"
    _client_mount(rootfs, files)
    try:
        cid = new_id()
        crashed = hj(
            "create", "-b", str(b), cid, env={"HOSTJOB_CRASH_AT": "create:after-state-dir"}
        )
        assert crashed.returncode == -9, crashed.stderr
        undo = json.loads((hj.root / cid / "state.json").read_text())["undo"]
        real = os.path.realpath(rootfs)
        assert [e[:2] for e in undo] == [
            ["restore-dir", f"{real}/srv/data"],
            ["remove", f"{real}/srv/data"],
            ["unmount", real],
        ]
        hj.ok("delete", "--force", cid)
        assert mounts_under(str(rootfs)) == [str(rootfs)]  # the client's, alone
        assert (rootfs / "srv" / "data").is_dir() and not (rootfs / "srv" / "data").is_symlink()
        # and a whole create makes no further write of them: the same entries, bound
        hj.ok("create", "-b", str(b), cid)
        record = json.loads((hj.root / cid / "state.json").read_text())
        assert [e[:2] for e in record["undo"]] == [e[:2] for e in undo]
        assert mounts_under(str(rootfs)) == [str(rootfs)] * 2
        hj.ok("delete", "--force", cid)
        assert mounts_under(str(rootfs)) == [str(rootfs)]
    finally:
        subprocess.run(["umount", "-l", str(rootfs)], check=False)


def test_a_mount_point_that_is_a_mount_stays(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """An empty directory someone mounted a filesystem on, given as the mount point: the
    rootfs is bound on top of it, and delete takes off only that bind."""
    point = tmp_path / "point"
    _client_mount(point)
    try:
        config = base_config("true")
        config["windows"] = {"jobContainer": {"rootfsMountPoint": str(point)}}
        hj("run", "-b", str(bundle(config)), new_id())
        assert mounts_under(str(point)) == [str(point)]
        assert os.listdir(point) == []
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
