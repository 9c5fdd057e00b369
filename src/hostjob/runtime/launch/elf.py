"""What the loader needs to know of an ELF file, read from an open file.

``read(fd)`` reads the header, the program headers and, for a dynamically linked
file, its dynamic section and the strings it names: the interpreter a program asks
for (``PT_INTERP``), the libraries it needs (``DT_NEEDED``), where it says to find
them (``DT_RUNPATH``, ``DT_RPATH``), its ``DT_SONAME``, and its class, byte order,
machine and type. The file is untrusted (an image's): every size and offset is
checked against bounds before it is used, a short file is an ``ElfError``, and
nothing is read but with ``pread`` on the caller's descriptor, in a few calls (the
headers usually come in the first read). Only ``_struct``, a built-in module: this
runs in a container process before its program (``hostjob.runtime.launch.loader``).
"""

from __future__ import annotations

import posix
from _struct import unpack_from

MAGIC = b"\x7fELF"

# e_ident
CLASS32 = 1
CLASS64 = 2
LITTLE = 1
BIG = 2

# e_type
ET_EXEC = 2
ET_DYN = 3

# p_type
PT_LOAD = 1
PT_DYNAMIC = 2
PT_INTERP = 3

# d_tag
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29

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

# Bounds on what an untrusted file makes us read.
FIRST_READ = 4096  # the ELF header and, nearly always, the program headers
MAX_PHNUM = 256
MAX_INTERP = 4096  # PATH_MAX
MAX_DYNAMIC = 64 * 1024
MAX_STRTAB = 1024 * 1024
MAX_NEEDED = 512


class ElfError(ValueError):
    """The file starts as an ELF file but is not a well-formed one."""


class Elf:
    """One ELF file: its identity and, when it is dynamically linked, what it asks of
    the loader. Strings are ``str`` (decoded as file names are: surrogateescape)."""

    __slots__ = (
        "byte_order",
        "elf_class",
        "interpreter",
        "machine",
        "needed",
        "rpath",
        "runpath",
        "soname",
        "strings",
        "type",
    )

    def __init__(self, elf_class: int, byte_order: int, elf_type: int, machine: int) -> None:
        self.elf_class = elf_class  # CLASS32 or CLASS64
        self.byte_order = byte_order  # LITTLE or BIG
        self.type = elf_type  # ET_EXEC, ET_DYN, ...
        self.machine = machine  # e_machine (MACHINES)
        self.interpreter: str | None = None  # PT_INTERP: None for a static program
        self.needed: list[str] = []  # DT_NEEDED, in order
        self.runpath: str | None = None  # DT_RUNPATH, as written ($ORIGIN unexpanded)
        self.rpath: str | None = None  # DT_RPATH
        self.soname: str | None = None
        # The dynamic string table as read (b"" when the file has none): a loader's
        # version names are among its strings (``hostjob.runtime.launch.loader``).
        self.strings = b""

    @property
    def dynamic(self) -> bool:
        """Whether a loader runs it: a program with an interpreter."""
        return self.interpreter is not None

    @property
    def machine_name(self) -> str:
        bits = "32" if self.elf_class == CLASS32 else "64"
        name = MACHINES.get(self.machine, f"machine {self.machine}")
        if self.machine in (8, 20, 2) or name.startswith("machine"):
            return f"{name} ({bits}-bit)"
        return name

    def same_abi(self, other: Elf) -> bool:
        """Whether a loader of ``other``'s kind could load this file into one process."""
        return (self.elf_class, self.byte_order, self.machine) == (
            other.elf_class,
            other.byte_order,
            other.machine,
        )


def read(fd: int) -> Elf | None:
    """The ELF file open at ``fd``, or None if it is not one (no ELF magic)."""
    head = _pread(fd, FIRST_READ, 0)
    if head[:4] != MAGIC:
        return None
    return parse(fd, head)


def parse(fd: int, head: bytes) -> Elf:
    """The ELF file open at ``fd`` whose first bytes (``FIRST_READ`` of them, or all
    if it is shorter) are ``head``, which starts with ``MAGIC``."""
    if len(head) < 52:
        raise ElfError("truncated ELF header")
    elf_class, byte_order = head[4], head[5]
    if elf_class not in (CLASS32, CLASS64) or byte_order not in (LITTLE, BIG):
        raise ElfError(f"unknown ELF class {elf_class} or byte order {byte_order}")
    end = "<" if byte_order == LITTLE else ">"
    wide = elf_class == CLASS64
    if wide:
        if len(head) < 64:
            raise ElfError("truncated ELF header")
        elf_type, machine = unpack_from(end + "HH", head, 16)
        (phoff,) = unpack_from(end + "Q", head, 32)
        phentsize, phnum = unpack_from(end + "HH", head, 54)
        entry_size, layout = 56, end + "II QQ 8x Q"
    else:
        elf_type, machine = unpack_from(end + "HH", head, 16)
        (phoff,) = unpack_from(end + "I", head, 28)
        phentsize, phnum = unpack_from(end + "HH", head, 42)
        entry_size, layout = 32, end + "I I I 4x I I"
    elf = Elf(elf_class, byte_order, elf_type, machine)
    if phnum == 0:
        return elf
    if phentsize < entry_size or phnum > MAX_PHNUM:
        raise ElfError(f"implausible program headers ({phnum} of {phentsize} bytes)")
    size = phentsize * phnum
    table = head[phoff : phoff + size] if phoff + size <= len(head) else _pread(fd, size, phoff)
    if len(table) < size:
        raise ElfError("truncated program headers")
    loads: list[tuple[int, int, int]] = []  # (vaddr, file offset, file size)
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        at = index * phentsize
        if wide:
            p_type, _flags, offset, vaddr, filesz = unpack_from(layout, table, at)
        else:
            p_type, offset, vaddr, filesz, _memsz = unpack_from(layout, table, at)
        if p_type == PT_INTERP:
            elf.interpreter = _interpreter(fd, head, offset, filesz)
        elif p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is not None:
        _read_dynamic(fd, elf, dynamic, loads, end, wide)
    return elf


