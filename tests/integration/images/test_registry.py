"""Pulls from real registries: docker-registry (plain, TLS, htpasswd, bearer tokens)
and a fake one for redirects, cut connections and corrupt blobs."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound, RegistryError
from hostjob.images.options import RegistryOptions
from hostjob.images.push import push
from tests.fixtures.images import write_layout
from tests.fixtures.registry import (
    BlobStore,
    DockerRegistry,
    FakeRegistry,
    TokenServer,
    skopeo_copy,
)
from tests.fixtures.tars import entry, make_tar

USERS = {"alice": "s3cret"}

PLAIN_HTTP = RegistryOptions(plain_http=True)


def layers(n: int = 2, size: int = 200_000) -> list[bytes]:
    return [
        make_tar(
            [entry(f"layer{i}/data", data=os.urandom(size)), entry(f"layer{i}/n", data=b"%d" % i)]
        )
        for i in range(n)
    ]


@pytest.fixture
def layout(tmp_path):
    path = str(tmp_path / "layout")
    write_layout(path, layers(), tag="v1")
    return path


def check_pulled(store, name, expected_layers=2):
    image = store.resolve(name)
    assert len(image.layer_dirs) == expected_layers
    for i, d in enumerate(image.layer_dirs):
        assert Path(d, f"layer{i}/n").read_text() == str(i)
    return image


def test_plain_http_registry(store, tmp_path, layout):
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        skopeo_copy(
            f"oci:{layout}:v1", f"docker://{reg.host}/test/img:v1", "--dest-tls-verify=false"
        )
        events = []
        info = store.pull(f"{reg.host}/test/img:v1", registry=PLAIN_HTTP, progress=events.append)
        assert info.name == f"{reg.host}/test/img:v1"
        assert info.layers_unpacked == 2 and info.blobs_fetched == 3
        check_pulled(store, f"{reg.host}/test/img:v1")
        kinds = {e.kind for e in events}
        assert {"resolving", "resolved", "downloading", "unpacking", "done"} <= kinds
        # By digest, and again (all cached).
        by_digest = store.pull(f"docker://{reg.host}/test/img@{info.digest}", registry=PLAIN_HTTP)
        assert by_digest.layers_unpacked == 0 and by_digest.blobs_fetched == 0
        with pytest.raises(ImageNotFound):
            store.pull(f"{reg.host}/test/img:nope", registry=PLAIN_HTTP)
        with pytest.raises(ImageNotFound):
            store.pull(f"{reg.host}/test/other:v1", registry=PLAIN_HTTP)


def test_multi_arch_index_picks_the_platform(store, tmp_path):
    path = str(tmp_path / "multi")
    write_layout(
        path, layers(1, 1000), tag="v1", platforms=["linux/arm64/v8", "linux/amd64", "linux/arm/v7"]
    )
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        skopeo_copy(
            f"oci:{path}:v1",
            f"docker://{reg.host}/test/multi:v1",
            "--dest-tls-verify=false",
            "--all",
        )
        host = store.pull(f"{reg.host}/test/multi:v1", registry=PLAIN_HTTP)
        arm = store.pull(
            f"{reg.host}/test/multi:v1",
            registry=PLAIN_HTTP,
            platform="linux/arm64",
            name="test/multi:arm",
        )
        arm7 = store.pull(
            f"{reg.host}/test/multi:v1",
            registry=PLAIN_HTTP,
            platform="linux/arm/v7",
            name="test/multi:arm7",
        )
        assert arm.platform == "linux/arm64"
        assert arm7.platform == "linux/arm"
        assert host.platform == "linux/amd64" or os.uname().machine != "x86_64"
        assert len({host.digest, arm.digest, arm7.digest}) == 3
        assert store.inspect("test/multi:arm").index is not None
        with pytest.raises(ImageError, match="no image for platform linux/s390x"):
            store.pull(f"{reg.host}/test/multi:v1", registry=PLAIN_HTTP, platform="linux/s390x")


def test_tls_registry_with_self_signed_cert(store, tmp_path, layout):
    with DockerRegistry(str(tmp_path / "reg"), tls=True) as reg:
        skopeo_copy(
            f"oci:{layout}:v1", f"docker://{reg.host}/test/tls:v1", "--dest-tls-verify=false"
        )
        with pytest.raises(RegistryError, match=r"CERTIFICATE|certificate"):
            store.pull(f"{reg.host}/test/tls:v1")
        store.pull(f"{reg.host}/test/tls:v1", registry=RegistryOptions(tls_verify=False))
        check_pulled(store, f"{reg.host}/test/tls:v1")


def test_basic_auth_with_htpasswd(store, tmp_path, layout, monkeypatch):
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    with DockerRegistry(str(tmp_path / "reg"), htpasswd=USERS) as reg:
        skopeo_copy(
            f"oci:{layout}:v1",
            f"docker://{reg.host}/test/basic:v1",
            "--dest-tls-verify=false",
            "--dest-creds=alice:s3cret",
        )
        with pytest.raises(RegistryError, match="authentication required"):
            store.pull(f"{reg.host}/test/basic:v1", registry=PLAIN_HTTP)
        with pytest.raises(RegistryError, match="401"):
            store.pull(
                f"{reg.host}/test/basic:v1",
                registry=RegistryOptions(plain_http=True, credentials=("alice", "wrong")),
            )
        store.pull(
            f"{reg.host}/test/basic:v1",
            registry=RegistryOptions(plain_http=True, credentials=("alice", "s3cret")),
        )
        check_pulled(store, f"{reg.host}/test/basic:v1")
        # Credentials from a docker config.json, both entry forms, key with scheme.
        store.remove(f"{reg.host}/test/basic:v1")
        config = tmp_path / "docker" / "config.json"
        config.parent.mkdir()
        auth = base64.b64encode(b"alice:s3cret").decode()
        config.write_text(json.dumps({"auths": {f"http://{reg.host}/v2/": {"auth": auth}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(config.parent))
        store.pull(f"{reg.host}/test/basic:v1", registry=PLAIN_HTTP)
        config.write_text(
            json.dumps({"auths": {reg.host: {"username": "alice", "password": "s3cret"}}})
        )
        store.pull(f"{reg.host}/test/basic:v1", registry=PLAIN_HTTP, name="test/again")
        check_pulled(store, "test/again")


@pytest.mark.parametrize("field", ["token", "access_token"])
def test_bearer_token_auth(store, tmp_path, layout, field):
    with (
        TokenServer(str(tmp_path), USERS, field=field) as tokens,
        DockerRegistry(str(tmp_path / "reg"), token=tokens.registry_auth()) as reg,
    ):
        digest = push(
            f"oci:{layout}:v1",
            f"{reg.host}/test/tok:v1",
            registry=RegistryOptions(plain_http=True, credentials=("alice", "s3cret")),
        ).digest
        pushed = [r for r in tokens.requests if r["user"] == "alice" and "push" in str(r["query"])]
        assert pushed and set(pushed[0]["query"]["scope"][0].split(":")[2].split(",")) == {
            "pull",
            "push",
        }
        tokens.requests.clear()
        with pytest.raises(RegistryError, match=r"401|unauthorized|UNAUTHORIZED"):
            store.pull(f"{reg.host}/test/tok:v1", registry=PLAIN_HTTP)
        with pytest.raises(RegistryError, match="refused the credentials"):
            store.pull(
                f"{reg.host}/test/tok:v1",
                registry=RegistryOptions(plain_http=True, credentials=("alice", "nope")),
            )
        tokens.requests.clear()
        info = store.pull(
            f"{reg.host}/test/tok:v1",
            registry=RegistryOptions(plain_http=True, credentials=("alice", "s3cret")),
        )
        assert info.digest == digest
        check_pulled(store, f"{reg.host}/test/tok:v1")
        granted = [r for r in tokens.requests if r["user"] == "alice"]
        assert len(granted) == 1, "one token per scope, cached for every request of the pull"
        assert granted[0]["query"]["scope"] == ["repository:test/tok:pull"]
        assert granted[0]["query"]["service"] == ["hostjob-test-registry"]


def test_redirect_to_blob_storage_does_not_leak_authorization(store, tmp_path, layout):
    with BlobStore(layout) as blobs, FakeRegistry(layout, users=USERS, blob_store=blobs) as reg:
        store.pull(
            f"{reg.host}/test/redir:v1",
            registry=RegistryOptions(plain_http=True, credentials=("alice", "s3cret")),
        )
        check_pulled(store, f"{reg.host}/test/redir:v1")
        assert len(blobs.requests) == 3
        assert all("authorization" not in r for r in blobs.requests), "auth leaked to another host"
        assert any("authorization" in r for r in reg.requests), "the registry itself got auth"


@pytest.mark.parametrize("ignore_range", [False, True])
def test_interrupted_download_resumes(store, tmp_path, layout, ignore_range):
    with (
        BlobStore(layout, cut_first=2, cut_at=50_000, ignore_range=ignore_range) as blobs,
        FakeRegistry(layout, blob_store=blobs) as reg,
    ):
        store.pull(f"{reg.host}/test/resume:v1", registry=PLAIN_HTTP)
        check_pulled(store, f"{reg.host}/test/resume:v1")
        ranged = [r for r in blobs.requests if "range" in r]
        assert len(ranged) == 2
        assert all(r["range"] == "bytes=50000-" for r in ranged)


def test_corrupt_blob_is_refused_and_not_stored(store, tmp_path, layout):
    manifest_digest = json.loads(Path(layout, "index.json").read_bytes())["manifests"][0]["digest"]
    manifest = json.loads(Path(layout, "blobs", "sha256", manifest_digest[7:]).read_bytes())
    bad = manifest["layers"][1]["digest"]
    with FakeRegistry(layout, corrupt=bad) as reg, pytest.raises(DigestMismatch):
        store.pull(f"{reg.host}/test/bad:v1", registry=PLAIN_HTTP)
    assert not store.content.has(bad)
    assert store.images() == []
    blob_dir = os.path.join(store.root, "blobs", "sha256")
    assert not [n for n in os.listdir(blob_dir) if n.startswith(".")]


def test_transient_errors_are_retried(store, tmp_path, layout):
    with FakeRegistry(layout, unavailable_first=3) as reg:
        store.pull(f"{reg.host}/test/busy:v1", registry=PLAIN_HTTP)
        check_pulled(store, f"{reg.host}/test/busy:v1")
    with (
        FakeRegistry(layout, unavailable_first=1000) as reg,
        pytest.raises(RegistryError, match="503"),
    ):
        store.pull(f"{reg.host}/test/down:v1", registry=PLAIN_HTTP)


def test_the_environments_proxy_carries_the_requests(store, monkeypatch):
    """HTTP_PROXY is honoured (the stall-watched transport makes its own pool, as httpx
    would), and NO_PROXY bypasses it."""
    from tests.fixtures.hostile_registry import Flood

    with Flood(404, 10) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        with pytest.raises(ImageNotFound, match=r"^registry.invalid:5000/test/img:v1: HTTP 404"):
            store.pull("registry.invalid:5000/test/img:v1", registry=PLAIN_HTTP)
        assert proxy.requests == ["http://registry.invalid:5000/v2/test/img/manifests/v1"]
        monkeypatch.setenv("NO_PROXY", "registry.invalid")
        with pytest.raises(RegistryError):  # asked directly: the name does not resolve
            store.pull("registry.invalid:5000/test/img:v1", registry=PLAIN_HTTP)
        assert len(proxy.requests) == 1
