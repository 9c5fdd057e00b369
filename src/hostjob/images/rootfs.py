"""An image container's root filesystem: the image's layers under a fresh writable
layer, mounted (overlayfs, ``hostjob.images.overlay``) at the container's rootfs path.

    rw/<id>/upper, work      the writable layer, thrown away with the container
    containers/<id>.json     the container's reference: prune keeps its content

``ImageRootfs`` is what ``hostjob run IMAGE`` hands the runtime as
``CreateOptions.rootfs`` (the runtime's ``RootfsProvider``): its ``prepare`` records
each change with the runtime's own undo kinds before making it -- remove the tree
``rw/<id>``, remove the reference, unmount the rootfs -- so ``delete`` undoes all of
it, also ``delete --force`` after a crash, in a process that never imports the image
code. The runtime knows nothing of the store: only paths and undo kinds.
"""

from __future__ import annotations

import os

from hostjob import faults
from hostjob.errors import MountError
from hostjob.images.gc import ContainerRef
from hostjob.images.overlay import mount_overlay, unmount
from hostjob.linux import fsremove, fsutil
from hostjob.linux.mountinfo import is_mountpoint
from hostjob.runtime.sandbox.provider import RootfsProvider
from hostjob.units import rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.images.gc import Collector
    from hostjob.images.resolve import ResolvedImage
    from hostjob.runtime.sandbox.provider import Recorder
    from hostjob.specconv.jobconfig import JobConfig


class ContainerRootfs:
    """A container's overlay: ``<rw_dir>/{upper,work}`` over layer dirs (bottom first).

    ``mount()`` makes the dirs (fresh), an empty lower for an image with no layers,
    and mounts at ``target``; ``unmount()`` unmounts and removes ``rw_dir``. Both are
    idempotent, so a ``delete --force`` after a crash cleans up.
    """

    __slots__ = ("layers", "rw_dir", "target")

    def __init__(self, layers: list[str], rw_dir: str, target: str) -> None:
        self.layers = layers
        self.rw_dir = os.path.abspath(rw_dir)
        self.target = os.path.abspath(target)

    @property
    def upper(self) -> str:
        return os.path.join(self.rw_dir, "upper")

    @property
    def work(self) -> str:
        return os.path.join(self.rw_dir, "work")

    def mount(self, volatile: bool = True, method: str = "auto") -> str:
        """Mount; returns the method used (``hostjob.images.overlay.METHODS``)."""
        if is_mountpoint(self.target):
            raise MountError(f"{self.target} is already a mount point")
        if os.path.exists(self.rw_dir):
            # fd-relative, never across a mount: the upper dir holds what a container wrote.
            fsremove.remove_tree(self.rw_dir)
        fsutil.ensure_dir(os.path.dirname(self.rw_dir), 0o700)  # rw/: root's, whatever the umask
        # Every mode set, never left to the umask (under umask 077 the overlay's root,
        # the upper directory's, would shut a non-root job out of its own image).
        os.mkdir(self.rw_dir, 0o700)
        os.mkdir(self.upper, 0o755)
        os.chmod(self.upper, 0o755)
        os.mkdir(self.work, 0o700)
        fsutil.ensure_dir(self.target, 0o755)
        faults.point("create:before-overlay")  # the writable layer made, not mounted yet
        layers = self.layers
        if not layers:
            empty = os.path.join(self.rw_dir, "empty")
            os.mkdir(empty, 0o755)
            os.chmod(empty, 0o755)
            layers = [empty]
        try:
            return mount_overlay(
                layers, self.upper, self.work, self.target, volatile=volatile, method=method
            )
        except BaseException:
            fsremove.remove_tree(self.rw_dir, ignore_errors=True)
            raise

    def unmount(self, remove_target: bool = False) -> None:
        unmount(self.target)
        if os.path.lexists(self.rw_dir):
            fsremove.remove_tree(self.rw_dir, ignore_errors=True)
        if remove_target:
            try:
                os.rmdir(self.target)
            except OSError:
                pass


class MountedRootfs:
    """What ``ImageRootfs.mount`` made."""

    __slots__ = ("image", "manifest", "method", "target", "upper", "work")

    def __init__(self, rootfs: ContainerRootfs, method: str, image: ResolvedImage) -> None:
        self.target = rootfs.target
        self.upper = rootfs.upper
        self.work = rootfs.work
        self.method = method
        self.image = image.name
        self.manifest = image.manifest_digest


def rw_dir(gc: Collector, container_id: str) -> str:
    """Where a container's writable layer lives: ``rw/<id>`` in the store."""
    gc.ref_path(container_id)  # the ID's check
    return gc.root.join("rw", container_id)


class ImageRootfs(RootfsProvider):
    """The rootfs of an image container: a ``RootfsProvider`` for the runtime."""

    __slots__ = ("gc", "image", "volatile")

    def __init__(self, gc: Collector, image: ResolvedImage, *, volatile: bool = True) -> None:
        self.gc = gc
        self.image = image
        self.volatile = volatile  # no syncs to the upper dir: it dies with the container

    def prepare(self, container_id: str, job: JobConfig, record: Recorder) -> None:
        """Mount the image at ``job.rootfs``, each change recorded for undo first."""
        from hostjob.runtime.sandbox.undo import REMOVE, REMOVE_TREE, UNMOUNT

        upper_dir = rw_dir(self.gc, container_id)
        record(
            [REMOVE_TREE, upper_dir],
            [REMOVE, fsutil.canonical(self.gc.ref_path(container_id))],
            [UNMOUNT, fsutil.canonical(job.rootfs)],
        )
        self.mount(container_id, job.rootfs, rw=upper_dir)

    def mount(
        self, container_id: str, target: str, *, rw: str | None = None, method: str = "auto"
    ) -> MountedRootfs:
        """Register the container's use of the image (prune keeps its content), then
        mount its overlay at ``target`` with a fresh writable layer in ``rw`` (default
        ``rw/<id>``). Undo with ``unmount_image``; a failed mount registers nothing."""
        image = self.image
        rootfs = ContainerRootfs(image.layer_dirs, rw or rw_dir(self.gc, container_id), target)
        with self.gc.lease():
            self.gc.register(
                ContainerRef(
                    container_id,
                    image.name,
                    image.manifest_digest,
                    image.config_digest,
                    image.diff_ids,
                    rfc3339(),
                )
            )
            try:
                method = rootfs.mount(volatile=self.volatile, method=method)
            except BaseException:
                self.gc.unregister(container_id)
                raise
        return MountedRootfs(rootfs, method, image)


def unmount_image(gc: Collector, container_id: str, target: str, *, rw: str | None = None) -> None:
    """Unmount a container's overlay, remove its writable layer, unregister it
    (idempotent: what ``delete`` does through the undo entries, for library users)."""
    ContainerRootfs([], rw or rw_dir(gc, container_id), target).unmount()
    gc.unregister(container_id)
