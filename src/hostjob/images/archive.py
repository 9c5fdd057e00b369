"""A directory as a tar layer, read fd-relative: the walk, the checked reads, the writer.

The directory may belong to another user, who may change it while root packs it:
it is walked and read fd-relative, never following a symlink, and each file read is
the one the walk saw (a swapped entry fails the pack with one line). Entries come in
sorted order with a fixed mtime, owners 0:0 and no user/group names unless
``keep_owner``; without ``keep_owner`` setuid/setgid bits and file capabilities are
cleared: with owners 0:0 they would turn a user's program into a root one. The
stdlib's zlib always does the compressing, never isal, whose output differs, so the
same input gives the same digest on any machine.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from typing import TYPE_CHECKING, BinaryIO

from hostjob.errors import InvalidArgument
from hostjob.images.content import Digester
from hostjob.images.errors import ImageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    # What the walk shows an observer of each entry packed: its path in the layer, its
    # lstat, a regular file's open descriptor (else -1), a symlink's target.
    Observer = Callable[[str, os.stat_result, int, "str | None"], None]

# xattrs worth shipping with host tools (file capabilities) and user metadata.
_KEPT_XATTR_PREFIXES = ("security.capability", "user.")
CHUNK = 1 << 20


class Entry:
    """One entry of a walk: its path in the layer, its ``lstat``, the directory that
    holds it (an fd) and, for a directory, the directory itself (an fd, checked)."""

    __slots__ = ("dir_fd", "fd", "name", "rel", "st")

    def __init__(self, rel: str, name: str, dir_fd: int, st: os.stat_result) -> None:
        self.rel = rel
        self.name = name
        self.dir_fd = dir_fd
        self.st = st
        self.fd = -1


def changed(what: str, rel: str) -> ImageError:
    return ImageError(
        f"{what}/{rel} changed while it was being packed (replaced, moved or removed):"
        " nothing was packed"
    )


def open_checked(entry: Entry, what: str, flags: int) -> int:
    """Open ``entry`` relative to its directory without following a symlink, and make
    sure it is the very file the walk saw (device, inode, type): a file swapped for
    a symlink or another file in between is an error, never read."""
    flags |= os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.name, flags, dir_fd=entry.dir_fd)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise changed(what, entry.rel) from err
    except OSError as err:
        if err.errno == errno.ELOOP:  # a symlink now
            raise changed(what, entry.rel) from err
        raise ImageError(f"cannot read {what}/{entry.rel}: {err.strerror}") from err
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)) != (
        entry.st.st_dev,
        entry.st.st_ino,
        stat.S_IFMT(entry.st.st_mode),
    ):
        os.close(fd)
        raise changed(what, entry.rel)
    return fd


def walk(dir_fd: int, what: str, prefix: str = "") -> Iterator[Entry]:
    """Every entry below the directory ``dir_fd``, depth-first, sorted by name (bytes
    order). Fd-relative, never through a path and never following a symlink: another
    user who can write the tree may swap any part of it while we walk (SECURITY.md).
    A directory's entry carries its own fd (``entry.fd``) while its children come."""
    try:
        with os.scandir(dir_fd) as it:
            names = sorted((e.name for e in it), key=os.fsencode)
    except OSError as err:
        raise ImageError(f"cannot list {what}/{prefix}: {err.strerror}") from err
    for name in names:
        rel = f"{prefix}/{name}" if prefix else name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as err:
            raise changed(what, rel) from err
        entry = Entry(rel, name, dir_fd, st)
        if not stat.S_ISDIR(st.st_mode):
            yield entry
            continue
        entry.fd = open_checked(entry, what, os.O_DIRECTORY)
        try:
            yield entry
            yield from walk(entry.fd, what, rel)
        finally:
            os.close(entry.fd)


class FileReader:
    """A checked file's bytes for ``tarfile.addfile``: exactly the size it had when
    opened, or an error if it shrinks meanwhile."""

    __slots__ = ("fd", "rel", "what")

    def __init__(self, fd: int, what: str, rel: str) -> None:
        self.fd = fd
        self.what = what
        self.rel = rel

    def read(self, size: int) -> bytes:
        chunks = []
        while size > 0:
            data = os.read(self.fd, min(size, CHUNK))
            if not data:
                raise changed(self.what, self.rel)  # shorter than its size
            chunks.append(data)
            size -= len(data)
        return b"".join(chunks)


