"""A registry, over the OCI distribution API: the client and the pull source.

``RegistryClient`` puts the parts of ``hostjob.images.remotes`` together for one
registry host: a ``Session`` (its HTTP, its authorizer), and the ``resolver``
(manifests), ``fetcher`` (blobs) and ``pusher`` (uploads) that talk through it.
``RegistrySource`` is a registry image as a ``Store.pull`` source.

Registries are untrusted (SECURITY.md, "Registries"): credentials go to the
registry's own origin and to a token realm over HTTPS only (``remotes.auth``,
``remotes.session``), and every blob is verified before it is stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.images.remotes.fetcher import BlobFetcher
from hostjob.images.remotes.pusher import Pusher
from hostjob.images.remotes.resolver import ManifestResolver
from hostjob.images.remotes.session import Session

if TYPE_CHECKING:
    from hostjob.images import imagespec
    from hostjob.images.content import Writer
    from hostjob.images.options import RegistryOptions
    from hostjob.images.reference import Reference
    from hostjob.images.trust.formats import Signature
    from hostjob.images.trust.registries_d import RegistriesD
    from hostjob.images.trust.scopes import ImageScope


class RegistryClient:
    """One registry host (``domain``: the name its credentials are filed under, with
    ``repository``'s namespaces), reached as ``options`` say."""

    __slots__ = ("fetcher", "host", "pusher", "resolver", "session")

    def __init__(
        self,
        host: str,
        options: RegistryOptions,
        *,
        domain: str | None = None,
        repository: str | None = None,
    ) -> None:
        self.host = host
        self.session = Session(host, options, domain=domain, repository=repository)
        self.resolver = ManifestResolver(self.session)
        self.fetcher = BlobFetcher(self.session)
        self.pusher = Pusher(self.session)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RegistrySource:
    """A registry image as a ``Store.pull`` source."""

    def __init__(self, ref: Reference, options: RegistryOptions) -> None:
        assert ref.repository is not None
        self.ref = ref
        self.repo = ref.repository
        self.description = ref.name
        self.name_hint: str | None = None
        self.options = options
        self.client = RegistryClient(
            ref.registry_host, options, domain=ref.domain, repository=ref.repository
        )

    def top(self) -> tuple[bytes, str | None, str | None]:
        return self.client.resolver.manifest(self.repo, self.ref.reference)

    def manifest(self, desc: imagespec.Descriptor) -> bytes:
        assert desc.digest is not None
        raw, _media_type, _digest = self.client.resolver.manifest(self.repo, desc.digest)
        return raw

    def copy_blob(self, desc: imagespec.Descriptor, writer: Writer) -> None:
        self.client.fetcher.fetch(self.repo, desc, writer)

    def signatures(self, digest: str, scope: ImageScope, config: RegistriesD) -> list[Signature]:
        """The signatures of the manifest ``digest``: simple ones from the lookaside
        ``config`` names for this repository, sigstore ones attached in the registry
        when ``config`` enables them (``hostjob.images.trust.stores``)."""
        from hostjob.images.trust import stores

        base = config.lookaside(scope)
        found = stores.lookaside(base, self.repo, digest, self.options.stall_timeout)
        if config.use_sigstore_attachments(scope):
            found += stores.attachments(
                self.client.resolver, self.client.fetcher, self.repo, digest
            )
        return found

    def close(self) -> None:
        self.client.close()
