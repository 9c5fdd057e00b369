"""Where images come from: OCI layouts (directory or archive) and ``docker save`` tars.

A source answers three questions for ``Store.pull``: the top-level manifest or index
(``top``), a child manifest of an index (``manifest``) and a blob's bytes
(``copy_blob``, into a verifying ``content.Digester``). Registries are the same shape
(``hostjob.images.registry.RegistrySource``). Archives are read in place through
their members' offsets; nothing is extracted.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import tarfile
from typing import TYPE_CHECKING, BinaryIO, Protocol

from hostjob.images import imagespec
from hostjob.images import reference as refs
from hostjob.images.content import Digester
from hostjob.images.errors import ImageError, ImageNotFound, InvalidReference

if TYPE_CHECKING:
    from hostjob.images.content import Readable, Writer
    from hostjob.images.options import RegistryOptions
    from hostjob.images.reference import Reference
    from hostjob.images.trust.formats import Signature
    from hostjob.images.trust.registries_d import RegistriesD
    from hostjob.images.trust.scopes import ImageScope

    class Source(Protocol):
        description: str
        name_hint: str | None

        def top(self) -> tuple[bytes, str | None, str | None]: ...
        def manifest(self, desc: imagespec.Descriptor) -> bytes: ...
        def copy_blob(self, desc: imagespec.Descriptor, writer: Writer) -> None: ...
        def signatures(
            self, digest: str, scope: ImageScope, config: RegistriesD
        ) -> list[Signature]: ...
        def close(self) -> None: ...


CHUNK = 1 << 20


class _Slice:
    """A bounded reader over ``[offset, offset+size)`` of a file, by ``pread``: it has
    no shared file position, so threads may read several members at once."""

    __slots__ = ("end", "fd", "pos")

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self.fd = fd
        self.pos = offset
        self.end = offset + size

    def read(self, size: int = -1, /) -> bytes:
        left = self.end - self.pos
        if size < 0 or size > left:
            size = left
        if size <= 0:
            return b""
        data = os.pread(self.fd, size, self.pos)
        if not data:
            raise ImageError("archive ended inside a member")
        self.pos += len(data)
        return data


class DirFiles:
    """Files of a directory tree, by relative path; symlinks may not leave it."""

    def __init__(self, root: str) -> None:
        if not os.path.isdir(root):
            raise ImageNotFound(f"{root}: no such directory")
        self.root = os.path.realpath(root)

    def _path(self, rel: str) -> str:
        path = os.path.realpath(os.path.join(self.root, rel))
        if not path.startswith(self.root + os.sep):
            raise ImageError(f"{rel!r} points outside {self.root}")
        return path

    def exists(self, rel: str) -> bool:
        return os.path.isfile(self._path(rel))

    def size(self, rel: str) -> int:
        return os.path.getsize(self._path(rel))

    def open(self, rel: str) -> BinaryIO:
        try:
            return open(self._path(rel), "rb")
        except FileNotFoundError as err:
            raise ImageError(f"{self.root}: missing {rel}") from err

    def read(self, rel: str, limit: int = 64 << 20) -> bytes:
        with self.open(rel) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ImageError(f"{rel} is too large for metadata")
        return data

    def close(self) -> None:
        pass


class TarFiles:
    """Members of an uncompressed tar, read in place by offset."""

    def __init__(self, path: str) -> None:
        try:
            self.f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as err:
            raise ImageNotFound(f"{path}: {err.strerror}") from err
        self.path = path
        try:
            tf = tarfile.open(fileobj=self.f, mode="r:")  # noqa: SIM115 - an index only
            self.members = {_norm(m.name): m for m in tf.getmembers()}
        except (tarfile.TarError, EOFError) as err:
            self.f.close()
            raise ImageError(f"{path} is not an (uncompressed) tar archive: {err}") from err

    def _member(self, rel: str) -> tarfile.TarInfo:
        name = _norm(rel)
        for _ in range(16):
            m = self.members.get(name)
            if m is None:
                raise ImageError(f"{self.path}: missing {rel}")
            if m.isreg():
                return m
            if not m.issym():
                raise ImageError(f"{self.path}: {rel} is not a file")
            name = _norm(posixpath.join(posixpath.dirname(name), m.linkname))
        raise ImageError(f"{self.path}: too many symlinks at {rel}")

    def exists(self, rel: str) -> bool:
        try:
            self._member(rel)
        except ImageError:
            return False
        return True

    def size(self, rel: str) -> int:
        return self._member(rel).size

    def open(self, rel: str) -> _Slice:
        m = self._member(rel)
        return _Slice(self.f.fileno(), m.offset_data, m.size)

    def read(self, rel: str, limit: int = 64 << 20) -> bytes:
        m = self._member(rel)
        if m.size > limit:
            raise ImageError(f"{rel} is too large for metadata")
        return self.open(rel).read()

    def close(self) -> None:
        self.f.close()


def _norm(name: str) -> str:
    out = posixpath.normpath("/" + name).lstrip("/")
    return out


def _copy(src: Readable, writer: Writer) -> None:
    while True:
        data = src.read(CHUNK)
        if not data:
            return
        writer.write(data)


def _blob_rel(digest: str) -> str:
    if not imagespec.is_digest(digest):
        raise ImageError(f"invalid digest {digest!r}")
    algorithm, _, encoded = digest.partition(":")
    return f"blobs/{algorithm}/{encoded}"


class LayoutSource:
    """An OCI image layout, as a directory (``oci:``) or a tar of one (``oci-archive:``)."""

    def __init__(self, ref: Reference) -> None:
        assert ref.path is not None
        self.ref = ref
        self.description = str(ref)
        self.files: DirFiles | TarFiles = (
            DirFiles(ref.path) if ref.transport == "oci" else TarFiles(ref.path)
        )
        self.name_hint: str | None = None
        try:
            self._check_layout()
            self.index = imagespec.decode_blob(
                imagespec.Index, self.files.read("index.json"), f"{ref.path}/index.json"
            )
            self.chosen = self._choose()
        except BaseException:
            self.files.close()
            raise

    def _check_layout(self) -> None:
        if not self.files.exists("oci-layout"):
            raise ImageError(f"{self.ref.path} is not an OCI image layout (no oci-layout file)")
        layout = imagespec.decode_blob(
            imagespec.ImageLayout, self.files.read("oci-layout"), "oci-layout"
        )
        version = layout.image_layout_version or ""
        if not version.startswith("1."):
            raise ImageError(f"unsupported OCI layout version {version!r}")

    def _choose(self) -> imagespec.Descriptor:
        manifests = self.index.manifests or []
        ref = self.ref
        if ref.digest:
            for desc in manifests:
                if desc.digest == ref.digest:
                    return desc
            if not self.files.exists(_blob_rel(ref.digest)):
                raise ImageNotFound(f"{ref.path}: no manifest {ref.digest}")
            raw = self.files.read(_blob_rel(ref.digest))
            return imagespec.Descriptor(
                media_type=imagespec.sniff_media_type(raw), digest=ref.digest, size=len(raw)
            )
        if ref.tag:
            for desc in manifests:
                ann = desc.annotations or {}
                if ref.tag in (
                    ann.get(imagespec.ANNOTATION_REF_NAME),
                    ann.get(imagespec.ANNOTATION_CONTAINERD_NAME),
                ):
                    self.name_hint = _name_from_annotations(ann, ref)
                    return desc
            raise ImageNotFound(f"{ref.path}: no image tagged {ref.tag!r}")
        from hostjob.images.trust.stores import is_signature_entry

        # Signatures a layout carries beside its image are not images to choose from.
        manifests = [d for d in manifests if not is_signature_entry(d)]
        if len(manifests) != 1:
            tags = sorted(
                (d.annotations or {}).get(imagespec.ANNOTATION_REF_NAME, d.digest or "?")
                for d in manifests
            )
            raise ImageNotFound(
                f"{ref.path} holds {len(manifests)} images; name one with :TAG"
                f" ({', '.join(tags) or 'none'})"
            )
        self.name_hint = _name_from_annotations(manifests[0].annotations or {}, ref)
        return manifests[0]

    def top(self) -> tuple[bytes, str | None, str | None]:
        desc = self.chosen
        assert desc.digest is not None
        return self.files.read(_blob_rel(desc.digest)), desc.media_type, desc.digest

    def manifest(self, desc: imagespec.Descriptor) -> bytes:
        assert desc.digest is not None
        return self.files.read(_blob_rel(desc.digest))

    def open_blob(self, desc: imagespec.Descriptor) -> Readable:
        """A reader of the blob (the caller closes it, if it has a ``close``)."""
        assert desc.digest is not None
        return self.files.open(_blob_rel(desc.digest))

    def copy_blob(self, desc: imagespec.Descriptor, writer: Writer) -> None:
        reader = self.open_blob(desc)
        try:
            _copy(reader, writer)
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()

    def signatures(self, digest: str, scope: ImageScope, config: RegistriesD) -> list[Signature]:
        """The sigstore signatures the layout carries for the manifest ``digest``."""
        from hostjob.images.trust.stores import SIGNATURE_LIMIT, check_digest, from_layout

        def read(blob: str) -> bytes:
            data = self.files.read(_blob_rel(blob), SIGNATURE_LIMIT)
            check_digest(data, blob, f"{self.ref.path}: blob {blob}")
            return data

        return from_layout(read, self.index.manifests or [], digest)

    def close(self) -> None:
        self.files.close()


def _name_from_annotations(ann: dict[str, str], ref: Reference) -> str | None:
    for key in (imagespec.ANNOTATION_CONTAINERD_NAME, imagespec.ANNOTATION_REF_NAME):
        value = ann.get(key)
        if value and "/" in value:
            try:
                return refs.normalize(value)
            except InvalidReference:
                pass
    return None


class DockerArchiveSource:
    """A ``docker save`` tar: ``manifest.json`` + config + layer tars, as a v2 manifest."""

    def __init__(self, ref: Reference) -> None:
        assert ref.path is not None
        self.ref = ref
        self.description = str(ref)
        self.files = TarFiles(ref.path)
        try:
            self._load()
        except BaseException:
            self.files.close()
            raise

    def _load(self) -> None:
        ref = self.ref
        entries = imagespec.decode_docker_archive_manifest(
            imagespec.parse_json(self.files.read("manifest.json"), "manifest.json")
        )
        if not entries:
            raise ImageNotFound(f"{ref.path}: the archive holds no image")
        if ref.index is not None:
            if ref.index >= len(entries):
                raise ImageNotFound(f"{ref.path}: no image @{ref.index} ({len(entries)} in it)")
            entry = entries[ref.index]
        elif ref.tag:
            matches = [
                e for e in entries if ref.tag in {_normalize_tag(t) for t in e.repo_tags or []}
            ]
            if not matches:
                raise ImageNotFound(f"{ref.path}: no image named {ref.tag}")
            entry = matches[0]
        elif len(entries) == 1:
            entry = entries[0]
        else:
            raise ImageNotFound(
                f"{ref.path} holds {len(entries)} images; name one with :NAME or :@INDEX"
            )
        if not entry.config or entry.layers is None:
            raise ImageError(f"{ref.path}: manifest.json entry lacks Config or Layers")
        self.name_hint = ref.tag or next(
            (_normalize_tag(t) for t in entry.repo_tags or [] if _normalize_tag(t)), None
        )
        self.paths: dict[str, str] = {}
        config_raw = self.files.read(entry.config)
        config_digest = "sha256:" + hashlib.sha256(config_raw).hexdigest()
        self.paths[config_digest] = entry.config
        layers = []
        for rel in entry.layers:
            digest, size, media_type = self._describe_layer(rel)
            self.paths[digest] = rel
            layers.append({"mediaType": media_type, "size": size, "digest": digest})
        manifest = {
            "schemaVersion": 2,
            "mediaType": imagespec.DOCKER_MANIFEST,
            "config": {
                "mediaType": imagespec.DOCKER_CONFIG,
                "size": len(config_raw),
                "digest": config_digest,
            },
            "layers": layers,
        }
        self.raw_manifest = imagespec.canonical_json(manifest)

    def _describe_layer(self, rel: str) -> tuple[str, int, str]:
        src = Digester(self.files.open(rel))
        head = src.read(4)
        src.drain()
        if head.startswith(b"\x1f\x8b"):
            media_type = imagespec.DOCKER_LAYER_GZIP
        elif head == b"\x28\xb5\x2f\xfd":
            media_type = imagespec.DOCKER_LAYER_ZSTD
        else:
            media_type = imagespec.DOCKER_LAYER
        return src.digest(), src.count, media_type

    def top(self) -> tuple[bytes, str | None, str | None]:
        digest = "sha256:" + hashlib.sha256(self.raw_manifest).hexdigest()
        return self.raw_manifest, imagespec.DOCKER_MANIFEST, digest

    def manifest(self, desc: imagespec.Descriptor) -> bytes:
        raise ImageError("a docker archive has no image index")

    def open_blob(self, desc: imagespec.Descriptor) -> Readable:
        rel = self.paths.get(desc.digest or "")
        if rel is None:
            raise ImageError(f"{self.ref.path}: no blob {desc.digest}")
        return self.files.open(rel)

    def copy_blob(self, desc: imagespec.Descriptor, writer: Writer) -> None:
        _copy(self.open_blob(desc), writer)

    def signatures(self, digest: str, scope: ImageScope, config: RegistriesD) -> list[Signature]:
        """None: a ``docker save`` archive carries no signatures."""
        return []

    def close(self) -> None:
        self.files.close()


def _normalize_tag(tag: str) -> str | None:
    try:
        return refs.normalize(tag)
    except InvalidReference:
        return None


def open_local(ref: Reference) -> LayoutSource | DockerArchiveSource:
    """The source for a local reference (``oci:``, ``oci-archive:``, ``docker-archive:``)."""
    if ref.transport in ("oci", "oci-archive"):
        return LayoutSource(ref)
    if ref.transport == "docker-archive":
        return DockerArchiveSource(ref)
    raise ImageError(f"{ref} is not a local image reference")


def open_source(ref: Reference, registry: RegistryOptions | None = None) -> Source:
    """The source for any reference (a registry client for ``docker`` ones, reached as
    ``registry`` says: else with the defaults)."""
    if not ref.is_registry:
        return open_local(ref)
    from hostjob.images.options import RegistryOptions
    from hostjob.images.registry import RegistrySource

    return RegistrySource(ref, registry or RegistryOptions())
