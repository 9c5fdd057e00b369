"""``run``: create + start + wait + delete in one process, as ``runc run`` does.

The runtime stays the container process's parent (``launch.foreground``): it forwards
signals, proxies the terminal when there is no console socket, returns the program's
exit status (128+N when killed by signal N), ends the rest of the job (SIGTERM, then
SIGKILL after the grace period) and deletes the container -- or, with ``keep``,
records how the program ended (``state``, ``list``). ``detach`` returns once the
program runs. ``hostjob run IMAGE`` is this run of a container whose rootfs an image
provides (``hostjob.images.run_image``); its detached form is looked after by a
watcher instead (``hostjob.supervisor``).
"""

from __future__ import annotations

import posix

from hostjob.errors import ContainerNotFound
from hostjob.runtime import proc
from hostjob.runtime.handle import Handle, stop_grace
from hostjob.runtime.launch.foreground import (
    TerminalPair,
    forward_signals,
    ignore_signals,
    reap_orphans,
    wait_attached,
)
from hostjob.runtime.record import StateStore
from hostjob.runtime.verbs.create import CreateOptions, create
from hostjob.runtime.verbs.delete import delete
from hostjob.runtime.verbs.start import start_child

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.specconv.jobconfig import JobConfig


def run(
    container_id: str,
    job: JobConfig,
    *,
    root: str,
    options: CreateOptions,
    detach: bool = False,
    keep: bool = False,
    subreaper: bool = True,
    on_running: Callable[[], None] | None = None,
) -> int:
    """Run the job container to completion (or until it runs, with ``detach``).

    ``on_running``: called once the program runs (``generate systemd``'s unit of
    ``Type=notify`` is told READY=1 then)."""
    terminal = None
    if job.process.terminal and not detach and options.console_socket is None:
        terminal = TerminalPair()
        options.console_socket = terminal.child_fd
    if subreaper and not detach:
        from hostjob.linux import syscalls

        # Orphans of the job are re-parented to us, so that we reap them at the end.
        syscalls.set_child_subreaper()
    container = Handle(StateStore(root), container_id, None)
    try:
        child = create(container, job, options=options, release_by_pipe=True)
    except BaseException:
        if terminal is not None:
            terminal.close()
        raise
    master = -1
    try:
        if not detach:
            # Before the start, as runc does: a TERM that came between the start and the
            # wait would end this process and leave the job running, with no one to stop it.
            forward_signals(child.pid)
        if terminal is not None:
            terminal.spawned()
            master = terminal.receive_master()
        oom_before = container.oom_kills() if keep else 0
        start_child(container, child)
        if detach:
            child.close()
            return 0
        if on_running is not None:
            on_running()
        wait_status = wait_attached(child, master)
    except BaseException:
        ignore_signals()
        child.close()
        if not keep:
            delete(container, force=True)
        reap_orphans()
        raise
    finally:
        if master >= 0:
            posix.close(master)
    if keep:
        container.cgroup().terminate(stop_grace())  # the rest of the job: TERM, then KILL
        reap_orphans()
        try:
            container.record_exit(wait_status, container.oom_kills() > oom_before)
        except ContainerNotFound:
            pass  # deleted by someone else meanwhile
    else:
        delete(container, force=True)  # which ends the rest of the job the same way
        reap_orphans()
    return proc.exit_code(wait_status)
