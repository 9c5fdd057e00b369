"""Bind mode, the host's side: the mount targets made on the host before the fork.

A bind-mode container's init gets a private mount namespace
(``hostjob.runtime.sandbox.namespace``) in which the rootfs is bound at the mount
point, each volume at its real destination and each tmpfs volume mounted at its. The
host's mount table gains nothing; only a missing mount point or volume destination is
created on the host (empty, recorded first and removed at delete, shared with other
containers that need it).
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
    """Before the fork: make sure every bind-mode mount target exists on the host.

    A missing target is made empty where that is harmless (a file or directory under
    ``/run``, say), recorded for delete. Never under ``/dev``: such a target is made in
    the job's private ``/dev`` instead (``enter_bind_namespace``); nor under ``/proc``
    or ``/sys``, where a missing target is refused (a directory made there could be a
    new cgroup). The caller holds the state root's lock for shared paths.

    ``adopt`` is told, first, about every target (canonical): whatever another
    container created at or above one of them must be removed by whichever of them is
    deleted last. The rootfs, a directory, the caller has checked."""
    targets = [
        (asked, canonical(asked, f"mount target {asked}"), source)
        for asked, source in _bind_targets(job)
    ]
    adopt([target for _asked, target, _source in targets])
    for asked, target, source in targets:
        what = f"mount target {asked}"
        tree = system_tree(target)
        if tree == "/dev":
            continue
        if tree is not None:
            if not paths.lexists(target):
                raise MountError(
                    f"volume {asked}: {target} does not exist, and hostjob makes nothing"
                    f" under {tree} (only a path that exists there can be a mount target)"
                )
            continue
        parent_fd, name = make_parent(target, what, record)
        try:
            try:
                posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                continue
            except FileNotFoundError:
                pass
            record([REMOVE, target])
            if source is None:  # a tmpfs's
                posix.mkdir(name, 0o755, dir_fd=parent_fd)
            else:
                make_like(source, name, parent_fd)
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
