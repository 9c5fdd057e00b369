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

import posix

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


def keep_to_the_job(rootfs: str, gid: int) -> None:
    """After ``prepare``: the provided rootfs reachable by the job's identity and root
    alone, whatever the mount mode and the mount point. Its root directory becomes
    root's, of the job's group ``gid``, 0750 (an overlay keeps that in its writable
    layer), set explicitly, never from the umask: the job reads its image, and no other
    user reaches the image, or writes into the writable layer through an image's 1777
    directory, where the rootfs is mounted (``<root>/<id>/rootfs``) or bound
    (``--mount-point``). A root job's is 0750 root:root: its programs that switch to
    another user reach it through the job's group (``--user 0:GROUP``)."""
    flags = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
    fd = posix.open(rootfs, flags)
    try:
        posix.fchown(fd, 0, gid)
        posix.fchmod(fd, 0o750)
    finally:
        posix.close(fd)
