"""hostjob.seccomp.cache: a profile compiled once is taken from the cache by the next create
with the same profile; anything that does not read back whole and matching -- another
profile, libseccomp, hostjob or kernel, a damaged or foreign file -- is compiled again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hostjob.seccomp import bpf
from hostjob.seccomp import cache as seccomp_cache

ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
fresh = bpf.build  # a compile the counter below does not count


def profile(errno_ret: int = 30, *names: str) -> dict[str, Any]:
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ARCHES,
        "syscalls": [
            {
                "names": list(names or ("mkdir", "mkdirat")),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno_ret,
            }
        ],
    }


class Compiles:
    """seccomp.build, counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = bpf.build

        def counted(document: dict[str, Any]) -> bpf.Filter:
            self.count += 1
            return real(document)

        monkeypatch.setattr(bpf, "build", counted)


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Compiles:
    return Compiles(monkeypatch)


def compiled(cache: Path, document: dict[str, Any]) -> bpf.Filter:
    """What a create that succeeds does: the program, kept."""
    found = seccomp_cache.compiled(str(cache), document)
    found.keep()
    return found.program


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.bpf"))


def one_entry(tmp_path: Path) -> tuple[Path, Path]:
    """A cache holding the entry of ``profile()``: the cache, the entry."""
    cache = tmp_path / ".seccomp"
    compiled(cache, profile())
    [entry] = entries(cache)
    return cache, entry


def test_the_second_create_takes_the_kept_program(tmp_path: Path, compiles: Compiles) -> None:
    cache = tmp_path / ".seccomp"
    first = compiled(cache, profile())
    again = compiled(cache, profile())
    assert compiles.count == 1
    assert (again.program, again.flags, again.syscall_nr) == (
        first.program,
        first.flags,
        first.syscall_nr,
    )
    assert again.program == fresh(profile()).program  # what a compile gives
    assert cache.stat().st_mode & 0o777 == 0o700
    [entry] = entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_program_is_kept_only_once_its_create_succeeded(tmp_path: Path) -> None:
    cache = tmp_path / ".seccomp"
    found = seccomp_cache.compiled(str(cache), profile())  # a create that then fails
    assert found.program.program and not cache.exists()
    found.keep()
    assert len(entries(cache)) == 1
    hit = seccomp_cache.compiled(str(cache), profile())
    before = entries(cache)[0].stat().st_mtime_ns
    hit.keep()  # a program from the cache is not written again
    assert entries(cache)[0].stat().st_mtime_ns == before


def test_another_profile_is_another_entry(tmp_path: Path, compiles: Compiles) -> None:
    cache = tmp_path / ".seccomp"
    a = compiled(cache, profile(30))
    b = compiled(cache, profile(28))
    assert a.program != b.program
    assert compiles.count == 2 and len(entries(cache)) == 2
    assert compiled(cache, profile(28)).program == b.program
    assert compiles.count == 2


