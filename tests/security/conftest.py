"""Fixtures of the security tests.

Directories other users can reach, a store in one, an image with a setuid-root program
and a device node, running a command as ``nobody``, and hostjob as a Kubernetes node's
runtime handler runs it (``node``: the pod tests, ``tests/security/pods.py``). Each attack is made as another local user would make it: through
``setpriv`` with a shell doing the ``exec`` (setpriv opens its program before it drops
its privileges, a shell after).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from hostjob.linux import syscalls
from tests.helpers import Hostjob, make_rootfs
from tests.security.pods import Node

NOBODY = 65534
ID_PROGRAM = "/usr/bin/id"  # coreutils: `id -u` prints the *effective* uid
CHAR_DEVICE = (1, 3)  # the null device: harmless if a test ever opened it for real


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory other users can search (0755), for what ``nobody`` must be denied:
    a denial then comes from what hostjob made. Not under pytest's ``tmp_path``: pytest
    sets ``/tmp/pytest-of-root`` back to 0700 whenever a session starts (another
    session on the machine, any time). Removed afterwards, mounts below it first."""
    path = Path(tempfile.mkdtemp(prefix="hostjob-security-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    unmount_under(str(path))
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hj_open(open_tmp: Path) -> Iterator[Hostjob]:
    """hostjob on a state root in ``open_tmp`` (a job running as another user must
    reach its rootfs there); afterwards, nothing may be left behind."""
    runner = Hostjob(open_tmp / "state", log=open_tmp / "hostjob.log")
    yield runner
    leftovers = sorted(os.listdir(runner.root)) if runner.root.exists() else []
    for container_id in leftovers:
        runner("delete", "--force", container_id)
    assert not leftovers, f"test left containers behind: {leftovers}"


@pytest.fixture
def node(open_tmp: Path) -> Iterator[Node]:
    """hostjob as a handler's ``BinaryName`` runs it, on a state root in ``open_tmp``, with
    a mount point of the test's own rather than the host's ``/hpc`` (the operator's
    ``--default-rootfs-mount-point``); nothing may be left behind."""
    runner = Node(
        open_tmp / "state",
        ["--default-rootfs-mount-point", str(open_tmp / "hpc")],
        log=open_tmp / "hostjob.log",
    )
    yield runner
    left = sorted(os.listdir(runner.root)) if runner.root.exists() else []
    for container_id in left:
        runner("delete", "--force", container_id)
    assert not left, f"test left containers behind: {left}"


@pytest.fixture
def as_nobody() -> Callable[..., subprocess.CompletedProcess[str]]:
    """as_nobody(script, *args): ``sh -c script`` as uid/gid 65534, no groups."""

    def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
        return subprocess.run(
            [*argv, "sh", "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )

    return run


@pytest.fixture
def privileged_tree(open_tmp: Path) -> Path:
    """A directory with what an image must never grant: ``bin/id``, setuid root, and
    ``dev/null``, a world-readable character device."""
    tree = open_tmp / "privileged"
    (tree / "bin").mkdir(parents=True)
    (tree / "dev").mkdir()
    shutil.copy(ID_PROGRAM, tree / "bin" / "id")
    os.chown(tree / "bin" / "id", 0, 0)
    os.chmod(tree / "bin" / "id", 0o4755)
    os.mknod(tree / "dev" / "null", 0o20666, os.makedev(*CHAR_DEVICE))
    os.chmod(tree / "dev" / "null", 0o666)
    return tree


@pytest.fixture
def store_dir(open_tmp: Path) -> Path:
    """Where the test's image store goes (made by hostjob)."""
    return open_tmp / "store"


@pytest.fixture
def busybox_image(open_tmp: Path) -> str:
    """A one-layer image of busybox and its applets (``make_rootfs``), as ``oci:``."""
    src = make_rootfs(open_tmp / "image-src")
    pack(str(src), f"oci:{open_tmp / 'layout'}:v1", cmd=["/bin/sh"])
    return f"oci:{open_tmp / 'layout'}:v1"


@pytest.fixture
def run_d(store_dir: Path) -> tuple[str, ...]:
    """``run -d`` of an image, quiet, in the test's store: the words before the flags."""
    return ("run", "-d", "-q", "--store", str(store_dir))


def unmount_under(prefix: str) -> None:
    prefix = os.path.realpath(prefix)
    for _ in range(100):
        with open("/proc/self/mountinfo") as f:
            points = [line.split(" ")[4] for line in f]
        targets = [p for p in points if p == prefix or p.startswith(prefix + "/")]
        if not targets:
            return
        for target in sorted(targets, key=len, reverse=True):
            try:
                syscalls.umount2(target, syscalls.MNT_DETACH)
            except OSError:
                pass
