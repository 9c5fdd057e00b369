"""``pack``: reproducible images that skopeo and umoci accept, and stacking on a base."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images import pack
from hostjob.images.errors import InvalidReference
from hostjob.images.rootfs import ImageRootfs, unmount_image
from tests.fixtures.images import write_layout
from tests.fixtures.registry import skopeo_copy
from tests.fixtures.tars import entry, make_tar
from tests.helpers import ext4_mount, has_user_xattrs, require_peer


@pytest.fixture
def tmp_path(tmp_path):
    """A temp dir that keeps user xattrs (the tree has one, and what unpacks it must keep
    it): tmpfs before 6.6 has none, so there a directory on an ext4 filesystem on a loop
    device (below its root, which holds lost+found and is a mount point the fixtures'
    clean-up of mounts under the temp dir would take off)."""
    if has_user_xattrs(tmp_path):
        yield tmp_path
    else:
        with ext4_mount(tmp_path) as mnt:
            (mnt / "tmp").mkdir()
            yield mnt / "tmp"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    (root / "etc").mkdir()
    (root / "etc" / "tool.conf").write_text("level=3\n")
    os.link(root / "etc" / "tool.conf", root / "etc" / "hardlink.conf")
    (root / "sbin").mkdir()
    (root / "sbin" / "suid").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "sbin" / "suid", 0o4755)
    os.chown(root / "etc" / "tool.conf", 1234, 1234)
    os.setxattr(root / "sbin" / "suid", "user.origin", b"pack-test")
    (root / "empty").mkdir()
    return root


PEERS = {"skopeo": "image", "umoci": "image", "podman": "podman", "ctr": "containerd"}


def needs(tool):
    require_peer(PEERS[tool], tool)


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{args[0]} failed: {done.stderr.strip()}"
    return done.stdout


def test_pack_is_reproducible(tree, tmp_path):
    kwargs = dict(
        entrypoint=["/bin/busybox"], cmd=["sh"], env=["A=1"], labels={"k": "v"}, workdir="/"
    )
    a = pack.pack(str(tree), f"oci:{tmp_path / 'a'}:v1", **kwargs)
    copy = tmp_path / "copy"
    run("cp", "-a", str(tree), str(copy))  # keeps hardlinks, modes, xattrs
    os.utime(copy / "etc" / "tool.conf", (1, 1))  # mtimes in the source do not matter
    b = pack.pack(str(copy), f"oci:{tmp_path / 'b'}:v1", **kwargs)
    assert a.digest == b.digest and a.layer == b.layer
    c = pack.pack(str(tree), f"oci-archive:{tmp_path / 'c.tar'}:v1", **kwargs)
    pack.pack(str(tree), f"oci-archive:{tmp_path / 'd.tar'}:v1", **kwargs)
    assert c.digest == a.digest
    assert (tmp_path / "c.tar").read_bytes() == (tmp_path / "d.tar").read_bytes()
    e = pack.pack(str(tree), f"oci:{tmp_path / 'e'}", **kwargs, mtime=1_700_000_000)
    assert e.digest != a.digest
    f = pack.pack(str(tree), f"oci:{tmp_path / 'f'}", **kwargs, keep_owner=True)
    assert f.diff_id != a.diff_id


def test_pack_result_in_skopeo_and_umoci(tree, tmp_path):
    needs("skopeo")
    result = pack.pack(
        str(tree),
        f"oci:{tmp_path / 'layout'}:v1",
        entrypoint=["/bin/busybox"],
        cmd=["sh", "-c", "echo hi"],
        env=["PATH=/bin", "MODE=job"],
        workdir="/work",
        labels={"org.opencontainers.image.title": "tool"},
        user="0:0",
    )
    info = json.loads(run("skopeo", "inspect", f"oci:{tmp_path / 'layout'}:v1"))
    assert info["Digest"] == result.digest
    assert info["Labels"] == {"org.opencontainers.image.title": "tool"}
    assert info["Env"] == ["PATH=/bin", "MODE=job"] and info["Os"] == "linux"
    config = json.loads(run("skopeo", "inspect", "--config", f"oci:{tmp_path / 'layout'}:v1"))
    assert config["config"]["Entrypoint"] == ["/bin/busybox"]
    assert config["config"]["WorkingDir"] == "/work" and config["config"]["User"] == "0:0"
    assert config["created"] == "1970-01-01T00:00:00Z"
    needs("umoci")
    bundle = tmp_path / "bundle"
    run("umoci", "unpack", "--image", f"{tmp_path / 'layout'}:v1", str(bundle))
    rootfs = bundle / "rootfs"
    assert (rootfs / "bin" / "busybox").read_bytes() == (tree / "bin" / "busybox").read_bytes()
    assert os.readlink(rootfs / "bin" / "sh") == "busybox"
    assert (
        os.stat(rootfs / "etc" / "tool.conf").st_ino
        == os.stat(rootfs / "etc" / "hardlink.conf").st_ino
    )
    st = os.stat(rootfs / "sbin" / "suid")
    # Owners become 0:0, so the setuid bit goes (it would make a root program).
    assert stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0
    assert os.stat(rootfs / "etc" / "tool.conf").st_uid == 0, "owners are 0:0 by default"
    assert os.getxattr(rootfs / "sbin" / "suid", "user.origin") == b"pack-test"
    assert (rootfs / "empty").is_dir()
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["process"]["args"] == ["/bin/busybox", "sh", "-c", "echo hi"]
    # And skopeo can copy it on (the path to docker-archive, ctr and podman).
    skopeo_copy(
        f"oci-archive:{pack_archive(tree, tmp_path)}:v1",
        f"docker-archive:{tmp_path / 'd.tar'}:test/tool:v1",
    )
    assert (tmp_path / "d.tar").stat().st_size > 0


def pack_archive(tree, tmp_path):
    path = tmp_path / "tool.tar"
    pack.pack(str(tree), f"oci-archive:{path}:v1", entrypoint=["/bin/busybox"])
    return path


def test_pack_then_import_and_run_from_the_store(tree, tmp_path, store):
    pack.pack(str(tree), f"oci:{tmp_path / 'layout'}:v1", entrypoint=["/bin/busybox"], env=["X=1"])
    store.import_archive(f"oci:{tmp_path / 'layout'}:v1", name="test/tool:v1")
    target = tmp_path / "rootfs"
    ImageRootfs(store.gc, store.resolve("test/tool:v1")).mount("packed", str(target))
    try:
        out = subprocess.run(
            [str(target / "bin" / "busybox"), "echo", "from the image"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout == "from the image\n"
    finally:
        unmount_image(store.gc, "packed", str(target))


def test_pack_on_a_base_image(tree, tmp_path, store):
    needs("skopeo")
    base_layers = [make_tar([entry("etc", "dir"), entry("etc/os-release", data=b"ID=base\n")])]
    write_layout(
        str(tmp_path / "base"),
        base_layers,
        tag="1",
        config={"Env": ["PATH=/usr/bin", "A=0"], "Cmd": ["/base"]},
    )
    result = pack.pack(
        str(tree),
        f"oci:{tmp_path / 'out'}:v2",
        base=f"oci:{tmp_path / 'base'}:1",
        env=["A=1", "B=2"],
        entrypoint=["/bin/busybox"],
    )
    info = json.loads(run("skopeo", "inspect", "--config", f"oci:{tmp_path / 'out'}:v2"))
    assert info["config"]["Env"] == ["PATH=/usr/bin", "A=1", "B=2"]
    assert "Cmd" not in info["config"], "a new entrypoint resets the base's Cmd"
    assert len(info["rootfs"]["diff_ids"]) == 2 and len(info["history"]) == 1
    store.import_archive(f"oci:{tmp_path / 'out'}:v2", name="test/stacked")
    image = store.resolve("test/stacked")
    assert Path(image.layer_dirs[0], "etc/os-release").exists()
    assert Path(image.layer_dirs[1], "bin/busybox").exists()
    # A base from the store works too, and gives the same image.
    store.import_archive(f"oci:{tmp_path / 'base'}:1", name="test/base")
    again = pack.pack(
        str(tree),
        f"oci:{tmp_path / 'out2'}:v2",
        base="test/base",
        store_root=store.root,
        env=["A=1", "B=2"],
        entrypoint=["/bin/busybox"],
    )
    assert again.digest == result.digest


def test_pack_errors(tree, tmp_path):
    for to in ("example.com/x", f"docker-archive:{tmp_path / 'x.tar'}", "docker://Bad Name"):
        with pytest.raises(InvalidReference):  # a registry only as docker://, and a valid one
            pack.pack(str(tree), to)
    assert list(tmp_path.iterdir()) == [tree], "nothing was packed"
    with pytest.raises(InvalidArgument, match="not a directory"):
        pack.pack(str(tmp_path / "missing"), f"oci:{tmp_path / 'x'}")
    with pytest.raises(InvalidArgument, match="NAME=VALUE"):
        pack.pack(str(tree), f"oci:{tmp_path / 'x'}", env=["novalue"])


def test_repacking_a_tag_replaces_it(tree, tmp_path):
    first = pack.pack(str(tree), f"oci:{tmp_path / 'l'}:v1")
    (tree / "new").write_text("x")
    second = pack.pack(str(tree), f"oci:{tmp_path / 'l'}:v1")
    pack.pack(str(tree), f"oci:{tmp_path / 'l'}:v2")
    index = json.loads((tmp_path / "l" / "index.json").read_text())
    tags = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"]
        for m in index["manifests"]
    }
    assert tags == {"v1": second.digest, "v2": second.digest} and first.digest != second.digest


def test_pack_result_in_ctr_and_podman(tree, tmp_path):
    from tests.compat.harness import Containerd

    archive = tmp_path / "tool.tar"
    result = pack.pack(str(tree), f"oci-archive:{archive}:v1", entrypoint=["/bin/busybox"])
    needs("podman")
    needs("ctr")
    import tempfile

    runroot = tempfile.mkdtemp(prefix="hj-", dir="/tmp")  # podman wants <= 50 chars
    try:
        podman = ["podman", "--root", str(tmp_path / "proot"), "--runroot", runroot]
        podman += ["--storage-driver", "vfs"]
        assert "Loaded image" in run(*podman, "load", "-i", str(archive))
        assert result.config[7:] in run(*podman, "images", "-q", "--no-trunc")
    finally:
        shutil.rmtree(runroot, ignore_errors=True)
    containerd = Containerd(tmp_path / "containerd", namespace="hostjob-test")
    containerd.start()
    try:
        containerd.ctr("images", "import", "--base-name", "example.com/tool", archive, check=True)
        listing = containerd.ctr("images", "ls", check=True).stdout
        assert "example.com/tool:v1" in listing and result.digest in listing
    finally:
        assert containerd.stop() == []
