"""A policy's requirements, read and evaluated as containers-policy.json(5) says.

    insecureAcceptAnything   accept (nothing is checked)
    reject                   refuse
    signedBy                 a simple-signing (GPG) signature by one of the keys
                             (``keyType: GPGKeys``; ``keyPath``, ``keyPaths`` or
                             ``keyData``), for the image's manifest digest and an
                             identity ``signedIdentity`` allows
    sigstoreSigned           a sigstore signature by one of the public keys
                             (``keyPath``, ``keyPaths``, ``keyData`` or ``keyDatas``),
                             likewise
    signedBaseLayer          read, and refused when used: containers/image has never
                             implemented it either

A requirement list accepts an image when every one of its requirements does; a
signature requirement when one of the image's signatures of its kind verifies and
matches. What hostjob does not verify -- keyless (``fulcio``), ``rekorPublicKey*``,
``pki``, a ``keyType`` other than ``GPGKeys`` -- is read, and refuses the image it
applies to, naming itself: never skipped.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import TYPE_CHECKING

from hostjob.images.errors import ImageError, InvalidSignature, PolicyError
from hostjob.images.trust import identity, jsonfields, payload
from hostjob.images.trust.formats import SigstoreSignature, SimpleSignature

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.trust.formats import Signature
    from hostjob.images.trust.scopes import ImageScope

KEY_FILE_LIMIT = 16 << 20


class Candidate:
    """The image a decision is about: where it stands in the policy, its manifest and
    digest, and its signatures (found on first use: a policy that asks for none
    fetches none)."""

    __slots__ = ("_found", "digest", "fetch", "manifest", "scope")

    def __init__(
        self,
        scope: ImageScope,
        manifest: bytes,
        digest: str,
        fetch: Callable[[], list[Signature]],
    ) -> None:
        self.scope = scope
        self.manifest = manifest
        self.digest = digest
        self.fetch = fetch
        self._found: list[Signature] | None = None

    def signatures(self) -> list[Signature]:
        if self._found is None:
            self._found = self.fetch()
        return self._found


class Outcome:
    """One requirement's answer: ``by`` names the requirement and the key that
    vouched, if any (``{"requirement": "signedBy", "key": FINGERPRINT}``)."""

    __slots__ = ("accepted", "by", "reason")

    def __init__(self, accepted: bool, reason: str = "", by: dict[str, str] | None = None) -> None:
        self.accepted = accepted
        self.reason = reason
        self.by = by


class Requirement:
    kind = ""

    def evaluate(self, image: Candidate) -> Outcome:
        raise NotImplementedError


class InsecureAcceptAnything(Requirement):
    kind = "insecureAcceptAnything"

    def evaluate(self, image: Candidate) -> Outcome:
        return Outcome(True)


class Reject(Requirement):
    kind = "reject"

    def evaluate(self, image: Candidate) -> Outcome:
        return Outcome(False, "the policy rejects every image here (reject)")


class Unsupported(Requirement):
    """A requirement hostjob reads but cannot verify: it refuses, saying so."""

    def __init__(self, kind: str, why: str) -> None:
        self.kind = kind
        self.why = why

    def evaluate(self, image: Candidate) -> Outcome:
        return Outcome(False, f"{self.kind}: {self.why}")


class _Signed(Requirement):
    """What ``signedBy`` and ``sigstoreSigned`` share: keys from files or data, an
    identity rule, one accepted signature of their kind among the image's."""

    def __init__(
        self, paths: list[str], datas: list[bytes], rule: identity.IdentityRule, what: str
    ) -> None:
        self.paths = paths
        self.datas = datas
        self.rule = rule
        self.what = what

    def key_bytes(self) -> list[bytes]:
        return [*self.datas, *(jsonfields.read(p, KEY_FILE_LIMIT, self.what) for p in self.paths)]

    def evaluate(self, image: Candidate) -> Outcome:
        try:
            check = self.checker()
        except ImageError as err:
            return Outcome(False, f"{self.kind}: {err}")
        reasons, others = [], 0
        for signature in image.signatures():
            if not self.takes(signature):
                others += 1
                continue
            try:
                by, signed = check(signature)
                _match(image, signed, self.rule)
            except InvalidSignature as err:
                reasons.append(str(err))
                continue
            return Outcome(True, by={"requirement": self.kind, "key": by})
        if not reasons:
            text = "a signature was required, but no signature exists"
            if others:
                text += f" ({others} of another kind)"
            return Outcome(False, text)
        if len(reasons) == 1:
            return Outcome(False, reasons[0])
        return Outcome(False, "none of the signatures was accepted: " + "; ".join(reasons))

    def checker(self) -> Callable[[Signature], tuple[str, payload.Payload]]:
        raise NotImplementedError

    def takes(self, signature: Signature) -> bool:
        raise NotImplementedError


