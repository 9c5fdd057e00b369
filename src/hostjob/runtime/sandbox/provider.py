"""What the sandbox asks of a rootfs it does not make itself.

``RootfsProvider`` makes a container's rootfs that the runtime does not own (``hostjob
run IMAGE``'s overlay, ``hostjob.images.rootfs.ImageRootfs``), given as
``CreateOptions.rootfs``. ``prepare`` runs in ``create`` before the mount mode is set
up, and makes ``job.rootfs``; it calls ``record([kind, path])`` with the undo log's
kinds (``hostjob.runtime.sandbox.undo``) before each change it makes, so that
``delete`` undoes them like any other step, without the provider's code (also after a
crash).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from hostjob.specconv.jobconfig import JobConfig

    class Recorder(Protocol):
        """Persists undo entries (``[kind, path, *extra]``), all in one write, before
        the changes they undo are made (``Handle.record_change``)."""

        def __call__(self, *entries: list[str]) -> None: ...


class RootfsProvider:
    """A rootfs made for ``create`` by someone else than the runtime (see above)."""

    __slots__ = ()

    def prepare(self, container_id: str, job: JobConfig, record: Recorder) -> None:
        """Make ``job.rootfs``, recording each change with ``record`` first."""
        raise NotImplementedError(f"{type(self).__name__} does not make a rootfs")
