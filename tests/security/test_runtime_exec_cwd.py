"""`exec --cwd` creating a missing working directory.

A container process running as an unprivileged user owns a directory on the way to
the working directory and swaps a subdirectory for a symlink to a canary while the
runtime creates the cwd as root. The old code (mkdir, then chown, by path) made the
directory in the canary and gave it to the container's user; now each directory is
reached from the mount point with ``O_NOFOLLOW``, made with ``mkdirat`` and chowned
through its own fd (``hostjob.runtime.launch.child._make_cwd``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.errors import StartError
from hostjob.runtime.container import Container
from hostjob.runtime.launch.foreground import FORWARDED
from hostjob.runtime.verbs.execute import process_for_exec
from tests.helpers import Hostjob, base_config, new_id
from tests.security.racers import open_up, path_based_make_cwd, racing, snapshot

NOBODY = (65534, 65534)
ATTEMPTS = 2000


def _setup(bundle, tmp_path: Path) -> tuple[Path, Path, Path]:  # type: ignore[no-untyped-def]
    """A rootfs whose ``work`` belongs to the container's user (nobody), holding
    ``new`` (a directory) and ``lnk -> canary`` (a root-owned directory outside)."""
    open_up(tmp_path)
    config_json = base_config("sleep", "300")
    config_json["process"]["user"] = {"uid": NOBODY[0], "gid": NOBODY[1]}
    b = bundle(config_json)
    rootfs = b / "rootfs"
    work = rootfs / "work"
    (work / "new").mkdir(parents=True)
    canary = tmp_path / "canary"
    canary.mkdir()
    (work / "lnk").symlink_to(canary)
    for path in (work, work / "new", work / "lnk"):
        os.lchown(path, *NOBODY)
    return b, work, canary


def test_cwd_creation_attack(bundle, tmp_path: Path) -> None:
    """The attack, first: the old mkdir + chown by path, while the container's user
    swaps ``new`` and ``lnk``, makes a directory in the canary owned by that user."""
    b, work, canary = _setup(bundle, tmp_path)
    rootfs = str(b / "rootfs")

    def stolen() -> bool:
        return any(os.lstat(canary / name).st_uid == NOBODY[0] for name in os.listdir(canary))

    # The mkdir and the chown must both go through the symlink: allow more tries.
    with racing([(str(work / "new"), str(work / "lnk"))], user=NOBODY):
        for i in range(10 * ATTEMPTS):
            try:
                path_based_make_cwd(f"{work}/new/sub{i}", *NOBODY, rootfs)
            except OSError:
                pass
            if stolen():
                break
    assert stolen(), f"the racer never beat the path-based cwd creation in {10 * ATTEMPTS} tries"


@pytest.fixture
def signals_restored() -> Iterator[None]:
    """An attached exec through the library forwards signals while it waits, then
    ignores them (the CLI tears down next): give the test process its own back."""
    saved = {number: signal.getsignal(number) for number in FORWARDED}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


@pytest.mark.usefixtures("signals_restored")
def test_exec_cwd_creation_under_a_racer(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """2,000 execs with a missing cwd (through the library, as `exec --cwd` does) while
    the container's user swaps ``new`` for a symlink to the canary: the canary never
    gains an entry nor changes owner; each exec either runs in a directory made inside
    the rootfs, owned by nobody, or fails with a one-line StartError."""
    b, work, canary = _setup(bundle, tmp_path)
    before = snapshot(str(canary))
    cid = new_id("sec")
    hj.ok("create", "--bundle", str(b), cid)
    hj.ok("start", cid)
    container = Container.load(cid, root=str(hj.root))
    ran = refused = 0
    with racing([(str(work / "new"), str(work / "lnk"))], user=NOBODY):
        for i in range(ATTEMPTS):
            process = process_for_exec(container.config.process, ["true"], cwd=f"/work/new/sub{i}")
            try:
                assert container.exec(process) == 0
                ran += 1
            except StartError as err:
                assert "\n" not in str(err)
                refused += 1
    assert snapshot(str(canary)) == before, "the canary was created in or chowned"
    assert ran + refused == ATTEMPTS
    # What was made is inside the rootfs (in whichever of new/lnk holds the real dir)
    # and belongs to the process's user; an exec may have made its cwd and still failed
    # (its chdir, as nobody, met the symlink).
    real = work / ("new" if (work / "new").is_dir() and not (work / "new").is_symlink() else "lnk")
    made = os.listdir(real)
    assert ran <= len(made) <= ATTEMPTS
    assert ran > 0
    assert all(os.stat(real / name).st_uid == NOBODY[0] for name in made)
    hj.ok("delete", "--force", cid)


def test_exec_cwd_through_an_image_symlink_is_refused(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """Without a racer: a cwd below a symlink leading out of the rootfs is refused."""
    b, work, canary = _setup(bundle, tmp_path)
    cid = new_id("sec")
    hj.ok("create", "--bundle", str(b), cid)
    hj.ok("start", cid)
    err = hj.fail("exec", "--cwd", "/work/lnk/sub", cid, "true")
    assert "leads outside the container's root through a symlink" in err
    assert os.listdir(canary) == []
    hj.ok("exec", "--cwd", "/work/new/a/b", cid, "true")
    assert os.stat(work / "new" / "a" / "b").st_uid == NOBODY[0]
    assert os.stat(work / "new" / "a").st_mode & 0o777 == 0o700
    hj.ok("delete", "--force", cid)
