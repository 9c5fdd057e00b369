"""The content-addressed image store (default ``$HOSTJOB_STORE``, else ``/var/lib/hostjob``).

Layout::

    blobs/sha256/<hex>          every blob (manifests, indexes, configs, layer tars),
                                verified, written to a temp file, fsynced, renamed
    layers/sha256/<diffhex>/    a layer unpacked once, keyed by its diffID:
        diff/                   the tree (an overlayfs lower dir)
        layer.json              {diff_id, digest, size, entries, compression, unpacked}
    images.json                 image names -> manifest digests (atomic replace, locked)
    containers/<id>.json        what a container uses (kept by prune)
    locks/                      per-blob and per-layer lock files
    images.lock, gc.lock        the names lock; pulls share gc.lock, prune takes it alone
    rw/<id>/                    a container's writable layer (upper, work)

The store is root's alone (SPEC §10): its root is 0700 and owned by hostjob's user,
so no other local user can reach a blob of a private image, or run a setuid-root
file or open a device node of any layer. Below the root, modes are the images' own.

Concurrency: a blob or layer is produced under its own ``flock``; whoever gets the
lock second finds the work done. Layers are unpacked into a temp sibling and renamed
into place, so a reader never sees half a layer. Pulls, imports and container
registrations hold ``gc.lock`` shared; ``prune`` holds it exclusively, so it never
removes what a running pull has just written but not yet named.

Durability: blobs are fsynced before their rename. Layer trees are not fsynced file by
file (it would cost more than the unpack); a layer is always re-creatable from its
verified blob.
"""

from __future__ import annotations

import os

from hostjob.errors import (
    DigestMismatch,
    ImageError,
    ImageNotFound,
    InvalidArgument,
    ReferenceError,
)
from hostjob.images import progress as events
from hostjob.images import reference as refs
from hostjob.images.content import ContentStore, Digester
from hostjob.images.gc import Collector, ContainerRef, Freed, Removed, check_container_id
from hostjob.images.layers import LayerCache
from hostjob.images.names import NameIndex, NameRecord
from hostjob.images.resolve import (
    ImageDetails,
    ImageSummary,
    ResolvedImage,
    Resolver,
    diff_ids,
)
from hostjob.images.root import StoreRoot
from hostjob.spec import image as spec
from hostjob.units import rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from hostjob.fsutil import FileLock
    from hostjob.images.progress import Progress
    from hostjob.images.sources import Source

PULL_WORKERS = 3


