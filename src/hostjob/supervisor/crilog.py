"""A detached image container's log: the CRI format, its file names and the lock
between its writer (``hostjob.supervisor.logwriter``) and readers (``logreader``).

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
it never sees a rotation half done (``dir_lock``).
"""

from __future__ import annotations

import os
import time

from hostjob.linux import fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.linux.fsutil import FileLock


LOG_NAME = "container.log"

MAX_LINE = 16 * 1024  # containerd's max_container_log_line_size

FULL = b"F"

PARTIAL = b"P"

STDOUT = b"stdout"

STDERR = b"stderr"

DEFAULT_MAX_SIZE = 10 << 20

DEFAULT_MAX_FILES = 3

MIN_MAX_SIZE = 1024


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


def rotated_name(index: int) -> str:
    return LOG_NAME if index == 0 else f"{LOG_NAME}.{index}"


def dir_lock(dir_fd: int, *, exclusive: bool) -> FileLock:
    """A ``flock`` on a private open of the log directory (its own open file description,
    so a writer and a reader in one process exclude each other too). Both sides hold it
    for microseconds; neither waits for ever: a writer stopped mid-rotation must not hang
    ``logs``, and a stopped reader must not stall the container's output (its pipe would
    fill), so after ``LOCK_WAIT`` the work goes on unlocked (a lock of no fd)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return fsutil.lock_fd(fd, shared=not exclusive, timeout=LOCK_WAIT)
    except BlockingIOError:
        return fsutil.FileLock(-1)  # lock_fd closed the fd


LOCK_WAIT = 0.5
