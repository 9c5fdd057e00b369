"""``process.scheduler`` and ``process.ioPriority``, applied to the container process
as runc applies them: ``sched_setattr(2)`` and ``ioprio_set(2)`` on itself, as root,
before its identity switch, so that what its program starts inherits them. A policy or
class the kernel refuses (a real-time one without ``CAP_SYS_NICE``, ``SCHED_DEADLINE``
without the bandwidth) is the start's error, named with the setting."""

from __future__ import annotations

from hostjob.errors import StartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.plan import LaunchPlan


def apply(plan: LaunchPlan) -> None:
    from hostjob.linux import syscalls
    from hostjob.specconv.execution import IOPRIO_CLASSES, POLICIES, SCHED_FLAGS

    wanted = plan.scheduler
    if wanted is not None:
        flags = 0
        for flag in wanted.flags or []:
            flags |= SCHED_FLAGS[flag]
        try:
            syscalls.sched_setattr(
                POLICIES[wanted.policy],
                flags,
                wanted.nice,
                wanted.priority,
                wanted.runtime,
                wanted.deadline,
                wanted.period,
            )
        except OSError as err:
            raise StartError(
                f"cannot set the scheduler (process.scheduler: {wanted.policy}, nice"
                f" {wanted.nice}, priority {wanted.priority}): {err.strerror or err}"
            ) from err
    io = plan.io_priority
    if io is not None:
        try:
            syscalls.ioprio_set(IOPRIO_CLASSES[io.klass], io.priority)
        except OSError as err:
            raise StartError(
                f"cannot set the I/O priority (process.ioPriority: {io.klass}, {io.priority}):"
                f" {err.strerror or err}"
            ) from err
