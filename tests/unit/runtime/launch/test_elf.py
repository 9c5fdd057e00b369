"""The ELF reader on files the tests make (``tests.elfmaker``): class, byte order,
machine, type, interpreter, needed libraries, RUNPATH/RPATH, SONAME; and what it does
with files that are not ELF, or are broken ELF files an image may hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.runtime.launch import elf, probe
from tests.elfmaker import EM_386, EM_AARCH64, EM_RISCV, EM_X86_64, ET_EXEC, make_elf


def read_bytes(tmp_path: Path, data: bytes) -> elf.Elf | None:
    path = tmp_path / "file"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        return elf.read(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_a_dynamic_program_in_every_class_and_byte_order(
    tmp_path: Path, wide: bool, little: bool
) -> None:
    found = read_bytes(
        tmp_path,
        make_elf(
            interpreter="/lib/ld-linux-aarch64.so.1",
            needed=("libjq.so.1", "libc.so.6"),
            runpath="$ORIGIN/../lib:/opt/lib",
            soname="libself.so.2",
            machine=EM_AARCH64,
            wide=wide,
            little=little,
            elf_type=ET_EXEC,
        ),
    )
    assert found is not None
    assert found.elf_class == (elf.CLASS64 if wide else elf.CLASS32)
    assert found.byte_order == (elf.LITTLE if little else elf.BIG)
    assert found.machine == EM_AARCH64
    assert found.type == elf.ET_EXEC
    assert found.interpreter == "/lib/ld-linux-aarch64.so.1"
    assert found.dynamic
    assert found.needed == ["libjq.so.1", "libc.so.6"]
    assert found.runpath == "$ORIGIN/../lib:/opt/lib"
    assert found.rpath is None
    assert found.soname == "libself.so.2"


def test_a_static_program_has_no_interpreter(tmp_path: Path) -> None:
    found = read_bytes(tmp_path, make_elf(elf_type=ET_EXEC))
    assert found is not None
    assert found.interpreter is None and not found.dynamic
    assert found.needed == [] and found.strings == b""


def test_rpath_and_the_loaders_strings(tmp_path: Path) -> None:
    found = read_bytes(
        tmp_path,
        make_elf(needed=("libc.so.6",), rpath="/usr/lib/app", strings=("GLIBC_2.35",)),
    )
    assert found is not None
    assert found.rpath == "/usr/lib/app" and found.runpath is None
    assert b"GLIBC_2.35\0" in found.strings


def test_not_elf_is_none(tmp_path: Path) -> None:
    assert read_bytes(tmp_path, b"#!/bin/sh\necho hi\n") is None
    assert read_bytes(tmp_path, b"") is None


@pytest.mark.parametrize(
    ("machine", "wide", "name"),
    [
        (EM_X86_64, True, "x86-64"),
        (EM_AARCH64, True, "AArch64"),
        (EM_386, False, "i386"),
        (EM_RISCV, True, "RISC-V"),
        (4242, True, "machine 4242 (64-bit)"),
    ],
)
def test_machine_names(tmp_path: Path, machine: int, wide: bool, name: str) -> None:
    found = read_bytes(tmp_path, make_elf(machine=machine, wide=wide))
    assert found is not None and probe.machine_name(found) == name


def test_same_abi(tmp_path: Path) -> None:
    x86 = read_bytes(tmp_path, make_elf())
    arm = read_bytes(tmp_path, make_elf(machine=EM_AARCH64))
    x86_again = read_bytes(tmp_path, make_elf(needed=("libc.so.6",)))
    assert x86 is not None and arm is not None and x86_again is not None
    assert x86.same_abi(x86_again) and not x86.same_abi(arm)


def good() -> bytes:
    return make_elf(interpreter="/lib64/ld-linux-x86-64.so.2", needed=("libc.so.6",))


@pytest.mark.parametrize(
    ("what", "damage"),
    [
        ("a truncated header", lambda d: d[:40]),
        ("an unknown class", lambda d: d[:4] + b"\x07" + d[5:]),
        ("program headers past the end", lambda d: d[:32] + (10**9).to_bytes(8, "little") + d[40:]),
        (
            "implausibly many program headers",
            lambda d: d[:56] + (9999).to_bytes(2, "little") + d[58:],
        ),
        ("truncated at the interpreter", lambda d: d[: 64 + 56 * 3 + 4]),
    ],
)
def test_broken_files_are_elf_errors(tmp_path: Path, what: str, damage: object) -> None:
    data = damage(good())  # type: ignore[operator]
    with pytest.raises(elf.ElfError):
        read_bytes(tmp_path, data)


def test_a_string_offset_past_the_table_is_an_elf_error(tmp_path: Path) -> None:
    data = bytearray(good())
    # The DT_NEEDED entry's value: point it far past the string table.
    found = read_bytes(tmp_path, bytes(data))
    assert found is not None
    at = bytes(data).find((1).to_bytes(8, "little") + (1).to_bytes(8, "little"))
    assert at > 0
    data[at + 8 : at + 16] = (10**6).to_bytes(8, "little")
    with pytest.raises(elf.ElfError):
        read_bytes(tmp_path, bytes(data))


def test_section_finds_rodata(tmp_path: Path) -> None:
    for wide in (True, False):
        path = tmp_path / "lib"
        path.write_bytes(make_elf(rodata=b"--library-path\0argv0\0", wide=wide))
        fd = os.open(path, os.O_RDONLY)
        try:
            where = probe.section(fd, b".rodata")
            assert where is not None
            assert os.pread(fd, where[1], where[0]) == b"--library-path\0argv0\0"
            assert probe.section(fd, b".text") is None
        finally:
            os.close(fd)


def test_a_real_program_of_this_host() -> None:
    """The reader agrees with the host's own loader about /bin/sh (dynamically linked
    on Debian): an interpreter, and the C library among its needs."""
    fd = os.open("/bin/sh", os.O_RDONLY)
    try:
        found = elf.read(fd)
    finally:
        os.close(fd)
    assert found is not None and found.interpreter is not None
    assert os.path.exists(found.interpreter)
    assert any(name.startswith("libc.so") for name in found.needed)


def test_a_large_string_table_is_read_string_by_string(tmp_path: Path) -> None:
    found = read_bytes(
        tmp_path,
        make_elf(needed=("libbig.so.1", "libc.so.6"), runpath="/opt/x", strings=("x" * 9000,)),
    )
    assert found is not None
    assert found.needed == ["libbig.so.1", "libc.so.6"] and found.runpath == "/opt/x"
    assert found.strings == b""  # not read whole
