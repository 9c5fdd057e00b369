"""Small wrappers for the Linux system calls the standard library lacks.

The one module of hostjob that calls C, imported lazily; the C binding itself is
made on the first call, not at import. Each wrapper is a thin, documented call
that raises ``OSError`` with the errno on failure; callers turn that into a
``HostjobError``. The capability names and numbers of capability.h are
``hostjob.linux.capabilities``' (plain Python, no C).

The binding is CPython's ``_ctypes`` (what ``ctypes`` is built on) used directly:
``import ctypes`` costs ~2-4 ms (its ``__init__`` defines every C type, imports
``struct``, ``types`` and ``ctypes._endian``), ``_ctypes`` ~0.5 ms, and a runtime
command that mounts, unmounts, drops capabilities or clones into a cgroup is a
fresh interpreter that pays it every time. ``_Binding`` makes the few C types and
function pointers used here exactly as ``ctypes.CDLL``/``PyDLL`` would.

Syscall numbers of the new mount API (open_tree 428 ... fspick 433) and of clone3
(435) are the same on every architecture, from the unified table of Linux 5.1.
"""

from __future__ import annotations

import posix

from hostjob.boot import paths
from hostjob.linux.capabilities import cap_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# mount(2) flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_SYNCHRONOUS = 0x10
MS_REMOUNT = 0x20
MS_DIRSYNC = 0x80
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

# namespaces
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000

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
SYS_OPEN_TREE = 428
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
MOVE_MOUNT_T_EMPTY_PATH = 0x40
OPEN_TREE_CLONE = 0x1
OPEN_TREE_CLOEXEC = posix.O_CLOEXEC
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
AT_FDCWD = -100


class _Binding:
    """libc through ``_ctypes``: ``libc`` as ``ctypes.CDLL(None, use_errno=True)``,
    ``pyapi`` as ``ctypes.PyDLL(None, use_errno=True)`` (called with the GIL held),
    and the C types the wrappers pass (``ctypes.c_long`` ... as ``Long`` ...)."""

    Long: Any
    ULong: Any
    UInt32: Any
    UInt64: Any
    addressof: Any
    byref: Any
    sizeof: Any
    get_errno: Any
    libc: Any
    pyapi: Any

    def __init__(self) -> None:
        import _ctypes as _c

        c: Any = _c  # typeshed's generic _SimpleCData cannot be subscripted at run time

        class Int(c._SimpleCData):  # type: ignore[misc]
            _type_ = "i"

        class Long(c._SimpleCData):  # type: ignore[misc]
            _type_ = "l"

        class ULong(c._SimpleCData):  # type: ignore[misc]
            _type_ = "L"

        class UInt32(c._SimpleCData):  # type: ignore[misc]
            _type_ = "I"

        class UInt64(c._SimpleCData):  # type: ignore[misc]
            _type_ = "Q"

        class Function(c.CFuncPtr):  # type: ignore[misc]
            _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        class PythonFunction(c.CFuncPtr):  # type: ignore[misc]
            _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO | c.FUNCFLAG_PYTHONAPI
            _restype_ = Int

        self.Long = Long
        self.ULong = ULong
        self.UInt32 = UInt32
        self.UInt64 = UInt64
        self.addressof = c.addressof
        self.byref = c.byref
        self.sizeof = c.sizeof
        self.get_errno = c.get_errno
        # dlopen(NULL): the program and the libraries it links, libc and CPython's API.
        self.libc = _Library(c.dlopen(None, 0), Function)
        self.pyapi = _Library(self.libc.handle, PythonFunction)


def load_library(name: str) -> Any:
    """The shared library ``name`` (``libseccomp.so.2``), its functions as libc's here:
    ``lib.name(...)`` returns an int, errno kept. OSError when it cannot be loaded."""
    import _ctypes as _c

    return _Library(_c.dlopen(name, 0), type(_ffi().libc.getpid))


def binding() -> Any:
    """The C types and libc (``_Binding``) for another module that calls C through this
    one (``hostjob.seccomp.bpf``): ``Long``, ``ULong``, ``UInt64``, ``byref``, ``sizeof``,
    ``get_errno``, ``libc``."""
    return _ffi()


def syscall(number: int, *args: Any) -> int:
    """syscall(2): ints as C longs, other arguments (``byref``) as they are; -1 + errno."""
    return _syscall(number, *args)


