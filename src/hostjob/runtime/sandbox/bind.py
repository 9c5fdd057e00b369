"""Bind mode, the host's side: what is checked and made on the host before the fork.

A bind-mode container's init gets a private mount namespace
(``hostjob.runtime.sandbox.namespace``) in which the rootfs is bound at the mount
point, each volume at its real destination and each tmpfs volume mounted at its. The
host's mount table gains nothing, and its tree gains only a missing mount point (the
operator's: ``/hpc``, a ``--default-rootfs-mount-point``; empty, recorded first and
removed at delete, shared with other containers that need it). A volume's destination
the host lacks is made in the job's namespace alone (``hostjob.runtime.sandbox.cover``).
"""

from __future__ import annotations

import posix

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.runtime.sandbox.steps import (
    canonical,
    make_like,
    make_parent,
    system_tree,
)
from hostjob.runtime.sandbox.undo import REMOVE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.runtime.sandbox.provider import Recorder
    from hostjob.specconv.jobconfig import JobConfig


def prepare_bind(job: JobConfig, record: Recorder, adopt: Callable[[list[str]], None]) -> None:
    """Before the fork: make sure the mount point exists on the host, and that every
    volume can be mounted.

    A missing mount point is made empty, recorded for delete. A volume's source must
    exist; a missing destination under ``/proc`` or ``/sys`` is refused (a directory
    made there could be a new cgroup), any other is made in the job's namespace by its
    init. The caller holds the state root's lock for shared paths.

    ``adopt`` is told, first, about every target (canonical): whatever another
    container created at or above one of them (the mount point, or what an earlier
    hostjob made for a volume) must be removed by whichever of them is deleted last.
    The rootfs, a directory, the caller has checked."""
    targets = [
        (asked, canonical(asked, f"mount target {asked}"), source)
        for asked, source in _bind_targets(job)
    ]
    adopt([target for _asked, target, _source in targets])
    for asked, target, _source in targets[1:]:
        tree = system_tree(target)
        if tree in ("/proc", "/sys") and not paths.lexists(target):
            raise MountError(
                f"volume {asked}: {target} does not exist, and hostjob makes nothing"
                f" under {tree} (only a path that exists there can be a mount target)"
            )
    asked, target, _source = targets[0]
    parent_fd, name = make_parent(target, f"mount target {asked}", record)
    try:
        try:
            posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            return
        except FileNotFoundError:
            pass
        record([REMOVE, target])
        make_like(job.rootfs, name, parent_fd)
    finally:
        posix.close(parent_fd)


def _bind_targets(job: JobConfig) -> list[tuple[str, str | None]]:
    """(target, source) of the rootfs and each volume, in mount order; a tmpfs has no
    source (its target is a directory)."""
    targets: list[tuple[str, str | None]] = [(job.mount_point, job.rootfs)]
    for volume in job.volumes:
        if volume.is_tmpfs:
            targets.append((volume.destination, None))
            continue
        if not paths.exists(volume.source):
            raise MountError(f"volume {volume.destination}: source {volume.source} does not exist")
        targets.append((volume.destination, volume.source))
    return targets
