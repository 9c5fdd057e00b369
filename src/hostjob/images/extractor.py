"""The tar side of unpacking: one tar entry at a time, fd-relative, in overlayfs's format.

``tarfile`` serves only as a stream parser; every write is ours. Each entry's parent
is reached by walking its path component by component from the layer's root with
``O_NOFOLLOW | O_DIRECTORY``, and the entry is made with ``*at`` calls relative to
that parent's fd (``hostjob.images.unpack`` says what that guarantees). Whiteouts
become overlayfs ones; ownership, modes, xattrs, links, devices, fifos and mtimes
are kept, directories' last.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from typing import TYPE_CHECKING, Any, Self

from hostjob.images.errors import UnpackError

if TYPE_CHECKING:
    from hostjob.images.limits import Budget


CHUNK = 1 << 20
WHITEOUT_PREFIX = ".wh."
WHITEOUT_META_PREFIX = ".wh..wh."
OPAQUE_MARKER = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
XATTR_PAX_PREFIX = "SCHILY.xattr."
# Never taken from a layer: these steer overlayfs itself (redirects, metacopy, origin).
_REFUSED_XATTR_PREFIX = "trusted.overlay."

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FD_CACHE_MAX = 128
_CACHED_LEVELS = 16  # directories of an entry's path kept open for the next entries


class HeaderInfo(tarfile.TarInfo):
    """Records on the TarFile how header parsing ended, which ``tarfile`` hides."""

    @classmethod
    def fromtarfile(cls, tf: tarfile.TarFile) -> Self:
        try:
            return super().fromtarfile(tf)
        except tarfile.EOFHeaderError:  # type: ignore[attr-defined]
            tf.hostjob_end = "eof"  # type: ignore[attr-defined]
            raise
        except tarfile.HeaderError as err:
            tf.hostjob_end = str(err) or type(err).__name__  # type: ignore[attr-defined]
            raise


def _split(name: str) -> tuple[str, ...]:
    parts = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise UnpackError(f"entry {name!r} has a '..' component")
        parts.append(part)
    return tuple(parts)


def _time_ns(value: object) -> int:
    if type(value) is int:
        return value * 1_000_000_000
    return int(float(value) * 1_000_000_000)  # type: ignore[arg-type]


class Extractor:
    """Writes a layer's entries below ``root_fd``, charging each inode and each byte of
    file data to ``budget`` before it is made or written."""

    __slots__ = (
        "budget",
        "deferred_dirs",
        "entries",
        "fds",
        "is_root",
        "owner",
        "root_fd",
        "umask",
    )

    def __init__(self, root_fd: int, budget: Budget | None = None) -> None:
        self.root_fd = root_fd
        self.budget = budget
        self.fds: dict[tuple[str, ...], int] = {}
        self.deferred_dirs: dict[tuple[str, ...], tarfile.TarInfo] = {}
        self.entries = 0
        self.is_root = os.geteuid() == 0
        # What a new file gets without fchown/fchmod: our ids (directories carry no
        # setgid bit while we extract: their modes are set last) and mode & ~umask.
        self.owner = (os.geteuid(), os.getegid())
        self.umask = _umask()

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    # directories ------------------------------------------------------------------

    def dir_fd(self, parts: tuple[str, ...], create: bool = True) -> int:
        """An fd of the directory ``parts`` inside the root, never through a symlink.

        Walked down from the deepest directory open already, without recursion (a
        layer may name a path thousands of directories deep); the last ``_CACHED_LEVELS``
        directories stay open for the entries that follow, those above are closed."""
        fd = self.fds.get(parts)
        if fd is not None or not parts:
            return self.root_fd if fd is None else fd
        depth = len(parts) - 1
        while depth and parts[:depth] not in self.fds:
            depth -= 1
        parent = self.fds[parts[:depth]] if depth else self.root_fd
        passed: list[int] = []  # open directories above the cached ones
        try:
            for level in range(depth + 1, len(parts) + 1):
                fd = self._open_dir(parent, parts[:level], create)
                if len(parts) - level < _CACHED_LEVELS:
                    self.fds[parts[:level]] = fd
                else:
                    passed.append(fd)
                parent = fd
        finally:
            for passed_fd in passed:
                os.close(passed_fd)
        return parent

    def _open_dir(self, parent: int, parts: tuple[str, ...], create: bool) -> int:
        name = parts[-1]
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            if self.budget is not None:
                self.budget.inode()  # a parent no entry of the layer made
            os.mkdir(name, 0o755, dir_fd=parent)
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                what = "a symlink" if _is_symlink(parent, name) else "not a directory"
                raise UnpackError(f"path {'/'.join(parts)!r} is {what}") from err
            raise

    def forget(self, parts: tuple[str, ...]) -> None:
        """Drop cached fds of ``parts`` and everything under it (it was removed)."""
        n = len(parts)
        for key in [k for k in self.fds if k[:n] == parts]:
            os.close(self.fds.pop(key))

    def remove(self, parent_fd: int, parts: tuple[str, ...]) -> None:
        """Remove ``parts`` (a direct child of ``parent_fd``) whatever it is, if present."""
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            from hostjob.linux import fsremove

            self.forget(parts)
            fsremove.remove_entry(parent_fd, name)
        else:
            os.unlink(name, dir_fd=parent_fd)

    # entries ----------------------------------------------------------------------

    def extract(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.entries += 1
        if self.budget is not None and not member.islnk():  # a hardlink makes no inode
            self.budget.inode()
        if len(self.fds) >= _FD_CACHE_MAX:
            # Only between entries: within one, callers hold fds from the cache.
            self.close()
        parts = _split(member.name)
        if not parts:
            if member.isdir():
                self.deferred_dirs[()] = member
                return
            raise UnpackError(f"entry {member.name!r} names the layer root but is not a directory")
        base = parts[-1]
        if base.startswith(WHITEOUT_PREFIX):
            self.whiteout(parts)
            return
        parent = self.dir_fd(parts[:-1])
        if member.isdir():
            try:
                os.mkdir(base, 0o700, dir_fd=parent)
            except FileExistsError:
                st = os.stat(base, dir_fd=parent, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(base, dir_fd=parent)
                    os.mkdir(base, 0o700, dir_fd=parent)
            self.deferred_dirs.pop(parts, None)
            self.deferred_dirs[parts] = member
            return
        # Create first; only an existing entry (rare: tars seldom repeat a name) costs
        # a removal and a second try. O_EXCL/mknod/symlink never follow a final symlink.
        if member.isreg():
            self.regular(tf, member, parent, parts)
            return
        try:
            self.create_special(member, parent, base)
        except FileExistsError:
            self.remove(parent, parts)
            self.create_special(member, parent, base)
        if not member.islnk():
            self.metadata_at(member, parent, base, symlink=member.issym())

    def create_special(self, member: tarfile.TarInfo, parent: int, base: str) -> None:
        if member.issym():
            os.symlink(member.linkname, base, dir_fd=parent)
        elif member.islnk():
            self.hardlink(member, parent, base)
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            device = os.makedev(member.devmajor, member.devminor)
            os.mknod(base, kind | 0o600, device, dir_fd=parent)
        elif member.isfifo():
            os.mkfifo(base, 0o600, dir_fd=parent)
        else:
            raise UnpackError(f"entry {member.name!r} has unsupported tar type {member.type!r}")

    def regular(
        self, tf: tarfile.TarFile, member: tarfile.TarInfo, parent: int, parts: tuple[str, ...]
    ) -> None:
        base = parts[-1]
        mode = member.mode & 0o7777
        # Created with its final permissions when the umask keeps them, saving a
        # fchmod; special bits (setuid...) always get one, after the chown.
        plain = mode & 0o7000 == 0 and mode & self.umask == 0
        create_mode = mode if plain else 0o600
        try:
            fd = os.open(base, _FILE_FLAGS, create_mode, dir_fd=parent)
        except FileExistsError:
            self.remove(parent, parts)
            fd = os.open(base, _FILE_FLAGS, create_mode, dir_fd=parent)
        try:
            remaining = member.size
            if member.sparse is not None:
                src: Any = tf.extractfile(member)
                remaining = -1
            else:
                src = tf.fileobj
            write = os.write
            while remaining:
                data = src.read(CHUNK if remaining < 0 else min(remaining, CHUNK))
                if not data:
                    if remaining < 0:
                        break
                    raise UnpackError(f"entry {member.name!r}: unexpected end of data")
                if self.budget is not None:
                    self.budget.data(len(data))
                if remaining > 0:
                    remaining -= len(data)
                view = memoryview(data)
                while view:
                    view = view[write(fd, view) :]
            if self.is_root and (member.uid, member.gid) != self.owner:
                os.fchown(fd, member.uid, member.gid)
            if not plain:
                os.fchmod(fd, mode)
            self.xattrs(member, fd)
            mtime = _time_ns(member.mtime)
            os.utime(fd, ns=(_atime_ns(member, mtime), mtime))
        finally:
            os.close(fd)

    def hardlink(self, member: tarfile.TarInfo, parent: int, base: str) -> None:
        target = _split(member.linkname)
        if not target:
            raise UnpackError(f"hardlink {member.name!r} points at the layer root")
        try:
            src_parent = self.dir_fd(target[:-1], create=False)
            os.link(
                target[-1],
                base,
                src_dir_fd=src_parent,
                dst_dir_fd=parent,
                follow_symlinks=False,
            )
        except (FileNotFoundError, UnpackError) as err:
            raise UnpackError(
                f"hardlink {member.name!r} -> {member.linkname!r}: target is not in this layer"
            ) from err
        except PermissionError as err:
            raise UnpackError(
                f"hardlink {member.name!r} -> {member.linkname!r}: target is a directory"
            ) from err

    def whiteout(self, parts: tuple[str, ...]) -> None:
        base = parts[-1]
        parent = self.dir_fd(parts[:-1])
        if base == OPAQUE_MARKER:
            os.setxattr(parent, OPAQUE_XATTR, b"y")
            return
        if base.startswith(WHITEOUT_META_PREFIX):
            return  # aufs bookkeeping (.wh..wh.plnk, .wh..wh.aufs): nothing for overlayfs
        name = base[len(WHITEOUT_PREFIX) :]
        if name in ("", ".", ".."):
            raise UnpackError(f"invalid whiteout {'/'.join(parts)!r}")
        target = (*parts[:-1], name)
        self.remove(parent, target)
        os.mknod(name, stat.S_IFCHR | 0o600, os.makedev(0, 0), dir_fd=parent)

    # metadata ---------------------------------------------------------------------

    def metadata_at(
        self, member: tarfile.TarInfo, parent: int, base: str, symlink: bool = False
    ) -> None:
        if self.is_root:
            os.chown(base, member.uid, member.gid, dir_fd=parent, follow_symlinks=False)
        if not symlink:
            os.chmod(base, member.mode & 0o7777, dir_fd=parent, follow_symlinks=False)
        if member.pax_headers:
            self.xattrs(member, f"/proc/self/fd/{parent}/{base}", lenient=True)
        mtime = _time_ns(member.mtime)
        os.utime(base, ns=(_atime_ns(member, mtime), mtime), dir_fd=parent, follow_symlinks=False)

    def xattrs(self, member: tarfile.TarInfo, target: int | str, lenient: bool = False) -> None:
        for key, value in member.pax_headers.items():
            if not key.startswith(XATTR_PAX_PREFIX):
                continue
            name = key[len(XATTR_PAX_PREFIX) :]
            if name.startswith(_REFUSED_XATTR_PREFIX):
                continue
            raw = value.encode("utf-8", "surrogateescape")
            try:
                if type(target) is int:
                    os.setxattr(target, name, raw)
                else:
                    os.setxattr(target, name, raw, follow_symlinks=False)
            except OSError as err:
                if lenient and err.errno in (errno.EPERM, errno.ENOTSUP):
                    continue
                raise UnpackError(f"entry {member.name!r}: cannot set xattr {name}: {err}") from err

    def finish_dirs(self) -> None:
        for parts, member in reversed(list(self.deferred_dirs.items())):
            try:
                fd = self.dir_fd(parts, create=False) if parts else self.root_fd
            except (OSError, UnpackError):
                continue  # replaced or removed by a later entry
            if self.is_root:
                os.fchown(fd, member.uid, member.gid)
            os.fchmod(fd, member.mode & 0o7777)
            self.xattrs(member, fd)
            mtime = _time_ns(member.mtime)
            os.utime(fd, ns=(_atime_ns(member, mtime), mtime))


def _umask() -> int:
    """The process umask, read without changing it (``/proc/self/status``, Linux 4.7+)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o777  # unknown: never trust creation modes, always fchmod


def _atime_ns(member: tarfile.TarInfo, mtime: int) -> int:
    atime = member.pax_headers.get("atime") if member.pax_headers else None
    if atime is None:
        return mtime
    try:
        return _time_ns(atime)
    except ValueError:
        return mtime


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False
