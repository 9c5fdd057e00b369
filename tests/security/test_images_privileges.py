"""Nothing of an image is a privilege for another local user.

An image may carry a setuid-root program and a device node anyone may open. Each test
first shows the attack working where nothing stops it (the same files in an ordinary
directory, or a store as an older hostjob left it), then that ``nobody`` gets nothing
from the store (root-only, 0700), from a running image container's rootfs
(``nosuid,nodev``), through a mount point the rootfs is bound at, or through the state
root (0711; container directories 0700, or 0710 of the job's group; their files 0600).
"""

from __future__ import annotations

import glob
import io
import json
import os
import stat
import struct
import tarfile
from pathlib import Path

from hostjob.images.pack import pack
from hostjob.images.store import Store
from hostjob.linux import syscalls
from tests.helpers import Hostjob, base_config, make_bundle, new_id

RUN_AS_SETUID = 'exec "$0" -u'  # the program's effective uid
OPEN_DEVICE = ': < "$0"'


def image_of(tree: Path, tmp: Path) -> str:
    """An OCI layout of ``tree`` with its owners and setuid bits (``--keep-owner``)."""
    layout = tmp / "layout"
    pack(str(tree), f"oci:{layout}:v1", keep_owner=True, cmd=["sleep", "300"])
    return f"oci:{layout}:v1"


def denied(done) -> bool:  # type: ignore[no-untyped-def]
    return done.returncode != 0 and "Permission denied" in done.stderr


def test_the_attack_works_where_nothing_stops_it(privileged_tree, as_nobody) -> None:
    done = as_nobody(RUN_AS_SETUID, str(privileged_tree / "bin" / "id"))
    assert done.stdout == "0\n", "a setuid-root program gives nobody euid 0"
    assert as_nobody(OPEN_DEVICE, str(privileged_tree / "dev" / "null")).returncode == 0


def test_the_store_is_closed_to_other_users(privileged_tree, store_dir, as_nobody) -> None:
    ref = image_of(privileged_tree, privileged_tree.parent)
    Store(str(store_dir)).pull(ref)
    assert stat.S_IMODE(store_dir.stat().st_mode) == 0o700 and store_dir.stat().st_uid == 0
    (program,) = glob.glob(f"{store_dir}/layers/sha256/*/diff/bin/id")
    assert os.stat(program).st_mode & stat.S_ISUID, "the layer keeps the image's modes"
    assert denied(as_nobody(RUN_AS_SETUID, program))
    assert denied(as_nobody(OPEN_DEVICE, program.replace("/bin/id", "/dev/null")))
    blobs = glob.glob(f"{store_dir}/blobs/sha256/*")
    assert blobs and all(denied(as_nobody('cat "$0"', blob)) for blob in blobs)
    for directory in ("", "layers", "blobs", "containers"):
        assert denied(as_nobody('ls "$0"', str(store_dir / directory)))


def test_a_store_an_older_hostjob_left_open_is_closed_when_opened(
    privileged_tree, store_dir, as_nobody, hj_open: Hostjob
) -> None:
    Store(str(store_dir)).pull(image_of(privileged_tree, privileged_tree.parent))
    for directory in (store_dir, *store_dir.glob("*"), *store_dir.glob("*/*")):
        if directory.is_dir():
            directory.chmod(0o755)  # what hostjob made before the store was root's alone
    (program,) = glob.glob(f"{store_dir}/layers/sha256/*/diff/bin/id")
    assert as_nobody(RUN_AS_SETUID, program).stdout == "0\n", "the old store: root for all"
    hj_open.ok("images", "--store", str(store_dir))  # any command that opens the store
    assert stat.S_IMODE(store_dir.stat().st_mode) == 0o700
    assert denied(as_nobody(RUN_AS_SETUID, program))


def test_a_running_image_rootfs_is_nosuid_nodev(
    privileged_tree, store_dir, as_nobody, hj_open: Hostjob
) -> None:
    ref = image_of(privileged_tree, privileged_tree.parent)
    cid = new_id()
    hj_open.ok(
        "run", "-d", "-q", "--store", str(store_dir), "--name", cid, "--user", "65534:65534", ref
    )
    try:
        rootfs = hj_open.root / cid / "rootfs"
        # The job's user must reach its rootfs: the state root lets everyone pass (0711),
        # the container's directory only the job's group (0710), the rootfs's root is
        # the job group's too (0750). nobody is the job's own identity here.
        assert stat.S_IMODE(hj_open.root.stat().st_mode) == 0o711
        for path, mode in ((hj_open.root / cid, 0o710), (rootfs, 0o750)):
            st = path.stat()
            assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, 0, 65534)
        st = (rootfs / "bin" / "id").stat()
        assert st.st_mode & stat.S_ISUID and st.st_uid == 0, "the image's setuid-root file"
        flags = os.statvfs(rootfs).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV
        # The job's own identity, through the state root, gets no privilege from it ...
        assert as_nobody(RUN_AS_SETUID, str(rootfs / "bin" / "id")).stdout == "65534\n"
        assert denied(as_nobody(OPEN_DEVICE, str(rootfs / "dev" / "null")))
        # ... nor from the container's state, which stays unreadable and unlisted.
        for name in ("config.json", "state.json"):
            assert denied(as_nobody('cat "$0"', str(hj_open.root / cid / name)))
        assert denied(as_nobody('ls "$0"', str(hj_open.root)))
        assert denied(as_nobody('ls "$0"', str(hj_open.root / cid)))
        # And the job itself, running as nobody, stays nobody.
        out = hj_open.ok("exec", "--user", "65534:65534", cid, "sh", "-c",
                    'exec "$CONTAINER_SANDBOX_MOUNT_POINT/bin/id" -u')  # fmt: skip
        assert out == "65534\n"
    finally:
        hj_open.ok("delete", "--force", cid)


