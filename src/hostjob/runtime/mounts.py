"""The sandbox filesystem (SPEC §3, §4): host mode and bind mode.

Host mode mounts nothing but what was asked: the rootfs bound at the requested
mount point (``rootfsMountPoint``), or the rootfs bound onto itself read-only
when ``root.readonly`` asks for it. Volumes become symlinks under the mount
point.

Bind mode gives the container's init a private mount namespace (root
propagation ``rslave``, so host mounts still arrive) in which the rootfs is
bound at the mount point and each volume at its real destination; every exec
joins that namespace. The host's mount table gains nothing; only a missing
mount point or volume destination is created on the host (empty, removed at
delete).

Every mount and path made on the host is recorded *before* it is made, so that
``delete`` (even after a crash) removes exactly what hostjob added.

The rootfs, the writable layer and often a mount point's parents are trees that a
container's processes (any user, racing the runtime) or other local users can
write. So every path is recorded in canonical form (``fsutil.canonical``), every
creation and every undo step walks it from ``/`` one component at a time without
following a symlink (``hostjob.fsutil``), mounts and unmounts go through the fd
of the directory so reached (``/proc/self/fd/N``), and a path whose component was
swapped for a symlink fails (at create) or is left alone with a warning (at
delete), never followed.
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob import fsutil, paths
from hostjob.env import getenv
from hostjob.errors import MountError, StartError
from hostjob.runtime.undo import REMOVE, RESTORE_DIR, UNMOUNT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from hostjob.job import JobConfig

    class Record(Protocol):
        """Persists undo entries (``[kind, path, *extra]``), all in one write, before
        the changes they undo are made (``Container._record_change``)."""

        def __call__(self, *entries: list[str]) -> None: ...

    class RootfsProvider(Protocol):
        """Makes a container's rootfs that the runtime does not own (``hostjob run
        IMAGE``'s overlay: ``hostjob.images.rootfs.ImageRootfs``), given as
        ``CreateOptions.rootfs``. ``prepare`` runs in ``create`` before the mount mode
        is set up, and makes ``job.rootfs``; it calls ``record([kind, path])`` with
        the undo kinds below before the changes it makes, so ``delete`` undoes them
        like any other step, without the provider's code (also after a crash)."""

        def prepare(self, container_id: str, job: JobConfig, record: Record) -> None: ...


# Every change below is recorded first, with the undo log's kinds (hostjob.runtime.undo),
# which a RootfsProvider records with too.


def prepare_host(job: JobConfig, record: Record, plan: HostPlan | None = None) -> None:
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
        _remount_path(_canonical(point, f"mount point {point}"), point, linux.MS_RDONLY)


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
    return [UNMOUNT, rootfs, str(_mount_id_at(rootfs, "rootfs"))]


# The per-mount flags a bind remount keeps from the mount it changes. A remount with
# MS_BIND replaces all of them: without these, making an image's nosuid,nodev rootfs
# read-only would make its setuid files work again (runc keeps them the same way).
_KEPT_FLAGS = ((posix.ST_NOSUID, 0x2), (posix.ST_NODEV, 0x4), (posix.ST_NOEXEC, 0x8))


def _remount(fd: int, flags: int) -> None:
    """Add per-mount ``flags`` (MS_RDONLY, MS_NOSUID, ...) to the bind mount whose root
    ``fd`` is (reached without symlinks), keeping its nosuid, nodev and noexec."""
    from hostjob import linux

    current = posix.fstatvfs(fd).f_flag
    for st_flag, ms_flag in _KEPT_FLAGS:
        if current & st_flag:
            flags |= ms_flag
    linux.mount(None, f"/proc/self/fd/{fd}", None, linux.MS_BIND | linux.MS_REMOUNT | flags)


def _mount_id_at(path: str, what: str) -> int:
    """The id of the mount ``path`` (canonical) lies on, reached without symlinks."""
    try:
        fd = fsutil.walk_path(path)
    except OSError as err:
        raise _walk_error(what, path, err) from err
    try:
        return fsutil.mount_id(fd)
    finally:
        posix.close(fd)


