"""Where an image's signatures are found, as containers/image finds them.

    lookaside     simple signatures beside the registry: ``BASE/REPO@sha256=HEX/signature-1``,
                  ``-2``, ... until one is missing (``file://``, ``http://``, ``https://``;
                  ``registries_d`` names BASE)
    attachments   sigstore signatures in the registry: the layers of the manifest tagged
                  ``sha256-HEX.sig`` in the image's repository, when ``registries.d``
                  enables ``use-sigstore-attachments``
    layout        the same, carried by an OCI layout: a manifest whose ref name is that
                  tag, or one ``cosign save`` marks as the signatures
                  (``kind: dev.cosignproject.cosign/sigs``) of its one image

Signature stores are untrusted (only what verifies counts): at most
``MAX_SIGNATURES`` signatures of at most ``SIGNATURE_LIMIT`` bytes each are read, a
blob must have its digest, and nothing is read past its bound.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.images import imagespec
from hostjob.images.errors import DigestMismatch, ImageError, ImageNotFound, RegistryError
from hostjob.images.trust import formats

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.remotes.fetcher import BlobFetcher
    from hostjob.images.remotes.resolver import ManifestResolver
    from hostjob.images.trust.formats import Signature

SIGNATURE_LIMIT = 4 << 20
MAX_SIGNATURES = 128
SIGS_KIND = "dev.cosignproject.cosign/sigs"
KIND_ANNOTATION = "kind"


def attachment_tag(digest: str) -> str:
    """``sha256:HEX`` -> ``sha256-HEX.sig``."""
    return digest.replace(":", "-", 1) + ".sig"


def lookaside_url(base: str, repository: str, digest: str, index: int) -> str:
    algorithm, _, encoded = digest.partition(":")
    return f"{base}/{repository}@{algorithm}={encoded}/signature-{index}"


def lookaside(base: str, repository: str, digest: str, stall: float) -> list[Signature]:
    """The simple signatures of ``repository``'s manifest ``digest`` under ``base``."""
    import urllib.parse

    scheme = urllib.parse.urlsplit(base).scheme
    if scheme == "file":
        read = _file_reader()
    elif scheme in ("http", "https"):
        read = _http_reader(stall)
    else:
        raise ImageError(f"lookaside {base}: unsupported scheme {scheme!r} (file, http, https)")
    found: list[Signature] = []
    try:
        for index in range(1, MAX_SIGNATURES + 2):
            if index > MAX_SIGNATURES:
                raise ImageError(f"lookaside {base}: more than {MAX_SIGNATURES} signatures")
            blob = read(lookaside_url(base, repository, digest, index))
            if blob is None:
                break
            found.append(formats.from_blob(blob))
    finally:
        close = getattr(read, "close", None)
        if close is not None:
            close()
    return found


def _file_reader() -> Callable[[str], bytes | None]:
    import stat
    import urllib.parse

    def read(url: str) -> bytes | None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise ImageError(f"cannot read signature {path}: {err.strerror}") from err
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ImageError(f"signature {path} is not a file")
            data = f.read(SIGNATURE_LIMIT + 1)
        if len(data) > SIGNATURE_LIMIT:
            raise ImageError(f"signature {path} is larger than {SIGNATURE_LIMIT >> 20} MiB")
        return data

    return read


class _HttpReader:
    """GETs of a lookaside web server: 404 is the end of the list, 200 a signature
    (bounded), anything else an error. No credentials ever go there."""

    def __init__(self, stall: float) -> None:
        import httpx

        from hostjob.images.remotes.stall import WatchedTransport
        from hostjob.images.remotes.transport import TIMEOUT, USER_AGENT

        self.client = httpx.Client(
            transport=WatchedTransport(True, stall),
            timeout=httpx.Timeout(TIMEOUT, connect=min(TIMEOUT, 15.0)),
            follow_redirects=True,
            max_redirects=5,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )

    def __call__(self, url: str) -> bytes | None:
        import httpx

        from hostjob.images.remotes import transport

        try:
            response = self.client.send(self.client.build_request("GET", url), stream=True)
            if response.status_code == 404:
                response.close()
                return None
            if response.status_code != 200:
                response.close()
                raise RegistryError(f"lookaside {url}: HTTP {response.status_code}")
            data = transport.read_at_most(response, SIGNATURE_LIMIT)
        except httpx.HTTPError as err:
            raise RegistryError(f"lookaside {url}: {transport.one_line(err)}") from err
        if data is None:
            raise RegistryError(f"lookaside {url}: larger than {SIGNATURE_LIMIT >> 20} MiB")
        return data

    def close(self) -> None:
        self.client.close()


def _http_reader(stall: float) -> _HttpReader:
    return _HttpReader(stall)


