"""At create: what hostjob makes and mounts in trees others write, fd-relative.

Bind mode mounts each volume at its destination inside the container's private mount
namespace, after the rootfs is bound at the mount point: a destination below the mount
point lies in the image. An image symlink there (``data -> /etc``) made the mount land
on the host directory it names, in the container's view (a writable volume over its
/etc, say). Host mode makes volume links and their parent directories in the rootfs,
which the container's user may own and race. Now targets are reached from ``/``
without following symlinks and mounted through their fd (``/proc/self/fd/N``), and
links and directories are made with ``mkdirat``/``symlinkat`` on walked fds.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from hostjob.linux import fsremove, syscalls
from tests.helpers import Hostjob, base_config, new_id
from tests.security.racers import open_up, racing, snapshot

NOBODY = (65534, 65534)


def _bind_config(tmp_path: Path, volume: Path) -> dict:  # type: ignore[type-arg]
    config = base_config("sleep", "300")
    config["annotations"] = {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": str(tmp_path / "hpc"),
    }
    config["mounts"] = [
        {"destination": str(tmp_path / "hpc" / "data"), "type": "bind", "source": str(volume)}
    ]
    return config


def _volume(tmp_path: Path) -> Path:
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "shadow").write_text("the volume's file\n")
    return volume


def test_a_path_based_mount_follows_an_image_symlink(tmp_path: Path) -> None:
    """The attack, first: in a private mount namespace (as the bind-mode init builds),
    mount(2) of a volume at ``<mount point>/data`` by path lands on whatever the image's
    ``data`` symlink names."""
    volume = _volume(tmp_path)
    canary = tmp_path / "etc"
    canary.mkdir()
    (canary / "passwd").write_text("root:x:0:0\n")
    mount_point = tmp_path / "hpc"
    mount_point.mkdir()
    (mount_point / "data").symlink_to(canary)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            syscalls.unshare(syscalls.CLONE_NEWNS)
            syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
            syscalls.mount(str(volume), str(mount_point / "data"), None, syscalls.MS_BIND)
            os.write(write, " ".join(sorted(os.listdir(canary))).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        seen = f.read()
    os.waitpid(pid, 0)
    assert seen == "shadow"  # the canary (the container's /etc, say) was covered


def test_bind_mode_volume_through_an_image_symlink_is_refused(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    volume = _volume(tmp_path)
    canary = tmp_path / "etc"
    canary.mkdir()
    b = bundle(_bind_config(tmp_path, volume))
    (b / "rootfs" / "data").symlink_to(canary)
    err = hj.fail("create", "--bundle", str(b), new_id("sec"))
    assert f"cannot bind {volume} at {tmp_path}/hpc/data" in err, err
    assert "is a symlink" in err, err
    # A real directory there: the volume is bound in it, seen by the job only.
    (b / "rootfs" / "data").unlink()
    (b / "rootfs" / "data").mkdir()
    cid = new_id("sec")
    hj.ok("create", "--bundle", str(b), cid)
    out = hj.ok("exec", cid, "cat", str(tmp_path / "hpc" / "data" / "shadow"))
    assert out == "the volume's file\n"
    assert os.listdir(canary) == []
    hj.ok("delete", "--force", cid)


def _creates_under_a_racer(
    hj: Hostjob, b: Path, check: Callable[[], bool] = lambda: True, rounds: int = 20
) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    """``create`` of the bundle ``b``, ``rounds`` times, each while its rootfs's owner
    (nobody) swaps a fresh ``a`` for its symlink ``s``; ``check()`` must hold as the
    racer still runs. The caller looks at each result and deletes the container."""
    rootfs = b / "rootfs"
    for _ in range(rounds):
        fsremove.remove_tree(str(rootfs / "a"))
        (rootfs / "a").mkdir()
        os.chown(rootfs / "a", *NOBODY)
        cid = new_id("sec")
        with racing([(str(rootfs / "a"), str(rootfs / "s"))], user=NOBODY):
            result = hj("create", "--bundle", str(b), cid)
            assert check()
        yield cid, result


def test_volume_links_made_under_a_racer(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """Host mode, create while the owner of the rootfs swaps ``a`` (where hostjob makes
    ``a/x`` and the link ``a/x/vol``) for a symlink to the outside: each create either
    works inside the rootfs or fails with one line; the outside never changes."""
    open_up(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    config = base_config("sleep", "300")
    config["process"]["user"] = {"uid": NOBODY[0], "gid": NOBODY[1]}
    config["mounts"] = [{"destination": "/a/x/vol", "type": "bind", "source": str(source)}]
    b = bundle(config)
    rootfs = b / "rootfs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep me")
    (rootfs / "s").symlink_to(outside)
    os.lchown(rootfs / "s", *NOBODY)
    os.chown(rootfs, *NOBODY)
    before = snapshot(str(outside))
    made = refused = 0
    for cid, result in _creates_under_a_racer(hj, b):
        if result.returncode == 0:
            made += 1
            assert os.readlink(rootfs / "a" / "x" / "vol") == str(source)
        else:
            refused += 1
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
            assert "symlink" in result.stderr, result.stderr
        hj.ok("delete", "--force", cid)
        assert snapshot(str(outside)) == before
    assert made + refused == 20


def test_a_path_based_host_mount_follows_a_symlink_in_the_rootfs(tmp_path: Path) -> None:
    """The attack on host mode's mounts (a read-only volume, a tmpfs), first: mount(2)
    by path at ``<rootfs>/a/x``, where the rootfs's owner made ``a`` a symlink to the
    outside, covers the outside's directory -- on the host, for everyone."""
    outside = tmp_path / "outside"
    (outside / "x").mkdir(parents=True)
    (outside / "x" / "keep").write_text("keep me")
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "a").symlink_to(outside)
    syscalls.mount("tmpfs", str(rootfs / "a" / "x"), "tmpfs", 0, "size=1m")
    try:
        assert os.listdir(outside / "x") == []  # covered
    finally:
        syscalls.umount2(str(outside / "x"), syscalls.MNT_DETACH)


