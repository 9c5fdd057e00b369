"""Tree removal in a tree someone else can write.

``delete`` removes a container's writable layer and its state directory. A process
that can still write there (through an fd into a lazily unmounted overlay, say)
swaps a directory for a symlink to a canary while the removal runs. The path-based
removal hostjob had deleted the canary's files; ``hostjob.linux.fsremove.remove_tree`` walks
with directory fds and ``O_NOFOLLOW`` and never leaves the tree, nor crosses into a
mount below it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hostjob.errors import MountError
from hostjob.linux import fsremove
from tests.security.racers import (
    attack_attempts,
    open_up,
    path_based_remove_tree,
    racing,
    snapshot,
)

PAIRS = 20  # directory/symlink pairs the racer swaps
ATTACK_ATTEMPTS = 300  # at least these tries (more while time is left) for the racer to win
DEFENCE_ATTEMPTS = 60


def _tree(top: Path, canary: Path) -> list[tuple[str, str]]:
    """``top/d<i>`` (dirs with files) and ``top/s<i> -> canary``; the pairs to swap."""
    top.mkdir()
    pairs = []
    for i in range(PAIRS):
        d = top / f"d{i}"
        d.mkdir()
        for j in range(4):
            (d / f"x{j}").write_text("x")
        (top / f"s{i}").symlink_to(canary)
        pairs.append((str(d), str(top / f"s{i}")))
    return pairs


def _canary(tmp_path: Path) -> Path:
    canary = tmp_path / "canary"
    canary.mkdir()
    for j in range(20):
        (canary / f"precious{j}").write_text("keep me")
    (canary / "sub").mkdir()
    (canary / "sub" / "deeper").write_text("keep me")
    return canary


def test_a_racer_beats_path_based_removal(tmp_path: Path) -> None:
    """The attack, first: against the removal hostjob had (lstat, then scandir and
    unlink by path), swapping directories for symlinks deletes files outside."""
    canary = _canary(tmp_path)
    for attempt in attack_attempts(ATTACK_ATTEMPTS):
        top = tmp_path / f"top{attempt}"
        with racing(_tree(top, canary)):
            try:
                path_based_remove_tree(str(top))
            except OSError:
                pass
        fsremove.remove_tree(str(top))
        if len(os.listdir(canary)) < 21:
            return  # the canary lost files: the racer works
    pytest.fail(f"the racer never beat the path-based removal in {attempt + 1} attempts")


def test_remove_tree_never_leaves_the_tree_under_a_racer(tmp_path: Path) -> None:
    canary = _canary(tmp_path)
    before = snapshot(str(canary))
    for attempt in range(DEFENCE_ATTEMPTS):
        top = tmp_path / f"top{attempt}"
        with racing(_tree(top, canary)):
            fsremove.remove_tree(str(top))
        assert not os.path.lexists(top)
        assert snapshot(str(canary)) == before, f"attempt {attempt} touched the canary"


def test_remove_tree_as_the_racer_is_an_unprivileged_user(tmp_path: Path) -> None:
    """Same, with the racer running as nobody in a tree it owns (a container's files)."""
    open_up(tmp_path)
    canary = _canary(tmp_path)
    before = snapshot(str(canary))
    for attempt in range(20):
        top = tmp_path / f"top{attempt}"
        pairs = _tree(top, canary)
        for directory, _dirs, files in os.walk(top):
            for name in [".", *files]:
                os.lchown(os.path.join(directory, name), 65534, 65534)
        for _d, link in pairs:
            os.lchown(link, 65534, 65534)
        with racing(pairs, user=(65534, 65534)):
            fsremove.remove_tree(str(top))
        assert not os.path.lexists(top)
    assert snapshot(str(canary)) == before


def test_a_symlink_given_as_the_tree_is_removed_not_followed(tmp_path: Path) -> None:
    canary = _canary(tmp_path)
    before = snapshot(str(canary))
    link = tmp_path / "rw"
    link.symlink_to(canary)
    fsremove.remove_tree(str(link))
    assert not os.path.lexists(link)
    assert snapshot(str(canary)) == before


@pytest.mark.parametrize("kind", ["tmpfs", "bind-same-device"])
def test_remove_tree_stops_at_a_mount_point(tmp_path: Path, kind: str) -> None:
    """A mount below the tree (another filesystem, or a bind mount of a directory of
    the same device, which st_dev alone cannot tell) is never emptied: the removal
    stops with a clear error and the mounted files stay."""
    top = tmp_path / "top"
    (top / "a" / "mnt").mkdir(parents=True)
    (top / "a" / "file").write_text("x")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    if kind == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(top / "a" / "mnt")], check=True)
        (top / "a" / "mnt" / "precious").write_text("keep me")
    else:
        subprocess.run(["mount", "--bind", str(victim), str(top / "a" / "mnt")], check=True)
    try:
        with pytest.raises(MountError, match=r"a/mnt: it is a mount point"):
            fsremove.remove_tree(str(top))
        assert (top / "a" / "mnt" / "precious").read_text() == "keep me"
    finally:
        subprocess.run(["umount", str(top / "a" / "mnt")], check=True)
    assert (victim / "precious").read_text() == "keep me"
    fsremove.remove_tree(str(top))
    assert not top.exists()


def test_remove_tree_of_a_very_deep_tree(tmp_path: Path) -> None:
    """A hostile writable layer thousands of levels deep is removed with a bounded
    number of open fds (no EMFILE, no RecursionError)."""
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        (Path(f"/proc/self/fd/{fd}") / "f").write_text("x")
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    open_before = len(os.listdir("/proc/self/fd"))
    fsremove.remove_tree(str(top))
    assert not top.exists()
    assert len(os.listdir("/proc/self/fd")) == open_before