class LayerWriter:
    """Adds walked entries to a tar as ``tarfile.gettarinfo`` would describe them
    (hardlinks, devices, symlinks), but from the checked fds of the walk.

    ``readers`` is who could read everything packed so far, as a file's group and
    other read bits (0o044: anyone): a file that only its owner may read (or one in a
    directory others cannot search) makes the layer's own file as private."""

    __slots__ = ("inodes", "keep_owner", "mtime", "observe", "readers", "tar", "what")

    def __init__(
        self,
        tar: tarfile.TarFile,
        what: str,
        mtime: int,
        keep_owner: bool,
        observe: Observer | None = None,
    ) -> None:
        self.observe = observe
        self.tar = tar
        self.what = what
        self.mtime = mtime
        self.keep_owner = keep_owner
        self.inodes: dict[tuple[int, int], str] = {}
        self.readers = 0o044

    def saw(self, mode: int) -> None:
        """Narrow ``readers`` to who could read a file of ``mode``, or search a
        directory of it (its x bits count as reading what is below)."""
        if stat.S_ISREG(mode):
            self.readers &= mode
        elif stat.S_ISDIR(mode):
            self.readers &= (mode & 0o011) << 2

    def add(self, entry: Entry) -> None:
        mode = entry.st.st_mode
        self.saw(mode)
        if stat.S_ISREG(mode):
            fd = open_checked(entry, self.what, 0)
            try:
                self._add(entry, os.fstat(fd), fd)
            finally:
                os.close(fd)
        elif stat.S_ISDIR(mode):
            self._add(entry, os.fstat(entry.fd), entry.fd)
        elif stat.S_ISSOCK(mode):
            return  # tar has no sockets
        else:
            self._add(entry, entry.st, -1)

    def _add(self, entry: Entry, st: os.stat_result, fd: int) -> None:
        import grp
        import pwd

        info = tarfile.TarInfo(entry.rel)
        mode = st.st_mode
        if stat.S_ISREG(mode):
            inode = (st.st_ino, st.st_dev)
            if st.st_nlink > 1 and inode in self.inodes and entry.rel != self.inodes[inode]:
                info.type = tarfile.LNKTYPE
                info.linkname = self.inodes[inode]
            else:
                info.type = tarfile.REGTYPE
                info.size = st.st_size
                self.inodes[inode] = entry.rel
        elif stat.S_ISDIR(mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISFIFO(mode):
            info.type = tarfile.FIFOTYPE
        elif stat.S_ISLNK(mode):
            info.type = tarfile.SYMTYPE
            try:
                info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
            except OSError as err:  # not a symlink any more
                raise changed(self.what, entry.rel) from err
        else:
            info.type = tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE
            info.devmajor = os.major(st.st_rdev)
            info.devminor = os.minor(st.st_rdev)
        info.mtime = self.mtime
        if self.keep_owner:
            info.uid, info.gid = st.st_uid, st.st_gid
            try:
                info.uname = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                pass
            try:
                info.gname = grp.getgrgid(st.st_gid).gr_name
            except KeyError:
                pass
            info.mode = mode
        else:
            # Owners become 0:0, so a setuid or setgid bit would make a user's program
            # a root one: privilege bits travel only with their owner (--keep-owner).
            info.mode = mode & ~(stat.S_ISUID | stat.S_ISGID)
        if self.observe is not None:
            regular = info.type == tarfile.REGTYPE
            self.observe(entry.rel, st, fd if regular else -1, info.linkname or None)
        pax = _xattrs(fd, self.keep_owner) if fd >= 0 else {}
        if pax:
            info.pax_headers = pax
        if info.type == tarfile.REGTYPE:
            self.tar.addfile(info, FileReader(fd, self.what, entry.rel))  # type: ignore[arg-type]
        else:
            self.tar.addfile(info)


def write_layer(
    src_dir: str,
    dest: BinaryIO,
    *,
    mtime: int = 0,
    keep_owner: bool = False,
    compresslevel: int = 6,
    observe: Observer | None = None,
) -> tuple[str, str, int, int]:
    """Write ``src_dir`` as a gzip layer to ``dest``: ``(digest, diff_id, size, mode)``,
    ``mode`` the permissions the layer's file may have: 0o644 when anyone could read
    all it holds, else as private as the most private of it (0o640, 0o600).

    Read fd-relative (``walk``): a tree another user can write may change under us,
    which fails the pack with one line but never puts a file from outside it (a
    symlink's target) in the layer. Without ``keep_owner`` setuid and setgid bits,
    and file capabilities, are cleared. ``observe`` sees each entry as it is packed
    (``hostjob.images.packcheck``)."""
    import gzip

    try:
        root = os.open(src_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise InvalidArgument(f"{src_dir}: not a directory") from err
    except OSError as err:
        raise ImageError(f"cannot read {src_dir}: {err.strerror}") from err
    what = src_dir.rstrip("/") or "/"
    try:
        compressed = Digester(dest)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=compresslevel
        ) as gz:
            plain = Digester(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
                layer = LayerWriter(tf, what, mtime, keep_owner, observe)
                layer.saw(os.fstat(root).st_mode)  # the directory packed
                for entry in walk(root, what):
                    layer.add(entry)
    finally:
        os.close(root)
    return compressed.digest(), plain.digest(), compressed.count, 0o600 | layer.readers


def _xattrs(fd: int, keep_owner: bool) -> dict[str, str]:
    """The kept xattrs of an open file or directory, as PAX headers. File capabilities
    are a privilege like a setuid bit: kept only with the owner."""
    try:
        names = os.listxattr(fd)
    except OSError:
        return {}
    out = {}
    for name in sorted(names):
        if name == "security.capability" and not keep_owner:
            continue
        if name.startswith(_KEPT_XATTR_PREFIXES):
            try:
                value = os.getxattr(fd, name)
            except OSError:
                continue  # removed meanwhile
            out[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return out
