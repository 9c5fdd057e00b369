"""``linux.seccomp``: a runtime-spec seccomp profile, applied as runc applies it.

A filter needs no namespace, so a job container honours it: every process of the job
(the init and each exec) runs under it. The profile is checked when the config is
converted (``check``: names, actions, operators, flags -- pure), compiled before the
fork by the host's libseccomp (``build``: ``libseccomp.so.2`` through ``hostjob.linux.syscalls``'s
``_ctypes`` binding, no ``ctypes`` package; a syscall, action or architecture that
libseccomp or the kernel lacks is a ``ConfigError`` at ``create``), and installed by the
child with one system call (``install``) as late as it can: just before ``execve`` with
``noNewPrivileges``, else before the switch to the target user, while it still has the
CAP_SYS_ADMIN the kernel asks for then -- runc's two places.

As runc does: ``SCMP_ACT_KILL`` is KILL_THREAD; ``SCMP_ACT_ERRNO`` and ``SCMP_ACT_TRACE``
return ``errnoRet`` (``defaultErrnoRet`` for the default action), EPERM without it; a rule
whose action is the default one is left out (libseccomp refuses it); several conditions
on the same argument become one rule each (libseccomp cannot AND them). Where runc skips
a syscall name its libseccomp does not know, hostjob skips it only in a rule that allows
(the syscall then meets the default action: nothing is let through that the profile
denies) and refuses a profile that would deny or trap a syscall it cannot name.
``SCMP_ACT_NOTIFY`` needs a seccomp agent (``listenerPath``): refused.

Loaded only when a profile is given: a command without one imports nothing of this.
"""

from __future__ import annotations

from hostjob.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ACTIONS = {
    "SCMP_ACT_KILL": 0x00000000,
    "SCMP_ACT_KILL_THREAD": 0x00000000,
    "SCMP_ACT_KILL_PROCESS": 0x80000000,
    "SCMP_ACT_TRAP": 0x00030000,
    "SCMP_ACT_ERRNO": 0x00050000,
    "SCMP_ACT_TRACE": 0x7FF00000,
    "SCMP_ACT_LOG": 0x7FFC0000,
    "SCMP_ACT_ALLOW": 0x7FFF0000,
}
_WITH_ERRNO = ("SCMP_ACT_ERRNO", "SCMP_ACT_TRACE")
_PERMISSIVE = ("SCMP_ACT_ALLOW", "SCMP_ACT_LOG")
EPERM = 1

OPERATORS = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}

# runtime-spec flags -> seccomp(2)'s SECCOMP_FILTER_FLAG_*
FLAGS = {
    "SECCOMP_FILTER_FLAG_TSYNC": 1,
    "SECCOMP_FILTER_FLAG_LOG": 2,
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW": 4,
}

ARCHES = (
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_ARM",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_MIPS",
    "SCMP_ARCH_MIPS64",
    "SCMP_ARCH_MIPS64N32",
    "SCMP_ARCH_MIPSEL",
    "SCMP_ARCH_MIPSEL64",
    "SCMP_ARCH_MIPSEL64N32",
    "SCMP_ARCH_PPC",
    "SCMP_ARCH_PPC64",
    "SCMP_ARCH_PPC64LE",
    "SCMP_ARCH_S390",
    "SCMP_ARCH_S390X",
    "SCMP_ARCH_PARISC",
    "SCMP_ARCH_PARISC64",
    "SCMP_ARCH_RISCV64",
)
MAX_ARGS = 6  # a syscall's arguments, 0-5
MAX_RULES = 65536  # names x conditions: far above any real profile (containerd's ~450)
PATH = "linux.seccomp"


# --- the profile, checked (pure) -----------------------------------------------------------


