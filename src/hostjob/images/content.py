"""Content: the store's blobs by digest (containerd's content store).

    blobs/<alg>/<hex>     every blob: manifests, indexes, configs, layer tars
    locks/blob-*.lock     one writer per blob

A blob is written once, verified while it streams in (its size and digest, counted
and hashed by ``Digester``) into a temp file renamed into place, durably
(``fsutil.AtomicFile``): a reader never sees a partial or a wrong blob, and a wrong
one leaves nothing.
Concurrent writers of one blob take its lock; the second finds the work done. A temp
file a killed writer left is removed by the next writer of that blob, or by prune.

Small blobs (manifests, configs) are read whole and verified again on every read,
by CPython's built-in sha256/sha512: hashlib's OpenSSL backend costs ~3 ms to load,
which a cached ``run IMAGE`` would pay for two metadata blobs.
"""

from __future__ import annotations

import os

from hostjob import faults
from hostjob.images import imagespec
from hostjob.images import root as storedir
from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound
from hostjob.linux import fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, BinaryIO, Protocol

    from hostjob.images.root import StoreRoot

    class Readable(Protocol):
        """Where bytes come from (a file, an archive member, a decompressor)."""

        def read(self, size: int = -1, /) -> bytes: ...

    class Writer(Protocol):
        """Where a source copies a blob's bytes (a ``Digester``, a buffer)."""

        def write(self, data: bytes, /) -> object: ...


METADATA_LIMIT = 64 << 20  # a manifest, index or config larger than this is refused
CHUNK = 1 << 20


