"""A detached image container's log: the CRI format, rotated by size, and reading it back.

Each record is one line, as containerd's CRI plugin and podman's ``k8s-file`` driver
write them (and the kubelet reads them)::

    2026-12-01T10:00:00.123456789Z stdout F a whole line
    2026-12-01T10:00:00.123456789Z stderr P the first 16 KiB of a longer line...

``F`` marks a record that ends a line (its newline is not stored); ``P`` a piece of a
line: one longer than ``MAX_LINE`` is cut into pieces, and what a stream held without
a newline when its program ended is written as a last ``P``. Times are UTC with nine
fraction digits, so that comparing two of them as bytes compares the times.

The current file is ``container.log``; when the next records would take it past the
size limit it becomes ``container.log.1`` (the older ones move up, the oldest beyond
the file count is removed), as docker's ``json-file`` driver numbers them. Every file
operation is relative to the log directory's fd, never follows a symlink, and makes
files 0600 (the directory is root's, 0700: SECURITY.md).

Readers (``hostjob logs``) take the files oldest first; ``--tail`` reads backwards from
the end, ``--since`` skips what is older, ``-f`` keeps reading the current file and
notices a rotation by its inode. A rotation is several renames: it holds an exclusive
``flock`` on the directory, and a reader opens the set of files under a shared one, so
it never sees a rotation half done (``_dir_lock``).
"""

from __future__ import annotations

import errno
import os
import stat
import time

from hostjob import fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from hostjob.fsutil import FileLock

LOG_NAME = "container.log"
MAX_LINE = 16 * 1024  # containerd's max_container_log_line_size
FULL = b"F"
PARTIAL = b"P"
STDOUT = b"stdout"
STDERR = b"stderr"
DEFAULT_MAX_SIZE = 10 << 20
DEFAULT_MAX_FILES = 3
MIN_MAX_SIZE = 1024

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_BLOCK = 1 << 20


def stamp(ns: int | None = None) -> bytes:
    """A record's time: RFC 3339, UTC, nine fraction digits (``units.rfc3339_nano``)."""
    if ns is None:
        ns = time.time_ns()
    seconds, fraction = divmod(ns, 1_000_000_000)
    return b"%s.%09dZ" % (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode(),
        fraction,
    )


def stamp_ns(value: bytes) -> int | None:
    """Nanoseconds since the epoch of a record's time (any RFC 3339 form)."""
    from hostjob.units import parse_rfc3339_ns

    try:
        return parse_rfc3339_ns(value.decode("ascii"))
    except UnicodeDecodeError:
        return None


