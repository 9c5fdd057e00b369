"""The layer extractor: a tar stream into a directory, safely, in overlayfs's format.

``tarfile`` serves only as a stream parser (mode ``r|``); every write is ours and
fd-relative. Each entry's parent is reached by walking its path component by
component from the layer's root with ``O_NOFOLLOW | O_DIRECTORY``, and the entry is
then made with ``*at`` calls relative to that parent's fd, so nothing can land
outside the layer directory:

* ``..`` components are refused; absolute names are taken relative to the layer root
  (as GNU tar does);
* a parent that is a symlink (``a -> /etc`` then ``a/passwd``) is refused, loops
  included: ``O_NOFOLLOW`` never follows one;
* a hardlink's target is looked up the same way, inside the layer, and linked without
  following a final symlink;
* an entry that replaces an existing one unlinks it first and creates with
  ``O_EXCL | O_NOFOLLOW``: nothing writes through an earlier symlink or hardlink.

Docker/OCI whiteouts become overlayfs ones: ``.wh.NAME`` a 0/0 character device,
``.wh..wh..opq`` the ``trusted.overlay.opaque=y`` xattr on its directory. Ownership,
modes (setuid/setgid/sticky too), PAX ``SCHILY.xattr.*`` xattrs, hardlinks, symlinks,
device nodes, fifos and mtimes (directories last) are kept.

The stream is gzip, zstd or plain tar, told by its magic bytes. The compressed
digest and size and the diffID (sha256 of the tar) are computed while streaming and
checked at the end; ``unpack_to`` builds the layer in a temporary sibling directory
and renames it into place only when everything matched, so a hostile or broken
layer leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile

from hostjob import faults
from hostjob.errors import DigestMismatch, HostjobError, UnpackError
from hostjob.images.content import Digester

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO, Self

    from hostjob.images.content import Readable


CHUNK = 1 << 20
WHITEOUT_PREFIX = ".wh."
WHITEOUT_META_PREFIX = ".wh..wh."
OPAQUE_MARKER = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XATTR_PAX_PREFIX = "SCHILY.xattr."
# Never taken from a layer: these steer overlayfs itself (redirects, metacopy, origin).
_REFUSED_XATTR_PREFIX = "trusted.overlay."

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FD_CACHE_MAX = 128

# "zlib", "isal" (isal_zlib, same thread) or "isal-threaded" (decompression in a
# second thread, overlapping with extraction). Chosen by bench/images/unpack.py.
GZIP_BACKEND = "isal-threaded"


class LayerStats:
    """What an unpack found: the digests, the sizes, how many entries."""

    __slots__ = ("compressed_size", "compression", "diff_id", "digest", "entries", "size")

    def __init__(
        self,
        digest: str,
        compressed_size: int,
        diff_id: str,
        size: int,
        entries: int,
        compression: str,
    ) -> None:
        self.digest = digest
        self.compressed_size = compressed_size
        self.diff_id = diff_id
        self.size = size
        self.entries = entries
        self.compression = compression

    def to_json(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}


# --- readers --------------------------------------------------------------------------


class _Prefixed:
    """``head`` (bytes already read for sniffing) followed by the rest of ``src``."""

    __slots__ = ("head", "src")

    def __init__(self, head: bytes, src: Readable) -> None:
        self.head = head
        self.src = src

    def read(self, size: int = -1, /) -> bytes:
        head = self.head
        if not head:
            return self.src.read(size)
        if 0 <= size < len(head):
            self.head = head[size:]
            return head[:size]
        self.head = b""
        if size < 0:
            return head + self.src.read()
        return head  # a short read; callers loop

    def readinto(self, buffer: Any, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return False


class _ZlibReader:
    """A gzip stream (any number of members) through a zlib-style ``decompressobj``."""

    __slots__ = ("buf", "done", "module", "obj", "src")

    def __init__(self, src: Readable, module: Any) -> None:
        self.src = src
        self.module = module
        self.obj = module.decompressobj(31)
        self.buf = bytearray()
        self.done = False

    def read(self, size: int = -1, /) -> bytes:
        if size < 0:
            size = 1 << 62
        buf = self.buf
        while len(buf) < size and not self.done:
            self._fill(size - len(buf))
        out = bytes(buf[:size])
        del buf[:size]
        return out

    def _fill(self, want: int) -> None:
        obj = self.obj
        if obj.unconsumed_tail:
            data = obj.unconsumed_tail
        else:
            data = self.src.read(CHUNK)
            if not data:
                if not obj.eof:
                    raise UnpackError("gzip stream is truncated")
                self.done = True
                return
        self.buf += obj.decompress(data, max(want, CHUNK))
        if obj.eof:
            rest = obj.unused_data
            if not rest:
                rest = self.src.read(CHUNK)
            if not rest:
                self.done = True
                return
            if rest[:2] != GZIP_MAGIC:
                if rest.strip(b"\0") or self.src.read(CHUNK).strip(b"\0"):
                    raise UnpackError("trailing garbage after the gzip stream")
                self.done = True
                return
            self.obj = self.module.decompressobj(31)
            self.buf += self.obj.decompress(rest, max(want, CHUNK))


def _gzip_reader(src: _Prefixed, backend: str) -> Readable:
    if backend.startswith("isal"):
        try:
            if backend == "isal-threaded":
                from isal import igzip_threaded

                return igzip_threaded.open(src, "rb", threads=1)  # type: ignore[no-untyped-call,no-any-return]
            from isal import isal_zlib

            return _ZlibReader(src, isal_zlib)
        except ImportError:
            pass
    import zlib

    return _ZlibReader(src, zlib)


def open_decompressed(src: Readable, backend: str | None = None) -> tuple[Readable, str]:
    """``(reader of the tar stream, compression)``, sniffing gzip/zstd/plain by magic."""
    head = b""
    while len(head) < 4:
        more = src.read(4 - len(head))
        if not more:
            break
        head += more
    prefixed = _Prefixed(head, src)
    if head.startswith(GZIP_MAGIC):
        return _gzip_reader(prefixed, backend or GZIP_BACKEND), "gzip"
    if head == ZSTD_MAGIC:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(
            prefixed,  # type: ignore[arg-type]
            read_across_frames=True,
        )
        return reader, "zstd"
    if head[:3] == b"BZh" or head[:4] == b"\xfd7zX":
        raise UnpackError("bzip2/xz layers are not supported (only gzip, zstd and plain tar)")
    return prefixed, "none"


# --- the tar side ---------------------------------------------------------------------


class _Info(tarfile.TarInfo):
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


class _Extractor:
    __slots__ = ("deferred_dirs", "entries", "fds", "is_root", "owner", "root_fd", "umask")

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
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
        """An fd of the directory ``parts`` inside the root, never through a symlink."""
        if not parts:
            return self.root_fd
        fd = self.fds.get(parts)
        if fd is not None:
            return fd
        parent = self.dir_fd(parts[:-1], create)
        name = parts[-1]
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(name, 0o755, dir_fd=parent)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                what = "a symlink" if _is_symlink(parent, name) else "not a directory"
                raise UnpackError(f"path {'/'.join(parts)!r} is {what}") from err
            raise
        self.fds[parts] = fd
        return fd

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
            from hostjob import fsutil

            self.forget(parts)
            fsutil.remove_entry(parent_fd, name)
        else:
            os.unlink(name, dir_fd=parent_fd)

    # entries ----------------------------------------------------------------------

    def extract(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.entries += 1
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


# --- entry points ---------------------------------------------------------------------


def extract(
    src: Readable,
    root: str,
    *,
    digest: str | None = None,
    size: int | None = None,
    diff_id: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
    backend: str | None = None,
) -> LayerStats:
    """Extract the layer blob read from ``src`` into the existing empty dir ``root``.

    ``digest``/``size`` are the blob's (compressed) descriptor, ``diff_id`` the
    uncompressed digest from the image config; each given one is verified. On any
    failure ``root`` may hold a partial tree: callers use ``unpack_to``.
    """
    algorithm = digest.partition(":")[0] if digest else "sha256"
    raw = Digester(src, algorithm, limit=size, on_bytes=on_bytes, what="layer blob")
    tar_stream, compression = open_decompressed(raw, backend)
    diff_algorithm = diff_id.partition(":")[0] if diff_id else "sha256"
    plain = Digester(tar_stream, diff_algorithm, what="layer tar")
    root_fd = os.open(root, _DIR_FLAGS)
    extractor = _Extractor(root_fd)
    try:
        tf = tarfile.open(fileobj=plain, mode="r|", tarinfo=_Info)  # type: ignore[call-overload]  # noqa: SIM115
        for member in tf:
            try:
                extractor.extract(tf, member)
            except UnpackError as err:
                message = str(err)
                if not message.startswith(("entry ", "hardlink ")):
                    message = f"entry {member.name!r}: {message}"
                raise UnpackError(message) from err
            except OSError as err:
                raise UnpackError(f"entry {member.name!r}: {err.strerror or err}") from err
            faults.point("unpack:mid-layer")  # some of the layer's entries are written
        end = getattr(tf, "hostjob_end", None)
        if end != "eof":
            raise UnpackError(f"tar stream is truncated or corrupt ({end or 'no end marker'})")
        extractor.finish_dirs()
        plain.drain()
        raw.drain()
    except HostjobError:
        raise
    except tarfile.TarError as err:
        raise UnpackError(f"broken tar stream: {err}") from err
    except EOFError as err:
        raise UnpackError(f"tar stream is truncated: {err or 'unexpected end'}") from err
    except OSError as err:
        if err.errno is None:  # gzip.BadGzipFile and friends: a decompressor's complaint
            raise UnpackError(f"corrupt {compression} stream: {err}") from err
        raise UnpackError(f"cannot unpack: {err}") from err
    except Exception as err:  # decompressor errors: zlib.error, ZstdError, isal errors
        raise UnpackError(f"cannot unpack {compression} layer: {err}") from err
    finally:
        extractor.close()
        os.close(root_fd)
        close = getattr(tar_stream, "close", None)
        if close is not None and tar_stream is not raw:
            try:
                close()
            except Exception:
                pass
    if size is not None and raw.count != size:
        raise DigestMismatch(f"layer blob is {raw.count} bytes, its descriptor says {size}")
    if digest is not None and raw.digest() != digest:
        raise DigestMismatch(f"layer blob digest is {raw.digest()}, expected {digest}")
    if diff_id is not None and plain.digest() != diff_id:
        raise DigestMismatch(f"layer diffID is {plain.digest()}, expected {diff_id}")
    return LayerStats(
        digest=raw.digest(),
        compressed_size=raw.count,
        diff_id=plain.digest(),
        size=plain.count,
        entries=extractor.entries,
        compression=compression,
    )


def unpack_to(
    src: BinaryIO | Readable,
    dest: str,
    *,
    digest: str | None = None,
    size: int | None = None,
    diff_id: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
    backend: str | None = None,
    write_meta: Callable[[str, LayerStats], None] | None = None,
) -> LayerStats:
    """Unpack into ``dest/diff`` atomically: a temp sibling dir, renamed when verified.

    ``write_meta(tmpdir, stats)`` may add files next to ``diff`` before the rename.
    ``dest`` must not exist. Any failure removes the temp dir and raises.
    """
    import tempfile

    from hostjob import fsutil

    parent, name = os.path.split(dest.rstrip("/"))
    # Named after ``dest`` in full: the store removes a killed unpack's leftover by it.
    tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=parent)
    try:
        os.chmod(tmp, 0o700)
        diff = os.path.join(tmp, "diff")
        os.mkdir(diff, 0o755)
        stats = extract(
            src,
            diff,
            digest=digest,
            size=size,
            diff_id=diff_id,
            on_bytes=on_bytes,
            backend=backend,
        )
        if write_meta is not None:
            write_meta(tmp, stats)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except BaseException:
        fsutil.remove_tree(tmp, ignore_errors=True)
        raise
    return stats