class Store:
    """The image store. Every verb returns plain JSON-able data for the CLI."""

    __slots__ = ("content", "gc", "layers", "names", "resolver", "root", "top")

    def __init__(self, root: str | None = None) -> None:
        self.top = StoreRoot(root)
        self.root = self.top.path
        self.content = ContentStore(self.top)
        self.layers = LayerCache(self.top, self.content)
        self.names = NameIndex(self.top, self.content)
        self.gc = Collector(self.top, self.content, self.layers, self.names)
        self.resolver = Resolver(self.content, self.layers, self.names, self.gc)

    # --- paths ------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return self.top.join(*parts)

    def blob_path(self, digest: str) -> str:
        return self.content.path(digest)

    def layer_path(self, diff_id: str) -> str:
        """``layers/<alg>/<hex>``; the tree is its ``diff`` subdirectory."""
        return self.layers.path(diff_id)

    def layer_dir(self, diff_id: str) -> str:
        return self.layers.dir(diff_id)

    def has_layer(self, diff_id: str) -> bool:
        return self.layers.has(diff_id)

    def has_blob(self, digest: str) -> bool:
        return self.content.has(digest)

    def gc_shared(self) -> FileLock:
        """Hold while using store content that is not named yet; prune waits for it."""
        return self.gc.lease()

    # --- blobs ------------------------------------------------------------------------

    def read_blob(self, digest: str, limit: int = 64 << 20) -> bytes:
        """A small (metadata) blob's bytes, re-verified."""
        return self.content.read(digest, limit)

    def write_blob(self, data: bytes, digest: str | None = None) -> str:
        """Store bytes; returns their sha256 digest (checked against ``digest`` if given)."""
        return self.content.write(data, digest)

    def ingest(
        self,
        digest: str,
        size: int | None,
        fill: Callable[[Digester], None],
        on_bytes: Callable[[int], None] | None = None,
    ) -> bool:
        return self.content.ingest(digest, size, fill, on_bytes)

    # --- layers ---------------------------------------------------------------------

    def ensure_layer(
        self,
        diff_id: str,
        blob_digest: str,
        size: int | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> bool:
        """Unpack blob ``blob_digest`` as layer ``diff_id`` unless it is there already."""
        return self.layers.ensure(diff_id, blob_digest, size, on_bytes)

    # --- names ------------------------------------------------------------------------

    def lookup(self, name: str) -> tuple[list[str], str]:
        """``(names, manifest digest)`` of a stored image, read from the names alone (a
        broken image is found too); ``ImageNotFound`` when there is none."""
        return self.names.lookup(name)

    # --- reading images ---------------------------------------------------------------

    def manifest(self, digest: str) -> spec.Manifest:
        raw = self.read_blob(digest)
        return spec.decode_blob(spec.Manifest, raw, f"manifest {digest}")

    def config(self, digest: str) -> spec.ImageConfig:
        return spec.decode_blob(spec.ImageConfig, self.read_blob(digest), f"config {digest}")

    def resolve(self, name: str, unpack_missing: bool = True) -> ResolvedImage:
        """The image's manifest, config and layer dirs (bottom first), for a container;
        missing layer dirs are unpacked again from their blobs if ``unpack_missing``."""
        return self.resolver.resolve(name, unpack_missing)

    def get(
        self, ref: str, *, pull: str = "missing", progress: Progress | None = None, **kw: Any
    ) -> ResolvedImage:
        """The image ``hostjob run IMAGE`` means, pulled per ``--pull always|missing|never``.

        ``ref`` may be a store name, an image ID (prefix), a registry reference, or a
        local ``oci:``/``oci-archive:``/``docker-archive:`` one (always imported: it is
        local, and content already in the store is not copied again). ``kw`` goes to
        ``pull`` (platform, creds, tls_verify, plain_http, docker_config).
        """
        if pull not in ("always", "missing", "never"):
            raise InvalidArgument(f"--pull {pull!r}: expected always, missing or never")
        parsed = refs.parse(ref)
        if not parsed.is_registry:
            info = self.pull(ref, progress=progress, **kw)
            return self.resolve(info["name"])
        if pull != "always":
            try:
                return self.resolve(ref)
            except ImageNotFound:
                if pull == "never":
                    raise ImageNotFound(f"no such image: {ref} (and --pull never)") from None
        info = self.pull(ref, progress=progress, **kw)
        return self.resolve(info["name"])

    def images(self) -> list[ImageSummary]:
        """One per name, sorted: name, ID, digest, created, size, platform."""
        return self.resolver.summaries()

    def inspect(self, name: str) -> ImageDetails:
        """Everything about one image: names, digests, manifest, config, layers."""
        return self.resolver.details(name)

    # --- containers -------------------------------------------------------------------

    def register_container(self, container_id: str, image: ResolvedImage | str) -> None:
        """Record that a container uses an image's layers; prune keeps them until
        ``unregister_container``."""
        check_container_id(container_id)
        resolved = image if isinstance(image, ResolvedImage) else self.resolve(image)
        self.gc.register(
            ContainerRef(
                container_id,
                resolved.name,
                resolved.manifest_digest,
                resolved.config_digest,
                resolved.diff_ids,
                rfc3339(),
            )
        )

    def unregister_container(self, container_id: str) -> None:
        self.gc.unregister(container_id)

    def containers(self) -> dict[str, ContainerRef]:
        return self.gc.containers()

    def rw_dir(self, container_id: str) -> str:
        """Where a container's upper and work dirs live by default: ``rw/<id>``."""
        check_container_id(container_id)
        return self._path("rw", container_id)

    def mount_container(
        self,
        container_id: str,
        image: ResolvedImage | str,
        target: str,
        *,
        rw_dir: str | None = None,
        volatile: bool = True,
    ) -> dict[str, Any]:
        """Register the container's use of ``image`` and mount its overlay at ``target``.

        A fresh upper/work pair is made in ``rw_dir`` (default ``rw_dir(id)``).
        Returns ``{target, upper, work, method, image, manifest}``. Undo with
        ``unmount_container``; it is idempotent, so it also cleans up after a crash.
        """
        from hostjob.images.overlay import ContainerRootfs

        with self.gc_shared():
            resolved = image if isinstance(image, ResolvedImage) else self.resolve(image)
            self.register_container(container_id, resolved)
            rootfs = ContainerRootfs(
                resolved.layer_dirs, rw_dir or self.rw_dir(container_id), target
            )
            try:
                method = rootfs.mount(volatile=volatile)
            except BaseException:
                self.unregister_container(container_id)
                raise
        return {
            "target": rootfs.target,
            "upper": rootfs.upper,
            "work": rootfs.work,
            "method": method,
            "image": resolved.name,
            "manifest": resolved.manifest_digest,
        }

    def unmount_container(
        self, container_id: str, target: str, *, rw_dir: str | None = None
    ) -> None:
        """Unmount the container's overlay, remove its upper/work dirs, unregister it."""
        from hostjob.images.overlay import ContainerRootfs

        ContainerRootfs([], rw_dir or self.rw_dir(container_id), target).unmount()
        self.unregister_container(container_id)

    # --- removing ---------------------------------------------------------------------

    def remove(self, name: str, force: bool = False) -> Removed:
        """``rmi``: drop the name(s), then free what nothing uses any more; an image a
        registered container uses is refused unless ``force``."""
        return self.gc.remove(name, force)

    def prune(self) -> Freed:
        """Remove every blob and layer no image name or registered container uses."""
        return self.gc.prune()

    # --- pulling ----------------------------------------------------------------------

    def pull(
        self,
        ref: str,
        *,
        name: str | None = None,
        platform: str | None = None,
        creds: str | None = None,
        tls_verify: bool = True,
        plain_http: bool = False,
        docker_config: str | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Fetch an image from any source (registry or archive) into the store.

        ``ref`` is any form ``hostjob.images.reference.parse`` accepts. The image is
        named ``name``, else the reference's own name (registry), the name recorded in
        the archive, or ``localhost/<file name>:<tag>``. Returns the ``images()`` row
        plus ``layers_unpacked``/``blobs_fetched`` counts.
        """
        from hostjob.images import platforms
        from hostjob.images.sources import open_source

        parsed = refs.parse(ref)
        if platform:
            platforms.parse(platform)  # a bad --platform fails before any network
        source = open_source(
            parsed,
            platform=platform,
            creds=creds,
            tls_verify=tls_verify,
            plain_http=plain_http,
            docker_config=docker_config,
        )
        try:
            return self.pull_from(source, parsed, name=name, platform=platform, progress=progress)
        finally:
            source.close()

    def import_archive(self, ref: str, **kw: Any) -> dict[str, Any]:
        """``import``: an ``oci:``, ``oci-archive:`` or ``docker-archive:`` reference."""
        if refs.parse(ref).is_registry:
            raise ReferenceError(
                f"{ref!r} is a registry reference; import takes oci:, oci-archive: or"
                " docker-archive:"
            )
        return self.pull(ref, **kw)

    def pull_from(
        self,
        source: Source,
        ref: refs.Reference,
        *,
        name: str | None = None,
        platform: str | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        from hostjob.images import platforms

        emit = progress or (lambda event: None)
        wanted = platforms.parse(platform) if platform else platforms.host()
        emit(events.Event(events.RESOLVING, source.description))
        raw, media_type, digest = source.top()
        index_digest = None
        counts = {"blobs_fetched": 0, "layers_unpacked": 0}
        with self.gc_shared():
            media_type = media_type or spec.sniff_media_type(raw)
            top_digest = self._save_metadata(raw, digest)
            if media_type in spec.INDEX_TYPES:
                index_digest = top_digest
                index = spec.decode_blob(spec.Index, raw, f"index {top_digest}")
                chosen = platforms.choose(index.manifests or [], wanted)
                assert chosen.digest is not None
                raw = source.manifest(chosen)
                digest = self._save_metadata(raw, chosen.digest, chosen.size)
                media_type = chosen.media_type or spec.sniff_media_type(raw)
            else:
                digest = top_digest
            if media_type not in spec.MANIFEST_TYPES:
                raise ImageError(f"unsupported manifest type {media_type!r}")
            emit(events.Event(events.RESOLVED, digest))
            manifest = spec.decode_blob(spec.Manifest, raw, f"manifest {digest}")
            config_desc = manifest.config
            if config_desc is None or config_desc.digest is None:
                raise ImageError(f"manifest {digest} has no config")
            if config_desc.media_type not in (*spec.CONFIG_TYPES, None):
                raise ImageError(f"not a container image (config type {config_desc.media_type})")
            layers = manifest.layers or []
            for layer in layers:
                if layer.media_type in spec.FOREIGN_LAYER_TYPES:
                    raise ImageError(f"foreign layer {layer.digest} ({layer.media_type}) refused")
                if layer.media_type not in (*spec.LAYER_TYPES, None):
                    raise ImageError(f"unsupported layer type {layer.media_type!r}")
                if layer.digest is None:
                    raise ImageError(f"manifest {digest} has a layer without a digest")
            if self.ingest(
                config_desc.digest,
                config_desc.size,
                lambda w: source.copy_blob(config_desc, w),
            ):
                counts["blobs_fetched"] += 1
            config = self.config(config_desc.digest)
            layer_ids = diff_ids(config, manifest, digest)
            if config.os and config.os != "linux":
                raise ImageError(f"image is for {config.os}, not linux")
            self._fetch_layers(source, layers, layer_ids, emit, counts)
            image_name = _canonical_name(name or _default_name(ref, source))
            self.names.tag(
                NameRecord(
                    image_name,
                    digest,
                    config=config_desc.digest,
                    index=index_digest,
                    source=str(ref),
                    tagged=rfc3339(),
                )
            )
        emit(events.Event(events.DONE, image_name))
        row = self.resolver.summary(self.names.records()[image_name])
        return {
            "name": row.name,
            "digest": row.digest,
            "tagged": row.tagged,
            "id": row.id,
            "created": row.created,
            "platform": row.platform,
            "size": row.size,
            "layers": row.layers,
            **counts,
        }

    def _save_metadata(self, raw: bytes, digest: str | None, size: int | None = None) -> str:
        if size is not None and len(raw) != size:
            raise DigestMismatch(f"manifest {digest} is {len(raw)} bytes, expected {size}")
        return self.write_blob(raw, digest)

    def _fetch_layers(
        self,
        source: Source,
        layers: list[spec.Descriptor],
        diff_ids: list[str],
        emit: Progress,
        counts: dict[str, int],
    ) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        lock = threading.Lock()

        def one(layer: spec.Descriptor, diff_id: str) -> None:
            assert layer.digest is not None
            item = layer.digest
            if self.has_layer(diff_id) and self.has_blob(layer.digest):
                emit(events.Event(events.CACHED, item, layer.size or 0, layer.size))
                return
            meter = events.Meter(emit, events.DOWNLOADING, item, layer.size)
            fetched = self.ingest(
                layer.digest, layer.size, lambda w: source.copy_blob(layer, w), on_bytes=meter
            )
            if fetched:
                emit(events.Event(events.VERIFYING, item, layer.size or 0, layer.size))
            unpack_meter = events.Meter(emit, events.UNPACKING, item, layer.size)
            unpacked = self.ensure_layer(diff_id, layer.digest, layer.size, on_bytes=unpack_meter)
            with lock:
                counts["blobs_fetched"] += int(fetched)
                counts["layers_unpacked"] += int(unpacked)
            emit(events.Event(events.DONE, item, layer.size or 0, layer.size))

        if len(layers) <= 1:
            for layer, diff_id in zip(layers, diff_ids, strict=True):
                one(layer, diff_id)
            return
        with ThreadPoolExecutor(max_workers=min(PULL_WORKERS, len(layers))) as pool:
            futures = [pool.submit(one, x, d) for x, d in zip(layers, diff_ids, strict=True)]
            errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err


# --- helpers --------------------------------------------------------------------------


def _canonical_name(name: str) -> str:
    return refs.normalize(name)


def _default_name(ref: refs.Reference, source: Source) -> str:
    if ref.is_registry:
        return ref.name
    if source.name_hint:
        return source.name_hint
    base = os.path.basename(os.path.normpath(ref.path or "image"))
    stem = base.split(".")[0].lower()
    cleaned = "".join(c if c.isalnum() else "-" for c in stem).strip("-") or "image"
    tag = ref.tag if ref.tag and "/" not in ref.tag and ":" not in ref.tag else "latest"
    try:
        return refs.normalize(f"localhost/{cleaned}:{tag}")
    except ReferenceError:
        return f"localhost/{cleaned}:latest"


def walk_blobs(store: Store) -> Iterator[str]:
    """Every stored blob digest (for tests and ``fsck``-style tools)."""
    return store.content.digests()
