"""pack's fd-relative walk: an entry swapped between the walk and the read is an error,
never a file read through a symlink (the race itself is in
tests/security/test_images_pack_race.py)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from hostjob.images import archive
from hostjob.images.errors import ImageError


def swapped_while_packing(tree: Path, name: str, swap) -> None:  # type: ignore[no-untyped-def]
    """Pack ``tree``, calling ``swap()`` right after the walk has seen ``name``."""
    root = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tarfile.open(fileobj=io.BytesIO(), mode="w|") as tar:
            layer = archive.LayerWriter(tar, str(tree), 0, False)
            for entry in archive.walk(root, str(tree)):
                if entry.rel == name:
                    swap()
                layer.add(entry)
    finally:
        os.close(root)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tree" / "d").mkdir(parents=True)
    (tmp_path / "tree" / "f").write_text("data")
    (tmp_path / "tree" / "d" / "x").write_text("x")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "x").write_text("secret")
    return tmp_path / "tree"


def test_a_file_swapped_for_a_symlink(tree: Path) -> None:
    def swap() -> None:
        os.rename(tree / "f", tree / "f.old")
        os.symlink(tree.parent / "secret" / "x", tree / "f")

    with pytest.raises(ImageError, match=r"tree/f changed while it was being packed"):
        swapped_while_packing(tree, "f", swap)


def test_a_file_replaced_by_another(tree: Path) -> None:
    def swap() -> None:
        (tree / "g").write_text("other")
        os.rename(tree / "g", tree / "f")

    with pytest.raises(ImageError, match="changed while"):
        swapped_while_packing(tree, "f", swap)


def test_a_directory_swapped_once_opened_is_read_from_its_fd(tree: Path) -> None:
    def swap() -> None:
        os.rename(tree / "d", tree / "d.old")
        os.symlink(tree.parent / "secret", tree / "d")

    out = io.BytesIO()
    root = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tarfile.open(fileobj=out, mode="w|") as tar:
            layer = archive.LayerWriter(tar, str(tree), 0, False)
            for entry in archive.walk(root, str(tree)):
                layer.add(entry)
                if entry.rel == "d":
                    swap()
    finally:
        os.close(root)
    assert b"secret" not in out.getvalue()
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        member = tar.extractfile("d/x")
        assert member is not None and member.read() == b"x"


def test_a_file_that_shrinks_while_read(tree: Path) -> None:
    fd = os.open(tree / "f", os.O_RDONLY)
    try:
        reader = archive.FileReader(fd, str(tree), "f")
        os.truncate(tree / "f", 2)
        with pytest.raises(ImageError, match="tree/f changed while"):
            reader.read(4)
    finally:
        os.close(fd)


def test_an_untouched_tree_packs(tree: Path) -> None:
    swapped_while_packing(tree, "f", lambda: None)
