"""Blobs and manifests up to a registry.

A blob the repository has already (``HEAD``) is skipped; the others are uploaded
monolithically: ``POST`` an upload session, then one ``PUT`` of the bytes with the
digest, streamed (the registry checks the digest and refuses a blob that does not
match). The manifest goes last, so the image appears whole or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.images.errors import DigestMismatch
from hostjob.images.remotes import transport

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from hostjob.images import imagespec
    from hostjob.images.content import Readable
    from hostjob.images.remotes.session import Session


def push_scope(repo: str) -> str:
    return f"repository:{repo}:pull,push"


class Pusher:
    """Uploads to one registry."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def exists(self, repo: str, digest: str) -> bool:
        """Whether the repository has the blob already (``HEAD``): a push skips it."""
        session = self.session
        response = session.send("HEAD", f"/v2/{repo}/blobs/{digest}", push_scope(repo))
        if response.status_code in (200, 404):
            response.close()
            return response.status_code == 200
        raise transport.registry_error(
            response, f"{session.host}/{repo}: looking for blob {digest}"
        )

    def upload(
        self,
        repo: str,
        desc: imagespec.Descriptor,
        open_blob: Callable[[imagespec.Descriptor], Readable],
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        """Upload a blob monolithically: ``POST`` an upload session, then one ``PUT``
        of its bytes with the digest, streamed from ``open_blob(desc)`` (called again
        for each attempt: an answer to an auth challenge, a redirect); ``on_bytes`` is
        told how many went. The registry checks the digest and refuses a blob that
        does not match it."""
        assert desc.digest is not None
        session = self.session
        scope = push_scope(repo)
        what = f"{session.host}/{repo}"
        response = session.send("POST", f"/v2/{repo}/blobs/uploads/", scope)
        if response.status_code != 202 or "location" not in response.headers:
            raise transport.registry_error(response, f"{what}: starting an upload")
        response.close()
        location = response.url.join(response.headers["location"])
        url = str(location.copy_merge_params({"digest": desc.digest}))
        headers = {"Content-Type": "application/octet-stream"}
        if desc.size is not None:
            headers["Content-Length"] = str(desc.size)  # streamed, not chunked

        def body() -> Iterator[bytes]:
            reader = open_blob(desc)
            sent = 0
            try:
                while data := reader.read(transport.CHUNK):
                    yield data
                    sent += len(data)
                    if on_bytes is not None:
                        on_bytes(sent)
            finally:
                close = getattr(reader, "close", None)
                if close is not None:
                    close()

        response = session.send("PUT", url, scope, headers, content=body)
        if response.status_code not in (201, 204):
            raise transport.registry_error(response, f"{what}: uploading {desc.digest}")
        response.close()

    def put_manifest(self, repo: str, reference: str, raw: bytes, media_type: str) -> str:
        """``PUT`` a manifest under a tag (or its digest); returns its digest."""
        session = self.session
        response = session.send(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            push_scope(repo),
            {"Content-Type": media_type},
            content=raw,
        )
        if response.status_code not in (200, 201, 204):
            raise transport.registry_error(
                response, f"{session.host}/{repo}: pushing manifest {reference}"
            )
        response.close()
        import hashlib

        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        said = response.headers.get("docker-content-digest")
        if said and said.startswith("sha256:") and said != digest:
            raise DigestMismatch(f"{session.host}/{repo}: manifest {digest} was stored as {said}")
        return digest
