"""Secrets through files, not the environment.

A job's environment is in ``/proc/PID/environ``, which every process of the job's uid
reads -- shown first: a host process running as ``nobody`` reads the ``-e API_TOKEN`` of
a job run as ``nobody``. Then harmless: ``--secret SRC:DST`` puts the file in the
container's own files at DST, 0400 and owned by the job's uid: the job reads it; another
job, ``nobody`` on the host, and the environment do not show it. And the image cannot
steer where it goes: a ``run -> /host/dir`` symlink would make a path-based write land
on the host (shown), so hostjob walks without following it and refuses with one line.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from tests.fixtures.procfs import uid_of
from tests.helpers import Hostjob, base_config, make_bundle, make_rootfs, new_id

SECRET = "s3cret-file-contents"
TOKEN = "API_TOKEN=hunter2-in-the-environment"
READ_SECRET = 'cat "$CONTAINER_SANDBOX_MOUNT_POINT/run/secrets/token"'
Nobody = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def secret(open_tmp: Path) -> Path:
    """The operator's secret: a root-only file."""
    path = open_tmp / "secret" / "token"
    path.parent.mkdir(mode=0o700)
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def test_the_environment_is_every_same_uid_processs_a_secret_file_is_the_jobs(
    hj_open: Hostjob,
    busybox_image: str,
    run_d: tuple[str, ...],
    secret: Path,
    open_tmp: Path,
    as_nobody: Nobody,
) -> None:
    leaky, kept, other = new_id("e"), new_id("s"), new_id("o")
    # The attack: any process of the job's uid reads the job's environment.
    hj_open.ok(
        *run_d, "--name", leaky, "--user", "65534:65534", "-e", TOKEN, busybox_image, "sleep", "600"
    )
    read = as_nobody('cat "/proc/$1/environ"', "sh", str(hj_open.state(leaky)["pid"]))
    assert read.returncode == 0 and TOKEN in read.stdout

    # The defence: a file of the job's own.
    given = f"{secret}:/run/secrets/token"
    hj_open.ok(
        *run_d, "--name", kept, "--user", "auto", "--secret", given, busybox_image, "sleep", "600"
    )
    hj_open.ok(*run_d, "--name", other, "--user", "auto", busybox_image, "sleep", "600")
    pid = hj_open.state(kept)["pid"]
    assert hj_open.ok("exec", kept, "sh", "-c", READ_SECRET) == SECRET
    host_path = hj_open.root / kept / "rootfs" / "run" / "secrets" / "token"
    st = host_path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o400
    assert st.st_uid == st.st_gid == uid_of(pid)
    assert SECRET not in Path(f"/proc/{pid}/environ").read_bytes().decode()
    # Another job (another uid) and an unprivileged host user are refused.
    denied = hj_open("exec", other, "cat", str(host_path))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert SECRET not in denied.stdout
    by_nobody = as_nobody('cat "$1"', "sh", str(host_path))
    assert by_nobody.returncode != 0 and SECRET not in by_nobody.stdout
    assert "Permission denied" in by_nobody.stderr
    # Where it is stored: the writable layer, under the store only root enters.
    layer = open_tmp / "store" / "rw" / kept
    assert any(SECRET in p.read_text() for p in layer.rglob("token") if p.is_file())
    listed = as_nobody('ls "$1"', "sh", str(layer))
    assert listed.returncode != 0
    # delete takes it away with the writable layer.
    for container in (leaky, kept, other):
        hj_open.ok("delete", "--force", container)
    assert not layer.exists()


def test_a_secret_never_follows_an_images_symlink(
    hj_open: Hostjob, run_d: tuple[str, ...], secret: Path, open_tmp: Path
) -> None:
    canary = open_tmp / "canary"
    canary.mkdir()
    src = make_rootfs(open_tmp / "hostile-src")
    (src / "run").symlink_to(canary)  # run -> a host directory
    (src / "etc" / "token").write_text("the image's own")
    pack(str(src), f"oci:{open_tmp / 'hostile'}:v1", cmd=["/bin/sh"])
    hostile = f"oci:{open_tmp / 'hostile'}:v1"

    # Where nothing stops it: a write by path below the running rootfs lands on the host.
    probe = new_id("p")
    hj_open.ok(*run_d, "--name", probe, hostile, "sleep", "600")
    naive = hj_open.root / probe / "rootfs" / "run" / "secrets" / "token"
    naive.parent.mkdir()
    naive.write_text(SECRET)
    assert (canary / "secrets" / "token").read_text() == SECRET
    hj_open.ok("delete", "--force", probe)
    (canary / "secrets" / "token").unlink()
    (canary / "secrets").rmdir()

    # hostjob: refused with one line, the canary untouched, nothing left.
    for name, destination, words in (
        (new_id("h"), "/run/secrets/token", "never followed"),
        (new_id("f"), "/etc/token", "have one of that name already"),
    ):
        given = f"{secret}:{destination}"
        error = hj_open.fail(*run_d, "--name", name, "--secret", given, hostile, "true")
        assert words in error
        assert not (hj_open.root / name).exists()
        assert not (open_tmp / "store" / "rw" / name).exists()
    assert list(canary.iterdir()) == []


def test_a_bundles_secret_is_written_for_its_user_and_taken_back_at_delete(
    hj_open: Hostjob, secret: Path, open_tmp: Path
) -> None:
    annotations = {
        "io.hostjob.user": "auto",
        "io.hostjob.secrets": f"{secret}:/run/secrets/token",
    }
    bundle = make_bundle(open_tmp / "bundle", base_config("sleep", "600", annotations=annotations))
    before = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*"))
    container = new_id("b")
    hj_open.ok("create", "--bundle", str(bundle), container)
    hj_open.ok("start", container)
    pid = hj_open.state(container)["pid"]
    written = bundle / "rootfs" / "run" / "secrets" / "token"
    st = written.stat()
    assert stat.S_IMODE(st.st_mode) == 0o400 and st.st_uid == uid_of(pid)
    assert hj_open.ok("exec", container, "cat", str(written)) == SECRET
    hj_open.ok("delete", "--force", container)
    assert sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*")) == before


def test_what_a_secret_is_read_from_is_bounded(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...], open_tmp: Path
) -> None:
    big = open_tmp / "big"
    big.write_bytes(b"x" * ((1 << 20) + 1))
    fifo = open_tmp / "fifo"
    os.mkfifo(fifo)
    name = new_id("big")
    error = hj_open.fail(
        *run_d, "--name", name, "--secret", f"{big}:/run/big", busybox_image, "true"
    )
    assert "larger than 1048576 bytes" in error
    assert not (hj_open.root / name).exists()
    error = hj_open.fail(*run_d, "--secret", f"{fifo}:/run/fifo", busybox_image, "true")
    assert "is not a file" in error
    # The bundle form reads it at create: a FIFO is refused there, never waited on.
    bundle = make_bundle(
        open_tmp / "fifo-bundle",
        base_config(annotations={"io.hostjob.secrets": f"{fifo}:/run/fifo"}),
    )
    container = new_id("f")
    assert "is not a regular file" in hj_open.fail("create", "--bundle", str(bundle), container)
    assert not (hj_open.root / container).exists()
