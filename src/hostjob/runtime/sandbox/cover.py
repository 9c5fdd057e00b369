"""Bind mode: a mount target the host lacks, made in the job's mount namespace only.

A volume's destination may be missing on the host: the kubelet's
``/var/run/secrets/kubernetes.io/serviceaccount`` on a node, a pod's emptyDir at
``/data``, or ``/etc/nologin`` and ``/etc/systemd/system/kubelet.service``, which a pod's
author chose. Made on the host's tree, such an entry would change the host while the
job lives, and for good after a crash or a reboot before ``delete`` (an empty
``/etc/nologin`` blocks every non-root login; an empty unit file overrides the real
one). So the init, as root in its new mount namespace, makes it there alone:

* the **base** is the deepest directory on the target's path that exists (``/run`` for
  ``/run/secrets/...``, ``/`` for ``/data``), reached from ``/`` without following a
  symlink;
* a new tmpfs covers the base in the namespace. For each entry of the base it holds one
  of the same name: a directory or a file (device, socket and FIFO too) with the
  host's entry bound on it (recursively: mounts below come along, and host mounts made
  later below it arrive, ``/`` being ``rslave``), a symlink copied as it is;
* then the target's missing directories (0755) and the target itself (like its source:
  a directory or an empty file) are made on that tmpfs. A later target below the same
  base is made on the same tmpfs.

Every existing entry of the base is the host's in the job's view: reads and writes go to
the host's files. What the job does not share with the host is the base's own list of
names: an entry the host adds to the base later is not in the job's view, and one the
job adds there stays in its namespace and goes with it. Renaming or removing a bound
entry of the base fails with EBUSY. Nothing is written to the host, so nothing is left
after the job, ``delete --force``, a crash or a reboot. A target that exists on the
host (make it on the node to share the base's names) is bound where it is.

A base of ``/`` makes the tmpfs the namespace's root: the init changes its root to it
(``chroot``); an exec that joins the namespace lands on it too (``setns`` enters the
topmost mount of the namespace's root).
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.steps import exact_mode, make_like, remount, walk_error

# A base with more entries than this is refused (each is a mount of the namespace);
# the target can be made on the host instead, by the operator.
MAX_ENTRIES = 1024
# The tmpfs holds empty placeholders, the target's directories and what the job itself
# adds to the base: runc's size for a container's /dev.
_TMPFS_SIZE = "64m"


class Covers:
    """The tmpfs covers made in one namespace: their mount ids (a later target below one
    is made on it) and root fds, kept until ``finish``."""

    __slots__ = ("ids", "roots")

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.roots: list[tuple[int, bool]] = []  # (root fd, to be made read-only)

    def ensure(self, target: str, asked: str, source: str | None) -> None:
        """Make the mount target ``target`` (canonical) in the namespace if it is not
        there: like ``source`` (None: a directory, for a tmpfs volume)."""
        what = f"cannot bind {source or 'a tmpfs'} at {asked}"
        names = fsutil.parts(target)
        if not names:
            return
        root = fsutil.open_anchor("/")
        try:
            try:
                base, reached = fsutil.walk_existing(root, names[:-1])
            except OSError as err:
                raise walk_error(what, paths.dirname(target), err) from err
        finally:
            posix.close(root)
        try:
            if reached == len(names) - 1 and _exists(base, names[-1]):
                return
            if fsutil.mount_id(base) in self.ids:
                _make_missing(base, names[reached:], source, what)
                return
            cover = self._cover(base, "/" + "/".join(names[:reached]), what)
            _make_missing(cover, names[reached:], source, what)
        finally:
            posix.close(base)

    def finish(self) -> None:
        """Make the covers of read-only bases read-only, and let their fds go."""
        from hostjob.linux import syscalls

        try:
            for fd, readonly in self.roots:
                if readonly:
                    try:
                        remount(fd, syscalls.MS_RDONLY)
                    except OSError as err:
                        raise MountError(
                            f"cannot make a private directory read-only: {err.strerror}"
                        ) from err
        finally:
            for fd, _readonly in self.roots:
                posix.close(fd)
            self.roots = []

    def _cover(self, base: int, base_path: str, what: str) -> int:
        """Cover ``base`` with a tmpfs of binds of its entries (module docstring); the
        tmpfs's root fd (kept: ``finish`` closes it)."""
        from hostjob.linux import syscalls

        st = posix.fstat(base)
        cover = _new_tmpfs(st, f"{what} (a private {base_path})")
        try:
            # The cover goes on the base first, then the entries into it: a kernel before
            # 6.15 moves a mount only onto a tree of the caller's namespace, never into
            # a detached one (EINVAL). The base's own entries stay reachable through
            # ``base``, an fd opened before the cover hid them.
            flags = syscalls.MOVE_MOUNT_F_EMPTY_PATH | syscalls.MOVE_MOUNT_T_EMPTY_PATH
            syscalls.move_mount(cover, "", base, "", flags)
            if base_path == "/":
                posix.fchdir(cover)
                posix.chroot(".")
            _copy_entries(base, cover, base_path, what)
        except OSError as err:
            posix.close(cover)
            raise MountError(f"{what} (a private {base_path}): {err.strerror}") from err
        except BaseException:
            posix.close(cover)
            raise
        self.ids.add(fsutil.mount_id(cover))
        readonly = bool(posix.fstatvfs(base).f_flag & posix.ST_RDONLY)
        self.roots.append((cover, readonly))
        return cover


