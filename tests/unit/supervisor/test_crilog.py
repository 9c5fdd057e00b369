"""hostjob.supervisor.crilog, logwriter and logreader: the CRI log format, its rotation, and reading it back
(--tail, --since, --timestamps, follow across rotations)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.supervisor import crilog, logreader
from hostjob.supervisor.crilog import LOG_NAME, MAX_LINE, parse_record, stamp
from hostjob.supervisor.logreader import LogReader, Query
from hostjob.supervisor.logwriter import LineSplitter, RotatingLog
from hostjob.units import parse_rfc3339_ns

RECORD = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) (F|P) (.*)$")
WHEN = b"2026-12-01T10:00:00.000000001Z"


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def text_of(dir_fd: int, query: Query | None = None) -> tuple[bytes, bytes]:
    """(stdout, stderr) as `hostjob logs` prints them."""
    out = {crilog.STDOUT: b"", crilog.STDERR: b""}
    for runs in LogReader(dir_fd, query or Query()).read():
        for stream, data in runs:
            out[stream] += data
    return out[crilog.STDOUT], out[crilog.STDERR]


def write_lines(log: RotatingLog, lines: list[bytes], stream: bytes = b"stdout") -> None:
    splitter = LineSplitter(stream)
    for line in lines:
        log.write(splitter.feed(line + b"\n", stamp()))


def test_stamp_is_rfc3339_nano_utc_and_sorts_as_time() -> None:
    assert stamp(1_764_583_200_000_000_005) == b"2025-12-01T10:00:00.000000005Z"
    assert parse_rfc3339_ns(stamp(123_456_789_012_345_678).decode()) == 123_456_789_012_345_678
    earlier, later = stamp(10**18), stamp(10**18 + 1)
    assert earlier < later and len(earlier) == len(later) == 30


def test_whole_lines_are_full_records() -> None:
    splitter = LineSplitter(b"stdout")
    out = splitter.feed(b"one\ntwo\n\nthree", WHEN)
    assert out == (WHEN + b" stdout F one\n" + WHEN + b" stdout F two\n" + WHEN + b" stdout F \n")
    assert splitter.pending == b"three"  # waits for its newline
    assert splitter.feed(b" and more\n", WHEN) == WHEN + b" stdout F three and more\n"
    assert splitter.flush(WHEN) == b""
    for line in out.splitlines():
        assert RECORD.match(line), line


def test_a_long_line_is_cut_into_partial_records() -> None:
    splitter = LineSplitter(b"stderr", limit=4)
    out = splitter.feed(b"abcdefghij\nxy\nabcd\n", WHEN).splitlines()
    assert [parse_record(line)[2:] for line in out] == [  # type: ignore[index]
        (b"P", b"abcd"), (b"P", b"efgh"), (b"F", b"ij"), (b"F", b"xy"), (b"F", b"abcd"),
    ]  # fmt: skip
    # What waits without a newline never grows past the limit: written as P at once.
    assert splitter.feed(b"0123456789", WHEN).splitlines() == [
        WHEN + b" stderr P 0123",
        WHEN + b" stderr P 4567",
    ]
    assert splitter.pending == b"89"
    # The program ended without a newline: the rest is a last P record.
    assert splitter.flush(WHEN) == WHEN + b" stderr P 89\n"
    assert LineSplitter(b"stdout").feed(b"x" * (MAX_LINE + 1) + b"\n", WHEN).count(b" P ") == 1


def test_parse_record_takes_other_writers_forms() -> None:
    assert parse_record(b"2016-10-06T00:17:09.669794202+02:00 stdout F:x hi there") == (
        b"2016-10-06T00:17:09.669794202+02:00", b"stdout", b"F", b"hi there",
    )  # fmt: skip
    assert parse_record(WHEN + b" stdout F ") == (WHEN, b"stdout", b"F", b"")
    for bad in (b"", b"garbage", WHEN + b" stdin F x", WHEN + b" stdout"):
        assert parse_record(bad) is None


def test_rotation_by_size_keeps_whole_records(log_dir: int, tmp_path: Path) -> None:
    log = RotatingLog(log_dir, max_size=2048, max_files=3)
    lines = [b"line %04d " % i + b"x" * 40 for i in range(300)]
    write_lines(log, lines)
    log.close()
    names = sorted(os.listdir(tmp_path))
    assert names == [LOG_NAME, f"{LOG_NAME}.1", f"{LOG_NAME}.2"]
    for name in names:
        data = (tmp_path / name).read_bytes()
        assert len(data) <= 2048 and data.endswith(b"\n")
        assert all(RECORD.match(line) for line in data.splitlines())
        assert oct((tmp_path / name).stat().st_mode & 0o777) == "0o600"
    out, err = text_of(log_dir)
    shown = out.splitlines()
    assert err == b"" and shown == lines[-len(shown) :]  # the newest, in order, whole
    assert len(shown) < len(lines)  # the oldest were rotated away


def test_rotation_in_one_write_and_a_record_longer_than_the_limit(
    log_dir: int, tmp_path: Path
) -> None:
    log = RotatingLog(log_dir, max_size=1024, max_files=2)
    splitter = LineSplitter(b"stdout")
    big = b"y" * 3000
    log.write(splitter.feed(b"a\n" + big + b"\nb\n", WHEN))
    log.close()
    assert (tmp_path / LOG_NAME).read_bytes() == WHEN + b" stdout F b\n"
    assert (tmp_path / f"{LOG_NAME}.1").read_bytes() == WHEN + b" stdout F " + big + b"\n"
    # One file only: the current file is replaced at each rotation.
    one = tmp_path / "one"
    one.mkdir()
    fd = os.open(one, os.O_RDONLY | os.O_DIRECTORY)
    try:
        log = RotatingLog(fd, max_size=1024, max_files=1)
        write_lines(log, [b"%03d" % i + b"z" * 60 for i in range(100)])
        log.close()
    finally:
        os.close(fd)
    assert os.listdir(one) == [LOG_NAME]
    assert (one / LOG_NAME).read_bytes().splitlines()[-1].endswith(b"099" + b"z" * 60)


def test_the_log_is_never_written_through_a_symlink(log_dir: int, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep\n")
    (tmp_path / LOG_NAME).symlink_to(target)
    with pytest.raises(OSError):
        RotatingLog(log_dir, max_size=4096, max_files=2)
    assert target.read_bytes() == b"keep\n"


def test_streams_partial_lines_and_timestamps(log_dir: int) -> None:
    log = RotatingLog(log_dir, max_size=1 << 20, max_files=2)
    out, err = LineSplitter(b"stdout", limit=3), LineSplitter(b"stderr")
    log.write(out.feed(b"hello\n", b"2026-12-01T10:00:00.000000001Z"))
    log.write(err.feed(b"oops\n", b"2026-12-01T10:00:00.000000002Z"))
    log.write(out.feed(b"tail", b"2026-12-01T10:00:00.000000003Z"))
    log.write(out.flush(b"2026-12-01T10:00:00.000000004Z"))
    log.close()
    assert text_of(log_dir) == (b"hello\ntail", b"oops\n")
    stdout, stderr = text_of(log_dir, Query(timestamps=True))
    # A line's time is its first piece's; the pieces of one line print as the line.
    assert stdout == b"2026-12-01T10:00:00.000000001Z hello\n2026-12-01T10:00:00.000000003Z tail"
    assert stderr == b"2026-12-01T10:00:00.000000002Z oops\n"


def test_tail_counts_lines_across_files(log_dir: int) -> None:
    log = RotatingLog(log_dir, max_size=1024, max_files=5)
    lines = [b"%03d" % i + b"." * 30 for i in range(60)]
    write_lines(log, lines)
    splitter = LineSplitter(b"stdout", limit=10)
    log.write(splitter.feed(b"a long last line of pieces\n", stamp()))
    log.close()
    assert text_of(log_dir, Query(tail=1))[0] == b"a long last line of pieces\n"
    assert text_of(log_dir, Query(tail=3))[0].splitlines() == [
        lines[-2], lines[-1], b"a long last line of pieces",
    ]  # fmt: skip
    assert text_of(log_dir, Query(tail=0)) == (b"", b"")
    everything = text_of(log_dir)[0]
    assert text_of(log_dir, Query(tail=100_000))[0] == everything
    assert text_of(log_dir, Query(tail=40))[0].splitlines() == everything.splitlines()[-40:]


def test_since_skips_older_records_and_files(log_dir: int) -> None:
    log = RotatingLog(log_dir, max_size=1024, max_files=10)
    splitter = LineSplitter(b"stdout")
    base = 1_764_583_200 * 10**9
    for i in range(100):
        log.write(splitter.feed(b"rec %03d ....................\n" % i, stamp(base + i * 10**9)))
    log.close()
    shown = text_of(log_dir, Query(since=base + 90 * 10**9))[0].splitlines()
    assert shown == [b"rec %03d ...................." % i for i in range(90, 100)]
    assert text_of(log_dir, Query(since=base + 90 * 10**9 + 1))[0].count(b"\n") == 9
    assert text_of(log_dir, Query(since=base + 1000 * 10**9)) == (b"", b"")
    both = text_of(log_dir, Query(since=base + 50 * 10**9, tail=2))[0].splitlines()
    assert both == [b"rec 098 ....................", b"rec 099 ...................."]


def test_follow_reads_across_rotations(log_dir: int) -> None:
    """A writer rotating many times while a follower reads: every line, in order. The
    writer never gets more than a file and a half ahead (what rotates away unread is lost,
    by design), so the rotations meet the follower at every point of its loop."""
    done = threading.Event()
    total = 3000
    progress = [-1]  # the last number the follower has seen

    def writer() -> None:
        log = RotatingLog(log_dir, max_size=2048, max_files=3)
        splitter = LineSplitter(b"stdout")
        for i in range(total):
            while i - progress[0] > 60:
                time.sleep(0.0005)
            log.write(splitter.feed(b"n=%05d\n" % i, stamp()))
            if i % 50 == 0:
                time.sleep(0.01)
        log.close()
        done.set()

    RotatingLog(log_dir, max_size=2048, max_files=3).close()  # container.log exists
    thread = threading.Thread(target=writer)
    thread.start()
    seen = b""
    for runs in LogReader(log_dir, Query()).follow(lambda: not done.is_set(), interval=0.001):
        for _stream, data in runs:
            seen += data
            progress[0] = int(data.rstrip(b"\n").rsplit(b"\n", 1)[-1][2:])
    thread.join()
    numbers = [int(line[2:]) for line in seen.splitlines()]
    assert numbers == list(range(total))


def test_a_rotation_waits_while_a_follower_opens_the_files(
    log_dir: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation is several renames: one that starts while the follower opens the set of
    files waits until it has them, so the follower never sees one half done (CI once lost
    a file to that, and an inode number reused by the next file made it read one twice)."""
    log = RotatingLog(log_dir, max_size=1024, max_files=3)
    counter = iter(range(10_000))

    def write_file() -> None:  # a file's worth of lines, then a rotation
        write_lines(log, [b"n=%05d" % next(counter) for _ in range(20)])
        log.rotate()

    write_lines(log, [b"n=%05d" % next(counter) for _ in range(5)])
    listing = logreader.log_files
    blocked: list[bool] = []

    def racing(dir_fd: int) -> list[str]:
        if not blocked:
            rotation = threading.Thread(target=write_file)
            rotation.start()
            rotation.join(0.05)
            blocked.append(rotation.is_alive())
            racers.append(rotation)
        return listing(dir_fd)

    racers: list[threading.Thread] = []
    rounds = iter(range(5))
    seen = b""
    for step, runs in enumerate(
        LogReader(log_dir, Query()).follow(lambda: next(rounds, None) is not None, 0)
    ):
        for _stream, data in runs:
            seen += data
        if step == 0:  # read() is done: rotate, so that the follower moves on
            write_file()
            monkeypatch.setattr(logreader, "log_files", racing)
        for racer in racers:
            racer.join()
    log.close()
    assert blocked == [True]
    numbers = [int(line[2:]) for line in seen.splitlines()]
    assert numbers == list(range(next(counter)))


