"""The policy file: where it is found, how strictly it is read, and which section
applies to an image (identity, namespaces, the transport's "", default)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostjob.images.errors import PolicyError
from hostjob.images.reference import parse
from hostjob.images.trust import policy as policies
from hostjob.images.trust import scopes
from hostjob.images.trust.requirements import (
    InsecureAcceptAnything,
    Reject,
    SignedBy,
    SigstoreSigned,
    Unsupported,
)

ACCEPT = [{"type": "insecureAcceptAnything"}]
REJECT = [{"type": "reject"}]


def load(doc: object) -> policies.Policy:
    return policies.Policy.parse("p.json", json.dumps(doc).encode())


def section(policy: policies.Policy, ref: str) -> str:
    return policy.requirements(scopes.of(parse(ref)))[0]


def test_the_most_specific_scope_wins() -> None:
    policy = load(
        {
            "default": REJECT,
            "transports": {
                "docker": {
                    "": ACCEPT,
                    "reg.example.com": ACCEPT,
                    "reg.example.com/org": ACCEPT,
                    "reg.example.com/org/app:v1": ACCEPT,
                    "*.example.com": ACCEPT,
                    "127.0.0.1:5000/team": ACCEPT,
                },
                "oci": {"/srv/images": ACCEPT},
            },
        }
    )
    assert (
        section(policy, "reg.example.com/org/app:v1")
        == "transports.docker[reg.example.com/org/app:v1]"
    )
    assert section(policy, "reg.example.com/org/app:v2") == "transports.docker[reg.example.com/org]"
    assert section(policy, "reg.example.com/other") == "transports.docker[reg.example.com]"
    assert section(policy, "mirror.example.com:8443/x") == "transports.docker[*.example.com]"
    assert section(policy, "127.0.0.1:5000/team/app") == "transports.docker[127.0.0.1:5000/team]"
    assert section(policy, "quay.io/a/b") == 'transports.docker[""]'
    assert section(policy, "oci:/srv/images/tool:v1") == "transports.oci[/srv/images]"
    assert section(policy, "oci:/srv/other") == "default"
    assert section(policy, "docker-archive:/x.tar") == "default"


def test_every_requirement_type_is_read(tmp_path: Path) -> None:
    key = tmp_path / "k"
    policy = load(
        {
            "default": [
                {"type": "insecureAcceptAnything"},
                {"type": "reject"},
                {"type": "signedBy", "keyType": "GPGKeys", "keyPath": str(key)},
                {"type": "signedBy", "keyType": "GPGKeys", "keyPaths": [str(key), str(key)]},
                {"type": "signedBy", "keyType": "GPGKeys", "keyData": "AAEC"},
                {"type": "signedBy", "keyType": "X509Certificates", "keyPath": str(key)},
                {"type": "sigstoreSigned", "keyPath": str(key)},
                {"type": "sigstoreSigned", "keyDatas": ["AAEC"],
                 "signedIdentity": {"type": "matchRepository"}},
                {"type": "sigstoreSigned", "fulcio": {"caPath": "/ca"}, "rekorPublicKeyPath": "/r"},
                {"type": "sigstoreSigned", "keyPath": str(key), "rekorPublicKeyPath": "/r"},
                {"type": "signedBaseLayer", "baseLayerIdentity": {"type": "matchRepository"}},
            ]
        }
    )  # fmt: skip
    kinds = [type(r) for r in policy.default]
    assert kinds == [
        InsecureAcceptAnything, Reject, SignedBy, SignedBy, SignedBy, Unsupported,
        SigstoreSigned, SigstoreSigned, Unsupported, Unsupported, Unsupported,
    ]  # fmt: skip
    assert policy.default[2].rule.kind == "matchRepoDigestOrExact"  # type: ignore[attr-defined]
    assert policy.default[4].datas == [b"\x00\x01\x02"]  # type: ignore[attr-defined]
    reasons = [r.why for r in policy.default if isinstance(r, Unsupported)]  # type: ignore[attr-defined]
    assert "X509Certificates is not implemented" in reasons[0]
    assert "keyless (Fulcio)" in reasons[1] and "Rekor" in reasons[2]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "default requirements are missing"),
        ({"default": []}, "non-empty list"),
        ({"default": ACCEPT, "transport": {}}, "unknown field 'transport'"),
        ({"default": [{"type": "insecureAcceptAnything", "x": 1}]}, "unknown field 'x'"),
        ({"default": [{"type": "acceptEverything"}]}, "unknown requirement type"),
        ({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keypath": "/k"}]},
         "unknown field 'keypath'"),  # a typo is never skipped
        ({"default": [{"type": "signedBy", "keyType": "GPGKeys"}]}, "exactly one of keyPath"),
        ({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k",
                       "keyData": "AA=="}]}, "exactly one of keyPath"),
        ({"default": [{"type": "signedBy", "keyType": "PGP", "keyPath": "/k"}]}, "unknown keyType"),
        ({"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyData": "!!"}]}, "not base64"),
        ({"default": [{"type": "sigstoreSigned"}]}, "exactly one of keyPath, keyPaths"),
        ({"default": [{"type": "sigstoreSigned", "keyPaths": []}]}, "must be a list of strings"),
        ({"default": ACCEPT, "transports": {"oci": {"relative/dir": ACCEPT}}}, "absolute path"),
        ({"default": ACCEPT, "transports": {"oci": {"/a/../b": ACCEPT}}}, "canonical"),
        ({"default": ACCEPT, "transports": {"oci": {"/": ACCEPT}}}, "default scope"),
        ({"default": ACCEPT, "transports": {"docker-archive": {"/x": ACCEPT}}}, 'only the scope ""'),
        ({"default": ACCEPT, "transports": {"docker": {"h/a": []}}}, "non-empty list"),
    ],
)  # fmt: skip
def test_a_policy_that_is_not_right_is_refused_whole(doc: object, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load(doc)


def test_duplicate_keys_and_non_json_are_refused() -> None:
    with pytest.raises(PolicyError, match="duplicate key 'default'"):
        policies.Policy.parse("p", b'{"default": [{"type": "reject"}], "default": []}')
    with pytest.raises(PolicyError, match="not valid JSON"):
        policies.Policy.parse("p", b"{")
    with pytest.raises(PolicyError, match="NaN is not JSON"):
        policies.Policy.parse("p", b'{"default": NaN}')


def test_a_section_for_a_transport_hostjob_does_not_pull_from_is_read(tmp_path: Path) -> None:
    policy = load({"default": ACCEPT, "transports": {"containers-storage": {"": ACCEPT}}})
    assert "containers-storage" in policy.transports


def test_where_the_policy_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(policies, "SYSTEM_POLICY", str(tmp_path / "etc-policy.json"))
    assert policies.find(None) is None
    (tmp_path / "etc-policy.json").write_text("{}")
    assert policies.find(None) == str(tmp_path / "etc-policy.json")
    user = tmp_path / ".config" / "containers" / "policy.json"
    user.parent.mkdir(parents=True)
    user.write_text("{}")
    assert policies.find(None) == str(user)  # the user's, for root too (containers/image)
    assert policies.find("/given.json") == "/given.json"
    with pytest.raises(PolicyError, match=r"/nonexistent/p\.json: No such file"):
        policies.Policy.load("/nonexistent/p.json")
