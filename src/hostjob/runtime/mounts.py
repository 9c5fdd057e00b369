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
"""

from __future__ import annotations

import errno
import os

from hostjob.errors import MountError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.config import JobConfig
    from hostjob.images.store import ResolvedImage


# The undo log: (kind, path) entries, recorded before each change and undone in
# reverse order at delete. Kinds: a mount, a path hostjob created (or a whole tree),
# and an empty directory of the image that a volume link replaced (put back).
UNMOUNT = "unmount"
REMOVE = "remove"
REMOVE_TREE = "remove-tree"  # a directory and all it holds (an overlay's upper/work dirs)
RESTORE_DIR = "restore-dir"


def mount_image(
    container_id: str,
    job: JobConfig,
    image: ResolvedImage,
    store_root: str,
    record: Callable[[str, str], None],
) -> None:
    """``hostjob run IMAGE``: the image's overlay (a fresh writable layer over its
    layers, registered with the store so prune keeps them) at the rootfs path."""
    from hostjob.images.store import Store

    store = Store(store_root)
    rw_dir = store.rw_dir(container_id)
    record(REMOVE_TREE, rw_dir)
    record(REMOVE, os.path.join(store.root, "containers", f"{container_id}.json"))
    record(UNMOUNT, job.rootfs)
    store.mount_container(container_id, image, job.rootfs, rw_dir=rw_dir)


def prepare_host(job: JobConfig, record: Callable[[str, str], None]) -> None:
    """Set up the sandbox mount point and volume links for a host-mode container."""
    if not os.path.isdir(job.rootfs):
        raise MountError(f"rootfs {job.rootfs} is not a directory")
    if job.bind_rootfs:
        _bind_rootfs(job, record)
    # The links go into the rootfs itself, not through a bound mount point: that one may
    # be made read-only below, and delete removes them before it unmounts the point
    # (the undo log runs newest first), when a read-only mount would refuse (EROFS).
    for volume in job.volumes:
        _link_volume(job.rootfs, volume.source, volume.destination, record)
    if job.readonly:
        from hostjob import linux

        if not job.bind_rootfs:
            # Read-only needs a mount; the rootfs itself is the mount point here.
            record(UNMOUNT, job.rootfs)
            linux.mount(job.rootfs, job.rootfs, None, linux.MS_BIND | linux.MS_REC)
        remount(job.mount_point, linux.MS_RDONLY)


# The per-mount flags a bind remount keeps from the mount it changes. A remount with
# MS_BIND replaces all of them: without these, making an image's nosuid,nodev rootfs
# read-only would make its setuid files work again (runc keeps them the same way).
_KEPT_FLAGS = ((os.ST_NOSUID, 0x2), (os.ST_NODEV, 0x4), (os.ST_NOEXEC, 0x8))


def remount(target: str, flags: int) -> None:
    """Add per-mount ``flags`` (MS_RDONLY, MS_NOSUID, ...) to the bind mount at
    ``target``, keeping its nosuid, nodev and noexec."""
    from hostjob import linux

    current = os.statvfs(target).f_flag
    for st_flag, ms_flag in _KEPT_FLAGS:
        if current & st_flag:
            flags |= ms_flag
    linux.mount(None, target, None, linux.MS_BIND | linux.MS_REMOUNT | flags)


def _bind_rootfs(job: JobConfig, record: Callable[[str, str], None]) -> None:
    """Bind the rootfs at the mount point asked for (host mode).

    An image's rootfs (``hostjob run IMAGE``, hostjob's own overlay) is bound
    ``nosuid,nodev``, like the overlay itself (SPEC §10). A bundle's rootfs is bound
    with the flags its client mounted it with, as runc binds a rootfs: a bind copies
    the source mount's nosuid and nodev, and a containerd or podman rootfs may rightly
    hold setuid programs.
    """
    from hostjob import linux

    target = job.mount_point
    if os.path.lexists(target):
        if os.path.islink(target) or not os.path.isdir(target):
            raise MountError(f"mount point {target} exists and is not a directory")
        if os.listdir(target):
            raise MountError(f"mount point {target} is not empty")
    else:
        _make_dirs(target, record)
    record(UNMOUNT, target)
    try:
        linux.mount(job.rootfs, target, None, linux.MS_BIND | linux.MS_REC)
        if job.image is not None:
            remount(target, linux.MS_NOSUID | linux.MS_NODEV)
    except OSError as err:
        raise MountError(f"cannot bind {job.rootfs} at {target}: {err.strerror}") from None


def _make_dirs(path: str, record: Callable[[str, str], None]) -> None:
    """mkdir -p, recording each directory made (outermost first)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        record(REMOVE, directory)
        os.mkdir(directory, 0o755)


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    scope = os.path.realpath(root)
    return real == scope or real.startswith(scope.rstrip("/") + "/")


