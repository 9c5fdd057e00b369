"""Layer streams decompressed: gzip (any number of members), zstd or plain tar, told
by their magic bytes.

gzip goes through isal when it is installed (``GZIP_BACKEND``: "isal-threaded"
decompresses in a second thread, overlapping with extraction; "isal" in the same
thread; "zlib" the stdlib's), chosen by ``bench/images/unpack.py``. bzip2 and xz
layers are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostjob.images.errors import UnpackError

if TYPE_CHECKING:
    from hostjob.images.content import Readable

CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# "zlib", "isal" (isal_zlib, same thread) or "isal-threaded" (decompression in a
# second thread, overlapping with extraction). Chosen by bench/images/unpack.py.
GZIP_BACKEND = "isal-threaded"


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