class _Library:
    """``lib.name``: the C function ``name`` (looked up once), as CDLL's attributes."""

    def __init__(self, handle: int, function: Any) -> None:
        self._handle = handle  # the attribute name _ctypes.CFuncPtr((name, lib)) reads
        self.handle = handle
        self._function = function

    def __getattr__(self, name: str) -> Any:
        func = self._function((name, self))
        setattr(self, name, func)
        return func


_binding: _Binding | None = None


def _ffi() -> _Binding:
    global _binding
    if _binding is None:
        _binding = _Binding()
    return _binding


def _lib() -> Any:
    return _ffi().libc


def _check(result: int, *context: str) -> int:
    if result < 0:
        err = _ffi().get_errno()
        raise OSError(err, posix.strerror(err), *context[:1])
    return result


def _b(value: str | None) -> bytes | None:
    return None if value is None else paths.fsencode(value)


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


def drop_bounding(caps: Iterable[int]) -> None:
    """Drop each of ``caps`` from the bounding set: a prctl each (a container process
    drops ~40 of them before its program runs, so the C function and the zero argument
    are bound once, not per call). OSError's ``filename`` names the capability that
    failed (``cap_name``)."""
    ffi = _ffi()
    call, ulong, zero = ffi.libc.prctl, ffi.ULong, ffi.ULong(0)
    for cap in caps:
        if call(PR_CAPBSET_DROP, ulong(cap), zero, zero, zero) < 0:
            err = ffi.get_errno()
            raise OSError(err, posix.strerror(err), cap_name(cap))


def raise_ambient(cap: int) -> None:
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap)


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """capset(2): this thread's capability sets, from 64-bit masks."""
    ffi = _ffi()
    header = (ffi.UInt32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)  # version, pid (0 = self)
    data = (ffi.UInt32 * 6)()  # {effective, permitted, inheritable} x 2 words
    for word in (0, 1):
        shift = 32 * word
        data[3 * word] = (effective >> shift) & 0xFFFFFFFF
        data[3 * word + 1] = (permitted >> shift) & 0xFFFFFFFF
        data[3 * word + 2] = (inheritable >> shift) & 0xFFFFFFFF
    _check(_lib().capset(ffi.byref(header), ffi.byref(data)), "capset")


def _ulong(value: int) -> Any:
    return _ffi().ULong(value)


def _syscall(number: int, *args: Any) -> int:
    ffi = _ffi()
    func = ffi.libc.syscall
    func.restype = ffi.Long
    converted = [ffi.Long(arg) if isinstance(arg, int) else arg for arg in args]
    return int(func(ffi.Long(number), *converted))


# --- clone3 into a cgroup ----------------------------------------------------------------

SYS_CLONE3 = 435
CLONE_INTO_CGROUP = 0x200000000
# struct clone_args up to its ``cgroup`` field (CLONE_ARGS_SIZE_VER2, Linux 5.7): eleven u64.
_CLONE_ARGS_WORDS = 11
_CLONE_ARGS_CGROUP = 10


