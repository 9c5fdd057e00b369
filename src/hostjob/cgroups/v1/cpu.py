"""cgroup v1 cpu and cpuacct: shares, CFS quota/period/burst, idle, real-time; usage stats."""

from __future__ import annotations

import errno
import posix

from hostjob.cgroups._fs import Dir, parse_keyed, write_error
from hostjob.errors import CgroupError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import CPU


def apply(d: Dir, c: CPU) -> None:
    # Real-time budget first: the kernel checks it against the parent's.
    if c.realtime_period:
        d.write("cpu.rt_period_us", str(c.realtime_period))
    if c.realtime_runtime:
        d.write("cpu.rt_runtime_us", str(c.realtime_runtime))
    if c.shares:
        d.write("cpu.shares", str(c.shares))
        # The kernel clamps silently; say so instead (as runc does).
        got = d.read_int("cpu.shares")
        if got != c.shares:
            bound = "maximum" if c.shares > got else "minimum"
            raise CgroupError(
                f"cpu shares {c.shares} are out of range: the {bound} allowed is {got}"
            )
    period = str(c.period) if c.period else ""
    if period:
        code = d.try_write("cpu.cfs_period_us", period)
        if not code:
            period = ""
        # A shorter period can exceed the parent's quota until the quota shrinks too:
        # retry after the quota, as runc does.
        elif code != errno.EINVAL or not c.quota:
            raise write_error(d.path, "cpu.cfs_period_us", period, code)
    if c.quota:
        d.write("cpu.cfs_quota_us", str(c.quota))
        if period:
            d.write("cpu.cfs_period_us", period)
    if c.burst is not None:
        d.write("cpu.cfs_burst_us", str(c.burst))
    if c.idle is not None:
        code = d.try_write("cpu.idle", str(c.idle))
        # Kernels before 5.15 have no cpu.idle: not idle is all they can be.
        if code and not (code == errno.ENOENT and c.idle == 0):
            d.write("cpu.idle", str(c.idle))


def throttling_stats(d: Dir, out: dict[str, Any]) -> None:
    text = d.read_optional("cpu.stat")
    if text is None:
        return
    s = parse_keyed(text)
    throttling = out["cpu"]["throttling"]
    throttling["periods"] = s.get("nr_periods", 0)
    throttling["throttledPeriods"] = s.get("nr_throttled", 0)
    throttling["throttledTime"] = s.get("throttled_time", 0)


def usage_stats(d: Dir, out: dict[str, Any]) -> None:
    """cpuacct: total, per-CPU and user/system usage, in nanoseconds."""
    total = d.read_optional("cpuacct.usage")
    if total is None:
        return
    usage = out["cpu"]["usage"]
    usage["total"] = int(total)
    usage["percpu"] = [int(x) for x in (d.read_optional("cpuacct.usage_percpu") or "").split()]
    # cpuacct.usage_all: "cpu user system" per CPU, in ns (kernel 4.7+).
    table = d.read_optional("cpuacct.usage_all")
    if table is not None:
        rows = [line.split() for line in table.splitlines()[1:] if line.strip()]
        usage["percpu_user"] = [int(r[1]) for r in rows]
        usage["percpu_kernel"] = [int(r[2]) for r in rows]
        usage["user"] = sum(usage["percpu_user"])
        usage["kernel"] = sum(usage["percpu_kernel"])
        return
    # Older kernels: cpuacct.stat in clock ticks.
    s = parse_keyed(d.read_optional("cpuacct.stat") or "")
    tick = 1_000_000_000 // posix.sysconf("SC_CLK_TCK")
    usage["user"] = s.get("user", 0) * tick
    usage["kernel"] = s.get("system", 0) * tick
