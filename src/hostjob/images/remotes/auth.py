"""The authorizer: a registry's ``WWW-Authenticate`` challenge answered.

Anonymous first, then ``Basic`` with the credentials, or ``Bearer realm=…,service=…,
scope=…``: a token fetched from the realm (with the credentials as Basic auth, when
there are any), read from the ``token`` or ``access_token`` field, and cached per
scope until it expires.

Registries are untrusted, so the credentials go to two places only: the registry
itself (the session sends them to its origin alone), and a token realm over HTTPS,
its certificate always verified when it is on another host (``--tls-verify=false``
is for the registry's own host). A realm over plain HTTP gets them only with
``--plain-http`` and on the registry's own host name (a local registry with its
token server beside it); any other realm is refused with one line before a byte is
sent.
"""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING

from hostjob.images.errors import RegistryError
from hostjob.images.remotes import transport

if TYPE_CHECKING:
    import httpx

    from hostjob.images.options import RegistryOptions


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


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Authorizer:
    """The ``Authorization`` of one registry's requests, per scope.

    ``client`` is the registry's own httpx client (``base`` its URL); a realm on
    another host behind ``--tls-verify=false`` is asked through a second, verifying
    client, made when first needed."""

    def __init__(
        self,
        host: str,
        base: str,
        client: httpx.Client,
        creds: tuple[str, str] | None,
        options: RegistryOptions,
    ) -> None:
        self.host = host
        self.base = base
        self.client = client
        self.creds = creds
        self.options = options
        self.verified: httpx.Client | None = None  # for token realms on other hosts
        self.tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
        self.scope_tokens: dict[str, str] = {}  # our scope -> the last token that worked
        self.use_basic = False

    def close(self) -> None:
        if self.verified is not None:
            self.verified.close()

    def header(self, scope: str) -> str | None:
        """The ``Authorization`` value for a request of ``scope``, if there is one yet."""
        token = self.scope_tokens.get(scope)
        if token is not None:
            for value, expires in self.tokens.values():
                if value == token and expires > time.monotonic():
                    return f"Bearer {token}"
            self.scope_tokens.pop(scope, None)
        if self.use_basic and self.creds:
            return basic(*self.creds)
        return None

    def answer(self, response: httpx.Response, scope: str) -> bool:
        """Answer a 401's challenge; False if there is nothing (new) to try."""
        header = response.headers.get("www-authenticate", "")
        challenges = parse_challenges(header)
        for scheme, params in challenges:
            if scheme == "bearer" and params.get("realm"):
                wanted = params.get("scope") or scope
                token = self.token(params["realm"], params.get("service", ""), wanted)
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

    def realm_client(self, realm: str) -> httpx.Client:
        """The client to ask ``realm`` for a token, once it may have the credentials."""
        import httpx

        try:
            url = httpx.URL(realm)
        except (httpx.InvalidURL, ValueError) as err:
            raise RegistryError(f"{self.host}: invalid token realm {realm!r}") from err
        own_host = url.host == httpx.URL(self.base).host
        if url.scheme == "https":
            if own_host or self.options.tls_verify:
                return self.client
            if self.verified is None:  # --tls-verify=false is for the registry's host only
                self.verified = transport.new_client(True, self.options.stall_timeout, realm)
            return self.verified
        if url.scheme == "http" and (not self.creds or (self.options.plain_http and own_host)):
            return self.client
        if url.scheme not in ("http", "https"):
            raise RegistryError(f"{self.host}: invalid token realm {realm!r}")
        raise RegistryError(
            f"{self.host}: refusing to send credentials to the plain-HTTP token realm"
            f" {url.scheme}://{url.netloc.decode()}: only an HTTPS realm gets them"
            " (or, with --plain-http, one on the registry's own host)"
        )

    def token(self, realm: str, service: str, scope: str) -> str:
        key = (realm, service, scope)
        cached = self.tokens.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        import httpx

        client = self.realm_client(realm)

        params: list[tuple[str, str | int | float | bool | None]] = []
        if service:
            params.append(("service", service))
        for item in scope.split(" "):
            if item:
                params.append(("scope", item))
        headers = {}
        if self.creds:
            headers["Authorization"] = basic(*self.creds)
        try:
            request = client.build_request("GET", realm, params=params, headers=headers)
            response = client.send(request, stream=True)
            if response.status_code in (401, 403):
                response.close()
                raise RegistryError(f"{self.host}: the token server refused the credentials")
            if response.status_code != 200:
                raise transport.registry_error(response, f"token request to {realm}")
            raw = transport.read_at_most(response, transport.TOKEN_LIMIT)
        except httpx.HTTPError as err:
            raise RegistryError(
                f"token request to {realm} failed: {transport.one_line(err)}"
            ) from err
        if raw is None:
            raise RegistryError(
                f"token server {realm} sent more than {transport.TOKEN_LIMIT >> 20} MiB"
            )
        try:
            body = json.loads(raw)
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
