"""``run``: create + start + wait + delete in one process, as ``runc run`` does.

The runtime stays the container process's parent (``foreground``): it forwards
signals, proxies the terminal when there is no console socket, returns the
program's exit status (128+N when killed by signal N), ends the rest of the job
(SIGTERM, then SIGKILL after the grace period) and deletes the container.
``detach`` returns once the program runs; ``remove_when_done`` deletes a detached
container when it ends (``run -d --rm``). ``hostjob run IMAGE`` is this run of a
container whose rootfs an image provides (``hostjob.images.run``).
"""

from __future__ import annotations

import os

from hostjob.runtime import proc
from hostjob.runtime.container import Container, CreateOptions, stop_grace
from hostjob.runtime.foreground import TerminalPair, ignore_signals, reap_orphans, wait_attached

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.job import JobConfig


def run(
    container_id: str,
    job: JobConfig,
    *,
    root: str,
    options: CreateOptions,
    detach: bool = False,
    keep: bool = False,
    subreaper: bool = True,
    on_created: Callable[[Container], None] | None = None,
) -> int:
    """Run the job container to completion (or until it runs, with ``detach``)."""
    terminal = None
    if job.process.terminal and not detach and options.console_socket is None:
        terminal = TerminalPair()
        options.console_socket = terminal.child_fd
    if subreaper and not detach:
        from hostjob import linux

        # Orphans of the job are re-parented to us, so that we reap them at the end.
        linux.set_child_subreaper()
    try:
        container, child = Container.create_from_config(
            container_id, job, root=root, options=options
        )
    except BaseException:
        if terminal is not None:
            terminal.close()
        raise
    master = -1
    try:
        if terminal is not None:
            terminal.spawned()
            master = terminal.receive_master()
        if on_created is not None:
            on_created(container)
        container.start()
        if detach:
            child.close()
            return 0
        wait_status = wait_attached(child, master)
    except BaseException:
        ignore_signals()
        child.close()
        if not keep:
            container.delete(force=True)
        reap_orphans()
        raise
    finally:
        if master >= 0:
            os.close(master)
    container.cgroup().terminate(stop_grace())  # the rest of the job: TERM, then KILL
    reap_orphans()
    if not keep:
        container.delete(force=True)
    return proc.exit_code(wait_status)


def remove_when_done(container_id: str, root: str) -> None:
    """For a detached ``--rm`` container: a process (detached from ours) that deletes
    it once its program exits."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        container = Container.load(container_id, root=root)
        record = container.record
        if record is not None:
            pidfd = proc.open_pidfd(record.pid, record.start_time)
            if pidfd is not None:
                proc.wait_pidfd(pidfd, None)
        container.delete(force=True)
    finally:
        os._exit(0)