def test_host_mode_mounts_made_under_a_racer(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """Host mode, create while the owner of the rootfs swaps ``a`` (where hostjob mounts
    a read-only volume at ``a/x/ro`` and a tmpfs at ``a/x/t``) for a symlink to the
    outside: each create either mounts inside the rootfs or fails with one line; nothing
    is ever mounted outside, and delete leaves no mount."""
    open_up(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    config = base_config("sleep", "300")
    config["process"]["user"] = {"uid": NOBODY[0], "gid": NOBODY[1]}
    config["mounts"] = [
        {"destination": "/a/x/ro", "type": "bind", "source": str(source), "options": ["ro"]},
        {"destination": "/a/x/t", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]},
    ]
    b = bundle(config)
    rootfs = b / "rootfs"
    outside = tmp_path / "outside"
    (outside / "x" / "ro").mkdir(parents=True)
    (outside / "x" / "t").mkdir()
    (rootfs / "s").symlink_to(outside)
    os.lchown(rootfs / "s", *NOBODY)
    os.chown(rootfs, *NOBODY)
    before = snapshot(str(outside))

    def mounts_outside() -> list[str]:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f if str(outside) in line.split()[4]]

    made = refused = 0
    for cid, result in _creates_under_a_racer(hj, b, lambda: mounts_outside() == []):
        if result.returncode == 0:
            made += 1
        else:
            refused += 1
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
            assert "symlink" in result.stderr or "exists" in result.stderr, result.stderr
        hj.ok("delete", "--force", cid)
        assert mounts_outside() == [] and snapshot(str(outside)) == before
        with open("/proc/self/mountinfo") as f:
            assert not [line for line in f if str(rootfs) in line]
    assert made + refused == 20
