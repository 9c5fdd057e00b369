"""``hostjob logs``: a ``run -d IMAGE`` container's log, as its watcher writes it.

The files are read oldest first (``hostjob.supervisor.logreader``); ``follow`` reads on
until the container has stopped for good: its process has exited and its watcher
(which may restart it) is gone. A running container whose watcher is gone gets a
new one first (``launch.respawn``): what the pipes held meanwhile is logged, and
the log goes on.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.errors import ContainerNotFound, InvalidState
from hostjob.runtime import proc
from hostjob.runtime.status import Status
from hostjob.supervisor.logreader import LogReader

if TYPE_CHECKING:
    from collections.abc import Iterator

    from hostjob.runtime.container import Container
    from hostjob.supervisor.logreader import Query, Runs

FOLLOW_INTERVAL = 0.1  # seconds between two looks at a followed log


def read(container: Container, query: Query, *, follow: bool = False) -> Iterator[Runs]:
    """The container's log as runs of (stream, bytes) to print."""
    record = container.record
    if record is None:
        raise ContainerNotFound(container.id)
    if record.daemon is None:
        raise InvalidState(
            f"container {container.id} keeps no log: only `hostjob run -d IMAGE` containers do"
            " (a foreground run writes to its terminal)"
        )
    if container.status() in (Status.RUNNING, Status.PAUSED) and not container.watcher_alive():
        from hostjob.supervisor.launch import respawn

        respawn(container)
        container.reload()
    try:
        dir_fd = os.open(
            record.daemon.log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
    except FileNotFoundError as err:
        raise ContainerNotFound(container.id) from err
    try:
        reader = LogReader(dir_fd, query)
        if follow:
            yield from reader.follow(lambda: _running(container), FOLLOW_INTERVAL)
        else:
            try:
                yield from reader.read()
            finally:
                reader.close()
    finally:
        os.close(dir_fd)


def _running(container: Container) -> bool:
    """Whether the container may still write: its process runs, or its watcher lives
    (it may restart it)."""
    try:
        container.reload()
    except ContainerNotFound:
        return False
    record = container.record
    if record is None:
        return False
    return proc.is_alive(record.pid, record.start_time) or container.watcher_alive()
