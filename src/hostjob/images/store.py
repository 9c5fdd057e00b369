"""The image store: a small facade over its parts (default ``$HOSTJOB_STORE``, else
``/var/lib/hostjob``).

Each part owns a piece of the store's directory (``hostjob.images.root``) and is
usable on its own::

    store.content    blobs by digest: verified ingest, read    (images.content)
    store.layers     the unpacked-layer cache by diffID        (images.layers)
    store.names      the name index                            (images.names)
    store.gc         container references, the lease, prune   (images.gc)
    store.resolver   names -> images, rows, details            (images.resolve)

The verbs below are what the CLI and ``hostjob run IMAGE`` call; each returns a typed
record, which the CLI renders.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument
from hostjob.images import reference as refs
from hostjob.images.content import ContentStore
from hostjob.images.errors import ImageNotFound, InvalidReference
from hostjob.images.gc import Collector, ContainerRef
from hostjob.images.layers import LayerCache
from hostjob.images.names import NameIndex
from hostjob.images.resolve import ResolvedImage, Resolver
from hostjob.images.root import StoreRoot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.images.gc import Freed, Removed
    from hostjob.images.options import RegistryOptions, TrustOptions, UnpackLimits
    from hostjob.images.progress import Progress
    from hostjob.images.pull import PullResult
    from hostjob.images.resolve import ImageDetails, ImageSummary

PULL_POLICIES = ("always", "missing", "never")


class Store:
    """One image store: its parts, and the verbs the CLI calls."""

    __slots__ = ("content", "gc", "layers", "names", "resolver", "root")

    def __init__(self, root: str | None = None) -> None:
        top = StoreRoot(root)
        self.root = top.path
        self.content = ContentStore(top)
        self.layers = LayerCache(top, self.content)
        self.names = NameIndex(top, self.content)
        self.gc = Collector(top, self.content, self.layers, self.names)
        self.resolver = Resolver(self.content, self.layers, self.names, self.gc)

    # --- pulling ----------------------------------------------------------------------

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
        """Fetch an image from any source (registry or archive) into the store and name
        it, if the signature policy ``trust`` names accepts it
        (``hostjob.images.pull.Puller.pull``)."""
        from hostjob.images.pull import Puller

        puller = Puller(self.content, self.layers, self.names, self.gc)
        return puller.pull(
            ref,
            name=name,
            platform=platform,
            registry=registry,
            limits=limits,
            trust=trust,
            progress=progress,
        )

    def import_archive(
        self,
        ref: str,
        *,
        name: str | None = None,
        limits: UnpackLimits | None = None,
        trust: TrustOptions | None = None,
        progress: Progress | None = None,
    ) -> PullResult:
        """``import``: an ``oci:``, ``oci-archive:`` or ``docker-archive:`` reference,
        if the signature policy accepts it."""
        if refs.parse(ref).is_registry:
            raise InvalidReference(
                f"{ref!r} is a registry reference; import takes oci:, oci-archive: or"
                " docker-archive:"
            )
        return self.pull(ref, name=name, limits=limits, trust=trust, progress=progress)

    def get(
        self,
        ref: str,
        *,
        pull: str = "missing",
        platform: str | None = None,
        registry: RegistryOptions | None = None,
        limits: UnpackLimits | None = None,
        trust: TrustOptions | None = None,
        progress: Progress | None = None,
    ) -> ResolvedImage:
        """The image ``hostjob run IMAGE`` means, pulled per ``--pull always|missing|never``.

        ``ref`` may be a store name, an image ID (prefix), a registry reference, or a
        local ``oci:``/``oci-archive:``/``docker-archive:`` one (always imported: it is
        local, and content already in the store is not copied again). ``platform``,
        ``registry``, ``limits`` and ``trust`` are the pull's: an image already in the
        store is not verified again (the policy decided when it came in).
        """
        if pull not in PULL_POLICIES:
            raise InvalidArgument(f"--pull {pull!r}: expected always, missing or never")
        if refs.parse(ref).is_registry and pull != "always":
            try:
                return self.resolve(ref)
            except ImageNotFound as err:
                if pull == "never":
                    raise ImageNotFound(f"no such image: {ref} (and --pull never)") from err
        pulled = self.pull(
            ref,
            platform=platform,
            registry=registry,
            limits=limits,
            trust=trust,
            progress=progress,
        )
        return self.resolve(pulled.name)

    # --- reading ----------------------------------------------------------------------

    def lookup(self, name: str) -> tuple[list[str], str]:
        """``(names, manifest digest)`` of a stored image, from the names alone (a broken
        image is found too); ``ImageNotFound`` when there is none."""
        return self.names.lookup(name)

    def resolve(self, name: str, unpack_missing: bool = True) -> ResolvedImage:
        """The image's manifest, config and layer dirs (bottom first), for a container;
        missing layer dirs are unpacked again from their blobs if ``unpack_missing``."""
        return self.resolver.resolve(name, unpack_missing)

    def images(self) -> list[ImageSummary]:
        """One per name, sorted: name, ID, digest, created, size, platform."""
        return self.resolver.summaries()

    def inspect(self, name: str) -> ImageDetails:
        """Everything about one image: names, digests, manifest, config, layers."""
        return self.resolver.details(name)

    # --- containers -------------------------------------------------------------------

    def containers(self) -> dict[str, ContainerRef]:
        return self.gc.containers()

    # --- removing ---------------------------------------------------------------------

    def remove(self, name: str, force: bool = False) -> Removed:
        """``rmi``: drop the name(s), then free what nothing uses any more; an image a
        registered container uses is refused unless ``force``."""
        return self.gc.remove(name, force)

    def prune(self) -> Freed:
        """Remove every blob and layer no image name or registered container uses."""
        return self.gc.prune()