def check(profile: dict[str, Any]) -> None:
    """A ConfigError naming the field of the first thing in ``profile`` (``linux.seccomp``
    as JSON) that is not a runtime-spec seccomp profile hostjob can apply."""
    _action(profile, "defaultAction", PATH, required=True)
    _errno(profile.get("defaultErrnoRet"), f"{PATH}.defaultErrnoRet")
    if profile.get("listenerPath") or profile.get("listenerMetadata"):
        raise ConfigError(
            "a seccomp agent (SCMP_ACT_NOTIFY) is not supported by hostjob", f"{PATH}.listenerPath"
        )
    for i, arch in enumerate(_list(profile, "architectures", PATH)):
        if arch not in ARCHES:
            raise ConfigError(f"unknown architecture {arch!r}", f"{PATH}.architectures[{i}]")
    for i, flag in enumerate(_list(profile, "flags", PATH)):
        if flag not in FLAGS:
            raise ConfigError(
                f"unsupported flag {flag!r} (known: {', '.join(FLAGS)})", f"{PATH}.flags[{i}]"
            )
    rules = 0
    for i, rule in enumerate(_list(profile, "syscalls", PATH)):
        where = f"{PATH}.syscalls[{i}]"
        if type(rule) is not dict:
            raise ConfigError("must be an object", where)
        names = _list(rule, "names", where)
        if not names or not all(type(n) is str and n for n in names):
            raise ConfigError("must be a list of syscall names", f"{where}.names")
        _action(rule, "action", where, required=True)
        _errno(rule.get("errnoRet"), f"{where}.errnoRet")
        args = _list(rule, "args", where)
        for j, arg in enumerate(args):
            _condition(arg, f"{where}.args[{j}]")
        rules += len(names) * max(len(args), 1)
        if rules > MAX_RULES:
            raise ConfigError(f"more than {MAX_RULES} rules", where)


