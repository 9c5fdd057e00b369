"""``kill``: a signal to the container's init (runc's ``kill``), or with ``all_processes``
to every process of its job (``kill --all``), and only ever to a job cgroup hostjob
made for this container (``Handle.owns_cgroup``). The init is signalled by its pid and
start time, so a pid the kernel has given to another process since is never hit."""

from __future__ import annotations

from hostjob.errors import ContainerNotRunning
from hostjob.runtime import proc, status
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle


def kill(container: Handle, signum: int | None = None, *, all_processes: bool = False) -> None:
    """Signal the init (``signum``: a number such as ``hostjob.linux.signals.SIGKILL``;
    SIGTERM by default), or with ``all_processes`` every process of the job."""
    if signum is None:
        from hostjob.linux import signals

        signum = int(signals.SIGTERM)
    current = container.status()
    if all_processes:
        if not container.owns_cgroup():
            return  # never a cgroup hostjob did not make for this container
        manager = container.cgroup()
        if current == Status.STOPPED and not manager.exists():
            return  # nothing left to signal: runc's kill --all succeeds here
        manager.kill_all(signum)
        return
    status.require_signal(container.id, current)
    record = container.record
    assert record is not None
    if not proc.signal_process(record.pid, record.start_time, signum):
        raise ContainerNotRunning(container.id)
