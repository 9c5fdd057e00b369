"""Writing a detached container's log: its output cut into CRI records (``LineSplitter``)
and appended to ``container.log``, rotated by size (``RotatingLog``). The watcher
(``hostjob.supervisor.watcher``) is the one writer; the format is ``hostjob.supervisor.crilog``'s.
"""

from __future__ import annotations

import errno
import os
import stat

from hostjob.supervisor.crilog import LOG_NAME, MAX_LINE, MIN_MAX_SIZE, dir_lock, rotated_name

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LineSplitter:
    """One stream's bytes as CRI records: whole lines ``F``, pieces of long lines ``P``."""

    __slots__ = ("limit", "pending", "stream")

    def __init__(self, stream: bytes, limit: int = MAX_LINE) -> None:
        self.stream = stream
        self.limit = limit
        self.pending = b""

    def feed(self, data: bytes, when: bytes) -> bytes:
        """The records for ``data``; what ends without a newline waits for more (a
        piece of ``limit`` bytes of it is written as a ``P`` record at once)."""
        if self.pending:
            data = self.pending + data
        lines = data.split(b"\n")
        rest = lines.pop()
        full = when + b" " + self.stream + b" F "
        out = b""
        if lines:
            if max(map(len, lines)) <= self.limit:
                out = full + (b"\n" + full).join(lines) + b"\n"
            else:
                out = b"".join(self._line(line, when, full) for line in lines)
        partial = when + b" " + self.stream + b" P "
        while len(rest) > self.limit:
            out += partial + rest[: self.limit] + b"\n"
            rest = rest[self.limit :]
        self.pending = rest
        return out

    def _line(self, line: bytes, when: bytes, full: bytes) -> bytes:
        """A line as records: pieces of ``limit`` bytes, ``P`` but the last (``F``)."""
        if len(line) <= self.limit:
            return full + line + b"\n"
        partial = when + b" " + self.stream + b" P "
        last = (len(line) - 1) // self.limit * self.limit
        pieces = [partial + line[i : i + self.limit] + b"\n" for i in range(0, last, self.limit)]
        return b"".join(pieces) + full + line[last:] + b"\n"

    def flush(self, when: bytes) -> bytes:
        """What is left without a newline (the program ended), as a ``P`` record."""
        if not self.pending:
            return b""
        out = when + b" " + self.stream + b" P " + self.pending + b"\n"
        self.pending = b""
        return out


class RotatingLog:
    """Appends whole records to ``container.log`` in the directory ``dir_fd``, rotating
    it by size. ``max_files`` counts the current file: 3 keeps ``.1`` and ``.2``."""

    __slots__ = ("dir_fd", "fd", "max_files", "max_size", "size")

    def __init__(self, dir_fd: int, max_size: int, max_files: int) -> None:
        self.dir_fd = dir_fd
        self.max_size = max(max_size, MIN_MAX_SIZE)
        self.max_files = max(max_files, 1)
        self.fd = -1
        self.size = 0
        self._open()

    def _open(self) -> None:
        fd = os.open(LOG_NAME, _OPEN_FLAGS, 0o600, dir_fd=self.dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{LOG_NAME} is not a regular file")
        self.fd = fd
        self.size = st.st_size

    def write(self, data: bytes) -> None:
        """Append records (whole lines). The file is rotated between two records when
        the next would take it past the limit; a record longer than the limit gets a
        file of its own."""
        pos, end = 0, len(data)
        while pos < end:
            room = self.max_size - self.size
            if end - pos <= room:
                self._write(memoryview(data)[pos:])
                return
            cut = data.rfind(b"\n", pos, pos + room) + 1  # after the last record that fits
            if cut <= pos:
                if self.size > 0:
                    self.rotate()
                    continue
                cut = data.find(b"\n", pos) + 1 or end
            self._write(memoryview(data)[pos:cut])
            pos = cut
            if pos < end:
                self.rotate()

    def _write(self, data: memoryview) -> None:
        while data:
            written = os.write(self.fd, data)
            self.size += written
            data = data[written:]

    def rotate(self) -> None:
        """``container.log`` -> ``.1`` -> ``.2`` ...; the oldest beyond the count goes."""
        os.close(self.fd)
        self.fd = -1
        d = self.dir_fd
        last = self.max_files - 1
        with dir_lock(d, exclusive=True):
            try:
                os.unlink(rotated_name(last), dir_fd=d)
            except FileNotFoundError:
                pass
            for index in range(last - 1, -1, -1):
                try:
                    os.rename(
                        rotated_name(index), rotated_name(index + 1), src_dir_fd=d, dst_dir_fd=d
                    )
                except FileNotFoundError:
                    pass
            self._open()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
