"""A job's files are reachable by its own identity and root alone.

An image container's rootfs is mounted in its state directory (``<root>/<id>/rootfs``,
in bind mode too) and bound at a ``--mount-point`` when one is asked; its writable layer
lies in the store, reached only through that mount. With the modes hostjob gave them
before -- the container's directory 0711 for a non-root job, the rootfs's root 0755 --
user ``nobody`` reads a ``--user 1000`` job's image and writes a MiB into its writable
layer through the image's 1777 directory (shown first, those modes put back). With
hostjob's -- the directory root's and the job group's, 0710; the rootfs's root 0750 of the
job's group -- nothing, in host mode, in bind mode and at a mount point; the job's own uid
reads its files (the control). And modes are set, never taken from the caller's umask:
under ``umask 077`` a non-root job still reads its image, its secret and, in bind mode,
a volume whose directories hostjob made.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from tests.helpers import Hostjob, hostjob_env, make_rootfs, new_id
from tests.security.pods import run_as

JOB_UID = 1000
MOTD = "the job's own motd\n"
WRITE_MIB = 'dd if=/dev/zero of="$1/tmp/blob" bs=64k count=16 2>&1'


@pytest.fixture
def image(open_tmp: Path) -> str:
    """An image whose ``/tmp`` is 1777, as most are, and a file of its own."""
    src = make_rootfs(open_tmp / "image-src")
    (src / "etc" / "motd").write_text(MOTD)
    (src / "tmp").mkdir()
    (src / "tmp").chmod(0o1777)
    pack(str(src), f"oci:{open_tmp / 'layout'}:v1", cmd=["/bin/sh"])
    return f"oci:{open_tmp / 'layout'}:v1"


def denied(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode != 0 and "Permission denied" in result.stdout + result.stderr


@pytest.mark.parametrize("mode", ["host", "bind", "mount-point"])
def test_a_non_root_jobs_files_are_closed_to_other_users(
    hj_open: Hostjob, image: str, open_tmp: Path, mode: str
) -> None:
    store = open_tmp / "store"
    cid = new_id(mode[0])
    flags = {
        "host": [],
        "bind": ["--mount-mode", "bind", "--mount-point", str(open_tmp / "hpc")],
        "mount-point": ["--mount-point", str(open_tmp / "tool")],
    }[mode]
    run = ["run", "-d", "-q", "--store", str(store), "--name", cid, "--user", str(JOB_UID)]
    hj_open.ok(*run, *flags, image, "sleep", "600")
    container_dir = hj_open.root / cid
    reach = open_tmp / "tool" if mode == "mount-point" else container_dir / "rootfs"
    upper = store / "rw" / cid / "upper"

    # Where nothing stops it: the modes hostjob gave before.
    container_dir.chmod(0o711)
    reach.chmod(0o755)
    assert run_as(65534, 'cat "$1/etc/motd"', str(reach)).stdout == MOTD
    assert run_as(65534, WRITE_MIB, str(reach)).returncode == 0
    assert (upper / "tmp" / "blob").stat().st_size == 1 << 20, "in the job's writable layer"
    (reach / "tmp" / "blob").unlink()
    container_dir.chmod(0o710)
    reach.chmod(0o750)

    # hostjob's: the directory and the rootfs's root, root's and the job group's.
    st = container_dir.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o710, 0, JOB_UID)
    st = reach.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o750, 0, JOB_UID)
    assert denied(run_as(65534, 'cat "$1/etc/motd"', str(reach)))
    assert denied(run_as(65534, 'ls "$1"', str(reach)))
    assert denied(run_as(65534, WRITE_MIB, str(reach)))
    assert not (upper / "tmp" / "blob").exists()
    for name in ("state.json", "config.json"):
        assert denied(run_as(65534, 'cat "$1"', str(container_dir / name)))

    # The control: the job's own uid (in the job, and any process of it on the host).
    mine = 'cat "$CONTAINER_SANDBOX_MOUNT_POINT/etc/motd"'
    assert hj_open.ok("exec", cid, "sh", "-c", mine) == MOTD
    assert run_as(JOB_UID, 'cat "$1/etc/motd"', str(reach)).stdout == MOTD
    assert run_as(JOB_UID, WRITE_MIB, str(reach)).returncode == 0
    hj_open.ok("delete", "--force", cid)


def test_auto_users_each_reach_their_own_files_only(
    hj_open: Hostjob, image: str, open_tmp: Path
) -> None:
    store = open_tmp / "store"
    first, second = new_id("a"), new_id("b")
    for cid in (first, second):
        run = ["run", "-d", "-q", "--store", str(store), "--name", cid, "--user", "auto"]
        hj_open.ok(*run, image, "sleep", "600")
    pid = hj_open.state(first)["pid"]
    with open(f"/proc/{pid}/status") as f:
        job_uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
    st = (hj_open.root / first).stat()
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, job_uid), "a gid of its own"
    motd = str(hj_open.root / first / "rootfs" / "etc" / "motd")
    other = hj_open("exec", second, "cat", motd)
    assert other.returncode != 0 and "Permission denied" in other.stderr
    assert hj_open.ok("exec", first, "cat", motd) == MOTD
    for cid in (first, second):
        hj_open.ok("delete", "--force", cid)


@pytest.mark.parametrize("mode", ["host", "bind"])
def test_modes_never_come_from_the_callers_umask(
    hj_open: Hostjob, image: str, open_tmp: Path, mode: str
) -> None:
    """Under ``umask 077`` everything hostjob makes for a ``--user 1000`` job -- the
    writable layer, the secret's directories; in bind mode the mount point's missing
    parents on the host and a volume's missing directories in the job's namespace -- has
    the mode the job needs: it reads its image, its secret and its volume."""
    secret = open_tmp / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    data = open_tmp / "data"
    data.mkdir(mode=0o755)
    (data / "file").write_text("the volume's\n")
    (data / "file").chmod(0o644)
    flags: list[str] = []
    read = 'cat "$CONTAINER_SANDBOX_MOUNT_POINT/etc/motd" "$CONTAINER_SANDBOX_MOUNT_POINT/run/secrets/token"'
    if mode == "bind":
        volume = f"{open_tmp}/absent/deeper/data"  # made in the job's namespace alone
        flags = [
            "--mount-mode", "bind", "--mount-point", str(open_tmp / "made" / "hpc"),
            "--volume", f"{data}:{volume}:ro",
        ]  # fmt: skip
        read += f' "{volume}/file"'
    words = hj_open.argv(
        "run", "--rm", "-q", "--store", str(open_tmp / "store"), "--user", str(JOB_UID),
        "--secret", f"{secret}:/run/secrets/token", *flags, image, "sh", "-c", read,
    )  # fmt: skip
    script = 'umask 077 && exec "$@"'
    done = subprocess.run(
        ["sh", "-c", script, "sh", *words],
        capture_output=True,
        text=True,
        env=hostjob_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == MOTD + "s3cret\n" + ("the volume's\n" if mode == "bind" else "")
    if mode == "bind":  # the volume's directories were made in the namespace only
        assert not (open_tmp / "absent").exists()
