"""Sigstore signatures made with a key (``cosign sign --key``, ``skopeo copy
--sign-by-sigstore-private-key``): a JSON payload and, in the annotation
``dev.cosignproject.cosign/signature``, the base64 signature over it, verified here
with the ``cryptography`` package against the requirement's public keys (PEM:
ECDSA with SHA-256, RSA PKCS #1 v1.5 with SHA-256, or Ed25519, as cosign's verifiers).

What is left out, and refused by the policy's evaluation with that reason: keyless
signatures (a Fulcio certificate and its Rekor inclusion proof), a Rekor public key
(proof that a keyed signature is in the transparency log) and X.509 ``pki`` roots.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import TYPE_CHECKING

from hostjob.images.errors import InvalidSignature, PolicyError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PAYLOAD_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"


class PublicKey:
    """One trusted key and its fingerprint (``SHA256:`` and the base64 of the digest
    of its DER form, as ``ssh-keygen -l`` prints a key)."""

    __slots__ = ("fingerprint", "key")

    def __init__(self, key: PublicKeyTypes, fingerprint: str) -> None:
        self.key = key
        self.fingerprint = fingerprint


def load_keys(pems: Iterable[bytes], what: str) -> list[PublicKey]:
    """The PEM public keys of a requirement; ``PolicyError`` for one that is not."""
    from cryptography.hazmat.primitives import serialization

    out = []
    for pem in pems:
        try:
            key = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError) as err:
            raise PolicyError(f"{what}: not a PEM public key: {err}") from err
        der = key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        digest = base64.b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")
        out.append(PublicKey(key, f"SHA256:{digest}"))
    return out


def verify(keys: list[PublicKey], payload: bytes, encoded_signature: str) -> PublicKey:
    """The key of ``keys`` whose signature over ``payload`` the base64
    ``encoded_signature`` is; ``InvalidSignature`` when none."""
    from cryptography.exceptions import InvalidSignature as BadSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    try:
        signature = base64.b64decode(encoded_signature, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidSignature("the sigstore signature is not base64") from err
    for trusted in keys:
        key = trusted.key
        try:
            if isinstance(key, ec.EllipticCurvePublicKey):
                key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
            elif isinstance(key, rsa.RSAPublicKey):
                key.verify(signature, payload, padding.PKCS1v15(), hashes.SHA256())
            elif isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(signature, payload)
            else:
                continue
        except BadSignature:
            continue
        return trusted
    raise InvalidSignature("cryptographic signature verification failed")
