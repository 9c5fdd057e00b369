"""``hostjob pack DIR --to oci:OUT[:TAG]``: a one-layer image from a directory
(``--to docker://HOST/NAME:TAG``: packed, then pushed to a registry).

The "``FROM scratch``" way to ship host tools as a job-container image. The layer is
reproducible: entries in sorted order, every mtime the same fixed time
(``SOURCE_DATE_EPOCH`` when set, else 0), owners 0:0 and no user/group names unless
``keep_owner``, gzip with mtime 0 and no file name, canonical JSON for the config and
manifest. The same input gives the same digest, on any machine (the stdlib's zlib
always does the compressing, never isal, whose output differs).

The directory may belong to another user, who may change it while root packs it
(SPEC §10): it is walked and read fd-relative, never following a symlink, and each
file read is the one the walk saw (a swapped entry fails the pack). Without
``keep_owner`` setuid/setgid bits and file capabilities are cleared: with owners
0:0 they would turn a user's program into a root one.

``base`` stacks the layer on an existing image: a name in the store, or an ``oci:``,
``oci-archive:`` or ``docker-archive:`` reference.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tarfile
import tempfile

from hostjob import fsutil
from hostjob.errors import ImageError, InvalidArgument, InvalidReference
from hostjob.images import reference as refs
from hostjob.images.content import Digester
from hostjob.spec import image as spec
from hostjob.units import rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, BinaryIO

    from hostjob.images.content import Writer
    from hostjob.images.sources import Source

# xattrs worth shipping with host tools (file capabilities) and user metadata.
_KEPT_XATTR_PREFIXES = ("security.capability", "user.")
CHUNK = 1 << 20


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    try:
        return max(0, int(value)) if value else 0
    except ValueError as err:
        raise InvalidArgument(f"SOURCE_DATE_EPOCH={value!r} is not an integer") from err


class _Entry:
    """One entry of a walk: its path in the layer, its ``lstat``, the directory that
    holds it (an fd) and, for a directory, the directory itself (an fd, checked)."""

    __slots__ = ("dir_fd", "fd", "name", "rel", "st")

    def __init__(self, rel: str, name: str, dir_fd: int, st: os.stat_result) -> None:
        self.rel = rel
        self.name = name
        self.dir_fd = dir_fd
        self.st = st
        self.fd = -1


def _changed(what: str, rel: str) -> ImageError:
    return ImageError(
        f"{what}/{rel} changed while it was being packed (replaced, moved or removed):"
        " nothing was packed"
    )


def _open_checked(entry: _Entry, what: str, flags: int) -> int:
    """Open ``entry`` relative to its directory without following a symlink, and make
    sure it is the very file the walk saw (device, inode, type): a file swapped for
    a symlink or another file in between is an error, never read."""
    flags |= os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.name, flags, dir_fd=entry.dir_fd)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise _changed(what, entry.rel) from err
    except OSError as err:
        if err.errno == errno.ELOOP:  # a symlink now
            raise _changed(what, entry.rel) from err
        raise ImageError(f"cannot read {what}/{entry.rel}: {err.strerror}") from err
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)) != (
        entry.st.st_dev,
        entry.st.st_ino,
        stat.S_IFMT(entry.st.st_mode),
    ):
        os.close(fd)
        raise _changed(what, entry.rel)
    return fd


def _walk(dir_fd: int, what: str, prefix: str = "") -> Iterator[_Entry]:
    """Every entry below the directory ``dir_fd``, depth-first, sorted by name (bytes
    order). Fd-relative, never through a path and never following a symlink: another
    user who can write the tree may swap any part of it while we walk (SPEC §10).
    A directory's entry carries its own fd (``entry.fd``) while its children come."""
    try:
        with os.scandir(dir_fd) as it:
            names = sorted((e.name for e in it), key=os.fsencode)
    except OSError as err:
        raise ImageError(f"cannot list {what}/{prefix}: {err.strerror}") from err
    for name in names:
        rel = f"{prefix}/{name}" if prefix else name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as err:
            raise _changed(what, rel) from err
        entry = _Entry(rel, name, dir_fd, st)
        if not stat.S_ISDIR(st.st_mode):
            yield entry
            continue
        entry.fd = _open_checked(entry, what, os.O_DIRECTORY)
        try:
            yield entry
            yield from _walk(entry.fd, what, rel)
        finally:
            os.close(entry.fd)