def _list(document: dict[str, Any], key: str, where: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if type(value) is not list:
        raise ConfigError("must be a list", f"{where}.{key}")
    return value


def _action(document: dict[str, Any], key: str, where: str, required: bool) -> None:
    value = document.get(key)
    if value is None and not required:
        return
    if value == "SCMP_ACT_NOTIFY":
        raise ConfigError(
            "SCMP_ACT_NOTIFY needs a seccomp agent, which hostjob does not support",
            f"{where}.{key}",
        )
    if type(value) is not str or value not in ACTIONS:  # a list or an object is no key
        raise ConfigError(f"unknown action {value!r}", f"{where}.{key}")


def _errno(value: object, where: str) -> None:
    if value is not None and (type(value) is not int or not 0 <= value <= 0xFFFF):
        raise ConfigError(f"must be an errno number, not {value!r}", where)


def _condition(arg: object, where: str) -> None:
    if type(arg) is not dict:
        raise ConfigError("must be an object", where)
    index = arg.get("index")
    if type(index) is not int or not 0 <= index < MAX_ARGS:
        raise ConfigError(f"must be 0-{MAX_ARGS - 1}, not {index!r}", f"{where}.index")
    for key in ("value", "valueTwo"):
        value = arg.get(key, 0)
        if type(value) is not int or not 0 <= value < 2**64:
            raise ConfigError(f"must be a 64-bit unsigned number, not {value!r}", f"{where}.{key}")
    if arg.get("op") not in OPERATORS:
        raise ConfigError(f"unknown operator {arg.get('op')!r}", f"{where}.op")


# --- compiled by libseccomp ----------------------------------------------------------------


class Filter:
    """A compiled profile: the classic-BPF program and how to install it."""

    __slots__ = ("flags", "program", "syscall_nr")

    def __init__(self, program: bytes, flags: int, syscall_nr: int) -> None:
        self.program = program
        self.flags = flags  # SECCOMP_FILTER_FLAG_*
        self.syscall_nr = syscall_nr  # seccomp(2) on this architecture, for flags


def _value(action: str, errno_ret: object) -> int:
    value = ACTIONS[action]
    if action in _WITH_ERRNO:
        value |= (errno_ret if type(errno_ret) is int else EPERM) & 0xFFFF
    return value


class _Seccomp:
    """libseccomp's functions used here, and the C types."""

    def __init__(self) -> None:
        from hostjob.linux import syscalls

        self.ffi = syscalls.binding()
        try:
            self.lib = syscalls.load_library("libseccomp.so.2")
        except OSError as err:
            raise ConfigError(
                f"applying it needs libseccomp (libseccomp.so.2: {err}); install libseccomp2",
                PATH,
            ) from err
        self.lib.seccomp_init.restype = self.ffi.ULong  # scmp_filter_ctx: a pointer

    def version(self) -> str:
        ffi, lib = self.ffi, self.lib
        lib.seccomp_version.restype = ffi.ULong
        address = lib.seccomp_version()
        words = (ffi.UInt32 * 3).from_address(address)
        return f"{words[0]}.{words[1]}.{words[2]}"


def build(profile: dict[str, Any]) -> Filter:
    """Compile ``profile`` (checked by ``check``) with the host's libseccomp."""
    import posix

    from hostjob import log

    c = _Seccomp()
    ffi, lib = c.ffi, c.lib
    default_name = profile["defaultAction"]
    default = _value(default_name, profile.get("defaultErrnoRet"))
    ctx = lib.seccomp_init(ffi.UInt32(default))
    if not ctx:
        raise ConfigError(
            f"this host's libseccomp {c.version()} or its kernel lacks {default_name}",
            f"{PATH}.defaultAction",
        )
    handle = ffi.ULong(ctx)
    try:
        for i, arch in enumerate(profile.get("architectures") or []):
            token = lib.seccomp_arch_resolve_name(arch[len("SCMP_ARCH_") :].lower().encode())
            result = lib.seccomp_arch_add(handle, ffi.UInt32(token)) if token else -22
            if result < 0 and result != -17:  # EEXIST: the native one, there already
                raise ConfigError(
                    f"this host's libseccomp {c.version()} cannot filter {arch}",
                    f"{PATH}.architectures[{i}]",
                )
        for i, rule in enumerate(profile.get("syscalls") or []):
            _add_rule(c, handle, rule, default, f"{PATH}.syscalls[{i}]", log)
        nr = lib.seccomp_syscall_resolve_name(b"seccomp")
        flags = 0
        for i, flag in enumerate(profile.get("flags") or []):
            if not _kernel_has_flag(nr, FLAGS[flag]):
                raise ConfigError(f"this kernel lacks {flag}", f"{PATH}.flags[{i}]")
            flags |= FLAGS[flag]
        program = _export(c, handle, posix)
    finally:
        lib.seccomp_release(handle)
    return Filter(program, flags, nr)


def _add_rule(
    c: _Seccomp, handle: Any, rule: dict[str, Any], default: int, where: str, log: Any
) -> None:
    ffi, lib = c.ffi, c.lib
    action = _value(rule["action"], rule.get("errnoRet"))
    if action == default:
        return  # libseccomp refuses a rule that changes nothing
    conditions = [_cmp(arg) for arg in rule.get("args") or []]
    indexes = [arg["index"] for arg in rule.get("args") or []]
    # The same argument twice: one rule each (OR), as runc; else all in one rule (AND).
    groups = [[x] for x in conditions] if len(set(indexes)) < len(indexes) else [conditions]
    for name in rule["names"]:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr == -1:  # __NR_SCMP_ERROR: libseccomp does not know the name
            if rule["action"] in _PERMISSIVE:
                log.debug(f"{where}: syscall {name!r} is unknown to libseccomp: skipped")
                continue
            raise ConfigError(
                f"syscall {name!r} is unknown to this host's libseccomp {c.version()}:"
                f" it cannot be given {rule['action']}",
                f"{where}.names",
            )
        for group in groups:
            array = (ffi.UInt64 * max(3 * len(group), 3))()
            for k, words in enumerate(group):
                array[3 * k], array[3 * k + 1], array[3 * k + 2] = words
            result = lib.seccomp_rule_add_array(
                handle, ffi.UInt32(action), nr, ffi.UInt32(len(group)), ffi.byref(array)
            )
            if result < 0:
                from posix import strerror

                raise ConfigError(
                    f"libseccomp {c.version()} refuses the rule for {name!r}:"
                    f" {strerror(-result).lower()}",
                    where,
                )


def _kernel_has_flag(nr: int, flag: int) -> bool:
    """seccomp(SET_MODE_FILTER, flag, NULL): EFAULT (the missing program) once the kernel
    took the flag, EINVAL when it does not know it; nothing is installed either way."""
    import errno

    from hostjob.linux import syscalls

    result = syscalls.syscall(nr, SECCOMP_SET_MODE_FILTER, flag, 0)
    return result == 0 or int(syscalls.binding().get_errno()) != errno.EINVAL


def _cmp(arg: dict[str, Any]) -> tuple[int, int, int]:
    """struct scmp_arg_cmp {u32 arg; u32 op; u64 datum_a; u64 datum_b} as three u64."""
    import sys

    index, op = arg["index"], OPERATORS[arg["op"]]
    first = index | (op << 32) if sys.byteorder == "little" else (index << 32) | op
    return first, arg.get("value", 0), arg.get("valueTwo", 0)


def _export(c: _Seccomp, handle: Any, posix: Any) -> bytes:
    fd = posix.memfd_create("hostjob-seccomp", 1)  # MFD_CLOEXEC
    try:
        result = c.lib.seccomp_export_bpf(handle, fd)
        if result < 0:
            raise ConfigError(f"libseccomp cannot compile it: {posix.strerror(-result)}", PATH)
        from hostjob.linux import fsutil

        size = posix.lseek(fd, 0, 1)
        posix.lseek(fd, 0, 0)
        return fsutil.read_fd(fd, size)
    finally:
        posix.close(fd)


# --- kept for exec ---------------------------------------------------------------------------
# The container's compiled filter, in its state directory (root's): an exec installs exactly
# what its init runs under, without compiling again (~8 ms of CPU for containerd's default
# profile, on every probe a kubelet runs).

_MAGIC = b"hostjob-seccomp-1\n"


def save(compiled: Filter, path: str) -> None:
    from hostjob.linux import fsutil

    header = compiled.flags.to_bytes(4, "little") + compiled.syscall_nr.to_bytes(4, "little")
    fsutil.write_atomic(path, _MAGIC + header + compiled.program, mode=0o600)


def load(path: str) -> Filter | None:
    """The filter ``save`` wrote, or None when there is none (a record made before it was
    kept) or it is not whole: the caller compiles the profile then."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return None
    body = data[len(_MAGIC) + 8 :]
    if not data.startswith(_MAGIC) or not body or len(body) % 8:
        return None
    header = data[len(_MAGIC) : len(_MAGIC) + 8]
    flags = int.from_bytes(header[:4], "little")
    return Filter(body, flags, int.from_bytes(header[4:], "little"))


# --- installed by the child ----------------------------------------------------------------

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2  # prctl's
SECCOMP_SET_MODE_FILTER = 1  # seccomp(2)'s


def install(compiled: Filter) -> None:
    """Install ``compiled`` on this (single-threaded) process: ``prctl(PR_SET_SECCOMP)``,
    or ``seccomp(2)`` when there are flags. OSError as the kernel gives it."""
    import posix
    import sys

    from hostjob.linux import syscalls

    ffi = syscalls.binding()
    program = compiled.program
    count = len(program) // 8  # struct sock_filter: 8 bytes
    filters = (ffi.UInt64 * count).from_buffer_copy(program)
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}, as two longs
    length = count if sys.byteorder == "little" else count << (8 * ffi.sizeof(ffi.ULong) - 16)
    fprog = (ffi.ULong * 2)(length, ffi.addressof(filters))
    if compiled.flags:
        result = syscalls.syscall(
            compiled.syscall_nr, SECCOMP_SET_MODE_FILTER, compiled.flags, ffi.byref(fprog)
        )
    else:
        zero = ffi.ULong(0)
        result = ffi.libc.prctl(
            PR_SET_SECCOMP, ffi.ULong(SECCOMP_MODE_FILTER), ffi.byref(fprog), zero, zero
        )
    if result < 0:
        err = ffi.get_errno()
        raise OSError(err, posix.strerror(err), "seccomp")
