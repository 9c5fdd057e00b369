"""The decision for an image, from a policy file, its manifest and its signatures:
accepted with what vouched for it, or refused with one line naming the image, the
policy, its section and the reason."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob import log
from hostjob.images.errors import PolicyError, SignatureRejected
from hostjob.images.options import TrustOptions
from hostjob.images.reference import parse
from hostjob.images.trust import evaluate, scopes
from hostjob.images.trust.formats import Signature, SigstoreSignature, SimpleSignature
from tests.fixtures.signing import (
    SIGSTORE,
    GpgKey,
    SigstoreKey,
    only,
    payload,
    signed_by,
    sigstore_signed,
    write_policy,
)

REF = "reg.example.com/org/app:v1"
MANIFEST = b'{"schemaVersion":2,"layers":[]}'
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GpgKey, GpgKey]]:
    directory = tmp_path_factory.mktemp("keys")
    made = GpgKey(directory, "org"), GpgKey(directory, "other")
    yield made
    for key in made:
        key.close()


def decide(
    tmp_path: Path, policy: dict[str, object], signatures: list[Signature], ref: str = REF
) -> evaluate.Verdict:
    path = write_policy(tmp_path / "policy.json", policy)
    verifier = evaluate.Verifier(TrustOptions(signature_policy=str(path)))
    return verifier.require(ref, scopes.of(parse(ref)), MANIFEST, DIGEST, lambda: signatures)


def rejected(tmp_path: Path, policy: dict[str, object], signatures: list[Signature]) -> str:
    with pytest.raises(SignatureRejected) as caught:
        decide(tmp_path, policy, signatures)
    return str(caught.value)


def gpg_signature(key: GpgKey, digest: str = DIGEST, ref: str = REF) -> SimpleSignature:
    return SimpleSignature(key.sign(payload(digest, ref)))


def cosign_signature(key: SigstoreKey, ref: str = REF, digest: str = DIGEST) -> SigstoreSignature:
    data = payload(digest, ref, SIGSTORE)
    return SigstoreSignature(
        "application/vnd.dev.cosign.simplesigning.v1+json",
        data,
        {"dev.cosignproject.cosign/signature": key.sign(data)},
    )


def test_signed_by_the_organisations_key(tmp_path: Path, keys: tuple[GpgKey, GpgKey]) -> None:
    org, other = keys
    policy = only("docker", "reg.example.com/org", signed_by(org))
    verdict = decide(tmp_path, policy, [gpg_signature(other), gpg_signature(org)])
    assert verdict.accepted and verdict.section == "transports.docker[reg.example.com/org]"
    assert verdict.by == [{"requirement": "signedBy", "key": org.fingerprint}]
    assert verdict.to_json()["policy"] == str(tmp_path / "policy.json")


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unsigned", "a signature was required, but no signature exists"),
        ("other key", "invalid GPG signature"),
        ("other manifest", "the signature is for digest sha256:0000"),
        (
            "other identity",
            "for identity 'reg.example.com/org/app:v2', which matchRepoDigestOrExact",
        ),
    ],
)
def test_what_a_signed_by_policy_refuses(
    tmp_path: Path, keys: tuple[GpgKey, GpgKey], case: str, reason: str
) -> None:
    org, other = keys
    signatures = {
        "unsigned": [],
        "other key": [gpg_signature(other)],
        "other manifest": [gpg_signature(org, digest="sha256:" + "0" * 64)],
        "other identity": [gpg_signature(org, ref="reg.example.com/org/app:v2")],
    }[case]
    message = rejected(tmp_path, only("docker", "reg.example.com", signed_by(org)), signatures)
    assert message.startswith(
        f"{REF}: rejected by the signature policy {tmp_path / 'policy.json'}"
        " (transports.docker[reg.example.com]): "
    )
    assert reason in message and "\n" not in message


def test_sigstore_signed(tmp_path: Path) -> None:
    key, other = SigstoreKey(tmp_path, "a"), SigstoreKey(tmp_path, "b")
    policy = only("docker", "reg.example.com/org", sigstore_signed(key))
    verdict = decide(tmp_path, policy, [cosign_signature(key)])
    assert verdict.by[0]["requirement"] == "sigstoreSigned"
    assert verdict.by[0]["key"].startswith("SHA256:")
    assert "verification failed" in rejected(tmp_path, policy, [cosign_signature(other)])
    repo_only = [cosign_signature(key, ref="reg.example.com/org/app")]  # as cosign signs
    assert "matchRepoDigestOrExact does not accept" in rejected(tmp_path, policy, repo_only)
    by_repo = only("docker", "reg.example.com/org",
                   sigstore_signed(key, signedIdentity={"type": "matchRepository"}))  # fmt: skip
    assert decide(tmp_path, by_repo, repo_only).accepted
    gpg_only = [SimpleSignature(b"\xa3x")]
    assert "no signature exists (1 of another kind)" in rejected(tmp_path, policy, gpg_only)


def test_every_requirement_must_accept(tmp_path: Path, keys: tuple[GpgKey, GpgKey]) -> None:
    org, _ = keys
    key = SigstoreKey(tmp_path)
    both = only("docker", "reg.example.com", signed_by(org), sigstore_signed(key))
    signatures: list[Signature] = [gpg_signature(org), cosign_signature(key)]
    assert [b["requirement"] for b in decide(tmp_path, both, signatures).by] == [
        "signedBy", "sigstoreSigned",
    ]  # fmt: skip
    assert "no signature exists" in rejected(tmp_path, both, signatures[:1])


def test_what_hostjob_cannot_verify_refuses_naming_itself(tmp_path: Path) -> None:
    keyless = {"type": "sigstoreSigned", "fulcio": {"caPath": "/ca", "oidcIssuer": "x",
               "subjectEmail": "a@b"}, "rekorPublicKeyPath": "/rekor.pub"}  # fmt: skip
    message = rejected(tmp_path, {"default": [keyless]}, [])
    assert "(default): sigstoreSigned: keyless (Fulcio) verification is not supported" in message


def test_no_signatures_are_looked_for_when_none_is_asked(tmp_path: Path) -> None:
    def fetch() -> list[Signature]:
        raise AssertionError("fetched")

    path = write_policy(tmp_path / "p.json", {"default": [{"type": "insecureAcceptAnything"}]})
    verifier = evaluate.Verifier(TrustOptions(signature_policy=str(path)))
    verdict = verifier.check(scopes.of(parse(REF)), MANIFEST, DIGEST, fetch)
    assert verdict.accepted and verdict.by == [] and verdict.section == "default"
    assert "reject" in rejected(tmp_path, {"default": [{"type": "reject"}]}, [])


def test_an_unreadable_key_refuses_the_image(tmp_path: Path) -> None:
    policy = {"default": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/nonexistent"}]}
    assert "cannot read /nonexistent: No such file" in rejected(tmp_path, policy, [])


def test_the_decision_is_logged(tmp_path: Path, keys: tuple[GpgKey, GpgKey]) -> None:
    logged = tmp_path / "hostjob.log"
    log.configure(str(logged), "json")
    try:
        decide(
            tmp_path,
            only("docker", "reg.example.com", signed_by(keys[0])),
            [gpg_signature(keys[0])],
        )
    finally:
        log.configure(None)
    record = json.loads(logged.read_text())
    assert record["level"] == "info"
    assert f"{REF} ({DIGEST}): accepted by the signature policy" in record["msg"]
    assert f"signedBy GPG key {keys[0].fingerprint}" in record["msg"]


def test_without_a_policy_images_come_in_and_it_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(evaluate.policies, "SYSTEM_POLICY", str(tmp_path / "none.json"))
    monkeypatch.setattr(evaluate, "_told", False)
    verifier = evaluate.Verifier(TrustOptions())
    for _ in range(2):
        verdict = verifier.require(REF, scopes.of(parse(REF)), MANIFEST, DIGEST, list)
        assert verdict.accepted and verdict.policy is None
    err = capsys.readouterr().err
    assert err.count("no signature policy") == 1, err


def test_a_given_policy_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="No such file"):
        evaluate.Verifier(TrustOptions(signature_policy=str(tmp_path / "missing.json")))
