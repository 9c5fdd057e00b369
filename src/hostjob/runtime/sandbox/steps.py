"""The fd-relative steps both mount modes are made of.

The rootfs, the writable layer and often a mount point's parents are trees that a
container's processes (any user, racing the runtime) or other local users can
write. So every path is taken in canonical form (``canonical``), every creation
walks it from ``/`` one component at a time without following a symlink
(``make_parent``, ``hostjob.linux.fsutil``), mounts go through the fd of the directory so
reached (``/proc/self/fd/N``: ``open_target``, ``remount``), and a path whose
component was swapped for a symlink fails with ``walk_error``'s message, never
followed.
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.undo import REMOVE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.sandbox.provider import Recorder


def kept_flags(current: int) -> int:
    """The ``MS_*`` flags that a bind remount must repeat to keep what a mount's
    ``statvfs`` flags (``current``) show of nosuid, nodev and noexec. A remount with
    MS_BIND replaces all of them: without these, making an image's nosuid,nodev rootfs
    read-only would make its setuid files work again (runc keeps them the same way)."""
    from hostjob.linux import syscalls

    flags = 0
    for st_flag, ms_flag in (
        (posix.ST_NOSUID, syscalls.MS_NOSUID),
        (posix.ST_NODEV, syscalls.MS_NODEV),
        (posix.ST_NOEXEC, syscalls.MS_NOEXEC),
    ):
        if current & st_flag:
            flags |= ms_flag
    return flags


def remount(fd: int, flags: int) -> None:
    """Add per-mount ``flags`` (MS_RDONLY, MS_NOSUID, ...) to the bind mount whose root
    ``fd`` is (reached without symlinks), keeping its nosuid, nodev and noexec."""
    from hostjob.linux import syscalls

    flags |= kept_flags(posix.fstatvfs(fd).f_flag)
    syscalls.mount(
        None, f"/proc/self/fd/{fd}", None, syscalls.MS_BIND | syscalls.MS_REMOUNT | flags
    )


def mount_id_at(path: str, what: str) -> int:
    """The id of the mount ``path`` (canonical) lies on, reached without symlinks."""
    try:
        fd = fsutil.walk_path(path)
    except OSError as err:
        raise walk_error(what, path, err) from err
    try:
        return fsutil.mount_id(fd)
    finally:
        posix.close(fd)


def remount_path(target: str, asked: str, flags: int) -> None:
    """``remount`` of the mount at ``target`` (canonical), reached without symlinks."""
    try:
        fd = fsutil.walk_path(target)
    except OSError as err:
        raise walk_error(f"mount point {asked}", target, err) from err
    try:
        remount(fd, flags)
    except OSError as err:
        raise MountError(f"cannot remount {asked}: {err.strerror}") from err
    finally:
        posix.close(fd)


def make_parent(path: str, what: str, record: Recorder) -> tuple[int, str]:
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
        return fsutil.make_dirs(root, parents, 0o755, before=made, after=exact_mode), names[-1]
    except OSError as err:
        raise walk_error(what, paths.dirname(path), err) from err
    finally:
        posix.close(root)


def exact_mode(fd: int) -> None:
    """A directory hostjob made for a mount target: 0755 whatever the umask (every user
    walks through it, none but root writes it)."""
    posix.fchmod(fd, 0o755)


def open_dir(parent_fd: int, name: str, what: str) -> int:
    try:
        return posix.open(name, fsutil.DIR_FLAGS, dir_fd=parent_fd)
    except OSError as err:
        raise walk_error(what, name, err) from err


def canonical(path: str, what: str) -> str:
    try:
        return fsutil.canonical(path)
    except OSError as err:
        raise MountError(f"{what}: {err.strerror} (a symlink on its path keeps changing)") from err


def walk_error(what: str, path: str, err: OSError) -> MountError:
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        return MountError(
            f"{what}: {path} cannot be reached without following a symlink (a directory"
            " on the way was replaced by a symlink or a file)"
        )
    return MountError(f"{what}: {path}: {err.strerror}")


def make_like(source: str, name: str, dir_fd: int) -> None:
    """A mount target like its source at ``name`` in ``dir_fd``: a directory (0755), else
    an empty file (0644), those modes whatever the umask; never through what lies there
    (O_EXCL: FileExistsError)."""
    if paths.isdir(source):
        posix.mkdir(name, 0o755, dir_fd=dir_fd)
        fd = posix.open(name, fsutil.DIR_FLAGS, dir_fd=dir_fd)
        mode = 0o755
    else:
        flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
        fd = posix.open(name, flags, 0o644, dir_fd=dir_fd)
        mode = 0o644
    try:
        posix.fchmod(fd, mode)
    finally:
        posix.close(fd)


def open_target(target: str, asked: str, source: str) -> int:
    """An O_PATH fd of a mount target (a directory or a file, never a symlink)."""
    parent, name = paths.split(target)
    what = f"cannot bind {source} at {asked}"
    try:
        parent_fd = fsutil.walk_path(parent)
    except OSError as err:
        raise walk_error(what, parent, err) from err
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


def system_tree(target: str) -> str | None:
    """``/dev``, ``/proc`` or ``/sys`` when ``target`` (canonical) lies strictly below it."""
    for tree in SYSTEM_TREES:
        if target.startswith(tree + "/"):
            return tree
    return None


SYSTEM_TREES = ("/dev", "/proc", "/sys")


def bind(source: str, fd: int, what: str) -> None:
    """A recursive bind of ``source`` on the directory or file ``fd`` (reached without
    symlinks); a failure is ``what``: the kernel's reason."""
    from hostjob.linux import syscalls

    try:
        syscalls.mount(source, f"/proc/self/fd/{fd}", None, syscalls.MS_BIND | syscalls.MS_REC)
    except OSError as err:
        raise MountError(f"{what}: {err.strerror}") from err


