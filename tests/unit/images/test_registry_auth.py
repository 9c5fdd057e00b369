"""Auth challenge parsing and credential lookup (no network)."""

from __future__ import annotations

import base64
import json
import os

import pytest

from hostjob.images.errors import RegistryError
from hostjob.images.options import RegistryOptions
from hostjob.images.remotes import fetcher
from hostjob.images.remotes.auth import parse_challenges
from hostjob.images.remotes.credentials import (
    auth_files,
    find_credentials,
    load_auths,
    parse_creds,
)
from hostjob.images.remotes.session import Session


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
            'scope="repository:library/busybox:pull"',
            [
                (
                    "bearer",
                    {
                        "realm": "https://auth.docker.io/token",
                        "service": "registry.docker.io",
                        "scope": "repository:library/busybox:pull",
                    },
                )
            ],
        ),
        ('Basic realm="Registry Realm"', [("basic", {"realm": "Registry Realm"})]),
        (
            'Bearer realm="r",scope="repository:a:pull,push",error="insufficient_scope"',
            [
                (
                    "bearer",
                    {
                        "realm": "r",
                        "scope": "repository:a:pull,push",
                        "error": "insufficient_scope",
                    },
                )
            ],
        ),
        (
            'Basic realm="x", Bearer realm="y", service=z',
            [("basic", {"realm": "x"}), ("bearer", {"realm": "y", "service": "z"})],
        ),
        (
            'BEARER Realm = "sp ace" , Service="s"',
            [("bearer", {"realm": "sp ace", "service": "s"})],
        ),
        ('Bearer realm="a\\"quoted\\""', [("bearer", {"realm": 'a"quoted"'})]),
        ("", []),
    ],
)
def test_parse_challenges(header, expected):
    assert parse_challenges(header) == expected


def write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def test_docker_config_forms(tmp_path):
    b64 = base64.b64encode(b"bob:pa:ss").decode()
    path = write(
        tmp_path / "config.json",
        {
            "auths": {
                "https://index.docker.io/v1/": {"auth": b64},
                "http://localhost:5000/v2/": {"username": "u", "password": "p"},
                "quay.io": {"auth": base64.b64encode(b"q:r").decode()},
                "empty.io": {},
                "ghcr.io": {"auth": ""},
            },
            "credsStore": "desktop",
        },
    )
    auths = load_auths(path)
    assert auths["index.docker.io"] == ("bob", "pa:ss")
    assert auths["localhost:5000"] == ("u", "p")
    assert auths["quay.io"] == ("q", "r")
    assert "empty.io" not in auths and "ghcr.io" not in auths
    assert find_credentials("docker.io", path) == ("bob", "pa:ss")
    assert find_credentials("registry-1.docker.io", path) == ("bob", "pa:ss")
    assert find_credentials("localhost:5000", path) == ("u", "p")
    assert find_credentials("other.io", path) is None


def test_docker_config_lookup_order(tmp_path, monkeypatch):
    docker = tmp_path / "docker"
    docker.mkdir()
    write(docker / "config.json", {"auths": {"r.io": {"username": "docker", "password": "1"}}})
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    assert find_credentials("r.io") == ("docker", "1")
    auth_file = write(
        tmp_path / "auth.json", {"auths": {"r.io": {"username": "podman", "password": "2"}}}
    )
    monkeypatch.setenv("REGISTRY_AUTH_FILE", auth_file)
    assert find_credentials("r.io") == ("podman", "2")


