"""Reading images out of the store (no root): resolving for a container, the summary
rows of ``images`` (broken images too) and the details of ``inspect``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.images import imagespec
from hostjob.images.errors import DigestMismatch, ImageError
from hostjob.images.resolve import ImageSummary, ResolvedImage, diff_ids, platform_of
from hostjob.images.store import Store
from tests.fixtures.images import digest_of, write_layout
from tests.fixtures.tars import entry, make_tar

L1 = make_tar([entry("bin", "dir"), entry("bin/tool", data=b"t")])


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(str(tmp_path / "store"))
    write_layout(str(tmp_path / "img"), [L1], tag="v1", platforms=["linux/amd64", "linux/arm64"])
    store.pull(f"oci:{tmp_path / 'img'}:v1", name="test/img:v1", platform="linux/arm64")
    return store


def test_resolve_for_a_container(store: Store) -> None:
    image = store.resolver.resolve("test/img:v1")
    assert isinstance(image, ResolvedImage)
    assert image.name == "docker.io/test/img:v1" and image.id == image.config_digest
    assert image.diff_ids == [digest_of(L1)]
    assert Path(image.layer_dirs[0], "bin/tool").read_text() == "t"
    assert repr(image).endswith("1 layers)")


def test_summaries_and_a_broken_image(store: Store) -> None:
    (row,) = store.resolver.summaries()
    assert isinstance(row, ImageSummary) and row.error is None
    assert (row.name, row.platform, row.layers) == ("docker.io/test/img:v1", "linux/arm64", 1)
    assert row.size == store.resolve("test/img:v1").manifest.layers[0].size  # type: ignore[index]
    assert row.tagged and row.tagged.endswith("Z") and row.created is None  # the fixture sets none
    os.unlink(store.content.path(row.id or ""))  # the config, removed by hand
    (broken,) = store.resolver.summaries()
    assert broken.error and "not in the store" in broken.error and broken.id is None
    assert broken.digest == row.digest


def test_details(store: Store) -> None:
    details = store.resolver.details("test/img:v1")
    assert details.names == ["docker.io/test/img:v1"] and details.platform == "linux/arm64"
    (layer,) = details.layers
    assert layer.diff_id == digest_of(L1) and layer.media_type == imagespec.OCI_LAYER_GZIP
    assert layer.path == store.layers.dir(digest_of(L1))
    os.rename(store.layers.path(digest_of(L1)), store.layers.path(digest_of(L1)) + ".gone")
    assert store.resolver.details("test/img:v1").layers[0].path is None, "not unpacked"
    # A corrupt manifest blob is an error, not a wrong answer.
    with open(store.content.path(details.digest), "ab") as f:
        f.write(b" ")
    with pytest.raises(DigestMismatch):
        store.resolver.details("test/img:v1")


def test_diff_ids_must_match_the_layers() -> None:
    config = imagespec.ImageConfig.decode({"rootfs": {"type": "layers", "diff_ids": []}})
    manifest = imagespec.Manifest.decode(
        {"schemaVersion": 2, "layers": [{"digest": digest_of(b"x"), "size": 1}]}
    )
    with pytest.raises(ImageError, match="1 layers but 0 diffIDs"):
        diff_ids(config, manifest, "sha256:m")
    assert platform_of(imagespec.ImageConfig.decode({})) == "?/?"
