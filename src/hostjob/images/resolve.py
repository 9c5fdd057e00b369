"""Reading images out of the store: a name to what a container needs, and to the
records ``images`` and ``inspect`` show (the CLI renders them).

    ResolvedImage   an image ready for a container: its config and layer dirs
    ImageSummary    one name's row: ID, digest, created, size, platform
    ImageDetails    everything about one image: names, digests, manifest, config, layers
"""

from __future__ import annotations

from hostjob.images.errors import ImageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.images import imagespec
    from hostjob.images.content import ContentStore
    from hostjob.images.gc import Collector
    from hostjob.images.layers import LayerCache
    from hostjob.images.names import NameIndex, NameRecord


class ResolvedImage:
    """An image ready for a container: its config and its layer dirs, bottom first."""

    __slots__ = (
        "config",
        "config_digest",
        "diff_ids",
        "layer_dirs",
        "manifest",
        "manifest_digest",
        "name",
    )

    def __init__(
        self,
        name: str,
        manifest_digest: str,
        manifest: imagespec.Manifest,
        config_digest: str,
        config: imagespec.ImageConfig,
        diff_ids: list[str],
        layer_dirs: list[str],
    ) -> None:
        self.name = name
        self.manifest_digest = manifest_digest
        self.manifest = manifest
        self.config_digest = config_digest
        self.config = config
        self.diff_ids = diff_ids
        self.layer_dirs = layer_dirs

    @property
    def id(self) -> str:
        """The image ID, Docker's way: the config digest."""
        return self.config_digest

    def __repr__(self) -> str:
        return (
            f"ResolvedImage({self.name!r}, {self.manifest_digest!r}, {len(self.layer_dirs)} layers)"
        )


class ImageSummary:
    """One name of the store (a row of ``hostjob images``). A broken image (a blob
    removed by hand) has ``error`` set and what could be read."""

    __slots__ = (
        "created",
        "digest",
        "error",
        "id",
        "layers",
        "name",
        "platform",
        "size",
        "tagged",
        "verified",
    )

    def __init__(self, name: str, digest: str, tagged: str | None = None) -> None:
        self.name = name
        self.digest = digest  # the manifest digest
        self.tagged = tagged
        # What the signature policy decided at the pull (``NameRecord.verified``).
        self.verified: dict[str, Any] | None = None
        self.id: str | None = None  # the config digest
        self.created: str | None = None
        self.platform: str | None = None
        self.size: int | None = None  # of the (compressed) layer blobs
        self.layers: int | None = None
        self.error: str | None = None


class LayerInfo:
    """One layer of an image, as ``inspect`` shows it."""

    __slots__ = ("diff_id", "digest", "media_type", "path", "size")

    def __init__(
        self,
        digest: str | None,
        media_type: str | None,
        size: int | None,
        diff_id: str,
        path: str | None,
    ) -> None:
        self.digest = digest
        self.media_type = media_type
        self.size = size
        self.diff_id = diff_id
        self.path = path  # the unpacked tree, None when it is not unpacked


class ImageDetails:
    """Everything the store knows about one image (``hostjob inspect``)."""

    __slots__ = (
        "config",
        "created",
        "digest",
        "id",
        "index",
        "layers",
        "manifest",
        "names",
        "platform",
        "size",
        "verified",
    )

    def __init__(
        self,
        names: list[str],
        digest: str,
        manifest: imagespec.Manifest,
        config_digest: str,
        config: imagespec.ImageConfig,
        layers: list[LayerInfo],
        index: str | None,
    ) -> None:
        self.names = names
        self.id = config_digest
        self.digest = digest
        self.index = index
        self.manifest = manifest
        self.config = config
        self.layers = layers
        self.platform = platform_of(config)
        self.created = config.created
        self.size = sum(layer.size or 0 for layer in manifest.layers or [])
        self.verified: dict[str, Any] | None = None  # per name: the first name's


