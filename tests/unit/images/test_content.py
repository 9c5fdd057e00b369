"""Content: the store's root, blobs by digest, verified ingest, and the one hash-and-count
stream (``Digester``), without root."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from hostjob.images.content import ContentStore, Digester, hexdigest, split_digest
from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound
from hostjob.images.root import StoreRoot
from tests.fixtures.images import digest_of


@pytest.fixture
def content(tmp_path: Path) -> ContentStore:
    return ContentStore(StoreRoot(str(tmp_path / "store")))


def temps(content: ContentStore) -> list[str]:
    folder = Path(content.root.join("blobs", "sha256"))
    return [p.name for p in folder.iterdir() if p.name.startswith(".")] if folder.exists() else []


# --- Digester ----------------------------------------------------------------------------


def test_digester_reads_and_writes_the_same_digest() -> None:
    data = os.urandom(3000)
    seen: list[int] = []
    reader = Digester(io.BytesIO(data), on_bytes=seen.append)
    assert reader.read(1000) == data[:1000]
    reader.drain()
    assert reader.count == 3000 and reader.digest() == digest_of(data) and seen[-1] == 3000
    sink = io.BytesIO()
    writer = Digester(sink)
    assert writer.write(data[:10]) == 10
    writer.write(data[10:])
    assert sink.getvalue() == data and writer.digest() == reader.digest()
    assert writer.offset == 3000
    buffer = bytearray(5)
    assert Digester(io.BytesIO(b"abc")).readinto(buffer) == 3 and buffer[:3] == b"abc"


def test_digester_refuses_more_than_its_limit() -> None:
    with pytest.raises(DigestMismatch, match="layer blob is larger than its declared size 4"):
        Digester(io.BytesIO(b"12345"), limit=4, what="layer blob").read()
    sink = io.BytesIO()
    writer = Digester(sink, limit=4)
    writer.write(b"1234")
    with pytest.raises(DigestMismatch, match="blob is larger"):
        writer.write(b"5")
    assert sink.getvalue() == b"1234", "the byte past the limit is never written"


def test_digester_reset_starts_a_file_over() -> None:
    sink = io.BytesIO()
    writer = Digester(sink, "sha512")
    writer.write(b"garbage")
    writer.reset()
    writer.write(b"data")
    assert sink.getvalue() == b"data" and writer.count == 4
    assert writer.digest() == "sha512:" + hexdigest("sha512", b"data")


def test_split_digest_and_builtin_hashes() -> None:
    assert split_digest("sha256:" + "a" * 64) == ("sha256", "a" * 64)
    for bad in ("sha256:abc", "md5:" + "0" * 32, "../../x"):
        with pytest.raises(ImageError, match="invalid digest"):
            split_digest(bad)
    assert "sha256:" + hexdigest("sha256", b"x") == digest_of(b"x")


# --- the store's root ---------------------------------------------------------------------


def test_root_is_made_0700_and_closed_if_open(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        root = StoreRoot(str(tmp_path / "a" / "store"))
        root.ensure()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(root.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o755, "parents never 0777"
    for sub in ("blobs/sha256", "layers/sha256", "containers", "locks"):
        assert stat.S_IMODE(os.stat(root.join(sub)).st_mode) == 0o700
    os.chmod(root.path, 0o755)  # as an older hostjob made it
    StoreRoot(root.path).check()
    assert stat.S_IMODE(os.stat(root.path).st_mode) == 0o700
    StoreRoot(str(tmp_path / "missing")).check()  # nothing stored yet: fine
    assert not (tmp_path / "missing").exists()


# --- blobs ----------------------------------------------------------------------------------


def test_write_read_and_list(content: ContentStore) -> None:
    digest = content.write(b"hello")
    assert digest == digest_of(b"hello") and content.has(digest)
    assert content.read(digest) == b"hello"
    assert content.write(b"hello", digest) == digest  # once is enough
    assert Path(content.path(digest)).stat().st_mode & 0o777 == 0o644
    with content.open(digest) as f:
        assert f.read() == b"hello"
    assert list(content.digests()) == [digest]
    with pytest.raises(DigestMismatch, match="expected"):
        content.write(b"other", digest_of(b"hello"))
    with pytest.raises(ImageNotFound, match="not in the store"):
        content.read(digest_of(b"absent"))


def test_read_verifies_again(content: ContentStore) -> None:
    digest = content.write(b'{"schemaVersion":2}')
    Path(content.path(digest)).write_bytes(b'{"schemaVersion":3}')
    with pytest.raises(DigestMismatch, match="corrupt"):
        content.read(digest)
    big = content.write(b"x" * 100)
    with pytest.raises(ImageError, match="too large for metadata"):
        content.read(big, limit=10)


def test_ingest_verifies_before_the_rename(content: ContentStore) -> None:
    data = os.urandom(5000)
    digest = digest_of(data)
    for size, fill, match in (
        (len(data), lambda w: w.write(data[:-1]), "its descriptor says"),
        (len(data) - 1, lambda w: w.write(data), "larger than its declared size"),
        (len(data), lambda w: w.write(data[::-1]), "blob digest is"),
    ):
        with pytest.raises(DigestMismatch, match=match):
            content.ingest(digest, size, fill)
        assert not content.has(digest) and temps(content) == []
    counts: list[int] = []
    assert content.ingest(digest, len(data), lambda w: w.write(data), on_bytes=counts.append)
    assert counts == [len(data)] and content.read(digest) == data
    assert not content.ingest(digest, len(data), lambda w: pytest.fail("fetched twice"))


def test_ingest_clears_what_a_killed_writer_left(content: ContentStore) -> None:
    digest = digest_of(b"blob")
    folder = Path(content.root.join("blobs", "sha256"))
    folder.mkdir(parents=True)
    (folder / f".{digest[7:]}.tmp-dead").write_bytes(b"bl")
    other = folder / ".otherblob.tmp-alive"
    other.write_bytes(b"x")
    content.ingest(digest, 4, lambda w: w.write(b"blob"))
    assert temps(content) == [other.name], "only this blob's own leftovers go"


def test_manifest_and_config_are_decoded(content: ContentStore) -> None:
    digest = content.write(b'{"schemaVersion":2,"layers":[]}')
    assert content.manifest(digest).layers == []
    bad = content.write(b"[not json")
    with pytest.raises(ImageError, match=f"config {bad} is not valid JSON"):
        content.config(bad)
