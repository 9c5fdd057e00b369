"""Locks: an ``flock`` held on an open file or directory, released when its fd is
closed (``release()``, the end of a ``with`` block, or by the kernel when the holder
dies). Re-exported by ``hostjob.linux.fsutil``; a module of its own so that a command that
only locks (``start``) loads nothing else.
"""

from __future__ import annotations

import fcntl
import posix
import time


class FileLock:
    """An ``flock`` held through an open fd; closing the fd (``release()``, the end of
    a ``with`` block, or the holder's death) releases it."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            posix.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_fd(
    fd: int, *, shared: bool = False, wait: bool = True, timeout: float | None = None
) -> FileLock:
    """Lock the open file or directory ``fd`` (which the lock then owns and closes).
    ``wait=False``: raise ``BlockingIOError`` at once when someone else holds it;
    ``timeout``: after waiting that many seconds."""
    how = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if not wait or timeout is not None:
        how |= fcntl.LOCK_NB
    deadline = 0.0 if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, how)
                break
            except BlockingIOError:
                if timeout is None or time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)
    except BaseException:
        posix.close(fd)
        raise
    return FileLock(fd)


def lock_file(path: str, *, shared: bool = False, wait: bool = True) -> FileLock:
    """Lock the file ``path``, made (0600) if missing: ``with lock_file(p): ...``."""
    fd = posix.open(path, posix.O_RDWR | posix.O_CREAT | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o600)
    return lock_fd(fd, shared=shared, wait=wait)


def is_locked(path: str) -> bool:
    """Whether someone holds an exclusive lock on ``path`` now (False when it is gone)."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        posix.close(fd)
    return False
