"""Pulling from local sources without root: the result record, the progress events in
order, default names, an index, and what a failed pull leaves (no name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostjob.images import progress
from hostjob.images.errors import DigestMismatch, SignatureRejected
from hostjob.images.options import TrustOptions
from hostjob.images.pull import PullResult, default_name
from hostjob.images.reference import parse
from hostjob.images.store import Store
from tests.fixtures.images import digest_of, write_layout
from tests.fixtures.signing import (
    SIGSTORE,
    SigstoreKey,
    attach_to_layout,
    only,
    payload,
    sigstore_signed,
    write_policy,
)
from tests.fixtures.tars import entry, make_tar

LAYERS = [make_tar([entry(f"l{i}", data=b"%d" % i)]) for i in range(4)]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "store"))


def test_result_and_events(store: Store, tmp_path: Path) -> None:
    top = write_layout(str(tmp_path / "img"), LAYERS, tag="v2")
    seen: list[progress.Event] = []
    result = store.pull(f"oci:{tmp_path / 'img'}:v2", progress=seen.append)
    assert isinstance(result, PullResult)
    assert (result.name, result.digest, result.layers) == ("localhost/img:v2", top, 4)
    assert (result.blobs_fetched, result.layers_unpacked) == (5, 4)  # the config and 4 layers
    assert result.platform == "linux/amd64" and result.size > 0 and result.id.startswith("sha256:")
    kinds = [e.kind for e in seen]
    assert kinds[:2] == ["resolving", "resolved"] and seen[-1].kind == "done"
    assert seen[-1].item == "localhost/img:v2" and seen[1].item == top
    for layer in store.resolve("localhost/img:v2").manifest.layers or []:
        mine = [e.kind for e in seen if e.item == layer.digest]
        assert mine[0] == "downloading" and mine[-1] == "done", mine
        assert {"verifying", "unpacking"} <= set(mine)
    assert len([e for e in seen if e.kind == "done"]) == 5
    again: list[progress.Event] = []
    cached = store.pull(f"oci:{tmp_path / 'img'}:v2", progress=again.append, name="x/y:z")
    assert (cached.blobs_fetched, cached.layers_unpacked, cached.name) == (0, 0, "docker.io/x/y:z")
    assert [e.kind for e in again].count("cached") == 4
    assert {digest_of(t) for t in LAYERS} == set(store.resolve("x/y:z").diff_ids)


def test_default_names(tmp_path: Path) -> None:
    class Hint:
        name_hint: str | None = None

    assert default_name(parse("example.com/a/b:1"), Hint()) == "example.com/a/b:1"  # type: ignore[arg-type]
    assert default_name(parse("oci:/x/My_Tool.v2:rc1"), Hint()) == "localhost/my-tool:rc1"  # type: ignore[arg-type]
    assert default_name(parse("oci-archive:/x/t.tar"), Hint()) == "localhost/t:latest"  # type: ignore[arg-type]
    hinted = Hint()
    hinted.name_hint = "example.com/named:3"
    assert default_name(parse("docker-archive:/x/t.tar"), hinted) == "example.com/named:3"  # type: ignore[arg-type]


def test_a_failed_pull_names_nothing(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "img"
    write_layout(str(path), LAYERS[:1])
    blob = next(p for p in (path / "blobs" / "sha256").iterdir() if p.stat().st_size > 100)
    data = bytearray(blob.read_bytes())
    data[-5] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch):
        store.pull(f"oci:{path}")
    assert store.images() == []


def test_a_refused_image_leaves_nothing_in_the_store(store: Store, tmp_path: Path) -> None:
    layout = tmp_path / "img"
    write_layout(str(layout), LAYERS, tag="v1")
    policy = write_policy(tmp_path / "policy.json", {"default": [{"type": "reject"}]})
    trust = TrustOptions(signature_policy=str(policy))
    with pytest.raises(SignatureRejected, match=r"rejected by the signature policy .* \(default\)"):
        store.pull(f"oci:{layout}:v1", trust=trust)
    assert store.images() == []
    blobs = Path(store.root, "blobs")
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))
    assert not any(Path(store.root).rglob("layer.json"))


def test_the_verdict_is_kept_with_the_name(store: Store, tmp_path: Path) -> None:
    """A layout signed as cosign save writes it: its one image and the signatures."""
    layout = tmp_path / "img"
    digest = write_layout(str(layout), LAYERS[:1], tag=None)
    key = SigstoreKey(tmp_path)
    data = payload(digest, "reg.example.com/tools/app:v1", SIGSTORE)
    attach_to_layout(layout, [(data, key.sign(data))])
    rule = {"type": "exactReference", "dockerReference": "reg.example.com/tools/app:v1"}
    policy = write_policy(
        tmp_path / "policy.json",
        only("oci", str(tmp_path), sigstore_signed(key, signedIdentity=rule)),
    )
    result = store.pull(f"oci:{layout}", trust=TrustOptions(signature_policy=str(policy)))
    assert result.verdict is not None and result.verdict.by[0]["requirement"] == "sigstoreSigned"
    (row,) = store.images()
    assert row.verified == {
        "policy": str(policy),
        "section": f"transports.oci[{tmp_path}]",
        "by": [{"requirement": "sigstoreSigned", "key": result.verdict.by[0]["key"]}],
    }
    assert store.inspect(row.name).verified == row.verified
    other = SigstoreKey(tmp_path, "other")
    forged = write_policy(
        tmp_path / "forged.json",
        only("oci", str(tmp_path), sigstore_signed(other, signedIdentity=rule)),
    )
    with pytest.raises(SignatureRejected, match="verification failed"):
        store.pull(f"oci:{layout}", name="x/y:z", trust=TrustOptions(signature_policy=str(forged)))
    assert [r.name for r in store.images()] == [row.name]
