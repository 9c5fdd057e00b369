"""Small ctypes wrappers for the Linux system calls the standard library lacks.

The one ctypes module of hostjob, imported lazily (ctypes itself is loaded on the
first call, not at import). Each wrapper is a thin, documented call that raises
``OSError`` with the errno on failure; callers turn that into a ``HostjobError``.

Syscall numbers of the new mount API (open_tree 428 ... fspick 433) are the same on
every architecture, from the unified table of Linux 5.1.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# mount(2) flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20

# umount2(2) flags
MNT_FORCE = 0x1
MNT_DETACH = 0x2
MNT_EXPIRE = 0x4
UMOUNT_NOFOLLOW = 0x8

# The new mount API
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_FLAG = 0
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, *context: str) -> int:
    if result < 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), *context[:1])
    return result


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(
    source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None
) -> None:
    """mount(2)."""
    _check(
        _lib().mount(_b(source), _b(target), _b(fstype), _ulong(flags), _b(data)),
        target,
    )


def umount2(target: str, flags: int = 0) -> None:
    """umount2(2)."""
    _check(_lib().umount2(_b(target), flags), target)


def _ulong(value: int) -> Any:
    import ctypes

    return ctypes.c_ulong(value)


def _syscall(number: int, *args: Any) -> int:
    import ctypes

    lib = _lib()
    lib.syscall.restype = ctypes.c_long
    converted = []
    for arg in args:
        if isinstance(arg, int):
            converted.append(ctypes.c_long(arg))
        else:
            converted.append(arg)
    return int(lib.syscall(ctypes.c_long(number), *converted))


def fsopen(fsname: str, flags: int = FSOPEN_CLOEXEC) -> int:
    """fsopen(2): a filesystem context fd for ``fsname`` (e.g. ``"overlay"``)."""
    return _check(_syscall(SYS_FSOPEN, _b(fsname), flags), fsname)


def fsconfig(
    fd: int, cmd: int, key: str | None = None, value: str | None = None, aux: int = 0
) -> None:
    """fsconfig(2): set one parameter (or ``FSCONFIG_CMD_CREATE``) of a context."""
    _check(_syscall(SYS_FSCONFIG, fd, cmd, _b(key), _b(value), aux), key or "")


def fsmount(fd: int, flags: int = FSMOUNT_CLOEXEC, attr_flags: int = 0) -> int:
    """fsmount(2): a detached mount fd from a created context."""
    return _check(_syscall(SYS_FSMOUNT, fd, flags, attr_flags))


def move_mount(from_dfd: int, from_path: str, to_dfd: int, to_path: str, flags: int = 0) -> None:
    """move_mount(2): attach a detached mount (``from_path=""`` + F_EMPTY_PATH) at a path."""
    _check(_syscall(SYS_MOVE_MOUNT, from_dfd, _b(from_path), to_dfd, _b(to_path), flags), to_path)


def fs_context_messages(fd: int) -> list[str]:
    """The kernel's messages on a filesystem context (``e overlay: ...``), drained."""
    out = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out.append(data.decode(errors="replace").strip())
    return out


def is_mountpoint(path: str) -> bool:
    """Whether ``path`` is a mount point, from ``/proc/self/mountinfo``."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split(b" ", 5)
                if len(fields) > 4 and _unescape(fields[4]) == os.fsencode(real):
                    return True
    except FileNotFoundError:
        pass
    return False


def _unescape(field: bytes) -> bytes:
    if b"\\" not in field:
        return field
    out = bytearray()
    i = 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and i + 3 < len(field) + 1:
            try:
                out.append(int(field[i + 1 : i + 4], 8))
                i += 4
                continue
            except ValueError:
                pass
        out += field[i : i + 1]
        i += 1
    return bytes(out)
