"""`delete` in trees a container or another user can write.

Each test runs a racer, as an unprivileged user, that swaps a directory it can rename
for a symlink to a canary outside (``renameat2(RENAME_EXCHANGE)``) while the
container is deleted. First the attack: the same undo steps done by path, as hostjob
did them, damage the canary within a bounded number of attempts. Then the defence:
``hostjob delete --force`` under the same racer leaves the canary exactly as it was
(nothing deleted, created, unmounted or chowned there).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from hostjob.images.rootfs import rw_dir
from hostjob.images.store import Store
from hostjob.linux import fsremove
from tests.helpers import BUSYBOX, Hostjob, base_config, mounts_under, new_id
from tests.security.racers import (
    attack_attempts,
    open_up,
    path_based_remove_tree,
    path_based_undo,
    racing,
    snapshot,
)

NOBODY = (65534, 65534)
ATTACK_ATTEMPTS = 40
DEFENCE_ATTEMPTS = 12


def _chown_tree(top: Path, owner: tuple[int, int] = NOBODY) -> None:
    for directory, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            os.lchown(os.path.join(directory, name), *owner)


def _undo_entries(hj: Hostjob, cid: str) -> list[list[str]]:
    entries: list[list[str]] = json.loads((hj.root / cid / "state.json").read_text())["undo"]
    return entries


# --- an image container's writable layer ------------------------------------------------------


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    src = tmp_path_factory.mktemp("image-src")
    (src / "bin").mkdir()
    (src / "bin" / "busybox").write_bytes(Path(BUSYBOX).read_bytes())
    (src / "bin" / "busybox").chmod(0o755)
    for applet in ("sh", "sleep", "true"):
        (src / "bin" / applet).symlink_to("busybox")
    layout = tmp_path_factory.mktemp("layout")
    pack(str(src), f"oci:{layout}:v1", cmd=["/bin/sleep", "300"], env=["PATH=/bin"])
    return f"oci:{layout}:v1"


def _image_container(hj: Hostjob, image: str, store: str, canary: Path) -> tuple[str, int]:
    """A detached image container running as nobody whose writable layer holds
    ``work/d<i>`` and ``work/s<i> -> canary``; and a dir fd on ``work`` held outside the
    job (as a process of the same user could get one), which stays usable after the
    lazy unmount at delete."""
    cid = new_id("sec")
    hj.ok("run", "-d", "-q", "--store", store, "--name", cid, "--user", "65534:65534", image)
    work = hj.root / cid / "rootfs" / "work"
    work.mkdir()
    for i in range(20):
        (work / f"d{i}").mkdir()
        for j in range(3):
            (work / f"d{i}" / f"x{j}").write_text("x")
        (work / f"s{i}").symlink_to(canary)
    _chown_tree(work)
    return cid, os.open(work, os.O_RDONLY | os.O_DIRECTORY)


def _pairs() -> list[tuple[str, str]]:
    return [(f"d{i}", f"s{i}") for i in range(20)]


def _canary(tmp_path: Path) -> Path:
    canary = tmp_path / "canary"
    canary.mkdir()
    for j in range(10):
        (canary / f"precious{j}").write_text("keep me")
    return canary


def test_image_container_writable_layer_attack(hj: Hostjob, image: str, tmp_path: Path) -> None:
    """The attack: hostjob's old delete (lazy unmount, then a path-based removal of the
    writable layer) under the racer deletes the canary's files."""
    open_up(tmp_path)
    store = str(tmp_path / "store")
    canary = _canary(tmp_path)
    for _attempt in attack_attempts(ATTACK_ATTEMPTS):
        cid, fd = _image_container(hj, image, store, canary)
        try:
            subprocess.run(["umount", "-l", str(hj.root / cid / "rootfs")], check=True)
            with racing(_pairs(), dir_fd=fd, user=NOBODY):
                try:
                    path_based_remove_tree(rw_dir(Store(store).gc, cid))
                except OSError:
                    pass
        finally:
            os.close(fd)
            hj.ok("delete", "--force", cid)
        if len(os.listdir(canary)) < 10:
            return
    pytest.fail(f"the racer never beat the path-based removal in {_attempt + 1} attempts")


