"""The unpacked-layer cache: one unpack per diffID, ``layer.json`` as a typed record,
leftovers of a killed unpack cleared, a bad blob leaving nothing (no root needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostjob.images.content import ContentStore
from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound
from hostjob.images.layers import LayerCache, LayerRecord
from hostjob.images.root import StoreRoot
from tests.fixtures.images import digest_of
from tests.fixtures.tars import entry, gz, make_tar

TAR = make_tar([entry("bin", "dir"), entry("bin/tool", data=b"#!/bin/sh\n", mode=0o755)])


@pytest.fixture
def cache(tmp_path: Path) -> LayerCache:
    root = StoreRoot(str(tmp_path / "store"))
    return LayerCache(root, ContentStore(root))


def test_unpacked_once_with_its_record(cache: LayerCache) -> None:
    blob = cache.content.write(gz(TAR))
    diff_id = digest_of(TAR)
    assert not cache.has(diff_id)
    counts: list[int] = []
    assert cache.ensure(diff_id, blob, len(gz(TAR)), on_bytes=counts.append)
    assert counts and counts[-1] == len(gz(TAR))
    assert Path(cache.dir(diff_id), "bin/tool").read_bytes() == b"#!/bin/sh\n"
    assert cache.dir(diff_id) == str(Path(cache.path(diff_id), "diff"))
    assert not cache.ensure(diff_id, blob), "the second ensure finds it done"
    record = cache.record(diff_id)
    assert isinstance(record, LayerRecord)
    assert (record.diff_id, record.digest, record.compression) == (diff_id, blob, "gzip")
    assert record.size == len(TAR) and record.compressed_size == len(gz(TAR))
    assert record.entries == 2 and record.unpacked.endswith("Z")
    on_disk = json.loads(Path(cache.path(diff_id), "layer.json").read_text())
    assert on_disk == record.to_json()  # the same keys as before the record was typed
    assert sorted(on_disk) == [
        "compressed_size", "compression", "diff_id", "digest", "entries", "size", "unpacked",
    ]  # fmt: skip


def test_leftovers_of_a_killed_unpack_are_cleared(cache: LayerCache) -> None:
    blob = cache.content.write(TAR)
    diff_id = digest_of(TAR)
    dest = Path(cache.path(diff_id))
    dest.mkdir(parents=True)
    (dest / "half").write_text("no layer.json: not a layer")
    temp = dest.parent / f".tmp-{diff_id[7:]}-dead"
    temp.mkdir()
    (temp / "diff").mkdir()
    other = dest.parent / ".tmp-another-layer"
    other.mkdir()
    assert cache.ensure(diff_id, blob)
    assert not (dest / "half").exists() and not temp.exists()
    assert other.exists(), "another layer's temp dir is not this unpack's to remove"


def test_a_bad_blob_leaves_nothing(cache: LayerCache) -> None:
    blob = cache.content.write(gz(TAR))
    wrong = digest_of(b"another tar")
    with pytest.raises(DigestMismatch, match="diffID"):
        cache.ensure(wrong, blob)
    folder = Path(cache.path(wrong)).parent
    assert list(folder.iterdir()) == [] and not cache.has(wrong)
    with pytest.raises(ImageNotFound, match=r"layer blob .* is not in the store"):
        cache.ensure(digest_of(TAR), digest_of(b"never stored"))
    with pytest.raises(ImageNotFound, match="not unpacked"):
        cache.record(digest_of(TAR))


def test_a_damaged_record_is_an_image_error(cache: LayerCache) -> None:
    blob = cache.content.write(TAR)
    diff_id = digest_of(TAR)
    cache.ensure(diff_id, blob)
    path = Path(cache.path(diff_id), "layer.json")
    path.write_text("{")
    with pytest.raises(ImageError, match=r"layer\.json is corrupt"):
        cache.record(diff_id)
    path.write_text(json.dumps({"diff_id": diff_id, "entries": "two"}))
    with pytest.raises(ImageError, match="corrupt: bad or missing"):
        cache.record(diff_id)