def _bind_rootfs(job: JobConfig, record: Record) -> None:
    """Bind the rootfs at the mount point asked for (host mode).

    An image's rootfs (``hostjob run IMAGE``, hostjob's own overlay) is bound
    ``nosuid,nodev``, like the overlay itself (SPEC §10). A bundle's rootfs is bound
    with the flags its client mounted it with, as runc binds a rootfs: a bind copies
    the source mount's nosuid and nodev, and a containerd or podman rootfs may rightly
    hold setuid programs.
    """
    from hostjob import linux

    asked = job.mount_point
    target = _canonical(asked, f"mount point {asked}")
    parent_fd, name = _make_parent(target, f"mount point {asked}", record)
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
        fd = _open_no_symlink(parent_fd, name, f"mount point {asked}")
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
        _remount_path(target, asked, linux.MS_NOSUID | linux.MS_NODEV)


def _remount_path(target: str, asked: str, flags: int) -> None:
    """``_remount`` of the mount at ``target`` (canonical), reached without symlinks."""
    try:
        fd = fsutil.walk_path(target)
    except OSError as err:
        raise _walk_error(f"mount point {asked}", target, err) from err
    try:
        _remount(fd, flags)
    except OSError as err:
        raise MountError(f"cannot remount {asked}: {err.strerror}") from err
    finally:
        posix.close(fd)


def _make_parent(path: str, what: str, record: Record) -> tuple[int, str]:
    """mkdir -p the parent of ``path`` (canonical), fd-relative from ``/``, recording
    each directory before it is made; returns the parent's fd and the last name."""
    names = fsutil.parts(path)
    if not names:
        raise MountError(f"{what}: / cannot be used")
    parents = names[:-1]

    def made(i: int) -> None:
        record([REMOVE, "/" + "/".join(parents[: i + 1])])

    root = fsutil.open_anchor("/")
    try:
        return fsutil.make_dirs(root, parents, 0o755, before=made), names[-1]
    except OSError as err:
        raise _walk_error(what, paths.dirname(path), err) from err
    finally:
        posix.close(root)


def _open_no_symlink(parent_fd: int, name: str, what: str) -> int:
    try:
        return posix.open(name, fsutil.DIR_FLAGS, dir_fd=parent_fd)
    except OSError as err:
        raise _walk_error(what, name, err) from err


def _canonical(path: str, what: str) -> str:
    try:
        return fsutil.canonical(path)
    except OSError as err:
        raise MountError(f"{what}: {err.strerror} (a symlink on its path keeps changing)") from err


def _walk_error(what: str, path: str, err: OSError) -> MountError:
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        return MountError(
            f"{what}: {path} cannot be reached without following a symlink (a directory"
            " on the way was replaced by a symlink or a file)"
        )
    return MountError(f"{what}: {path}: {err.strerror}")


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
            raise _walk_error(self.what, "/" + "/".join(self.parents), err) from err
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
    parent = _canonical(paths.dirname(link), what)
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
        raise _walk_error(what, parent, err) from err
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
    fd = _open_no_symlink(parent_fd, name, what)
    try:
        return bool(posix.listdir(fd))
    finally:
        posix.close(fd)


def prepare_bind(job: JobConfig, record: Record, adopt: Callable[[list[str]], None]) -> None:
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
        (asked, _canonical(asked, f"mount target {asked}"), source)
        for asked, source in _bind_targets(job)
    ]
    adopt([target for _asked, target, _source in targets])
    for asked, target, source in targets:
        what = f"mount target {asked}"
        tree = _system_tree(target)
        if tree == "/dev":
            continue
        if tree is not None:
            if not paths.lexists(target):
                raise MountError(
                    f"volume {asked}: {target} does not exist, and hostjob makes nothing"
                    f" under {tree} (only a path that exists there can be a mount target)"
                )
            continue
        parent_fd, name = _make_parent(target, what, record)
        try:
            try:
                posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                continue
            except FileNotFoundError:
                pass
            record([REMOVE, target])
            _make_like(source, name, parent_fd)
        finally:
            posix.close(parent_fd)


def _system_tree(target: str) -> str | None:
    """``/dev``, ``/proc`` or ``/sys`` when ``target`` (canonical) lies strictly below it."""
    for tree in _SYSTEM_TREES:
        if target.startswith(tree + "/"):
            return tree
    return None


_SYSTEM_TREES = ("/dev", "/proc", "/sys")


