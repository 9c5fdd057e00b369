"""Whiteouts, opaque dirs and layer sharing, seen through a real overlay mount."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostjob.errors import MountError
from hostjob.images import overlay
from hostjob.images.errors import ImageError
from hostjob.images.resolve import ResolvedImage
from hostjob.images.rootfs import ContainerRootfs, ImageRootfs, MountedRootfs, unmount_image
from hostjob.images.store import Store
from hostjob.linux.mountinfo import is_mountpoint
from tests.fixtures.images import write_layout
from tests.fixtures.tars import entry, make_tar
from tests.helpers import kernel_version

BASE = make_tar(
    [
        entry("etc", "dir"),
        entry("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\n"),
        entry("etc/group", data=b"root:x:0:\n"),
        entry("var", "dir"),
        entry("var/a", data=b"a"),
        entry("var/sub", "dir"),
        entry("var/sub/b", data=b"b"),
        entry("opt", "dir"),
        entry("opt/keep", data=b"keep"),
    ]
)
TOP = make_tar(
    [
        entry("etc", "dir"),
        entry("etc/.wh.passwd"),
        entry("var", "dir"),
        entry("var/.wh..wh..opq"),
        entry("var/c", data=b"c"),
        entry(".wh.opt"),
        entry("new", data=b"new"),
    ]
)


def mount(store: Store, cid: str, image: str | ResolvedImage, target: str) -> MountedRootfs:
    resolved = image if isinstance(image, ResolvedImage) else store.resolve(image)
    return ImageRootfs(store.gc, resolved).mount(cid, target)


def test_whiteouts_and_opaque_dirs_through_overlay(store, tmp_path):
    write_layout(str(tmp_path / "img"), [BASE, TOP], tag="v1")
    info = store.pull(f"oci:{tmp_path / 'img'}:v1", name="test/wh:v1")
    assert info.layers_unpacked == 2
    target = tmp_path / "rootfs"
    mounted = mount(store, "c1", "test/wh:v1", str(target))
    try:
        assert is_mountpoint(str(target))
        line = next(
            x for x in Path("/proc/self/mountinfo").read_text().splitlines() if f" {target} " in x
        )
        assert " overlay " in line and "volatile" in line, line
        assert sorted(os.listdir(target / "etc")) == ["group"]
        assert sorted(os.listdir(target / "var")) == ["c"], "opaque dir hides the lower var/"
        assert not (target / "opt").exists(), "whiteout hides a whole directory"
        assert (target / "new").read_bytes() == b"new"
        # The container's writes go to its upper dir, never to the shared layers.
        (target / "etc" / "group").write_text("changed")
        (target / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
        lower = store.resolve("test/wh:v1").layer_dirs[0]
        assert Path(lower, "etc/group").read_text() == "root:x:0:\n"
        assert os.path.exists(os.path.join(mounted.upper, "etc/hosts"))
    finally:
        unmount_image(store.gc, "c1", str(target))
    assert not is_mountpoint(str(target))
    assert not os.path.exists(mounted.upper)
    assert "c1" not in store.containers()


def test_two_images_share_their_base_layer(store, tmp_path):
    app1 = make_tar([entry("app1", data=b"1")])
    app2 = make_tar([entry("app2", data=b"2")])
    write_layout(str(tmp_path / "one"), [BASE, app1])
    write_layout(str(tmp_path / "two"), [BASE, app2])
    first = store.pull(f"oci:{tmp_path / 'one'}", name="test/one")
    second = store.pull(f"oci:{tmp_path / 'two'}", name="test/two")
    assert first.layers_unpacked == 2
    assert second.layers_unpacked == 1, "the shared base is unpacked once"
    one, two = store.resolve("test/one"), store.resolve("test/two")
    assert one.layer_dirs[0] == two.layer_dirs[0]
    assert len(os.listdir(os.path.join(store.root, "layers", "sha256"))) == 3
    targets = [tmp_path / "r1", tmp_path / "r2"]
    try:
        mount(store, "a", one, str(targets[0]))
        mount(store, "b", two, str(targets[1]))
        assert (targets[0] / "app1").exists() and not (targets[0] / "app2").exists()
        assert (targets[1] / "app2").exists()
        assert (
            os.stat(os.path.join(one.layer_dirs[0], "etc/passwd")).st_ino
            == os.stat(os.path.join(two.layer_dirs[0], "etc/passwd")).st_ino
        )
    finally:
        for cid, target in zip("ab", targets, strict=True):
            unmount_image(store.gc, cid, str(target))


def test_prune_keeps_what_containers_use(store, tmp_path):
    write_layout(str(tmp_path / "img"), [BASE, TOP])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/keep")
    target = tmp_path / "rootfs"
    mount(store, "busy", "test/keep", str(target))
    try:
        with pytest.raises(ImageError, match="in use by container"):
            store.remove("test/keep")
        result = store.remove("test/keep", force=True)
        assert result.untagged == ["docker.io/test/keep:latest"]
        assert result.freed.layers == 0, "layers of a registered container are kept"
        assert (target / "new").exists()
    finally:
        unmount_image(store.gc, "busy", str(target))
    freed = store.prune()
    assert freed.layers == 2 and freed.blobs >= 3 and freed.bytes > 0
    assert os.listdir(os.path.join(store.root, "layers", "sha256")) == []
    assert store.images() == []


def test_many_layers_beyond_the_mount_option_limit(store, tmp_path, cleanup_mounts):
    layers = [
        make_tar([entry(f"f{i:03}", data=b"%d" % i), entry("top", data=b"%d" % i)])
        for i in range(90)
    ]
    write_layout(str(tmp_path / "img"), layers)
    store.pull(f"oci:{tmp_path / 'img'}", name="test/many")
    image = store.resolve("test/many")
    data = ":".join(image.layer_dirs)
    assert len(data) > overlay.PAGE_LIMIT, "the test must exceed one page of options"
    methods = ["shortnames", "auto"]
    if kernel_version() >= (6, 8):  # lowerdir+ takes any number of layers
        methods.insert(0, "fsconfig")
    else:  # the new mount API has no lowerdir+ there: said, not tried
        rootfs = ContainerRootfs(image.layer_dirs, str(tmp_path / "rw"), str(tmp_path / "m"))
        with pytest.raises(MountError, match=r"new mount API with lowerdir\+ is not supported"):
            rootfs.mount(method="fsconfig")
        assert not is_mountpoint(str(tmp_path / "m"))
    for method in methods:
        rootfs = ContainerRootfs(image.layer_dirs, str(tmp_path / "rw"), str(tmp_path / "m"))
        rootfs.mount(method=method)
        try:
            assert (tmp_path / "m" / "top").read_text() == "89", "the last layer is on top"
            assert len(os.listdir(tmp_path / "m")) == 91
            flags = os.statvfs(tmp_path / "m").f_flag
            assert flags & os.ST_NOSUID and flags & os.ST_NODEV, (method, "nosuid,nodev")
        finally:
            rootfs.unmount()
        assert not is_mountpoint(str(tmp_path / "m"))


def test_image_without_layers_mounts(store, tmp_path):
    write_layout(str(tmp_path / "img"), [])
    store.pull(f"oci:{tmp_path / 'img'}", name="test/empty")
    target = tmp_path / "rootfs"
    mount(store, "e", "test/empty", str(target))
    try:
        assert os.listdir(target) == []
    finally:
        unmount_image(store.gc, "e", str(target))
    # mount(2) with the options in one page: nosuid,nodev there too.
    rootfs = ContainerRootfs([], str(tmp_path / "rw"), str(target))
    assert rootfs.mount(method="mount") == "mount"
    try:
        flags = os.statvfs(target).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV
    finally:
        rootfs.unmount()


_PULL = """
import json, sys
from hostjob.images.store import Store
r = Store(sys.argv[1]).pull(sys.argv[2], name="test/race")
print(json.dumps({"layers_unpacked": r.layers_unpacked, "blobs_fetched": r.blobs_fetched}))
"""


def test_concurrent_pulls_unpack_once(store, tmp_path):
    big = [
        make_tar([entry(f"d{j}/f{i}", data=os.urandom(2000)) for i in range(300)]) for j in range(3)
    ]
    write_layout(str(tmp_path / "img"), big)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PULL, store.root, f"oci:{tmp_path / 'img'}"],
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in range(3)
    ]
    import json

    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(r["layers_unpacked"] for r in results) == 3, "each layer unpacked exactly once"
    assert sum(r["blobs_fetched"] for r in results) == 4, "each blob stored exactly once"
    layers_dir = os.path.join(store.root, "layers", "sha256")
    assert len(os.listdir(layers_dir)) == 3, "no temp dirs left"
    assert [
        n for n in os.listdir(os.path.join(store.root, "blobs", "sha256")) if n.startswith(".")
    ] == []
    image = store.resolve("test/race")
    assert all(
        len(os.listdir(os.path.join(d, f"d{i}"))) == 300 for i, d in enumerate(image.layer_dirs)
    )
