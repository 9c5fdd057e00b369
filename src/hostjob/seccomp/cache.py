"""Compiled seccomp profiles kept between creates, in the state root.

Docker, podman and a kubelet give almost every container the same profile (their
default one), and compiling it is most of what a profile costs a create: libseccomp
takes ~16 ms for docker's default profile of 357 syscalls over three architectures,
where the whole create of a container without one is ~30 ms. So the program libseccomp
made is kept in the state root (``<root>/.seccomp/``), and a create given the same
profile again takes it from there. runc and crun compile on every create.

What the program depends on, and so what an entry records and a hit checks:

- the profile, as the config gave it (its compact JSON): compared whole, never by hash,
  so two profiles never share a program;
- the libseccomp file that compiled it (path, inode, size, mtime): an upgrade of the
  library replaces the file, and the next create compiles again;
- this hostjob: the source file of ``hostjob.seccomp.bpf``, which turns the profile into
  libseccomp's rules (another install or version is another file);
- the kernel and machine (``uname``): the flags' check asks the kernel, and the native
  architecture is part of the program.

An entry is a cache, never the truth: anything that does not read back whole and
matching is a miss, and the profile is compiled as if there were no cache. The state
root is hostjob's (``StateStore`` refuses one others may write); the entries are read
fd-relative below it, without following a symlink, from a file this user owns that
nobody else may write. At most ``MAX_ENTRIES`` are kept: a create that adds one removes
the least recently written beyond that.
"""

from __future__ import annotations

import posix

from hostjob.boot import jsonio, paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.seccomp.bpf import Filter

MAX_ENTRIES = 32
_MAGIC = b"hostjob-seccomp-cache-1\n"
# A classic BPF program holds at most 4096 instructions of 8 bytes; the profile is part
# of the config, which is bounded where it is read.
_MAX_PROGRAM = 4096 * 8
_MAX_ENTRY = 8 << 20
_LIBRARY = "libseccomp.so"


class Compiled:
    """A profile's program (``program``), from the cache or compiled now; ``keep()`` puts
    a new one in the cache, once the create it is for has succeeded (a failed create
    leaves nothing behind, not even this)."""

    __slots__ = ("_entry", "program")

    def __init__(self, program: Filter, entry: tuple[str, str, dict[str, Any]] | None) -> None:
        self.program = program
        self._entry = entry  # (directory, name, header) when it is to be kept

    def keep(self) -> None:
        if self._entry is None:
            return
        directory, name, header = self._entry
        self._entry = None
        try:
            _save(directory, name, header, self.program)
        except OSError:
            pass  # a cache: the container runs with the program all the same


def compiled(directory: str, profile: dict[str, Any]) -> Compiled:
    """``profile`` (checked by ``seccomp.check``) compiled: the program a create with the
    same profile left in ``directory`` (made when missing, in a parent only this user may
    write), else ``seccomp.build``'s, to be kept there. ConfigError as ``seccomp.build``
    raises it."""
    from hostjob.seccomp import bpf

    text = jsonio.dumps(profile)
    name = _entry_name(text)
    found = _load(directory, name, text, bpf)
    if found is not None:
        return Compiled(found, None)
    program = bpf.build(profile)
    library = _loaded_library()
    if library is None:  # not found in this process's maps: nothing to check a hit by
        return Compiled(program, None)
    return Compiled(program, (directory, name, _header(text, bpf, library)))


def _entry_name(text: str) -> str:
    import binascii

    data = text.encode()
    return f"{binascii.crc32(data):08x}-{len(data)}.bpf"


def _identity(path: str) -> list[Any] | None:
    try:
        st = posix.stat(path)
    except OSError:
        return None
    return [path, st.st_ino, st.st_size, st.st_mtime_ns]


def _header(text: str, bpf: Any, library: str) -> dict[str, Any]:
    uname = posix.uname()
    return {
        "compiler": _identity(bpf.__file__),
        "kernel": [uname.release, uname.machine],
        "libseccomp": _identity(library),
        "profile": text,
    }


def _loaded_library() -> str | None:
    """The libseccomp file this process loaded (``seccomp.build`` did), from its maps."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read(4 << 20)
    except OSError:
        return None
    for line in maps.split(b"\n"):
        path = line.partition(b" /")[2].decode()
        if path and paths.basename(path).startswith(_LIBRARY):
            return "/" + path
    return None


def _load(directory: str, name: str, text: str, bpf: Any) -> Filter | None:
    from hostjob.linux import fsutil

    try:
        dir_fd = fsutil.open_private_dir(directory, create=False)
    except OSError:
        return None
    try:
        fd = posix.open(name, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        posix.close(dir_fd)
    try:
        if not fsutil.private(fd, _MAX_ENTRY):
            return None
        data = fsutil.read_fd(fd, _MAX_ENTRY)
    except OSError:
        return None
    finally:
        posix.close(fd)
    return _parse(data, text, bpf)


def _parse(data: bytes, text: str, bpf: Any) -> Filter | None:
    """The entry's program when everything it records still holds, else None."""
    if not data.startswith(_MAGIC):
        return None
    line, newline, rest = data[len(_MAGIC) :].partition(b"\n")
    if not newline or len(rest) < 8:
        return None
    try:
        header = jsonio.loads(line)
    except ValueError:
        return None
    if type(header) is not dict:
        return None
    library = header.get("libseccomp")
    if type(library) is not list or not library or type(library[0]) is not str:
        return None
    if header != _header(text, bpf, library[0]):
        return None
    program = rest[8:]
    if not program or len(program) % 8 or len(program) > _MAX_PROGRAM:
        return None
    flags = int.from_bytes(rest[:4], "little")
    found: Filter = bpf.Filter(program, flags, int.from_bytes(rest[4:8], "little"))
    return found


def _save(directory: str, name: str, header: dict[str, Any], program: Filter) -> None:
    from hostjob.linux import fsutil

    data = b"".join(
        (
            _MAGIC,
            jsonio.dumps(header).encode(),
            b"\n",
            program.flags.to_bytes(4, "little"),
            program.syscall_nr.to_bytes(4, "little"),
            program.program,
        )
    )
    dir_fd = fsutil.open_private_dir(directory, create=True)
    try:
        if not fsutil.private(dir_fd):
            return
        # By path, as the state records are: the state root is this user's alone.
        fsutil.write_atomic(paths.join(directory, name), data, mode=0o600)
        fsutil.trim_oldest(dir_fd, ".bpf", MAX_ENTRIES)
    finally:
        posix.close(dir_fd)
