"""Crash safety for images: a pull or import killed with SIGKILL mid-blob or mid-layer leaves
the store consistent — no partial blob, layer or temp directory once the same image has
been pulled again, and that pull works and verifies."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostjob.images.store import Store
from tests.fixtures.images import write_layout
from tests.fixtures.registry import FakeRegistry
from tests.fixtures.tars import entry, make_tar
from tests.helpers import hostjob_cmd, hostjob_env

IMAGE_POINTS = ("pull:mid-blob", "unpack:mid-layer")

# The library, when the CLI has no `pull` verb (yet): the same code path, one process.
DRIVER = (
    "import sys\n"
    "from hostjob.images.options import RegistryOptions\n"
    "from hostjob.images.store import Store\n"
    "info = Store(sys.argv[1]).pull(sys.argv[2], registry=RegistryOptions(plain_http=True))\n"
    "print(info.name)\n"
)


def cli_has_pull() -> bool:
    done = subprocess.run(
        [*hostjob_cmd(), "pull", "--help"], capture_output=True, env=hostjob_env(), check=False
    )
    return done.returncode == 0


def pull(
    store_root: str, ref: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = hostjob_env({"HOSTJOB_CRASH_AT": crash_at} if crash_at else {})
    if cli_has_pull():
        argv = [*hostjob_cmd(), "pull", "--store", store_root, "--quiet"]
        if not ref.startswith(("oci:", "oci-archive:", "docker-archive:")):
            argv.append("--plain-http")
        argv.append(ref)
    else:
        argv = [sys.executable, "-c", DRIVER, store_root, ref]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def image_layers() -> list[bytes]:
    # Layer 0: several entries and a blob of more than one copy chunk (1 MiB), so both
    # points fall strictly inside it; layer 1: small.
    big = make_tar(
        [
            entry("big/a", data=b"a" * 100),
            entry("big/data", data=os.urandom(3 << 20)),
            *[entry(f"big/f{i}", data=b"%d" % i) for i in range(20)],
        ]
    )
    small = make_tar([entry("small/n", data=b"1")])
    return [big, small]


def temps_in(store_root: str) -> list[str]:
    found = []
    for top in ("blobs", "layers"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(store_root, top)):
            found += [os.path.join(dirpath, n) for n in dirnames + filenames if n.startswith(".")]
            if os.path.basename(dirpath) in ("diff",):
                dirnames.clear()
            dirnames[:] = [d for d in dirnames if d != "diff"]
    return found


def assert_store_consistent(store_root: str, name: str) -> None:
    assert temps_in(store_root) == [], "a temp file or directory was left in the store"
    blobs = Path(store_root, "blobs", "sha256")
    for blob in blobs.iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, f"corrupt {blob}"
    layers = Path(store_root, "layers", "sha256")
    for layer in layers.iterdir():
        assert (layer / "layer.json").is_file() and (layer / "diff").is_dir(), f"partial {layer}"
        assert json.loads((layer / "layer.json").read_text())["diff_id"] == f"sha256:{layer.name}"
    image = Store(store_root).resolve(name)
    assert Path(image.layer_dirs[0], "big/a").read_bytes() == b"a" * 100
    assert Path(image.layer_dirs[0], "big/f19").read_text() == "19"
    assert Path(image.layer_dirs[1], "small/n").read_text() == "1"
    assert len(Store(store_root).images()) == 1


@pytest.mark.parametrize("source", ["oci", "registry"])
@pytest.mark.parametrize("point", IMAGE_POINTS)
def test_pull_killed_then_pulled_again(tmp_path: Path, point: str, source: str) -> None:
    layout = str(tmp_path / "layout")
    write_layout(layout, image_layers(), tag="v1")
    store_root = str(tmp_path / "store")
    with FakeRegistry(layout) as registry:
        ref = f"oci:{layout}:v1" if source == "oci" else f"{registry.host}/crash/img:v1"
        crashed = pull(store_root, ref, crash_at=point)
        assert crashed.returncode == -9, (
            f"{point} not reached: {crashed.returncode} {crashed.stderr}"
        )
        # Killed before naming anything: the store has no image, whatever bytes it holds.
        assert Store(store_root).images() == []
        done = pull(store_root, ref)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        name = Store(store_root).images()[0].name
    assert_store_consistent(store_root, name)


def test_prune_after_a_killed_pull_leaves_no_temp(tmp_path: Path) -> None:
    """A killed pull that is never retried: prune clears its leftovers."""
    layout = str(tmp_path / "layout")
    write_layout(layout, image_layers(), tag="v1")
    store_root = str(tmp_path / "store")
    for point in IMAGE_POINTS:
        assert pull(store_root, f"oci:{layout}:v1", crash_at=point).returncode == -9
    assert temps_in(store_root) != []  # the kills did leave something to clean
    Store(store_root).prune()
    assert temps_in(store_root) == []
