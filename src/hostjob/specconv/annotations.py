"""The names of the annotations that choose a job container's mount mode, mount point and
user (read by ``hostjob.specconv.convert``), hostjob's and hcsshim's, and how an
inherit-user one is read.

Apart from the conversion so that the table of what only the operator may choose for a
pod's container (``hostjob.specconv.trust``) names them too without importing the
conversion. ``io.hostjob.user`` and ``io.hostjob.secrets`` are
``hostjob.specconv.isolation``'s; a pod's own (``io.hostjob.job-container``,
``io.hostjob.pod-namespaces``) ``hostjob.specconv.pods``'.
"""

from __future__ import annotations

ANNOTATION_MOUNT_MODE = "io.hostjob.mount-mode"
ANNOTATION_MOUNT_POINT = "io.hostjob.rootfs-mount-point"
ANNOTATION_INHERIT_USER = "io.hostjob.inherit-user"
HCS_CONTAINER = "microsoft.com/hostprocess-container"
HCS_ROOTFS_LOCATION = "microsoft.com/hostprocess-rootfs-location"
HCS_INHERIT_USER = "microsoft.com/hostprocess-inherit-user"


def truthy(value: str | None) -> bool:
    """An inherit-user annotation's yes: ``true``, ``1`` or ``yes``, in any case."""
    return value is not None and value.lower() in ("true", "1", "yes")


def inherit_user(annotations: dict[str, str], default: str | None) -> bool:
    """Whether the job runs as its launcher: either inherit-user annotation says yes;
    ``default`` (the operator's ``--default-inherit-user``) only where neither is given."""
    own = annotations.get(ANNOTATION_INHERIT_USER)
    hcs = annotations.get(HCS_INHERIT_USER)
    if own is None and hcs is None:
        return truthy(default)
    return truthy(own) or truthy(hcs)
