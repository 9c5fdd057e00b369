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

# namespaces
CLONE_NEWNS = 0x00020000

# prctl(2) options
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2

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
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
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


def unshare(flags: int) -> None:
    """unshare(2) (os.unshare arrives in Python 3.12)."""
    _check(_lib().unshare(flags), "unshare")


def setns(fd: int, nstype: int = 0) -> None:
    """setns(2) (os.setns arrives in Python 3.12)."""
    _check(_lib().setns(fd, nstype), "setns")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2)."""
    return _check(
        _lib().prctl(option, _ulong(arg2), _ulong(arg3), _ulong(arg4), _ulong(arg5)), "prctl"
    )


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_child_subreaper() -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_keepcaps(keep: bool) -> None:
    prctl(PR_SET_KEEPCAPS, int(keep))


def drop_bounding(cap: int) -> None:
    """Drop one capability from the bounding set."""
    prctl(PR_CAPBSET_DROP, cap)


def raise_ambient(cap: int) -> None:
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """capset(2): this thread's capability sets, from 64-bit masks."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)  # version, pid (0 = self)
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words
    for word in (0, 1):
        shift = 32 * word
        data[3 * word] = (effective >> shift) & 0xFFFFFFFF
        data[3 * word + 1] = (permitted >> shift) & 0xFFFFFFFF
        data[3 * word + 2] = (inheritable >> shift) & 0xFFFFFFFF
    _check(_lib().capset(ctypes.byref(header), ctypes.byref(data)), "capset")


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
