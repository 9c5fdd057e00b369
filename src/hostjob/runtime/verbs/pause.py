"""``pause`` and ``resume``: every process of the job frozen, and thawed again, through
the job cgroup's freezer (runc's ``pause`` and ``resume``). The status reads the
freezer, so the record does not change."""

from __future__ import annotations

from hostjob.runtime import status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle


def pause(container: Handle) -> None:
    """Freeze every process of the job."""
    with container.store.lock(container.id):
        container.reload()
        status.require_pause(container.id, container.status())
        container.cgroup().freeze()


def resume(container: Handle) -> None:
    """Thaw a paused job."""
    with container.store.lock(container.id):
        container.reload()
        status.require_resume(container.id, container.status())
        container.cgroup().thaw()
