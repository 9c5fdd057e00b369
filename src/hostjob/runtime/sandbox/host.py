"""Host mode: the container's sandbox on the host, visible host-wide.

Nothing is mounted but what was asked: the rootfs bound at the requested mount point
(``rootfsMountPoint``), or the rootfs bound onto itself read-only when
``root.readonly`` asks for it. Each volume becomes a symlink
``<mount point>/<destination>`` -> its source, so whatever a job mounts under one is
mounted on the host.

Every change is recorded (``Recorder``) before it is made, with the undo log's kinds
(``hostjob.runtime.sandbox.undo``), so that ``delete`` -- even after a crash -- removes
exactly what hostjob added. ``plan_host`` works the changes out and checks them first,
without changing anything, so that ``create`` puts their undo entries in its first
write of the record.
"""

from __future__ import annotations

import posix
import stat

from hostjob import fsutil, paths
from hostjob.errors import MountError
from hostjob.runtime.sandbox.steps import (
    canonical,
    make_parent,
    mount_id_at,
    open_dir,
    remount_path,
    walk_error,
)
from hostjob.runtime.sandbox.undo import REMOVE, RESTORE_DIR, UNMOUNT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.job import JobConfig
    from hostjob.runtime.sandbox.provider import Recorder


def prepare_host(job: JobConfig, record: Recorder, plan: HostPlan | None = None) -> None:
    """Set up the sandbox mount point and volume links for a host-mode container (its
    rootfs, a directory, the caller has checked). ``plan``: ``plan_host``'s, made ahead
    (its undo entries recorded already); else it is made here."""
    if plan is None:
        if job.bind_rootfs:
            _bind_rootfs(job, record)
        plan = HostPlan(job)
    # The links go into the rootfs itself, not through a bound mount point: that one may
    # be made read-only below, and delete removes them before it unmounts the point
    # (the undo log runs newest first), when a read-only mount would refuse (EROFS).
    # Every link is planned first and all of their undo entries go in one write (the
    # record is rewritten whole: one write instead of one per link and directory).
    if plan.undo:
        record(*plan.undo)
    for link in plan.links:
        link.make()
    if job.readonly:
        from hostjob import linux

        if plan.self_bind:
            # Read-only needs a mount; the rootfs itself is the mount point here. It
            # may be a mount already (containerd's and podman's rootfs are): delete
            # takes off what is above that one, never it.
            linux.mount(job.rootfs, job.rootfs, None, linux.MS_BIND | linux.MS_REC)
        point = job.mount_point
        remount_path(canonical(point, f"mount point {point}"), point, linux.MS_RDONLY)


class HostPlan:
    """What ``prepare_host`` does to a host-mode rootfs once its mount point is there,
    worked out and checked without changing anything: its volume links and, for a
    read-only rootfs that is its own mount point, its bind onto itself. ``undo``: all of
    their undo entries, links first (the undo log runs newest first: the bind comes off
    before the links in the rootfs are removed)."""

    __slots__ = ("links", "self_bind", "undo")

    def __init__(self, job: JobConfig) -> None:
        self.links, self.undo = _plan_links(job)
        self.self_bind = _self_bind_entry(job) if job.readonly and not job.bind_rootfs else None
        if self.self_bind:
            self.undo.append(self.self_bind)


def plan_host(job: JobConfig) -> HostPlan | None:
    """``prepare_host``'s plan, made ahead, so that ``create`` puts its undo entries in its
    first write of the record (and ``prepare_host``'s recording of them costs no write).
    None where a step depends on one before it: a mount point of its own (its
    directories and bind come first) or a rootfs that is not a directory yet."""
    if job.bind_rootfs or not paths.isdir(job.rootfs):
        return None
    return HostPlan(job)


def _plan_links(job: JobConfig) -> tuple[list[_Link], list[list[str]]]:
    links: list[_Link] = []
    entries: list[list[str]] = []
    for volume in job.volumes:
        link = _plan_link(job.rootfs, volume.source, volume.destination)
        if link is not None:
            links.append(link)
            entries += [entry for entry in link.undo if entry not in entries]
    return links, entries


def _self_bind_entry(job: JobConfig) -> list[str]:
    """Undo of the rootfs bound onto itself: what lies above the mount there now."""
    rootfs = fsutil.canonical(job.rootfs)
    return [UNMOUNT, rootfs, str(mount_id_at(rootfs, "rootfs"))]


