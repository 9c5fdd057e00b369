"""``hostjob pack DIR --to oci:OUT[:TAG]``: a one-layer image from a directory.

The "``FROM scratch``" way to ship host tools as a job-container image. The layer is
reproducible: entries in sorted order, every mtime the same fixed time
(``SOURCE_DATE_EPOCH`` when set, else 0), owners 0:0 and no user/group names unless
``keep_owner``, gzip with mtime 0 and no file name, canonical JSON for the config and
manifest. The same input gives the same digest, on any machine (the stdlib's zlib
always does the compressing, never isal, whose output differs).

``base`` stacks the layer on an existing image: a name in the store, or an ``oci:``,
``oci-archive:`` or ``docker-archive:`` reference.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import tempfile
import time

from hostjob.errors import ImageError, InvalidArgument, ReferenceError
from hostjob.images import reference as refs
from hostjob.spec import image as spec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO

    from hostjob.images.sources import Source, Writer

# xattrs worth shipping with host tools (file capabilities) and user metadata.
_KEPT_XATTR_PREFIXES = ("security.capability", "user.")
CHUNK = 1 << 20


class _HashWriter:
    __slots__ = ("count", "dest", "hasher")

    def __init__(self, dest: Any) -> None:
        self.dest = dest
        self.hasher = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.count += len(data)
        self.dest.write(data)
        return len(data)

    def flush(self) -> None:
        pass

    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        raise InvalidArgument(f"SOURCE_DATE_EPOCH={value!r} is not an integer") from None


def _rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _walk(root: str) -> list[str]:
    """Every path under ``root``, relative, sorted depth-first by name (bytes order)."""
    out: list[str] = []

    def visit(rel: str) -> None:
        path = os.path.join(root, rel) if rel else root
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: os.fsencode(e.name))
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            out.append(child)
            if entry.is_dir(follow_symlinks=False):
                visit(child)

    visit("")
    return out


def write_layer(
    src_dir: str,
    dest: BinaryIO,
    *,
    mtime: int = 0,
    keep_owner: bool = False,
    compresslevel: int = 6,
) -> tuple[str, str, int]:
    """Write ``src_dir`` as a gzip layer to ``dest``: ``(digest, diff_id, size)``."""
    import gzip

    if not os.path.isdir(src_dir):
        raise InvalidArgument(f"{src_dir}: not a directory")
    compressed = _HashWriter(dest)
    with gzip.GzipFile(
        filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=compresslevel
    ) as gz:
        plain = _HashWriter(gz)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
            for rel in _walk(src_dir):
                path = os.path.join(src_dir, rel)
                info = tf.gettarinfo(path, arcname=rel)
                if info is None:  # sockets and doors
                    continue
                info.mtime = mtime
                if not keep_owner:
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                if info.isdir():
                    info.name = rel  # tarfile adds the trailing slash itself
                pax = _xattrs(path)
                if pax:
                    info.pax_headers = pax
                if info.isreg():
                    with open(path, "rb") as f:
                        tf.addfile(info, f)
                else:
                    tf.addfile(info)
    return compressed.digest(), plain.digest(), compressed.count


def _xattrs(path: str) -> dict[str, str]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    out = {}
    for name in sorted(names):
        if name.startswith(_KEPT_XATTR_PREFIXES):
            value = os.getxattr(path, name, follow_symlinks=False)
            out[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return out


class _Base:
    """A base image to stack on: its manifest, config, and a way to copy its blobs."""

    def __init__(self, base: str, store_root: str | None) -> None:
        self.source: Source | None = None
        parsed = None
        try:
            parsed = refs.parse(base)
        except ReferenceError:
            pass
        if parsed is not None and not parsed.is_registry:
            self._from_source(parsed)
        else:
            from hostjob.images.store import Store

            store = Store(store_root)
            image = store.resolve(base, unpack_missing=False)
            self.manifest, self.config = image.manifest, image.config
            self.store = store

    def _from_source(self, parsed: refs.Reference) -> None:
        from hostjob.images import platforms
        from hostjob.images.sources import open_source

        source = open_source(parsed)
        self.source = source
        raw, media_type, _digest = source.top()
        media_type = media_type or spec.sniff_media_type(raw)
        if media_type in spec.INDEX_TYPES:
            index = spec.decode_blob(spec.Index, raw, "base image index")
            raw = source.manifest(platforms.choose(index.manifests or [], platforms.host()))
        self.manifest = spec.decode_blob(spec.Manifest, raw, "base image manifest")
        assert self.manifest.config is not None
        buf = _Buffer()
        source.copy_blob(self.manifest.config, buf)
        self.config = spec.decode_blob(spec.ImageConfig, bytes(buf.data), "base image config")

    def copy_blob(self, desc: spec.Descriptor, writer: Writer) -> None:
        assert desc.digest is not None
        if self.source is not None:
            self.source.copy_blob(desc, writer)
            return
        try:
            f = open(self.store.blob_path(desc.digest), "rb")  # noqa: SIM115
        except FileNotFoundError:
            raise ImageError(f"base layer blob {desc.digest} is not in the store") from None
        with f:
            while data := f.read(CHUNK):
                writer.write(data)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


class _Buffer:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


_OCI_LAYER_TYPE = {
    spec.DOCKER_LAYER: spec.OCI_LAYER,
    spec.DOCKER_LAYER_GZIP: spec.OCI_LAYER_GZIP,
    spec.DOCKER_LAYER_ZSTD: spec.OCI_LAYER_ZSTD,
}


class _Layout:
    """An OCI image layout directory being written (blobs by digest, then index.json)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        layout_file = os.path.join(path, "oci-layout")
        if not os.path.exists(layout_file):
            _atomic_write(
                layout_file, spec.canonical_json({"imageLayoutVersion": spec.IMAGE_LAYOUT_VERSION})
            )

    def blob_path(self, digest: str) -> str:
        algorithm, _, encoded = digest.partition(":")
        return os.path.join(self.path, "blobs", algorithm, encoded)

    def has(self, digest: str) -> bool:
        return os.path.exists(self.blob_path(digest))

    def add_bytes(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            _atomic_write(self.blob_path(digest), data)
        return digest

    def add_file(self, tmp: str, digest: str) -> None:
        if self.has(digest):
            os.unlink(tmp)
        else:
            os.chmod(tmp, 0o644)
            os.rename(tmp, self.blob_path(digest))

    def set_ref(self, manifest: spec.Descriptor, tag: str | None) -> None:
        index_path = os.path.join(self.path, "index.json")
        manifests: list[dict[str, Any]] = []
        if os.path.exists(index_path):
            with open(index_path, "rb") as f:
                index = spec.decode_blob(spec.Index, f.read(), index_path)
            for desc in index.manifests or []:
                name = (desc.annotations or {}).get(spec.ANNOTATION_REF_NAME)
                if tag is not None and name == tag:
                    continue
                if tag is None and name is None:
                    continue  # an untagged pack replaces the untagged image
                manifests.append(desc.to_json())
        entry = manifest.to_json()
        if tag is not None:
            entry["annotations"] = {spec.ANNOTATION_REF_NAME: tag}
        manifests.append(entry)
        manifests.sort(
            key=lambda d: (
                (d.get("annotations") or {}).get(spec.ANNOTATION_REF_NAME, ""),
                d["digest"],
            )
        )
        index_json = {"schemaVersion": 2, "mediaType": spec.OCI_INDEX, "manifests": manifests}
        _atomic_write(index_path, spec.canonical_json(index_json))


def pack(
    src_dir: str,
    to: str,
    *,
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
    workdir: str | None = None,
    labels: dict[str, str] | None = None,
    user: str | None = None,
    base: str | None = None,
    keep_owner: bool = False,
    mtime: int | None = None,
    store_root: str | None = None,
    architecture: str | None = None,
) -> dict[str, Any]:
    """Make an image of ``src_dir`` (one layer, on ``base`` if given) at ``to``.

    ``to`` is ``oci:DIR[:TAG]`` or ``oci-archive:FILE[:TAG]``. Returns
    ``{"reference", "digest", "config", "layer": {digest, diffID, size}, "size"}``.
    """
    from hostjob.images import platforms

    target = refs.parse(to)
    if target.transport not in ("oci", "oci-archive") or target.digest or target.path is None:
        raise ReferenceError(f"pack writes to oci:DIR[:TAG] or oci-archive:FILE[:TAG], not {to!r}")
    epoch = source_date_epoch() if mtime is None else mtime
    created = _rfc3339(epoch)
    for item in env or []:
        if "=" not in item or item.startswith("="):
            raise InvalidArgument(f"--env {item!r}: expected NAME=VALUE")

    workdir_tmp = None
    if target.transport == "oci-archive":
        parent = os.path.dirname(os.path.abspath(target.path)) or "."
        workdir_tmp = tempfile.mkdtemp(prefix=".hostjob-pack-", dir=parent)
        layout_dir = workdir_tmp
    else:
        layout_dir = target.path
    base_image = _Base(base, store_root) if base else None
    try:
        layout = _Layout(layout_dir)
        fd, tmp = tempfile.mkstemp(
            prefix=".layer-", dir=os.path.join(layout_dir, "blobs", "sha256")
        )
        try:
            with os.fdopen(fd, "wb") as f:
                digest, diff_id, size = write_layer(src_dir, f, mtime=epoch, keep_owner=keep_owner)
            layout.add_file(tmp, digest)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        layer = spec.Descriptor(media_type=spec.OCI_LAYER_GZIP, digest=digest, size=size)

        layers: list[spec.Descriptor] = []
        if base_image is not None:
            base_config = base_image.config.to_json()
            for desc in base_image.manifest.layers or []:
                assert desc.digest is not None
                if not layout.has(desc.digest):
                    _copy_into_layout(base_image, desc, layout)
                layers.append(
                    spec.Descriptor(
                        media_type=_OCI_LAYER_TYPE.get(desc.media_type or "", desc.media_type),
                        digest=desc.digest,
                        size=desc.size,
                    )
                )
        else:
            host = platforms.host()
            base_config = {"architecture": architecture or host.architecture, "os": "linux"}
            if host.variant and not architecture and host.architecture != "amd64":
                base_config["variant"] = host.variant
        layers.append(layer)

        config = _build_config(
            base_config,
            diff_id=diff_id,
            created=created,
            entrypoint=entrypoint,
            cmd=cmd,
            env=env,
            workdir=workdir,
            labels=labels,
            user=user,
            src_dir=src_dir,
        )
        config_raw = spec.canonical_json(config)
        config_digest = layout.add_bytes(config_raw)
        manifest = {
            "schemaVersion": 2,
            "mediaType": spec.OCI_MANIFEST,
            "config": {
                "mediaType": spec.OCI_CONFIG,
                "digest": config_digest,
                "size": len(config_raw),
            },
            "layers": [d.to_json() for d in layers],
        }
        manifest_raw = spec.canonical_json(manifest)
        manifest_digest = layout.add_bytes(manifest_raw)
        layout.set_ref(
            spec.Descriptor(
                media_type=spec.OCI_MANIFEST, digest=manifest_digest, size=len(manifest_raw)
            ),
            target.tag,
        )
        if target.transport == "oci-archive":
            _write_archive(layout_dir, target.path, epoch)
    finally:
        if base_image is not None:
            base_image.close()
        if workdir_tmp is not None:
            from hostjob import fsutil

            fsutil.remove_tree(workdir_tmp, ignore_errors=True)
    return {
        "reference": str(target),
        "digest": manifest_digest,
        "config": config_digest,
        "layer": {"digest": digest, "diffID": diff_id, "size": size},
        "size": sum(d.size or 0 for d in layers),
    }


def _copy_into_layout(base: _Base, desc: spec.Descriptor, layout: _Layout) -> None:
    assert desc.digest is not None
    fd, tmp = tempfile.mkstemp(prefix=".base-", dir=os.path.join(layout.path, "blobs", "sha256"))
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashWriter(f)
            base.copy_blob(desc, writer)
        if writer.digest() != desc.digest:
            from hostjob.errors import DigestMismatch

            raise DigestMismatch(f"base layer {desc.digest} has digest {writer.digest()}")
        layout.add_file(tmp, desc.digest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _build_config(
    base: dict[str, Any],
    *,
    diff_id: str,
    created: str,
    entrypoint: list[str] | None,
    cmd: list[str] | None,
    env: list[str] | None,
    workdir: str | None,
    labels: dict[str, str] | None,
    user: str | None,
    src_dir: str,
) -> dict[str, Any]:
    config = dict(base)
    container = dict(config.get("config") or {})
    if env:
        merged: dict[str, str] = {}
        for item in [*(container.get("Env") or []), *env]:
            key, _, value = item.partition("=")
            merged.pop(key, None)
            merged[key] = value
        container["Env"] = [f"{k}={v}" for k, v in merged.items()]
    if entrypoint is not None:
        container["Entrypoint"] = entrypoint
        if cmd is None:
            container.pop("Cmd", None)  # Docker resets Cmd when Entrypoint changes
    if cmd is not None:
        container["Cmd"] = cmd
    if workdir is not None:
        container["WorkingDir"] = workdir
    if user is not None:
        container["User"] = user
    if labels:
        container["Labels"] = {**(container.get("Labels") or {}), **labels}
    if container:
        config["config"] = container
    rootfs = dict(config.get("rootfs") or {"type": "layers"})
    rootfs["type"] = "layers"
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), diff_id]
    config["rootfs"] = rootfs
    config["history"] = [
        *(config.get("history") or []),
        {
            "created": created,
            "created_by": "hostjob pack",
        },
    ]
    config["created"] = created
    return config


def _atomic_write(path: str, data: bytes) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_archive(layout_dir: str, dest: str, epoch: int) -> None:
    """Tar an OCI layout reproducibly (sorted, fixed mtime, 0:0) to ``dest`` atomically."""
    folder = os.path.dirname(os.path.abspath(dest)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-archive-", dir=folder)
    try:
        with (
            os.fdopen(fd, "wb") as f,
            tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tf,
        ):
            for rel in _walk(layout_dir):
                path = os.path.join(layout_dir, rel)
                st = os.lstat(path)
                if os.path.basename(rel).startswith("."):
                    continue
                info = tarfile.TarInfo(rel)
                info.mtime = epoch
                info.uid = info.gid = 0
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tf.addfile(info)
                else:
                    info.mode = 0o644
                    info.size = st.st_size
                    with open(path, "rb") as src:
                        tf.addfile(info, src)
        os.chmod(tmp, 0o644)
        os.rename(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
