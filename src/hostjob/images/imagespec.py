"""The OCI image-spec (and Docker image v2 schema 2) wire formats.

Descriptors, manifests, indexes (Docker "manifest lists"), the image config,
the OCI image layout's ``index.json``/``oci-layout`` and the ``manifest.json``
of a ``docker save`` archive. Field names are the specs' own; attributes are
their snake_case twins. ``decode_blob`` turns raw JSON bytes into a model and
reports malformed content as an ``ImageError`` naming the blob.
"""

from __future__ import annotations

from hostjob.errors import ConfigError
from hostjob.images.errors import ImageError
from hostjob.spec._decode import (
    Model,
    boolean,
    int64,
    integer,
    json_object,
    list_of,
    map_of,
    model,
    string,
    string_list,
    string_map,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    M = TypeVar("M", bound=Model)


# --- media types ----------------------------------------------------------------------

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
OCI_LAYER_NONDIST = "application/vnd.oci.image.layer.nondistributable.v1.tar"
OCI_LAYER_NONDIST_GZIP = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
OCI_LAYER_NONDIST_ZSTD = "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_ZSTD = "application/vnd.docker.image.rootfs.diff.tar.zstd"
DOCKER_LAYER_FOREIGN = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
CONFIG_TYPES = (OCI_CONFIG, DOCKER_CONFIG)
LAYER_TYPES = (
    OCI_LAYER,
    OCI_LAYER_GZIP,
    OCI_LAYER_ZSTD,
    DOCKER_LAYER,
    DOCKER_LAYER_GZIP,
    DOCKER_LAYER_ZSTD,
)
# Layers that must be fetched from somewhere else than the registry (Windows base
# layers): hostjob refuses them, as a Linux runtime has no use for them.
FOREIGN_LAYER_TYPES = (
    DOCKER_LAYER_FOREIGN,
    OCI_LAYER_NONDIST,
    OCI_LAYER_NONDIST_GZIP,
    OCI_LAYER_NONDIST_ZSTD,
)

# Annotations of the OCI image layout.
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"
ANNOTATION_CREATED = "org.opencontainers.image.created"

IMAGE_LAYOUT_VERSION = "1.0.0"

_HEX = frozenset("0123456789abcdef")
DIGEST_ALGORITHMS = {"sha256": 64, "sha512": 128}


def is_digest(value: str) -> bool:
    """Whether ``value`` is ``sha256:<64 hex>`` or ``sha512:<128 hex>`` (lowercase)."""
    algorithm, sep, encoded = value.partition(":")
    length = DIGEST_ALGORITHMS.get(algorithm)
    return bool(sep) and length == len(encoded) and _HEX.issuperset(encoded)


def decode_digest(value: object, path: str) -> str:
    """A decoder for a content digest this runtime can verify."""
    text = string(value, path)
    if not is_digest(text):
        raise ConfigError(f"{text!r} is not a sha256/sha512 digest", path)
    return text


def decode_size(value: object, path: str) -> int:
    result = integer(value, path)
    if result < 0:
        raise ConfigError(f"size {result} is negative", path)
    return result


def empty_object_map(value: object, path: str) -> dict[str, dict[str, Any]]:
    """``ExposedPorts`` and ``Volumes``: a map whose values are empty objects."""
    return map_of(json_object)(value, path)  # type: ignore[no-any-return]


# --- descriptors, manifests, indexes --------------------------------------------------


class Platform(Model):
    __slots__ = ("architecture", "features", "os", "os_features", "os_version", "variant")
    architecture: str | None
    os: str | None
    os_version: str | None
    os_features: list[str] | None
    variant: str | None
    features: list[str] | None
    FIELDS = (
        ("architecture", "architecture", string),
        ("os", "os", string),
        ("os.version", "os_version", string),
        ("os.features", "os_features", string_list),
        ("variant", "variant", string),
        ("features", "features", string_list),
    )


class Descriptor(Model):
    __slots__ = (
        "annotations",
        "artifact_type",
        "data",
        "digest",
        "media_type",
        "platform",
        "size",
        "urls",
    )
    media_type: str | None
    digest: str | None
    size: int | None
    urls: list[str] | None
    annotations: dict[str, str] | None
    platform: Platform | None
    artifact_type: str | None
    data: str | None
    FIELDS = (
        ("mediaType", "media_type", string),
        ("digest", "digest", decode_digest),
        ("size", "size", decode_size),
        ("urls", "urls", string_list),
        ("annotations", "annotations", string_map),
        ("platform", "platform", model(Platform)),
        ("artifactType", "artifact_type", string),
        ("data", "data", string),
    )


class Manifest(Model):
    """An image manifest: OCI ``image.manifest.v1`` or Docker ``manifest.v2``."""

    __slots__ = (
        "annotations",
        "artifact_type",
        "config",
        "layers",
        "media_type",
        "schema_version",
        "subject",
    )
    schema_version: int | None
    media_type: str | None
    artifact_type: str | None
    config: Descriptor | None
    layers: list[Descriptor] | None
    subject: Descriptor | None
    annotations: dict[str, str] | None
    FIELDS = (
        ("schemaVersion", "schema_version", integer),
        ("mediaType", "media_type", string),
        ("artifactType", "artifact_type", string),
        ("config", "config", model(Descriptor)),
        ("layers", "layers", list_of(model(Descriptor))),
        ("subject", "subject", model(Descriptor)),
        ("annotations", "annotations", string_map),
    )


class Index(Model):
    """An image index: OCI ``image.index.v1``, a Docker manifest list, or ``index.json``."""

    __slots__ = (
        "annotations",
        "artifact_type",
        "manifests",
        "media_type",
        "schema_version",
        "subject",
    )
    schema_version: int | None
    media_type: str | None
    artifact_type: str | None
    manifests: list[Descriptor] | None
    subject: Descriptor | None
    annotations: dict[str, str] | None
    FIELDS = (
        ("schemaVersion", "schema_version", integer),
        ("mediaType", "media_type", string),
        ("artifactType", "artifact_type", string),
        ("manifests", "manifests", list_of(model(Descriptor))),
        ("subject", "subject", model(Descriptor)),
        ("annotations", "annotations", string_map),
    )


# --- the image config -----------------------------------------------------------------


class HealthCheck(Model):
    __slots__ = ("interval", "retries", "start_period", "test", "timeout")
    test: list[str] | None
    interval: int | None
    timeout: int | None
    start_period: int | None
    retries: int | None
    FIELDS = (
        ("Test", "test", string_list),
        ("Interval", "interval", int64),
        ("Timeout", "timeout", int64),
        ("StartPeriod", "start_period", int64),
        ("Retries", "retries", integer),
    )


class ContainerConfig(Model):
    """``config.config``: the defaults for a container made from the image."""

    __slots__ = (
        "args_escaped",
        "cmd",
        "entrypoint",
        "env",
        "exposed_ports",
        "healthcheck",
        "labels",
        "on_build",
        "shell",
        "stop_signal",
        "user",
        "volumes",
        "working_dir",
    )
    user: str | None
    exposed_ports: dict[str, dict[str, Any]] | None
    env: list[str] | None
    entrypoint: list[str] | None
    cmd: list[str] | None
    volumes: dict[str, dict[str, Any]] | None
    working_dir: str | None
    labels: dict[str, str] | None
    stop_signal: str | None
    args_escaped: bool | None
    healthcheck: HealthCheck | None
    on_build: list[str] | None
    shell: list[str] | None
    FIELDS = (
        ("User", "user", string),
        ("ExposedPorts", "exposed_ports", empty_object_map),
        ("Env", "env", string_list),
        ("Entrypoint", "entrypoint", string_list),
        ("Cmd", "cmd", string_list),
        ("Volumes", "volumes", empty_object_map),
        ("WorkingDir", "working_dir", string),
        ("Labels", "labels", string_map),
        ("StopSignal", "stop_signal", string),
        ("ArgsEscaped", "args_escaped", boolean),
        ("Healthcheck", "healthcheck", model(HealthCheck)),
        ("OnBuild", "on_build", string_list),
        ("Shell", "shell", string_list),
    )


class RootFS(Model):
    __slots__ = ("diff_ids", "type")
    type: str | None
    diff_ids: list[str] | None
    FIELDS = (("type", "type", string), ("diff_ids", "diff_ids", list_of(decode_digest)))


class History(Model):
    __slots__ = ("author", "comment", "created", "created_by", "empty_layer")
    created: str | None
    created_by: str | None
    author: str | None
    comment: str | None
    empty_layer: bool | None
    FIELDS = (
        ("created", "created", string),
        ("created_by", "created_by", string),
        ("author", "author", string),
        ("comment", "comment", string),
        ("empty_layer", "empty_layer", boolean),
    )


class ImageConfig(Model):
    """The image configuration blob (``config.digest`` of a manifest)."""

    __slots__ = (
        "architecture",
        "author",
        "config",
        "created",
        "history",
        "os",
        "os_features",
        "os_version",
        "rootfs",
        "variant",
    )
    created: str | None
    author: str | None
    architecture: str | None
    os: str | None
    os_version: str | None
    os_features: list[str] | None
    variant: str | None
    config: ContainerConfig | None
    rootfs: RootFS | None
    history: list[History] | None
    FIELDS = (
        ("created", "created", string),
        ("author", "author", string),
        ("architecture", "architecture", string),
        ("os", "os", string),
        ("os.version", "os_version", string),
        ("os.features", "os_features", string_list),
        ("variant", "variant", string),
        ("config", "config", model(ContainerConfig)),
        ("rootfs", "rootfs", model(RootFS)),
        ("history", "history", list_of(model(History))),
    )

    def container(self) -> ContainerConfig:
        """``config``, or an empty one when the image has none: the object and every
        field of it are optional (absent and ``null`` alike), as images built ``FROM
        scratch`` show. Whoever reads a container default goes through here."""
        return self.config if self.config is not None else ContainerConfig()


# --- on-disk layouts ------------------------------------------------------------------


class ImageLayout(Model):
    """``oci-layout`` at the top of an OCI image layout."""

    __slots__ = ("image_layout_version",)
    image_layout_version: str | None
    FIELDS = (("imageLayoutVersion", "image_layout_version", string),)


class DockerArchiveEntry(Model):
    """One entry of a ``docker save`` archive's ``manifest.json`` array."""

    __slots__ = ("config", "layer_sources", "layers", "repo_tags")
    config: str | None
    repo_tags: list[str] | None
    layers: list[str] | None
    layer_sources: dict[str, Descriptor] | None
    FIELDS = (
        ("Config", "config", string),
        ("RepoTags", "repo_tags", string_list),
        ("Layers", "layers", string_list),
        ("LayerSources", "layer_sources", map_of(model(Descriptor))),
    )


def decode_docker_archive_manifest(data: object) -> list[DockerArchiveEntry]:
    try:
        return list_of(model(DockerArchiveEntry))(data, "manifest.json")  # type: ignore[no-any-return]
    except ConfigError as err:
        raise ImageError(f"malformed docker archive: {err}") from err


# --- decoding raw blobs ---------------------------------------------------------------


def parse_json(raw: bytes, what: str) -> object:
    # hostjob.boot.jsonio, not json: reading a stored image (a cached `run`) must not load re.
    from hostjob.boot import jsonio

    try:
        return jsonio.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ImageError(f"{what} is not valid JSON: {err}") from err


def decode_blob(cls: type[M], raw: bytes, what: str) -> M:
    """Decode JSON bytes into ``cls``; malformed content is an ``ImageError`` naming ``what``."""
    data = parse_json(raw, what)
    try:
        return cls.decode(data)  # type: ignore[no-any-return]
    except ConfigError as err:
        raise ImageError(f"malformed {what}: {err}") from err


def sniff_media_type(raw: bytes) -> str | None:
    """The ``mediaType`` a manifest or index declares, or a guess from its shape."""
    data = parse_json(raw, "manifest")
    if type(data) is not dict:
        return None
    declared = data.get("mediaType")
    if type(declared) is str and declared:
        return declared
    if "manifests" in data:
        return OCI_INDEX
    if "config" in data or "layers" in data:
        return OCI_MANIFEST
    return None


def canonical_json(value: object) -> bytes:
    """Compact, key-sorted JSON: the form hostjob writes every blob it makes in."""
    import json  # only `pack` and imports make blobs

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
