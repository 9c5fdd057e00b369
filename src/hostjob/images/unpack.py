"""Unpacking a layer: a tar stream into a directory, safely, in overlayfs's format.

``tarfile`` serves only as a stream parser (mode ``r|``); every write is ours and
fd-relative (``hostjob.images.extractor``). Each entry's parent is reached by walking
its path component by component from the layer's root with ``O_NOFOLLOW |
O_DIRECTORY``, and the entry is then made with ``*at`` calls relative to that
parent's fd, so nothing can land outside the layer directory:

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

The stream is gzip, zstd or plain tar, told by its magic bytes
(``hostjob.images.decompress``). The compressed digest and size and the diffID
(sha256 of the tar) are computed while streaming and checked at the end;
``unpack_to`` builds the layer in a temporary sibling directory and renames it into
place only when everything matched, so a hostile or broken layer leaves nothing
behind.
"""

from __future__ import annotations

import os
import tarfile
from typing import TYPE_CHECKING, Any, BinaryIO

from hostjob import faults
from hostjob.errors import HostjobError
from hostjob.images.content import Digester
from hostjob.images.decompress import open_decompressed
from hostjob.images.errors import DigestMismatch, UnpackError, UnpackLimit
from hostjob.images.extractor import DIR_FLAGS, Extractor, HeaderInfo

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.content import Readable
    from hostjob.images.limits import Budget


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
    budget: Budget | None = None,
) -> LayerStats:
    """Extract the layer blob read from ``src`` into the existing empty dir ``root``.

    ``digest``/``size`` are the blob's (compressed) descriptor, ``diff_id`` the
    uncompressed digest from the image config; each given one is verified. Every
    inode and byte of file data is charged to ``budget`` (``UnpackLimit`` past it).
    On any failure ``root`` may hold a partial tree: callers use ``unpack_to``.
    """
    algorithm = digest.partition(":")[0] if digest else "sha256"
    raw = Digester(src, algorithm, limit=size, on_bytes=on_bytes, what="layer blob")
    tar_stream, compression = open_decompressed(raw, backend)
    diff_algorithm = diff_id.partition(":")[0] if diff_id else "sha256"
    plain = Digester(tar_stream, diff_algorithm, what="layer tar")
    root_fd = os.open(root, DIR_FLAGS)
    extractor = Extractor(root_fd, budget)
    try:
        tf = tarfile.open(fileobj=plain, mode="r|", tarinfo=HeaderInfo)  # type: ignore[call-overload]  # noqa: SIM115
        for member in tf:
            try:
                extractor.extract(tf, member)
            except UnpackLimit:
                raise  # about the image, not this entry
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
    budget: Budget | None = None,
) -> LayerStats:
    """Unpack into ``dest/diff`` atomically: a temp sibling dir, renamed when verified.

    ``write_meta(tmpdir, stats)`` may add files next to ``diff`` before the rename.
    ``dest`` must not exist. Any failure removes the temp dir and raises.
    """
    import tempfile

    from hostjob.linux import fsremove

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
            budget=budget,
        )
        if write_meta is not None:
            write_meta(tmp, stats)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except BaseException:
        fsremove.remove_tree(tmp, ignore_errors=True)
        raise
    return stats
