"""Small ctypes wrappers for the Linux system calls the standard library lacks.

The one module that loads ctypes; import it lazily (inside functions), only on
the paths that need it. Every wrapper raises ``OSError`` with errno set, like
the ``os`` module does.
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


# --- prctl ------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4

_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(_prctl(option, arg2, arg3, arg4, arg5), "prctl")


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_child_subreaper() -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_keepcaps(keep: bool) -> None:
    prctl(PR_SET_KEEPCAPS, int(keep))


def drop_bounding(cap: int) -> None:
    prctl(PR_CAPBSET_DROP, cap)


def clear_ambient() -> None:
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def raise_ambient(cap: int) -> None:
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


# --- capabilities -----------------------------------------------------------------------

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """Set this thread's capability sets from 64-bit masks."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for i in (0, 1):
        shift = 32 * i
        data[i].effective = (effective >> shift) & 0xFFFFFFFF
        data[i].permitted = (permitted >> shift) & 0xFFFFFFFF
        data[i].inheritable = (inheritable >> shift) & 0xFFFFFFFF
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# --- mounts and namespaces --------------------------------------------------------------

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8
CLONE_NEWNS = 0x00020000

_mount = _libc.mount
_mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_mount.restype = ctypes.c_int


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    _check(
        _mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            flags,
            data.encode() if data is not None else None,
        ),
        f"mount {target}",
    )


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int = 0) -> None:
    _check(_libc.setns(fd, nstype), "setns")
