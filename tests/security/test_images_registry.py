"""Registry credentials go only where they belong.

Stub registries on 127.0.0.1 whose 401 challenge names a token realm of their
choosing (plain HTTP, another host), or which redirect to another host that
challenges in turn. A listener stands at the realm and records every request: it
must see no credentials (no Authorization header, nothing of them in the query),
and the pull fails with one line. The allowed case (``--plain-http``, a realm on the
registry's own host) shows the listener would have caught them.
"""

from __future__ import annotations

import base64
import json
import ssl
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from hostjob.images.errors import RegistryError
from hostjob.images.options import RegistryOptions
from hostjob.images.push import push
from hostjob.images.store import Store
from tests.fixtures.images import write_layout
from tests.fixtures.registry import _Quiet, _Served, _Server, make_cert
from tests.fixtures.tars import entry, make_tar
from tests.helpers import Hostjob

USER, PASSWORD = "alice", "s3cret-pw"
CREDS = f"{USER}:{PASSWORD}"
BASIC = "Basic " + base64.b64encode(CREDS.encode()).decode()


def _record(h: BaseHTTPRequestHandler, into: list[dict[str, str]]) -> None:
    into.append({"path": h.path, **{k.lower(): v for k, v in h.headers.items()}})


def _reply(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    h.send_response(status)
    for key, value in headers.items():
        h.send_header(key, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


class Listener(_Served):
    """Stands at a token realm: records every request, hands out a token."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []
        listener = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                _record(self, listener.requests)
                _reply(self, 200, {"Content-Type": "application/json"}, b'{"token": "t"}')

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    def saw_credentials(self) -> bool:
        text = json.dumps(self.requests)
        return USER in text or PASSWORD in text or BASIC in text


class Challenger(_Served):
    """A registry (or the blob store it redirects to) that answers 401 with
    ``challenge``; with ``redirect``, a request carrying our Basic credentials is sent
    there instead (307). ``tls``: (cert, key)."""

    def __init__(
        self, challenge: str, redirect: str | None = None, tls: tuple[str, str] | None = None
    ) -> None:
        self.requests: list[dict[str, str]] = []
        server = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                _record(self, server.requests)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))  # a PUT's body
                if redirect and self.headers.get("Authorization") == BASIC:
                    _reply(self, 307, {"Location": redirect + self.path}, b"")
                    return
                body = b'{"errors":[{"code":"UNAUTHORIZED","message":"authenticate"}]}'
                _reply(self, 401, {"WWW-Authenticate": challenge}, body)

            do_HEAD = do_POST = do_PUT = do_GET  # a push's requests

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"


def bearer(realm: str) -> str:
    return f'Bearer realm="{realm}",service="stub",scope="repository:test/img:pull"'


def with_creds(plain_http: bool = False, tls_verify: bool = True) -> RegistryOptions:
    return RegistryOptions(
        credentials=(USER, PASSWORD), plain_http=plain_http, tls_verify=tls_verify
    )


def pull_fails(store: Path, ref: str, **options: bool) -> str:
    with pytest.raises(RegistryError) as info:
        Store(str(store)).pull(ref, registry=with_creds(**options))
    message = str(info.value)
    assert "\n" not in message
    return message


def push_fails(tmp_path: Path, ref: str, **options: bool) -> str:
    """A push of a small layout to ``ref`` fails with one line (and its blobs never go)."""
    layout = tmp_path / "layout"
    if not layout.exists():
        write_layout(str(layout), [make_tar([entry("f", data=b"secret data")])], tag="v1")
    with pytest.raises(RegistryError) as info:
        push(f"oci:{layout}:v1", ref, registry=with_creds(**options))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_listener_catches_credentials_where_they_are_allowed(tmp_path: Path) -> None:
    """--plain-http, realm on the registry's own host: the token request carries them."""
    with Listener() as realm:
        with Challenger(bearer(f"http://127.0.0.1:{realm.port}/token")) as registry:
            pull_fails(tmp_path / "store", f"{registry.host}/test/img:v1", plain_http=True)
        assert realm.requests and realm.requests[0].get("authorization") == BASIC


def test_a_plain_http_realm_of_a_tls_registry_gets_nothing(tmp_path: Path, hj: Hostjob) -> None:
    tls = make_cert(str(tmp_path))
    with Listener() as realm:
        challenge = bearer(f"http://127.0.0.1:{realm.port}/token")
        with Challenger(challenge, tls=tls) as registry:
            ref = f"{registry.host}/test/img:v1"
            message = pull_fails(tmp_path / "store", ref, tls_verify=False)
            assert "refusing to send credentials to the plain-HTTP token realm" in message
            err = hj.fail("pull", "-q", "--store", str(tmp_path / "store"), "--creds", CREDS,
                          "--tls-verify=false", ref)  # fmt: skip
            assert "plain-HTTP token realm" in err
            assert registry.requests, "the registry was asked"
        assert realm.requests == [] and not realm.saw_credentials()


def test_a_plain_http_realm_on_another_host_gets_nothing(tmp_path: Path) -> None:
    with Listener() as realm:
        with Challenger(bearer(f"http://localhost:{realm.port}/token")) as registry:
            pull_fails(tmp_path / "store", f"{registry.host}/test/img:v1", plain_http=True)
        assert realm.requests == [] and not realm.saw_credentials()


def test_a_challenge_after_a_redirect_to_another_host_gets_nothing(tmp_path: Path) -> None:
    """The registry takes the credentials, then redirects to another host, which
    challenges with a realm of its own: neither that host nor its realm sees them."""
    with Listener() as realm:
        with Challenger(bearer(f"https://localhost:{realm.port}/token")) as elsewhere:
            other = f"http://localhost:{elsewhere.httpd.server_address[1]}"
            with Challenger('Basic realm="stub"', redirect=other) as registry:
                message = pull_fails(
                    tmp_path / "store", f"{registry.host}/test/img:v1", plain_http=True
                )
            assert "asks for credentials; they go to the registry only" in message
            assert any(r.get("authorization") == BASIC for r in registry.requests)
            assert elsewhere.requests, "the redirect was followed"
            assert all("authorization" not in r for r in elsewhere.requests)
            assert USER not in json.dumps(elsewhere.requests)
        assert realm.requests == [] and not realm.saw_credentials()


# --- push: the same rules --------------------------------------------------------------


def test_push_credentials_go_where_a_pulls_go(tmp_path: Path) -> None:
    """The listener catches a push's credentials at a realm on the registry's own host
    (--plain-http), as it does a pull's."""
    with Listener() as realm:
        with Challenger(bearer(f"http://127.0.0.1:{realm.port}/token")) as registry:
            push_fails(tmp_path, f"{registry.host}/test/img:v1", plain_http=True)
            assert registry.requests[0]["path"].startswith("/v2/test/img/blobs/")
        assert realm.requests and realm.requests[0].get("authorization") == BASIC


def test_push_to_a_plain_http_realm_elsewhere_sends_nothing(tmp_path: Path) -> None:
    tls = make_cert(str(tmp_path))
    with Listener() as realm:
        with Challenger(bearer(f"http://localhost:{realm.port}/token")) as registry:
            push_fails(tmp_path, f"{registry.host}/test/img:v1", plain_http=True)
        with Challenger(bearer(f"http://127.0.0.1:{realm.port}/token"), tls=tls) as registry:
            message = push_fails(tmp_path, f"{registry.host}/test/img:v1", tls_verify=False)
            assert "refusing to send credentials to the plain-HTTP token realm" in message
            assert all(
                r["path"].startswith("/v2/test/img/blobs/sha256:") for r in registry.requests
            )
        assert realm.requests == [] and not realm.saw_credentials()


def test_push_after_a_redirect_to_another_host_sends_nothing_there(tmp_path: Path) -> None:
    with Listener() as realm:
        with Challenger(bearer(f"https://localhost:{realm.port}/token")) as elsewhere:
            other = f"http://localhost:{elsewhere.httpd.server_address[1]}"
            with Challenger('Basic realm="stub"', redirect=other) as registry:
                message = push_fails(tmp_path, f"{registry.host}/test/img:v1", plain_http=True)
            assert "asks for credentials; they go to the registry only" in message
            assert elsewhere.requests and all("authorization" not in r for r in elsewhere.requests)
            assert USER not in json.dumps(elsewhere.requests)
        assert realm.requests == [] and not realm.saw_credentials()
