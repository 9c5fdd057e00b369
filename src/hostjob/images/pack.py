"""``hostjob pack DIR --to oci:OUT[:TAG]``: a one-layer image from a directory
(``--to docker://HOST/NAME:TAG``: packed, then pushed to a registry).

The "``FROM scratch``" way to ship host tools as a job-container image. The layer is
reproducible: entries in sorted order, every mtime the same fixed time
(``SOURCE_DATE_EPOCH`` when set, else 0), owners 0:0 and no user/group names unless
``keep_owner``, gzip with mtime 0 and no file name, canonical JSON for the config and
manifest. The same input gives the same digest, on any machine (the stdlib's zlib
always does the compressing, never isal, whose output differs).

The directory is walked and written by ``hostjob.images.archive`` (fd-relative:
its owner may change it while root packs it); the layout by ``hostjob.images.layout``.

``base`` stacks the layer on an existing image: a name in the store, or an ``oci:``,
``oci-archive:`` or ``docker-archive:`` reference.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from hostjob import log
from hostjob.errors import InvalidArgument
from hostjob.images import imagespec, packcheck
from hostjob.images import reference as refs
from hostjob.images.archive import CHUNK, write_layer
from hostjob.images.content import Digester
from hostjob.images.errors import ImageError, InvalidReference
from hostjob.images.layout import Layout, write_archive
from hostjob.linux import fsremove
from hostjob.units import rfc3339

if TYPE_CHECKING:
    from hostjob.images.content import Writer
    from hostjob.images.options import RegistryOptions
    from hostjob.images.progress import Progress
    from hostjob.images.sources import Source


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    try:
        return max(0, int(value)) if value else 0
    except ValueError as err:
        raise InvalidArgument(f"SOURCE_DATE_EPOCH={value!r} is not an integer") from err


class _Base:
    """A base image to stack on: its manifest, config, and a way to copy its blobs."""

    def __init__(self, base: str, store_root: str | None) -> None:
        self.source: Source | None = None
        parsed = None
        try:
            parsed = refs.parse(base)
        except InvalidReference:
            pass
        if parsed is not None and not parsed.is_registry:
            self._from_source(parsed)
        else:
            from hostjob.images.store import Store

            store = Store(store_root)
            image = store.resolve(base, unpack_missing=False)
            self.manifest = image.manifest
            self.config = self._fields(store.content.read(image.config_digest))
            self.store = store

    def _from_source(self, parsed: refs.Reference) -> None:
        from hostjob.images import platforms
        from hostjob.images.sources import open_local

        source = open_local(parsed)
        self.source = source
        raw, media_type, _digest = source.top()
        media_type = media_type or imagespec.sniff_media_type(raw)
        if media_type in imagespec.INDEX_TYPES:
            index = imagespec.decode_blob(imagespec.Index, raw, "base image index")
            raw = source.manifest(platforms.choose(index.manifests or [], platforms.host()))
        self.manifest = imagespec.decode_blob(imagespec.Manifest, raw, "base image manifest")
        if self.manifest.config is None or self.manifest.config.digest is None:
            raise ImageError("the base image's manifest has no config")
        buf = _Buffer()
        source.copy_blob(self.manifest.config, buf)
        self.config = self._fields(bytes(buf.data))

    @staticmethod
    def _fields(raw: bytes) -> dict[str, Any]:
        """The base's config as its JSON says, checked as any image's is: what hostjob
        does not read (``Memory``, Docker's ``container_config``, ...) is kept for the
        stacked image, not dropped."""
        imagespec.decode_blob(imagespec.ImageConfig, raw, "base image config")
        fields: dict[str, Any] = imagespec.parse_json(raw, "base image config")  # type: ignore[assignment]
        return fields

    def copy_blob(self, desc: imagespec.Descriptor, writer: Writer) -> None:
        assert desc.digest is not None
        if self.source is not None:
            self.source.copy_blob(desc, writer)
            return
        try:
            f = self.store.content.open(desc.digest)
        except ImageError as err:
            raise ImageError(f"base layer blob {desc.digest} is not in the store") from err
        with f:
            while data := f.read(CHUNK):
                writer.write(data)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


class _Buffer:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


_OCI_LAYER_TYPE = {
    imagespec.DOCKER_LAYER: imagespec.OCI_LAYER,
    imagespec.DOCKER_LAYER_GZIP: imagespec.OCI_LAYER_GZIP,
    imagespec.DOCKER_LAYER_ZSTD: imagespec.OCI_LAYER_ZSTD,
}


class PackResult:
    """What ``pack`` made: the image's reference and digests, its new layer's."""

    __slots__ = ("config", "diff_id", "digest", "layer_digest", "layer_size", "reference", "size")

    def __init__(
        self,
        reference: str,
        digest: str,
        config: str,
        layer: tuple[str, str, int],
        size: int,
    ) -> None:
        self.reference = reference  # where it was written (or pushed)
        self.digest = digest  # the manifest's
        self.config = config  # the config's: the image ID
        self.layer_digest, self.diff_id, self.layer_size = layer  # the packed layer's
        self.size = size  # of every (compressed) layer

    @property
    def layer(self) -> tuple[str, str, int]:
        return self.layer_digest, self.diff_id, self.layer_size

    def __repr__(self) -> str:
        return f"PackResult({self.reference!r}, {self.digest!r})"


class _ConfigEdits:
    """What ``pack`` sets in the image's config, on top of the base's (None: the
    base's, or nothing)."""

    __slots__ = ("cmd", "entrypoint", "env", "labels", "stop_signal", "user", "workdir")

    def __init__(
        self,
        *,
        entrypoint: list[str] | None = None,
        cmd: list[str] | None = None,
        env: list[str] | None = None,
        workdir: str | None = None,
        labels: dict[str, str] | None = None,
        user: str | None = None,
        stop_signal: str | None = None,
    ) -> None:
        for item in env or []:
            if "=" not in item or item.startswith("="):
                raise InvalidArgument(f"--env {item!r}: expected NAME=VALUE")
        self.entrypoint = entrypoint
        self.cmd = cmd
        self.env = env
        self.workdir = workdir
        self.labels = labels
        self.user = user
        self.stop_signal = stop_signal


def pack(
    src_dir: str,
    to: str,
    *,
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    workdir: str | None = None,
    labels: dict[str, str] | None = None,
    user: str | None = None,
    stop_signal: str | None = None,
    base: str | None = None,
    keep_owner: bool = False,
    mtime: int | None = None,
    store_root: str | None = None,
    registry: RegistryOptions | None = None,
    progress: Progress | None = None,
) -> PackResult:
    """Make an image of ``src_dir`` (one layer, on ``base`` if given) at ``to``.

    ``to`` is ``oci:DIR[:TAG]``, ``oci-archive:FILE[:TAG]``, or
    ``docker://HOST[:PORT]/NAME[:TAG]``: packed into a temporary layout, then pushed
    (``hostjob.images.push.push``, reached as ``registry`` says, its steps told to
    ``progress``).
    """
    edits = _ConfigEdits(
        entrypoint=entrypoint, cmd=cmd, env=env, workdir=workdir, labels=labels, user=user,
        stop_signal=stop_signal,
    )  # fmt: skip
    epoch = source_date_epoch() if mtime is None else mtime

    def to_layout(dest: str) -> PackResult:
        return _pack_layout(src_dir, dest, edits, base, keep_owner, epoch, store_root)

    if not to.startswith("docker://"):
        return to_layout(to)
    from hostjob.images import push

    push.target(to)  # a bad reference fails before anything is packed
    layout = tempfile.mkdtemp(prefix="hostjob-pack-")
    try:
        packed = to_layout(f"oci:{layout}:pack")
        pushed = push.push(f"oci:{layout}:pack", to, registry=registry, progress=progress)
    finally:
        fsremove.remove_tree(layout, ignore_errors=True)
    packed.reference = pushed.reference
    return packed


def _layout_target(to: str) -> refs.Reference:
    """``to`` as the layout reference ``pack`` writes, or ``InvalidReference``."""
    target = refs.parse(to)
    if target.transport not in ("oci", "oci-archive") or target.digest or target.path is None:
        raise InvalidReference(
            "pack writes to oci:DIR[:TAG], oci-archive:FILE[:TAG] or"
            f" docker://HOST/NAME[:TAG], not {to!r}"
        )
    return target


def _pack_layout(
    src_dir: str,
    to: str,
    edits: _ConfigEdits,
    base: str | None,
    keep_owner: bool,
    epoch: int,
    store_root: str | None,
) -> PackResult:
    """The image written as an OCI layout at ``to`` (an archive: a layout in a temporary
    directory beside it, then its tar)."""
    target = _layout_target(to)
    assert target.path is not None
    workdir_tmp = None
    if target.transport == "oci-archive":
        parent = os.path.dirname(os.path.abspath(target.path)) or "."
        workdir_tmp = tempfile.mkdtemp(prefix=".hostjob-pack-", dir=parent)
        layout_dir = workdir_tmp
    else:
        layout_dir = target.path
    base_image = _Base(base, store_root) if base else None
    # What the directory's programs lack to run as the image's own (a base's layers
    # may hold it: only a directory packed alone is checked).
    index = packcheck.TreeIndex() if base_image is None else None
    try:
        layout = Layout(layout_dir)
        layer, diff_id = _write_layer(layout, src_dir, epoch, keep_owner, index)
        problems = index.problems() if index is not None else []
        if problems:
            log.warning(packcheck.warning(src_dir, problems), stderr=True)
        if base_image is not None:
            base_config, layers = base_image.config, _copy_base_layers(base_image, layout)
        else:
            base_config, layers = _scratch_config(), []
        layers.append(layer)
        config = _build_config(base_config, edits, diff_id=diff_id, created=rfc3339(epoch))
        config_digest, manifest_digest = _write_image(layout, config, layers, target.tag)
        if target.transport == "oci-archive":
            write_archive(layout_dir, target.path, epoch)
    finally:
        if base_image is not None:
            base_image.close()
        if workdir_tmp is not None:
            fsremove.remove_tree(workdir_tmp, ignore_errors=True)
    assert layer.digest is not None and layer.size is not None
    return PackResult(
        str(target),
        manifest_digest,
        config_digest,
        (layer.digest, diff_id, layer.size),
        sum(d.size or 0 for d in layers),
    )


def _write_layer(
    layout: Layout, src_dir: str, epoch: int, keep_owner: bool, index: packcheck.TreeIndex | None
) -> tuple[imagespec.Descriptor, str]:
    """``src_dir`` as a gzip layer blob in ``layout``: its descriptor and diffID;
    ``index`` sees each entry as it is packed."""
    fd, tmp = tempfile.mkstemp(prefix=".layer-", dir=os.path.join(layout.path, "blobs", "sha256"))
    try:
        with os.fdopen(fd, "wb") as f:
            observe = index.saw if index is not None else None
            digest, diff_id, size, mode = write_layer(
                src_dir, f, mtime=epoch, keep_owner=keep_owner, observe=observe
            )
        layout.add_file(tmp, digest, mode)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return imagespec.Descriptor(
        media_type=imagespec.OCI_LAYER_GZIP, digest=digest, size=size
    ), diff_id


def _copy_base_layers(base: _Base, layout: Layout) -> list[imagespec.Descriptor]:
    """The base image's layers, copied into ``layout`` and described as OCI layers."""
    layers = []
    for desc in base.manifest.layers or []:
        assert desc.digest is not None
        if not layout.has(desc.digest):
            _copy_into_layout(base, desc, layout)
        layers.append(
            imagespec.Descriptor(
                media_type=_OCI_LAYER_TYPE.get(desc.media_type or "", desc.media_type),
                digest=desc.digest,
                size=desc.size,
            )
        )
    return layers


def _scratch_config() -> dict[str, Any]:
    """The config of an image with no base: this host's platform."""
    from hostjob.images import platforms

    host = platforms.host()
    config: dict[str, Any] = {"architecture": host.architecture, "os": "linux"}
    if host.variant and host.architecture != "amd64":
        config["variant"] = host.variant
    return config


def _write_image(
    layout: Layout, config: dict[str, Any], layers: list[imagespec.Descriptor], tag: str | None
) -> tuple[str, str]:
    """The config and manifest blobs, and the manifest tagged ``tag`` in the index:
    ``(config digest, manifest digest)``."""
    config_raw = imagespec.canonical_json(config)
    config_digest = layout.add_bytes(config_raw)
    manifest = {
        "schemaVersion": 2,
        "mediaType": imagespec.OCI_MANIFEST,
        "config": {
            "mediaType": imagespec.OCI_CONFIG,
            "digest": config_digest,
            "size": len(config_raw),
        },
        "layers": [d.to_json() for d in layers],
    }
    manifest_raw = imagespec.canonical_json(manifest)
    manifest_digest = layout.add_bytes(manifest_raw)
    layout.set_ref(
        imagespec.Descriptor(
            media_type=imagespec.OCI_MANIFEST, digest=manifest_digest, size=len(manifest_raw)
        ),
        tag,
    )
    return config_digest, manifest_digest


def _copy_into_layout(base: _Base, desc: imagespec.Descriptor, layout: Layout) -> None:
    assert desc.digest is not None
    fd, tmp = tempfile.mkstemp(prefix=".base-", dir=os.path.join(layout.path, "blobs", "sha256"))
    try:
        with os.fdopen(fd, "wb") as f:
            writer = Digester(f)
            base.copy_blob(desc, writer)
        if writer.digest() != desc.digest:
            from hostjob.images.errors import DigestMismatch

            raise DigestMismatch(f"base layer {desc.digest} has digest {writer.digest()}")
        layout.add_file(tmp, desc.digest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _build_config(
    base: dict[str, Any], edits: _ConfigEdits, *, diff_id: str, created: str
) -> dict[str, Any]:
    """The new image's config: the base's, with ``edits`` and the new layer on top."""
    config = dict(base)
    container = dict(config.get("config") or {})
    if edits.env:
        merged: dict[str, str] = {}
        for item in [*(container.get("Env") or []), *edits.env]:
            key, _, value = item.partition("=")
            merged.pop(key, None)
            merged[key] = value
        container["Env"] = [f"{k}={v}" for k, v in merged.items()]
    if edits.entrypoint is not None:
        container["Entrypoint"] = edits.entrypoint
        if edits.cmd is None:
            container.pop("Cmd", None)  # Docker resets Cmd when Entrypoint changes
    for key, value in (
        ("Cmd", edits.cmd),
        ("WorkingDir", edits.workdir),
        ("User", edits.user),
        ("StopSignal", edits.stop_signal),
    ):
        if value is not None:
            container[key] = value
    if edits.labels:
        container["Labels"] = {**(container.get("Labels") or {}), **edits.labels}
    if container:
        config["config"] = container
    rootfs = dict(config.get("rootfs") or {"type": "layers"})
    rootfs["type"] = "layers"
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), diff_id]
    config["rootfs"] = rootfs
    config["history"] = [
        *(config.get("history") or []),
        {"created": created, "created_by": "hostjob pack"},
    ]
    config["created"] = created
    return config
