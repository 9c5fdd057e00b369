"""The compat suite's test image, built locally from the host's busybox-static (no network).

One layer: ``/bin/busybox`` plus a symlink per applet (``sh``, ``echo``, ``cat``, ``sleep``,
``true``, ``false``, ``env``, ``id``, ``ps``, ...), ``/etc/passwd``, ``/etc/group`` and the
usual empty directories. Written as an OCI image layout by hand (reproducible: fixed mtimes,
sorted entries, gzip without a timestamp), then tarred as an ``oci-archive`` that
``ctr images import`` and ``podman load`` / ``podman pull oci-archive:`` accept.

This is the one place that makes images for the compat tests and benchmarks; it may later be
replaced by ``hostjob pack``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

IMAGE_REF = "localhost/hostjob-compat/busybox:latest"
"""The name the archive carries; both containerd and podman list the image under it."""

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MTIME = 1_700_000_000  # fixed, so the same busybox always gives the same digests

PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "daemon:x:1:1:daemon:/usr/sbin:/bin/false\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
GROUP = "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n"
DIRS = {
    "bin": 0o755,
    "dev": 0o755,
    "etc": 0o755,
    "proc": 0o755,
    "root": 0o700,
    "run": 0o755,
    "sys": 0o755,
    "tmp": 0o1777,
    "usr": 0o755,
    "usr/bin": 0o755,
    "var": 0o755,
    "var/tmp": 0o1777,
}


def find_busybox() -> Path:
    """The host's static busybox; an AssertionError (not a skip) when there is none."""
    for cand in BUSYBOX_CANDIDATES:
        p = Path(cand)
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise AssertionError("busybox not found: run scripts/install --peers image (busybox-static)")


def busybox_applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True)
    names = sorted({n.strip() for n in out.stdout.split() if n.strip()} - {"busybox"})
    # Names with a slash would escape bin/; busybox never lists such, but be strict.
    return [n for n in names if "/" not in n and n not in (".", "..")]


def build_rootfs(dest: Path, busybox: Path | None = None) -> Path:
    """Write the image's filesystem into ``dest`` (created) as a plain directory: for bundles."""
    busybox = busybox or find_busybox()
    dest.mkdir(parents=True, exist_ok=True)
    for d, mode in DIRS.items():
        (dest / d).mkdir(parents=True, exist_ok=True)
        os.chmod(dest / d, mode)
    shutil.copy2(busybox, dest / "bin" / "busybox")
    for applet in busybox_applets(busybox):
        link = dest / "bin" / applet
        if not link.exists() and not link.is_symlink():
            link.symlink_to("busybox")
    (dest / "etc" / "passwd").write_text(PASSWD)
    (dest / "etc" / "group").write_text(GROUP)
    return dest


def _layer_tar(busybox: Path) -> bytes:
    """The uncompressed layer: sorted entries, root-owned, fixed mtimes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.mode = mode
            ti.mtime = _MTIME
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            if kind == tarfile.SYMTYPE:
                ti.linkname = target
            ti.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        entries: list[tuple[str, bytes, int, bytes, str]] = []
        for d, mode in DIRS.items():
            entries.append((d, tarfile.DIRTYPE, mode, b"", ""))
        entries.append(("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes(), ""))
        for applet in busybox_applets(busybox):
            entries.append((f"bin/{applet}", tarfile.SYMTYPE, 0o777, b"", "busybox"))
        entries.append(("etc/passwd", tarfile.REGTYPE, 0o644, PASSWD.encode(), ""))
        entries.append(("etc/group", tarfile.REGTYPE, 0o644, GROUP.encode(), ""))
        for name, kind, mode, data, target in sorted(entries, key=lambda e: e[0]):
            add(name, kind, mode, data, target)
    return buf.getvalue()


def _goarch() -> str:
    m = platform.machine()
    return {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
        "riscv64": "riscv64",
        "i686": "386",
    }.get(m, m)


class OCIImage:
    """What the builder made: the layout directory, the archive and the names and digests."""

    __slots__ = ("archive", "config_digest", "layout", "manifest_digest", "ref")

    def __init__(
        self, layout: Path, archive: Path, ref: str, manifest_digest: str, config_digest: str
    ) -> None:
        self.layout = layout
        self.archive = archive
        self.ref = ref
        self.manifest_digest = manifest_digest
        self.config_digest = config_digest

    def __repr__(self) -> str:
        return f"OCIImage({self.ref!r}, {self.archive}, {self.manifest_digest})"


def build_oci_image(
    workdir: Path, ref: str = IMAGE_REF, busybox: Path | None = None, cmd: list[str] | None = None
) -> OCIImage:
    """Write ``workdir/layout`` (an OCI image layout) and ``workdir/image.oci.tar`` (the same
    as an oci-archive). The index names the manifest both by ``org.opencontainers.image.ref.name``
    and ``io.containerd.image.name`` so that ctr and podman list it as ``ref``."""
    busybox = busybox or find_busybox()
    layout = workdir / "layout"
    if layout.exists():
        shutil.rmtree(layout)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest

    raw = _layer_tar(busybox)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=6) as g:
        g.write(raw)
    layer = gz.getvalue()
    layer_digest = put(layer)
    config = {
        "created": "2023-11-14T22:13:20Z",
        "architecture": _goarch(),
        "os": "linux",
        "config": {"Env": [f"PATH={DEFAULT_PATH}"], "Cmd": cmd or ["sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "hostjob compat tests"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = put(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = put(manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": _goarch(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref,
                },
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))

    archive = workdir / "image.oci.tar"
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        names = [
            "oci-layout",
            "index.json",
            "blobs",
            "blobs/sha256",
            *sorted(f"blobs/sha256/{p.name}" for p in blobs.iterdir()),
        ]
        for name in names:
            ti = tar.gettarinfo(str(layout / name), arcname=name)
            ti.mtime = _MTIME
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            if ti.isfile():
                with open(layout / name, "rb") as f:
                    tar.addfile(ti, f)
            else:
                tar.addfile(ti)
    tmp.rename(archive)
    return OCIImage(layout, archive, ref, manifest_digest, config_digest)