def test_image_container_delete_under_a_racer(hj: Hostjob, image: str, tmp_path: Path) -> None:
    open_up(tmp_path)
    store = str(tmp_path / "store")
    canary = _canary(tmp_path)
    before = snapshot(str(canary))
    for attempt in range(DEFENCE_ATTEMPTS):
        cid, fd = _image_container(hj, image, store, canary)
        try:
            with racing(_pairs(), dir_fd=fd, user=NOBODY):
                hj.ok("delete", "--force", cid)
        finally:
            os.close(fd)
        assert snapshot(str(canary)) == before, f"attempt {attempt} touched the canary"
        assert not os.path.lexists(rw_dir(Store(store).gc, cid)), "the writable layer is left"
        assert mounts_under(str(hj.root / cid)) == []


# --- a bundle container: volume links and the directories made for them -------------------


def _volume_bundle(bundle: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A host-mode bundle whose rootfs top belongs to nobody (a container user may own
    it), with two volumes: /a/b/c/vol (the image has an empty dir there: it is put
    back at delete) and /a/x/vol2 (hostjob makes /a/x for it)."""
    source = tmp_path / "volume-source"
    source.mkdir(exist_ok=True)
    config = base_config("sleep", "300")
    config["process"]["user"] = {"uid": 65534, "gid": 65534}
    config["mounts"] = [
        {"destination": "/a/b/c/vol", "type": "bind", "source": str(source)},
        {"destination": "/a/x/vol2", "type": "bind", "source": str(source)},
    ]
    b = bundle(config)
    rootfs = b / "rootfs"
    _reset_volume_rootfs(rootfs)
    outside = tmp_path / "outside"
    (outside / "b" / "c").mkdir(parents=True)  # the old RESTORE_DIR step made b/c/vol here
    (outside / "x").mkdir()
    (outside / "x" / "vol2").write_text("precious")  # the old REMOVE step unlinked this
    (outside / "x" / "keep").write_text("precious")
    (rootfs / "s").symlink_to(outside)
    os.lchown(rootfs / "s", *NOBODY)
    os.chown(rootfs, *NOBODY)
    return b, outside


def _reset_volume_rootfs(rootfs: Path) -> None:
    fsremove.remove_tree(str(rootfs / "a"))
    (rootfs / "a" / "b" / "c" / "vol").mkdir(parents=True)
    _chown_tree(rootfs / "a")


def test_volume_link_undo_attack(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """The attack: the recorded undo steps done by path (as hostjob did) while `a` and
    a symlink to the outside are swapped delete, or create, files outside the rootfs."""
    open_up(tmp_path)
    b, outside = _volume_bundle(bundle, tmp_path)
    rootfs = b / "rootfs"
    before = snapshot(str(outside))
    for _attempt in attack_attempts(ATTACK_ATTEMPTS):
        cid = new_id("sec")
        hj.ok("create", "--bundle", str(b), cid)
        entries = _undo_entries(hj, cid)
        with racing([(str(rootfs / "a"), str(rootfs / "s"))], user=NOBODY):
            path_based_undo([e for e in entries if e[0] != "unmount"])
        hj.ok("delete", "--force", cid)
        if snapshot(str(outside)) != before:
            return
        _reset_volume_rootfs(rootfs)
    pytest.fail(f"the racer never beat the path-based undo in {_attempt + 1} attempts")


def test_volume_link_delete_under_a_racer(hj: Hostjob, bundle, tmp_path: Path) -> None:
    open_up(tmp_path)
    b, outside = _volume_bundle(bundle, tmp_path)
    rootfs = b / "rootfs"
    before = snapshot(str(outside))
    for attempt in range(DEFENCE_ATTEMPTS):
        cid = new_id("sec")
        hj.ok("create", "--bundle", str(b), cid)
        assert (rootfs / "a" / "x" / "vol2").is_symlink()
        with racing([(str(rootfs / "a"), str(rootfs / "s"))], user=NOBODY):
            hj.ok("delete", "--force", cid)
        assert snapshot(str(outside)) == before, f"attempt {attempt} touched the outside"
        _reset_volume_rootfs(rootfs)


# --- a mount point (and bind-mode targets) below a directory another user owns ------------


@pytest.fixture
def owned_parent(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """``home`` (nobody's, like a user's home directory holding the mount point the
    operator chose) with ``home/s -> outside``. The canary ``outside/y/mp`` is someone
    else's tmpfs mount with a file in it (host mode: the old undo unmounted it), or an
    empty directory (bind mode: the old undo removed it)."""
    mode = request.node.callspec.params["mode"]
    open_up(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, *NOBODY)
    outside = tmp_path / "outside"
    (outside / "y" / "mp").mkdir(parents=True)
    (outside / "y" / "keep").write_text("keep me")
    if mode == "host":
        point = str(outside / "y" / "mp")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "victim", point], check=True)
        (outside / "y" / "mp" / "precious").write_text("keep me")
    _reset_home(home, outside)
    yield home, outside
    for top in (home, outside):
        for point in reversed(mounts_under(str(top))):
            subprocess.run(["umount", "-l", point], check=False)


def _reset_home(home: Path, outside: Path) -> None:
    """Back to: no x (hostjob makes it), s -> outside."""
    for name in ("x", "s"):
        fsremove.remove_tree(str(home / name))
    (home / "s").symlink_to(outside)
    os.lchown(home / "s", *NOBODY)


def _mount_point_bundle(bundle: Callable[..., Path], home: Path, mode: str) -> Path:
    config = base_config("sleep", "300")
    config["process"]["user"] = {"uid": 65534, "gid": 65534}
    # The mount point: what either mode makes on the host (bind mode makes a volume's
    # missing destination in the job's namespace only, test_runtime_bind_targets.py).
    config["annotations"] = {"io.hostjob.rootfs-mount-point": str(home / "x" / "y" / "mp")}
    if mode == "bind":
        config["annotations"]["io.hostjob.mount-mode"] = "bind"
    return bundle(config, name=f"bundle-{mode}")


def _outside_intact(outside: Path, mode: str) -> bool:
    point = outside / "y" / "mp"
    if mode == "host" and str(point) not in mounts_under(str(outside)):
        return False
    return point.is_dir() and (outside / "y" / "keep").exists()


@pytest.mark.parametrize("mode", ["host", "bind"])
def test_mount_point_undo_attack(hj: Hostjob, bundle, owned_parent, mode: str) -> None:
    """The attack: the undo steps by path (umount2 MNT_DETACH, rmdir), while the owner of
    the mount point's parent swaps a directory hostjob made for a symlink, unmount
    someone else's filesystem or remove its directory."""
    home, outside = owned_parent
    b = _mount_point_bundle(bundle, home, mode)
    for _attempt in attack_attempts(ATTACK_ATTEMPTS):
        cid = new_id("sec")
        hj.ok("create", "--bundle", str(b), cid)
        entries = _undo_entries(hj, cid)
        assert ["remove", str(home / "x")] in entries, entries  # hostjob made x
        with racing([(str(home / "x"), str(home / "s"))], user=NOBODY):
            path_based_undo(entries)
        hj("delete", "--force", cid)
        if not _outside_intact(outside, mode):
            return
        for point in reversed(mounts_under(str(home))):
            subprocess.run(["umount", "-l", point], check=True)
        _reset_home(home, outside)
    pytest.fail(f"the racer never beat the path-based undo in {_attempt + 1} attempts")


@pytest.mark.parametrize("mode", ["host", "bind"])
def test_mount_point_delete_under_a_racer(hj: Hostjob, bundle, owned_parent, mode: str) -> None:
    """hostjob's delete under the racer: the canary stays; a delete that meets a symlink
    on its way to an unmount fails with a clear error and keeps the record, and
    `delete --force` once the path is back finishes the job."""
    home, outside = owned_parent
    b = _mount_point_bundle(bundle, home, mode)
    before = snapshot(str(outside))
    for attempt in range(DEFENCE_ATTEMPTS):
        cid = new_id("sec")
        hj.ok("create", "--bundle", str(b), cid)
        with racing([(str(home / "x"), str(home / "s"))], user=NOBODY):
            first = hj("delete", "--force", cid)
        if first.returncode != 0:
            assert "never follows it" in first.stderr, first.stderr
            hj.ok("delete", "--force", cid)
        assert _outside_intact(outside, mode), f"attempt {attempt} damaged the canary"
        assert snapshot(str(outside)) == before, f"attempt {attempt} touched the outside"
        assert mounts_under(str(home)) == []
        _reset_home(home, outside)
