"""The unpacked-layer cache, by diffID (containerd's snapshots, for overlayfs).

    layers/<alg>/<diffhex>/
        diff/             the tree, in overlayfs's format (an overlay lower dir)
        layer.json        a ``LayerRecord``: what unpacking it found
    locks/layer-*.lock    one unpacker per layer

A layer is unpacked once from its verified blob (``hostjob.images.unpack``) under its
own lock, into a temp sibling renamed into place only when the blob's digest and size
and the layer's diffID matched: a reader never sees half a layer, and whoever gets
the lock second finds the work done. ``layer.json`` is written inside the temp dir,
so a layer without it is a leftover, never a layer. Layer trees are not fsynced file
by file (it would cost more than the unpack): a layer is always re-creatable from
its blob.
"""

from __future__ import annotations

import os

from hostjob.images import root as storedir
from hostjob.images.content import split_digest
from hostjob.images.errors import ImageError, ImageNotFound
from hostjob.linux import fsremove, fsutil
from hostjob.units import rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.images.content import ContentStore
    from hostjob.images.limits import Budget
    from hostjob.images.root import StoreRoot
    from hostjob.images.unpack import LayerStats


class LayerRecord:
    """``layer.json``: a layer's digests and sizes, and when it was unpacked."""

    __slots__ = (
        "compressed_size",
        "compression",
        "diff_id",
        "digest",
        "entries",
        "size",
        "unpacked",
    )

    def __init__(
        self,
        diff_id: str,
        digest: str,
        *,
        compressed_size: int,
        size: int,
        entries: int,
        compression: str,
        unpacked: str,
    ) -> None:
        self.diff_id = diff_id
        self.digest = digest  # the (compressed) blob it came from
        self.compressed_size = compressed_size
        self.size = size  # of the tar
        self.entries = entries
        self.compression = compression
        self.unpacked = unpacked  # RFC 3339

    @classmethod
    def from_stats(cls, stats: LayerStats, unpacked: str) -> LayerRecord:
        return cls(
            stats.diff_id,
            stats.digest,
            compressed_size=stats.compressed_size,
            size=stats.size,
            entries=stats.entries,
            compression=stats.compression,
            unpacked=unpacked,
        )

    @classmethod
    def from_json(cls, data: object, what: str) -> LayerRecord:
        if type(data) is not dict:
            raise ImageError(f"{what} is corrupt: not an object")
        try:
            return cls(
                _text(data, "diff_id"),
                _text(data, "digest"),
                compressed_size=_number(data, "compressed_size"),
                size=_number(data, "size"),
                entries=_number(data, "entries"),
                compression=_text(data, "compression"),
                unpacked=_text(data, "unpacked"),
            )
        except (KeyError, TypeError) as err:
            raise ImageError(f"{what} is corrupt: bad or missing {err}") from err

    def to_json(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}


def _text(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if type(value) is not str:
        raise TypeError(key)
    return value


def _number(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if type(value) is not int:
        raise TypeError(key)
    return value


class LayerCache:
    """The unpacked layers of one store."""

    __slots__ = ("content", "root")

    def __init__(self, root: StoreRoot, content: ContentStore) -> None:
        self.root = root
        self.content = content

    def path(self, diff_id: str) -> str:
        """``layers/<alg>/<hex>``; the tree is its ``diff`` subdirectory."""
        algorithm, encoded = split_digest(diff_id)
        return self.root.join("layers", algorithm, encoded)

    def dir(self, diff_id: str) -> str:
        """The layer's tree (an overlay lower dir)."""
        return os.path.join(self.path(diff_id), "diff")

    def has(self, diff_id: str) -> bool:
        return os.path.exists(os.path.join(self.path(diff_id), "layer.json"))

    def record(self, diff_id: str) -> LayerRecord:
        path = os.path.join(self.path(diff_id), "layer.json")
        try:
            data = storedir.read_json(path)
        except FileNotFoundError as err:
            raise ImageNotFound(f"layer {diff_id} is not unpacked") from err
        except ValueError as err:
            raise ImageError(f"{path} is corrupt: {err}") from err
        return LayerRecord.from_json(data, path)

    def ensure(
        self,
        diff_id: str,
        blob_digest: str,
        size: int | None = None,
        on_bytes: Callable[[int], None] | None = None,
        budget: Budget | None = None,
    ) -> bool:
        """Unpack blob ``blob_digest`` as layer ``diff_id`` unless it is there already,
        charging what it writes to ``budget`` (else the store's default for one image).

        Returns True when this call unpacked it.
        """
        from hostjob.images import limits, unpack

        dest = self.path(diff_id)
        if self.has(diff_id):
            return False
        self.root.ensure()
        fsutil.ensure_dir(os.path.dirname(dest))
        algorithm, encoded = split_digest(diff_id)
        with self.root.lock(f"locks/layer-{algorithm}-{encoded}.lock"):
            if self.has(diff_id):
                return False
            if os.path.lexists(dest):  # a leftover without layer.json: not a layer
                fsremove.remove_tree(dest)
            # A killed unpack's temp dir (``unpack_to`` names it after the layer).
            storedir.remove_stale(os.path.dirname(dest), f".tmp-{encoded}-")

            def write_record(tmp: str, stats: unpack.LayerStats) -> None:
                record = LayerRecord.from_stats(stats, rfc3339())
                storedir.write_json(os.path.join(tmp, "layer.json"), record.to_json())

            try:
                blob = open(self.content.path(blob_digest), "rb")  # noqa: SIM115
            except FileNotFoundError as err:
                raise ImageNotFound(f"layer blob {blob_digest} is not in the store") from err
            with blob:
                unpack.unpack_to(
                    blob,
                    dest,
                    digest=blob_digest,
                    size=size,
                    diff_id=diff_id,
                    on_bytes=on_bytes,
                    write_meta=write_record,
                    budget=budget or limits.budget(self.root.path),
                )
        return True