def section(fd: int, name: bytes) -> tuple[int, int] | None:
    """(file offset, size) of the section ``name`` (``b".rodata"``), or None."""
    head = _pread(fd, 64, 0)
    if head[:4] != MAGIC or len(head) < 52:
        return None
    end = "<" if head[5] == LITTLE else ">"
    if head[4] == CLASS64:
        if len(head) < 64:
            return None
        (shoff,) = unpack_from(end + "Q", head, 40)
        shentsize, shnum, shstrndx = unpack_from(end + "HHH", head, 58)
        layout, entry_size = end + "I4x8x8xQQ", 64
    else:
        (shoff,) = unpack_from(end + "I", head, 32)
        shentsize, shnum, shstrndx = unpack_from(end + "HHH", head, 46)
        layout, entry_size = end + "I4x4x4xII", 40
    if shentsize < entry_size or not 0 < shnum <= 4096 or shstrndx >= shnum:
        return None
    table = _pread(fd, shentsize * shnum, shoff)
    if len(table) < shentsize * shnum:
        return None
    entries = [unpack_from(layout, table, i * shentsize) for i in range(shnum)]
    _name, names_offset, names_size = entries[shstrndx]
    names = _pread(fd, min(names_size, MAX_STRTAB), names_offset)
    for name_at, offset, size in entries:
        if names[name_at : name_at + len(name) + 1] == name + b"\0":
            return offset, size
    return None


def _interpreter(fd: int, head: bytes, offset: int, size: int) -> str:
    if size <= 1 or size > MAX_INTERP:
        raise ElfError(f"implausible PT_INTERP of {size} bytes")
    raw = head[offset : offset + size] if offset + size <= len(head) else _pread(fd, size, offset)
    if len(raw) < size:
        raise ElfError("truncated PT_INTERP")
    return _text(raw.split(b"\0", 1)[0])


def _read_dynamic(
    fd: int,
    elf: Elf,
    where: tuple[int, int],
    loads: list[tuple[int, int, int]],
    end: str,
    wide: bool,
) -> None:
    offset, size = where
    size = min(size, MAX_DYNAMIC)
    raw = _pread(fd, size, offset)
    step, layout = (16, end + "qQ") if wide else (8, end + "iI")
    strtab = strsz = None
    needed: list[int] = []
    names: dict[int, int] = {}  # tag -> string offset, for SONAME, RPATH, RUNPATH
    for at in range(0, len(raw) - step + 1, step):
        tag, value = unpack_from(layout, raw, at)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            if len(needed) >= MAX_NEEDED:
                raise ElfError(f"more than {MAX_NEEDED} needed libraries")
            needed.append(value)
        elif tag == DT_STRTAB:
            strtab = value
        elif tag == DT_STRSZ:
            strsz = value
        elif tag in (DT_SONAME, DT_RPATH, DT_RUNPATH):
            names[tag] = value
    if not needed and not names:
        return
    if strtab is None or strsz is None:
        raise ElfError("a dynamic section without its string table")
    file_offset = _file_offset(strtab, loads)
    if file_offset is None:
        raise ElfError("the dynamic string table lies in no loaded segment")
    strings = _pread(fd, min(strsz, MAX_STRTAB), file_offset)
    elf.strings = strings
    elf.needed = [_string(strings, at) for at in needed]
    if DT_SONAME in names:
        elf.soname = _string(strings, names[DT_SONAME])
    if DT_RPATH in names:
        elf.rpath = _string(strings, names[DT_RPATH])
    if DT_RUNPATH in names:
        elf.runpath = _string(strings, names[DT_RUNPATH])


def _file_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int | None:
    """The file offset of the address ``vaddr`` (a dynamic entry's: an address once
    loaded), through the PT_LOAD segment that maps it."""
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return offset + (vaddr - start)
    return None


def _string(table: bytes, at: int) -> str:
    if at >= len(table):
        raise ElfError(f"a string at {at}, past the string table's {len(table)} bytes")
    stop = table.find(b"\0", at)
    if stop < 0:
        raise ElfError("an unterminated string in the string table")
    return _text(table[at:stop])


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _pread(fd: int, size: int, offset: int) -> bytes:
    if offset < 0 or offset > 1 << 62:
        raise ElfError(f"an offset out of the file ({offset})")
    return posix.pread(fd, size, offset)