class _FileReader:
    """A checked file's bytes for ``tarfile.addfile``: exactly the size it had when
    opened, or an error if it shrinks meanwhile."""

    __slots__ = ("fd", "rel", "what")

    def __init__(self, fd: int, what: str, rel: str) -> None:
        self.fd = fd
        self.what = what
        self.rel = rel

    def read(self, size: int) -> bytes:
        chunks = []
        while size > 0:
            data = os.read(self.fd, min(size, CHUNK))
            if not data:
                raise _changed(self.what, self.rel)  # shorter than its size
            chunks.append(data)
            size -= len(data)
        return b"".join(chunks)


class _LayerWriter:
    """Adds walked entries to a tar as ``tarfile.gettarinfo`` would describe them
    (hardlinks, devices, symlinks), but from the checked fds of the walk."""

    __slots__ = ("inodes", "keep_owner", "mtime", "tar", "what")

    def __init__(self, tar: tarfile.TarFile, what: str, mtime: int, keep_owner: bool) -> None:
        self.tar = tar
        self.what = what
        self.mtime = mtime
        self.keep_owner = keep_owner
        self.inodes: dict[tuple[int, int], str] = {}

    def add(self, entry: _Entry) -> None:
        mode = entry.st.st_mode
        if stat.S_ISREG(mode):
            fd = _open_checked(entry, self.what, 0)
            try:
                self._add(entry, os.fstat(fd), fd)
            finally:
                os.close(fd)
        elif stat.S_ISDIR(mode):
            self._add(entry, os.fstat(entry.fd), entry.fd)
        elif stat.S_ISSOCK(mode):
            return  # tar has no sockets
        else:
            self._add(entry, entry.st, -1)

    def _add(self, entry: _Entry, st: os.stat_result, fd: int) -> None:
        import grp
        import pwd

        info = tarfile.TarInfo(entry.rel)
        mode = st.st_mode
        if stat.S_ISREG(mode):
            inode = (st.st_ino, st.st_dev)
            if st.st_nlink > 1 and inode in self.inodes and entry.rel != self.inodes[inode]:
                info.type = tarfile.LNKTYPE
                info.linkname = self.inodes[inode]
            else:
                info.type = tarfile.REGTYPE
                info.size = st.st_size
                self.inodes[inode] = entry.rel
        elif stat.S_ISDIR(mode):
            info.type = tarfile.DIRTYPE
        elif stat.S_ISFIFO(mode):
            info.type = tarfile.FIFOTYPE
        elif stat.S_ISLNK(mode):
            info.type = tarfile.SYMTYPE
            try:
                info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
            except OSError as err:  # not a symlink any more
                raise _changed(self.what, entry.rel) from err
        else:
            info.type = tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE
            info.devmajor = os.major(st.st_rdev)
            info.devminor = os.minor(st.st_rdev)
        info.mtime = self.mtime
        if self.keep_owner:
            info.uid, info.gid = st.st_uid, st.st_gid
            try:
                info.uname = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                pass
            try:
                info.gname = grp.getgrgid(st.st_gid).gr_name
            except KeyError:
                pass
            info.mode = mode
        else:
            # Owners become 0:0, so a setuid or setgid bit would make a user's program
            # a root one: privilege bits travel only with their owner (--keep-owner).
            info.mode = mode & ~(stat.S_ISUID | stat.S_ISGID)
        pax = _xattrs(fd, self.keep_owner) if fd >= 0 else {}
        if pax:
            info.pax_headers = pax
        if info.type == tarfile.REGTYPE:
            self.tar.addfile(info, _FileReader(fd, self.what, entry.rel))  # type: ignore[arg-type]
        else:
            self.tar.addfile(info)


