"""Unpack throughput: hostjob's extractor (each gzip backend) vs ``tar -xzf`` and ``umoci``.

    python3 bench/images/unpack.py [--mb 100] [--files 10000] [--rounds 3]

Makes a gzip layer of about ``--mb`` MB in ``--files`` files (a mix of text-like and
random data, some hardlinks, symlinks and whiteouts), then times extracting it with
``tar -xzf`` and with ``hostjob.images.unpack.extract`` for every gzip backend; prints
the best of ``--rounds`` for each, in MB/s of uncompressed tar, and the ratios to
``tar -xzf`` (target: the default backend at least 1.0x).
"""

from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".."))
from _venv import ensure_venv

ensure_venv()

import argparse
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))


def make_layer(path: str, total_mb: int, files: int, seed: int = 1) -> int:
    rng = random.Random(seed)
    words = [
        bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(500)
    ]
    per_file = total_mb * 1024 * 1024 // files
    with tarfile.open(path, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tf:
        for d in range(files // 100 + 1):
            info = tarfile.TarInfo(f"usr/share/d{d:03}")
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tf.addfile(info)
        for i in range(files):
            size = max(0, int(rng.expovariate(1 / per_file)))
            if i % 3 == 0:
                data = rng.randbytes(size)
            else:
                out = bytearray()
                while len(out) < size:
                    out += b" ".join(rng.choices(words, k=64)) + b"\n"
                data = bytes(out[:size])
            info = tarfile.TarInfo(f"usr/share/d{i // 100:03}/f{i:05}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
            if i % 500 == 0:
                link = tarfile.TarInfo(f"usr/share/d{i // 100:03}/h{i:05}")
                link.type = tarfile.LNKTYPE
                link.linkname = info.name
                tf.addfile(link)
                sym = tarfile.TarInfo(f"usr/share/d{i // 100:03}/s{i:05}")
                sym.type = tarfile.SYMTYPE
                sym.linkname = f"f{i:05}"
                tf.addfile(sym)
                wh = tarfile.TarInfo(f"usr/share/d{i // 100:03}/.wh.gone{i:05}")
                tf.addfile(wh)
    with tarfile.open(path, "r:gz") as tf:
        return sum(1 for _ in tf)


def timed(fn: object, rounds: int, work: str) -> float:
    """Best of ``rounds``. Each round starts with the disk quiet: the previous output
    is deleted and everything synced (deletions on a ``discard`` mount are slow and
    would otherwise be timed in the next round)."""
    best = float("inf")
    for _ in range(rounds):
        out = tempfile.mkdtemp(dir=work)
        subprocess.run(["sync"], check=True)
        start = time.perf_counter()
        fn(out)  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
        subprocess.run(["sync"], check=True)
        shutil.rmtree(out)
        subprocess.run(["sync"], check=True)
    return best


def make_layout(layer: str) -> str:
    """An OCI layout around the layer, for umoci."""
    import gzip
    import hashlib
    import json

    layout = os.path.join(os.path.dirname(layer), "layout")
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, digest), "wb") as f:
            f.write(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    with open(layer, "rb") as f:
        blob = f.read()
    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
    ).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **put(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **put(blob)}],
    }
    desc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **put(json.dumps(manifest).encode()),
        "annotations": {"org.opencontainers.image.ref.name": "bench"},
    }
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return layout


def candidates(layer: str) -> dict[str, object]:
    from hostjob.images import unpack

    def tar_xzf(out: str) -> None:
        subprocess.run(["tar", "-xzf", layer, "-C", out], check=True)

    table: dict[str, object] = {"tar -xzf": tar_xzf}
    if shutil.which("umoci"):
        layout = make_layout(layer)

        def umoci_unpack(out: str) -> None:
            subprocess.run(
                ["umoci", "unpack", "--image", f"{layout}:bench", os.path.join(out, "bundle")],
                check=True,
                capture_output=True,
            )

        table["umoci unpack"] = umoci_unpack
    for backend in ("zlib", "isal", "isal-threaded"):

        def ours(out: str, backend: str = backend) -> None:
            with open(layer, "rb") as f:
                unpack.extract(f, out, backend=backend)

        table[f"hostjob ({backend})"] = ours
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="hostjob-bench-", dir=args.dir)
    try:
        layer = os.path.join(work, "layer.tar.gz")
        entries = make_layer(layer, args.mb, args.files)
        raw = subprocess.run(
            ["sh", "-c", f"gzip -dc {layer} | wc -c"], capture_output=True, text=True, check=True
        )
        tar_bytes = int(raw.stdout)
        mb = tar_bytes / 1e6
        print(
            f"layer: {os.path.getsize(layer) / 1e6:.1f} MB gzip, {mb:.1f} MB tar, {entries} entries"
        )
        results: dict[str, float] = {}
        table = candidates(layer)
        order = list(table)
        for _ in range(args.rounds):  # interleaved, so that no one gets the quieter disk
            for name in order:
                results[name] = min(results.get(name, float("inf")), timed(table[name], 1, work))
            order = order[1:] + order[:1]
        base = results["tar -xzf"]
        for name, seconds in results.items():
            print(
                f"{name:24} {seconds:7.3f} s  {mb / seconds:7.1f} MB/s  {base / seconds:5.2f}x tar"
            )
        from hostjob.images.decompress import GZIP_BACKEND

        ratio = base / results[f"hostjob ({GZIP_BACKEND})"]
        verdict = "met" if ratio >= 1.0 else "NOT met"
        print(f"hostjob ({GZIP_BACKEND}, default) = {ratio:.2f}x tar (target >= 1.0: {verdict})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