def test_a_rootfs_bound_at_a_mount_point_is_nosuid_nodev(
    privileged_tree, store_dir, open_tmp, as_nobody, hj_open: Hostjob
) -> None:
    ref = image_of(privileged_tree, privileged_tree.parent)
    mount_point = open_tmp / "tool"
    cid = new_id()
    # As nobody: only the job's own identity reaches its rootfs (test_runtime_job_files.py).
    hj_open.ok("run", "-d", "-q", "--store", str(store_dir), "--name", cid,
          "--user", "65534:65534", "--mount-point", str(mount_point), ref)  # fmt: skip
    try:
        flags = os.statvfs(mount_point).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV
        assert as_nobody(RUN_AS_SETUID, str(mount_point / "bin" / "id")).stdout == "65534\n"
        assert denied(as_nobody(OPEN_DEVICE, str(mount_point / "dev" / "null")))
    finally:
        hj_open.ok("delete", "--force", cid)


def test_a_root_jobs_rootfs_is_out_of_reach(
    privileged_tree, store_dir, as_nobody, hj_open: Hostjob
) -> None:
    ref = image_of(privileged_tree, privileged_tree.parent)
    cid = new_id()
    hj_open.ok("run", "-d", "-q", "--store", str(store_dir), "--name", cid, ref)  # runs as root
    try:
        assert stat.S_IMODE((hj_open.root / cid).stat().st_mode) == 0o700
        assert denied(as_nobody(RUN_AS_SETUID, str(hj_open.root / cid / "rootfs" / "bin" / "id")))
    finally:
        hj_open.ok("delete", "--force", cid)


def test_a_read_only_remount_keeps_nosuid_and_nodev(open_tmp, hj_open: Hostjob) -> None:
    """MS_BIND|MS_REMOUNT|MS_RDONLY alone clears nosuid and nodev; hostjob's read-only
    rootfs (root.readonly) must keep them."""
    b = make_bundle(open_tmp / "bundle", base_config("sleep", "300"))
    rootfs = b / "rootfs"
    syscalls.mount(str(rootfs), str(rootfs), None, syscalls.MS_BIND)
    try:
        syscalls.mount(None, str(rootfs), None,
                    syscalls.MS_BIND | syscalls.MS_REMOUNT | syscalls.MS_NOSUID | syscalls.MS_NODEV)  # fmt: skip
        # The trap: a plain read-only remount of a nosuid bind drops nosuid.
        scratch = open_tmp / "scratch"
        scratch.mkdir()
        syscalls.mount(str(rootfs), str(scratch), None, syscalls.MS_BIND)
        syscalls.mount(
            None, str(scratch), None, syscalls.MS_BIND | syscalls.MS_REMOUNT | syscalls.MS_RDONLY
        )
        assert not os.statvfs(scratch).f_flag & os.ST_NOSUID, "the kernel's rule changed?"
        syscalls.umount2(str(scratch))
        mount_point = open_tmp / "ro-point"
        config = base_config("sleep", "300")
        config["root"]["readonly"] = True
        config["annotations"] = {"io.hostjob.rootfs-mount-point": str(mount_point)}
        (b / "config.json").write_text(json.dumps(config))
        cid = new_id()
        hj_open.ok("create", "--bundle", str(b), cid)
        try:
            flags = os.statvfs(mount_point).f_flag
            assert flags & os.ST_RDONLY and flags & os.ST_NOSUID and flags & os.ST_NODEV
        finally:
            hj_open.ok("delete", "--force", cid)
    finally:
        syscalls.umount2(str(rootfs), syscalls.MNT_DETACH)


# --- pack ---------------------------------------------------------------------------------

VFS_CAP = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)  # v2, effective: cap_net_raw


def layer_members(layout: Path) -> dict[str, tarfile.TarInfo]:
    """The entries of the (only) layer of a packed layout."""
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest = json.loads((layout / "blobs" / "sha256" / digest).read_text())
    blob = layout / "blobs" / "sha256" / manifest["layers"][-1]["digest"].removeprefix("sha256:")
    with tarfile.open(fileobj=io.BytesIO(blob.read_bytes()), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_pack_keeps_no_setuid_bit_without_its_owner(open_tmp, as_nobody) -> None:
    tree = open_tmp / "users-tree"
    tree.mkdir()
    program = tree / "id"
    program.write_bytes(Path("/usr/bin/id").read_bytes())
    os.chown(program, 1000, 1000)
    os.chmod(program, 0o6755)
    os.setxattr(program, "security.capability", VFS_CAP)
    # The attack: user 1000's setuid program gives euid 1000, and packed 0:0 with its
    # bits it would give root to whoever runs it from an unpacked image.
    assert as_nobody(RUN_AS_SETUID, str(program)).stdout == "1000\n"
    pack(str(tree), f"oci:{open_tmp / 'plain'}:v1")
    member = layer_members(open_tmp / "plain")["id"]
    assert (member.uid, member.gid, stat.S_IMODE(member.mode)) == (0, 0, 0o755)
    assert not any("capability" in key for key in member.pax_headers)
    # --keep-owner keeps the bits with the owner they belong to.
    pack(str(tree), f"oci:{open_tmp / 'kept'}:v1", keep_owner=True)
    member = layer_members(open_tmp / "kept")["id"]
    assert (member.uid, member.gid, stat.S_IMODE(member.mode)) == (1000, 1000, 0o6755)
    assert "SCHILY.xattr.security.capability" in member.pax_headers