def parse_record(line: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """(time, stream, tag, text) of one record (without its newline); None if malformed."""
    parts = line.split(b" ", 3)
    if len(parts) == 3 and line.endswith(b" "):  # an empty text: "... stdout F "
        parts.append(b"")
    if len(parts) != 4 or parts[1] not in (STDOUT, STDERR) or not parts[2]:
        return None
    # The tag may carry more (``F:x``) in later CRI versions: its first letter decides.
    stream = STDOUT if parts[1] == STDOUT else STDERR
    return parts[0], stream, FULL if parts[2][:1] == FULL else PARTIAL, parts[3]


# --- writing --------------------------------------------------------------------------------


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


def rotated_name(index: int) -> str:
    return LOG_NAME if index == 0 else f"{LOG_NAME}.{index}"


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
        with _dir_lock(d, exclusive=True):
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


# --- reading --------------------------------------------------------------------------------


def _dir_lock(dir_fd: int, *, exclusive: bool) -> FileLock:
    """A ``flock`` on a private open of the log directory (its own open file description,
    so a writer and a reader in one process exclude each other too). Both sides hold it
    for microseconds; neither waits for ever: a writer stopped mid-rotation must not hang
    ``logs``, and a stopped reader must not stall the container's output (its pipe would
    fill), so after ``_LOCK_WAIT`` the work goes on unlocked (a lock of no fd)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return fsutil.lock_fd(fd, shared=not exclusive, timeout=_LOCK_WAIT)
    except BlockingIOError:
        return fsutil.FileLock(-1)  # lock_fd closed the fd


_LOCK_WAIT = 0.5


def log_files(dir_fd: int) -> list[str]:
    """The log's files, oldest first (``container.log.N`` ... ``.1``, ``container.log``)."""
    indexes = []
    for name in os.listdir(dir_fd):
        if name == LOG_NAME:
            indexes.append(0)
        elif name.startswith(LOG_NAME + ".") and name[len(LOG_NAME) + 1 :].isdigit():
            indexes.append(int(name[len(LOG_NAME) + 1 :]))
    return [rotated_name(i) for i in sorted(indexes, reverse=True)]


def _open_files(dir_fd: int) -> list[tuple[int, str]]:
    """Every file of the log, opened, oldest first, with its name: one consistent set
    (no rotation half done, ``_dir_lock``)."""
    files = []
    with _dir_lock(dir_fd, exclusive=False):
        for name in log_files(dir_fd):
            fd = open_log(dir_fd, name)
            if fd is not None:
                files.append((fd, name))
    return files


def open_log(dir_fd: int, name: str) -> int | None:
    """A log file opened for reading (None if it is gone or not a regular file)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            return None  # rotated away meanwhile, or something that is not our file
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


class Query:
    """What ``hostjob logs`` asks for."""

    __slots__ = ("since", "tail", "timestamps")

    def __init__(
        self, *, tail: int | None = None, since: int | None = None, timestamps: bool = False
    ) -> None:
        self.tail = tail  # the last N lines only
        self.since = since  # nanoseconds since the epoch: records from then on
        self.timestamps = timestamps  # each line starts with its record's time


Runs = list[tuple[bytes, bytes]]  # what to print: (stream, bytes), in order


class Renderer:
    """Records -> what ``logs`` prints: runs of stdout and of stderr text.

    A ``P`` record's text is printed without a newline, so the pieces of a line come
    out as the line; with timestamps, a line's time is its first record's. Records
    older than ``since`` are skipped (times only grow, so once one is new enough the
    check stops)."""

    __slots__ = ("at_start", "since", "timestamps")

    def __init__(self, query: Query) -> None:
        self.timestamps = query.timestamps
        self.since = stamp(query.since) if query.since is not None else None
        self.at_start = {STDOUT: True, STDERR: True}

    def render(self, lines: list[bytes]) -> Runs:
        """The runs for records (each without its newline).

        Records in the fixed form this module writes (a 30-byte time) are read by
        slicing, ~4x faster than parsing each; any other form is parsed."""
        out: Runs = []
        current = b""
        parts: list[bytes] = []
        since = self.since
        timestamps = self.timestamps
        at_start = self.at_start
        for line in lines:
            kind = _FIXED.get(line[29:40])
            if kind is not None:
                stream, tag = kind
                when = line[:30]
                text = line[40:]
            else:
                record = parse_record(line)
                if record is None:
                    continue
                when, stream, tag, text = record
            if since is not None:
                if not not_before(when, since):
                    continue
                self.since = since = None
            if stream is not current:
                if parts:
                    out.append((current, b"".join(parts)))
                    parts = []
                current = stream
            if timestamps and at_start[stream]:
                parts.append(when + b" ")
            if tag is FULL:
                parts.append(text + b"\n")
                at_start[stream] = True
            else:
                parts.append(text)
                at_start[stream] = False
        if parts:
            out.append((current, b"".join(parts)))
        return out

    def render_block(self, block: bytes) -> Runs:
        """The runs for a block of whole records (ending in a newline)."""
        lines = block.split(b"\n")
        lines.pop()
        return self.render(lines)


# The 11 bytes after a fixed-form time (``...789Z stdout F ``): stream and tag.
_FIXED = {
    b"Z stdout F ": (STDOUT, FULL),
    b"Z stderr F ": (STDERR, FULL),
    b"Z stdout P ": (STDOUT, PARTIAL),
    b"Z stderr P ": (STDERR, PARTIAL),
}


def not_before(when: bytes, since: bytes) -> bool:
    """Whether the record time ``when`` is at or after ``since`` (a ``stamp``)."""
    if len(when) == len(since) and when.endswith(b"Z"):
        return when >= since  # both in the fixed form: bytes order is time order
    ns = stamp_ns(when)
    since_ns = stamp_ns(since)
    return ns is None or since_ns is None or ns >= since_ns


def _blocks(fd: int, offset: int, cursor: list[int] | None = None) -> Iterator[bytes]:
    """Whole records of a file from ``offset`` on, in blocks. With ``cursor`` (the
    file being written) a last record without its newline is left for later and
    ``cursor[0]`` says where it starts; otherwise it is shown as it is (cut short
    by a crash)."""
    rest = b""
    while True:
        chunk = os.pread(fd, _BLOCK, offset)
        if not chunk:
            break
        offset += len(chunk)
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            yield data[:cut]
    if cursor is not None:
        cursor[0] = offset - len(rest)
    elif rest:
        yield rest + b"\n"


def _last_time(fd: int) -> bytes | None:
    """The time of the file's last record (None for an empty file)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    start = max(0, size - 64 * 1024)
    data = os.pread(fd, size - start, start).rstrip(b"\n")
    record = parse_record(data[data.rfind(b"\n") + 1 :])
    return record[0] if record is not None else None


def tail_start(fds: list[int], lines: int) -> tuple[int, int]:
    """Where the last ``lines`` lines begin: (index in ``fds``, offset), read backwards
    from the end. A line is the ``P`` records and the ``F`` record that end it; a log
    that ends in ``P`` records ends in a line of its own."""
    if lines <= 0:
        return len(fds), 0
    count = 0
    for index in range(len(fds) - 1, -1, -1):
        fd = fds[index]
        pos = os.fstat(fd).st_size
        head = b""  # the end of a record that began before the window read last
        while pos > 0:
            start = max(0, pos - _BLOCK)
            data = os.pread(fd, pos - start, start) + head
            body_start = 0
            if start > 0:
                newline = data.find(b"\n")
                if newline < 0:  # one record longer than a block
                    head, pos = data, start
                    continue
                head, data, body_start = data[: newline + 1], data[newline + 1 :], newline + 1
            else:
                head = b""
            records = data.split(b"\n")
            if records and records[-1] == b"":
                records.pop()
            offset = start + body_start
            starts = []
            for record in records:
                starts.append(offset)
                offset += len(record) + 1
            for begin, line in zip(reversed(starts), reversed(records), strict=True):
                parsed = parse_record(line)
                if parsed is None:
                    continue
                if count == 0 or parsed[2] == FULL:
                    count += 1
                if count > lines:
                    return index, begin + len(line) + 1
            pos = start
    return 0, 0


class LogReader:
    """``hostjob logs``: what the log holds (``read``), then what is written to it
    (``follow``), as runs to print."""

    __slots__ = ("current", "dir_fd", "done", "offset", "query", "renderer")

    def __init__(self, dir_fd: int, query: Query) -> None:
        self.dir_fd = dir_fd
        self.query = query
        self.renderer = Renderer(query)
        self.current = -1  # the fd of container.log, once read
        self.offset = 0  # how far it was read
        # The newest rotated file read to its end, kept open: its inode names it, and
        # no new file can take that number while it is open.
        self.done = -1

    def read(self) -> Iterator[Runs]:
        """The log as it is now, per ``--tail`` and ``--since``; afterwards ``current``
        and ``offset`` say where it ended."""
        query = self.query
        files = _open_files(self.dir_fd)
        if files and files[-1][1] == LOG_NAME:
            self.current = files[-1][0]
            self.offset = os.fstat(self.current).st_size
        elif files:
            self.done = files[-1][0]
        try:
            fds = [fd for fd, _ in files]
            first, offset = 0, 0
            if query.since is not None:
                since = stamp(query.since)
                while first < len(fds) - 1:
                    last = _last_time(fds[first])
                    if last is not None and not_before(last, since):
                        break
                    first += 1
            elif query.tail is not None:
                first, offset = tail_start(fds, query.tail)
            if query.tail is not None and query.since is not None:
                yield from self._tail_of_since(fds[first:], query.tail)
                return
            for index in range(first, len(fds)):
                cursor = [0] if fds[index] == self.current else None
                for block in _blocks(fds[index], offset if index == first else 0, cursor):
                    yield self.renderer.render_block(block)
                if cursor is not None:
                    self.offset = cursor[0]
        finally:
            for fd, _name in files:
                if fd not in (self.current, self.done):
                    os.close(fd)

    def _tail_of_since(self, fds: list[int], limit: int) -> Iterator[Runs]:
        """``--since`` with ``--tail``: the last ``limit`` lines of those new enough."""
        from collections import deque

        since = self.renderer.since
        self.renderer.since = None
        kept: deque[list[bytes]] = deque(maxlen=max(limit, 0))
        open_line = False
        for fd in fds:
            cursor = [0] if fd == self.current else None
            for block in _blocks(fd, 0, cursor):
                lines = block.split(b"\n")
                lines.pop()
                for line in lines:
                    record = parse_record(line)
                    if record is None or (since is not None and not not_before(record[0], since)):
                        continue
                    if open_line and kept:
                        kept[-1].append(line)
                    else:
                        kept.append([line])
                    open_line = record[2] == PARTIAL
            if cursor is not None:
                self.offset = cursor[0]
        yield self.renderer.render([line for group in kept for line in group])

    def follow(self, running: Callable[[], bool], interval: float = 0.1) -> Iterator[Runs]:
        """``logs -f``: ``read``, then what is written, across rotations, until
        ``running()`` says the container stopped for good (it is asked before the last
        read, so nothing written before it stopped is missed)."""
        yield from self.read()
        try:
            while True:
                last_round = not running()
                if self.current >= 0:
                    yield from self._new_records()
                    if _current_inode(self.dir_fd) == os.fstat(self.current).st_ino:
                        if last_round:
                            return
                        time.sleep(interval)
                        continue
                    # Rotated: the file is complete (renamed after its last write).
                    yield from self._new_records(final=True)
                    self._set_done(self.current)
                    self.current = -1
                yield from self._next_files()
                if self.current < 0:
                    if last_round:
                        return
                    time.sleep(interval)
        finally:
            self.close()

    def _next_files(self) -> Iterator[Runs]:
        """Move on from ``done`` to the new ``container.log``, reading whole the files
        rotated in between (several rotations between two looks), oldest first. If
        ``done`` is gone already, every rotated file is newer (what rotated away unread
        is lost, as the log's size limit says)."""
        files = _open_files(self.dir_fd)
        current = files.pop()[0] if files and files[-1][1] == LOG_NAME else -1
        fds = [fd for fd, _name in files]
        self.current, self.offset = current, 0
        try:
            inodes = [os.fstat(fd).st_ino for fd in fds]
            done = os.fstat(self.done).st_ino if self.done >= 0 else -1
            start = inodes.index(done) + 1 if done in inodes else 0
            for index in range(start, len(fds)):
                for block in _blocks(fds[index], 0):
                    yield self.renderer.render_block(block)
                self._set_done(fds[index])
                fds[index] = -1
        finally:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def _set_done(self, fd: int) -> None:
        if self.done >= 0:
            os.close(self.done)
        self.done = fd

    def _new_records(self, *, final: bool = False) -> Iterator[Runs]:
        cursor = None if final else [0]
        for block in _blocks(self.current, self.offset, cursor):
            yield self.renderer.render_block(block)
        if cursor is not None:
            self.offset = cursor[0]

    def close(self) -> None:
        if self.current >= 0:
            os.close(self.current)
            self.current = -1
        self._set_done(-1)


def _current_inode(dir_fd: int) -> int:
    try:
        return os.stat(LOG_NAME, dir_fd=dir_fd, follow_symlinks=False).st_ino
    except FileNotFoundError:
        return -1
