"""Pushing: an image to a registry (``hostjob push``, ``hostjob pack --to docker://``).

The image is one in the store (a name, ``name@digest`` or an ID prefix) or an
``oci:``, ``oci-archive:`` or ``docker-archive:`` reference. Its config and layer
blobs go first: each one the repository has already (``HEAD``) is skipped, the
others are uploaded monolithically (``POST`` a session, ``PUT`` the bytes with the
digest, streamed from the file: the registry verifies them). The manifest goes last,
``PUT`` under the tag with its own media type, so the image appears whole or not at
all. A store image pulled from an index is pushed as the one platform's manifest the
store holds; an index in a layout is refused (name one image).

Credentials follow the registry client's rules (SECURITY.md): they go to the
registry's own origin and to a token realm it names over HTTPS, never elsewhere.

The signature policy is asked about the image pushed, as ``podman push`` and
``skopeo copy`` ask it about their source: an archive is decided like an ``import``
of it, before anything is sent; an image of the store is let through (podman's rule
for its own storage: the policy decided when the image came in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.images import imagespec
from hostjob.images import progress as events
from hostjob.images import reference as refs
from hostjob.images.errors import InvalidReference, RegistryError

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.content import Readable
    from hostjob.images.options import RegistryOptions, TrustOptions
    from hostjob.images.progress import Progress
    from hostjob.images.trust.evaluate import Verifier


class PushResult:
    """What a push did: the reference and manifest digest it wrote, the blobs it sent."""

    __slots__ = ("bytes", "digest", "existing", "reference", "uploaded")

    def __init__(self, reference: str, digest: str) -> None:
        self.reference = reference  # the canonical name pushed to
        self.digest = digest  # the manifest's
        self.uploaded = 0  # blobs sent
        self.existing = 0  # blobs the repository had already
        self.bytes = 0  # sent

    def __repr__(self) -> str:
        return f"PushResult({self.reference!r}, {self.digest!r})"


class _Image:
    """The image to push: its manifest (bytes, media type, decoded) and its blobs."""

    __slots__ = ("close", "manifest", "media_type", "open_blob", "raw")

    def __init__(
        self,
        raw: bytes,
        media_type: str | None,
        open_blob: Callable[[imagespec.Descriptor], Readable],
        close: Callable[[], None],
    ) -> None:
        self.raw = raw
        self.media_type = media_type or imagespec.sniff_media_type(raw) or imagespec.OCI_MANIFEST
        if self.media_type in imagespec.INDEX_TYPES:
            close()
            raise RegistryError("pushing an image index is not supported; name one image")
        if self.media_type not in imagespec.MANIFEST_TYPES:
            close()
            raise RegistryError(f"cannot push a {self.media_type!r}: not an image manifest")
        self.manifest = imagespec.decode_blob(imagespec.Manifest, raw, "manifest")
        self.open_blob = open_blob
        self.close = close

    def blobs(self) -> list[imagespec.Descriptor]:
        found = [self.manifest.config, *(self.manifest.layers or [])]
        out = []
        for desc in found:
            if desc is None or desc.digest is None:
                raise RegistryError("the manifest has a config or layer without a digest")
            out.append(desc)
        return out


def target(dest: str) -> refs.Reference:
    """The registry reference a push writes to (``[docker://]host[:port]/name:tag``)."""
    ref = refs.parse(dest)
    if not ref.is_registry or ref.repository is None:
        raise InvalidReference(
            f"push needs a registry reference ([docker://]host/name:tag), not {dest!r}"
        )
    return ref


def push(
    src: str,
    dest: str,
    *,
    store_root: str | None = None,
    registry: RegistryOptions | None = None,
    trust: TrustOptions | None = None,
    progress: Progress | None = None,
) -> PushResult:
    """Push ``src`` (a store image, or an ``oci:``/``oci-archive:``/``docker-archive:``
    reference the signature policy ``trust`` names accepts) to the registry reference
    ``dest``, reached as ``registry`` says (else with the defaults)."""
    from hostjob.images.options import RegistryOptions
    from hostjob.images.registry import RegistryClient
    from hostjob.images.trust.evaluate import Verifier

    to = target(dest)
    assert to.repository is not None
    emit = progress or _ignore
    image = _open(src, store_root, Verifier(trust))
    try:
        emit(events.Event(events.RESOLVING, to.name))
        options = registry or RegistryOptions()
        with RegistryClient(
            to.registry_host, options, domain=to.domain, repository=to.repository
        ) as client:
            sent = PushResult(to.name, "")
            for desc in image.blobs():
                assert desc.digest is not None
                item, size = desc.digest, desc.size
                if client.pusher.exists(to.repository, desc.digest):
                    sent.existing += 1
                    emit(events.Event(events.EXISTS, item, size or 0, size))
                    continue
                meter = events.Meter(emit, events.UPLOADING, item, size)
                client.pusher.upload(to.repository, desc, image.open_blob, on_bytes=meter)
                sent.uploaded += 1
                sent.bytes += size or 0
                emit(events.Event(events.DONE, item, size or 0, size))
            sent.digest = client.pusher.put_manifest(
                to.repository, to.reference, image.raw, image.media_type
            )
    finally:
        image.close()
    emit(events.Event(events.DONE, to.name))
    return sent


def _open(src: str, store_root: str | None, verifier: Verifier) -> _Image:
    """The image named by ``src``: a local reference's source (if the policy accepts
    it), else a store image."""
    try:
        ref: refs.Reference | None = refs.parse(src)
    except InvalidReference:
        ref = None
    if ref is not None and not ref.is_registry:
        from hostjob.images.content import digest_of
        from hostjob.images.sources import open_local
        from hostjob.images.trust import scopes

        source = open_local(ref)
        try:
            raw, media_type, digest = source.top()
            scope = scopes.of(ref)
            signed = digest_of(raw, digest)
            verifier.require(
                str(ref),
                scope,
                raw,
                signed,
                lambda: source.signatures(signed, scope, verifier.registries),
            )
        except BaseException:
            source.close()
            raise
        return _Image(raw, media_type, source.open_blob, source.close)
    from hostjob.images.store import Store

    store = Store(store_root)
    lease = store.gc.lease()  # the blobs stay while they are read (prune waits)
    try:
        _names, digest = store.lookup(src)
        raw = store.content.read(digest)
    except BaseException:
        lease.release()
        raise

    def open_blob(desc: imagespec.Descriptor) -> Readable:
        assert desc.digest is not None
        return store.content.open(desc.digest)

    return _Image(raw, None, open_blob, lease.release)


def _ignore(event: events.Event) -> None:
    pass
