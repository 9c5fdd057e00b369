"""Pulling: an image from a source (a registry, an OCI layout or archive, a ``docker
save`` tar) into the store's content and layer cache, then named.

The steps, each a typed progress event (``hostjob.images.progress``): resolve the
reference to a manifest (choosing from an index by platform), ask the signature
policy (``hostjob.images.trust``: a refused image stops here, before anything of it
is stored), store the manifest and config, then fetch and unpack the layers, up to
``WORKERS`` at a time, each blob verified (``ContentStore.ingest``) and each layer
unpacked once (``LayerCache.ensure``), what they unpack to charged to one
``limits.Budget``. The
name is written last: until then the pull holds the gc lease, so prune never removes
what it wrote, and a pull killed at any point leaves no name and nothing
half-written. A pull that fails takes back the blobs and layers it added
(``Collector.discard``), so the store is as it was.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.images import imagespec
from hostjob.images import progress as events
from hostjob.images import reference as refs
from hostjob.images.content import digest_of
from hostjob.images.errors import ImageError, InvalidReference
from hostjob.images.names import NameRecord
from hostjob.images.resolve import diff_ids, platform_of
from hostjob.units import rfc3339

if TYPE_CHECKING:
    from hostjob.images.content import ContentStore
    from hostjob.images.gc import Collector
    from hostjob.images.layers import LayerCache
    from hostjob.images.limits import Budget
    from hostjob.images.names import NameIndex
    from hostjob.images.options import RegistryOptions, TrustOptions, UnpackLimits
    from hostjob.images.progress import Progress
    from hostjob.images.sources import Source
    from hostjob.images.trust.evaluate import Verdict, Verifier

WORKERS = 3  # layers fetched and unpacked at once


class PullResult:
    """The image a pull named, and what it had to fetch and unpack for it."""

    __slots__ = (
        "blobs_fetched",
        "created",
        "digest",
        "id",
        "layers",
        "layers_unpacked",
        "name",
        "platform",
        "size",
        "verdict",
    )

    def __init__(
        self, name: str, digest: str, config_digest: str, config: imagespec.ImageConfig
    ) -> None:
        self.name = name
        self.digest = digest  # the manifest digest
        self.id = config_digest
        self.created = config.created
        self.platform = platform_of(config)
        self.size = 0  # of the (compressed) layer blobs
        self.layers = 0
        self.blobs_fetched = 0
        self.layers_unpacked = 0
        self.verdict: Verdict | None = None  # what the signature policy decided

    def __repr__(self) -> str:
        return f"PullResult({self.name!r}, {self.digest!r})"


class Puller:
    """Pulls into one store's content, layers and names."""

    __slots__ = ("content", "gc", "layers", "names")

    def __init__(
        self, content: ContentStore, layers: LayerCache, names: NameIndex, gc: Collector
    ) -> None:
        self.content = content
        self.layers = layers
        self.names = names
        self.gc = gc

    def pull(
        self,
        ref: str,
        *,
        name: str | None = None,
        platform: str | None = None,
        registry: RegistryOptions | None = None,
        limits: UnpackLimits | None = None,
        trust: TrustOptions | None = None,
        progress: Progress | None = None,
    ) -> PullResult:
        """Fetch an image from any source ``reference.parse`` accepts (a registry
        reached as ``registry`` says), and name it ``name``, else the reference's own
        name (registry), the name the archive records, or
        ``localhost/<file name>:<tag>``. Its layers may unpack to at most ``limits``
        (else the store's defaults, ``hostjob.images.limits``); it comes in only if
        the signature policy ``trust`` names (else the user's or the system's)
        accepts it."""
        from hostjob.images import platforms
        from hostjob.images.sources import open_source
        from hostjob.images.trust.evaluate import Verifier

        parsed = refs.parse(ref)
        if platform:
            platforms.parse(platform)  # a bad --platform fails before any network
        verifier = Verifier(trust)  # so does a policy that cannot be read
        source = open_source(parsed, registry)
        try:
            return self.pull_from(
                source,
                parsed,
                name=name,
                platform=platform,
                limits=limits,
                verifier=verifier,
                progress=progress,
            )
        finally:
            source.close()

    def pull_from(
        self,
        source: Source,
        ref: refs.Reference,
        *,
        name: str | None = None,
        platform: str | None = None,
        limits: UnpackLimits | None = None,
        verifier: Verifier | None = None,
        progress: Progress | None = None,
    ) -> PullResult:
        """Pull from an open ``source``; ``verifier`` decides whether the image may
        come in (None: the user's or the system's signature policy)."""
        from hostjob.images.trust.evaluate import Verifier

        added = _Added()
        try:
            return self._pull(
                source, ref, added, name, platform, limits, verifier or Verifier(), progress
            )
        except BaseException:
            # Out of the lease: discard waits for every pull in flight, as prune does.
            self.gc.discard(added.blobs, added.layers)
            raise

    def _pull(
        self,
        source: Source,
        ref: refs.Reference,
        added: _Added,
        name: str | None,
        platform: str | None,
        limits: UnpackLimits | None,
        verifier: Verifier,
        progress: Progress | None,
    ) -> PullResult:
        from hostjob.images import platforms
        from hostjob.images.limits import budget as unpack_budget
        from hostjob.images.trust import scopes

        emit = progress or _ignore
        wanted = platforms.parse(platform) if platform else platforms.host()
        emit(events.Event(events.RESOLVING, source.description))
        top, media_type, digest = source.top()
        top_digest = digest_of(top, digest)
        media_type = media_type or imagespec.sniff_media_type(top)
        raw, digest, index_digest = top, top_digest, None
        if media_type in imagespec.INDEX_TYPES:
            index_digest = top_digest
            index = imagespec.decode_blob(imagespec.Index, top, f"index {top_digest}")
            chosen = platforms.choose(index.manifests or [], wanted)
            assert chosen.digest is not None
            raw = source.manifest(chosen)
            digest = digest_of(raw, chosen.digest, chosen.size)
            media_type = chosen.media_type or imagespec.sniff_media_type(raw)
        if media_type not in imagespec.MANIFEST_TYPES:
            raise ImageError(f"unsupported manifest type {media_type!r}")
        emit(events.Event(events.RESOLVED, digest))
        manifest = imagespec.decode_blob(imagespec.Manifest, raw, f"manifest {digest}")
        config_desc = _check_manifest(manifest, digest)
        # The policy decides on the manifest (of the platform chosen, as containers/image
        # does), before any blob of the image is stored.
        scope = scopes.of(ref)
        verdict = verifier.require(
            str(ref),
            scope,
            raw,
            digest,
            lambda: source.signatures(digest, scope, verifier.registries),
        )
        with self.gc.lease():
            budget = unpack_budget(self.content.root.path, limits)
            self._save_metadata(top, top_digest, added)
            if index_digest is not None:
                self._save_metadata(raw, digest, added)
            assert config_desc.digest is not None
            added.blob(self.content, config_desc.digest)
            fetched = self.content.ingest(
                config_desc.digest, config_desc.size, lambda w: source.copy_blob(config_desc, w)
            )
            config = self.content.config(config_desc.digest)
            layer_ids = diff_ids(config, manifest, digest)
            if config.os and config.os != "linux":
                raise ImageError(f"image is for {config.os}, not linux")
            platforms.check_field(
                "architecture", config.architecture, f"config {config_desc.digest}"
            )
            platforms.check_field("variant", config.variant, f"config {config_desc.digest}")
            image_name = refs.normalize(name or default_name(ref, source))
            result = PullResult(image_name, digest, config_desc.digest, config)
            result.verdict = verdict
            result.blobs_fetched = int(fetched)
            result.layers = len(manifest.layers or [])
            result.size = sum(layer.size or 0 for layer in manifest.layers or [])
            self._fetch_layers(
                source, manifest.layers or [], layer_ids, emit, result, budget, added
            )
            self.names.tag(
                NameRecord(
                    image_name,
                    digest,
                    config=config_desc.digest,
                    index=index_digest,
                    source=str(ref),
                    tagged=rfc3339(),
                    verified=verdict.to_json(),
                )
            )
        emit(events.Event(events.DONE, image_name))
        return result

    def _save_metadata(self, raw: bytes, digest: str, added: _Added) -> str:
        stored, new = self.content.put(raw, digest)
        if new:
            added.blobs.append(stored)
        return stored

    def _fetch_layers(
        self,
        source: Source,
        layers: list[imagespec.Descriptor],
        layer_ids: list[str],
        emit: Progress,
        result: PullResult,
        budget: Budget,
        added: _Added,
    ) -> None:
        import _thread

        lock = _thread.allocate_lock()

        def one(layer: imagespec.Descriptor, diff_id: str) -> None:
            assert layer.digest is not None
            item = layer.digest
            if self.layers.has(diff_id) and self.content.has(layer.digest):
                emit(events.Event(events.CACHED, item, layer.size or 0, layer.size))
                return
            meter = events.Meter(emit, events.DOWNLOADING, item, layer.size)
            added.blob(self.content, layer.digest)
            fetched = self.content.ingest(
                layer.digest, layer.size, lambda w: source.copy_blob(layer, w), on_bytes=meter
            )
            if fetched:
                emit(events.Event(events.VERIFYING, item, layer.size or 0, layer.size))
            unpack_meter = events.Meter(emit, events.UNPACKING, item, layer.size)
            added.layer(self.layers, diff_id)
            unpacked = self.layers.ensure(
                diff_id, layer.digest, layer.size, on_bytes=unpack_meter, budget=budget
            )
            with lock:
                result.blobs_fetched += int(fetched)
                result.layers_unpacked += int(unpacked)
            emit(events.Event(events.DONE, item, layer.size or 0, layer.size))

        if len(layers) <= 1:
            for layer, diff_id in zip(layers, layer_ids, strict=True):
                one(layer, diff_id)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(WORKERS, len(layers))) as pool:
            futures = [pool.submit(one, x, d) for x, d in zip(layers, layer_ids, strict=True)]
            errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err


