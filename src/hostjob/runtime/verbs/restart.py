"""``restart``: a stopped container's process run again, as a restart policy asks (the
watcher of a ``run -d IMAGE`` container: ``hostjob.supervisor.watcher``).

A new init from the same config, in the same job cgroup and rootfs, its output into the
same FIFOs, started at once; the calling process is its parent. Create-time hooks do not
run again; ``startContainer`` hooks do. Refused once ``stop`` has stopped the container
(``status.require_restart``).
"""

from __future__ import annotations

from hostjob.errors import ContainerNotFound
from hostjob.linux import signals
from hostjob.runtime import proc, status
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch.child import ChildSetup
from hostjob.runtime.launch.spawn import spawn
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle
    from hostjob.runtime.launch.spawn import Child


def restart(container: Handle, stdio: tuple[str, str] | None = None) -> Child:
    """Run the process of the stopped ``container`` again; its child's handle."""
    with container.store.lock(container.id):
        container.reload()
        record = container.record
        if record is None:
            raise ContainerNotFound(container.id)
        status.require_restart(
            container.id, container.status(), record.phase, bool(record.stop_requested)
        )
        job = record.config
        manager = container.cgroup()
        if manager.pids():  # what outlived the last init goes first
            manager.kill_all(signals.SIGKILL)
            manager.wait_empty(5.0)
        place = None
        entry = manager.entry()
        if record.systemd_scope and not manager.exists():
            # systemd stopped the scope with its last process: a new one takes the init
            from hostjob.cgroups import Entry, systemd

            entry = Entry([], None)

            def place(pid: int) -> None:
                systemd.start(job.cgroups_path, pid, f"hostjob container {container.id}",
                              job.resources)  # fmt: skip

        setup = ChildSetup(launch_plan.plan(job, job.process), entry)
        setup.stdio = stdio
        setup.decisions_dir = container.store.loader_cache()
        setup.set_init_steps(job, container.hook_state(Status.CREATED, None))
        child = spawn(setup, place=place)
        child.keep_decision()
        record.pid = child.pid
        record.start_time = proc.start_time(child.pid) or 0
        record.restarts = (record.restarts or 0) + 1
        container.store.write(record)
    return child
