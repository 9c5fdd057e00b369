"""Attackers for the security tests: processes that swap directories and symlinks
(``renameat2(RENAME_EXCHANGE)``) while hostjob works in a tree they can write, and
the path-based code hostjob had before, to show that the racers really win against it.

A racer is a forked process (optionally switched to an unprivileged user, as a
container's process or another local user would be) that exchanges pairs of names
as fast as it can until it is stopped; every test bounds it in time and attempts.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

AT_FDCWD = -100
RENAME_EXCHANGE = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_uint,
]


def exchange(a: str, b: str, dir_fd: int = AT_FDCWD) -> bool:
    """Atomically swap the names ``a`` and ``b`` (relative to ``dir_fd``); False if
    one of them is missing."""
    rc = _libc.renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return False
    raise OSError(err, os.strerror(err), a)


class Racer:
    """A forked process swapping each ``(a, b)`` pair in ``pairs`` again and again.

    ``dir_fd``: the names are relative to it (an fd that keeps reaching a tree after
    it is unmounted lazily); else they are paths. ``user``: (uid, gid) to switch to
    first. ``stop()`` puts every pair back as it was (an even number of swaps).
    """

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        *,
        dir_fd: int = AT_FDCWD,
        user: tuple[int, int] | None = None,
    ) -> None:
        self.pairs = pairs
        self.dir_fd = dir_fd
        self.user = user
        self.pid = 0

    def start(self) -> Racer:
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the racer
            code = 0
            try:
                os.close(ready_r)
                if self.user is not None:
                    os.setgroups([])
                    os.setgid(self.user[1])
                    os.setuid(self.user[0])
                swapped = {pair: False for pair in self.pairs}
                stop = False

                def on_term(_signum: int, _frame: object) -> None:
                    nonlocal stop
                    stop = True

                signal.signal(signal.SIGTERM, on_term)
                deadline = time.monotonic() + 600  # never outlives a stuck test
                rounds = 0
                while not stop and time.monotonic() < deadline:
                    for pair in self.pairs:
                        try:
                            if exchange(pair[0], pair[1], self.dir_fd):
                                swapped[pair] = not swapped[pair]
                        except OSError:
                            pass  # the tree is going away under us: keep trying the rest
                    rounds += 1
                    if rounds == 2:  # in full swing (a first rename may be slow): go
                        os.write(ready_w, b"r")
                        os.close(ready_w)
                for pair, odd in swapped.items():
                    if odd:
                        try:
                            exchange(pair[0], pair[1], self.dir_fd)
                        except OSError:
                            pass
            except BaseException:
                code = 1
            os._exit(code)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        self.pid = pid
        return self

    def stop(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0


@contextmanager
def racing(
    pairs: list[tuple[str, str]],
    *,
    dir_fd: int = AT_FDCWD,
    user: tuple[int, int] | None = None,
) -> Iterator[Racer]:
    racer = Racer(pairs, dir_fd=dir_fd, user=user).start()
    try:
        yield racer
    finally:
        racer.stop()


def attack_attempts(minimum: int, seconds: float = 180.0) -> Iterator[int]:
    """Attempt numbers for showing that an attack works: at least ``minimum`` of them,
    and more while ``seconds`` have not passed. A race is won by chance; on a loaded
    machine it takes more tries, so the bound is time as well as a count. The caller
    returns on the first win and fails the test after the last attempt."""
    deadline = time.monotonic() + seconds
    attempt = 0
    while attempt < minimum or time.monotonic() < deadline:
        yield attempt
        attempt += 1


def open_up(path: os.PathLike[str] | str) -> None:
    """Let unprivileged racers traverse to ``path`` (pytest's temp dirs are 0700)."""
    for directory in (os.fspath(path), *_parents(os.fspath(path))):
        if directory.startswith(("/tmp/", "/var/tmp/")) and os.path.isdir(directory):
            os.chmod(directory, os.stat(directory).st_mode | 0o755)


def _parents(path: str) -> list[str]:
    out = []
    while path not in ("/", ""):
        path = os.path.dirname(path)
        out.append(path)
    return out


# --- a canary outside every tree the racers may write -----------------------------------------


def snapshot(top: str) -> dict[str, tuple[int, int, int, int]]:
    """Every entry below ``top`` (and ``top`` itself) -> (type, mode, uid, gid)."""
    out = {}
    for directory, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            path = os.path.normpath(os.path.join(directory, name))
            st = os.lstat(path)
            out[path] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    return out


# --- hostjob's path-based code, before it walked fd-relative (the attacks must beat it) -----


def path_based_remove_tree(path: str) -> None:
    """``hostjob.linux.fsremove.remove_tree`` as it was: lstat, then scandir by path."""
    device = os.lstat(path).st_dev

    def remove(current: str) -> None:
        if os.lstat(current).st_dev != device:
            os.rmdir(current)
            return
        for entry in os.scandir(current):
            if entry.is_dir(follow_symlinks=False):
                remove(entry.path)
            else:
                os.unlink(entry.path)
        os.rmdir(current)

    remove(path)


def path_based_make_cwd(path: str, uid: int, gid: int, mount_point: str) -> None:
    """``hostjob.runtime.launch.child._make_cwd`` as it was: mkdir and chown by path."""
    missing = []
    head = path
    while head != "/" and not os.path.lexists(head):
        missing.append(head)
        head = os.path.dirname(head)
    real = os.path.realpath(head)
    scope = os.path.realpath(mount_point)
    if missing and not (real == scope or real.startswith(scope.rstrip("/") + "/")):
        raise PermissionError("leads outside")
    for directory in reversed(missing):
        os.mkdir(directory, 0o700)
        os.chown(directory, uid, gid)


def path_based_undo(entries: list[list[str]]) -> None:
    """``hostjob.runtime.sandbox.undo.undo`` as it was: every step by path (an unmount's third
    element, the mount it was made on, is what hostjob now checks; this never did)."""
    for entry in reversed(entries):
        kind, path = entry[0], entry[1]
        try:
            if kind == "unmount":
                _umount2(path, 2)  # MNT_DETACH, following symlinks as before
            elif kind == "remove-tree":
                path_based_remove_tree(path)
            elif kind == "restore-dir":
                os.mkdir(path, 0o755)
            else:
                path_based_remove(path)
        except OSError:
            pass


def _umount2(path: str, flags: int) -> None:
    if _libc.umount2(os.fsencode(path), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def path_based_remove(path: str) -> None:
    """``hostjob.runtime.sandbox.undo._remove`` as it was (an undo step)."""
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            os.rmdir(path)
    except OSError:
        pass
