"""Archives made by real tools (skopeo) import; big multi-layer archives read in parallel."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from tests.fixtures.images import write_layout
from tests.fixtures.registry import skopeo_copy
from tests.fixtures.tars import entry, make_tar


def layers(n):
    return [
        make_tar([entry(f"l{i}/blob", data=os.urandom(300_000)), entry(f"l{i}/n", data=b"%d" % i)])
        for i in range(n)
    ]


def check(store, name, n):
    image = store.resolve(name)
    assert [Path(d, f"l{i}/n").read_text() for i, d in enumerate(image.layer_dirs)] == [
        str(i) for i in range(n)
    ]


def test_skopeo_docker_archive_and_oci_archive(store, tmp_path):
    write_layout(str(tmp_path / "layout"), layers(3), tag="v1")
    skopeo_copy(
        f"oci:{tmp_path / 'layout'}:v1", f"docker-archive:{tmp_path / 'd.tar'}:example.com/app:v1"
    )
    skopeo_copy(f"oci:{tmp_path / 'layout'}:v1", f"oci-archive:{tmp_path / 'o.tar'}:v1")
    info = store.import_archive(f"docker-archive:{tmp_path / 'd.tar'}")
    assert info.name == "example.com/app:v1"
    check(store, "example.com/app:v1", 3)
    info = store.import_archive(f"oci-archive:{tmp_path / 'o.tar'}:v1")
    assert info.name == "localhost/o:v1" and info.layers_unpacked == 0, "same layers, shared"
    check(store, "localhost/o:v1", 3)


def test_many_layer_archive_read_in_parallel(store, tmp_path):
    write_layout(str(tmp_path / "layout"), layers(8), tag="v1")
    archive = tmp_path / "big.tar"
    with tarfile.open(archive, "w") as tf:
        tf.add(tmp_path / "layout", arcname=".")
    info = store.import_archive(f"oci-archive:{archive}")
    assert info.layers_unpacked == 8
    check(store, info.name, 8)