def attachments(
    resolver: ManifestResolver, fetcher: BlobFetcher, repository: str, digest: str
) -> list[Signature]:
    """The sigstore signatures attached to ``digest`` in a registry's ``repository``
    (its manifests and blobs reached through ``resolver`` and ``fetcher``)."""
    try:
        raw, media_type, _ = resolver.manifest(repository, attachment_tag(digest))
    except ImageNotFound:
        return []
    if media_type != imagespec.OCI_MANIFEST:
        raise ImageError(f"signature attachment of {digest}: unexpected type {media_type!r}")

    def fetch(desc: imagespec.Descriptor) -> bytes:
        buffer = _Buffer()
        fetcher.fetch(repository, desc, buffer)
        return buffer.data()

    return _from_manifest(raw, fetch, f"signature attachment of {digest}")


def layout_entries(manifests: list[imagespec.Descriptor], digest: str) -> list[str]:
    """The digests of the signature manifests an OCI layout's index holds for
    ``digest``: tagged ``sha256-HEX.sig``, or marked as cosign save marks them when
    the layout holds ``digest`` as its one image."""
    tag = attachment_tag(digest)
    images = [d for d in manifests if (d.annotations or {}).get(KIND_ANNOTATION) != SIGS_KIND]
    out = []
    for desc in manifests:
        ann = desc.annotations or {}
        if ann.get(imagespec.ANNOTATION_REF_NAME) == tag or (
            ann.get(KIND_ANNOTATION) == SIGS_KIND
            and [d.digest for d in images if not is_signature_entry(d)] == [digest]
        ):
            assert desc.digest is not None
            out.append(desc.digest)
    return out


def is_signature_entry(desc: imagespec.Descriptor) -> bool:
    """An index entry that holds signatures, not an image to pull."""
    ann = desc.annotations or {}
    name = ann.get(imagespec.ANNOTATION_REF_NAME) or ""
    return ann.get(KIND_ANNOTATION) == SIGS_KIND or (
        name.endswith(".sig") and imagespec.is_digest(name[:-4].replace("-", ":", 1))
    )


def from_layout(
    read: Callable[[str], bytes], manifests: list[imagespec.Descriptor], digest: str
) -> list[Signature]:
    """The sigstore signatures a layout carries for ``digest`` (``read``: a blob by
    digest, verified)."""

    def fetch(desc: imagespec.Descriptor) -> bytes:
        assert desc.digest is not None
        return read(desc.digest)

    found: list[Signature] = []
    for entry in layout_entries(manifests, digest):
        found += _from_manifest(read(entry), fetch, f"signature manifest {entry}")
        if len(found) > MAX_SIGNATURES:
            raise ImageError(f"the layout holds more than {MAX_SIGNATURES} signatures")
    return found


def _from_manifest(
    raw: bytes, fetch: Callable[[imagespec.Descriptor], bytes], what: str
) -> list[Signature]:
    manifest = imagespec.decode_blob(imagespec.Manifest, raw, what)
    layers = manifest.layers or []
    if len(layers) > MAX_SIGNATURES:
        raise ImageError(f"{what}: more than {MAX_SIGNATURES} signatures")
    found: list[Signature] = []
    for layer in layers:
        if layer.digest is None or layer.size is None or not 0 <= layer.size <= SIGNATURE_LIMIT:
            raise ImageError(f"{what}: a signature without a digest, or larger than 4 MiB")
        data = fetch(layer)
        check_digest(data, layer.digest, what)
        found.append(
            formats.SigstoreSignature(layer.media_type or "", data, dict(layer.annotations or {}))
        )
    return found


def check_digest(data: bytes, digest: str, what: str) -> None:
    import hashlib

    algorithm, _, encoded = digest.partition(":")
    if algorithm not in imagespec.DIGEST_ALGORITHMS:
        raise DigestMismatch(f"{what}: unsupported digest {digest!r}")
    if hashlib.new(algorithm, data).hexdigest() != encoded:
        raise DigestMismatch(f"{what}: a blob does not match its digest {digest}")


class _Buffer:
    """A bounded in-memory writer for ``BlobFetcher.fetch`` (``offset`` for resumes)."""

    __slots__ = ("chunks", "offset")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.offset = 0

    def write(self, data: bytes) -> int:
        self.offset += len(data)
        if self.offset > SIGNATURE_LIMIT:
            raise ImageError(f"a signature is larger than {SIGNATURE_LIMIT >> 20} MiB")
        self.chunks.append(data)
        return len(data)

    def reset(self) -> None:
        self.chunks.clear()
        self.offset = 0

    def data(self) -> bytes:
        return b"".join(self.chunks)