class _Added:
    """What a pull wrote that was not in the store before it (or was being written):
    a failed pull gives it back (``Collector.discard``, which keeps whatever a name or
    a container uses by then)."""

    __slots__ = ("blobs", "layers", "lock")

    def __init__(self) -> None:
        import _thread

        self.blobs: list[str] = []
        self.layers: list[str] = []
        self.lock = _thread.allocate_lock()  # layers come in threads

    def blob(self, content: ContentStore, digest: str) -> None:
        if not content.has(digest):
            with self.lock:
                self.blobs.append(digest)

    def layer(self, layers: LayerCache, diff_id: str) -> None:
        if not layers.has(diff_id):
            with self.lock:
                self.layers.append(diff_id)


def _ignore(event: events.Event) -> None:
    pass


def _check_manifest(manifest: imagespec.Manifest, digest: str) -> imagespec.Descriptor:
    """The manifest's config descriptor, once its config and layers are of kinds we take."""
    config_desc = manifest.config
    if config_desc is None or config_desc.digest is None:
        raise ImageError(f"manifest {digest} has no config")
    if config_desc.media_type not in (*imagespec.CONFIG_TYPES, None):
        raise ImageError(f"not a container image (config type {config_desc.media_type})")
    for layer in manifest.layers or []:
        if layer.media_type in imagespec.FOREIGN_LAYER_TYPES:
            raise ImageError(f"foreign layer {layer.digest} ({layer.media_type}) refused")
        if layer.media_type not in (*imagespec.LAYER_TYPES, None):
            raise ImageError(f"unsupported layer type {layer.media_type!r}")
        if layer.digest is None:
            raise ImageError(f"manifest {digest} has a layer without a digest")
    return config_desc


def default_name(ref: refs.Reference, source: Source) -> str:
    """The name of an image pulled without ``--name``."""
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
    except InvalidReference:
        return f"localhost/{cleaned}:latest"
