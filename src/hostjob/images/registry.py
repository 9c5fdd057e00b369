"""An OCI distribution API client (pull and push), on httpx.

Auth follows the registry's ``WWW-Authenticate`` challenge: anonymous first, then
``Basic`` with the credentials, or ``Bearer realm=…,service=…,scope=…`` — a token
fetched from the realm (with the credentials as Basic auth, when there are any),
read from the ``token`` or ``access_token`` field, and cached per scope until it
expires. Credentials come from ``creds="user:pass"``, else ``~/.docker/config.json``
(``$DOCKER_CONFIG``) or the containers ``auth.json`` (``$REGISTRY_AUTH_FILE``), from
their ``auths`` entries (base64 ``auth`` or ``username``/``password``; keys with or
without scheme and path).

Registries are untrusted (SPEC §10), so credentials go to two places only: the
registry itself (its scheme, host and port, as the reference and ``--plain-http``
name it), and a token realm over HTTPS, its certificate always verified when it is
on another host (``--tls-verify=false`` is for the registry's own host). A realm
over plain HTTP gets them only with ``--plain-http`` and on the registry's own host
name (a local registry with its token server beside it); any other realm is refused
with one line before a byte is sent. Redirects are followed by hand, and neither
the ``Authorization`` header nor an answer to a challenge ever goes to another
origin: blob storage on another host (S3, a CDN) is fetched without credentials,
and a 401 from it is an error, not a challenge to answer. Blob
downloads resume with ``Range`` after a dropped connection (a server that answers
the Range with the whole blob is read again from the start); the store verifies
every blob's size and digest before it is renamed into place.

httpx is imported here only, lazily, so nothing on the runtime path pays for it.
"""

from __future__ import annotations

import base64
import json
import os
import time

from hostjob.errors import (
    DigestMismatch,
    HostjobError,
    ImageError,
    ImageNotFound,
    RegistryError,
)
from hostjob.spec import image as spec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    import httpx

    from hostjob.images.content import Readable, Writer
    from hostjob.images.reference import Reference

MANIFEST_ACCEPT = ", ".join(
    [spec.OCI_MANIFEST, spec.OCI_INDEX, spec.DOCKER_MANIFEST, spec.DOCKER_MANIFEST_LIST]
)
MANIFEST_LIMIT = 4 << 20
CHUNK = 1 << 20
MAX_REDIRECTS = 10
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # retried, with backoff
RETRIES = 5
DOCKER_HUB_KEYS = (
    "https://index.docker.io/v1/",
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
)
USER_AGENT = "hostjob"


# --- challenges and credentials -------------------------------------------------------


def parse_challenges(header: str) -> list[tuple[str, dict[str, str]]]:
    """``WWW-Authenticate`` -> ``[(scheme lowercased, {param: value})]`` (RFC 7235)."""
    out: list[tuple[str, dict[str, str]]] = []
    i, n = 0, len(header)
    while i < n:
        while i < n and header[i] in " ,":
            i += 1
        start = i
        while i < n and header[i] not in " ,":
            i += 1
        scheme = header[start:i]
        if not scheme:
            break
        params: dict[str, str] = {}
        out.append((scheme.lower(), params))
        while i < n:
            while i < n and header[i] in " ,":
                i += 1
            key_start = i
            while i < n and header[i] not in "= ,":
                i += 1
            key = header[key_start:i]
            j = i
            while j < n and header[j] == " ":
                j += 1
            if j >= n or header[j] != "=":
                i = key_start  # the next challenge's scheme
                break
            i = j + 1
            while i < n and header[i] == " ":
                i += 1
            if i < n and header[i] == '"':
                i += 1
                value = []
                while i < n and header[i] != '"':
                    if header[i] == "\\" and i + 1 < n:
                        i += 1
                    value.append(header[i])
                    i += 1
                i += 1
                params[key.lower()] = "".join(value)
            else:
                value_start = i
                while i < n and header[i] != ",":
                    i += 1
                params[key.lower()] = header[value_start:i].strip()
    return out


def _registry_key(key: str) -> str:
    """``https://host:port/v2/`` -> ``host:port``."""
    key = key.strip()
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key.split("/", 1)[0]


