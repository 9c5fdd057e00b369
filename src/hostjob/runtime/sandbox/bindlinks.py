"""Bind mode: each volume also under the mount point, at its destination.

In bind mode a volume is bound at its real destination in the job's mount
namespace. hcsshim does that *and* links it under the container's rootfs, so that a
manifest written for either layout works (``$(CONTAINER_SANDBOX_MOUNT_POINT)/etc/config``
as well as ``/etc/config``). So does hostjob: a symlink ``<rootfs>/<destination>`` ->
``<destination>`` (the volume as the job sees it, read-only if it is), unless the image
already has that path -- a file, a directory, or a symlink of its own on the way
(``var/run -> /run``) -- which is the image's and stays as it is.

Each link, and each directory made for it, is recorded before it is made (removed at
``delete``) and made fd-relative from ``/``, never through a symlink: no container
process runs yet, but the rootfs is a tree its owner may have laid out.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.steps import canonical, walk_error
from hostjob.runtime.sandbox.undo import REMOVE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.sandbox.provider import Recorder
    from hostjob.specconv.jobconfig import JobConfig


class _Link:
    __slots__ = ("destination", "name", "parents")

    def __init__(self, parents: list[str], name: str, destination: str) -> None:
        self.parents = parents  # the link's directory, from /
        self.name = name
        self.destination = destination


def link_volumes(job: JobConfig, record: Recorder) -> None:
    """Link each volume under the rootfs at its destination where the image has
    nothing there; recorded first."""
    links, undo = _plan(job)
    if undo:
        record(*undo)
    for link in links:
        _make(link)


def _plan(job: JobConfig) -> tuple[list[_Link], list[list[str]]]:
    real_root = paths.realpath(job.rootfs)
    links: list[_Link] = []
    undo: list[list[str]] = []
    for volume in job.volumes:
        destination = volume.destination
        path = paths.join(job.rootfs, destination.lstrip("/"))
        if paths.normpath(path) == paths.normpath(job.rootfs):
            continue
        parent = canonical(paths.dirname(path), f"volume {destination}")
        if not fsutil.under(parent, real_root):
            continue  # the image's own symlink on the way: the image has that path
        parents = fsutil.parts(parent)
        root = fsutil.open_anchor("/")
        try:
            parent_fd, reached = fsutil.walk_existing(root, parents)
        except OSError as err:
            if err.errno in (errno.ENOTDIR, errno.ELOOP):
                continue  # a file of the image on the way
            raise walk_error(f"volume {destination}", parent, err) from err
        finally:
            posix.close(root)
        try:
            if reached == len(parents) and _exists(parent_fd, paths.basename(path)):
                continue
        finally:
            posix.close(parent_fd)
        for i in range(reached, len(parents)):
            entry = [REMOVE, "/" + "/".join(parents[: i + 1])]
            if entry not in undo:
                undo.append(entry)
        target = paths.join(parent, paths.basename(path))
        undo.append([REMOVE, target])
        links.append(_Link(parents, paths.basename(path), destination))
    return links, undo


def _exists(parent_fd: int, name: str) -> bool:
    try:
        posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _make(link: _Link) -> None:
    what = f"volume {link.destination}"
    root = fsutil.open_anchor("/")
    try:
        parent_fd = fsutil.make_dirs(root, link.parents, 0o755)
    except OSError as err:
        raise walk_error(what, "/" + "/".join(link.parents), err) from err
    finally:
        posix.close(root)
    try:
        posix.symlink(link.destination, link.name, dir_fd=parent_fd)
    except FileExistsError:
        pass  # made meanwhile (two volumes at one path): the first one's stays
    except OSError as err:
        where = "/" + "/".join([*link.parents, link.name])
        raise MountError(f"{what}: cannot link {where} in the rootfs: {err.strerror}") from err
    finally:
        posix.close(parent_fd)