def tmpfs_arguments(options: list[str], readonly: bool) -> tuple[int, str]:
    """mount(2)'s flags and data for a tmpfs volume's options (as the conversion checked
    them: flag words, their opposites, tmpfs's own options; ``tmpcopyup`` is the
    caller's)."""
    from hostjob.linux import syscalls

    table = {
        "nosuid": syscalls.MS_NOSUID,
        "nodev": syscalls.MS_NODEV,
        "noexec": syscalls.MS_NOEXEC,
        "sync": syscalls.MS_SYNCHRONOUS,
        "dirsync": syscalls.MS_DIRSYNC,
        "noatime": syscalls.MS_NOATIME,
        "nodiratime": syscalls.MS_NODIRATIME,
        "relatime": syscalls.MS_RELATIME,
        "strictatime": syscalls.MS_STRICTATIME,
    }
    opposites = {
        "suid": "nosuid",
        "dev": "nodev",
        "exec": "noexec",
        "async": "sync",
        "atime": "noatime",
        "diratime": "nodiratime",
        "norelatime": "relatime",
        "nostrictatime": "strictatime",
    }
    flags = syscalls.MS_RDONLY if readonly else 0
    data = []
    for word in options:
        if word in table:
            flags |= table[word]
        elif word in opposites:
            flags &= ~table[opposites[word]]
        elif word != "tmpcopyup":
            data.append(word)
    return flags, ",".join(data)


def mount_tmpfs(fd: int, options: list[str], readonly: bool, what: str) -> None:
    """A new tmpfs on the directory ``fd`` (reached without symlinks)."""
    from hostjob.linux import syscalls

    flags, data = tmpfs_arguments(options, readonly)
    try:
        syscalls.mount("tmpfs", f"/proc/self/fd/{fd}", "tmpfs", flags, data or None)
    except OSError as err:
        raise MountError(
            f"{what}: cannot mount a tmpfs ({data or 'no options'}): {err.strerror}"
        ) from err
