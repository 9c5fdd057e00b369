"""Sigstore signatures verified with cryptography: ECDSA P-256, RSA and Ed25519 keys,
as cosign's verifiers take them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostjob.images.errors import InvalidSignature, PolicyError
from hostjob.images.trust import sigstore
from tests.fixtures.signing import SigstoreKey


@pytest.mark.parametrize("kind", ["ec", "rsa", "ed25519"])
def test_each_kind_of_key(tmp_path: Path, kind: str) -> None:
    key, other = SigstoreKey(tmp_path, "a", kind), SigstoreKey(tmp_path, "b", kind)
    keys = sigstore.load_keys([other.public_pem, key.public_pem], "test")
    assert keys[1].fingerprint.startswith("SHA256:") and keys[0].fingerprint != keys[1].fingerprint
    assert sigstore.verify(keys, b"payload", key.sign(b"payload")) is keys[1]
    with pytest.raises(InvalidSignature, match="verification failed"):
        sigstore.verify(keys, b"payload!", key.sign(b"payload"))
    with pytest.raises(InvalidSignature, match="verification failed"):
        sigstore.verify(keys[:1], b"payload", key.sign(b"payload"))


def test_bad_input(tmp_path: Path) -> None:
    keys = sigstore.load_keys([SigstoreKey(tmp_path).public_pem], "test")
    with pytest.raises(InvalidSignature, match="not base64"):
        sigstore.verify(keys, b"p", "not base64!")
    with pytest.raises(PolicyError, match="not a PEM public key"):
        sigstore.load_keys([b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"], "k")
