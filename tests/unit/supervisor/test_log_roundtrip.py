"""A detached container's log, written as its watcher writes it and read back as ``hostjob
logs`` prints it: whatever a program wrote to stdout and stderr, in whatever pieces the
pipes delivered it, comes back byte for byte per stream -- long lines cut into partial
records, a last line without its newline, rotations by size along the way (as long as
nothing rotated out of the kept files)."""

from __future__ import annotations

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from hostjob.supervisor.crilog import STDERR, STDOUT, stamp
from hostjob.supervisor.logreader import LogReader, Query
from hostjob.supervisor.logwriter import LineSplitter, RotatingLog

# What a program writes: short and long lines, empty ones, bytes of every value but the
# newline inside a line (a newline ends it).
line = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"."))
output = st.lists(st.tuples(st.sampled_from((STDOUT, STDERR)), line, st.booleans()), max_size=40)


def read_back(dir_fd: int) -> dict[bytes, bytes]:
    got = {STDOUT: b"", STDERR: b""}
    reader = LogReader(dir_fd, Query())
    try:
        for runs in reader.read():
            for stream, data in runs:
                got[stream] += data
    finally:
        reader.close()
    return got


@settings(max_examples=200)
@given(writes=output, limit=st.integers(min_value=3, max_value=64), cut=st.integers(1, 7))
def test_what_is_written_is_what_is_read(
    writes: list[tuple[bytes, bytes, bool]], limit: int, cut: int
) -> None:
    with tempfile.TemporaryDirectory(prefix="hostjob-logrt-") as folder:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # Rotation every 1 KiB, and files enough that nothing rotates out.
            log = RotatingLog(dir_fd, max_size=1024, max_files=1000)
            splitters = {s: LineSplitter(s, limit=limit) for s in (STDOUT, STDERR)}
            wrote = {STDOUT: b"", STDERR: b""}
            for stream, text, newline in writes:
                data = text + (b"\n" if newline else b"")
                wrote[stream] += data
                # the pipe hands it over in pieces of ``cut`` bytes
                for i in range(0, len(data), cut):
                    log.write(splitters[stream].feed(data[i : i + cut], stamp()))
            for splitter in splitters.values():  # the program ended
                log.write(splitter.flush(stamp()))
            log.close()
            assert read_back(dir_fd) == wrote
        finally:
            os.close(dir_fd)
