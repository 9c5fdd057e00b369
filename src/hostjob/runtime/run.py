"""``run``: create + start + wait + delete in one process, as ``runc run`` does.

The runtime stays the container process's parent (``foreground``): it forwards
signals, proxies the terminal when there is no console socket, returns the
program's exit status (128+N when killed by signal N), ends the rest of the job
(SIGTERM, then SIGKILL after the grace period) and deletes the container -- or,
with ``keep``, records how the program ended (``state``, ``list``). ``detach``
returns once the program runs; a container created with ``CreateOptions.daemon``
(``run -d IMAGE``) is created by its watcher instead (``hostjob.runtime.watcher``:
its log, exit status, restart policy and ``--rm``). ``hostjob run IMAGE`` is this
run of a container whose rootfs an image provides (``hostjob.images.run``).
"""

from __future__ import annotations

import posix

from hostjob.errors import ContainerNotFound, HostjobError
from hostjob.runtime import proc
from hostjob.runtime.container import Container
from hostjob.runtime.create import CreateOptions
from hostjob.runtime.delete import stop_grace
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
    notify_socket: str | None = None,
) -> int:
    """Run the job container to completion (or until it runs, with ``detach``).

    ``notify_socket``: systemd's ``NOTIFY_SOCKET`` (a unit of ``Type=notify``, as
    ``generate systemd`` writes): READY=1 is sent once the program runs."""
    if detach and options.daemon is not None:
        from hostjob.runtime import watcher

        watcher.launch(container_id, job, root=root, options=options, keep=keep)
        return 0
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
            container_id, job, root=root, options=options, release_by_pipe=True
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
        oom_before = _oom_kills(container) if keep else 0
        container.start_child(child)
        if detach:
            child.close()
            return 0
        if notify_socket:
            from hostjob.runtime.systemd import notify

            notify(notify_socket, "READY=1")
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
            posix.close(master)
    if keep:
        container.cgroup().terminate(stop_grace())  # the rest of the job: TERM, then KILL
        reap_orphans()
        try:
            container.record_exit(wait_status, _oom_kills(container) > oom_before)
        except ContainerNotFound:
            pass  # deleted by someone else meanwhile
    else:
        container.delete(force=True)  # which ends the rest of the job the same way
        reap_orphans()
    return proc.exit_code(wait_status)


def _oom_kills(container: Container) -> int:
    try:
        return container.cgroup().oom_kill_count()
    except (HostjobError, OSError):
        return 0
