"""Processes: identity, signals and waiting, from /proc and pidfds.

A container's init is identified by its pid *and* its start time (field 22 of
``/proc/PID/stat``), as runc does: a pid whose start time differs has been
recycled by another process and the container is stopped. Signals go through a
pidfd opened after that check, so a stranger that takes the pid later is never
signalled.

Signals themselves are ``hostjob.linux.signals``.
"""

from __future__ import annotations

import posix
import select
import time

__all__ = [
    "close_fds_except",
    "env_dict",
    "exit_code",
    "is_alive",
    "open_pidfd",
    "read_all",
    "signal_process",
    "start_time",
    "stat_fields",
    "wait_pidfd",
]


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onwards), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return data[data.rindex(b")") + 2 :].decode().split()


def start_time(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, started: int) -> bool:
    """True when ``pid`` is the same process (start time) and not a zombie."""
    if pid <= 0:
        return False
    fields = stat_fields(pid)
    if fields is None:
        return False
    return fields[0] not in ("Z", "X", "x") and int(fields[19]) == started


def open_pidfd(pid: int, started: int) -> int | None:
    """A pidfd for the process if it is still the one that started at ``started``."""
    from hostjob.linux.signals import pidfd_of  # here: `state` and `list` never pin a process

    fd = pidfd_of(pid)
    if fd is None:
        return None
    # Checked after opening: from now on the pidfd pins this exact process.
    if not is_alive(pid, started):
        posix.close(fd)
        return None
    return fd


def signal_process(pid: int, started: int, signum: int) -> bool:
    """Send ``signum`` to the process if it is still the same one; False if it is gone."""
    fd = open_pidfd(pid, started)
    if fd is None:
        return False
    from hostjob.linux import signals  # here: `state` and `list` never signal

    try:
        signals.pidfd_send_signal(fd, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        posix.close(fd)


def wait_pidfd(fd: int, timeout: float | None) -> bool:
    """Wait until the process behind ``fd`` exits; False on timeout."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if poller.poll(None if remaining is None else int(remaining * 1000) + 1):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def read_all(fd: int) -> bytes:
    """Everything ``fd`` (a pipe) gives until its end of file."""
    chunks: list[bytes] = []
    while chunk := posix.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def close_fds_except(keep: set[int] | frozenset[int]) -> None:
    """Close every fd of this process but ``keep`` (a process about to become someone
    else's: a container's init, a watcher), whatever the fds' close-on-exec flags."""
    for name in posix.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                posix.close(fd)
            except OSError:
                pass  # the listdir's own fd


def env_dict(env: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` entries as execve wants them (a later KEY wins)."""
    out = {}
    for entry in env:
        key, _, value = entry.partition("=")
        out[key] = value
    return out


def exit_code(status: int) -> int:
    """A wait status as a shell does: the exit code, or 128+N for signal N."""
    if posix.WIFSIGNALED(status):
        return 128 + posix.WTERMSIG(status)
    return posix.waitstatus_to_exitcode(status)
