"""What a signature signs: the JSON payload of both signature formats.

    {"critical": {"type": "atomic container signature",        (simple signing, GPG)
                  or "cosign container image signature",        (sigstore)
                  "image": {"docker-manifest-digest": "sha256:..."},
                  "identity": {"docker-reference": "host/repo:tag"}},
     "optional": {"creator": "...", "timestamp": 1700000000, ...}}

Read only after the signature over it verified, and strictly (``jsonfields``): a
field missing, unknown in ``critical``, or of the wrong kind makes the signature
invalid. ``optional`` may hold anything (cosign writes ``null`` there).
"""

from __future__ import annotations

from hostjob.images import imagespec
from hostjob.images.errors import InvalidSignature
from hostjob.images.trust import jsonfields

SIMPLE_SIGNING = "atomic container signature"
SIGSTORE = "cosign container image signature"


class Payload:
    """The two things a signature says: the manifest digest and the name it signs."""

    __slots__ = ("digest", "docker_reference")

    def __init__(self, digest: str, docker_reference: str) -> None:
        self.digest = digest
        self.docker_reference = docker_reference


def parse(data: bytes, kind: str) -> Payload:
    """The payload of a signature of type ``kind`` (``SIMPLE_SIGNING``, ``SIGSTORE``)."""
    what, bad = "signature payload", InvalidSignature
    top = jsonfields.exact_fields(
        jsonfields.loads(data, what, bad), ("critical", "optional"), what, bad
    )
    optional = top["optional"]
    if not (optional is None and kind == SIGSTORE):
        fields = jsonfields.obj(optional, f"{what} optional", bad)
        if "creator" in fields and type(fields["creator"]) is not str:
            raise InvalidSignature(f"{what}: optional.creator is not a string")
        stamp = fields.get("timestamp")
        if "timestamp" in fields and not (
            type(stamp) is int or (type(stamp) is float and stamp.is_integer())
        ):
            raise InvalidSignature(f"{what}: optional.timestamp is not an integer")
    critical = jsonfields.exact_fields(
        top["critical"], ("type", "image", "identity"), f"{what} critical", bad
    )
    found = jsonfields.string(critical, "type", f"{what} critical", bad)
    if found != kind:
        raise InvalidSignature(f"{what}: unrecognized signature type {found!r}")
    image = jsonfields.exact_fields(
        critical["image"], ("docker-manifest-digest",), f"{what} critical.image", bad
    )
    digest = jsonfields.string(image, "docker-manifest-digest", f"{what} critical.image", bad)
    if not imagespec.is_digest(digest):
        raise InvalidSignature(f"{what}: invalid docker-manifest-digest {digest!r}")
    identity = jsonfields.exact_fields(
        critical["identity"], ("docker-reference",), f"{what} critical.identity", bad
    )
    name = jsonfields.string(identity, "docker-reference", f"{what} critical.identity", bad)
    return Payload(digest, name)
