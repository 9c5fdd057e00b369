"""The job's accounting in runc's ``events --stats`` shape (runc ``types/events.go``).

``new_stats()`` is the skeleton every manager fills in; all keys are always
present (runc omits zero values; decoders read both forms the same). Beyond
runc's fields, ``oom_kill`` at the top level counts the job's OOM kills.

    {"cpu": {"usage": {"total", "percpu", "percpu_kernel", "percpu_user", "kernel", "user"},
             "throttling": {"periods", "throttledPeriods", "throttledTime"}},
     "memory": {"cache", "usage": {"limit", "usage", "max", "failcnt"}, "swap": {...},
                "kernel": {...}, "kernelTCP": {...}, "raw": {memory.stat}},
     "pids": {"current", "limit"},
     "blkio": {"ioServiceBytesRecursive": [{"major", "minor", "op", "value"}], ...},
     "hugetlb": {"2MB": {"usage", "max", "failcnt"}},
     "oom_kill": N}

Units: CPU times in nanoseconds, memory in bytes; a limit of ``max`` is 2**64-1.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BLKIO_KEYS = (
    "ioServiceBytesRecursive",
    "ioServicedRecursive",
    "ioQueueRecursive",
    "ioServiceTimeRecursive",
    "ioWaitTimeRecursive",
    "ioMergedRecursive",
    "ioTimeRecursive",
    "sectorsRecursive",
)


def memory_entry() -> dict[str, int]:
    return {"limit": 0, "usage": 0, "max": 0, "failcnt": 0}


def new_stats() -> dict[str, Any]:
    return {
        "cpu": {
            "usage": {
                "total": 0,
                "percpu": [],
                "percpu_kernel": [],
                "percpu_user": [],
                "kernel": 0,
                "user": 0,
            },
            "throttling": {"periods": 0, "throttledPeriods": 0, "throttledTime": 0},
        },
        "memory": {
            "cache": 0,
            "usage": memory_entry(),
            "swap": memory_entry(),
            "kernel": memory_entry(),
            "kernelTCP": memory_entry(),
            "raw": {},
        },
        "pids": {"current": 0, "limit": 0},
        "blkio": {key: [] for key in BLKIO_KEYS},
        "hugetlb": {},
        "oom_kill": 0,
    }


def blkio_entry(major: int, minor: int, op: str, value: int) -> dict[str, Any]:
    return {"major": major, "minor": minor, "op": op, "value": value}
