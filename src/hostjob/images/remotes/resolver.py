"""A tag or digest -> the manifest or index it names, verified.

A manifest is read up to ``MANIFEST_LIMIT`` (streamed: the read stops there); asked
by digest it must have that digest, and a ``Docker-Content-Digest`` the registry
sends must match what came.
Transient answers (429, 5xx) and dropped connections are retried with backoff.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hostjob.errors import HostjobError
from hostjob.images import imagespec
from hostjob.images.errors import DigestMismatch, RegistryError
from hostjob.images.remotes import transport

if TYPE_CHECKING:
    from hostjob.images.remotes.session import Session

MANIFEST_ACCEPT = ", ".join(
    [
        imagespec.OCI_MANIFEST,
        imagespec.OCI_INDEX,
        imagespec.DOCKER_MANIFEST,
        imagespec.DOCKER_MANIFEST_LIST,
    ]
)
MANIFEST_LIMIT = 4 << 20


class ManifestResolver:
    """Manifests and indexes of one registry."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str | None, str]:
        """``(bytes, media type, digest)`` of a manifest or index, by tag or digest."""
        session = self.session
        host = session.host
        scope = f"repository:{repo}:pull"
        for attempt in range(session.retries + 1):
            try:
                response = session.send(
                    "GET",
                    f"/v2/{repo}/manifests/{reference}",
                    scope,
                    {"Accept": MANIFEST_ACCEPT},
                )
            except RegistryError as err:
                if attempt == session.retries or not transport.transient(err):
                    raise
                time.sleep(transport.backoff(attempt + 1, None))
                continue
            if response.status_code not in transport.TRANSIENT or attempt == session.retries:
                break
            response.close()  # its body unread: whatever it holds, we only retry
            time.sleep(transport.backoff(attempt + 1, response))
        try:
            if response.status_code != 200:
                raise transport.registry_error(response, f"{host}/{repo}:{reference}")
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > MANIFEST_LIMIT:
                    raise RegistryError(f"{host}/{repo}:{reference}: manifest is too large")
        except HostjobError:
            raise
        except Exception as err:
            raise RegistryError(f"{host}/{repo}:{reference}: {err}") from err
        finally:
            response.close()
        raw = bytes(body)
        import hashlib

        algorithm = reference.partition(":")[0] if imagespec.is_digest(reference) else "sha256"
        digest = f"{algorithm}:{hashlib.new(algorithm, raw).hexdigest()}"
        if imagespec.is_digest(reference) and digest != reference:
            raise DigestMismatch(f"manifest {reference} from {host} has digest {digest}")
        header_digest = response.headers.get("docker-content-digest")
        if header_digest and header_digest.startswith(f"{algorithm}:") and header_digest != digest:
            raise DigestMismatch(
                f"manifest of {repo}:{reference} has digest {digest}, the registry says"
                f" {header_digest}"
            )
        media_type = response.headers.get("content-type", "").split(";")[0].strip() or None
        if media_type in (None, "application/json", "application/octet-stream", "text/plain"):
            media_type = imagespec.sniff_media_type(raw)
        return raw, media_type, digest
