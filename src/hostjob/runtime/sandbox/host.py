"""Host mode: the container's sandbox on the host, visible host-wide.

Nothing is mounted but what was asked: the rootfs bound at the requested mount point
(``rootfsMountPoint``), or the rootfs bound onto itself read-only when
``root.readonly`` asks for it. Each volume becomes a symlink
``<mount point>/<destination>`` -> its source, so whatever a job mounts under one is
mounted on the host -- but a read-only volume, which a link cannot keep read-only: it
is its source bound read-only at that place. A tmpfs volume is a tmpfs mounted there.
An empty directory or an empty file of the image (docker's placeholders for
``/etc/resolv.conf``, ``/etc/hosts``, ``/etc/hostname``) makes way for a link and is
put back at delete; a mount covers it.

Every change is recorded (``Recorder``) before it is made, with the undo log's kinds
(``hostjob.runtime.sandbox.undo``), so that ``delete`` -- even after a crash -- removes
exactly what hostjob added. ``plan_host`` works the changes out and checks them first,
without changing anything, so that ``create`` puts their undo entries in its first
write of the record.
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.steps import (
    bind,
    canonical,
    make_like,
    make_parent,
    mount_id_at,
    mount_tmpfs,
    open_dir,
    open_target,
    remount,
    remount_path,
    walk_error,
)
from hostjob.runtime.sandbox.undo import REMOVE, RESTORE_DIR, RESTORE_FILE, UNMOUNT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.sandbox.provider import Recorder
    from hostjob.specconv.jobconfig import JobConfig, Volume


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
    # A volume's mount goes on the place the job sees, under the mount point.
    # Every step is planned first and all of their undo entries go in one write (the
    # record is rewritten whole: one write instead of one per link and directory).
    if plan.undo:
        record(*plan.undo)
    for step in plan.steps:
        step.make()
    if job.readonly:
        from hostjob.linux import syscalls

        if plan.self_bind:
            # Read-only needs a mount; the rootfs itself is the mount point here. It
            # may be a mount already (containerd's and podman's rootfs are): delete
            # takes off what is above that one, never it.
            syscalls.mount(job.rootfs, job.rootfs, None, syscalls.MS_BIND | syscalls.MS_REC)
        point = job.mount_point
        remount_path(canonical(point, f"mount point {point}"), point, syscalls.MS_RDONLY)


class HostPlan:
    """What ``prepare_host`` does to a host-mode rootfs once its mount point is there,
    worked out and checked without changing anything: its volumes' steps and, for a
    read-only rootfs that is its own mount point, its bind onto itself. ``undo``: all of
    their undo entries, volumes first (the undo log runs newest first: the bind comes off
    before the links in the rootfs are removed)."""

    __slots__ = ("self_bind", "steps", "undo")

    def __init__(self, job: JobConfig) -> None:
        self.steps, self.undo = _plan_volumes(job)
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


def _plan_volumes(job: JobConfig) -> tuple[list[_Step], list[list[str]]]:
    steps: list[_Step] = []
    entries: list[list[str]] = []
    # Where the job sees the rootfs, when that is not the rootfs itself.
    seen_at = (
        canonical(job.mount_point, f"mount point {job.mount_point}") if job.bind_rootfs else ""
    )
    for volume in job.volumes:
        step = _plan_step(job.rootfs, volume, seen_at)
        if step is not None:
            steps.append(step)
            entries += [entry for entry in step.undo if entry not in entries]
    return steps, entries


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
    from hostjob.linux import syscalls

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
            bind(job.rootfs, fd, f"cannot bind {job.rootfs} at {asked}")
        finally:
            posix.close(fd)
    finally:
        posix.close(parent_fd)
    if job.image is not None:
        remount_path(target, asked, syscalls.MS_NOSUID | syscalls.MS_NODEV)


# _Step.kind
_LINK, _BIND, _TMPFS = "link", "bind", "tmpfs"


class _Step:
    """A volume's change ``prepare_host`` planned: ``undo`` is recorded, then ``make()``:
    a link, or a mount (a read-only bind of the source, a tmpfs) on ``mount_at``."""

    __slots__ = (
        "kind",
        "mount_at",
        "name",
        "parents",
        "replaces",
        "source",
        "undo",
        "volume",
        "what",
    )

    def __init__(self, what: str, volume: Volume, parents: list[str], name: str) -> None:
        self.what = what
        self.volume = volume
        self.source = volume.source
        self.kind = _TMPFS if volume.is_tmpfs else _BIND if volume.readonly else _LINK
        self.parents = parents  # the target's directory, from /, as fsutil.parts gives it
        self.name = name
        self.mount_at = ""  # a mount's target, canonical: where the job sees it
        self.replaces = ""  # "dir" or "file": an empty one of the image makes way for a link
        self.undo: list[list[str]] = []

    def make(self) -> None:
        """The missing directories, then the link or the mount (fd-relative from ``/``)."""
        root = fsutil.open_anchor("/")
        try:
            parent_fd = fsutil.make_dirs(root, self.parents, 0o755)
        except OSError as err:
            raise walk_error(self.what, "/" + "/".join(self.parents), err) from err
        finally:
            posix.close(root)
        target = "/" + "/".join([*self.parents, self.name])
        try:
            if self.kind == _LINK:
                if self.replaces == "dir":
                    posix.rmdir(self.name, dir_fd=parent_fd)
                elif self.replaces == "file":
                    posix.unlink(self.name, dir_fd=parent_fd)
                posix.symlink(self.source, self.name, dir_fd=parent_fd)
            elif self.kind == _TMPFS:
                posix.mkdir(self.name, 0o755, dir_fd=parent_fd)
            else:
                make_like(self.source, self.name, parent_fd)
        except FileExistsError as err:
            if self.kind == _LINK:
                raise MountError(f"{self.what}: cannot link {target}: it exists") from err
            # A mount's target the image has: the mount covers it.
        except OSError as err:
            verb = "link" if self.kind == _LINK else "make"
            raise MountError(f"{self.what}: cannot {verb} {target}: {err.strerror}") from err
        finally:
            posix.close(parent_fd)
        if self.kind != _LINK:
            self._mount()

    def _mount(self) -> None:
        from hostjob.linux import syscalls

        volume = self.volume
        fd = open_target(self.mount_at, volume.destination, self.source)
        try:
            if self.kind == _TMPFS:
                if not stat.S_ISDIR(posix.fstat(fd).st_mode):
                    raise MountError(f"{self.what}: {self.mount_at} is not a directory")
                mount_tmpfs(fd, volume.options or [], volume.readonly, self.what)
                return
            bind(self.source, fd, f"{self.what}: cannot bind {self.source}")
        finally:
            posix.close(fd)
        # The fd above is what lies under the new mount: reach the mount anew.
        fd = open_target(self.mount_at, volume.destination, self.source)
        try:
            remount(fd, syscalls.MS_RDONLY)
        except OSError as err:
            raise MountError(f"{self.what}: cannot make it read-only: {err.strerror}") from err
        finally:
            posix.close(fd)


def _plan_step(rootfs: str, volume: Volume, seen_at: str) -> _Step | None:
    """What ``volume`` takes in the rootfs, checked (None: its link is there already);
    nothing is changed yet. ``seen_at``: where the job sees the rootfs, if elsewhere."""
    destination = volume.destination
    what = f"{'tmpfs' if volume.is_tmpfs else 'volume'} {destination}"
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
    step = _Step(what, volume, parents, name)
    if step.kind != _LINK:
        step.mount_at = (seen_at + target[len(real_root) :]) if seen_at else target
    root = fsutil.open_anchor("/")
    try:
        parent_fd, reached = fsutil.walk_existing(root, parents)
    except OSError as err:
        raise walk_error(what, parent, err) from err
    finally:
        posix.close(root)
    try:
        # Each directory that is missing is made, recorded first (removed at delete).
        for i in range(reached, len(parents)):
            step.undo.append([REMOVE, "/" + "/".join(parents[: i + 1])])
        st = None
        if reached == len(parents):
            try:
                st = posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
        if step.kind == _LINK:
            return _plan_link(step, st, parent_fd, target, link)
        _plan_mount(step, st, parent_fd, target, link)
        return step
    finally:
        posix.close(parent_fd)


def _plan_link(
    step: _Step, st: posix.stat_result | None, parent_fd: int, target: str, link: str
) -> _Step | None:
    if st is not None and stat.S_ISLNK(st.st_mode):
        if posix.readlink(step.name, dir_fd=parent_fd) == step.source:
            return None
        raise MountError(f"{step.what}: {link} is already a link elsewhere")
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0:
        # An empty file (docker's init layer has one where each of its files goes):
        # nothing of the image is lost, and delete puts it back as it was.
        mode = oct(stat.S_IMODE(st.st_mode))[2:]
        step.undo.append([RESTORE_FILE, target, mode, str(st.st_uid), str(st.st_gid)])
        step.replaces = "file"
    elif st is not None:
        if not stat.S_ISDIR(st.st_mode) or _has_entries(parent_fd, step.name, step.what):
            raise MountError(f"{step.what}: {link} already exists in the rootfs")
        step.undo.append([RESTORE_DIR, target])
        step.replaces = "dir"
    step.undo.append([REMOVE, target])
    return step


def _plan_mount(
    step: _Step, st: posix.stat_result | None, parent_fd: int, target: str, link: str
) -> None:
    """A mount covers what the image has there (as runc's does), but never a symlink,
    nor a file with a directory (or the other way round)."""
    if st is None:
        step.undo.append([REMOVE, target])
    elif stat.S_ISLNK(st.st_mode):
        raise MountError(f"{step.what}: {link} in the rootfs is a symlink")
    else:
        wants_dir = step.kind == _TMPFS or paths.isdir(step.source)
        if stat.S_ISDIR(st.st_mode) != wants_dir:
            kind = "directory" if wants_dir else "file"
            raise MountError(f"{step.what}: {link} in the rootfs is not a {kind}")
        if (
            step.kind == _TMPFS
            and "tmpcopyup" in (step.volume.options or [])
            and _has_entries(parent_fd, step.name, step.what)
        ):
            raise MountError(
                f"{step.what}: tmpcopyup (a copy of the image's {link} in the tmpfs) is not"
                " supported: use notmpcopyup, or a directory the image leaves empty"
            )
    # Delete takes off whatever was mounted there since, down to what lies there now.
    step.undo.append([UNMOUNT, step.mount_at, str(_mount_id_below(step.mount_at))])


def _mount_id_below(path: str) -> int:
    """The id of the mount that ``path`` (a directory or a file), or its nearest existing
    parent, is on now. Walked from ``/`` without following a symlink: a test of the path
    by name would follow one that the rootfs's owner swapped in meanwhile."""
    *parents, name = fsutil.parts(path) or [""]
    root = fsutil.open_anchor("/")
    try:
        fd, reached = fsutil.walk_existing(root, parents)
    except OSError as err:
        raise walk_error(f"mount target {path}", path, err) from err
    finally:
        posix.close(root)
    try:
        if name and reached == len(parents):
            try:
                target = posix.open(
                    name, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=fd
                )
            except FileNotFoundError:
                pass  # made later: what lies here now is its parent
            except OSError as err:
                raise walk_error(f"mount target {path}", path, err) from err
            else:
                posix.close(fd)
                fd = target
                if stat.S_ISLNK(posix.fstat(fd).st_mode):
                    raise walk_error(f"mount target {path}", path, OSError(errno.ELOOP, ""))
        return fsutil.mount_id(fd)
    finally:
        posix.close(fd)


def _has_entries(parent_fd: int, name: str, what: str) -> bool:
    fd = open_dir(parent_fd, name, what)
    try:
        return bool(posix.listdir(fd))
    finally:
        posix.close(fd)
