"""What an image may unpack to (``images/limits.py``), charged by the extractor, and a
failed pull taking back what it added (``Puller.pull_from``, ``Collector.discard``)."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images import limits, unpack
from hostjob.images.errors import UnpackLimit
from hostjob.images.options import UnpackLimits
from hostjob.images.store import Store
from tests.fixtures.bombs import inode_bomb, write_bomb_layout
from tests.fixtures.images import write_layout
from tests.fixtures.tars import entry, gz, make_tar, sha256


def test_a_budget_refuses_the_first_byte_and_inode_past_it() -> None:
    budget = limits.Budget(10, 2)
    budget.data(4)
    budget.data(6)
    with pytest.raises(UnpackLimit, match=r"limit of bytes \(--max-image-size\)"):
        budget.data(1)
    budget.inode()
    budget.inode()
    with pytest.raises(UnpackLimit, match="limit of inodes"):
        budget.inode()
    unlimited = limits.Budget(None, None)
    unlimited.data(1 << 40)
    unlimited.inode()


class FakeFS:
    f_frsize = 4096
    f_blocks = 1_000_000  # 3.8 GiB
    f_bavail = 250_000  # 977 MiB free
    f_files = 1_000_000
    f_favail = 40_000


def test_the_default_is_the_free_space_less_a_reserve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits.os, "statvfs", lambda path: FakeFS)
    budget = limits.budget("/store")
    assert budget.bytes_left == 250_000 * 4096 - 1_000_000 * 4096 // 20
    assert budget.inodes_left == 0  # fewer free than the reserve: nothing may be made
    assert "free space, 976.6MiB, less a reserve of 195.3MiB" in budget.bytes_why
    assert "40000 free inodes less a reserve of 50000" in budget.inodes_why
    given = limits.budget("/store", UnpackLimits(1 << 20, 7))
    assert (given.bytes_left, given.inodes_left) == (1 << 20, 7)
    assert given.bytes_why == "--max-image-size 1.0MiB"
    with pytest.raises(InvalidArgument):
        UnpackLimits(-1)


def test_a_filesystem_without_an_inode_count_has_no_inode_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Btrfs(FakeFS):
        f_files = 0
        f_favail = 0

    monkeypatch.setattr(limits.os, "statvfs", lambda path: Btrfs)
    assert limits.budget("/store").inodes_left is None


def test_the_extractor_charges_entries_and_the_parents_it_makes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    tar = inode_bomb(3)
    unpack.extract(io.BytesIO(tar), str(tmp_path / "a"), budget=limits.Budget(None, 3))
    (tmp_path / "b").mkdir()
    with pytest.raises(UnpackLimit):  # 3 files, and one directory no entry names
        unpack.extract(io.BytesIO(inode_bomb(3, depth=1)), str(tmp_path / "b"),
                       budget=limits.Budget(None, 3))  # fmt: skip
    (tmp_path / "c").mkdir()
    data = make_tar([entry("f", data=b"x" * 100)])
    with pytest.raises(UnpackLimit):
        unpack.extract(io.BytesIO(data), str(tmp_path / "c"), budget=limits.Budget(99, None))


def test_a_path_thousands_of_directories_deep_unpacks(tmp_path: Path) -> None:
    """No recursion, and no fd held per level: deeper than a path may be long."""
    (tmp_path / "d").mkdir()
    unpack.extract(io.BytesIO(inode_bomb(2, depth=1500)), str(tmp_path / "d"))
    fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
    for level in range(1500):
        child = os.open(f"d{level}", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    try:
        assert sorted(os.listdir(fd)) == ["f0000000", "f0000001"]
    finally:
        os.close(fd)
        # pytest later removes old temp dirs with a recursive rmtree, which a tree this
        # deep would take past Python's recursion limit (and fail a whole later session)
        subprocess.run(["rm", "-rf", "--", str(tmp_path / "d")], check=True)


def listing(root: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
    )


def test_a_failed_pull_takes_back_what_it_added(tmp_path: Path) -> None:
    shared = make_tar([entry("shared", data=b"s")])
    write_layout(str(tmp_path / "base"), [shared], tag="v1")
    own = make_tar([entry("own", data=b"o")])
    layers = [(gz(shared), sha256(shared), "gzip"), (gz(own), sha256(own), "gzip")]
    bomb = inode_bomb(50)
    write_bomb_layout(str(tmp_path / "bomb"), [*layers, (gz(bomb), sha256(bomb), "gzip")])
    store = Store(str(tmp_path / "store"))
    store.pull(f"oci:{tmp_path / 'base'}:v1", name="localhost/base:v1")
    store.prune()  # the lock files of the first pull: prune's to remove
    before = listing(tmp_path / "store")
    with pytest.raises(UnpackLimit):
        store.pull(f"oci:{tmp_path / 'bomb'}:v1", limits=UnpackLimits(max_inodes=20))
    assert listing(tmp_path / "store") == before
    assert [row.name for row in store.images()] == ["localhost/base:v1"]
    assert store.resolve("localhost/base:v1").layer_dirs  # its layer stays