def _bind_targets(job: JobConfig) -> list[tuple[str, str]]:
    """(target, source) of the rootfs and each volume, in mount order."""
    targets = [(job.mount_point, job.rootfs)]
    for volume in job.volumes:
        if not paths.exists(volume.source):
            raise MountError(f"volume {volume.destination}: source {volume.source} does not exist")
        targets.append((volume.destination, volume.source))
    return targets


class _Target:
    """One mount of the private namespace, as decided before the fork."""

    __slots__ = ("asked", "in_private_dev", "propagation", "readonly", "source", "target")

    def __init__(
        self, asked: str, target: str, source: str, readonly: bool, propagation: str | None
    ) -> None:
        self.asked = asked  # as the config says it (for messages)
        self.target = target  # canonical
        self.source = source
        self.readonly = readonly
        self.propagation = propagation  # hostjob.job.PRIVATE/SLAVE/SHARED; None: as bound
        self.in_private_dev = False  # made in the job's own /dev, not the host's


def enter_bind_namespace(job: JobConfig) -> Callable[[], None]:
    """For the init (in the child, as root): build the private mount namespace.

    Each target is reached from ``/`` without following a symlink, along the path
    ``prepare_bind`` made (canonical), and mounted on through its fd: a volume below
    the mount point lands in the image's own directory, never where an image's
    symlink (``data -> /etc``) would take it.

    * Propagation, per volume: ``rprivate`` (the default) neither receives host mounts
      nor passes the job's on; ``rslave`` receives the host's; ``rshared`` also passes
      the job's mounts under it to the host (Kubernetes' Bidirectional: a CSI node
      plugin's mounts). An ``rshared`` volume is a clone of the source's mount taken
      before the namespace is made (``open_tree``): the clone of a shared mount joins
      its peer group, whereas the namespace's own copy is a slave once ``/`` is made
      ``rslave``.
    * A volume under ``/dev`` whose target the host lacks (the kubelet's
      ``/dev/termination-log``) gets the job a private ``/dev`` (``_private_dev``) in
      which its target is made: nothing is ever written to the host's ``/dev``.
    """
    from hostjob.job import SHARED

    targets = [_Target(job.mount_point, "", job.rootfs, job.readonly, None)]
    targets += [
        _Target(v.destination, "", v.source, v.readonly, v.propagation) for v in job.volumes
    ]
    for t in targets:
        t.target = _canonical(t.asked, f"mount target {t.asked}")
    private_dev = False
    for t in targets:
        if _system_tree(t.target) == "/dev" and not paths.lexists(t.target):
            t.in_private_dev = private_dev = True

    def enter() -> None:
        from hostjob import linux

        # Clones of the rshared volumes' mounts, before the namespace exists.
        clones: dict[int, int] = {}
        try:
            for i, t in enumerate(targets):
                if t.propagation == SHARED:
                    clones[i] = _clone_tree(t.source, f"cannot bind {t.source} at {t.asked}")
            try:
                linux.unshare(linux.CLONE_NEWNS)
            except OSError as err:
                raise MountError(
                    f"cannot make the private mount namespace (unshare CLONE_NEWNS): {err.strerror}"
                ) from err
            # Host mounts keep arriving; ours never leave (but through rshared volumes).
            try:
                linux.mount(None, "/", None, linux.MS_REC | linux.MS_SLAVE)
            except OSError as err:
                raise MountError(
                    f"cannot make / rslave in the private mount namespace: {err.strerror}"
                ) from err
            if private_dev:
                _private_dev()
            for i, t in enumerate(targets):
                _mount_target(t, clones.get(i))
        finally:
            for fd in clones.values():
                posix.close(fd)

    return enter


def _clone_tree(path: str, what: str) -> int:
    """A detached recursive copy of the mount at ``path`` (``open_tree``)."""
    from hostjob import linux

    flags = linux.OPEN_TREE_CLONE | linux.AT_RECURSIVE | linux.OPEN_TREE_CLOEXEC
    try:
        return linux.open_tree(linux.AT_FDCWD, path, flags)
    except OSError as err:
        raise MountError(f"{what} (open_tree): {err.strerror}") from err