def test_a_stuck_reader_does_not_stall_the_writer(
    log_dir: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader stopped while it holds the directory's lock: the writer rotates anyway
    after a short wait (a container's output must not back up behind `hostjob logs`)."""
    monkeypatch.setattr(crilog, "LOCK_WAIT", 0.05)
    log = RotatingLog(log_dir, max_size=1024, max_files=3)
    write_lines(log, [b"first"])
    with crilog.dir_lock(log_dir, exclusive=False):
        log.rotate()
    write_lines(log, [b"second"])
    log.close()
    assert sorted(os.listdir(f"/proc/self/fd/{log_dir}")) == [LOG_NAME, LOG_NAME + ".1"]
    assert text_of(log_dir) == (b"first\nsecond\n", b"")


def test_fast_path_and_parsed_path_agree(log_dir: int) -> None:
    """Records in the fixed form are sliced, others parsed: the same output."""
    data = (
        WHEN + b" stdout F fixed\n"
        b"2026-12-01T10:00:00.5+01:00 stdout F other form\n"
        + WHEN + b" stderr P half \n"
        b"2026-12-01T10:00:01Z stderr F done\n"
        b"not a record at all\n"
    )  # fmt: skip
    fd = os.open(LOG_NAME, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=log_dir)
    os.write(fd, data)
    os.close(fd)
    assert text_of(log_dir) == (b"fixed\nother form\n", b"half done\n")
