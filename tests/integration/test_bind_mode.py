"""SPEC §4 bind mode: a private mount namespace that the host never sees."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.helpers import Hostjob, base_config, hostjob_env, mounts_under, new_id


def host_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def bind_config(volume: Path, *args: str, mount_point: str | None = None) -> dict:  # type: ignore[type-arg]
    config = base_config(*args)
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    if mount_point:
        config["annotations"]["io.hostjob.rootfs-mount-point"] = mount_point
    config["mounts"] = [
        {
            "destination": f"{volume}-ro-dst",
            "type": "bind",
            "source": str(volume),
            "options": ["rbind", "ro"],
        },
        {
            "destination": f"{volume}-rw-dst",
            "type": "bind",
            "source": str(volume),
            "options": ["rbind"],
        },
        {"destination": "/proc", "type": "proc", "source": "proc"},
    ]
    return config


def test_bind_mode(hj: Hostjob, bundle, tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "data").write_text("volume data\n")
    mount_point = str(tmp_path / "hpc")
    script = (
        'echo "$CONTAINER_SANDBOX_MOUNT_POINT"; cat "$CONTAINER_SANDBOX_MOUNT_POINT/etc/image-release";'
        f" cat {volume}-ro-dst/data; touch {volume}-ro-dst/new 2>/dev/null && echo ro-writable || echo ro-ok;"
        f" touch {volume}-rw-dst/new && echo rw-ok; exec sleep 300"
    )
    config = bind_config(volume, "sh", "-c", script, mount_point=mount_point)
    before = [m for m in host_mounts() if m.startswith(str(tmp_path))]
    cid = new_id()
    out = tmp_path / "out"
    with open(out, "w") as stdout:
        subprocess.run(
            hj.argv("run", "-d", "-b", str(bundle(config)), cid),
            stdout=stdout,
            check=True,
            env=hostjob_env(),
        )
    deadline = time.monotonic() + 10
    while out.read_text().count("\n") < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.read_text().splitlines() == [
        mount_point,
        "hostjob test image",
        "volume data",
        "ro-ok",
        "rw-ok",
    ]
    assert [
        m for m in host_mounts() if m.startswith(str(tmp_path))
    ] == before  # the host sees nothing
    assert mounts_under(mount_point) == []
    assert not Path(mount_point, "etc").exists()  # on the host, the mount point is just a directory

    state = hj.state(cid)
    assert state["mountMode"] == "bind" and state["mountPoint"] == mount_point
    listed = json.loads(hj.ok("list", "--format", "json"))
    assert listed[0]["mountMode"] == "bind"

    # An exec joins the same namespace.
    seen = hj.ok(
        "exec",
        cid,
        "sh",
        "-c",
        f'cat "$CONTAINER_SANDBOX_MOUNT_POINT/etc/image-release"; ls {volume}-ro-dst',
    )
    assert seen.split() == ["hostjob", "test", "image", "data", "new"]

    hj.ok("delete", "--force", cid)
    assert not Path(mount_point).exists()
    assert not Path(f"{volume}-ro-dst").exists() and not Path(f"{volume}-rw-dst").exists()
    assert (volume / "new").exists()  # written through the rw volume
    assert [m for m in host_mounts() if m.startswith(str(tmp_path))] == before


def test_bind_mode_default_mount_point_is_hpc(hj: Hostjob, bundle, tmp_path: Path) -> None:
    existed = Path("/hpc").exists()
    config = base_config("sh", "-c", 'echo "$CONTAINER_SANDBOX_MOUNT_POINT"; ls /hpc/etc')
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    result = hj("run", "-b", str(bundle(config)), new_id())
    assert result.stdout.split() == ["/hpc", "image-release"], result.stderr
    assert Path("/hpc").exists() == existed
    assert mounts_under("/hpc") == []


def test_bind_mode_cwd_is_a_host_path(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("pwd")
    config["annotations"] = {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": str(tmp_path / "m"),
    }
    config["process"]["cwd"] = "/tmp"
    assert hj("run", "-b", str(bundle(config)), new_id()).stdout == "/tmp\n"
    config["process"]["cwd"] = "/no/such/dir"
    assert "/no/such/dir" in hj.fail("run", "-b", str(bundle(config, "b2")), new_id())


def test_two_bind_containers_share_a_mount_point(hj: Hostjob, bundle, tmp_path: Path) -> None:
    mount_point = str(tmp_path / "shared-hpc")
    config = base_config("sleep", "300")
    config["annotations"] = {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": mount_point,
    }
    first, second = new_id(), new_id()
    hj.ok("run", "-d", "-b", str(bundle(config, "one")), first)
    hj.ok("run", "-d", "-b", str(bundle(config, "two")), second)
    hj.ok("delete", "--force", first)
    assert Path(mount_point).is_dir()  # still in use by the second container
    assert hj.ok("exec", second, "ls", f"{mount_point}/etc") == "image-release\n"
    hj.ok("delete", "--force", second)
    assert not Path(mount_point).exists()


def test_bad_mode_refused(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["annotations"] = {"io.hostjob.mount-mode": "overlay"}
    assert "io.hostjob.mount-mode" in hj.fail("create", "-b", str(bundle(config)), new_id())