def _exists(dir_fd: int, name: str) -> bool:
    try:
        posix.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _new_tmpfs(st: posix.stat_result, what: str) -> int:
    """A tmpfs attached nowhere yet, its root owned and moded as ``st`` says; its fd."""
    from hostjob.linux import syscalls

    try:
        context = syscalls.fsopen("tmpfs")
    except OSError as err:
        raise MountError(f"{what} (fsopen tmpfs): {err.strerror}") from err
    try:
        options = (
            ("source", "hostjob"),  # what mountinfo and df show for it
            ("mode", f"{stat.S_IMODE(st.st_mode):o}"),
            ("uid", str(st.st_uid)),
            ("gid", str(st.st_gid)),
            ("size", _TMPFS_SIZE),
        )
        for key, value in options:
            syscalls.fsconfig(context, syscalls.FSCONFIG_SET_STRING, key, value)
        syscalls.fsconfig(context, syscalls.FSCONFIG_CMD_CREATE)
        attributes = syscalls.MOUNT_ATTR_NOSUID | syscalls.MOUNT_ATTR_NODEV
        return syscalls.fsmount(context, attr_flags=attributes)
    except OSError as err:
        raise MountError(f"{what} (tmpfs): {err.strerror}") from err
    finally:
        posix.close(context)


def _copy_entries(base: int, cover: int, base_path: str, what: str) -> None:
    """Each entry of ``base`` into ``cover``: bound, or a symlink copied."""
    from hostjob.linux import syscalls

    with posix.scandir(base) as listing:
        entries = list(listing)
    if len(entries) > MAX_ENTRIES:
        raise MountError(
            f"{what}: {base_path} has {len(entries)} entries, more than the {MAX_ENTRIES}"
            " hostjob shadows in the job's namespace; make the target on the host instead"
        )
    flags = (
        syscalls.OPEN_TREE_CLONE
        | syscalls.AT_RECURSIVE
        | syscalls.OPEN_TREE_CLOEXEC
        | syscalls.AT_SYMLINK_NOFOLLOW
    )
    for entry in entries:
        name = entry.name
        try:
            if entry.is_symlink():
                posix.symlink(posix.readlink(name, dir_fd=base), name, dir_fd=cover)
                owner = posix.stat(name, dir_fd=base, follow_symlinks=False)
                posix.chown(name, owner.st_uid, owner.st_gid, dir_fd=cover, follow_symlinks=False)
                continue
            clone = syscalls.open_tree(base, name, flags)
        except FileNotFoundError:
            continue  # gone since the listing: not in the job's view either
        except OSError as err:
            raise MountError(f"{what}: cannot keep {base_path}/{name}: {err.strerror}") from err
        try:
            if stat.S_ISDIR(posix.fstat(clone).st_mode):
                posix.mkdir(name, 0o755, dir_fd=cover)
            else:
                creating = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC
                posix.close(posix.open(name, creating | posix.O_NOFOLLOW, 0o644, dir_fd=cover))
            syscalls.move_mount(clone, "", cover, name, syscalls.MOVE_MOUNT_F_EMPTY_PATH)
        except OSError as err:
            raise MountError(f"{what}: cannot keep {base_path}/{name}: {err.strerror}") from err
        finally:
            posix.close(clone)


def _make_missing(dir_fd: int, names: list[str], source: str | None, what: str) -> None:
    """``names`` below ``dir_fd`` (on a cover): directories, then the target itself."""
    try:
        parent = fsutil.make_dirs(dir_fd, names[:-1], 0o755, after=exact_mode)
    except OSError as err:
        raise walk_error(what, "/".join(names[:-1]), err) from err
    try:
        if source is None:
            posix.mkdir(names[-1], 0o755, dir_fd=parent)
        else:
            make_like(source, names[-1], parent)
    except FileExistsError:
        pass
    except OSError as err:
        if err.errno == errno.EROFS:
            raise MountError(f"{what}: the directory that would hold it is read-only") from err
        raise MountError(f"{what}: {err.strerror}") from err
    finally:
        posix.close(parent)