class SignedBy(_Signed):
    kind = "signedBy"

    def checker(self) -> Callable[[Signature], tuple[str, payload.Payload]]:
        from hostjob.images.trust import gpg

        ring = gpg.keyring(self.key_bytes(), self.what)

        def check(signature: Signature) -> tuple[str, payload.Payload]:
            assert isinstance(signature, SimpleSignature)
            data, fingerprint = gpg.verify(ring, signature.blob)
            return fingerprint, payload.parse(data, payload.SIMPLE_SIGNING)

        return check

    def takes(self, signature: Signature) -> bool:
        return isinstance(signature, SimpleSignature)


class SigstoreSigned(_Signed):
    kind = "sigstoreSigned"

    def checker(self) -> Callable[[Signature], tuple[str, payload.Payload]]:
        from hostjob.images.trust import sigstore

        keys = sigstore.load_keys(self.key_bytes(), self.what)

        def check(signature: Signature) -> tuple[str, payload.Payload]:
            assert isinstance(signature, SigstoreSignature)
            encoded = signature.annotations.get(sigstore.SIGNATURE_ANNOTATION)
            if encoded is None:
                raise InvalidSignature(f"missing {sigstore.SIGNATURE_ANNOTATION} annotation")
            key = sigstore.verify(keys, signature.payload, encoded)
            return key.fingerprint, payload.parse(signature.payload, payload.SIGSTORE)

        return check

    def takes(self, signature: Signature) -> bool:
        from hostjob.images.trust.sigstore import PAYLOAD_MEDIA_TYPE

        return isinstance(signature, SigstoreSignature) and (
            signature.media_type == PAYLOAD_MEDIA_TYPE
        )


def _match(image: Candidate, signed: payload.Payload, rule: identity.IdentityRule) -> None:
    """``InvalidSignature`` unless the signature is for this manifest and an identity
    ``rule`` allows."""
    algorithm, _, encoded = signed.digest.partition(":")
    if hashlib.new(algorithm, image.manifest).hexdigest() != encoded:
        raise InvalidSignature(f"the signature is for digest {signed.digest}, not this manifest")
    if not rule.allows(image.scope.docker_ref, signed.docker_reference):
        named = image.scope.docker_ref
        pulled = f"image {named}" if named else "an image without a registry name"
        raise InvalidSignature(
            f"the signature is for identity {signed.docker_reference!r}, which"
            f" {rule.kind} does not accept for {pulled}"
        )


# --- reading --------------------------------------------------------------------------

SIGNED_BY_FIELDS = ("type", "keyType", "keyPath", "keyPaths", "keyData", "signedIdentity")
SIGSTORE_FIELDS = (
    "type",
    "keyPath",
    "keyPaths",
    "keyData",
    "keyDatas",
    "fulcio",
    "rekorPublicKeyPath",
    "rekorPublicKeyPaths",
    "rekorPublicKeyData",
    "rekorPublicKeyDatas",
    "pki",
    "signedIdentity",
)


def parse_list(data: object, what: str) -> list[Requirement]:
    """A non-empty list of requirements."""
    if type(data) is not list or not data:
        raise PolicyError(f"{what}: expected a non-empty list of requirements")
    return [parse_one(item, f"{what}[{i}]") for i, item in enumerate(data)]


