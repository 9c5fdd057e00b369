"""Simple signing verified by gpgv against a keyring of the requirement's keys only:
real keys and signatures made by gpg in throw-away homes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.images.errors import InvalidSignature, PolicyError
from hostjob.images.trust import gpg
from tests.fixtures.signing import GpgKey, payload

DIGEST = "sha256:" + "d" * 64


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GpgKey, GpgKey]]:
    directory = tmp_path_factory.mktemp("gpg")
    made = GpgKey(directory, "org"), GpgKey(directory, "other")
    yield made
    for key in made:
        key.close()


def test_a_signature_by_a_trusted_key_gives_its_payload(keys: tuple[GpgKey, GpgKey]) -> None:
    org, _ = keys
    data = payload(DIGEST, "h/a:v1")
    ring = gpg.keyring([org.public(armor=True)], "test")
    assert ring == org.public()  # dearmored, byte for byte
    assert gpg.verify(ring, org.sign(data)) == (data, org.fingerprint)


def test_another_key_a_tampered_signature_and_two_signers_are_refused(
    keys: tuple[GpgKey, GpgKey],
) -> None:
    org, other = keys
    ring = gpg.keyring([org.public()], "test")
    data = payload(DIGEST, "h/a:v1")
    with pytest.raises(InvalidSignature, match=r"NO_PUBKEY|ERRSIG"):
        gpg.verify(ring, other.sign(data))
    signature = bytearray(org.sign(data))
    signature[len(signature) // 2] ^= 0x55
    with pytest.raises(InvalidSignature):
        gpg.verify(ring, bytes(signature))
    both = gpg.keyring([org.public(), other.public()], "test")
    with pytest.raises(InvalidSignature, match="2 GPG signatures where one is expected"):
        gpg.verify(both, org.sign(data, other))
    with pytest.raises(InvalidSignature, match="no public keys"):
        gpg.verify(b"", org.sign(data))


def test_what_gpgv_writes_is_bounded(keys: tuple[GpgKey, GpgKey]) -> None:
    """A small signature may carry a huge compressed payload: it is cut off."""
    org, _ = keys
    signature = org.sign(b"\0" * (gpg.PAYLOAD_LIMIT * 4))
    assert len(signature) < gpg.PAYLOAD_LIMIT // 100
    with pytest.raises(InvalidSignature, match="too large"):
        gpg.verify(gpg.keyring([org.public()], "test"), signature)


def test_armor_that_is_not_right_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="without its END line"):
        gpg.keyring([b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n"], "key")
    with pytest.raises(PolicyError, match="not base64"):
        gpg.keyring(
            [b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----"],
            "key",
        )


def test_no_gpgv_is_a_policy_error(
    keys: tuple[GpgKey, GpgKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpg, "GPGV", "/nonexistent/gpgv")
    with pytest.raises(PolicyError, match="needs GnuPG's"):
        gpg.verify(keys[0].public(), keys[0].sign(b"{}"))
