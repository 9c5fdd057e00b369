"""An OCI image layout being written: blobs by digest, ``index.json``, and the tar of
a layout (``oci-archive:``), reproducible (sorted, a fixed mtime, owners 0:0).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import tempfile
from typing import Any

from hostjob.images import imagespec
from hostjob.images.archive import FileReader, open_checked, walk
from hostjob.linux import fsutil


class Layout:
    """An OCI image layout directory being written (blobs by digest, then index.json)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        layout_file = os.path.join(path, "oci-layout")
        if not os.path.exists(layout_file):
            fsutil.write_atomic(
                layout_file,
                imagespec.canonical_json({"imageLayoutVersion": imagespec.IMAGE_LAYOUT_VERSION}),
            )

    def blob_path(self, digest: str) -> str:
        algorithm, _, encoded = digest.partition(":")
        return os.path.join(self.path, "blobs", algorithm, encoded)

    def has(self, digest: str) -> bool:
        return os.path.exists(self.blob_path(digest))

    def add_bytes(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            fsutil.write_atomic(self.blob_path(digest), data)
        return digest

    def add_file(self, tmp: str, digest: str, mode: int = 0o644) -> None:
        """Put the blob written at ``tmp`` in place with ``mode`` (a blob there already
        keeps its mode, made as private as ``mode`` if it is more open)."""
        if self.has(digest):
            os.unlink(tmp)
            path = self.blob_path(digest)
            have = stat.S_IMODE(os.stat(path).st_mode)
            if have & ~mode:
                os.chmod(path, have & mode)
        else:
            os.chmod(tmp, mode)
            os.rename(tmp, self.blob_path(digest))

    def set_ref(self, manifest: imagespec.Descriptor, tag: str | None) -> None:
        index_path = os.path.join(self.path, "index.json")
        manifests: list[dict[str, Any]] = []
        if os.path.exists(index_path):
            with open(index_path, "rb") as f:
                index = imagespec.decode_blob(imagespec.Index, f.read(), index_path)
            for desc in index.manifests or []:
                name = (desc.annotations or {}).get(imagespec.ANNOTATION_REF_NAME)
                if tag is not None and name == tag:
                    continue
                if tag is None and name is None:
                    continue  # an untagged pack replaces the untagged image
                manifests.append(desc.to_json())
        entry = manifest.to_json()
        if tag is not None:
            entry["annotations"] = {imagespec.ANNOTATION_REF_NAME: tag}
        manifests.append(entry)
        manifests.sort(
            key=lambda d: (
                (d.get("annotations") or {}).get(imagespec.ANNOTATION_REF_NAME, ""),
                d["digest"],
            )
        )
        index_json = {"schemaVersion": 2, "mediaType": imagespec.OCI_INDEX, "manifests": manifests}
        fsutil.write_atomic(index_path, imagespec.canonical_json(index_json))


def write_archive(layout_dir: str, dest: str, epoch: int) -> None:
    """Tar an OCI layout reproducibly (sorted, fixed mtime, 0:0) to ``dest`` atomically.

    Each file keeps the permissions it has in the layout (a layer blob of private
    files is 0600 there), and the archive is as private as the most private of them:
    what only its owner could read stays so, also once the archive is unpacked."""
    folder = os.path.dirname(os.path.abspath(dest)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-archive-", dir=folder)
    try:
        with (
            os.fdopen(fd, "wb") as f,
            tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tf,
        ):
            readers = _add_layout(tf, layout_dir, epoch)
        os.chmod(tmp, 0o600 | readers)
        os.rename(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _add_layout(tf: tarfile.TarFile, layout_dir: str, epoch: int) -> int:
    """Add the layout's files; returns who may read all of them (group/other bits)."""
    readers = 0o044
    root = os.open(layout_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for entry in walk(root, layout_dir):
            if entry.name.startswith("."):
                continue
            info = tarfile.TarInfo(entry.rel)
            info.mtime = epoch
            info.uid = info.gid = 0
            if stat.S_ISDIR(entry.st.st_mode):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tf.addfile(info)
            elif stat.S_ISREG(entry.st.st_mode):
                info.mode = 0o600 | (entry.st.st_mode & 0o044)
                readers &= info.mode
                blob = open_checked(entry, layout_dir, 0)
                try:
                    info.size = os.fstat(blob).st_size
                    tf.addfile(info, FileReader(blob, layout_dir, entry.rel))  # type: ignore[arg-type]
                finally:
                    os.close(blob)
    finally:
        os.close(root)
    return readers
