"""The sandbox filesystem on the host (SPEC §3, §4 host mode).

Host mode mounts nothing but what was asked: the rootfs bound at the requested
mount point (``rootfsMountPoint``), or the rootfs bound onto itself read-only
when ``root.readonly`` asks for it. Volumes become symlinks under the mount
point. Every mount and path made here is recorded *before* it is made, so that
``delete`` (even after a crash) removes exactly what hostjob added.
"""

from __future__ import annotations

import errno
import os

from hostjob.errors import MountError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.config import JobConfig


def prepare_host(
    job: JobConfig, record_mount: Callable[[str], None], record_path: Callable[[str], None]
) -> None:
    """Set up the sandbox mount point and volume links for a host-mode container."""
    if not os.path.isdir(job.rootfs):
        raise MountError(f"rootfs {job.rootfs} is not a directory")
    if job.bind_rootfs:
        _bind_rootfs(job, record_mount, record_path)
    for volume in job.volumes:
        _link_volume(job.mount_point, volume.source, volume.destination, record_path)
    if job.readonly:
        from hostjob import linux

        if not job.bind_rootfs:
            # Read-only needs a mount; the rootfs itself is the mount point here.
            record_mount(job.rootfs)
            linux.mount(job.rootfs, job.rootfs, None, linux.MS_BIND | linux.MS_REC)
        linux.mount(
            None,
            job.mount_point,
            None,
            linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY,
        )


def _bind_rootfs(
    job: JobConfig, record_mount: Callable[[str], None], record_path: Callable[[str], None]
) -> None:
    from hostjob import linux

    target = job.mount_point
    if os.path.lexists(target):
        if os.path.islink(target) or not os.path.isdir(target):
            raise MountError(f"mount point {target} exists and is not a directory")
        if os.listdir(target):
            raise MountError(f"mount point {target} is not empty")
    else:
        for directory in _missing_dirs(target):
            record_path(directory)
            os.mkdir(directory, 0o755)
    record_mount(target)
    try:
        linux.mount(job.rootfs, target, None, linux.MS_BIND | linux.MS_REC)
    except OSError as err:
        raise MountError(f"cannot bind {job.rootfs} at {target}: {err.strerror}") from None


def _missing_dirs(path: str) -> list[str]:
    """The directories that must be created for ``path`` to exist, outermost first."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing[::-1]


def _link_volume(
    mount_point: str, source: str, destination: str, record_path: Callable[[str], None]
) -> None:
    link = os.path.join(mount_point, destination.lstrip("/"))
    if os.path.islink(link):
        if os.readlink(link) == source:
            return
        raise MountError(f"volume {destination}: {link} is already a link elsewhere")
    if os.path.lexists(link):
        if os.path.isdir(link) and not os.listdir(link):
            record_path(link + "/")  # an empty directory of the image, restored at delete
            os.rmdir(link)
        else:
            raise MountError(f"volume {destination}: {link} already exists in the rootfs")
    parent = os.path.dirname(link)
    for directory in _missing_dirs(parent):
        record_path(directory)
        os.mkdir(directory, 0o755)
    record_path(link)
    try:
        os.symlink(source, link)
    except OSError as err:
        raise MountError(f"volume {destination}: cannot link {link}: {err.strerror}") from None


def undo(unmounts: list[str], removals: list[str]) -> None:
    """Reverse ``prepare_host``: unmount, then remove what was created, newest first."""
    if unmounts:
        from hostjob import linux

        for target in reversed(unmounts):
            # A bind of the rootfs onto itself may be stacked; remove every layer.
            while _is_mounted(target):
                try:
                    linux.umount(target, linux.MNT_DETACH)
                except OSError as err:
                    if err.errno in (errno.EINVAL, errno.ENOENT):
                        break
                    raise MountError(f"cannot unmount {target}: {err.strerror}") from None
    for path in reversed(removals):
        if path.endswith("/"):
            try:
                os.mkdir(path.rstrip("/"), 0o755)  # put back an empty directory we replaced
            except FileExistsError:
                pass
            continue
        try:
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
            else:
                os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno != errno.ENOTEMPTY:  # someone put files there: keep them
                raise


def _is_mounted(path: str) -> bool:
    from hostjob.runtime.store import mounts_under

    return path in mounts_under(path)
