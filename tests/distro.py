"""The images of the loader tests: programs built for a Debian release newer than this
host's, which need their image's own loader and libraries.

* ``distro_tar()`` -- the root filesystem of Debian 13 (glibc 2.41, Python 3.13, jq 1.7,
  Lua 5.4, busybox, musl) that ``scripts/install --peers distro-images`` builds with
  mmdebstrap and caches under ``$HOSTJOB_PEER_DIR`` (again when its package list changes);
  the install runs first, every session: it returns at once when the tar is current.
* ``extract`` -- that tar as a directory (a bundle's rootfs); ``oci_archive`` -- as an
  image (one uncompressed layer: the tar itself), for ``run IMAGE``, containerd and docker.
* ``musl_program`` -- a program this host's ``musl-gcc`` links dynamically against musl;
  ``origin_program`` -- a program whose library is found through ``$ORIGIN/../lib``.
* ``lone_root`` -- a directory with an image's program and part of what it needs: the
  error cases.

Nothing here decides anything about hostjob: the tests say what they expect.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.helpers import INSTALL, require_peer

PEER_DIR = Path(os.environ.get("HOSTJOB_PEER_DIR", "/var/cache/hostjob-peers"))
SUITE = "trixie"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GLIBC_LOADER = "/lib64/ld-linux-x86-64.so.2"
MULTIARCH = "usr/lib/x86_64-linux-gnu"

HELLO_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* Its argv[0], and the C library its process maps (the loader's choice). */
int main(int argc, char **argv) {
    char line[512];
    FILE *maps = fopen("/proc/self/maps", "r");
    printf("argv0=%s\n", argv[0]);
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "libc.so") || strstr(line, "x86_64-linux-musl")) {
            printf("libc=%s", strchr(line, '/'));
            break;
        }
    return argc > 1 ? 3 : 0;
}
"""

ORIGIN_LIB_C = 'const char *origin_greeting(void) { return "found through $ORIGIN"; }\n'
ORIGIN_MAIN_C = r"""
#include <stdio.h>
const char *origin_greeting(void);
int main(void) { puts(origin_greeting()); return 0; }
"""


def distro_tar() -> Path:
    """The Debian 13 root's tar, built or checked by the install script first."""
    require_peer("distro-images", "mmdebstrap", "musl-gcc", "gcc")
    done = subprocess.run(
        [str(INSTALL), "--peers", "distro-images"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    tar = PEER_DIR / "distro-images" / f"{SUITE}.tar"
    if done.returncode != 0 or not tar.is_file():
        pytest.fail(f"no {SUITE} root: {done.stdout}{done.stderr}", pytrace=False)
    return tar


def extract(tar: Path, dest: Path) -> Path:
    """``tar`` unpacked at ``dest`` (made), owners kept."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(tar), "-C", str(dest), "--numeric-owner"], check=True)
    return dest


def oci_archive(tar: Path, dest: Path, ref: str, cmd: list[str], env: tuple[str, ...] = ()) -> Path:
    """An oci-archive of one uncompressed layer, ``tar`` itself, named ``ref`` (both the
    index annotations ctr and hostjob read), its config's ``Cmd`` and ``Env``."""
    layout = dest.with_suffix(".layout")
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return "sha256:" + digest, len(data)

    hasher = hashlib.sha256()
    with open(tar, "rb") as f:
        while chunk := f.read(1 << 20):
            hasher.update(chunk)
    layer_digest = "sha256:" + hasher.hexdigest()
    shutil.copyfile(tar, blobs / hasher.hexdigest())
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": [f"PATH={IMAGE_PATH}", *env], "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_size = put(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": tar.stat().st_size,
            }
        ],
    }
    manifest_digest, manifest_size = put(json.dumps(manifest).encode())
    tag = ref.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    with tarfile.open(dest, "w") as archive:
        for name in ("oci-layout", "index.json", "blobs"):
            archive.add(layout / name, arcname=name)
    shutil.rmtree(layout)
    return dest


def musl_program(dest: Path) -> Path:
    """``HELLO_C`` linked dynamically against musl by this host's musl-gcc."""
    source = dest.with_suffix(".c")
    source.write_text(HELLO_C)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["musl-gcc", "-o", str(dest), str(source)], check=True)
    source.unlink()
    return dest


def glibc_program(dest: Path) -> Path:
    """``HELLO_C`` linked by this host's gcc against its glibc (2.36): any newer glibc
    runs it."""
    source = dest.with_suffix(".c")
    source.write_text(HELLO_C)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-o", str(dest), str(source)], check=True)
    source.unlink()
    return dest


def origin_program(root: Path, prefix: str = "opt/origin") -> Path:
    """``<root>/<prefix>/bin/greet``, whose library lies in ``<prefix>/lib`` and is found
    through its ``DT_RUNPATH`` of ``$ORIGIN/../lib`` alone."""
    work = root / prefix
    (work / "bin").mkdir(parents=True, exist_ok=True)
    (work / "lib").mkdir(exist_ok=True)
    lib_c, main_c = work / "greet-lib.c", work / "greet.c"
    lib_c.write_text(ORIGIN_LIB_C)
    main_c.write_text(ORIGIN_MAIN_C)
    lib = work / "lib" / "libgreet.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(lib_c)], check=True)
    program = work / "bin" / "greet"
    subprocess.run(
        ["gcc", "-o", str(program), str(main_c), f"-L{work / 'lib'}", "-lgreet",
         "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"],
        check=True,
    )  # fmt: skip
    lib_c.unlink()
    main_c.unlink()
    return program


def lone_root(source: Path, dest: Path, *files: str) -> Path:
    """A root holding only ``files`` of the root at ``source`` (paths of it, a library's
    link copied as the file it names), in a merged-/usr layout (``/lib``, ``/lib64``,
    ``/bin`` links into ``/usr``), nothing else."""
    for name in ("lib64", "lib", "bin"):
        (dest / "usr" / name).mkdir(parents=True, exist_ok=True)
        if not (dest / name).is_symlink():
            (dest / name).symlink_to(f"usr/{name}")
    for name in files:
        src, dst = source / name.lstrip("/"), dest / name.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)  # following links: a library's file, a loader's
    return dest


def glibc_root(source: Path, dest: Path, *files: str) -> Path:
    """``lone_root`` with the image's glibc loader and C library."""
    root = lone_root(source, dest, f"/{MULTIARCH}/ld-linux-x86-64.so.2", f"/{MULTIARCH}/libc.so.6")
    (root / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
        "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    return lone_root(source, dest, *files)
