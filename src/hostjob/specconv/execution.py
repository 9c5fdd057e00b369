"""How a job's processes are executed, as the config asks: whose loader and libraries
the image's program uses (``io.hostjob.loader``), and its CPU scheduling and I/O
priority (``process.scheduler``, ``process.ioPriority``), checked as runc checks them.

Pure, as ``hostjob.specconv.convert`` is: it reads no file.
"""

from __future__ import annotations

from hostjob.errors import ConfigError
from hostjob.specconv.jobconfig import IOPriority, Scheduler

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec import runtime as wire

ANNOTATION_LOADER = "io.hostjob.loader"
LOADER_IMAGE = "image"  # the image's own loader and libraries (the default)
LOADER_HOST = "host"  # the kernel's choice: the host's loader and libraries
LOADERS = (LOADER_IMAGE, LOADER_HOST)

# sched_setattr(2)'s policies and flags, by runtime-spec's names.
POLICIES = {
    "SCHED_OTHER": 0,
    "SCHED_FIFO": 1,
    "SCHED_RR": 2,
    "SCHED_BATCH": 3,
    "SCHED_ISO": 4,
    "SCHED_IDLE": 5,
    "SCHED_DEADLINE": 6,
}
SCHED_FLAGS = {
    "SCHED_FLAG_RESET_ON_FORK": 0x01,
    "SCHED_FLAG_RECLAIM": 0x02,
    "SCHED_FLAG_DL_OVERRUN": 0x04,
    "SCHED_FLAG_KEEP_POLICY": 0x08,
    "SCHED_FLAG_KEEP_PARAMS": 0x10,
    "SCHED_FLAG_UTIL_CLAMP_MIN": 0x20,
    "SCHED_FLAG_UTIL_CLAMP_MAX": 0x40,
}
IOPRIO_CLASSES = {"IOPRIO_CLASS_RT": 1, "IOPRIO_CLASS_BE": 2, "IOPRIO_CLASS_IDLE": 3}


def loader(annotations: dict[str, str], defaults: dict[str, str], flags: dict[str, str]) -> str:
    """``io.hostjob.loader``, else the operator's default (``--default-loader``: its
    flag in ``flags``, its value in ``defaults``), else ``image``."""
    value, where = annotations.get(ANNOTATION_LOADER), f"annotations.{ANNOTATION_LOADER}"
    if value is None and defaults.get(ANNOTATION_LOADER):
        value, where = defaults[ANNOTATION_LOADER], flags[ANNOTATION_LOADER]
    value = value or LOADER_IMAGE
    if value not in LOADERS:
        raise ConfigError(f"must be one of {', '.join(LOADERS)}, not {value!r}", where)
    return value


def scheduler(given: wire.Scheduler | None, path: str) -> Scheduler | None:
    """``process.scheduler``, as runc checks it (sched_setattr(2)'s rules)."""
    if given is None:
        return None
    where = f"{path}.scheduler"
    if not given.policy:
        raise ConfigError("a scheduler policy is required", f"{where}.policy")
    if given.policy not in POLICIES:
        raise ConfigError(
            f"unknown policy {given.policy!r} (one of {', '.join(POLICIES)})", f"{where}.policy"
        )
    nice = given.nice or 0
    if not -20 <= nice <= 19:
        raise ConfigError(f"{nice} is out of range [-20, 19]", f"{where}.nice")
    priority = given.priority or 0
    if priority and given.policy not in ("SCHED_FIFO", "SCHED_RR"):
        raise ConfigError("a priority is for SCHED_FIFO and SCHED_RR only", f"{where}.priority")
    if not 0 <= priority <= 99:
        raise ConfigError(f"{priority} is out of range [0, 99]", f"{where}.priority")
    times = (given.runtime or 0, given.deadline or 0, given.period or 0)
    if any(times) and given.policy != "SCHED_DEADLINE":
        raise ConfigError("runtime, deadline and period are for SCHED_DEADLINE only", where)
    for i, flag in enumerate(given.flags or []):
        if flag not in SCHED_FLAGS:
            raise ConfigError(f"unknown scheduler flag {flag!r}", f"{where}.flags[{i}]")
    runtime, deadline, period = times
    return Scheduler(
        policy=given.policy,
        nice=nice,
        priority=priority,
        flags=list(given.flags or []),
        runtime=runtime,
        deadline=deadline,
        period=period,
    )


def io_priority(given: wire.IOPriority | None, path: str) -> IOPriority | None:
    """``process.ioPriority``: a class ioprio_set(2) knows and a level 0-7."""
    if given is None:
        return None
    where = f"{path}.ioPriority"
    if given.klass not in IOPRIO_CLASSES:
        raise ConfigError(
            f"unknown class {given.klass!r} (one of {', '.join(IOPRIO_CLASSES)})", f"{where}.class"
        )
    level = given.priority or 0
    if not 0 <= level <= 7:
        raise ConfigError(f"{level} is out of range [0, 7]", f"{where}.priority")
    return IOPriority(klass=given.klass, priority=level)