def write_layer(
    src_dir: str,
    dest: BinaryIO,
    *,
    mtime: int = 0,
    keep_owner: bool = False,
    compresslevel: int = 6,
) -> tuple[str, str, int]:
    """Write ``src_dir`` as a gzip layer to ``dest``: ``(digest, diff_id, size)``.

    Read fd-relative (``_walk``): a tree another user can write may change under us,
    which fails the pack with one line but never puts a file from outside it (a
    symlink's target) in the layer. Without ``keep_owner`` setuid and setgid bits,
    and file capabilities, are cleared."""
    import gzip

    try:
        root = os.open(src_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise InvalidArgument(f"{src_dir}: not a directory") from err
    except OSError as err:
        raise ImageError(f"cannot read {src_dir}: {err.strerror}") from err
    what = src_dir.rstrip("/") or "/"
    try:
        compressed = Digester(dest)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=compresslevel
        ) as gz:
            plain = Digester(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tf:  # type: ignore[call-overload]
                layer = _LayerWriter(tf, what, mtime, keep_owner)
                for entry in _walk(root, what):
                    layer.add(entry)
    finally:
        os.close(root)
    return compressed.digest(), plain.digest(), compressed.count


def _xattrs(fd: int, keep_owner: bool) -> dict[str, str]:
    """The kept xattrs of an open file or directory, as PAX headers. File capabilities
    are a privilege like a setuid bit: kept only with the owner."""
    try:
        names = os.listxattr(fd)
    except OSError:
        return {}
    out = {}
    for name in sorted(names):
        if name == "security.capability" and not keep_owner:
            continue
        if name.startswith(_KEPT_XATTR_PREFIXES):
            try:
                value = os.getxattr(fd, name)
            except OSError:
                continue  # removed meanwhile
            out[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return out


class _Base:
    """A base image to stack on: its manifest, config, and a way to copy its blobs."""

    def __init__(self, base: str, store_root: str | None) -> None:
        self.source: Source | None = None
        parsed = None
        try:
            parsed = refs.parse(base)
        except InvalidReference:
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
        from hostjob.images.sources import open_local

        source = open_local(parsed)
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
            f = self.store.content.open(desc.digest)
        except ImageError as err:
            raise ImageError(f"base layer blob {desc.digest} is not in the store") from err
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
            fsutil.write_atomic(
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
            fsutil.write_atomic(self.blob_path(digest), data)
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
        fsutil.write_atomic(index_path, spec.canonical_json(index_json))


class PackResult:
    """What ``pack`` made: the image's reference and digests, its new layer's."""

    __slots__ = ("config", "diff_id", "digest", "layer_digest", "layer_size", "reference", "size")

    def __init__(
        self,
        reference: str,
        digest: str,
        config: str,
        layer: tuple[str, str, int],
        size: int,
    ) -> None:
        self.reference = reference  # where it was written (or pushed)
        self.digest = digest  # the manifest's
        self.config = config  # the config's: the image ID
        self.layer_digest, self.diff_id, self.layer_size = layer  # the packed layer's
        self.size = size  # of every (compressed) layer

    @property
    def layer(self) -> tuple[str, str, int]:
        return self.layer_digest, self.diff_id, self.layer_size

    def __repr__(self) -> str:
        return f"PackResult({self.reference!r}, {self.digest!r})"


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
    push_options: dict[str, Any] | None = None,
    stop_signal: str | None = None,
) -> PackResult:
    """Make an image of ``src_dir`` (one layer, on ``base`` if given) at ``to``.

    ``to`` is ``oci:DIR[:TAG]``, ``oci-archive:FILE[:TAG]``, or
    ``docker://HOST[:PORT]/NAME[:TAG]``: packed into a temporary layout, then pushed
    (``hostjob.images.push.push`` with ``push_options``: creds, tls_verify,
    plain_http, docker_config, progress).
    """

    def to_layout(dest: str) -> PackResult:
        return _pack_layout(
            src_dir, dest, entrypoint=entrypoint, cmd=cmd, env=env, workdir=workdir,
            labels=labels, user=user, base=base, keep_owner=keep_owner, mtime=mtime,
            store_root=store_root, architecture=architecture, stop_signal=stop_signal,
        )  # fmt: skip

    if not to.startswith("docker://"):
        return to_layout(to)
    from hostjob.images import push

    push.target(to)  # a bad reference fails before anything is packed
    layout = tempfile.mkdtemp(prefix="hostjob-pack-")
    try:
        packed = to_layout(f"oci:{layout}:pack")
        pushed = push.push(f"oci:{layout}:pack", to, **(push_options or {}))
    finally:
        fsutil.remove_tree(layout, ignore_errors=True)
    packed.reference = pushed.reference
    return packed


def _pack_layout(
    src_dir: str,
    to: str,
    *,
    entrypoint: list[str] | None,
    cmd: list[str] | None,
    env: list[str] | None,
    workdir: str | None,
    labels: dict[str, str] | None,
    user: str | None,
    base: str | None,
    keep_owner: bool,
    mtime: int | None,
    store_root: str | None,
    architecture: str | None,
    stop_signal: str | None = None,
) -> PackResult:
    from hostjob.images import platforms

    target = refs.parse(to)
    if target.transport not in ("oci", "oci-archive") or target.digest or target.path is None:
        raise InvalidReference(
            "pack writes to oci:DIR[:TAG], oci-archive:FILE[:TAG] or"
            f" docker://HOST/NAME[:TAG], not {to!r}"
        )
    epoch = source_date_epoch() if mtime is None else mtime
    created = rfc3339(epoch)
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
            stop_signal=stop_signal,
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
            fsutil.remove_tree(workdir_tmp, ignore_errors=True)
    return PackResult(
        str(target),
        manifest_digest,
        config_digest,
        (digest, diff_id, size),
        sum(d.size or 0 for d in layers),
    )


def _copy_into_layout(base: _Base, desc: spec.Descriptor, layout: _Layout) -> None:
    assert desc.digest is not None
    fd, tmp = tempfile.mkstemp(prefix=".base-", dir=os.path.join(layout.path, "blobs", "sha256"))
    try:
        with os.fdopen(fd, "wb") as f:
            writer = Digester(f)
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
    stop_signal: str | None = None,
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
    if stop_signal is not None:
        container["StopSignal"] = stop_signal
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


def _write_archive(layout_dir: str, dest: str, epoch: int) -> None:
    """Tar an OCI layout reproducibly (sorted, fixed mtime, 0:0) to ``dest`` atomically."""
    folder = os.path.dirname(os.path.abspath(dest)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-archive-", dir=folder)
    try:
        with (
            os.fdopen(fd, "wb") as f,
            tarfile.open(fileobj=f, mode="w|", format=tarfile.PAX_FORMAT) as tf,
        ):
            _add_layout(tf, layout_dir, epoch)
        os.chmod(tmp, 0o644)
        os.rename(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _add_layout(tf: tarfile.TarFile, layout_dir: str, epoch: int) -> None:
    root = os.open(layout_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for entry in _walk(root, layout_dir):
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
                info.mode = 0o644
                blob = _open_checked(entry, layout_dir, 0)
                try:
                    info.size = os.fstat(blob).st_size
                    tf.addfile(info, _FileReader(blob, layout_dir, entry.rel))  # type: ignore[arg-type]
                finally:
                    os.close(blob)
    finally:
        os.close(root)
