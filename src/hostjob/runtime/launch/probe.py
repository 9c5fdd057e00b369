"""What a loader or this host can do, found by looking: the names of ELF machines (for
messages), whether a binfmt_misc handler (qemu) runs another architecture's programs,
and whether musl's loader knows ``--argv0``. Loaded only on those rare paths: a program
of this host's machine with a glibc loader never needs it.
"""

from __future__ import annotations

import posix

from hostjob.boot import paths
from hostjob.errors import StartError
from hostjob.runtime.launch.elf import CLASS32, CLASS64, LITTLE, MAGIC, MAX_STRTAB, ElfError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.elf import Elf

# e_machine -> the name a message gives (binutils' names, shortened).
MACHINES = {
    2: "SPARC",
    3: "i386",
    8: "MIPS",
    20: "PowerPC",
    21: "PowerPC64",
    22: "S/390",
    40: "ARM",
    43: "SPARC64",
    50: "IA-64",
    62: "x86-64",
    183: "AArch64",
    243: "RISC-V",
    258: "LoongArch",
}


def machine_name(found: Elf) -> str:
    """``x86-64``, ``AArch64``; with the class where one name covers two."""
    bits = "32" if found.elf_class == CLASS32 else "64"
    name = MACHINES.get(found.machine, f"machine {found.machine}")
    if found.machine in (8, 20, 2) or name.startswith("machine"):
        return f"{name} ({bits}-bit)"
    return name


def foreign_program(found: Elf, head: bytes, where: str, host_machine: int) -> None:
    """Raise StartError unless a binfmt_misc handler runs ``found`` (``head``: its first
    bytes), a program of another machine than this host's."""
    if binfmt_handles(head):
        return
    host = MACHINES.get(host_machine, posix.uname().machine)
    raise StartError(
        f"{where} is an {machine_name(found)} program and this host is {host}"
        " (no binfmt_misc handler runs it)"
    )


BINFMT = "/proc/sys/fs/binfmt_misc"


def binfmt_handles(head: bytes) -> bool:
    """Whether an enabled binfmt_misc entry's magic matches the file's first bytes."""
    try:
        names = posix.listdir(BINFMT)
        if _read_small(paths.join(BINFMT, "status")).strip() != "enabled":
            return False
    except OSError:
        return False
    for name in names:
        if name in ("register", "status"):
            continue
        try:
            text = _read_small(paths.join(BINFMT, name))
        except OSError:
            continue
        if binfmt_matches(text, head):
            return True
    return False


def binfmt_matches(text: str, head: bytes) -> bool:
    lines = text.splitlines()
    if not lines or lines[0] != "enabled":
        return False
    fields = dict(line.split(" ", 1) for line in lines[1:] if " " in line)
    try:
        offset = int(fields.get("offset", "0"))
        magic = bytes.fromhex(fields["magic"])
        mask = bytes.fromhex(fields.get("mask", "ff" * len(magic)))
    except (KeyError, ValueError):
        return False
    window = head[offset : offset + len(magic)]
    if len(window) < len(magic):
        return False
    masks = mask[: len(magic)].ljust(len(magic), b"\xff")
    return all(a & m == b & m for a, b, m in zip(window, magic, masks, strict=True))


def _read_small(path: str) -> str:
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        return posix.read(fd, 4096).decode("utf-8", "replace")
    finally:
        posix.close(fd)


def musl_argv0(loader: str) -> bool:
    """Whether musl's loader takes ``--argv0`` (added after 1.1): its option is a
    string of its read-only data."""
    try:
        fd = posix.open(loader, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return False
    try:
        found = section(fd, b".rodata")
        if found is None:
            return False
        offset, size = found
        return b"argv0\0" in posix.pread(fd, min(size, 8 << 20), offset)
    except (OSError, ElfError):
        return False
    finally:
        posix.close(fd)


def section(fd: int, name: bytes) -> tuple[int, int] | None:
    """(file offset, size) of the section ``name`` (``b".rodata"``), or None."""
    head = posix.pread(fd, 64, 0)
    if head[:4] != MAGIC or len(head) < 52:
        return None
    order = "little" if head[5] == LITTLE else "big"
    wide = head[4] == CLASS64
    if wide and len(head) < 64:
        return None
    shoff = _int(head, 40, 8, order) if wide else _int(head, 32, 4, order)
    at = 58 if wide else 46
    shentsize, shnum, shstrndx = (_int(head, at + i, 2, order) for i in (0, 2, 4))
    if shentsize < (64 if wide else 40) or not 0 < shnum <= 4096 or shstrndx >= shnum:
        return None
    table = posix.pread(fd, shentsize * shnum, shoff)
    if len(table) < shentsize * shnum:
        return None
    entries = []
    for at in range(0, shentsize * shnum, shentsize):
        if wide:  # sh_name, ..., sh_offset at 24, sh_size at 32
            where = (_int(table, at + 24, 8, order), _int(table, at + 32, 8, order))
        else:  # sh_offset at 16, sh_size at 20
            where = (_int(table, at + 16, 4, order), _int(table, at + 20, 4, order))
        entries.append((_int(table, at, 4, order), *where))
    _name, names_offset, names_size = entries[shstrndx]
    names = posix.pread(fd, min(names_size, MAX_STRTAB), names_offset)
    for name_at, offset, size in entries:
        if names[name_at : name_at + len(name) + 1] == name + b"\0":
            return offset, size
    return None


def _int(data: bytes, at: int, size: int, order: str) -> int:
    return int.from_bytes(data[at : at + size], order)  # type: ignore[arg-type]
