"""Garbage collection: what keeps content alive, ``rmi`` and ``prune``.

    containers/<id>.json    a ``ContainerRef``: the image content a container uses
    gc.lock                 the lease: shared by whoever uses content not named yet
                            (pulls, imports, a container being set up), taken
                            alone by prune

Roots are the names (``images.json``) and the registered containers: prune keeps
their indexes, manifests, configs, layer blobs and unpacked layers, and removes
every other blob and layer, with whatever temp file or directory a killed writer
left. Holding the lease, a pull can write blobs and layers it names only at the
end: prune waits for it and never removes them in between.
"""

from __future__ import annotations

import os
import stat

from hostjob.errors import InvalidArgument
from hostjob.images import imagespec
from hostjob.images import root as storedir
from hostjob.images.errors import ImageError
from hostjob.linux import fsremove

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.images.content import ContentStore
    from hostjob.images.layers import LayerCache
    from hostjob.images.names import NameIndex
    from hostjob.images.root import StoreRoot
    from hostjob.linux.fsutil import FileLock


class ContainerRef:
    """``containers/<id>.json``: the image content one container uses."""

    __slots__ = ("config", "id", "image", "layers", "manifest", "registered")

    def __init__(
        self,
        container_id: str,
        image: str,
        manifest: str,
        config: str,
        layers: list[str],
        registered: str,
    ) -> None:
        self.id = container_id
        self.image = image  # its name (or manifest digest) when the container was made
        self.manifest = manifest
        self.config = config
        self.layers = layers  # diffIDs, bottom first
        self.registered = registered  # RFC 3339

    @classmethod
    def from_json(cls, container_id: str, data: object) -> ContainerRef:
        """Lenient: a damaged record keeps what it still names (prune keeps more, not less)."""
        if type(data) is not dict:
            data = {}

        def text(key: str) -> str:
            value = data.get(key)
            return value if type(value) is str else ""

        layers = data.get("layers")
        diff_ids = [d for d in layers if type(d) is str] if type(layers) is list else []
        return cls(
            container_id,
            text("image"),
            text("manifest"),
            text("config"),
            diff_ids,
            text("registered"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "manifest": self.manifest,
            "config": self.config,
            "layers": self.layers,
            "registered": self.registered,
        }


class Freed:
    """What a prune (or an ``rmi``) removed."""

    __slots__ = ("blobs", "bytes", "layers")

    def __init__(self, bytes: int = 0, blobs: int = 0, layers: int = 0) -> None:
        self.bytes = bytes
        self.blobs = blobs
        self.layers = layers

    def __eq__(self, other: object) -> bool:
        return type(other) is Freed and (self.bytes, self.blobs, self.layers) == (
            other.bytes,
            other.blobs,
            other.layers,
        )

    def __repr__(self) -> str:
        return f"Freed(bytes={self.bytes}, blobs={self.blobs}, layers={self.layers})"


class Removed:
    """What ``rmi`` did: the names it dropped, the manifest they named, what was freed."""

    __slots__ = ("deleted", "freed", "untagged")

    def __init__(self, untagged: list[str], deleted: str, freed: Freed) -> None:
        self.untagged = untagged
        self.deleted = deleted
        self.freed = freed


def check_container_id(container_id: str) -> None:
    if (
        not container_id
        or "/" in container_id
        or "\0" in container_id
        or container_id in (".", "..")
        or len(container_id) > 1024
    ):
        raise InvalidArgument(f"invalid container ID {container_id!r}")


class Collector:
    """Container references, the lease, ``remove`` and ``prune`` of one store."""

    __slots__ = ("content", "layers", "names", "root")

    def __init__(
        self, root: StoreRoot, content: ContentStore, layers: LayerCache, names: NameIndex
    ) -> None:
        self.root = root
        self.content = content
        self.layers = layers
        self.names = names

    def lease(self) -> FileLock:
        """Hold while using content that is not named yet; prune waits for it."""
        self.root.ensure()
        return self.root.lock("gc.lock", shared=True)

    # --- container references -----------------------------------------------------------

    def ref_path(self, container_id: str) -> str:
        check_container_id(container_id)
        return self.root.join("containers", f"{container_id}.json")

    def register(self, ref: ContainerRef) -> None:
        """Record that a container uses an image's content; prune keeps it until
        ``unregister``."""
        path = self.ref_path(ref.id)
        with self.lease():
            # Not durable (fsutil's rule): it describes a container, which a power cut
            # ends as it ends the runtime's state; an fsync would cost every run IMAGE.
            storedir.write_json(path, ref.to_json(), durable=False)

    def unregister(self, container_id: str) -> None:
        try:
            os.unlink(self.ref_path(container_id))
        except FileNotFoundError:
            pass

    def containers(self) -> dict[str, ContainerRef]:
        out = {}
        folder = self.root.join("containers")
        for entry in storedir.listdir(folder):
            if not entry.endswith(".json") or entry.startswith("."):
                continue
            try:
                data = storedir.read_json(os.path.join(folder, entry))
            except (OSError, ValueError):
                continue
            out[entry[:-5]] = ContainerRef.from_json(entry[:-5], data)
        return out

    # --- removing ---------------------------------------------------------------------

    def remove(self, name: str, force: bool = False) -> Removed:
        """``rmi``: drop the name(s), then free what nothing uses any more.

        An image a registered container uses is refused unless ``force``.
        """
        names, digest = self.names.lookup(name)
        if not force:
            users = [c for c, ref in self.containers().items() if ref.manifest == digest]
            if users:
                raise ImageError(
                    f"image {name} is in use by container(s) {', '.join(sorted(users))}"
                )
        self.names.untag(names)
        return Removed(sorted(set(names)), digest, self.prune())

    def prune(self) -> Freed:
        """Remove every blob and layer no name or registered container uses."""
        self.root.ensure()
        freed = Freed()
        with self.root.lock("gc.lock"):
            keep_blobs, keep_layers = self._roots()
            for top, keep in (("blobs", keep_blobs), ("layers", keep_layers)):
                for algorithm in storedir.listdir(self.root.join(top)):
                    folder = self.root.join(top, algorithm)
                    for entry in storedir.listdir(folder):
                        if f"{algorithm}:{entry}" in keep:
                            continue
                        path = os.path.join(folder, entry)
                        freed.bytes += tree_size(path)
                        fsremove.remove_tree(path)
                        if entry.startswith("."):
                            continue  # a killed writer's temp: not a blob or layer
                        if top == "blobs":
                            freed.blobs += 1
                        else:
                            freed.layers += 1
            for entry in storedir.listdir(self.root.join("locks")):
                fsremove.remove_tree(self.root.join("locks", entry))
        return freed

    def discard(self, blobs: list[str], layers: list[str]) -> Freed:
        """Take back what a failed pull added: each of ``blobs`` and ``layers`` (and its
        lock file) that no name or container uses. Under prune's exclusive lock, so
        it waits for every pull in flight: one that uses the same content has named
        it by then, and it stays."""
        freed = Freed()
        if not blobs and not layers:
            return freed
        with self.root.lock("gc.lock"):
            keep_blobs, keep_layers = self._roots()
            for top, kind, given, keep in (
                ("blobs", "blob", blobs, keep_blobs),
                ("layers", "layer", layers, keep_layers),
            ):
                for digest in dict.fromkeys(given):
                    if digest in keep or not imagespec.is_digest(digest):
                        continue
                    algorithm, _, encoded = digest.partition(":")
                    path = self.root.join(top, algorithm, encoded)
                    if os.path.lexists(path):
                        freed.bytes += tree_size(path)
                        fsremove.remove_tree(path)
                        if top == "blobs":
                            freed.blobs += 1
                        else:
                            freed.layers += 1
                    lock = self.root.join("locks", f"{kind}-{algorithm}-{encoded}.lock")
                    try:
                        os.unlink(lock)
                    except FileNotFoundError:
                        pass
        return freed

    def _roots(self) -> tuple[set[str], set[str]]:
        """The blobs and layers the names and the registered containers keep."""
        keep_blobs: set[str] = set()
        keep_layers: set[str] = set()
        roots = [(r.manifest, r.index) for r in self.names.records().values()]
        for ref in self.containers().values():
            roots.append((ref.manifest, None))
            keep_layers.update(d for d in ref.layers if imagespec.is_digest(d))
            if imagespec.is_digest(ref.config):
                keep_blobs.add(ref.config)
        for manifest_digest, index_digest in roots:
            if index_digest:
                keep_blobs.add(index_digest)
            if not imagespec.is_digest(manifest_digest):
                continue
            keep_blobs.add(manifest_digest)
            try:
                manifest = self.content.manifest(manifest_digest)
            except ImageError:
                continue
            if manifest.config is not None and manifest.config.digest:
                keep_blobs.add(manifest.config.digest)
                try:
                    rootfs = self.content.config(manifest.config.digest).rootfs
                except ImageError:
                    rootfs = None
                if rootfs is not None:
                    keep_layers.update(rootfs.diff_ids or [])
            keep_blobs.update(layer.digest for layer in manifest.layers or [] if layer.digest)
        return keep_blobs, keep_layers


def tree_size(path: str) -> int:
    """The disk space a file or tree takes (its blocks), symlinks not followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * 512
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for entry in dirnames + filenames:
            try:
                total += os.lstat(os.path.join(dirpath, entry)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total
