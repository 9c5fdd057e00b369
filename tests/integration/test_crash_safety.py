"""Crash safety: hostjob killed with SIGKILL at any step leaves a container that `state`
describes and `delete --force` removes completely."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostjob.faults import IMAGE_POINTS, POINTS
from tests.helpers import Hostjob, base_config, cgroup_dirs, containers_left, mounts_under, new_id

LIFECYCLE_POINTS = [
    p for p in POINTS if p.split(":")[0] in ("create", "start", "delete") and p not in IMAGE_POINTS
]


def crash_config(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    """A config that reaches every point: a mount point, a volume and a hook."""
    volume = tmp_path / "volume"
    volume.mkdir(exist_ok=True)
    config = base_config("sleep", "300")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(tmp_path / "mp")}}
    config["mounts"] = [{"destination": "/data", "type": "bind", "source": str(volume)}]
    config["hooks"] = {
        "prestart": [{"path": "/bin/true"}],
        "createRuntime": [{"path": "/bin/true"}],
    }
    return config


def assert_gone(hj: Hostjob, cid: str, tmp_path: Path, pid: int | None) -> None:
    assert not (hj.root / cid).exists(), "state directory left"
    assert cgroup_dirs(f"/hostjob/{cid}") == [], "cgroup left"
    assert mounts_under(str(tmp_path / "mp")) == [], "mount left"
    assert not (tmp_path / "mp").exists(), "mount point left"
    assert not (tmp_path / "bundle" / "rootfs" / "data").is_symlink(), "volume link left"
    if pid:
        try:
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "Z", "container process left"
        except FileNotFoundError:
            pass


@pytest.mark.parametrize("point", LIFECYCLE_POINTS)
def test_crash_then_delete_force(hj: Hostjob, bundle, tmp_path: Path, point: str) -> None:
    cid = new_id()
    b = bundle(crash_config(tmp_path))
    crash = {"HOSTJOB_CRASH_AT": point}
    step = point.split(":")[0]
    if step == "create":
        result = hj("create", "-b", str(b), cid, env=crash)
    else:
        hj.ok("create", "-b", str(b), cid)
        if step == "start":
            result = hj("start", cid, env=crash)
        else:
            hj.ok("start", cid)
            result = hj("delete", "--force", cid, env=crash)
    assert result.returncode == -9, f"{point} was not reached: {result.returncode} {result.stderr}"

    # `state` says something sensible: valid JSON and a known status, or "does not exist".
    state = hj("state", cid)
    pid = None
    if state.returncode == 0:
        document = json.loads(state.stdout)
        assert document["status"] in ("created", "running", "stopped"), document
        pid = document["pid"] or None
    else:
        assert state.stderr.strip() == "container does not exist"
    state_file = hj.root / cid / "state.json"
    if pid is None and state_file.exists():
        pid = json.loads(state_file.read_text()).get("pid") or None

    hj.ok("delete", "--force", cid)
    assert_gone(hj, cid, tmp_path, pid)
    assert "container does not exist" in hj.fail("state", cid)
    # the same ID is usable again
    hj.ok("create", "-b", str(b), cid)
    hj.ok("delete", "--force", cid)
    assert_gone(hj, cid, tmp_path, None)
    assert containers_left(hj.root) == []


# --- hostjob run IMAGE ------------------------------------------------------------------

# An image container reaches every lifecycle point but the hooks' (an image has none).
IMAGE_CRASH_POINTS = [p for p in POINTS if p.split(":")[0] in ("create", "start", "delete")]
IMAGE_CRASH_POINTS.remove("create:mid-hook")


@pytest.fixture(scope="module")
def crash_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hostjob.images.pack import pack
    from tests.helpers import make_rootfs

    src = make_rootfs(tmp_path_factory.mktemp("crash-image-src"))
    layout = tmp_path_factory.mktemp("crash-image-layout")
    pack(str(src), f"oci:{layout}:v1", cmd=["sleep", "300"], env=["PATH=/bin"])
    return f"oci:{layout}:v1"


def image_leftovers(hj: Hostjob, cid: str, store: Path) -> list[str]:
    found = ["state"] if (hj.root / cid).exists() else []
    found += cgroup_dirs(f"/hostjob/{cid}")
    found += mounts_under(str(hj.root / cid))
    for sub in ("rw", "containers"):
        directory = store / sub
        if directory.exists():
            found += [f"{sub}/{name}" for name in os.listdir(directory) if cid in name]
    return found


def store_content(store: Path) -> list[str]:
    """The store's blobs and layers (what a crash must never damage)."""
    out = []
    for top in ("blobs", "layers"):
        for path in sorted((store / top).rglob("*")):
            if path.is_file() and not path.is_symlink():
                out.append(f"{path.relative_to(store)} {path.stat().st_size}")
    return out


@pytest.mark.parametrize("point", IMAGE_CRASH_POINTS)
def test_image_container_crash_then_delete_force(
    hj: Hostjob, crash_image: str, tmp_path: Path, point: str
) -> None:
    store = tmp_path / "store"
    cid = new_id()
    run = ("run", "--detach", "--quiet", "--store", str(store), "--name", cid, crash_image)
    hj.ok("pull", "--store", str(store), "--quiet", crash_image)
    content = store_content(store)
    crash = {"HOSTJOB_CRASH_AT": point}
    if point.startswith("delete:"):
        hj.ok(*run, stdin=open(os.devnull))  # noqa: SIM115
        result = hj("delete", "--force", cid, env=crash)
        assert result.returncode == -9, f"{point} not reached: {result.returncode} {result.stderr}"
    else:
        # run -d IMAGE: the container's watcher creates it, and is the one killed.
        result = hj(*run, env=crash, stdin=open(os.devnull))  # noqa: SIM115
        killed = "watcher was killed by SIGKILL while it created the container"
        assert result.returncode == 137 and killed in result.stderr, (
            f"{point} was not reached: {result.returncode} {result.stderr}"
        )

    state = hj("state", cid)
    if state.returncode == 0:
        assert json.loads(state.stdout)["status"] in ("created", "running", "stopped")
    else:
        assert state.stderr.strip() == "container does not exist"
    hj.ok("delete", "--force", cid)
    assert image_leftovers(hj, cid, store) == []
    assert store_content(store) == content, "the crash changed the store's content"
    # The image runs again under the same name, and --rm leaves nothing.
    again = hj("run", "--rm", "--quiet", "--store", str(store), "--name", cid, crash_image, "true")
    assert again.returncode == 0, again.stderr
    assert image_leftovers(hj, cid, store) == []
    assert containers_left(hj.root) == []
