"""The runtime-spec state document (``hostjob state``, ``list --format json``).

A module of its own so that printing a state does not load the config models of
``hostjob.spec.runtime``.
"""

from __future__ import annotations

from hostjob.spec import OCI_VERSION as OCI_VERSION
from hostjob.spec._decode import Model, integer, string, string_map


class State(Model):
    """The runtime-spec state document, as ``hostjob state`` prints it: runc's shape,
    plus the job container's mount mode and sandbox mount point as extra fields."""

    __slots__ = (
        "annotations",
        "bundle",
        "created",
        "id",
        "mount_mode",
        "mount_point",
        "oci_version",
        "owner",
        "pid",
        "rootfs",
        "status",
    )
    oci_version: str | None
    id: str | None
    pid: int | None
    status: str | None
    bundle: str | None
    rootfs: str | None
    created: str | None
    annotations: dict[str, str] | None
    owner: str | None
    mount_mode: str | None
    mount_point: str | None
    FIELDS = (
        ("ociVersion", "oci_version", string),
        ("id", "id", string),
        ("pid", "pid", integer),
        ("status", "status", string),
        ("bundle", "bundle", string),
        ("rootfs", "rootfs", string),
        ("created", "created", string),
        ("annotations", "annotations", string_map),
        ("owner", "owner", string),
        ("mountMode", "mount_mode", string),
        ("mountPoint", "mount_point", string),
    )
