"""``state``: a container's runtime-spec state document, in runc's shape, and how its
process last ended (exit code or signal, when, OOM kill) and a daemon's restarts,
which ``state`` and ``list`` show. Reads only: no lock, no change."""

from __future__ import annotations

from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.runtime.handle import Handle
    from hostjob.spec.state import State


def state(container: Handle) -> State:
    """The runtime-spec state, in runc's shape."""
    from hostjob.spec.state import OCI_VERSION, State

    current = container.status()
    record = container.record
    job = record.config if record is not None else None
    return State(
        oci_version=job.oci_version if job else OCI_VERSION,
        id=container.id,
        pid=record.pid if record is not None and current != Status.STOPPED else 0,
        status=current,
        bundle=job.bundle if job else "",
        rootfs=job.rootfs if job else "",
        created=record.created if record is not None else "",
        annotations=job.annotations if job and job.annotations else None,
        owner="",
        mount_mode=job.mount_mode if job else None,
        mount_point=job.mount_point if job else None,
        **_ending(container),
    )


def _ending(container: Handle) -> dict[str, Any]:
    """``state``'s fields on how the process last ended, and a daemon's restarts."""
    record = container.record
    if record is None:
        return {}
    out: dict[str, Any] = {}
    ended = record.exit
    if ended is not None:
        out["exit_code"] = ended.code
        out["exit_signal"] = _signal_name(ended.signal) if ended.signal else None
        out["finished_at"] = ended.finished
        out["oom_killed"] = ended.oom_killed
    daemon = record.daemon
    if daemon is not None:
        out["restart_policy"] = daemon.restart_text()
        out["restart_count"] = record.restarts or 0
        out["watcher"] = "running" if container.watcher_alive() else "gone"
    return out


def _signal_name(number: int) -> str:
    from hostjob.linux.signals import signal_name

    return signal_name(number)
