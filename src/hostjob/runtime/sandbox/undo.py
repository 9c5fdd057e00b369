"""The undo log of a container's changes to the host, and undoing it at ``delete``.

``create`` records each change as a ``(kind, path)`` entry in the container's record
before making it (``hostjob.runtime.sandbox``, an image's ``RootfsProvider``), so that
``delete`` -- also after a crash, also without the code that made it -- takes it back,
newest first. Kinds: a mount, a path hostjob created (or a whole tree), and an empty
directory or an empty file of the image that a volume link replaced (put back: docker's
placeholders for the files a runtime mounts over); they are the whole vocabulary. Every
step reaches its path from ``/`` without following a symlink: the trees they lie in may
be written by the container (SECURITY.md). Apart from its host and bind modules, so that
``delete`` does not load how things are made.
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux import fsutil

UNMOUNT = "unmount"
REMOVE = "remove"
REMOVE_TREE = "remove-tree"  # a directory and all it holds (an overlay's upper/work dirs)
RESTORE_DIR = "restore-dir"
RESTORE_FILE = "restore-file"  # [kind, path, mode (octal), uid, gid]


def undo(entries: list[list[str]]) -> None:
    """Reverse what ``prepare_host``/``prepare_bind`` recorded, newest first.

    An ``UNMOUNT`` entry may name, third, the mount id of what was at its path before
    hostjob mounted there (a client's rootfs mount, bound onto itself to be made
    read-only): the mounts above it come off, never it (nor, after a crash before the
    mount, anything)."""
    for entry in reversed(entries):
        kind, path = entry[0], entry[1]
        if kind == UNMOUNT:
            _unmount_all(path, int(entry[2]) if len(entry) > 2 and entry[2].isdigit() else -1)
        elif kind == REMOVE_TREE:
            from hostjob.linux import fsremove

            fsremove.remove_tree(path)
        elif kind == RESTORE_DIR:
            _restore_dir(path)
        elif kind == RESTORE_FILE:
            _restore_file(path, entry[2:])
        else:
            _remove(path)


# A bind of the rootfs onto itself may be stacked; at most this many layers come off.
_MAX_STACKED = 16


def _unmount_all(target: str, keep: int = -1) -> None:
    from hostjob.linux import syscalls

    for _ in range(_MAX_STACKED):
        try:
            if not fsutil.unmount(target, syscalls.MNT_DETACH, keep):
                return
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                # Not left quietly: the record stays, and delete --force tries again.
                raise MountError(
                    f"cannot unmount {target}: a directory on its path was replaced by a"
                    " symlink or a file, and hostjob never follows it"
                ) from err
            if err.errno in (errno.EINVAL, errno.ENOENT):
                return
            raise MountError(f"cannot unmount {target}: {err.strerror}") from err
    raise MountError(f"cannot unmount {target}: more than {_MAX_STACKED} mounts stacked there")


def _parent_fd(path: str, verb: str) -> tuple[int, str] | None:
    """The fd of ``path``'s parent, reached from / without symlinks, and its name;
    None when it is gone, or (with a warning) when a symlink is on the way."""
    parent, name = paths.split(path)
    if not name:
        return None
    try:
        return fsutil.walk_path(parent), name
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            _leave(path, verb)
            return None
        raise MountError(f"cannot open {parent}: {err.strerror}") from err


def _leave(path: str, verb: str) -> None:
    from hostjob import log

    log.warning(
        f"{path} was not {verb}: a directory on its path is no longer one (a symlink or"
        " a file took its place), and hostjob never follows it"
    )


def _restore_dir(path: str) -> None:
    """Put back the empty directory a volume link replaced."""
    found = _parent_fd(path, "restored")
    if found is None:
        return
    fd, name = found
    try:
        posix.mkdir(name, 0o755, dir_fd=fd)
    except FileExistsError:
        pass
    finally:
        posix.close(fd)


def _restore_file(path: str, owner: list[str]) -> None:
    """Put back the empty file a volume link replaced, with its mode and owner (set on
    the new file's fd); whatever the container put there meanwhile stays."""
    found = _parent_fd(path, "restored")
    if found is None:
        return
    fd, name = found
    try:
        flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
        try:
            made = posix.open(name, flags, 0o600, dir_fd=fd)
        except FileExistsError:
            return
        try:
            if len(owner) == 3 and all(v.isdigit() for v in owner):
                posix.fchown(made, int(owner[1]), int(owner[2]))
                # never setuid, setgid or sticky: nothing of an image is a privilege
                posix.fchmod(made, int(owner[0], 8) & 0o777)
        finally:
            posix.close(made)
    except OSError as err:
        raise MountError(f"cannot restore {path}: {err.strerror}") from err
    finally:
        posix.close(fd)


def _remove(path: str) -> None:
    found = _parent_fd(path, "removed")
    if found is None:
        return
    fd, name = found
    try:
        st = posix.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            posix.rmdir(name, dir_fd=fd)
        else:
            posix.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.EISDIR):
            _leave(path, "removed")  # changed from a directory to a file, or back
        elif err.errno not in (errno.ENOTEMPTY, errno.EBUSY):
            # ENOTEMPTY, EBUSY: someone else's files, or a mount: keep them.
            raise MountError(f"cannot remove {path}: {err.strerror}") from err
    finally:
        posix.close(fd)
