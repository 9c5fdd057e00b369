"""A container's status and the moves each status allows.

    creating --create--> created --start--> running <--pause/resume--> paused
                            \\                 |   ^
                             `---- kill -----> stopped --delete--> (gone)
                                   stop           restart (a watcher's policy)

``created`` and ``stopped`` containers can be deleted; ``running`` and ``paused``
ones only with ``--force``. Every verb of ``Container`` asks one predicate here
before acting, and raises the error named here when the move is illegal.
"""

from __future__ import annotations

from hostjob.errors import ContainerNotRunning, InvalidState


class Status:
    CREATING = "creating"
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


def can_start(status: str) -> bool:
    return status == Status.CREATED


def can_signal(status: str) -> bool:
    return status in (Status.CREATED, Status.RUNNING, Status.PAUSED)


def can_delete(status: str, force: bool) -> bool:
    return force or status in (Status.CREATED, Status.STOPPED)


def can_pause(status: str) -> bool:
    return status in (Status.CREATED, Status.RUNNING)


def can_resume(status: str) -> bool:
    return status == Status.PAUSED


def can_restart(status: str, phase: str, stop_requested: bool) -> bool:
    """A watcher's restart policy: the process of a stopped container, whose create
    finished, runs again -- unless ``stop`` stopped it."""
    return status == Status.STOPPED and phase == "created" and not stop_requested


def can_exec(status: str) -> bool:
    return status in (Status.CREATED, Status.RUNNING)


def require_start(container_id: str, status: str) -> None:
    if can_start(status):
        return
    if status == Status.STOPPED:
        raise InvalidState("cannot start a container that has stopped")
    if status in (Status.RUNNING, Status.PAUSED):
        raise InvalidState("cannot start an already running container")
    raise InvalidState(f"cannot start a container in the {status} state")


def require_signal(container_id: str, status: str) -> None:
    if not can_signal(status):
        raise ContainerNotRunning(container_id)


def require_delete(container_id: str, status: str, force: bool) -> None:
    if not can_delete(status, force):
        raise InvalidState(f"cannot delete container {container_id} that is not stopped: {status}")


def require_pause(container_id: str, status: str) -> None:
    if status == Status.PAUSED:
        raise InvalidState("container already paused")
    if not can_pause(status):
        raise ContainerNotRunning(container_id)


def require_resume(container_id: str, status: str) -> None:
    if not can_resume(status):
        raise InvalidState("container not paused")


def require_restart(container_id: str, status: str, phase: str, stop_requested: bool) -> None:
    if can_restart(status, phase, stop_requested):
        return
    if stop_requested:
        raise InvalidState(f"container {container_id} was stopped by hostjob stop: not restarted")
    if status != Status.STOPPED:
        raise InvalidState(f"cannot restart container {container_id} that is {status}")
    raise InvalidState(f"cannot restart container {container_id}: its create did not finish")


def require_exec(container_id: str, status: str) -> None:
    if status == Status.PAUSED:
        raise InvalidState("cannot exec in a paused container (use resume first)")
    if not can_exec(status):
        raise ContainerNotRunning(container_id)