class Digester:
    """A stream that hashes and counts the bytes going through it: ``read()`` pulls
    them from ``stream``, ``write()`` pushes them into it (the one class for the
    blobs a pull stores, the layers unpack reads and the layers pack writes).

    More bytes than ``limit`` fail at once (``DigestMismatch``); ``on_bytes(count)``
    is told the running count; ``reset()`` starts a written file over (a registry
    that ignored a Range request); ``offset`` is how much went through (for resuming).
    """

    __slots__ = ("algorithm", "count", "hasher", "limit", "on_bytes", "stream", "what")

    def __init__(
        self,
        stream: Any,
        algorithm: str = "sha256",
        *,
        limit: int | None = None,
        on_bytes: Callable[[int], None] | None = None,
        what: str = "blob",
    ) -> None:
        import hashlib

        self.stream = stream
        self.algorithm = algorithm
        self.hasher = hashlib.new(algorithm)
        self.count = 0
        self.limit = limit
        self.on_bytes = on_bytes
        self.what = what

    @property
    def offset(self) -> int:
        return self.count

    def _take(self, data: bytes) -> None:
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            raise DigestMismatch(f"{self.what} is larger than its declared size {self.limit}")
        self.hasher.update(data)

    def read(self, size: int = -1, /) -> bytes:
        data: bytes = self.stream.read(size)
        if data:
            self._take(data)
            if self.on_bytes is not None:
                self.on_bytes(self.count)
        return data

    def readinto(self, buffer: Any, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        """Read to the end (the bytes after a tar's end marker count too)."""
        while self.read(CHUNK):
            pass

    def write(self, data: bytes, /) -> int:
        self._take(data)
        self.stream.write(data)
        if self.on_bytes is not None:
            self.on_bytes(self.count)
        return len(data)

    def flush(self) -> None:
        pass  # the caller flushes (and fsyncs) the file it gave

    def reset(self) -> None:
        import hashlib

        self.stream.seek(0)
        self.stream.truncate()
        self.hasher = hashlib.new(self.algorithm)
        self.count = 0

    def digest(self) -> str:
        return f"{self.algorithm}:{self.hasher.hexdigest()}"


def split_digest(digest: str) -> tuple[str, str]:
    """``sha256:<hex>`` -> ``("sha256", "<hex>")``; anything else is an ``ImageError``."""
    if not imagespec.is_digest(digest):
        raise ImageError(f"invalid digest {digest!r}")
    algorithm, _, encoded = digest.partition(":")
    return algorithm, encoded


def hexdigest(algorithm: str, data: bytes) -> str:
    """The digest of a small blob, by CPython's built-in sha256/sha512 (no OpenSSL): the
    module ``_sha2`` from Python 3.12, ``_sha256`` and ``_sha512`` before."""
    if algorithm in ("sha256", "sha512"):
        module: Any  # no type stubs for these
        try:
            module = __import__("_sha2")
        except ModuleNotFoundError:
            module = __import__(f"_{algorithm}")
        digest: str = getattr(module, algorithm)(data).hexdigest()
        return digest
    import hashlib

    return hashlib.new(algorithm, data).hexdigest()


def digest_of(raw: bytes, expected: str | None = None, size: int | None = None) -> str:
    """The digest of a manifest or index read from a source, which must be
    ``expected`` (and ``size`` bytes long) when given: what a signature policy decides
    on is what is then stored."""
    if size is not None and len(raw) != size:
        raise DigestMismatch(f"manifest {expected} is {len(raw)} bytes, expected {size}")
    algorithm = (expected or "sha256:").partition(":")[0]
    if algorithm not in imagespec.DIGEST_ALGORITHMS:
        raise DigestMismatch(f"unsupported digest {expected!r}")
    digest = f"{algorithm}:{hexdigest(algorithm, raw)}"
    if expected is not None and digest != expected:
        raise DigestMismatch(f"manifest {expected} has digest {digest}")
    return digest


class ContentStore:
    """The blobs of one store, by digest."""

    __slots__ = ("root",)

    def __init__(self, root: StoreRoot) -> None:
        self.root = root

    def path(self, digest: str) -> str:
        algorithm, encoded = split_digest(digest)
        return self.root.join("blobs", algorithm, encoded)

    def has(self, digest: str) -> bool:
        return os.path.exists(self.path(digest))

    def open(self, digest: str) -> BinaryIO:
        """The stored blob, for reading (a layer to unpack or push)."""
        try:
            return open(self.path(digest), "rb")
        except FileNotFoundError as err:
            raise ImageNotFound(f"blob {digest} is not in the store") from err

    def read(self, digest: str, limit: int = METADATA_LIMIT) -> bytes:
        """A small (metadata) blob's bytes, verified again."""
        with self.open(digest) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ImageError(f"blob {digest} is too large for metadata")
        algorithm = digest.partition(":")[0]
        if f"{algorithm}:{hexdigest(algorithm, data)}" != digest:
            raise DigestMismatch(f"stored blob {digest} is corrupt")
        return data

    def manifest(self, digest: str) -> imagespec.Manifest:
        return imagespec.decode_blob(imagespec.Manifest, self.read(digest), f"manifest {digest}")

    def config(self, digest: str) -> imagespec.ImageConfig:
        return imagespec.decode_blob(imagespec.ImageConfig, self.read(digest), f"config {digest}")

    def write(self, data: bytes, digest: str | None = None) -> str:
        """Store ``data``; returns its digest (checked against ``digest`` if given)."""
        return self.put(data, digest)[0]

    def put(self, data: bytes, digest: str | None = None) -> tuple[str, bool]:
        """``write``, telling also whether the blob is new (False: it was there)."""
        algorithm = digest.partition(":")[0] if digest else "sha256"
        actual = f"{algorithm}:{hexdigest(algorithm, data)}"
        if digest is not None and actual != digest:
            raise DigestMismatch(f"content digest is {actual}, expected {digest}")

        def fill(writer: Digester) -> None:
            writer.write(data)

        return actual, self.ingest(actual, len(data), fill)

    def ingest(
        self,
        digest: str,
        size: int | None,
        fill: Callable[[Digester], None],
        on_bytes: Callable[[int], None] | None = None,
    ) -> bool:
        """Make sure blob ``digest`` is stored: ``fill(writer)`` supplies its bytes.

        Returns False when it was there already (nothing fetched). Verified before
        the rename: a wrong size or digest leaves nothing.
        """
        path = self.path(digest)
        if os.path.exists(path):
            return False
        self.root.ensure()
        folder = os.path.dirname(path)
        fsutil.ensure_dir(folder)
        algorithm, encoded = split_digest(digest)

        def arrived(count: int) -> None:
            if size is None or count < size:
                faults.point("pull:mid-blob")  # part of the blob is in its temp file
            if on_bytes is not None:
                on_bytes(count)

        with self.root.lock(f"locks/blob-{algorithm}-{encoded}.lock"):
            if os.path.exists(path):
                return False
            # Under the blob's lock no other writer of it runs: a temp file of this
            # blob is what a killed pull left, removed before we start.
            storedir.remove_stale(folder, f".{encoded}.tmp-")
            with fsutil.AtomicFile(path, durable=True) as f:
                writer = Digester(f, algorithm, limit=size, on_bytes=arrived)
                fill(writer)
                if size is not None and writer.count != size:
                    raise DigestMismatch(
                        f"blob {digest} is {writer.count} bytes, its descriptor says {size}"
                    )
                if writer.digest() != digest:
                    raise DigestMismatch(f"blob digest is {writer.digest()}, expected {digest}")
        return True

    def digests(self) -> Iterator[str]:
        """Every stored blob's digest (temp files left out)."""
        for algorithm in storedir.listdir(self.root.join("blobs")):
            for entry in storedir.listdir(self.root.join("blobs", algorithm)):
                if not entry.startswith("."):
                    yield f"{algorithm}:{entry}"