def _bind_rootfs(job: JobConfig, record: Recorder) -> None:
    """Bind the rootfs at the mount point asked for (host mode).

    An image's rootfs (``hostjob run IMAGE``, hostjob's own overlay) is bound
    ``nosuid,nodev``, like the overlay itself: nothing of an image is a privilege on the
    host. A bundle's rootfs is bound
    with the flags its client mounted it with, as runc binds a rootfs: a bind copies
    the source mount's nosuid and nodev, and a containerd or podman rootfs may rightly
    hold setuid programs.
    """
    from hostjob import linux

    asked = job.mount_point
    target = canonical(asked, f"mount point {asked}")
    parent_fd, name = make_parent(target, f"mount point {asked}", record)
    try:
        try:
            st: posix.stat_result | None = posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is None:
            record([REMOVE, target])
            posix.mkdir(name, 0o755, dir_fd=parent_fd)
        elif not stat.S_ISDIR(st.st_mode):
            raise MountError(f"mount point {asked} exists and is not a directory")
        fd = open_dir(parent_fd, name, f"mount point {asked}")
        try:
            if st is not None and posix.listdir(fd):
                raise MountError(f"mount point {asked} is not empty")
            # The mount point may be someone's mount: delete leaves it there.
            record([UNMOUNT, target, str(fsutil.mount_id(fd))])
            try:
                linux.mount(job.rootfs, f"/proc/self/fd/{fd}", None, linux.MS_BIND | linux.MS_REC)
            except OSError as err:
                raise MountError(f"cannot bind {job.rootfs} at {asked}: {err.strerror}") from err
        finally:
            posix.close(fd)
    finally:
        posix.close(parent_fd)
    if job.image is not None:
        remount_path(target, asked, linux.MS_NOSUID | linux.MS_NODEV)


class _Link:
    """A volume link ``prepare_host`` planned: ``undo`` is recorded, then ``make()``."""

    __slots__ = ("name", "parents", "replaces_dir", "source", "undo", "what")

    def __init__(self, what: str, source: str, parents: list[str], name: str) -> None:
        self.what = what
        self.source = source
        self.parents = parents  # the link's directory, from /, as fsutil.parts gives it
        self.name = name
        self.replaces_dir = False  # an empty directory of the image is there
        self.undo: list[list[str]] = []

    def make(self) -> None:
        """The missing directories, then the link (fd-relative from ``/``)."""
        root = fsutil.open_anchor("/")
        try:
            parent_fd = fsutil.make_dirs(root, self.parents, 0o755)
        except OSError as err:
            raise walk_error(self.what, "/" + "/".join(self.parents), err) from err
        finally:
            posix.close(root)
        try:
            if self.replaces_dir:
                posix.rmdir(self.name, dir_fd=parent_fd)
            posix.symlink(self.source, self.name, dir_fd=parent_fd)
        except OSError as err:
            link = "/" + "/".join([*self.parents, self.name])
            raise MountError(f"{self.what}: cannot link {link}: {err.strerror}") from err
        finally:
            posix.close(parent_fd)


def _plan_link(rootfs: str, source: str, destination: str) -> _Link | None:
    """What linking ``destination`` in the rootfs to ``source`` takes, checked (None:
    the link is there already); nothing is changed yet."""
    what = f"volume {destination}"
    real_root = paths.realpath(rootfs)
    link = paths.join(rootfs, destination.lstrip("/"))
    parent = canonical(paths.dirname(link), what)
    if not fsutil.under(parent, real_root):
        # The image's own symlink (var/run -> /run, or a hostile w -> /etc) would put
        # the link, and the directories made for it, on the host outside the rootfs.
        existing = paths.dirname(link)
        while not paths.lexists(existing):
            existing = paths.dirname(existing)
        raise MountError(
            f"{what}: {paths.relpath(existing, rootfs)} in the rootfs is a"
            " symlink leading outside it"
        )
    name = paths.basename(link)
    target = paths.join(parent, name)
    parents = fsutil.parts(parent)
    plan = _Link(what, source, parents, name)
    root = fsutil.open_anchor("/")
    try:
        parent_fd, reached = fsutil.walk_existing(root, parents)
    except OSError as err:
        raise walk_error(what, parent, err) from err
    finally:
        posix.close(root)
    # Each directory that is missing is made, recorded first (removed at delete).
    for i in range(reached, len(parents)):
        plan.undo.append([REMOVE, "/" + "/".join(parents[: i + 1])])
    if reached < len(parents):
        posix.close(parent_fd)
        plan.undo.append([REMOVE, target])
        return plan
    try:
        try:
            st: posix.stat_result | None = posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            if posix.readlink(name, dir_fd=parent_fd) == source:
                return None
            raise MountError(f"{what}: {link} is already a link elsewhere")
        if st is not None:
            if not stat.S_ISDIR(st.st_mode) or _has_entries(parent_fd, name, what):
                raise MountError(f"{what}: {link} already exists in the rootfs")
            plan.undo.append([RESTORE_DIR, target])
            plan.replaces_dir = True
        plan.undo.append([REMOVE, target])
        return plan
    finally:
        posix.close(parent_fd)


def _has_entries(parent_fd: int, name: str, what: str) -> bool:
    fd = open_dir(parent_fd, name, what)
    try:
        return bool(posix.listdir(fd))
    finally:
        posix.close(fd)
