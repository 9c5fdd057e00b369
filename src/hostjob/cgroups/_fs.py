"""Safe, cheap access to cgroupfs files.

Every interface file is opened relative to its cgroup directory's fd with
``O_NOFOLLOW``, so a symlink planted in a (fake or delegated) tree is never
followed out of the hierarchy, and a value is written with a single ``write(2)``
(the kernel parses one write as one value). Failures become one-line
``CgroupError`` messages naming the file and the value.

The four primitives ``mkdir``, ``rmdir``, ``read_at`` and ``write_at`` are module
attributes looked up at call time: the unit tests' fake cgroupfs replaces them to
add the kernel's side effects (interface files appearing, ``cgroup.events``
changing) on top of the real operations on a temp tree.
"""

from __future__ import annotations

import errno
import posix

from hostjob.errors import CgroupError

# "max" and the unlimited values cgroupfs prints, as runc reports them.
MAX_U64 = 2**64 - 1

_O_DIR = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
_O_READ = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC
# O_TRUNC is what runc uses too; cgroupfs ignores it, a fake tree needs it.
_O_WRITE = posix.O_WRONLY | posix.O_TRUNC | posix.O_NOFOLLOW | posix.O_CLOEXEC
# kernfs seq files hand out at most a page per read(2) and stop at a record
# boundary, so a read well short of a page is the whole file: saves the EOF read.
_SHORT_READ = 2048
_CHUNK = 65536


def mkdir(path: str) -> bool:
    """mkdir(2) the cgroup; False if it already existed. FileNotFoundError: no parent."""
    try:
        posix.mkdir(path, 0o755)
    except FileExistsError:
        return False
    return True


def rmdir(path: str) -> None:
    posix.rmdir(path)


def read_at(dirfd: int, name: str) -> bytes:
    return _read_all(posix.open(name, _O_READ, dir_fd=dirfd))


def write_at(dirfd: int, name: str, data: bytes) -> None:
    fd = posix.open(name, _O_WRITE, dir_fd=dirfd)
    try:
        posix.write(fd, data)
    finally:
        posix.close(fd)


def _reason(err: OSError) -> str:
    code = err.errno or 0
    hint = _HINTS.get(code, "")
    return posix.strerror(code) + hint if code else str(err)


_HINTS = {
    errno.EINVAL: " (the kernel rejected the value)",
    errno.ERANGE: " (value out of range)",
    errno.EBUSY: " (in use)",
    errno.ENOSPC: " (no CPUs/memory nodes or over a limit)",
    errno.EACCES: " (hostjob needs root for this)",
    errno.EPERM: " (hostjob needs root for this)",
    errno.ELOOP: " (a symlink, refused)",
}


class Dir:
    """One cgroup directory in one hierarchy; its fd is opened on first use."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def _dirfd(self) -> int:
        if self._fd < 0:
            self._fd = posix.open(self.path, _O_DIR)
        return self._fd

    def fd(self) -> int:
        try:
            return self._dirfd()
        except OSError as err:
            raise CgroupError(f"cannot open cgroup {self.path}: {_reason(err)}") from err

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            posix.close(fd)

    # A Dir dropped without close() (a manager made for one question, as
    # Container.status does) must not keep its fd: the library runs in long-lived
    # processes, where that was one fd per hierarchy per call.
    __del__ = close

    def read(self, name: str) -> str:
        try:
            return read_at(self._dirfd(), name).decode()
        except OSError as err:
            raise CgroupError(f"cannot read {self.path}/{name}: {_reason(err)}") from err

    def read_optional(self, name: str) -> str | None:
        """The file's content, or None if this kernel (or controller) lacks it."""
        try:
            return read_at(self._dirfd(), name).decode()
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ENODEV:
                return None
            raise CgroupError(f"cannot read {self.path}/{name}: {_reason(err)}") from err

    def read_int(self, name: str) -> int:
        return parse_int(self.read(name), f"{self.path}/{name}")

    def try_write(self, name: str, value: str) -> int:
        """Write ``value``; 0 on success, else the errno (for callers that react to it)."""
        try:
            write_at(self._dirfd(), name, value.encode())
        except OSError as err:
            return err.errno or errno.EIO
        return 0

    def write(self, name: str, value: str) -> None:
        code = self.try_write(name, value)
        if code:
            raise write_error(self.path, name, value, code)

    def has(self, name: str) -> bool:
        try:
            posix.stat(name, dir_fd=self._dirfd(), follow_symlinks=False)
        except OSError:
            return False
        return True


def write_error(path: str, name: str, value: str, code: int) -> CgroupError:
    return CgroupError(
        f"cannot write {value!r} to {path}/{name}: {_reason(OSError(code, posix.strerror(code)))}"
    )


def read_path(path: str) -> bytes:
    """Read a whole file by path (no dir fd kept): cgroup.procs walks, one-off reads."""
    return _read_all(posix.open(path, _O_READ))


def _read_all(fd: int) -> bytes:
    """Everything in the open file ``fd``, which it closes (cgroup files are small:
    one read usually does)."""
    try:
        data = posix.read(fd, _CHUNK)
        if len(data) < _SHORT_READ:
            return data
        chunks = [data]
        while data:
            data = posix.read(fd, _CHUNK)
            chunks.append(data)
        return b"".join(chunks)
    finally:
        posix.close(fd)


# --- parsing ---------------------------------------------------------------------------


def parse_int(text: str, what: str) -> int:
    """A cgroupfs number; ``max`` (no limit) reads as 2**64-1, as runc reports it."""
    value = text.strip()
    if value == "max":
        return MAX_U64
    try:
        return int(value)
    except ValueError as err:
        raise CgroupError(f"cannot parse {what}: {value[:40]!r} is not a number") from err


def parse_keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, cpu.stat, memory.events, cgroup.events)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            if value.strip() == "max":
                out[key] = MAX_U64
    return out


def keyed_value(text: str | None, key: str) -> int:
    if not text:
        return 0
    return parse_keyed(text).get(key, 0)


def parse_pids(data: bytes) -> list[int]:
    return [int(x) for x in data.split()]
