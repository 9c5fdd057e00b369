"""What every part of the registry client shares: the httpx client of one registry,
origins, one-line errors, the registry's own error message, and when to retry.

Registries are untrusted: redirects are never followed by httpx (the session
follows them by hand, so that credentials stay on the registry's origin), and an
error is reported in one line, quoting at most a little of what the registry said.
"""

from __future__ import annotations

import json

from hostjob.errors import ImageError, ImageNotFound, RegistryError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import httpx

CHUNK = 1 << 20
MAX_REDIRECTS = 10
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # retried, with backoff
RETRIES = 5
USER_AGENT = "hostjob"


def new_client(verify: bool, timeout: float) -> httpx.Client:
    """An httpx client that follows no redirect (the session does, by hand)."""
    import httpx

    return httpx.Client(
        verify=verify,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
    )


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
    """The registry's own error message (``{"errors":[{code, message}]}``) if it sent one."""
    detail = ""
    try:
        body = json.loads(response.read()[:65536])
        errors = body.get("errors") if type(body) is dict else None
        if type(errors) is list and errors:
            parts = []
            for e in errors[:3]:
                if type(e) is dict:
                    parts.append(f"{e.get('code', '')}: {e.get('message', '')}".strip(": "))
            detail = "; ".join(parts)
    except (ValueError, UnicodeDecodeError):
        pass
    except Exception:
        pass
    text = f"{what}: HTTP {response.status_code}"
    if detail:
        text += f" ({detail})"
    cls = ImageNotFound if response.status_code == 404 else RegistryError
    return cls(text)
