"""Blobs of a registry into a verifying writer, resumed after a dropped connection.

A download that breaks off is asked again with ``Range`` from where it stopped; a
server that answers the Range with the whole blob (or with another start) is read
again from the start. The writer (a ``content.Digester``) counts and hashes, and the
store verifies every blob's size and digest before it is renamed into place.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hostjob.images.errors import RegistryError
from hostjob.images.remotes import transport

if TYPE_CHECKING:
    from hostjob.images import imagespec
    from hostjob.images.content import Writer
    from hostjob.images.remotes.session import Session


class BlobFetcher:
    """Blobs of one registry."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def fetch(self, repo: str, desc: imagespec.Descriptor, writer: Writer) -> None:
        """Stream a blob into ``writer`` (a ``content.Digester``), resuming with Range."""
        import httpx

        assert desc.digest is not None
        session = self.session
        scope = f"repository:{repo}:pull"
        what = f"{session.host}/{repo}@{desc.digest}"
        failures = 0
        while True:
            offset = getattr(writer, "offset", 0)
            if desc.size is not None and offset and offset >= desc.size:
                return
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                response = session.send("GET", f"/v2/{repo}/blobs/{desc.digest}", scope, headers)
                try:
                    status = response.status_code
                    if offset and status == 200:
                        writer.reset()  # type: ignore[attr-defined]
                    elif offset and status == 206:
                        start = _range_start(response.headers.get("content-range", ""))
                        if start != offset:
                            writer.reset()  # type: ignore[attr-defined]
                            response.close()
                            failures += 1
                            if failures > session.retries:
                                raise RegistryError(f"{what}: the server answers ranges wrongly")
                            continue
                    elif status in transport.TRANSIENT and failures < session.retries:
                        response.close()  # its body unread: we only retry
                        failures += 1
                        time.sleep(transport.backoff(failures, response))
                        continue
                    elif status != 200:
                        raise transport.registry_error(response, what)
                    for (
                        chunk
                    ) in response.iter_raw():  # no chunk_size: it would buffer, and lose, bytes
                        writer.write(chunk)
                finally:
                    response.close()
            except (httpx.TransportError, httpx.StreamError, RegistryError) as err:
                if isinstance(err, RegistryError) and not transport.transient(err):
                    raise
                failures += 1
                if failures > session.retries:
                    raise RegistryError(
                        f"{what}: download failed: {transport.one_line(err)}"
                    ) from err
                time.sleep(transport.backoff(failures, None))
                continue
            if desc.size is not None and getattr(writer, "offset", desc.size) < desc.size:
                failures += 1  # the connection ended early but cleanly
                if failures > session.retries:
                    raise RegistryError(f"{what}: the server keeps ending the blob early")
                continue
            return


def _range_start(content_range: str) -> int | None:
    """``bytes 100-199/200`` -> 100."""
    unit, _, rest = content_range.strip().partition(" ")
    if unit != "bytes":
        return None
    start, _, _ = rest.partition("-")
    try:
        return int(start)
    except ValueError:
        return None
