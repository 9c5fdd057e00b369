"""The capabilities of capability.h: their names and numbers, the masks the container
process's sets are made of, and the highest one this kernel knows. Plain Python:
checking a config's capability names binds no C (``hostjob.linux.syscalls`` sets them).
"""

from __future__ import annotations

import posix

CAP_NAMES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)
CAP_NUMBERS = {name: number for number, name in enumerate(CAP_NAMES)}


def cap_name(cap: int) -> str:
    """``CAP_KILL`` for 5; a number this table does not know (a newer kernel's) as such."""
    return CAP_NAMES[cap] if cap < len(CAP_NAMES) else f"capability {cap}"


CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


_last_cap: int | None = None


def last_cap() -> int:
    """The highest capability number this kernel knows (read once per process: the
    config's conversion and the container process both ask, the child inheriting it)."""
    global _last_cap
    if _last_cap is None:
        try:
            fd = posix.open("/proc/sys/kernel/cap_last_cap", posix.O_RDONLY | posix.O_CLOEXEC)
            try:
                _last_cap = int(posix.read(fd, 32))
            finally:
                posix.close(fd)
        except (OSError, ValueError):
            _last_cap = len(CAP_NAMES) - 1
    return _last_cap


def cap_mask(names: list[str]) -> int:
    """A bit mask of capability names; names this kernel lacks are dropped (runc warns)."""
    top = last_cap()
    mask = 0
    for name in names:
        number = CAP_NUMBERS[name]
        if number <= top:
            mask |= 1 << number
    return mask