def test_an_entry_for_another_profile_under_the_same_name_is_not_used(
    tmp_path: Path, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is a checksum; the profile itself is compared whole."""
    cache = tmp_path / ".seccomp"
    monkeypatch.setattr(seccomp_cache, "_entry_name", lambda text: "same.bpf")
    a = compiled(cache, profile(30))
    b = compiled(cache, profile(28))
    assert compiles.count == 2 and a.program != b.program
    assert compiled(cache, profile(28)).program == b.program


def rewrite_header(entry: Path, change: Any) -> None:
    from hostjob.boot import jsonio

    data = entry.read_bytes()
    magic, rest = data.split(b"\n", 1)
    line, program = rest.split(b"\n", 1)
    header = jsonio.loads(line)
    change(header)
    entry.write_bytes(magic + b"\n" + jsonio.dumps(header).encode() + b"\n" + program)


@pytest.mark.parametrize(
    "change",
    [
        lambda h: h["libseccomp"].__setitem__(1, h["libseccomp"][1] + 1),  # upgraded: new inode
        lambda h: h["libseccomp"].__setitem__(0, "/nonexistent/libseccomp.so.2"),
        lambda h: h["compiler"].__setitem__(3, 0),  # another hostjob's seccomp.py
        lambda h: h["kernel"].__setitem__(0, "5.15.0"),  # booted another kernel
        lambda h: h.__setitem__("profile", h["profile"].replace("30", "31")),
    ],
    ids=["libseccomp-replaced", "libseccomp-gone", "compiler", "kernel", "profile"],
)
def test_an_entry_made_under_other_conditions_is_compiled_again(
    tmp_path: Path, compiles: Compiles, change: Any
) -> None:
    cache, entry = one_entry(tmp_path)
    rewrite_header(entry, change)
    got = compiled(cache, profile())
    assert compiles.count == 2
    assert got.program == fresh(profile()).program
    compiled(cache, profile())  # and the entry is whole again
    assert compiles.count == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: b"",
        lambda d: d[:40],
        lambda d: b"hostjob-seccomp-cache-0\n" + d.split(b"\n", 1)[1],
        lambda d: d.replace(b'"compiler"', b'"compiler', 1),  # the header is no JSON
        lambda d: d[:-3],  # the program is cut mid-instruction
        lambda d: d.split(b"\n", 2)[0] + b"\n" + d.split(b"\n", 2)[1] + b"\n" + b"\0" * 8,
        lambda d: d + b"\0" * (8 * 4097),  # longer than a program can be
    ],
    ids=["empty", "short", "magic", "header", "cut", "no-program", "too-long"],
)
def test_a_damaged_entry_is_compiled_again(tmp_path: Path, compiles: Compiles, damage: Any) -> None:
    cache, entry = one_entry(tmp_path)
    entry.write_bytes(damage(entry.read_bytes()))
    assert compiled(cache, profile()).program == fresh(profile()).program
    assert compiles.count == 2


def test_an_entry_others_may_write_or_a_link_is_not_used(
    tmp_path: Path, compiles: Compiles
) -> None:
    cache, entry = one_entry(tmp_path)
    entry.chmod(0o620)
    compiled(cache, profile())
    assert compiles.count == 2  # and written again, whole and 0600
    assert entry.stat().st_mode & 0o777 == 0o600
    moved = tmp_path / "elsewhere.bpf"
    entry.rename(moved)
    entry.symlink_to(moved)
    compiled(cache, profile())
    assert compiles.count == 3


def test_a_cache_directory_that_is_a_link_is_not_followed(
    tmp_path: Path, compiles: Compiles
) -> None:
    real = tmp_path / "real"
    compiled(real, profile())
    link = tmp_path / ".seccomp"
    link.symlink_to(real)
    got = compiled(link, profile())
    assert compiles.count == 2 and got.program
    assert len(entries(real)) == 1


def test_a_cache_that_cannot_be_written_still_gives_the_program(
    tmp_path: Path, compiles: Compiles
) -> None:
    cache = tmp_path / "no" / "such" / ".seccomp"
    assert compiled(cache, profile()).program
    assert not cache.exists() and compiles.count == 1


def test_at_most_max_entries_are_kept_the_newest(
    tmp_path: Path, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seccomp_cache, "MAX_ENTRIES", 3)
    cache = tmp_path / ".seccomp"
    names = ["mkdir", "rmdir", "chdir", "unlink", "rename"]
    for i, name in enumerate(names):
        compiled(cache, profile(30, name))
        for entry in entries(cache):  # mtimes a coarse clock cannot tie
            if entry.stat().st_mtime_ns > 10**18:
                os.utime(entry, ns=(i, i))
    kept = entries(cache)
    assert len(kept) == 3
    compiled(cache, profile(30, names[-1]))  # the newest: still there
    assert compiles.count == len(names)


def test_the_library_is_found_in_this_process_maps() -> None:
    fresh(profile())
    path = seccomp_cache._loaded_library()
    assert path is not None and os.path.basename(path).startswith("libseccomp.so")
    assert os.stat(path).st_size > 0
