"""Bind mode, the child's side: the private mount namespace, built by the init.

The init (in the child, as root, before it drops privileges) unshares its mount
namespace, makes ``/`` ``rslave`` (host mounts still arrive), binds the rootfs at the
mount point and each volume at its real destination (a tmpfs volume is a new tmpfs
there), each reached from ``/`` without following a symlink. A target the host lacks is
made in the namespace alone: under ``/dev`` in a private ``/dev``, elsewhere on a
private copy of the directory that would hold it (``hostjob.runtime.sandbox.cover``).
Every exec joins that namespace (``hostjob.runtime.sandbox.join``).
"""

from __future__ import annotations

import posix

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.cover import Covers
from hostjob.runtime.sandbox.steps import (
    canonical,
    exact_mode,
    kept_flags,
    make_like,
    mount_tmpfs,
    open_target,
    remount,
    system_tree,
    walk_error,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.specconv.jobconfig import JobConfig


class _Target:
    """One mount of the private namespace, as decided before the fork."""

    __slots__ = (
        "asked",
        "in_private_dev",
        "propagation",
        "readonly",
        "source",
        "target",
        "tmpfs",
    )

    def __init__(
        self, asked: str, target: str, source: str, readonly: bool, propagation: str | None
    ) -> None:
        self.asked = asked  # as the config says it (for messages)
        self.target = target  # canonical
        self.source = source
        self.readonly = readonly
        self.propagation = (
            propagation  # hostjob.specconv.jobconfig.PRIVATE/SLAVE/SHARED; None: as bound
        )
        self.in_private_dev = False  # made in the job's own /dev, not the host's
        self.tmpfs: list[str] | None = None  # a tmpfs volume's options


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
    * Any other target the host lacks is made on a private tmpfs over the directory
      that would hold it, which keeps every entry of that directory bound
      (``cover.Covers``): nothing a config names is made on the host's tree.
    """
    from hostjob.specconv.jobconfig import SHARED

    targets = [_Target(job.mount_point, "", job.rootfs, job.readonly, None)]
    for v in job.volumes:
        targets.append(_Target(v.destination, "", v.source, v.readonly, v.propagation))
        if v.is_tmpfs:
            targets[-1].tmpfs = v.options or []
    for t in targets:
        t.target = canonical(t.asked, f"mount target {t.asked}")
    private_dev = False
    for t in targets:
        if system_tree(t.target) == "/dev" and not paths.lexists(t.target):
            t.in_private_dev = private_dev = True

    def enter() -> None:
        from hostjob.linux import syscalls

        # Clones of the rshared volumes' mounts, before the namespace exists.
        clones: dict[int, int] = {}
        try:
            for i, t in enumerate(targets):
                if t.propagation == SHARED:
                    clones[i] = _clone_tree(t.source, f"cannot bind {t.source} at {t.asked}")
            try:
                syscalls.unshare(syscalls.CLONE_NEWNS)
            except OSError as err:
                raise MountError(
                    f"cannot make the private mount namespace (unshare CLONE_NEWNS): {err.strerror}"
                ) from err
            # Host mounts keep arriving; ours never leave (but through rshared volumes).
            try:
                syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_SLAVE)
            except OSError as err:
                raise MountError(
                    f"cannot make / rslave in the private mount namespace: {err.strerror}"
                ) from err
            if private_dev:
                _private_dev()
            covers = Covers()  # the targets the host lacks, made in the namespace only
            for i, t in enumerate(targets):
                if not t.in_private_dev:
                    covers.ensure(t.target, t.asked, None if t.tmpfs is not None else t.source)
                _mount_target(t, clones.get(i))
            covers.finish()
        finally:
            for fd in clones.values():
                posix.close(fd)

    return enter


def _clone_tree(path: str, what: str) -> int:
    """A detached recursive copy of the mount at ``path`` (``open_tree``)."""
    from hostjob.linux import syscalls

    flags = syscalls.OPEN_TREE_CLONE | syscalls.AT_RECURSIVE | syscalls.OPEN_TREE_CLOEXEC
    try:
        return syscalls.open_tree(syscalls.AT_FDCWD, path, flags)
    except OSError as err:
        raise MountError(f"{what} (open_tree): {err.strerror}") from err


def _mount_target(t: _Target, clone: int | None) -> None:
    from hostjob.linux import syscalls
    from hostjob.specconv.jobconfig import PRIVATE, SLAVE

    what = f"cannot bind {t.source} at {t.asked}"
    fd = _make_dev_target(t) if t.in_private_dev else open_target(t.target, t.asked, t.source)
    if t.tmpfs is not None:
        try:
            mount_tmpfs(fd, t.tmpfs, t.readonly, f"tmpfs {t.asked}")
        finally:
            posix.close(fd)
        return
    try:
        if clone is not None:
            flags = syscalls.MOVE_MOUNT_F_EMPTY_PATH | syscalls.MOVE_MOUNT_T_EMPTY_PATH
            syscalls.move_mount(clone, "", fd, "", flags)
        else:
            syscalls.mount(
                t.source, f"/proc/self/fd/{fd}", None, syscalls.MS_BIND | syscalls.MS_REC
            )
    except OSError as err:
        raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(fd)
    change = {PRIVATE: syscalls.MS_PRIVATE, SLAVE: syscalls.MS_SLAVE}.get(t.propagation or "")
    if not change and not t.readonly:
        return
    # The fd above is the directory under the new mount: reach the mount anew.
    fd = open_target(t.target, t.asked, t.source)
    try:
        if change:
            try:
                syscalls.mount(None, f"/proc/self/fd/{fd}", None, syscalls.MS_REC | change)
            except OSError as err:
                raise MountError(f"cannot make {t.asked} {t.propagation}: {err.strerror}") from err
        if t.readonly:
            try:
                remount(fd, syscalls.MS_RDONLY)
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
    from hostjob.linux import mountinfo, syscalls

    what = "cannot make the job's private /dev (needed by a volume under /dev that the host lacks)"
    points = sorted({m.point for m in mountinfo.read() if m.point.startswith("/dev/")})
    tops = [p for p in points if not any(q != p and fsutil.under(p, q) for q in points)]
    clones: list[tuple[str, int]] = []
    try:
        for point in tops:
            clones.append((point, _clone_tree(point, what)))
        # The host's /dev, held before anything covers it: the overlay's lower layer.
        host_dev = posix.open("/dev", posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC)
        try:
            flags = kept_flags(posix.statvfs("/dev").f_flag)
            upper = _dev_upper(what)
            try:
                # Attached at /dev first, beneath the overlay: older kernels' overlayfs
                # (Debian 12's 6.1) refuses an upper layer on a mount attached nowhere
                # (EINVAL). It stays there, covered, and goes with the namespace; / is
                # rslave by now, so the host never sees it.
                syscalls.move_mount(
                    upper, "", syscalls.AT_FDCWD, "/dev", syscalls.MOVE_MOUNT_F_EMPTY_PATH
                )
                layers = f"lowerdir=/proc/self/fd/{host_dev},upperdir=/proc/self/fd/{upper}/upper"
                layers += f",workdir=/proc/self/fd/{upper}/work"
                syscalls.mount("overlay", "/dev", "overlay", flags, layers)
            except OSError as err:
                raise MountError(f"{what} (overlay): {err.strerror}") from err
            finally:
                posix.close(upper)  # the overlay keeps its own reference to the layer
        finally:
            posix.close(host_dev)
        for point, clone in clones:
            fd = open_target(point, point, point)
            try:
                flags = syscalls.MOVE_MOUNT_F_EMPTY_PATH | syscalls.MOVE_MOUNT_T_EMPTY_PATH
                syscalls.move_mount(clone, "", fd, "", flags)
            except OSError as err:
                raise MountError(f"{what} (binding {point} again): {err.strerror}") from err
            finally:
                posix.close(fd)
    finally:
        for _point, clone in clones:
            posix.close(clone)


def _dev_upper(what: str) -> int:
    """A new tmpfs, attached nowhere yet, holding the overlay's ``upper`` and ``work``
    directories; its mount fd."""
    from hostjob.linux import syscalls

    try:
        context = syscalls.fsopen("tmpfs")
    except OSError as err:
        raise MountError(f"{what} (fsopen tmpfs): {err.strerror}") from err
    try:
        for key, value in _DEV_UPPER_OPTIONS:
            syscalls.fsconfig(context, syscalls.FSCONFIG_SET_STRING, key, value)
        syscalls.fsconfig(context, syscalls.FSCONFIG_CMD_CREATE)
        upper = syscalls.fsmount(context)
    except OSError as err:
        raise MountError(f"{what} (tmpfs): {err.strerror}") from err
    finally:
        posix.close(context)
    try:
        posix.mkdir("upper", 0o755, dir_fd=upper)
        posix.mkdir("work", 0o755, dir_fd=upper)
    except OSError as err:
        posix.close(upper)
        raise MountError(f"{what} (tmpfs): {err.strerror}") from err
    return upper


def _make_dev_target(t: _Target) -> int:
    """The target of a volume in the job's private ``/dev``, made there (never on the
    host) as a file or a directory like its source, with its missing parents; its
    O_PATH fd."""
    names = fsutil.parts(t.target)
    what = f"cannot bind {t.source} at {t.asked}"
    try:
        root = fsutil.open_anchor("/")
        try:
            parent = fsutil.make_dirs(root, names[:-1], 0o755, after=exact_mode)
        finally:
            posix.close(root)
    except OSError as err:
        raise walk_error(what, paths.dirname(t.target), err) from err
    try:
        name = names[-1]
        try:
            make_like(t.source, name, parent)
        except FileExistsError:
            pass  # the host made it meanwhile: it shows through the overlay
        except OSError as err:
            raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(parent)
    return open_target(t.target, t.asked, t.source)
