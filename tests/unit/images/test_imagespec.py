"""image-spec wire models: decoding real-shaped documents, errors with JSON paths."""

from __future__ import annotations

import json

import pytest

from hostjob.images import imagespec
from hostjob.images.errors import ImageError

D = "sha256:" + "ab" * 32

MANIFEST = {
    "schemaVersion": 2,
    "mediaType": imagespec.DOCKER_MANIFEST,
    "config": {"mediaType": imagespec.DOCKER_CONFIG, "size": 1469, "digest": D},
    "layers": [{"mediaType": imagespec.DOCKER_LAYER_GZIP, "size": 2_000_000, "digest": D}],
}

CONFIG = {
    "architecture": "arm64",
    "variant": "v8",
    "os": "linux",
    "created": "2024-01-01T00:00:00Z",
    "config": {
        "User": "1000:1000",
        "Env": ["PATH=/usr/bin", "A=b=c"],
        "Entrypoint": ["/bin/tool"],
        "Cmd": ["--help"],
        "WorkingDir": "/work",
        "Labels": {"org.opencontainers.image.title": "tool"},
        "ExposedPorts": {"8080/tcp": {}},
        "Volumes": {"/data": {}},
        "StopSignal": "SIGINT",
        "ArgsEscaped": True,
    },
    "rootfs": {"type": "layers", "diff_ids": [D]},
    "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "ADD x", "empty_layer": False}],
}


def test_manifest_and_config_decode():
    m = imagespec.decode_blob(imagespec.Manifest, json.dumps(MANIFEST).encode(), "manifest")
    assert m.schema_version == 2 and m.config.digest == D and m.layers[0].size == 2_000_000
    c = imagespec.decode_blob(imagespec.ImageConfig, json.dumps(CONFIG).encode(), "config")
    assert c.architecture == "arm64" and c.variant == "v8"
    cc = c.config
    assert cc.user == "1000:1000" and cc.entrypoint == ["/bin/tool"] and cc.cmd == ["--help"]
    assert cc.env == ["PATH=/usr/bin", "A=b=c"] and cc.working_dir == "/work"
    assert cc.exposed_ports == {"8080/tcp": {}} and cc.volumes == {"/data": {}}
    assert cc.stop_signal == "SIGINT" and cc.labels["org.opencontainers.image.title"] == "tool"
    assert c.rootfs.diff_ids == [D] and c.history[0].created_by == "ADD x"
    assert c.to_json() == CONFIG
    assert m.to_json() == MANIFEST


def test_index_with_platforms():
    index = {
        "schemaVersion": 2,
        "mediaType": imagespec.OCI_INDEX,
        "manifests": [
            {
                "mediaType": imagespec.OCI_MANIFEST,
                "digest": D,
                "size": 10,
                "platform": {"architecture": "arm", "os": "linux", "variant": "v7"},
            }
        ],
    }
    i = imagespec.decode_blob(imagespec.Index, json.dumps(index).encode(), "index")
    assert i.manifests[0].platform.variant == "v7"
    assert imagespec.sniff_media_type(json.dumps({"manifests": []}).encode()) == imagespec.OCI_INDEX
    assert imagespec.sniff_media_type(json.dumps(MANIFEST).encode()) == imagespec.DOCKER_MANIFEST


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"config": {"digest": "sha256:xyz"}}, r"config\.digest: 'sha256:xyz' is not"),
        ({"config": {"digest": "md5:" + "a" * 32}}, "not a sha256/sha512 digest"),
        ({"config": {"size": -1}}, r"config\.size: size -1 is negative"),
        ({"layers": {}}, "layers: expected an array"),
        ({"layers": [{"size": "1"}]}, r"layers\[0\]\.size: expected an integer"),
    ],
)
def test_malformed_manifest(doc, message):
    with pytest.raises(ImageError, match=message) as info:
        imagespec.decode_blob(imagespec.Manifest, json.dumps(doc).encode(), "manifest X")
    assert str(info.value).startswith("malformed manifest X: ")


def test_not_json():
    with pytest.raises(ImageError, match="config Y is not valid JSON"):
        imagespec.decode_blob(imagespec.ImageConfig, b"{nope", "config Y")
    with pytest.raises(ImageError, match="expected an object"):
        imagespec.decode_blob(imagespec.ImageConfig, b"[]", "config Y")


def test_docker_archive_manifest():
    entries = imagespec.decode_docker_archive_manifest(
        [{"Config": "c.json", "RepoTags": ["busybox:latest"], "Layers": ["a/layer.tar"]}]
    )
    assert entries[0].repo_tags == ["busybox:latest"] and entries[0].layers == ["a/layer.tar"]
    with pytest.raises(ImageError, match="malformed docker archive"):
        imagespec.decode_docker_archive_manifest({"Config": 1})


def test_is_digest():
    assert imagespec.is_digest(D)
    assert imagespec.is_digest("sha512:" + "0" * 128)
    assert not imagespec.is_digest("sha256:" + "A" * 64)
    assert not imagespec.is_digest("sha256:" + "a" * 63)
    assert not imagespec.is_digest("sha256:../../etc/passwd")
