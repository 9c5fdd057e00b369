"""cgroup v1 memory: limit, memory+swap, soft limit, swappiness, OOM killer; stats; OOM events."""

from __future__ import annotations

import errno
import posix
import time

from hostjob.cgroups._fs import Dir, keyed_value, parse_int, parse_keyed, write_error
from hostjob.cgroups._manager import OOMWatcher
from hostjob.errors import CgroupError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import Memory

LIMIT = "memory.limit_in_bytes"
MEMSW = "memory.memsw.limit_in_bytes"


def _set_limit(d: Dir, limit: int) -> None:
    value = str(limit)
    code = d.try_write(LIMIT, value)
    if code == errno.EBUSY:
        # The kernel could not reclaim down to the new limit.
        usage = d.read_int("memory.usage_in_bytes")
        peak = d.read_int("memory.max_usage_in_bytes")
        raise CgroupError(
            f"cannot set memory limit to {limit}: the job uses {usage} bytes (peak {peak})"
        )
    if code:
        raise write_error(d.path, LIMIT, value, code)


def _set_swap(d: Dir, swap: int) -> None:
    value = str(swap)
    code = d.try_write(MEMSW, value)
    if code == errno.ENOENT and swap == -1:
        return  # no swap accounting: nothing to lift
    if code == errno.ENOENT:
        raise CgroupError(
            f"cannot set memory+swap limit {swap}: this kernel has no swap accounting"
            f" ({d.path}/{MEMSW} is missing)"
        )
    if code:
        raise write_error(d.path, MEMSW, value, code)


def apply(d: Dir, m: Memory) -> None:
    limit, swap = m.limit or 0, m.swap or 0
    if limit == -1 and swap == 0 and d.has(MEMSW):
        swap = -1  # "no memory limit" lifts the memory+swap limit too
    if limit and swap:
        # The kernel keeps memsw >= limit at every step: raise swap first when growing.
        if swap == -1 or d.read_int(LIMIT) < swap:
            _set_swap(d, swap)
            _set_limit(d, limit)
        else:
            _set_limit(d, limit)
            _set_swap(d, swap)
    elif limit:
        _set_limit(d, limit)
    elif swap:
        _set_swap(d, swap)
    if m.reservation:
        d.write("memory.soft_limit_in_bytes", str(m.reservation))
    if m.kernel_tcp:
        d.write("memory.kmem.tcp.limit_in_bytes", str(m.kernel_tcp))
    if m.disable_oom_killer is not None:
        d.write("memory.oom_control", "1" if m.disable_oom_killer else "0")
    if m.swappiness is not None:
        d.write("memory.swappiness", str(m.swappiness))


def _entry(d: Dir, prefix: str, entry: dict[str, int]) -> None:
    usage = d.read_optional(f"{prefix}.usage_in_bytes")
    if usage is None:
        return  # swap or kmem accounting not in this kernel
    entry["usage"] = parse_int(usage, f"{prefix}.usage_in_bytes")
    entry["max"] = d.read_int(f"{prefix}.max_usage_in_bytes")
    entry["failcnt"] = d.read_int(f"{prefix}.failcnt")
    entry["limit"] = d.read_int(f"{prefix}.limit_in_bytes")


def stats(d: Dir, out: dict[str, Any]) -> None:
    text = d.read_optional("memory.stat")
    if text is None:
        return
    mem = out["memory"]
    raw = parse_keyed(text)
    mem["raw"] = raw
    mem["cache"] = raw.get("cache", 0)
    _entry(d, "memory", mem["usage"])
    _entry(d, "memory.memsw", mem["swap"])
    _entry(d, "memory.kmem", mem["kernel"])
    _entry(d, "memory.kmem.tcp", mem["kernelTCP"])
    out["oom_kill"] = oom_kill_count(d)


def oom_kill_count(d: Dir) -> int:
    # memory.oom_control: "oom_kill_disable 0\nunder_oom 0\noom_kill 3" (kernel 4.13+).
    return keyed_value(d.read_optional("memory.oom_control"), "oom_kill")


class Watcher(OOMWatcher):
    """OOM events through ``cgroup.event_control`` + an eventfd on ``memory.oom_control``.

    The eventfd fires when the job goes out of memory (before the kill lands) and
    when the cgroup is removed; the ``oom_kill`` counter says how many kills.
    """

    __slots__ = ("_count", "_dir", "_efd", "_events", "_has_counter", "_poll")

    def __init__(self, d: Dir) -> None:
        import select

        self._dir = d
        self._efd = posix.eventfd(0, posix.EFD_CLOEXEC | posix.EFD_NONBLOCK)
        try:
            ofd = posix.open("memory.oom_control", posix.O_RDONLY | posix.O_CLOEXEC, dir_fd=d.fd())
            try:
                d.write("cgroup.event_control", f"{self._efd} {ofd}")
            finally:
                posix.close(ofd)  # the kernel keeps its own reference
        except BaseException as err:
            posix.close(self._efd)
            if isinstance(err, OSError):
                raise CgroupError(f"cannot watch {d.path}/memory.oom_control: {err}") from err
            raise
        self._poll = select.poll()
        self._poll.register(self._efd, select.POLLIN)
        text = d.read_optional("memory.oom_control") or ""
        self._has_counter = "oom_kill " in text
        self._count = keyed_value(text, "oom_kill")
        self._events = 0

    def fileno(self) -> int:
        return self._efd

    def _kills(self) -> int | None:
        try:
            text = self._dir.read_optional("memory.oom_control")
        except CgroupError:
            return None
        if text is None:
            return None
        # Kernels before 4.13 have no kill counter: count OOM events instead.
        return keyed_value(text, "oom_kill") if self._has_counter else self._events

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        step = 0.25
        while True:
            count = self._kills()
            if count is None:
                return None
            if count > self._count:
                new, self._count = count - self._count, count
                return new
            left = deadline - time.monotonic()
            if left <= 0:
                return 0
            if self._poll.poll(min(left, step) * 1000):
                try:
                    self._events += int.from_bytes(posix.read(self._efd, 8), "little")
                except BlockingIOError:
                    pass
                step = 0.005  # the kill follows the OOM notification closely
            else:
                step = min(step * 2, 0.25)

    def close(self) -> None:
        if self._efd >= 0:
            fd, self._efd = self._efd, -1
            posix.close(fd)
