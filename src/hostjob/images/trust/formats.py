"""The two kinds of signature an image may carry, as found (nothing verified yet).

    SimpleSignature    a GPG-signed payload: a lookaside store's ``signature-N`` file
    SigstoreSignature  a payload, its media type and annotations: a layer of a
                       registry's ``sha256-<digest>.sig`` attachment (or of a layout's)

A lookaside file is either a bare OpenPGP message (what ``skopeo copy --sign-by``
writes) or, in containers/image's newer form, a NUL byte, the format's name
(``simple-signing`` or ``sigstore-json``) and a newline before the data.
"""

from __future__ import annotations

import base64
import binascii

from hostjob.images.errors import InvalidSignature
from hostjob.images.trust import jsonfields

# The first byte of an OpenPGP message: compressed data, a one-pass signature or a
# signature packet, in the old or the new packet format.
_OPENPGP_STARTS = frozenset(
    {0xA0, 0xA1, 0xA2, 0xA3, 0xC8, 0x90, 0x91, 0x92, 0x3D, 0xC4, 0x88, 0x89, 0x8A, 0x8B, 0xC2}
)


class SimpleSignature:
    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob


class SigstoreSignature:
    __slots__ = ("annotations", "media_type", "payload")

    def __init__(self, media_type: str, payload: bytes, annotations: dict[str, str]) -> None:
        self.media_type = media_type
        self.payload = payload
        self.annotations = annotations


Signature = SimpleSignature | SigstoreSignature


def from_blob(blob: bytes) -> Signature:
    """A lookaside file's signature; ``InvalidSignature`` for another format."""
    if not blob:
        raise InvalidSignature("an empty signature")
    if blob[0] in _OPENPGP_STARTS:
        return SimpleSignature(blob)
    if blob[0] != 0:
        raise InvalidSignature(f"unrecognized signature format, starting with {blob[0]:#x}")
    name, found, data = blob[1:].partition(b"\n")
    if not found:
        raise InvalidSignature("a signature without its format's name")
    if name == b"simple-signing":
        return SimpleSignature(data)
    if name == b"sigstore-json":
        return _sigstore_json(data)
    raise InvalidSignature(f"unrecognized signature format {name[:40]!r}")


def _sigstore_json(data: bytes) -> SigstoreSignature:
    what, bad = "sigstore signature", InvalidSignature
    doc = jsonfields.exact_fields(
        jsonfields.loads(data, what, bad), ("mimeType", "payload", "annotations"), what, bad
    )
    media_type = jsonfields.string(doc, "mimeType", what, bad)
    try:
        payload = base64.b64decode(jsonfields.string(doc, "payload", what, bad), validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidSignature(f"{what}: the payload is not base64") from err
    annotations = jsonfields.obj(doc["annotations"], f"{what} annotations", bad)
    if any(type(v) is not str for v in annotations.values()):
        raise InvalidSignature(f"{what}: an annotation is not a string")
    return SigstoreSignature(media_type, payload, annotations)