def diff_ids(config: imagespec.ImageConfig, manifest: imagespec.Manifest, digest: str) -> list[str]:
    """The config's diffIDs, one per manifest layer (else an ``ImageError``). A
    ``rootfs.type`` other than ``layers`` is an error, as the image-spec requires."""
    if config.rootfs is not None and config.rootfs.type not in (None, "layers"):
        raise ImageError(f"image {digest}: rootfs.type {config.rootfs.type!r} is not 'layers'")
    found = (config.rootfs.diff_ids if config.rootfs else None) or []
    if len(found) != len(manifest.layers or []):
        raise ImageError(
            f"image {digest}: {len(manifest.layers or [])} layers but {len(found)} diffIDs"
        )
    return found


def platform_of(config: imagespec.ImageConfig) -> str:
    out = f"{config.os or '?'}/{config.architecture or '?'}"
    return f"{out}/{config.variant}" if config.variant else out


class Resolver:
    """Images by name, from the names, the content and the layer cache of one store."""

    __slots__ = ("content", "gc", "layers", "names")

    def __init__(
        self, content: ContentStore, layers: LayerCache, names: NameIndex, gc: Collector
    ) -> None:
        self.content = content
        self.layers = layers
        self.names = names
        self.gc = gc

    def _read(self, digest: str) -> tuple[imagespec.Manifest, str, imagespec.ImageConfig]:
        manifest = self.content.manifest(digest)
        if manifest.config is None or manifest.config.digest is None:
            raise ImageError(f"manifest {digest} has no config")
        return manifest, manifest.config.digest, self.content.config(manifest.config.digest)

    def resolve(self, name: str, unpack_missing: bool = True) -> ResolvedImage:
        """The image's manifest, config and layer dirs (bottom first), for a container.

        Layers whose directory is missing (removed by hand) are unpacked again from
        their blobs when ``unpack_missing``.
        """
        names, digest = self.names.lookup(name)
        manifest, config_digest, config = self._read(digest)
        layer_ids = diff_ids(config, manifest, digest)
        dirs = []
        with self.gc.lease():
            for layer, diff_id in zip(manifest.layers or [], layer_ids, strict=True):
                if not self.layers.has(diff_id):
                    if not unpack_missing:
                        raise ImageError(f"layer {diff_id} of {name} is not unpacked")
                    assert layer.digest is not None
                    self.layers.ensure(diff_id, layer.digest, layer.size)
                dirs.append(self.layers.dir(diff_id))
        return ResolvedImage(
            names[0] if names else digest, digest, manifest, config_digest, config, layer_ids, dirs
        )

    def summary(self, record: NameRecord) -> ImageSummary:
        row = ImageSummary(record.name, record.manifest, record.tagged)
        row.verified = record.verified
        try:
            manifest, config_digest, config = self._read(record.manifest)
        except ImageError as err:
            row.error = str(err)
            return row
        row.id = config_digest
        row.created = config.created
        row.platform = platform_of(config)
        row.size = sum(layer.size or 0 for layer in manifest.layers or [])
        row.layers = len(manifest.layers or [])
        return row

    def summaries(self) -> list[ImageSummary]:
        """One per name, sorted by name."""
        return [self.summary(r) for _, r in sorted(self.names.records().items())]

    def details(self, name: str) -> ImageDetails:
        names, digest = self.names.lookup(name)
        manifest, config_digest, config = self._read(digest)
        layers = []
        for layer, diff_id in zip(
            manifest.layers or [], diff_ids(config, manifest, digest), strict=True
        ):
            path = self.layers.dir(diff_id) if self.layers.has(diff_id) else None
            layers.append(LayerInfo(layer.digest, layer.media_type, layer.size, diff_id, path))
        records = self.names.records()
        index = next((records[n].index for n in names if n in records), None)
        details = ImageDetails(names, digest, manifest, config_digest, config, layers, index)
        details.verified = next((records[n].verified for n in names if n in records), None)
        return details
