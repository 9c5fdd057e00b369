"""An image cannot fill the store's filesystem by what its layers unpack to.

A zstd bomb (4 GiB of zeros in 128 KiB), a gzip bomb (1 GiB in 1 MiB) and an inode
bomb (thousands of empty files, or one file below a thousand directories no entry
names) as layers of images that also hold an ordinary layer and one another image
uses. First the attack: with the limits lifted, the bomb fills a 64 MiB tmpfs store
(ENOSPC). Then harmless: the store's default (its free space less a reserve) and
small limits given on ``import``, ``pull`` and ``run`` stop each bomb with one line,
and the store is as it was before: the same files, the same images, nothing for
``prune`` to free, and the other image's layer still there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.bombs import inode_bomb, write_bomb_layout, zeros_bomb
from tests.fixtures.images import write_layout
from tests.fixtures.registry import FakeRegistry
from tests.fixtures.tars import entry, gz, make_tar, sha256
from tests.helpers import hostjob_cmd, hostjob_env

SHARED = make_tar([entry("etc/shared", data=b"used by the base image too\n")])
OWN = make_tar([entry("etc/own", data=b"only the bomb's image has it\n")])


def hostjob(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*hostjob_cmd(), *args], capture_output=True, text=True, env=hostjob_env(),
        timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """References of the base image and of one image per bomb."""
    root = tmp_path_factory.mktemp("bombs")
    refs = {}
    write_layout(str(root / "base"), [SHARED], tag="v1")
    refs["base"] = f"oci:{root / 'base'}:v1"
    ordinary = [(gz(SHARED), sha256(SHARED), "gzip"), (gz(OWN), sha256(OWN), "gzip")]
    bombs = {
        "zstd": (*zeros_bomb(4 << 30, "zstd"), "zstd"),
        "gzip": (*zeros_bomb(1 << 30, "gzip"), "gzip"),
        "inodes": (gz(many := inode_bomb(20_000)), sha256(many), "gzip"),
        "deep": (gz(deep := inode_bomb(1, depth=1200)), sha256(deep), "gzip"),
    }
    for name, layer in bombs.items():
        write_bomb_layout(str(root / name), [*ordinary, layer])
        refs[name] = f"oci:{root / name}:v1"
    assert len(bombs["zstd"][0]) < 256 << 10  # 4 GiB in less than 256 KiB
    return refs


def state(store: Path) -> tuple[list[str], str]:
    """Every file of the store (locks too) and what ``images`` lists."""
    found = []
    for dirpath, dirnames, filenames in os.walk(store):
        for name in dirnames + filenames:
            found.append(os.path.relpath(os.path.join(dirpath, name), store))
    listed = hostjob("images", "--store", str(store), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return sorted(found), listed.stdout


def with_base(store: Path, images: dict[str, str]) -> tuple[list[str], str]:
    done = hostjob("import", "-q", "--store", str(store), "--name", "localhost/base:v1",
                   images["base"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    hostjob("prune", "--store", str(store))  # its lock files go: prune's own state
    return state(store)


def assert_as_it_was(store: Path, before: tuple[list[str], str]) -> None:
    assert state(store) == before
    pruned = hostjob("prune", "--store", str(store))
    assert pruned.stdout.strip() == "freed 0 B (0 blobs, 0 layers)", pruned.stdout
    inspected = hostjob("inspect", "--store", str(store), "localhost/base:v1")
    assert inspected.returncode == 0 and '"path": "/' in inspected.stdout  # its layer is there


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    return done.stderr.strip()


@pytest.fixture
def small_fs(open_tmp: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (8,192 inodes) to hold a store: what a bomb fills."""
    mount_point = open_tmp / "fs"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=8192,mode=0755",
                    "hostjob-test", str(mount_point)], check=True)  # fmt: skip
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_bomb_fills_the_filesystem_where_no_limit_stops_it(
    small_fs: Path, images: dict[str, str]
) -> None:
    store = small_fs / "store"
    before = with_base(store, images)
    done = hostjob("import", "-q", "--store", str(store), "--max-image-size", "100g",
                   "--max-image-inodes", "100000000", images["zstd"])  # fmt: skip
    assert "No space left on device" in one_line_error(done)
    assert_as_it_was(store, before)  # and the failed import took back what it wrote


@pytest.mark.parametrize("bomb", ["zstd", "inodes"])
def test_the_stores_default_stops_a_bomb_before_the_filesystem_is_full(
    small_fs: Path, images: dict[str, str], bomb: str
) -> None:
    store = small_fs / "store"
    before = with_base(store, images)
    line = one_line_error(hostjob("import", "-q", "--store", str(store), images[bomb]))
    kind = "bytes" if bomb == "zstd" else "inodes"
    assert f"the image unpacks to more than its limit of {kind} (the store's" in line
    assert "less a reserve" in line and "No space" not in line
    assert_as_it_was(store, before)


@pytest.mark.parametrize(
    ("bomb", "flag", "expect"),
    [
        ("zstd", ["--max-image-size", "32m"], "limit of bytes (--max-image-size 32.0MiB)"),
        ("gzip", ["--max-image-size", "32m"], "limit of bytes (--max-image-size 32.0MiB)"),
        ("inodes", ["--max-image-inodes", "1000"], "limit of inodes (--max-image-inodes 1000)"),
        ("deep", ["--max-image-inodes", "1000"], "limit of inodes (--max-image-inodes 1000)"),
    ],
)
def test_a_limit_stops_a_bomb_and_the_store_is_as_it_was(
    tmp_path: Path, images: dict[str, str], bomb: str, flag: list[str], expect: str
) -> None:
    store = tmp_path / "store"
    before = with_base(store, images)
    line = one_line_error(hostjob("import", "-q", "--store", str(store), *flag, images[bomb]))
    assert expect in line and "keeps nothing of it" in line
    assert_as_it_was(store, before)


def test_pull_and_run_take_the_limits(tmp_path: Path, images: dict[str, str]) -> None:
    store = tmp_path / "store"
    before = with_base(store, images)
    layout = images["zstd"].removeprefix("oci:").removesuffix(":v1")
    with FakeRegistry(layout) as registry:
        pulled = hostjob("pull", "-q", "--store", str(store), "--plain-http",
                         "--max-image-size", "32m", f"{registry.host}/bomb/img:v1")  # fmt: skip
        assert "limit of bytes (--max-image-size 32.0MiB)" in one_line_error(pulled)
    assert_as_it_was(store, before)
    state_root = tmp_path / "state"
    ran = hostjob("--root", str(state_root), "run", "--rm", "-q", "--store", str(store),
                  "--max-image-inodes", "1000", images["inodes"], "true")  # fmt: skip
    assert "limit of inodes (--max-image-inodes 1000)" in one_line_error(ran)
    assert_as_it_was(store, before)
    assert not state_root.exists() or os.listdir(state_root) == []
