"""The image side's errors (``hostjob run IMAGE``, pull, push, unpack, the store): the
``ImageError`` branch of hostjob's one error tree (``hostjob.errors``), reported by the
CLI as every ``HostjobError`` is.

A module of its own so that no runtime command (create, start, delete: each a fresh
interpreter) makes these classes, which only the image side raises.

    ImageError                 the image path
    ├── InvalidReference       an image reference or transport that cannot be parsed
    ├── RegistryError          the registry answered with an error
    │   └── RegistryStalled    the registry (or its token realm) stopped making progress
    ├── DigestMismatch         a blob's content does not match its digest or size
    ├── PolicyError            a signature policy or registries.d file that cannot be used
    ├── SignatureRejected      the signature policy refuses the image
    ├── InvalidSignature       one signature does not verify (a reason of a rejection)
    ├── UnpackError            a hostile or broken layer tar
    │   └── UnpackLimit        an image unpacks to more bytes or inodes than it may
    └── ImageNotFound          no such image in the store
"""

from __future__ import annotations

from hostjob.errors import HostjobError


class ImageError(HostjobError):
    pass


class InvalidReference(ImageError):
    pass


class RegistryError(ImageError):
    pass


class RegistryStalled(RegistryError):
    """A registry connection moved too little for too long (never retried: a retry
    would only wait as long again)."""


class DigestMismatch(ImageError):
    pass


class PolicyError(ImageError):
    """A ``policy.json`` or ``registries.d`` file that is missing, unreadable or not
    of the format containers/image reads: nothing is pulled under a policy that
    cannot be read."""


class SignatureRejected(ImageError):
    """The signature policy refuses the image (``hostjob.images.trust``): raised after
    its manifest is read and before any of its blobs is stored."""


class InvalidSignature(ImageError):
    """One signature that does not verify, or says something else than the image:
    the policy's evaluation collects these as the reasons of a rejection, since
    another signature of the image may still be accepted."""


class UnpackError(ImageError):
    pass


class UnpackLimit(UnpackError):
    """An image's layers unpack to more bytes or inodes than the pull allows."""


class ImageNotFound(ImageError):
    pass
