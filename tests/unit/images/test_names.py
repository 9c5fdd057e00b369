"""The name index: typed records in ``images.json``, tag/untag under its lock, and every
way ``lookup`` finds an image (no root needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images.content import ContentStore
from hostjob.images.errors import ImageError, ImageNotFound
from hostjob.images.names import NameIndex, NameRecord
from hostjob.images.root import StoreRoot

M1 = "sha256:" + "1" * 64
M2 = "sha256:" + "2" * 64
C1 = "sha256:abcd" + "1" * 60
C2 = "sha256:abcd" + "2" * 60


@pytest.fixture
def names(tmp_path: Path) -> NameIndex:
    root = StoreRoot(str(tmp_path / "store"))
    return NameIndex(root, ContentStore(root))


def test_tag_untag_and_the_file(names: NameIndex) -> None:
    assert names.records() == {}
    names.tag(NameRecord("docker.io/library/a:1", M1, config=C1, tagged="2026-01-01T00:00:00Z"))
    names.tag(NameRecord("docker.io/library/a:2", M1, config=C1, index=M2, source="oci:/x:2"))
    records = names.records()
    assert sorted(records) == ["docker.io/library/a:1", "docker.io/library/a:2"]
    second = records["docker.io/library/a:2"]
    assert (second.name, second.manifest, second.config) == ("docker.io/library/a:2", M1, C1)
    assert (second.index, second.source, second.tagged) == (M2, "oci:/x:2", None)
    on_disk = json.loads(Path(names.path).read_text())
    assert on_disk["version"] == 1
    assert on_disk["images"]["docker.io/library/a:1"] == {
        "config": C1, "index": None, "manifest": M1, "source": None,
        "tagged": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    names.tag(NameRecord("docker.io/library/a:1", M2))  # a tag moves
    assert names.records()["docker.io/library/a:1"].manifest == M2
    names.untag(["docker.io/library/a:1", "not/there:1"])
    assert sorted(names.records()) == ["docker.io/library/a:2"]


def test_corrupt_files_are_named(names: NameIndex) -> None:
    names.root.ensure()
    path = Path(names.path)
    for text, match in (
        ("{broken", r"images\.json is corrupt"),
        ('{"version": 1}', "no 'images' object"),
        ('{"images": {"x": {"config": "y"}}}', "'x' has no manifest digest"),
    ):
        path.write_text(text)
        with pytest.raises(ImageError, match=match):
            names.records()


def test_lookup_forms(names: NameIndex) -> None:
    names.tag(NameRecord("docker.io/library/busybox:latest", M1, config=C1))
    names.tag(NameRecord("example.com/tool:2", M2, config=C2))
    assert names.lookup("docker.io/library/busybox:latest") == (
        ["docker.io/library/busybox:latest"],
        M1,
    )
    assert names.lookup("busybox") == (["docker.io/library/busybox:latest"], M1)
    assert names.lookup(f"busybox@{M1}") == (["docker.io/library/busybox:latest"], M1)
    assert names.lookup(M2) == (["example.com/tool:2"], M2)
    assert names.lookup("2222") == (["example.com/tool:2"], M2), "a manifest digest prefix"
    assert names.lookup(C1[7:19]) == (["docker.io/library/busybox:latest"], M1), "an ID prefix"
    with pytest.raises(InvalidArgument, match="image ID prefix 'abcd' is ambiguous"):
        names.lookup("abcd")
    assert names.lookup("sha256:abcd2") == (["example.com/tool:2"], M2)
    with pytest.raises(ImageNotFound):
        names.lookup("abc")  # under 4 digits: a name, never a prefix
    with pytest.raises(ImageNotFound, match="no such image: nothing"):
        names.lookup("nothing")


def test_a_digest_reference_with_no_name_needs_the_blob(names: NameIndex) -> None:
    digest = names.content.write(b'{"schemaVersion":2}')
    assert names.lookup(f"example.com/any@{digest}") == ([], digest)
    with pytest.raises(ImageNotFound):
        names.lookup(f"example.com/any@{M1}")
