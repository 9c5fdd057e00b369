"""The job's accounting over time: ``events`` (runc's JSON lines) and ``stats``
(a summary an operator reads: CPU %, memory and its peak, processes, IO, OOM
kills, uptime)."""

from __future__ import annotations

import select
import time

from hostjob.errors import ContainerNotFound, ContainerNotRunning
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any

    from hostjob.runtime.handle import Handle

# Limits at or above this mean "none" (v1 reports ~2**63, v2 "max").
_UNLIMITED = 1 << 62


def events(container: Handle, interval: float, *, once: bool = False) -> Iterator[dict[str, Any]]:
    """``{"type": "stats"|"oom", "id", "data"}`` events until the container stops."""
    if once:
        yield {"type": "stats", "id": container.id, "data": container.stats()}
        return
    manager = container.cgroup()
    watcher = manager.oom_watcher()
    poller = select.poll()
    poller.register(watcher.fileno(), select.POLLIN | select.POLLPRI)
    try:
        next_stats = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_stats:
                if _ended(container):
                    return
                yield {"type": "stats", "id": container.id, "data": manager.stats()}
                next_stats = now + max(interval, 0.05)
            if poller.poll(max(0, int((next_stats - time.monotonic()) * 1000))):
                kills = watcher.wait(0)
                if kills is None:
                    return  # the cgroup is gone
                for _ in range(kills):
                    yield {"type": "oom", "id": container.id}
    finally:
        watcher.close()


def _ended(container: Handle) -> bool:
    try:
        container.reload()
    except ContainerNotFound:
        return True
    return container.status() == Status.STOPPED and not container.pids()


class Sample:
    """One reading of a job's accounting, and when it was taken."""

    __slots__ = ("at", "stats")

    def __init__(self, container: Handle) -> None:
        self.stats = container.stats()
        self.at = time.monotonic()


def summary(container: Handle, interval: float) -> dict[str, Any]:
    """The figures ``hostjob stats`` shows; CPU % is measured over ``interval`` seconds."""
    first = Sample(container)
    if interval > 0:
        time.sleep(interval)
        return summarize(container, first, Sample(container))
    return summarize(container, None, first)


def summaries(containers: Sequence[Handle], interval: float) -> list[dict[str, Any]]:
    """``summary`` of several containers over one interval; one that stopped or went
    away meanwhile is left out."""
    firsts = {}
    for container in containers:
        try:
            firsts[container.id] = Sample(container)
        except (ContainerNotRunning, ContainerNotFound):
            continue
    if interval > 0 and firsts:
        time.sleep(interval)
    out = []
    for container in containers:
        if container.id not in firsts:
            continue
        try:
            last = Sample(container) if interval > 0 else firsts[container.id]
        except (ContainerNotRunning, ContainerNotFound):
            continue
        out.append(summarize(container, firsts[container.id] if interval > 0 else None, last))
    return out


def summarize(container: Handle, first: Sample | None, last_sample: Sample) -> dict[str, Any]:
    """The figures of ``summary`` from two samples (CPU % between them; none without
    a first)."""
    last = last_sample.stats
    cpu_percent = None
    if first is not None and last_sample.at > first.at:
        used = last["cpu"]["usage"]["total"] - first.stats["cpu"]["usage"]["total"]
        cpu_percent = max(0.0, used / 1e9 / (last_sample.at - first.at) * 100)
    memory = last["memory"]["usage"]
    pids = last["pids"]
    io = {"read": 0, "write": 0}
    for entry in last["blkio"]["ioServiceBytesRecursive"]:
        op = str(entry.get("op", "")).lower()
        if op in io:
            io[op] += int(entry.get("value", 0))
    return {
        "id": container.id,
        "status": container.status(),
        "cpuPercent": cpu_percent,
        "cpuSeconds": last["cpu"]["usage"]["total"] / 1e9,
        "memory": {
            "usage": memory["usage"],
            "limit": memory["limit"] if 0 < memory["limit"] < _UNLIMITED else None,
            "peak": memory["max"] or None,
        },
        "pids": {
            "current": pids["current"],
            "limit": pids["limit"] if 0 < pids["limit"] < _UNLIMITED else None,
        },
        "io": io,
        "oomKills": last.get("oom_kill", 0),
        "uptimeSeconds": max(0.0, time.time() - _epoch(_created(container))),
    }


def _created(container: Handle) -> str:
    return container.record.created if container.record is not None else ""


def _epoch(stamp: str) -> float:
    """Seconds since the epoch of an RFC 3339 UTC time such as 2026-11-30T08:48:42.9Z."""
    import calendar

    try:
        date, _, clock = stamp.rstrip("Z").partition("T")
        year, month, day = (int(x) for x in date.split("-"))
        hms, _, fraction = clock.partition(".")
        hour, minute, second = (int(x) for x in hms.split(":"))
    except ValueError:
        return time.time()
    whole = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    return whole + (float("0." + fraction) if fraction.isdigit() else 0.0)