def parse_one(data: object, what: str) -> Requirement:
    kind = jsonfields.string(data, "type", what)
    if kind == "insecureAcceptAnything":
        jsonfields.exact_fields(data, ("type",), what)
        return InsecureAcceptAnything()
    if kind == "reject":
        jsonfields.exact_fields(data, ("type",), what)
        return Reject()
    if kind == "signedBy":
        return _signed_by(jsonfields.known_fields(data, SIGNED_BY_FIELDS, what), what)
    if kind == "sigstoreSigned":
        return _sigstore_signed(jsonfields.known_fields(data, SIGSTORE_FIELDS, what), what)
    if kind == "signedBaseLayer":
        fields = jsonfields.exact_fields(data, ("type", "baseLayerIdentity"), what)
        identity.parse_rule(fields["baseLayerIdentity"], f"{what}.baseLayerIdentity")
        return Unsupported(kind, "not implemented (by containers/image either)")
    raise PolicyError(f"{what}: unknown requirement type {kind!r}")


def _rule(fields: dict[str, object], what: str) -> identity.IdentityRule:
    if "signedIdentity" not in fields:
        return identity.DEFAULT
    return identity.parse_rule(fields["signedIdentity"], f"{what}.signedIdentity")


def _signed_by(fields: dict[str, object], what: str) -> Requirement:
    key_type = jsonfields.string(fields, "keyType", what)
    if key_type not in ("GPGKeys", "signedByGPGKeys", "X509Certificates", "signedByX509CAs"):
        raise PolicyError(f"{what}: unknown keyType {key_type!r}")
    sources = [k for k in ("keyPath", "keyPaths", "keyData") if k in fields]
    if len(sources) != 1:
        raise PolicyError(f"{what}: exactly one of keyPath, keyPaths and keyData must be given")
    paths, datas = _keys(fields, sources[0], what)
    rule = _rule(fields, what)
    if key_type != "GPGKeys":
        return Unsupported("signedBy", f"keyType {key_type} is not implemented")
    return SignedBy(paths, datas, rule, what)


def _sigstore_signed(fields: dict[str, object], what: str) -> Requirement:
    names = ("keyPath", "keyPaths", "keyData", "keyDatas", "fulcio", "pki")
    sources = [k for k in names if k in fields]
    if len(sources) != 1:
        raise PolicyError(
            f"{what}: exactly one of keyPath, keyPaths, keyData, keyDatas, fulcio and pki"
            " must be given"
        )
    rule = _rule(fields, what)
    rekor = [k for k in fields if k.startswith("rekorPublicKey")]
    if sources[0] in ("fulcio", "pki"):
        jsonfields.obj(fields[sources[0]], f"{what}.{sources[0]}")
        kind = "keyless (Fulcio)" if sources[0] == "fulcio" else "X.509 (pki)"
        return Unsupported("sigstoreSigned", f"{kind} verification is not supported by hostjob")
    paths, datas = _keys(fields, sources[0], what)
    if rekor:
        return Unsupported(
            "sigstoreSigned", f"{rekor[0]}: Rekor log verification is not supported by hostjob"
        )
    return SigstoreSigned(paths, datas, rule, what)


def _keys(fields: dict[str, object], source: str, what: str) -> tuple[list[str], list[bytes]]:
    """``(paths, data)`` of a key source field: a path, paths, base64 data, or a list
    of base64 data."""
    value = fields[source]
    many = source.endswith("s")
    items = value if many else [value]
    if type(items) is not list or (many and not items) or any(type(v) is not str for v in items):
        raise PolicyError(f"{what}: {source} must be {'a list of strings' if many else 'a string'}")
    if source.startswith("keyPath"):
        if any(not v for v in items):
            raise PolicyError(f"{what}: {source}: an empty path")
        return list(items), []
    try:
        return [], [base64.b64decode(v, validate=True) for v in items]
    except (binascii.Error, ValueError) as err:
        raise PolicyError(f"{what}: {source} is not base64") from err
