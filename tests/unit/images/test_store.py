"""The store's verbs on local sources: import, names, lookups, rmi, prune, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound, InvalidReference
from hostjob.images.gc import Freed
from hostjob.images.store import Store
from tests.fixtures.images import digest_of, register_container, write_docker_archive, write_layout
from tests.fixtures.tars import entry, make_tar

L1 = make_tar([entry("bin", "dir"), entry("bin/tool", data=b"#!/bin/sh\n", mode=0o755)])
L2 = make_tar([entry("etc", "dir"), entry("etc/conf", data=b"x=1\n")])


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store"))


def test_import_oci_layout_and_lookups(store, tmp_path):
    top = write_layout(str(tmp_path / "img"), [L1, L2], tag="v1")
    info = store.pull(f"oci:{tmp_path / 'img'}:v1")
    assert info.name == "localhost/img:v1"
    assert info.digest == top and info.layers == 2 and info.layers_unpacked == 2
    image_id = info.id
    for name in ("localhost/img:v1", top, image_id, image_id[7:19], f"localhost/img@{top}"):
        assert store.resolve(name).manifest_digest == top, name
    image = store.resolve("localhost/img:v1")
    assert [
        Path(d, p).exists() for d, p in zip(image.layer_dirs, ["bin/tool", "etc/conf"], strict=True)
    ] == [True, True]
    assert image.config.config.cmd == ["/bin/sh"]
    assert image.diff_ids == [digest_of(L1), digest_of(L2)]
    rows = store.images()
    assert [r.name for r in rows] == ["localhost/img:v1"]
    assert rows[0].platform == "linux/amd64" and rows[0].size and rows[0].error is None
    details = store.inspect("localhost/img:v1")
    assert details.layers[0].diff_id == digest_of(L1)
    assert details.layers[1].path == image.layer_dirs[1]
    assert details.names == ["localhost/img:v1"] and details.digest == top
    assert details.id == info.id and details.index is None and details.size == rows[0].size
    with pytest.raises(ImageNotFound, match="no such image: nothing"):
        store.resolve("nothing")


def test_names_and_tags(store, tmp_path):
    write_layout(str(tmp_path / "img"), [L1])
    store.pull(f"oci:{tmp_path / 'img'}", name="busybox")
    store.pull(f"oci:{tmp_path / 'img'}", name="example.com/team/tool:2")
    assert {r.name for r in store.images()} == {
        "docker.io/library/busybox:latest",
        "example.com/team/tool:2",
    }
    assert store.resolve("busybox").name == "docker.io/library/busybox:latest"
    # Removing one name keeps the content for the other.
    result = store.remove("busybox")
    assert result.untagged == ["docker.io/library/busybox:latest"] and result.freed.layers == 0
    store.resolve("example.com/team/tool:2")
    # Removing by ID drops every name, then the content.
    image_id = store.images()[0].id
    assert image_id is not None
    result = store.remove(image_id[7:19])
    assert result.freed.layers == 1 and result.freed.blobs == 3 and result.freed.bytes > 0
    assert store.images() == [] and list(store.content.digests()) == []


def test_ambiguous_prefix(store, tmp_path):
    for i in range(20):
        write_layout(str(tmp_path / f"i{i}"), [make_tar([entry(f"f{i}", data=b"%d" % i)])])
        store.pull(f"oci:{tmp_path / f'i{i}'}", name=f"test/i{i}")
    ids = [(r.id or "")[7:] for r in store.images()]
    shared = next((a[:4] for a in ids for b in ids if a != b and a[:4] == b[:4]), None)
    if shared:
        with pytest.raises(InvalidArgument, match="ambiguous"):
            store.resolve(shared)


def test_registered_containers_pin_layers(store, tmp_path):
    write_layout(str(tmp_path / "img"), [L1, L2])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/pinned")
    register_container(store, "job-1", "test/pinned")
    assert store.containers()["job-1"].layers == [digest_of(L1), digest_of(L2)]
    store.remove("test/pinned", force=True)
    assert store.prune() == Freed()
    assert all(Path(store.layers.dir(d)).is_dir() for d in (digest_of(L1), digest_of(L2)))
    store.gc.unregister("job-1")
    store.gc.unregister("job-1")  # idempotent
    freed = store.prune()
    assert freed.layers == 2 and freed.blobs == 4
    for bad in ("", "..", "a/b"):
        with pytest.raises(InvalidArgument):
            register_container(store, bad, "x")


def test_prune_removes_leftovers(store, tmp_path):
    write_layout(str(tmp_path / "img"), [L1])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/x")
    junk_blob = Path(store.root, "blobs", "sha256", ".tmp-dead-123")
    junk_blob.write_bytes(b"partial")
    junk_layer = Path(store.root, "layers", "sha256", ".tmp-dead-456")
    junk_layer.mkdir()
    orphan = store.content.write(b"orphan")
    freed = store.prune()
    assert freed.blobs == 1 and not junk_blob.exists() and not junk_layer.exists()
    assert not store.content.has(orphan)
    store.resolve("test/x")


def test_layout_with_several_images_needs_a_tag(store, tmp_path):
    path = tmp_path / "multi"
    write_layout(str(path), [L1], tag="a")
    index = json.loads((path / "index.json").read_text())
    second = dict(index["manifests"][0], annotations={"org.opencontainers.image.ref.name": "b"})
    index["manifests"].append(second)
    (path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ImageNotFound, match="holds 2 images; name one with :TAG"):
        store.pull(f"oci:{path}")
    with pytest.raises(ImageNotFound, match="no image tagged 'c'"):
        store.pull(f"oci:{path}:c")
    assert store.pull(f"oci:{path}:b").name == "localhost/multi:b"
    digest = index["manifests"][0]["digest"]
    assert store.pull(f"oci:{path}@{digest}", name="test/bydigest").digest == digest


def test_index_in_layout_picks_platform(store, tmp_path):
    write_layout(
        str(tmp_path / "idx"), [L1], platforms=["linux/arm64", "linux/amd64", "linux/s390x"]
    )
    assert store.pull(f"oci:{tmp_path / 'idx'}", platform="linux/s390x").platform == "linux/s390x"
    assert (
        store.pull(f"oci:{tmp_path / 'idx'}", platform="linux/arm64", name="t/arm").platform
        == "linux/arm64"
    )


def test_corrupt_layout_blob_is_refused(store, tmp_path):
    path = tmp_path / "img"
    write_layout(str(path), [L1, L2])
    index = json.loads((path / "index.json").read_text())
    manifest = json.loads((path / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_text())
    layer = path / "blobs/sha256" / manifest["layers"][1]["digest"][7:]
    data = bytearray(layer.read_bytes())
    data[-9] ^= 0xFF
    layer.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch):
        store.pull(f"oci:{path}")
    assert store.images() == []
    assert not store.content.has(manifest["layers"][1]["digest"])
    assert [n for n in os.listdir(Path(store.root, "layers", "sha256")) if n.startswith(".")] == []


def test_manifest_problems_are_refused(store, tmp_path):
    path = tmp_path / "img"
    write_layout(str(path), [L1])
    index = json.loads((path / "index.json").read_text())
    mpath = path / "blobs/sha256" / index["manifests"][0]["digest"][7:]
    manifest = json.loads(mpath.read_text())

    def variant(change, match):
        m = json.loads(json.dumps(manifest))
        change(m)
        raw = json.dumps(m).encode()
        digest = digest_of(raw)
        (path / "blobs/sha256" / digest[7:]).write_bytes(raw)
        desc = {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(raw),
        }
        (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
        with pytest.raises(ImageError, match=match):
            store.pull(f"oci:{path}")

    foreign = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    variant(lambda m: m["layers"][0].update(mediaType=foreign), "foreign layer")
    variant(
        lambda m: m["layers"][0].update(mediaType="application/x-weird"), "unsupported layer type"
    )
    variant(lambda m: m["layers"].append(m["layers"][0]), "2 layers but 1 diffIDs")
    variant(
        lambda m: m["config"].update(mediaType="application/vnd.cncf.helm.config.v1+json"),
        "not a container image",
    )
    variant(lambda m: m["layers"][0].update(size=m["layers"][0]["size"] + 1), "bytes")


def test_docker_archive_import(store, tmp_path):
    archive = str(tmp_path / "save.tar")
    write_docker_archive(archive, [L1, L2], ["example.com/app:1.0", "example.com/app:latest"])
    info = store.import_archive(f"docker-archive:{archive}")
    assert info.name == "example.com/app:1.0" and info.layers == 2
    image = store.resolve("example.com/app:1.0")
    assert Path(image.layer_dirs[1], "etc/conf").read_bytes() == b"x=1\n"
    assert (
        store.import_archive(f"docker-archive:{archive}:example.com/app:latest").layers_unpacked
        == 0
    )
    assert (
        store.import_archive(f"docker-archive:{archive}:@0", name="test/idx").name
        == "docker.io/test/idx:latest"
    )
    with pytest.raises(ImageNotFound):
        store.import_archive(f"docker-archive:{archive}:other:1")
    with pytest.raises(ImageNotFound):
        store.import_archive(f"docker-archive:{archive}:@3")
    with pytest.raises(InvalidReference, match="registry reference"):
        store.import_archive("busybox")


def test_missing_sources(store, tmp_path):
    with pytest.raises(ImageNotFound):
        store.pull(f"oci:{tmp_path / 'nope'}")
    with pytest.raises(ImageNotFound):
        store.pull(f"oci-archive:{tmp_path / 'nope.tar'}")
    (tmp_path / "notalayout").mkdir()
    with pytest.raises(ImageError, match="not an OCI image layout"):
        store.pull(f"oci:{tmp_path / 'notalayout'}")
    (tmp_path / "junk.tar").write_bytes(os.urandom(3000))
    with pytest.raises(ImageError, match=r"not an .*tar archive"):
        store.pull(f"docker-archive:{tmp_path / 'junk.tar'}")


def test_corrupt_images_json(store, tmp_path):
    write_layout(str(tmp_path / "img"), [L1])
    store.pull(f"oci:{tmp_path / 'img'}")
    Path(store.root, "images.json").write_text("{broken")
    with pytest.raises(ImageError, match=r"images\.json is corrupt"):
        store.images()


def test_resolve_unpacks_missing_layers_again(store, tmp_path):
    import shutil

    write_layout(str(tmp_path / "img"), [L1])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/re")
    shutil.rmtree(store.layers.path(digest_of(L1)))
    image = store.resolve("test/re")
    assert Path(image.layer_dirs[0], "bin/tool").exists()
    with pytest.raises(ImageError, match="not unpacked"):
        shutil.rmtree(store.layers.path(digest_of(L1)))
        store.resolve("test/re", unpack_missing=False)


def test_get_with_pull_policies(store, tmp_path):
    write_layout(str(tmp_path / "img"), [L1], tag="v1")
    image = store.get(f"oci:{tmp_path / 'img'}:v1")
    assert image.name == "localhost/img:v1"
    assert store.get("localhost/img:v1", pull="never").manifest_digest == image.manifest_digest
    assert store.get(image.id[7:19]).name == "localhost/img:v1"
    with pytest.raises(ImageNotFound, match="--pull never"):
        store.get("example.invalid/none:1", pull="never")
    with pytest.raises(InvalidArgument):
        store.get("x", pull="sometimes")
