"""What every part of the registry client shares: the httpx client of one registry,
origins, one-line errors, the registry's own error message, and when to retry.

Registries are untrusted: redirects are never followed by httpx (the session
follows them by hand, so that credentials stay on the registry's origin), and an
error is reported in one line, quoting at most a little of what the registry said.

Everything read from a registry into memory is bounded: an error's body is read up
to ``ERROR_BODY_LIMIT`` and a token answer up to ``TOKEN_LIMIT`` (streamed, and the
read stops there: nothing is read whole and sliced afterwards); a transient
answer's body is never read before the retry; bodies are asked for and read as
sent (``Accept-Encoding: identity``, no decoding), so no decompressor can turn a
small answer into a huge one. Every connection keeps the stall deadline
(``hostjob.images.remotes.stall``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hostjob.images.errors import ImageError, ImageNotFound, RegistryError

if TYPE_CHECKING:
    import httpx

CHUNK = 1 << 20
ERROR_BODY_LIMIT = 64 << 10  # what an error's body may hold of the registry's message
TOKEN_LIMIT = 1 << 20  # a token server's answer
TIMEOUT = 60.0  # seconds for one read or write, and at most for a connect (15 s)
MAX_REDIRECTS = 10
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # retried, with backoff
RETRIES = 5
USER_AGENT = "hostjob"


def new_client(verify: bool, stall: float, proxy_for: str | None = None) -> httpx.Client:
    """An httpx client that follows no redirect (the session does, by hand), sends for
    bodies as they are (no content coding), and whose connections fail after ``stall``
    seconds without progress. ``proxy_for`` is the URL whose proxy (``HTTPS_PROXY``
    and friends, ``NO_PROXY``) the client uses for every request."""
    import httpx

    from hostjob.images.remotes.stall import WatchedTransport

    proxy = _env_proxy(proxy_for) if proxy_for else None
    return httpx.Client(
        transport=WatchedTransport(verify, stall, proxy),
        timeout=httpx.Timeout(TIMEOUT, connect=min(TIMEOUT, 15.0)),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )


def _env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (as curl and httpx read it)."""
    import urllib.request

    import httpx

    parsed = httpx.URL(url)
    if urllib.request.proxy_bypass(parsed.host):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parsed.scheme) or proxies.get("all")


def read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a streamed body, as sent; None (and the rest unread)
    when there is more. The response is closed either way."""
    body = bytearray()
    try:
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > limit:
                return None
    finally:
        response.close()
    return bytes(body)


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, port


def origin_text(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode()}"


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


def hint(err: BaseException) -> str:
    """What to try when TLS meets a plain-HTTP registry (or a self-signed one)."""
    text = str(err)
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return " (the registry speaks plain HTTP? use --plain-http)"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return " (a self-signed registry? use --tls-verify=false)"
    return ""


def transient(err: RegistryError) -> bool:
    """A dropped or refused connection is worth a retry; a bad certificate is not."""
    import ssl

    import httpx

    cause = err.__cause__
    if not isinstance(cause, httpx.TransportError):
        return False
    seen = cause.__context__ or cause.__cause__
    for _ in range(10):  # a bounded walk down the exception chain
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return False
        seen = seen.__context__ or seen.__cause__
    return "CERTIFICATE_VERIFY_FAILED" not in str(cause)


def backoff(failures: int, response: httpx.Response | None) -> float:
    """Seconds to wait before retry ``failures``: ``Retry-After`` if small, else doubling."""
    if response is not None:
        try:
            return min(float(response.headers.get("retry-after", "")), 10.0)
        except ValueError:
            pass
    return min(0.1 * 2.0**failures, 2.0)


def registry_error(response: httpx.Response, what: str) -> ImageError:
    """The registry's own error message (``{"errors":[{code, message}]}``) if it sent
    one in at most ``ERROR_BODY_LIMIT`` bytes (a longer body is left unread). A
    transient answer's body is not read at all: the caller retries, or gives up."""
    detail = ""
    try:
        raw = None
        if response.status_code not in TRANSIENT:
            raw = read_at_most(response, ERROR_BODY_LIMIT)
        body = json.loads(raw) if raw else None
        errors = body.get("errors") if type(body) is dict else None
        if type(errors) is list and errors:
            parts = []
            for e in errors[:3]:
                if type(e) is dict:
                    parts.append(f"{e.get('code', '')}: {e.get('message', '')}".strip(": "))
            detail = "; ".join(parts)[:300]
    except Exception:  # a broken body, a dropped connection: the status says enough
        pass
    finally:
        response.close()
    text = f"{what}: HTTP {response.status_code}"
    if detail:
        text += f" ({detail})"
    cls = ImageNotFound if response.status_code == 404 else RegistryError
    return cls(text)
