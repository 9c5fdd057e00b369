"""Recursive removal (``rm -rf``) inside trees that someone else can write.

A container's processes and other local users can rename a directory and put a
symlink in its place at any moment, so ``remove_tree`` and ``remove_entry`` walk
the tree fd-relative (``hostjob.linux.fsutil``'s rule, the CVE-2022-21658 pattern):
every directory is opened ``O_NOFOLLOW`` from its parent's fd, a symlink met on
the way is unlinked and never followed, and a removal that meets a mount point
stops with ``MountError`` instead of emptying another filesystem.

Light on purpose (``posix``, ``stat``, ``errno``; not ``os``, see ``hostjob.boot.paths``):
runtime commands use it (``delete``; ``create`` undoing what it made).
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import MountError
from hostjob.linux.fsutil import DIR_FLAGS, mount_id, open_anchor

# How deep a removal holds directory fds open; deeper directories are moved up to
# the top of the tree first (a hostile tree may be thousands of levels deep).
_MAX_DEPTH = 64
# How often a removal starts over on a directory that keeps being refilled, or looks
# again at one whose entries keep being swapped.
_MAX_REFILLS = 8
_MAX_RESCANS = 1024


def remove_tree(path: str, *, ignore_errors: bool = False) -> None:
    """``rm -rf path``: fd-relative, never following a symlink, never crossing into
    a mount below it (``MountError``). A missing path is fine. The path's parent
    directories are the caller's (trusted); everything below it is walked safely.
    ``ignore_errors``: a best-effort clean-up that leaves what it cannot remove."""
    if ignore_errors:
        try:
            remove_tree(path)
        except (OSError, MountError):
            pass
        return
    path = paths.abspath(path)
    parent, name = paths.split(path)
    if not name:
        raise ValueError("refusing to remove /")
    try:
        fd = open_anchor(parent)
    except FileNotFoundError:
        return
    try:
        remove_entry(fd, name, path)
    finally:
        posix.close(fd)


def remove_entry(parent_fd: int, name: str, where: str = "") -> None:
    """Remove ``name`` in the directory ``parent_fd``: a file or symlink is unlinked,
    a directory removed with everything below it. ``where`` names it in errors."""
    where = where or name
    for _ in range(_MAX_REFILLS):
        try:
            st = posix.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            try:
                posix.unlink(name, dir_fd=parent_fd)
                return
            except FileNotFoundError:
                return
            except IsADirectoryError:
                continue  # became a directory meanwhile: look again
        _remove_dir(parent_fd, name, where)
        return
    raise OSError(errno.EBUSY, f"cannot remove {where}: it keeps changing")


class _Dir:
    """A directory being emptied: its fd, its name in its parent, what is left in it."""

    __slots__ = ("dev", "fd", "mnt", "name", "path", "refills", "subdirs")

    def __init__(self, fd: int, name: str, path: str, dev: int, mnt: int) -> None:
        self.fd = fd
        self.name = name
        self.path = path
        self.dev = dev
        self.mnt = mnt
        self.subdirs: list[str] = []
        self.refills = 0


def _remove_dir(parent_fd: int, name: str, where: str) -> None:
    st = posix.fstat(parent_fd)
    base = _Dir(parent_fd, "", paths.dirname(where), st.st_dev, mount_id(parent_fd))
    top = _enter(base, name, where)
    if top is None:
        return
    stack = [top]
    hoisted = 0
    try:
        while stack:
            current = stack[-1]
            if current.subdirs:
                sub = current.subdirs.pop()
                if len(stack) >= _MAX_DEPTH:
                    # Too deep to hold every level open: move it up to the top of the tree
                    # (the same filesystem and mount) and take it from there later.
                    hoisted += 1
                    new_name = f".hostjob-rm-{posix.getpid()}-{hoisted}"
                    try:
                        posix.rename(sub, new_name, src_dir_fd=current.fd, dst_dir_fd=top.fd)
                    except FileNotFoundError:
                        continue
                    top.subdirs.append(new_name)
                    continue
                child = _enter(current, sub, f"{current.path}/{sub}")
                if child is not None:
                    stack.append(child)
                continue
            stack.pop()
            posix.close(current.fd)
            parent = stack[-1] if stack else None
            try:
                posix.rmdir(current.name, dir_fd=parent.fd if parent else base.fd)
                continue
            except FileNotFoundError:
                continue
            except OSError as err:
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                code = err.errno
            if parent is None:
                # The tree's top was refilled meanwhile (a process still writing there).
                if code == errno.ENOTDIR or current.refills >= _MAX_REFILLS:
                    raise OSError(errno.EBUSY, f"cannot remove {where}: it keeps changing")
                again = _enter(base, current.name, where)
                if again is not None:
                    again.refills = current.refills + 1
                    stack.append(again)
                    top = again
                continue
            # Refilled meanwhile, or its name now holds a symlink (swapped in) while the
            # directory went to another name of the parent: look at the parent again.
            if parent.refills >= _MAX_RESCANS:
                raise OSError(errno.EBUSY, f"cannot remove {parent.path}: it keeps changing")
            parent.refills += 1
            if code == errno.ENOTDIR:
                try:
                    posix.unlink(current.name, dir_fd=parent.fd)
                except (FileNotFoundError, IsADirectoryError):
                    pass
            _clear_files(parent)
    finally:
        for frame in stack:
            posix.close(frame.fd)


def _enter(parent: _Dir, name: str, path: str) -> _Dir | None:
    """Open the subdirectory ``name`` and unlink everything in it but directories
    (which it lists in ``subdirs``); None when ``name`` is gone or is no directory
    (then it is unlinked: a symlink swapped in is removed, never followed)."""
    for _ in range(_MAX_REFILLS):
        try:
            fd = posix.open(name, DIR_FLAGS, dir_fd=parent.fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                posix.unlink(name, dir_fd=parent.fd)
                return None
            except FileNotFoundError:
                return None
            except IsADirectoryError:
                continue  # swapped back: open it again
        st = posix.fstat(fd)
        if st.st_dev != parent.dev or mount_id(fd) != parent.mnt:
            posix.close(fd)
            raise MountError(
                f"cannot remove {path}: it is a mount point (hostjob never empties another"
                " filesystem); unmount it first"
            )
        current = _Dir(fd, name, path, parent.dev, parent.mnt)
        try:
            _clear_files(current)
        except BaseException:
            posix.close(fd)
            raise
        return current
    raise OSError(errno.EBUSY, f"cannot remove {path}: it keeps changing")


def _clear_files(current: _Dir) -> None:
    """Unlink every entry of ``current`` but directories, which go to its ``subdirs``."""
    pending = set(current.subdirs)
    with posix.scandir(current.fd) as entries:
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                try:
                    posix.unlink(entry.name, dir_fd=current.fd)
                    continue
                except FileNotFoundError:
                    continue
                except IsADirectoryError:
                    pass  # became a directory meanwhile
            if entry.name not in pending:
                pending.add(entry.name)
                current.subdirs.append(entry.name)
