"""One registry's requests: the authorizer's header to the registry's origin only,
redirects followed by hand.

Neither the ``Authorization`` header nor an answer to a challenge ever goes to
another origin (scheme, host, port): blob storage on another host (S3, a CDN) is
fetched without credentials, and a 401 from it is an error, not a challenge to
answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostjob.images.errors import RegistryError
from hostjob.images.remotes import transport
from hostjob.images.remotes.auth import Authorizer
from hostjob.images.remotes.credentials import find_credentials

if TYPE_CHECKING:
    import httpx

    from hostjob.images.options import RegistryOptions


class Session:
    """One registry host, reached as ``options`` say; its credentials are the ones
    given, else those filed under ``domain`` (else ``host``), or a namespace of it
    holding ``repository``, in the auth files."""

    def __init__(
        self,
        host: str,
        options: RegistryOptions,
        *,
        domain: str | None = None,
        repository: str | None = None,
    ) -> None:
        import httpx

        self.host = host
        self.base = f"{'http' if options.plain_http else 'https'}://{host}"
        self.origin = transport.origin(httpx.URL(self.base))
        creds = options.credentials
        if creds is None:
            creds = find_credentials(domain or host, options.authfile, repository)
        self.retries = transport.RETRIES
        self.client = transport.new_client(options.tls_verify, options.stall_timeout, self.base)
        self.auth = Authorizer(host, self.base, self.client, creds, options)

    def close(self) -> None:
        self.client.close()
        self.auth.close()

    def send(
        self,
        method: str,
        url: str,
        scope: str,
        headers: dict[str, str] | None = None,
        content: Any = None,
    ) -> httpx.Response:
        """One request with auth and hand-followed redirects (auth kept on-host only).

        ``content`` is bytes, or a function giving the body (a stream) anew for each
        request sent: an answer to a challenge or a redirect sends it again. The
        answer is streamed, its body not read: the caller reads what it needs, within
        its bounds, and closes it (a redirect's or a challenge's body is never read)."""
        import httpx

        if url.startswith("/"):
            url = self.base + url
        for attempt in range(2):
            request_headers = dict(headers or {})
            auth = self.auth.header(scope)
            if auth and transport.origin(httpx.URL(url)) == self.origin:
                request_headers["Authorization"] = auth
            target = url
            for _hop in range(transport.MAX_REDIRECTS + 1):
                try:
                    body = content() if callable(content) else content  # fresh each send
                    request = self.client.build_request(
                        method, target, headers=request_headers, content=body
                    )
                    response = self.client.send(request, stream=True)
                except httpx.TransportError as err:
                    raise RegistryError(
                        f"{self.host}: {transport.one_line(err)}{transport.hint(err)}"
                    ) from err
                if (
                    response.status_code in (301, 302, 303, 307, 308)
                    and "location" in response.headers
                ):
                    response.close()
                    new_url = response.url.join(response.headers["location"])
                    if transport.origin(new_url) != self.origin:
                        request_headers.pop("Authorization", None)
                    if response.status_code == 303:
                        method, content = "GET", None
                    target = str(new_url)
                    continue
                break
            else:
                response.close()
                raise RegistryError(f"{self.host}: too many redirects")
            if response.status_code == 401 and transport.origin(response.url) != self.origin:
                # Blob storage we were redirected to: its challenge is not the
                # registry's, and answering it would hand it the credentials.
                response.close()
                raise RegistryError(
                    f"{self.host}: {transport.origin_text(response.url)}, where the registry"
                    " redirected, asks for credentials; they go to the registry only"
                )
            if response.status_code == 401 and attempt == 0:
                try:
                    answered = self.auth.answer(response, scope)
                except BaseException:
                    response.close()
                    raise
                if answered:
                    response.close()
                    continue
            return response
        return response