def _link_volume(
    rootfs: str, source: str, destination: str, record: Callable[[str, str], None]
) -> None:
    link = os.path.join(rootfs, destination.lstrip("/"))
    if os.path.islink(link):
        if os.readlink(link) == source:
            return
        raise MountError(f"volume {destination}: {link} is already a link elsewhere")
    if os.path.lexists(link):
        if os.path.isdir(link) and not os.listdir(link):
            record(RESTORE_DIR, link)
            os.rmdir(link)
        else:
            raise MountError(f"volume {destination}: {link} already exists in the rootfs")
    parent = os.path.dirname(link)
    existing = parent
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not _inside(existing, rootfs):
        # The image's own symlink (var/run -> /run, or a hostile w -> /etc) would put
        # the link, and the directories made for it, on the host outside the rootfs.
        raise MountError(
            f"volume {destination}: {os.path.relpath(existing, rootfs)} in the rootfs is a"
            " symlink leading outside it"
        )
    _make_dirs(parent, record)
    record(REMOVE, link)
    try:
        os.symlink(source, link)
    except OSError as err:
        raise MountError(f"volume {destination}: cannot link {link}: {err.strerror}") from None


def prepare_bind(
    job: JobConfig, record: Callable[[str, str], None], adopt: Callable[[str], None]
) -> None:
    """Before the fork: make sure every bind-mode mount target exists on the host.

    ``adopt`` is told about targets that already exist: one that another container
    created must be removed by whichever of them is deleted last."""
    if not os.path.isdir(job.rootfs):
        raise MountError(f"rootfs {job.rootfs} is not a directory")
    for target, source in _bind_targets(job):
        if os.path.lexists(target):
            adopt(target)
            continue
        _make_dirs(os.path.dirname(target), record)
        record(REMOVE, target)
        if os.path.isdir(source):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))


def _bind_targets(job: JobConfig) -> list[tuple[str, str]]:
    """(target, source) of the rootfs and each volume, in mount order."""
    targets = [(job.mount_point, job.rootfs)]
    for volume in job.volumes:
        if not os.path.exists(volume.source):
            raise MountError(f"volume {volume.destination}: source {volume.source} does not exist")
        targets.append((volume.destination, volume.source))
    return targets


def enter_bind_namespace(job: JobConfig) -> Callable[[], None]:
    """For the init (in the child, as root): build the private mount namespace."""
    readonly = {job.mount_point: job.readonly}
    readonly.update({v.destination: v.readonly for v in job.volumes})
    targets = _bind_targets(job)

    def enter() -> None:
        from hostjob import linux

        linux.unshare(linux.CLONE_NEWNS)
        # Host mounts keep arriving; ours never leave.
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_SLAVE)
        for target, source in targets:
            try:
                linux.mount(source, target, None, linux.MS_BIND | linux.MS_REC)
                if readonly[target]:
                    remount(target, linux.MS_RDONLY)
            except OSError as err:
                raise MountError(f"cannot bind {source} at {target}: {err.strerror}") from None

    return enter


def join_namespace(init_pid: int) -> Callable[[], None]:
    """For an exec (in the child, as root): join the init's mount namespace."""
    path = f"/proc/{init_pid}/ns/mnt"

    def join() -> None:
        from hostjob import linux

        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            linux.setns(fd, linux.CLONE_NEWNS)
        finally:
            os.close(fd)

    return join


def undo(entries: list[list[str]]) -> None:
    """Reverse what ``prepare_host``/``prepare_bind`` recorded, newest first."""
    for kind, path in reversed(entries):
        if kind == UNMOUNT:
            _unmount_all(path)
        elif kind == REMOVE_TREE:
            from hostjob.runtime.store import remove_tree

            remove_tree(path)
        elif kind == RESTORE_DIR:
            try:
                os.mkdir(path, 0o755)  # put back the empty directory a volume link replaced
            except FileExistsError:
                pass
        else:
            _remove(path)


def _unmount_all(target: str) -> None:
    from hostjob import linux

    # A bind of the rootfs onto itself may be stacked; remove every layer.
    while _is_mounted(target):
        try:
            linux.umount2(target, linux.MNT_DETACH)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOENT):
                break
            raise MountError(f"cannot unmount {target}: {err.strerror}") from None


def _remove(path: str) -> None:
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EBUSY):  # someone else's files: keep them
            raise MountError(f"cannot remove {path}: {err.strerror}") from None


def _is_mounted(path: str) -> bool:
    from hostjob.mountinfo import mounts_under

    return path in mounts_under(path)