def _mount_target(t: _Target, clone: int | None) -> None:
    from hostjob import linux
    from hostjob.job import PRIVATE, SLAVE

    what = f"cannot bind {t.source} at {t.asked}"
    fd = _make_dev_target(t) if t.in_private_dev else _open_target(t.target, t.asked, t.source)
    try:
        if clone is not None:
            flags = linux.MOVE_MOUNT_F_EMPTY_PATH | linux.MOVE_MOUNT_T_EMPTY_PATH
            linux.move_mount(clone, "", fd, "", flags)
        else:
            linux.mount(t.source, f"/proc/self/fd/{fd}", None, linux.MS_BIND | linux.MS_REC)
    except OSError as err:
        raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(fd)
    change = {PRIVATE: linux.MS_PRIVATE, SLAVE: linux.MS_SLAVE}.get(t.propagation or "")
    if not change and not t.readonly:
        return
    # The fd above is the directory under the new mount: reach the mount anew.
    fd = _open_target(t.target, t.asked, t.source)
    try:
        if change:
            try:
                linux.mount(None, f"/proc/self/fd/{fd}", None, linux.MS_REC | change)
            except OSError as err:
                raise MountError(f"cannot make {t.asked} {t.propagation}: {err.strerror}") from err
        if t.readonly:
            try:
                _remount(fd, linux.MS_RDONLY)
            except OSError as err:
                raise MountError(f"cannot make {t.asked} read-only: {err.strerror}") from err
    finally:
        posix.close(fd)


# The job's private /dev: an overlay whose lower layer is the host's /dev (device nodes
# work, and are the host's) and whose upper layer is a tmpfs of the namespace's own,
# attached nowhere (what the job makes in /dev stays there and goes with the namespace).
# The size is runc's for a container's /dev.
_DEV_UPPER_OPTIONS = (("mode", "0755"), ("size", "64m"))


def _private_dev() -> None:
    """Cover ``/dev`` in the job's mount namespace with an overlay of the host's ``/dev``
    and a private tmpfs, the host's ``/dev`` sub-mounts (``pts``, ``shm``, ``mqueue``,
    ``hugepages``) bound again on it.

    Overlayfs leaves changes to a lower layer made after the mount undefined: a device
    node the host creates later (a disk attached by a CSI plugin) may stay invisible.
    So only a volume that needs it gets one (docs/operators.md: the opt-outs)."""
    from hostjob import linux, mountinfo

    what = "cannot make the job's private /dev (needed by a volume under /dev that the host lacks)"
    points = sorted({m.point for m in mountinfo.read() if m.point.startswith("/dev/")})
    tops = [p for p in points if not any(q != p and fsutil.under(p, q) for q in points)]
    clones: list[tuple[str, int]] = []
    try:
        for point in tops:
            clones.append((point, _clone_tree(point, what)))
        try:
            context = linux.fsopen("tmpfs")
        except OSError as err:
            raise MountError(f"{what} (fsopen tmpfs): {err.strerror}") from err
        try:
            for key, value in _DEV_UPPER_OPTIONS:
                linux.fsconfig(context, linux.FSCONFIG_SET_STRING, key, value)
            linux.fsconfig(context, linux.FSCONFIG_CMD_CREATE)
            upper = linux.fsmount(context)
        except OSError as err:
            raise MountError(f"{what} (tmpfs): {err.strerror}") from err
        finally:
            posix.close(context)
        try:
            posix.mkdir("upper", 0o755, dir_fd=upper)
            posix.mkdir("work", 0o755, dir_fd=upper)
            flags = 0
            current = posix.statvfs("/dev").f_flag
            for st_flag, ms_flag in _KEPT_FLAGS:
                if current & st_flag:
                    flags |= ms_flag
            layers = f"lowerdir=/dev,upperdir=/proc/self/fd/{upper}/upper"
            layers += f",workdir=/proc/self/fd/{upper}/work"
            linux.mount("overlay", "/dev", "overlay", flags, layers)
        except OSError as err:
            raise MountError(f"{what} (overlay): {err.strerror}") from err
        finally:
            posix.close(upper)  # the overlay keeps its own reference to the layer
        for point, clone in clones:
            fd = _open_target(point, point, point)
            try:
                flags = linux.MOVE_MOUNT_F_EMPTY_PATH | linux.MOVE_MOUNT_T_EMPTY_PATH
                linux.move_mount(clone, "", fd, "", flags)
            except OSError as err:
                raise MountError(f"{what} (binding {point} again): {err.strerror}") from err
            finally:
                posix.close(fd)
    finally:
        for _point, clone in clones:
            posix.close(clone)