def test_podmans_order_of_auth_files(tmp_path, monkeypatch):
    """--creds, then (--authfile or $REGISTRY_AUTH_FILE alone, else) the runtime
    auth.json, ~/.config's, docker's config.json, ~/.dockercfg: the first that has an
    entry for the image, its most specific key first."""
    home, runtime = tmp_path / "home", tmp_path / "run"
    for key in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))

    def entry(user):
        return {"username": user, "password": "x"}

    (home / ".config" / "containers").mkdir(parents=True)
    (home / ".docker").mkdir()
    (runtime / "containers").mkdir(parents=True)
    (home / ".dockercfg").write_text(
        json.dumps({"https://legacy.io/v1/": {"auth": base64.b64encode(b"legacy:x").decode()}})
    )
    write(
        home / ".docker" / "config.json",
        {"auths": {"r.io": entry("docker"), "legacy.io": entry("docker")}},
    )
    assert find_credentials("legacy.io") == ("docker", "x")
    write(home / ".config" / "containers" / "auth.json", {"auths": {"r.io": entry("config")}})
    assert find_credentials("r.io", repository="org/app") == ("config", "x")
    write(
        runtime / "containers" / "auth.json",
        {"auths": {"r.io/org": entry("org"), "r.io": entry("runtime")}},
    )
    assert find_credentials("r.io", repository="org/app") == ("org", "x")
    assert find_credentials("r.io", repository="orgx/app") == ("runtime", "x")
    assert find_credentials("none.io") is None
    (home / ".docker" / "config.json").unlink()
    assert find_credentials("legacy.io") == ("legacy", "x")  # the legacy file, cut to its host
    given = write(tmp_path / "given.json", {"auths": {"other.io": entry("given")}})
    assert find_credentials("r.io", given) is None  # a given file is the only one read
    monkeypatch.setenv("REGISTRY_AUTH_FILE", given)
    assert find_credentials("other.io") == ("given", "x")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.delenv("REGISTRY_AUTH_FILE")
    assert auth_files()[0] == (f"/run/containers/{os.getuid()}/auth.json", False)


def test_bad_docker_config(tmp_path):
    (tmp_path / "c.json").write_text("{")
    with pytest.raises(RegistryError, match="cannot read credentials"):
        load_auths(str(tmp_path / "c.json"))
    bad = write(
        tmp_path / "b.json", {"auths": {"x.io": {"auth": base64.b64encode(b"nocolon").decode()}}}
    )
    with pytest.raises(RegistryError, match="not base64 of user:pass"):
        load_auths(bad)
    assert load_auths(str(tmp_path / "missing.json")) == {}
    assert load_auths(write(tmp_path / "n.json", {"auths": None})) == {}


def test_parse_creds():
    assert parse_creds("a:b:c") == ("a", "b:c")
    with pytest.raises(RegistryError):
        parse_creds("nopassword")
    with pytest.raises(RegistryError):
        parse_creds(":x")


def test_range_start():
    assert fetcher._range_start("bytes 100-199/200") == 100
    assert fetcher._range_start("bytes */200") is None
    assert fetcher._range_start("items 1-2/3") is None


@pytest.mark.parametrize(
    ("plain_http", "tls_verify", "creds", "realm", "allowed"),
    [
        (False, True, "a:b", "https://auth.example/token", "client"),
        (False, True, "a:b", "http://auth.example/token", None),
        (False, True, "a:b", "http://registry.example/token", None),  # not asked for HTTP
        (True, True, "a:b", "http://registry.example:5001/token", "client"),
        (True, True, "a:b", "http://auth.example/token", None),  # another host
        (False, True, None, "http://auth.example/token", "client"),  # nothing to leak
        (False, False, "a:b", "https://registry.example:9/token", "client"),
        (False, False, "a:b", "https://auth.example/token", "verified"),
        (False, True, "a:b", "ftp://auth.example/token", None),
        (False, True, None, "file:///etc/passwd", None),
    ],
)
def test_credentials_go_only_to_a_safe_token_realm(plain_http, tls_verify, creds, realm, allowed):
    options = RegistryOptions(
        credentials=None if creds is None else parse_creds(creds),
        plain_http=plain_http,
        tls_verify=tls_verify,
    )
    session = Session("registry.example", options)
    auth = session.auth
    if creds is None:
        auth.creds = None  # whatever the machine's docker config holds
    try:
        if allowed is None:
            with pytest.raises(RegistryError) as info:
                auth.realm_client(realm)
            assert "\n" not in str(info.value)
        else:
            chosen = auth.realm_client(realm)
            assert chosen is (session.client if allowed == "client" else auth.verified)
    finally:
        session.close()
