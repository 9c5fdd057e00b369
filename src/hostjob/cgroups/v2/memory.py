"""cgroup v2 memory: ``memory.max``, ``memory.swap.max``, ``memory.low``; stats; OOM events."""

from __future__ import annotations

import errno
import io
import posix
import time

from hostjob.cgroups import resources as _res
from hostjob.cgroups._fs import MAX_U64, Dir, keyed_value, parse_int, parse_keyed
from hostjob.cgroups._manager import OOMWatcher
from hostjob.errors import CgroupError, MissingController

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import Memory


def apply(d: Dir, m: Memory) -> None:
    limit, swap, low = m.limit or 0, m.swap or 0, m.reservation or 0
    if not (limit or swap or low):
        return
    if m.check_before_update and limit > 0:
        current = d.read_int("memory.current")
        if limit < current:
            raise CgroupError(
                f"cannot set memory limit to {limit}: the job already uses {current} bytes"
            )
    swap_max = _res.memory_swap_to_v2(swap, limit)
    value = _res.num_to_str(swap_max)
    if not value and swap > 0:
        value = "0"  # memory+swap == memory: no swap at all
    if value:
        code = d.try_write("memory.swap.max", value)
        # No swap accounting: "no limit" and "no swap" are what the job gets anyway.
        if code and not (code == errno.ENOENT and value in ("max", "0")):
            d.write("memory.swap.max", value)
    if limit:
        d.write("memory.max", _res.num_to_str(limit))
    if low:
        d.write("memory.low", _res.num_to_str(low))


def stats(d: Dir, out: dict[str, Any]) -> None:
    text = d.read_optional("memory.stat")
    if text is None:
        return  # memory controller not enabled here
    mem = out["memory"]
    raw = parse_keyed(text)
    mem["raw"] = raw
    mem["cache"] = raw.get("file", 0)
    events = d.read_optional("memory.events")
    usage = mem["usage"]
    usage["usage"] = d.read_int("memory.current")
    usage["limit"] = d.read_int("memory.max")
    peak = d.read_optional("memory.peak")  # kernel 5.19+
    usage["max"] = parse_int(peak, "memory.peak") if peak else 0
    usage["failcnt"] = keyed_value(events, "max")
    swap_current = d.read_optional("memory.swap.current")
    if swap_current is not None:
        # v1 reports memory+swap; so does runc on v2.
        swap = mem["swap"]
        swap_limit = d.read_int("memory.swap.max")
        swap["usage"] = parse_int(swap_current, "memory.swap.current") + usage["usage"]
        swap["limit"] = (
            MAX_U64 if MAX_U64 in (swap_limit, usage["limit"]) else swap_limit + usage["limit"]
        )
        swap["failcnt"] = keyed_value(d.read_optional("memory.swap.events"), "max")
    out["oom_kill"] = keyed_value(events, "oom_kill")


def oom_kill_count(d: Dir) -> int:
    return keyed_value(d.read_optional("memory.events"), "oom_kill")


class Watcher(OOMWatcher):
    """OOM kills from ``memory.events`` (``oom_kill``), woken by kernfs POLLPRI."""

    __slots__ = ("_count", "_dir", "_fd", "_poll")

    def __init__(self, d: Dir) -> None:
        import select

        self._dir = d
        try:
            self._fd = posix.open(
                "memory.events", posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=d.fd()
            )
        except FileNotFoundError as err:
            raise MissingController("memory", "OOM events (memory.events)") from err
        posix.read(self._fd, 4096)  # arm POLLPRI
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLPRI)
        self._count = oom_kill_count(d)

    def fileno(self) -> int:
        return self._fd

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                text = self._dir.read_optional("memory.events")
            except CgroupError:
                text = None
            if text is None:
                return None
            count = keyed_value(text, "oom_kill")
            if count > self._count:
                new, self._count = count - self._count, count
                return new
            left = deadline - time.monotonic()
            if left <= 0:
                return 0
            if self._poll.poll(min(left, 0.25) * 1000):
                try:
                    posix.lseek(self._fd, 0, io.SEEK_SET)
                    posix.read(self._fd, 4096)  # re-arm
                except OSError:
                    return None

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            posix.close(fd)
