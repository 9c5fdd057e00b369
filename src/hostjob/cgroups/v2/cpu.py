"""cgroup v2 cpu: ``cpu.weight`` (from shares), ``cpu.max``, ``cpu.max.burst``, ``cpu.idle``."""

from __future__ import annotations

import errno

from hostjob.cgroups import resources as _res
from hostjob.cgroups._fs import Dir, parse_keyed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import CPU


def apply(d: Dir, c: CPU) -> None:
    if c.idle is not None:
        code = d.try_write("cpu.idle", str(c.idle))
        # Kernels before 5.15 have no cpu.idle: not idle is all they can be.
        if code and not (code == errno.ENOENT and c.idle == 0):
            d.write("cpu.idle", str(c.idle))
    # An idle cgroup has no weight: the kernel refuses one.
    if c.shares and not c.idle:
        d.write("cpu.weight", str(_res.cpu_shares_to_weight(c.shares)))
    quota, period = c.quota or 0, c.period or 0
    if quota or period:
        if quota > 0:
            value = str(quota)
        elif quota == -1:
            value = "max"
        else:  # only the period changes: keep the quota in force
            value = d.read("cpu.max").split()[0]
        d.write("cpu.max", f"{value} {period}" if period else value)
    if c.burst is not None:
        d.write("cpu.max.burst", str(c.burst))


def stats(d: Dir, out: dict[str, Any]) -> None:
    # cpu.stat exists even without the cpu controller (usage only).
    text = d.read_optional("cpu.stat")
    if text is None:
        return
    s = parse_keyed(text)
    usage = out["cpu"]["usage"]
    usage["total"] = s.get("usage_usec", 0) * 1000
    usage["user"] = s.get("user_usec", 0) * 1000
    usage["kernel"] = s.get("system_usec", 0) * 1000
    throttling = out["cpu"]["throttling"]
    throttling["periods"] = s.get("nr_periods", 0)
    throttling["throttledPeriods"] = s.get("nr_throttled", 0)
    throttling["throttledTime"] = s.get("throttled_usec", 0) * 1000
