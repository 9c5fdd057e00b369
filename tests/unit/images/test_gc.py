"""Garbage collection without root: container references as typed records, what prune
keeps (names, containers) and frees (the rest, leftovers too), rmi, the lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images.errors import ImageError
from hostjob.images.gc import ContainerRef, Freed, tree_size
from hostjob.images.store import Store
from tests.fixtures.images import digest_of, register_container, write_layout
from tests.fixtures.tars import entry, make_tar

L1 = make_tar([entry("a", data=b"1")])
L2 = make_tar([entry("b", data=b"2")])


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(str(tmp_path / "store"))
    write_layout(str(tmp_path / "img"), [L1, L2])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/img")
    return store


def test_container_refs_round_trip(store: Store) -> None:
    image = store.resolve("test/img")
    ref = ContainerRef("job-1", image.name, image.manifest_digest, image.id, image.diff_ids, "t")
    store.gc.register(ref)
    on_disk = json.loads(Path(store.gc.ref_path("job-1")).read_text())
    assert on_disk == {
        "image": "docker.io/test/img:latest", "manifest": image.manifest_digest,
        "config": image.id, "layers": image.diff_ids, "registered": "t",
    }  # fmt: skip
    got = store.gc.containers()["job-1"]
    assert (got.id, got.manifest, got.layers) == ("job-1", image.manifest_digest, image.diff_ids)
    # A damaged record keeps what it still names (prune keeps more, never less).
    Path(store.gc.ref_path("job-2")).write_text(json.dumps({"layers": [digest_of(L1), 7]}))
    Path(store.gc.ref_path("job-3")).write_text("{")
    refs = store.gc.containers()
    assert refs["job-2"].layers == [digest_of(L1)] and refs["job-2"].manifest == ""
    assert "job-3" not in refs
    store.gc.unregister("job-1")
    store.gc.unregister("job-1")
    assert sorted(store.gc.containers()) == ["job-2"]
    for bad in ("", ".", "..", "a/b", "x\0", "x" * 1025):
        with pytest.raises(InvalidArgument):
            store.gc.ref_path(bad)


def test_prune_keeps_what_a_container_uses(store: Store) -> None:
    image = store.resolve("test/img")
    store.gc.register(
        ContainerRef("all", image.name, image.manifest_digest, image.id, image.diff_ids, "t")
    )
    removed = store.remove("test/img", force=True)
    assert removed.untagged == ["docker.io/test/img:latest"]
    assert removed.deleted == image.manifest_digest and removed.freed == Freed()
    # A reference keeps what it names: here the config and the first layer only.
    store.gc.unregister("all")
    store.gc.register(ContainerRef("one", image.name, "", image.id, image.diff_ids[:1], "t"))
    freed = store.prune()
    assert (freed.blobs, freed.layers) == (3, 1), "the manifest and both layer blobs; a layer"
    assert store.layers.has(image.diff_ids[0]) and not store.layers.has(image.diff_ids[1])
    assert store.content.has(image.id)
    store.gc.unregister("one")
    last = store.prune()
    assert (last.blobs, last.layers) == (1, 1), "the config and the first layer"
    assert list(store.content.digests()) == []


def test_remove_refuses_an_image_in_use(store: Store) -> None:
    register_container(store, "busy", "test/img")
    with pytest.raises(ImageError, match=r"in use by container\(s\) busy"):
        store.remove("test/img")
    assert [r.name for r in store.images()] == ["docker.io/test/img:latest"]


def test_prune_counts_leftovers_as_bytes_only(store: Store) -> None:
    blobs = Path(store.root, "blobs", "sha256")
    (blobs / ".abc.tmp-dead").write_bytes(b"x" * 5000)
    orphan = store.content.write(b"orphan")
    freed = store.prune()
    assert freed.blobs == 1 and freed.layers == 0 and freed.bytes >= 5000
    assert not store.content.has(orphan) and not (blobs / ".abc.tmp-dead").exists()
    assert os.listdir(Path(store.root, "locks")) == []
    assert store.prune() == Freed()


def test_tree_size(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_bytes(b"x" * 10000)
    os.symlink("/usr", tmp_path / "d" / "link")  # never followed
    assert 10000 <= tree_size(str(tmp_path / "d")) < 1 << 20
    assert tree_size(str(tmp_path / "d" / "e" / "f")) >= 10000
    assert tree_size(str(tmp_path / "missing")) == 0


_PRUNE = """
import sys, time
from hostjob.images.store import Store
start = time.monotonic()
Store(sys.argv[1]).prune()
print(time.monotonic() - start)
"""


def test_prune_waits_for_the_lease(store: Store) -> None:
    """What a pull wrote but has not named yet survives a prune run meanwhile."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with store.gc.lease():
        unnamed = store.content.write(b"being pulled")
        prune = subprocess.Popen(
            [sys.executable, "-c", _PRUNE, store.root], stdout=subprocess.PIPE, env=env
        )
        try:
            prune.wait(0.5)
            pytest.fail("prune did not wait for the lease")
        except subprocess.TimeoutExpired:
            pass
        assert store.content.has(unnamed)
    prune.communicate(timeout=60)
    assert prune.returncode == 0 and not store.content.has(unnamed)
