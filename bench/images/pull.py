"""Pull+unpack from a local registry: hostjob vs ``skopeo copy`` + ``umoci unpack`` vs
``ctr images pull`` (when containerd can be started).

    python3 bench/images/pull.py [--mb 100] [--layers 4] [--rounds 2]

Builds a multi-layer image (about ``--mb`` MB, 10k files, some whiteouts), pushes it
to ``docker-registry`` on 127.0.0.1, then times each client pulling it into a fresh
store, rounds interleaved (the order rotates every round). Prints the best of
``--rounds`` for each and hostjob's time over each one's (target: at most 0.7 of
``ctr images pull``).
"""

from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".."))
from _venv import ensure_venv

ensure_venv()

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import unpack as unpack_bench
from tests.compat.harness import Containerd
from tests.fixtures.registry import DockerRegistry, skopeo_copy


def build_layout(work: str, mb: int, layers: int) -> str:
    layout = os.path.join(work, "layout")
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)
    descs, diff_ids = [], []
    for i in range(layers):
        path = os.path.join(work, f"layer{i}.tar.gz")
        unpack_bench.make_layer(path, mb // layers, 10000 // layers, seed=i + 1)
        data = open(path, "rb").read()  # noqa: SIM115
        digest = hashlib.sha256(data).hexdigest()
        os.rename(path, os.path.join(blobs, digest))
        import gzip

        diff_ids.append("sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest())
        descs.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": f"sha256:{digest}",
                "size": len(data),
            }
        )

    def put(raw: bytes) -> str:
        digest = hashlib.sha256(raw).hexdigest()
        with open(os.path.join(blobs, digest), "wb") as f:
            f.write(raw)
        return f"sha256:{digest}"

    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": put(config),
                "size": len(config),
            },
            "layers": descs,
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": put(manifest),
                "size": len(manifest),
                "annotations": {"org.opencontainers.image.ref.name": "bench"},
            }
        ],
    }
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return layout


def unmount_under(prefix: str) -> None:
    """Lazily unmount every mount under ``prefix`` (containerd's snapshots)."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split(" ")[4] for line in f]
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    from hostjob.images.options import RegistryOptions
    from hostjob.images.store import Store

    work = tempfile.mkdtemp(prefix="hostjob-pull-bench-", dir=args.dir)
    try:
        layout = build_layout(work, args.mb, args.layers)
        with DockerRegistry(os.path.join(work, "registry")) as reg:
            ref = f"{reg.host}/bench/image:v1"
            skopeo_copy(f"oci:{layout}:bench", f"docker://{ref}", "--dest-tls-verify=false")
            results: dict[str, float] = {}
            clients: dict[str, object] = {
                "hostjob pull": lambda out: Store(out).pull(
                    ref, registry=RegistryOptions(plain_http=True)
                )
            }

            def timed(name: str, i: int) -> None:
                out = os.path.join(work, f"{name.split()[0]}-{i}")
                subprocess.run(["sync"], check=True)
                start = time.perf_counter()
                clients[name](out)  # type: ignore[operator]
                elapsed = time.perf_counter() - start
                results[name] = min(results.get(name, float("inf")), elapsed)

            def skopeo_umoci(out: str) -> None:
                subprocess.run(
                    [
                        "skopeo",
                        "--insecure-policy",
                        "copy",
                        "--quiet",
                        "--src-tls-verify=false",
                        f"docker://{ref}",
                        f"oci:{out}-layout:x",
                    ],
                    check=True,
                )
                subprocess.run(
                    ["umoci", "unpack", "--image", f"{out}-layout:x", out],
                    check=True,
                    capture_output=True,
                )

            if shutil.which("umoci"):
                clients["skopeo copy + umoci unpack"] = skopeo_umoci
            containerd = Containerd(Path(work) / "containerd")
            containerd.start()
            counter = iter(range(1000))

            def ctr_pull(out: str) -> None:
                # A fresh namespace each round: nothing cached from the previous pull.
                containerd.namespace = f"bench{next(counter)}"
                containerd.ctr("images", "pull", "--plain-http", ref, check=True)

            clients["ctr images pull"] = ctr_pull
            try:
                order = list(clients)
                for i in range(args.rounds):
                    for name in order:
                        timed(name, i)
                    order = order[1:] + order[:1]
            finally:
                containerd.stop()
        base = results["hostjob pull"]
        print(f"image: {args.layers} layers, ~{args.mb} MB uncompressed, 10k files")
        for name, seconds in results.items():
            print(f"{name:28} {seconds:7.3f} s   hostjob/this = {base / seconds:5.2f}")
        if "ctr images pull" in results:
            ratio = base / results["ctr images pull"]
            verdict = "met" if ratio <= 0.7 else "NOT met"
            print(f"hostjob/ctr = {ratio:.2f} (target <= 0.7: {verdict})")
    finally:
        unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