def config_paths() -> list[str]:
    """Where credentials are looked for, in order."""
    paths = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        paths.append(os.environ["REGISTRY_AUTH_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        paths.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "containers", "auth.json"))
    docker_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    paths.append(os.path.join(docker_dir, "config.json"))
    return paths


def load_auths(path: str) -> dict[str, tuple[str, str]]:
    """The ``auths`` of a docker ``config.json``/containers ``auth.json``: host -> creds."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RegistryError(f"cannot read credentials from {path}: {err}") from err
    auths = data.get("auths") if type(data) is dict else None
    out: dict[str, tuple[str, str]] = {}
    if type(auths) is not dict:
        return out
    for key, entry in auths.items():
        if type(entry) is not dict:
            continue
        user, password = entry.get("username"), entry.get("password")
        encoded = entry.get("auth")
        if type(encoded) is str and encoded:
            try:
                decoded = base64.b64decode(encoded, validate=False).decode()
            except (ValueError, UnicodeDecodeError) as err:
                raise RegistryError(f"{path}: auths.{key}.auth is not base64 of user:pass") from err
            user, sep, password = decoded.partition(":")
            if not sep:
                raise RegistryError(f"{path}: auths.{key}.auth is not base64 of user:pass")
        if type(user) is str and type(password) is str and user:
            out[_registry_key(key)] = (user, password)
    return out


def find_credentials(domain: str, docker_config: str | None = None) -> tuple[str, str] | None:
    """Credentials for a registry domain (``docker.io``, ``host:5000``) from config files."""
    keys = [domain]
    if domain in DOCKER_HUB_KEYS:
        keys = [_registry_key(k) for k in DOCKER_HUB_KEYS]
    for path in [docker_config] if docker_config else config_paths():
        auths = load_auths(path)
        for key in keys:
            if key in auths:
                return auths[key]
    return None


def parse_creds(creds: str) -> tuple[str, str]:
    user, sep, password = creds.partition(":")
    if not sep or not user:
        raise RegistryError("credentials must be given as USER:PASSWORD")
    return user, password


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _registry_error(response: httpx.Response, what: str) -> ImageError:
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


# --- the client -----------------------------------------------------------------------


class RegistryClient:
    """One registry host. ``creds`` (``(user, pass)``) are looked up if not given."""

    def __init__(
        self,
        host: str,
        *,
        domain: str | None = None,
        creds: tuple[str, str] | str | None = None,
        tls_verify: bool = True,
        plain_http: bool = False,
        docker_config: str | None = None,
        timeout: float = 60.0,
        retries: int = RETRIES,
    ) -> None:
        import httpx

        self.host = host
        self.base = f"{'http' if plain_http else 'https'}://{host}"
        self.origin = _origin(httpx.URL(self.base))
        self.plain_http = plain_http
        self.tls_verify = tls_verify
        self.verified: httpx.Client | None = None  # for token realms on other hosts
        if isinstance(creds, str):
            creds = parse_creds(creds)
        self.creds = creds if creds is not None else find_credentials(domain or host, docker_config)
        self.retries = retries
        self.client = httpx.Client(
            verify=tls_verify,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
        )
        self.tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
        self.scope_tokens: dict[str, str] = {}  # our scope -> the last token that worked
        self.use_basic = False

    def close(self) -> None:
        self.client.close()
        if self.verified is not None:
            self.verified.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- auth -------------------------------------------------------------------------

    def _auth_header(self, scope: str) -> str | None:
        token = self.scope_tokens.get(scope)
        if token is not None:
            for value, expires in self.tokens.values():
                if value == token and expires > time.monotonic():
                    return f"Bearer {token}"
            self.scope_tokens.pop(scope, None)
        if self.use_basic and self.creds:
            return _basic(*self.creds)
        return None

    def _authenticate(self, response: httpx.Response, scope: str) -> bool:
        """Answer a 401's challenge; False if there is nothing (new) to try."""
        header = response.headers.get("www-authenticate", "")
        challenges = parse_challenges(header)
        for scheme, params in challenges:
            if scheme == "bearer" and params.get("realm"):
                wanted = params.get("scope") or scope
                token = self._token(params["realm"], params.get("service", ""), wanted)
                if self.scope_tokens.get(scope) == token:
                    return False  # that token was just refused
                self.scope_tokens[scope] = token
                return True
        for scheme, _params in challenges:
            if scheme == "basic":
                if not self.creds:
                    raise RegistryError(f"{self.host}: authentication required (no credentials)")
                if self.use_basic:
                    return False
                self.use_basic = True
                return True
        return False

    def _realm_client(self, realm: str) -> httpx.Client:
        """The client to ask ``realm`` for a token, once it may have the credentials."""
        import httpx

        try:
            url = httpx.URL(realm)
        except (httpx.InvalidURL, ValueError) as err:
            raise RegistryError(f"{self.host}: invalid token realm {realm!r}") from err
        own_host = url.host == httpx.URL(self.base).host
        if url.scheme == "https":
            if own_host or self.tls_verify:
                return self.client
            if self.verified is None:  # --tls-verify=false is for the registry's host only
                self.verified = httpx.Client(
                    verify=True,
                    timeout=self.client.timeout,
                    follow_redirects=False,
                    headers={"User-Agent": USER_AGENT},
                )
            return self.verified
        if url.scheme == "http" and (not self.creds or (self.plain_http and own_host)):
            return self.client
        if url.scheme not in ("http", "https"):
            raise RegistryError(f"{self.host}: invalid token realm {realm!r}")
        raise RegistryError(
            f"{self.host}: refusing to send credentials to the plain-HTTP token realm"
            f" {url.scheme}://{url.netloc.decode()}: only an HTTPS realm gets them"
            " (or, with --plain-http, one on the registry's own host)"
        )

    def _token(self, realm: str, service: str, scope: str) -> str:
        key = (realm, service, scope)
        cached = self.tokens.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        import httpx

        client = self._realm_client(realm)

        params: list[tuple[str, str | int | float | bool | None]] = []
        if service:
            params.append(("service", service))
        for item in scope.split(" "):
            if item:
                params.append(("scope", item))
        headers = {}
        if self.creds:
            headers["Authorization"] = _basic(*self.creds)
        try:
            response = client.get(realm, params=params, headers=headers)
        except httpx.HTTPError as err:
            raise RegistryError(f"token request to {realm} failed: {_one_line(err)}") from err
        if response.status_code in (401, 403):
            raise RegistryError(f"{self.host}: the token server refused the credentials")
        if response.status_code != 200:
            raise _registry_error(response, f"token request to {realm}")
        try:
            body = response.json()
        except ValueError as err:
            raise RegistryError(f"token server {realm} sent no JSON") from err
        token = body.get("token") or body.get("access_token") if type(body) is dict else None
        if type(token) is not str or not token:
            raise RegistryError(f"token server {realm} sent no token")
        expires_in = body.get("expires_in")
        lifetime = (
            float(expires_in) if type(expires_in) in (int, float) and expires_in > 0 else 60.0
        )
        self.tokens[key] = (token, time.monotonic() + max(lifetime - 5.0, 1.0))
        return token

    # --- requests ---------------------------------------------------------------------

    def _send(
        self,
        method: str,
        url: str,
        scope: str,
        headers: dict[str, str] | None = None,
        content: Any = None,
        stream: bool = False,
    ) -> httpx.Response:
        """One request with auth and hand-followed redirects (auth kept on-host only).

        ``content`` is bytes, or a function giving the body (a stream) anew for each
        request sent: an answer to a challenge or a redirect sends it again."""
        import httpx

        if url.startswith("/"):
            url = self.base + url
        for attempt in range(2):
            request_headers = dict(headers or {})
            auth = self._auth_header(scope)
            if auth and _origin(httpx.URL(url)) == self.origin:
                request_headers["Authorization"] = auth
            target = url
            for _hop in range(MAX_REDIRECTS + 1):
                try:
                    body = content() if callable(content) else content  # fresh each send
                    request = self.client.build_request(
                        method, target, headers=request_headers, content=body
                    )
                    response = self.client.send(request, stream=stream)
                except httpx.TransportError as err:
                    raise RegistryError(f"{self.host}: {_one_line(err)}{_hint(err)}") from err
                if (
                    response.status_code in (301, 302, 303, 307, 308)
                    and "location" in response.headers
                ):
                    response.close()
                    new_url = response.url.join(response.headers["location"])
                    if _origin(new_url) != self.origin:
                        request_headers.pop("Authorization", None)
                    if response.status_code == 303:
                        method, content = "GET", None
                    target = str(new_url)
                    continue
                break
            else:
                response.close()
                raise RegistryError(f"{self.host}: too many redirects")
            if response.status_code == 401 and _origin(response.url) != self.origin:
                # Blob storage we were redirected to: its challenge is not the
                # registry's, and answering it would hand it the credentials.
                response.close()
                raise RegistryError(
                    f"{self.host}: {_origin_text(response.url)}, where the registry redirected,"
                    " asks for credentials; they go to the registry only"
                )
            if response.status_code == 401 and attempt == 0:
                if stream:
                    response.read()
                if self._authenticate(response, scope):
                    response.close()
                    continue
            return response
        return response

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str | None, str]:
        """``(bytes, media type, digest)`` of a manifest or index, by tag or digest."""
        scope = f"repository:{repo}:pull"
        for attempt in range(self.retries + 1):
            try:
                response = self._send(
                    "GET",
                    f"/v2/{repo}/manifests/{reference}",
                    scope,
                    {"Accept": MANIFEST_ACCEPT},
                    stream=True,
                )
            except RegistryError as err:
                if attempt == self.retries or not _transient(err):
                    raise
                time.sleep(_backoff(attempt + 1, None))
                continue
            if response.status_code not in TRANSIENT or attempt == self.retries:
                break
            response.read()
            response.close()
            time.sleep(_backoff(attempt + 1, response))
        try:
            if response.status_code != 200:
                response.read()
                raise _registry_error(response, f"{self.host}/{repo}:{reference}")
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > MANIFEST_LIMIT:
                    raise RegistryError(f"{self.host}/{repo}:{reference}: manifest is too large")
        except HostjobError:
            raise
        except Exception as err:
            raise RegistryError(f"{self.host}/{repo}:{reference}: {err}") from err
        finally:
            response.close()
        raw = bytes(body)
        import hashlib

        algorithm = reference.partition(":")[0] if spec.is_digest(reference) else "sha256"
        digest = f"{algorithm}:{hashlib.new(algorithm, raw).hexdigest()}"
        if spec.is_digest(reference) and digest != reference:
            raise DigestMismatch(f"manifest {reference} from {self.host} has digest {digest}")
        header_digest = response.headers.get("docker-content-digest")
        if header_digest and header_digest.startswith(f"{algorithm}:") and header_digest != digest:
            raise DigestMismatch(
                f"manifest of {repo}:{reference} has digest {digest}, the registry says"
                f" {header_digest}"
            )
        media_type = response.headers.get("content-type", "").split(";")[0].strip() or None
        if media_type in (None, "application/json", "application/octet-stream", "text/plain"):
            media_type = spec.sniff_media_type(raw)
        return raw, media_type, digest

    def fetch_blob(self, repo: str, desc: spec.Descriptor, writer: Writer) -> None:
        """Stream a blob into ``writer`` (a ``content.Digester``), resuming with Range."""
        import httpx

        assert desc.digest is not None
        scope = f"repository:{repo}:pull"
        what = f"{self.host}/{repo}@{desc.digest}"
        failures = 0
        while True:
            offset = getattr(writer, "offset", 0)
            if desc.size is not None and offset and offset >= desc.size:
                return
            headers = {"Range": f"bytes={offset}-"} if offset else {}
            try:
                response = self._send(
                    "GET", f"/v2/{repo}/blobs/{desc.digest}", scope, headers, stream=True
                )
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
                            if failures > self.retries:
                                raise RegistryError(f"{what}: the server answers ranges wrongly")
                            continue
                    elif status in TRANSIENT and failures < self.retries:
                        response.read()
                        failures += 1
                        time.sleep(_backoff(failures, response))
                        continue
                    elif status != 200:
                        response.read()
                        raise _registry_error(response, what)
                    for (
                        chunk
                    ) in response.iter_raw():  # no chunk_size: it would buffer, and lose, bytes
                        writer.write(chunk)
                finally:
                    response.close()
            except (httpx.TransportError, httpx.StreamError, RegistryError) as err:
                if isinstance(err, RegistryError) and not _transient(err):
                    raise
                failures += 1
                if failures > self.retries:
                    raise RegistryError(f"{what}: download failed: {_one_line(err)}") from err
                time.sleep(_backoff(failures, None))
                continue
            if desc.size is not None and getattr(writer, "offset", desc.size) < desc.size:
                failures += 1  # the connection ended early but cleanly
                if failures > self.retries:
                    raise RegistryError(f"{what}: the server keeps ending the blob early")
                continue
            return

    # --- push -------------------------------------------------------------------------

    def blob_exists(self, repo: str, digest: str) -> bool:
        """Whether the repository has the blob already (``HEAD``): a push skips it."""
        response = self._send("HEAD", f"/v2/{repo}/blobs/{digest}", _push_scope(repo))
        response.close()
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise _registry_error(response, f"{self.host}/{repo}: looking for blob {digest}")

    def upload_blob(
        self,
        repo: str,
        desc: spec.Descriptor,
        open_blob: Callable[[spec.Descriptor], Readable],
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        """Upload a blob monolithically: ``POST`` an upload session, then one ``PUT``
        of its bytes with the digest, streamed from ``open_blob(desc)`` (called again
        for each attempt: an answer to an auth challenge, a redirect); ``on_bytes`` is
        told how many went. The registry checks the digest and refuses a blob that
        does not match it."""
        assert desc.digest is not None
        scope = _push_scope(repo)
        what = f"{self.host}/{repo}"
        response = self._send("POST", f"/v2/{repo}/blobs/uploads/", scope)
        response.close()
        if response.status_code != 202 or "location" not in response.headers:
            raise _registry_error(response, f"{what}: starting an upload")
        location = response.url.join(response.headers["location"])
        url = str(location.copy_merge_params({"digest": desc.digest}))
        headers = {"Content-Type": "application/octet-stream"}
        if desc.size is not None:
            headers["Content-Length"] = str(desc.size)  # streamed, not chunked

        def body() -> Iterator[bytes]:
            reader = open_blob(desc)
            sent = 0
            try:
                while data := reader.read(CHUNK):
                    yield data
                    sent += len(data)
                    if on_bytes is not None:
                        on_bytes(sent)
            finally:
                close = getattr(reader, "close", None)
                if close is not None:
                    close()

        response = self._send("PUT", url, scope, headers, content=body)
        response.close()
        if response.status_code not in (201, 204):
            raise _registry_error(response, f"{what}: uploading {desc.digest}")

    def push_manifest(self, repo: str, reference: str, raw: bytes, media_type: str) -> str:
        """``PUT`` a manifest under a tag (or its digest); returns its digest."""
        response = self._send(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            _push_scope(repo),
            {"Content-Type": media_type},
            content=raw,
        )
        response.close()
        if response.status_code not in (200, 201, 204):
            raise _registry_error(response, f"{self.host}/{repo}: pushing manifest {reference}")
        import hashlib

        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        said = response.headers.get("docker-content-digest")
        if said and said.startswith("sha256:") and said != digest:
            raise DigestMismatch(f"{self.host}/{repo}: manifest {digest} was stored as {said}")
        return digest


def _push_scope(repo: str) -> str:
    return f"repository:{repo}:pull,push"


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, port


def _origin_text(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode()}"


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


def _hint(err: BaseException) -> str:
    """What to try when TLS meets a plain-HTTP registry (or a self-signed one)."""
    text = str(err)
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return " (the registry speaks plain HTTP? use --plain-http)"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return " (a self-signed registry? use --tls-verify=false)"
    return ""


def _transient(err: RegistryError) -> bool:
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


def _backoff(failures: int, response: httpx.Response | None) -> float:
    """Seconds to wait before retry ``failures``: ``Retry-After`` if small, else doubling."""
    if response is not None:
        try:
            return min(float(response.headers.get("retry-after", "")), 10.0)
        except ValueError:
            pass
    return min(0.1 * 2.0**failures, 2.0)


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


class RegistrySource:
    """A registry image as a ``Store.pull`` source."""

    def __init__(
        self,
        ref: Reference,
        *,
        creds: str | None = None,
        tls_verify: bool = True,
        plain_http: bool = False,
        docker_config: str | None = None,
    ) -> None:
        assert ref.repository is not None
        self.ref = ref
        self.repo = ref.repository
        self.description = ref.name
        self.name_hint: str | None = None
        self.client = RegistryClient(
            ref.registry_host,
            domain=ref.domain,
            creds=creds,
            tls_verify=tls_verify,
            plain_http=plain_http,
            docker_config=docker_config,
        )

    def top(self) -> tuple[bytes, str | None, str | None]:
        return self.client.get_manifest(self.repo, self.ref.reference)

    def manifest(self, desc: spec.Descriptor) -> bytes:
        assert desc.digest is not None
        raw, _media_type, _digest = self.client.get_manifest(self.repo, desc.digest)
        return raw

    def copy_blob(self, desc: spec.Descriptor, writer: Writer) -> None:
        self.client.fetch_blob(self.repo, desc, writer)

    def close(self) -> None:
        self.client.close()
