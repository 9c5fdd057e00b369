"""ELF files made by the tests: the headers a loader reads and nothing it would run.

``make_elf`` lays out an ELF header, its program headers (a ``PT_LOAD`` over the whole
file, a ``PT_INTERP`` when an interpreter is given, a ``PT_DYNAMIC`` when any dynamic
entry is), the dynamic section and its string table, in either class and byte order,
with section headers naming a ``.rodata`` when asked. The unit tests read these with
``hostjob.runtime.launch.elf`` and lay fake images out with them; no test executes one.
"""

from __future__ import annotations

import struct
from pathlib import Path

EM_X86_64 = 62
EM_386 = 3
EM_AARCH64 = 183
EM_RISCV = 243
ET_EXEC = 2
ET_DYN = 3
VADDR = 0x400000


def make_elf(
    *,
    interpreter: str | None = None,
    needed: tuple[str, ...] = (),
    runpath: str | None = None,
    rpath: str | None = None,
    soname: str | None = None,
    strings: tuple[str, ...] = (),
    machine: int = EM_X86_64,
    wide: bool = True,
    little: bool = True,
    elf_type: int = ET_DYN,
    rodata: bytes | None = None,
) -> bytes:
    """An ELF file with these dynamic properties (``strings``: more names in the
    dynamic string table, as a loader's version names are)."""
    end = "<" if little else ">"
    table = bytearray(b"\0")

    def add(text: str) -> int:
        at = len(table)
        table.extend(text.encode() + b"\0")
        return at

    entries: list[tuple[int, int]] = [(1, add(name)) for name in needed]
    for tag, value in ((14, soname), (15, rpath), (29, runpath)):
        if value is not None:
            entries.append((tag, add(value)))
    for extra in strings:
        add(extra)
    dynamic_entries = bool(entries)
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    phnum = 1 + (interpreter is not None) + dynamic_entries
    at = ehsize + phentsize * phnum
    interp_bytes = interpreter.encode() + b"\0" if interpreter is not None else b""
    interp_at = at
    at += len(interp_bytes)
    strtab_at = at
    at += len(table)
    at = (at + 7) & ~7
    dyn_at = at
    step = 16 if wide else 8
    entries += [(5, VADDR + strtab_at), (10, len(table)), (0, 0)]
    dynamic = b"".join(struct.pack(end + ("qQ" if wide else "iI"), t, v) for t, v in entries)
    at += len(dynamic) if dynamic_entries else 0
    body_end = at
    rodata_at = body_end
    sections = b""
    shoff = shnum = shstrndx = 0
    if rodata is not None:
        names = b"\0.rodata\0.shstrtab\0"
        names_at = rodata_at + len(rodata)
        shoff = (names_at + len(names) + 7) & ~7
        shentsize = 64 if wide else 40
        shnum, shstrndx = 3, 2

        def sh(name: int, offset: int, size: int) -> bytes:
            if wide:
                return struct.pack(end + "IIQQQQIIQQ", name, 1, 0, 0, offset, size, 0, 0, 1, 0)
            return struct.pack(end + "IIIIIIIIII", name, 1, 0, 0, offset, size, 0, 0, 1, 0)

        sections = sh(0, 0, 0) + sh(1, rodata_at, len(rodata)) + sh(9, names_at, len(names))
        tail = rodata + names
        tail += b"\0" * (shoff - names_at - len(names))
    else:
        tail = b""
        shentsize = 64 if wide else 40
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1]) + b"\0" * 9
    layout = "HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"  # e_entry, e_phoff, e_shoff widen
    header = ident + struct.pack(
        end + layout,
        elf_type,
        machine,
        1,
        0,
        ehsize,
        shoff,
        0,
        ehsize,
        phentsize,
        phnum,
        shentsize,
        shnum,
        shstrndx,
    )
    total = body_end + len(tail) + len(sections)

    def ph(p_type: int, offset: int, size: int) -> bytes:
        if wide:
            return struct.pack(
                end + "IIQQQQQQ", p_type, 5, offset, VADDR + offset, 0, size, size, 8
            )
        return struct.pack(end + "IIIIIIII", p_type, offset, VADDR + offset, 0, size, size, 5, 8)

    headers = ph(1, 0, total)
    if interpreter is not None:
        headers += ph(3, interp_at, len(interp_bytes))
    if dynamic_entries:
        headers += ph(2, dyn_at, len(dynamic))
    assert step and len(header) == ehsize
    data = bytearray(header + headers + interp_bytes + bytes(table))
    data.extend(b"\0" * (dyn_at - len(data)))
    if dynamic_entries:
        data.extend(dynamic)
    data.extend(tail)
    data.extend(sections)
    return bytes(data)


def write_elf(path: Path, mode: int = 0o755, **kwargs: object) -> Path:
    """``make_elf(**kwargs)`` written at ``path`` (parents made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(make_elf(**kwargs))  # type: ignore[arg-type]
    path.chmod(mode)
    return path
