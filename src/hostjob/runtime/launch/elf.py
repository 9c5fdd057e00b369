"""What the loader needs to know of an ELF file, read from an open file.

``read(fd)`` reads the header, the program headers and, for a dynamically linked
file, its dynamic section and the strings it names: the interpreter a program asks
for (``PT_INTERP``), the libraries it needs (``DT_NEEDED``), where it says to find
them (``DT_RUNPATH``, ``DT_RPATH``), its ``DT_SONAME``, and its class, byte order,
machine and type. The file is untrusted (an image's): every size and offset is
checked against bounds before it is used, a short file is an ``ElfError``, and
nothing is read but with ``pread`` on the caller's descriptor, in a few calls (the
headers usually come in the first read; of a large string table, the span of the
strings asked for). No import but ``posix`` and ``sys``: this runs in a container
process before its program (``hostjob.runtime.launch.loader``), on ``create``'s path.
"""

from __future__ import annotations

import posix
import sys

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

# Bounds on what an untrusted file makes us read.
FIRST_READ = 4096  # the ELF header and, nearly always, the program headers
MAX_PHNUM = 256
MAX_INTERP = 4096  # PATH_MAX
MAX_DYNAMIC = 64 * 1024
MAX_STRTAB = 1024 * 1024
WHOLE_STRTAB = 4096  # a string table this small is read whole (a loader's: its versions)
STRING_CHUNK = 4096  # else the span of the strings asked for, and this much after the last
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
        self.machine = machine  # e_machine (hostjob.runtime.launch.probe.MACHINES)
        self.interpreter: str | None = None  # PT_INTERP: None for a static program
        self.needed: list[str] = []  # DT_NEEDED, in order
        self.runpath: str | None = None  # DT_RUNPATH, as written ($ORIGIN unexpanded)
        self.rpath: str | None = None  # DT_RPATH
        self.soname: str | None = None
        # The dynamic string table when it is small enough to be read whole (else b""):
        # a loader's version names are among its strings (hostjob.runtime.launch.loader).
        self.strings = b""

    @property
    def dynamic(self) -> bool:
        """Whether a loader runs it: a program with an interpreter."""
        return self.interpreter is not None

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
    order = "little" if byte_order == LITTLE else "big"
    wide = elf_class == CLASS64
    if wide and len(head) < 64:
        raise ElfError("truncated ELF header")
    elf = Elf(elf_class, byte_order, _int(head, 16, 2, order), _int(head, 18, 2, order))
    phoff = _int(head, 32, 8, order) if wide else _int(head, 28, 4, order)
    at = 54 if wide else 42
    phentsize, phnum = _int(head, at, 2, order), _int(head, at + 2, 2, order)
    if phnum == 0:
        return elf
    entry_size = 56 if wide else 32
    if phentsize < entry_size or phnum > MAX_PHNUM:
        raise ElfError(f"implausible program headers ({phnum} of {phentsize} bytes)")
    size = phentsize * phnum
    table = head[phoff : phoff + size] if phoff + size <= len(head) else _pread(fd, size, phoff)
    if len(table) < size:
        raise ElfError("truncated program headers")
    loads: list[tuple[int, int, int]] = []  # (vaddr, file offset, file size)
    dynamic: tuple[int, int] | None = None
    width = 8 if wide else 4
    if phentsize % width:
        raise ElfError(f"program headers of {phentsize} bytes")
    words, stride = _words(table, width, order), phentsize // width
    shift = 32 if wide and order == "big" else 0  # in a 64-bit file, p_flags shares the word
    for at in range(0, len(words), stride):
        p_type = (words[at] >> shift) & 0xFFFFFFFF
        if p_type > PT_INTERP:  # PT_NOTE, PT_PHDR, PT_GNU_*: nothing the look-up reads
            continue
        offset, vaddr, filesz = words[at + 1], words[at + 2], words[at + 4]
        if p_type == PT_INTERP:
            elf.interpreter = _interpreter(fd, head, offset, filesz)
        elif p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is not None:
        _read_dynamic(fd, elf, dynamic, loads, order, wide)
    return elf


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
    order: str,
    wide: bool,
) -> None:
    offset, size = where
    raw = _pread(fd, min(size, MAX_DYNAMIC), offset)
    width = 8 if wide else 4
    words = _words(raw[: len(raw) - len(raw) % (2 * width)], width, order)
    strtab = strsz = None
    needed: list[int] = []
    names: dict[int, int] = {}  # tag -> string offset, for SONAME, RPATH, RUNPATH
    for tag, value in zip(words[0::2], words[1::2], strict=True):
        if tag > DT_RUNPATH:  # most entries: none the loader's look-up asks for
            continue
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
    size = min(strsz, MAX_STRTAB)
    wanted = [*needed, *names.values()]
    if any(at >= size for at in wanted):
        raise ElfError(f"a string past the string table's {size} bytes")
    if size <= WHOLE_STRTAB:
        table, base = _pread(fd, size, file_offset), 0
        elf.strings = table
    else:  # the span of the strings asked for, at once (they usually lie together)
        base = min(wanted)
        span = min(max(wanted) + STRING_CHUNK, size) - base
        table = _pread(fd, min(span, MAX_STRTAB), file_offset + base)
    elf.needed = [_string(table, at - base) for at in needed]
    if DT_SONAME in names:
        elf.soname = _string(table, names[DT_SONAME] - base)
    if DT_RPATH in names:
        elf.rpath = _string(table, names[DT_RPATH] - base)
    if DT_RUNPATH in names:
        elf.runpath = _string(table, names[DT_RUNPATH] - base)


def _string(table: bytes, at: int) -> str:
    stop = table.find(b"\0", at)
    if stop < 0:
        raise ElfError("an unterminated string in the string table")
    return _text(table[at:stop])


def _file_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int | None:
    """The file offset of the address ``vaddr`` (a dynamic entry's: an address once
    loaded), through the PT_LOAD segment that maps it."""
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return offset + (vaddr - start)
    return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _words(data: bytes, width: int, order: str) -> list[int]:
    """``data`` as unsigned integers of ``width`` bytes: by memoryview's cast in this
    machine's byte order (C speed), one by one in the other."""
    if order == sys.byteorder:
        return memoryview(data).cast("Q" if width == 8 else "I").tolist()
    return [_int(data, at, width, order) for at in range(0, len(data) - width + 1, width)]


def _int(data: bytes, at: int, size: int, order: str) -> int:
    return int.from_bytes(data[at : at + size], order)  # type: ignore[arg-type]


def _pread(fd: int, size: int, offset: int) -> bytes:
    if offset < 0 or offset > 1 << 62:
        raise ElfError(f"an offset out of the file ({offset})")
    return posix.pread(fd, size, offset)
