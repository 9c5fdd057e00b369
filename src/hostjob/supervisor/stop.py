"""``stop``: a container stopped as podman stops one, its supervisor told first.

The stop signal (``run --stop-signal``, else the image's ``StopSignal``, else SIGTERM)
goes to the init; once the timeout (``run --stop-timeout``, else ``DEFAULT_STOP_TIMEOUT``)
has passed, the rest of the job is ended (``Manager.terminate``: SIGTERM, SIGKILL).
A restart policy ends here: the record says ``stop_requested`` before anything is sent,
and a watcher in its back-off wait is woken (SIGUSR1) to see it and leave. Stopping a
stopped container is fine: what is left of its job is ended all the same.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from hostjob.errors import ContainerNotFound
from hostjob.linux import signals
from hostjob.runtime import proc
from hostjob.runtime.status import Status
from hostjob.specconv.jobconfig import DEFAULT_STOP_TIMEOUT

if TYPE_CHECKING:
    from hostjob.runtime.container import Container
    from hostjob.runtime.record import Record
    from hostjob.specconv.jobconfig import DaemonConfig

# How long ``stop`` waits, after the job ended, for the watcher to record the exit and
# leave.
WATCHER_EXIT_WAIT = 30.0


def stop(container: Container, timeout: float | None = None, signum: int | None = None) -> bool:
    """Stop ``container``; whether it was running. ``signum`` (``stop --signal``)
    replaces its stop signal: a ``generate systemd`` unit's container runs in the
    foreground, without the record of a detached one that keeps it."""

    def requested(record: Record) -> None:
        record.stop_requested = True

    try:
        record = container.update_record(requested)
    except ContainerNotFound:
        return False
    daemon = record.daemon
    if timeout is None:
        timeout = daemon.stop_timeout if daemon is not None else DEFAULT_STOP_TIMEOUT
    deadline = time.monotonic() + max(0.0, timeout)
    watcher = _open_watcher(record)
    try:
        if watcher is not None:
            # Out of a back-off wait at once: it sees stop_requested and leaves.
            signals.pidfd_send_signal(watcher, signals.SIGUSR1)
        current = container.status()
        running = current != Status.STOPPED
        if running:
            if signum is None:
                signum = daemon.stop_signal if daemon is not None else signals.SIGTERM
            proc.signal_process(record.pid, record.start_time, signum or signals.SIGTERM)
            if current == Status.PAUSED:
                container.cgroup().thaw()  # a frozen process acts on no signal
            init = proc.open_pidfd(record.pid, record.start_time)
            if init is not None:
                try:
                    proc.wait_pidfd(init, max(0.0, deadline - time.monotonic()))
                finally:
                    os.close(init)
        if container.owns_cgroup():
            container.cgroup().terminate(max(0.0, deadline - time.monotonic()))
        if watcher is not None:
            proc.wait_pidfd(watcher, WATCHER_EXIT_WAIT)
        elif daemon is not None:
            _stopped_without_watcher(container, daemon, running)
    finally:
        if watcher is not None:
            os.close(watcher)
    return running


def _stopped_without_watcher(container: Container, daemon: DaemonConfig, running: bool) -> None:
    """Do the watcher's part when it is gone: the exit (unknown: only the init's parent
    could tell, and that was the watcher), and ``--rm``."""
    if running:
        try:
            container.record_exit(None)
        except ContainerNotFound:
            return
    if daemon.remove:
        type(container).delete_by_id(container.id, root=container.store.root, force=True)


def _open_watcher(record: Record) -> int | None:
    """A pidfd of the container's watcher, if it lives."""
    if not record.watcher:
        return None
    return proc.open_pidfd(record.watcher[0], record.watcher[1])