def fork_into_cgroup(cgroup_fd: int) -> int:
    """``clone3(CLONE_INTO_CGROUP)``: ``posix.fork()``, the child born in the cgroup2
    directory ``cgroup_fd``. Returns 0 in the child and its pid in the parent.

    The kernel places the child while copying it, under the read side of the lock a
    later write to ``cgroup.procs`` takes for writing (an RCU grace period, 5-24 ms).
    Raises OSError, the parent unchanged: ENOSYS (no clone3, or a seccomp filter),
    E2BIG or EINVAL (no CLONE_INTO_CGROUP: Linux < 5.7), EBADF (not a cgroup2 fd),
    EBUSY or EOPNOTSUPP (the cgroup cannot take a process), EACCES, ...

    The call holds the GIL throughout (``PyDLL``): through a plain C call another
    thread could take the GIL while the process is copied, and the child would wait
    forever for it. Python's side of a fork happens as ``posix.fork()`` does it:
    ``PyOS_BeforeFork`` (before-fork handlers, the import lock), then
    ``PyOS_AfterFork_Child`` (the GIL, thread states and the import lock re-made,
    ``threading`` told, after-fork handlers) or ``PyOS_AfterFork_Parent``. What a raw
    clone3 skips is glibc's side of fork(): re-making libc's internal locks (malloc
    arenas, stdio, the loader) and the thread's cached TID in the child. So:

    * call it only from a single-threaded process: with no other thread, no libc lock
      can be held across the copy (the caller checks; a threaded one uses posix.fork());
    * the child may run ordinary Python (allocate, import, read and write files, make
      syscalls, signal itself: glibc asks the kernel for its TID there) and must end
      in ``execve`` or ``posix._exit``; it must not start threads or call ``pthread_*``
      functions on itself (they would address the parent's TID), or rely on ``atexit``.
    """
    if TYPE_CHECKING:
        import signal as _signal
    else:
        import _signal  # signal's C half, without its enum wrappers

    ffi = _ffi()
    api = ffi.pyapi
    api.syscall.restype = ffi.Long
    args = (ffi.UInt64 * _CLONE_ARGS_WORDS)()
    args[0] = CLONE_INTO_CGROUP  # flags
    args[4] = _signal.SIGCHLD  # exit_signal: a child like fork's
    args[_CLONE_ARGS_CGROUP] = cgroup_fd
    api.PyOS_BeforeFork()
    pid = api.syscall(ffi.Long(SYS_CLONE3), ffi.byref(args), ffi.Long(ffi.sizeof(args)))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ffi.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, posix.strerror(err), "clone3")
    return int(pid)


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


def open_tree(dfd: int, path: str, flags: int) -> int:
    """open_tree(2): with ``OPEN_TREE_CLONE`` (and ``AT_RECURSIVE``) a detached copy of
    the mount (tree) at ``path`` that ``move_mount`` can attach elsewhere; the copy of
    a shared mount joins its peer group, so mounts under it propagate both ways."""
    return _check(_syscall(SYS_OPEN_TREE, dfd, _b(path), flags), path)


def move_mount(from_dfd: int, from_path: str, to_dfd: int, to_path: str, flags: int = 0) -> None:
    """move_mount(2): attach a detached mount (``from_path=""`` + F_EMPTY_PATH) at a path."""
    _check(_syscall(SYS_MOVE_MOUNT, from_dfd, _b(from_path), to_dfd, _b(to_path), flags), to_path)


def fs_context_messages(fd: int) -> list[str]:
    """The kernel's messages on a filesystem context (``e overlay: ...``), drained."""
    out = []
    while True:
        try:
            data = posix.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out.append(data.decode(errors="replace").strip())
    return out


# --- scheduling: process.scheduler and process.ioPriority -----------------------------
# The numbers of two calls glibc has no wrapper for (not in the glibc this host may
# have), by machine (uname); the generic table's (aarch64, riscv64, loongarch64) else.
_SCHED_SETATTR = {"x86_64": 314, "i686": 351, "i386": 351, "armv7l": 380, "ppc64le": 355}
_IOPRIO_SET = {"x86_64": 251, "i686": 289, "i386": 289, "armv7l": 314, "ppc64le": 273}
_SCHED_SETATTR.update(ppc64=355, s390x=345)
_IOPRIO_SET.update(ppc64=273, s390x=282)
IOPRIO_WHO_PROCESS = 1


def sched_setattr(
    policy: int, flags: int, nice: int, priority: int, runtime: int, deadline: int, period: int
) -> None:
    """sched_setattr(2) on this thread: ``struct sched_attr`` as Linux 4.13 has it
    (SCHED_ATTR_SIZE_VER1, the utilisation clamps 0)."""
    from _struct import pack

    attr = pack("=IIQiIQQQII", 56, policy, flags, nice, priority, runtime, deadline, period, 0, 0)
    ffi = _ffi()
    buffer = (ffi.UInt32 * 14).from_buffer_copy(attr)
    number = _SCHED_SETATTR.get(posix.uname().machine, 274)
    _check(_syscall(number, 0, ffi.byref(buffer), 0), "sched_setattr")


def ioprio_set(klass: int, level: int) -> None:
    """ioprio_set(2) on this process: ``klass`` (IOPRIO_CLASS_RT 1, BE 2, IDLE 3) and
    ``level`` (0-7)."""
    number = _IOPRIO_SET.get(posix.uname().machine, 30)
    _check(_syscall(number, IOPRIO_WHO_PROCESS, 0, (klass << 13) | level), "ioprio_set")