def _make_like(source: str, name: str, dir_fd: int) -> None:
    """A mount target like its source at ``name`` in ``dir_fd``: a directory, else an empty
    file; never through what lies there (O_EXCL: FileExistsError)."""
    if paths.isdir(source):
        posix.mkdir(name, 0o755, dir_fd=dir_fd)
    else:
        flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
        posix.close(posix.open(name, flags, 0o644, dir_fd=dir_fd))


def _make_dev_target(t: _Target) -> int:
    """The target of a volume in the job's private ``/dev``, made there (never on the
    host) as a file or a directory like its source, with its missing parents; its
    O_PATH fd."""
    names = fsutil.parts(t.target)
    what = f"cannot bind {t.source} at {t.asked}"
    try:
        root = fsutil.open_anchor("/")
        try:
            parent = fsutil.make_dirs(root, names[:-1], 0o755)
        finally:
            posix.close(root)
    except OSError as err:
        raise _walk_error(what, paths.dirname(t.target), err) from err
    try:
        name = names[-1]
        try:
            _make_like(t.source, name, parent)
        except FileExistsError:
            pass  # the host made it meanwhile: it shows through the overlay
        except OSError as err:
            raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(parent)
    return _open_target(t.target, t.asked, t.source)


def _open_target(target: str, asked: str, source: str) -> int:
    """An O_PATH fd of a mount target (a directory or a file, never a symlink)."""
    parent, name = paths.split(target)
    what = f"cannot bind {source} at {asked}"
    try:
        parent_fd = fsutil.walk_path(parent)
    except OSError as err:
        raise _walk_error(what, parent, err) from err
    try:
        fd = posix.open(name, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=parent_fd)
    except OSError as err:
        raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(parent_fd)
    if stat.S_ISLNK(posix.fstat(fd).st_mode):
        posix.close(fd)
        raise MountError(f"{what}: {target} is a symlink")
    return fd


# Set to False (tests; or HOSTJOB_PIDFD_SETNS=0 in the environment) to join a bind-mode
# namespace the way kernels before 5.8 need: /proc/<pid>/ns/mnt, checked after the open.
PIDFD_SETNS = True


def join_namespace(init_pid: int, start_time: int) -> Callable[[], None]:
    """For an exec (in the child, as root): join the init's mount namespace.

    The init is pinned by a pidfd opened before its start time is checked, then
    ``setns(pidfd, CLONE_NEWNS)`` (Linux 5.8+) joins exactly that process's
    namespace, never the one of a process that took its pid later."""

    def join() -> None:
        from hostjob import linux

        try:
            pidfd = posix.pidfd_open(init_pid)
        except ProcessLookupError as err:
            raise StartError(
                "cannot join the container's mount namespace: its init is gone"
            ) from err
        try:
            _check_init(init_pid, start_time)
            use_pidfd = PIDFD_SETNS and getenv("HOSTJOB_PIDFD_SETNS") != "0"
            if use_pidfd:
                try:
                    linux.setns(pidfd, linux.CLONE_NEWNS)
                    return
                except OSError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: no pidfd support in setns
                        raise StartError(
                            f"cannot join the mount namespace of process {init_pid}"
                            f" (setns on its pidfd): {err.strerror}"
                        ) from err
            _join_by_proc(init_pid, start_time)
        finally:
            posix.close(pidfd)

    return join


def _join_by_proc(init_pid: int, start_time: int) -> None:
    from hostjob import linux

    path = f"/proc/{init_pid}/ns/mnt"
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError as err:
        raise StartError(f"cannot open {path}: {err.strerror}") from err
    try:
        # Checked after the open: the fd is the namespace of the process that had the
        # pid then; if that is still the init, it is the init's.
        _check_init(init_pid, start_time)
        try:
            linux.setns(fd, linux.CLONE_NEWNS)
        except OSError as err:
            raise StartError(f"cannot join the mount namespace {path}: {err.strerror}") from err
    finally:
        posix.close(fd)


def _check_init(pid: int, start_time: int) -> None:
    from hostjob.runtime.proc import is_alive

    if not is_alive(pid, start_time):
        raise StartError(
            f"cannot join the container's mount namespace: process {pid} is no longer"
            " its init (it exited, or the pid was reused)"
        )
