"""Bind mode: a private mount namespace that the host never sees."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, containers_left, hostjob_env, mounts_under, new_id


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


def test_bind_mode_cwd_is_the_containers_view(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """As in host mode: an image path under the mount point (made in the writable layer
    when missing), ``/`` the mount point, a volume's destination that volume."""
    mount_point = tmp_path / "m"
    volume = tmp_path / "vol"
    (volume / "sub").mkdir(parents=True)
    config = base_config("sh", "-c", "pwd; ls")
    config["annotations"] = {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": str(mount_point),
    }
    config["mounts"] = [
        {"destination": "/data", "type": "bind", "source": str(volume), "options": ["rbind"]}
    ]
    existed = Path("/data").exists()
    for n, (cwd, seen) in enumerate(
        [
            ("/", f"{mount_point}\nbin data etc"),  # /data: the volume's link
            ("/etc", f"{mount_point}/etc\nimage-release"),
            ("/made/here", f"{mount_point}/made/here"),
            ("/data", "/data\nsub"),
            ("/data/sub", "/data/sub"),
        ]
    ):
        config["process"]["cwd"] = cwd
        result = hj("run", "-b", str(bundle(config, f"b{n}")), new_id())
        assert result.stdout.split() == seen.split(), (cwd, result.stderr)
    assert not Path(mount_point).exists() and Path("/data").exists() == existed
    # A missing directory is made in the image only, never on a volume.
    config["process"]["cwd"] = "/data/no/such"
    assert "/data/no/such" in hj.fail("run", "-b", str(bundle(config, "b9")), new_id())
    assert not (volume / "no").exists()


def test_each_volume_is_also_under_the_mount_point(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """As hcsshim lays it out: a volume at its destination and, where the image has
    nothing at that path, under the mount point too (a link in the rootfs, removed at
    delete); where the image has that path, the image's stays."""
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "data").write_text("volume data\n")
    config = base_config(
        "sh", "-c",
        "cat $(CONTAINER_SANDBOX_MOUNT_POINT)/srv/config/data /srv/config/data;"
        " ls $(CONTAINER_SANDBOX_MOUNT_POINT)/opt/image-own",
    )  # fmt: skip
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [
        {"destination": "/srv/config", "type": "bind", "source": str(volume), "options": ["ro"]},
        {"destination": "/opt/image-own", "type": "bind", "source": str(volume), "options": []},
    ]
    path = bundle(config)
    (path / "rootfs" / "opt" / "image-own").mkdir(parents=True)
    (path / "rootfs" / "opt" / "image-own" / "the-image-s").write_text("")
    before = sorted(str(p.relative_to(path / "rootfs")) for p in (path / "rootfs").rglob("*"))
    existed = Path("/srv/config").exists(), Path("/opt/image-own").exists()
    result = hj("run", "-b", str(path), new_id())
    assert result.stdout.splitlines() == ["volume data", "volume data", "the-image-s"], (
        result.stderr
    )
    after = sorted(str(p.relative_to(path / "rootfs")) for p in (path / "rootfs").rglob("*"))
    assert after == before  # the link and the directory made for it are gone
    assert (Path("/srv/config").exists(), Path("/opt/image-own").exists()) == existed


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


# --- volumes under /dev, /proc and /sys ----------------------------------------------------


def wait_lines(path: Path, count: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            break
        time.sleep(0.02)
    return path.read_text().splitlines() if path.exists() else []


def bind_volume(source: Path, destination: str, *options: str) -> dict:  # type: ignore[type-arg]
    return {
        "destination": destination,
        "type": "bind",
        "source": str(source),
        "options": ["rbind", *options],
    }


def test_a_dev_volume_the_host_lacks_gets_a_private_dev(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """Like the kubelet's /dev/termination-log: the target is made in the job's own /dev (an
    overlay of the host's), never in the host's; devices, /dev/pts and /dev/shm still work."""
    message = tmp_path / "message"
    message.touch()
    target = f"/dev/hostjob-test-{new_id()}"
    out = tmp_path / "out"
    script = (
        f"echo written-by-the-job > {target}; "
        "test -c /dev/null && echo null-is-a-device; echo x > /dev/null && echo null-writable; "
        "test -c /dev/pts/ptmx && echo pts; grep -q ' /dev/shm ' /proc/self/mountinfo && echo shm; "
        "grep ' /dev ' /proc/self/mountinfo | grep -q overlay && echo private-dev; "
        "touch /dev/made-by-the-job && echo made; exec sleep 300"
    )
    config = base_config("sh", "-c", f"({script}) > {out} 2>&1")
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [bind_volume(message, target)]
    cid = new_id()
    host_dev = sorted(os.listdir("/dev"))
    hj.ok("run", "-d", "-b", str(bundle(config)), cid)
    lines = wait_lines(out, 6)
    assert lines == ["null-is-a-device", "null-writable", "pts", "shm", "private-dev", "made"], (
        lines
    )
    assert message.read_text() == "written-by-the-job\n"
    assert sorted(os.listdir("/dev")) == host_dev  # neither the target nor the job's file
    assert hj.ok("exec", cid, "cat", target) == "written-by-the-job\n"  # an exec sees it too
    hj.ok("delete", "--force", cid)
    assert sorted(os.listdir("/dev")) == host_dev


def test_an_existing_dev_target_needs_no_private_dev(hj: Hostjob, bundle, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "pod-file").touch()
    config = base_config(
        "sh", "-c", "ls /dev/shm; grep ' /dev ' /proc/self/mountinfo | cut -d' ' -f9"
    )
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [bind_volume(shm, "/dev/shm")]
    result = hj("run", "-b", str(bundle(config)), new_id())
    assert result.stdout.split() == ["pod-file", "devtmpfs"], result.stderr


@pytest.mark.parametrize("tree", ["/proc", "/sys"])
def test_a_missing_target_under_proc_or_sys_is_refused(
    hj: Hostjob, bundle, tmp_path: Path, tree: str
) -> None:
    config = base_config("true")
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    target = f"{tree}/hostjob-test-{new_id()}"
    config["mounts"] = [bind_volume(tmp_path, target)]
    error = hj.fail("create", "-b", str(bundle(config)), new_id())
    assert error == (
        f"volume {target}: {target} does not exist, and hostjob makes nothing under {tree}"
        " (only a path that exists there can be a mount target)"
    )
    assert not os.path.lexists(target)
    assert containers_left(hj.root) == []


def test_an_existing_target_under_sys_is_bound_for_the_job_only(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    (tmp_path / "vol").mkdir()
    (tmp_path / "vol" / "from-the-volume").touch()
    config = base_config("ls", "/sys/firmware")
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [bind_volume(tmp_path / "vol", "/sys/firmware", "ro")]
    before = sorted(os.listdir("/sys/firmware"))
    assert hj("run", "-b", str(bundle(config)), new_id()).stdout == "from-the-volume\n"
    assert sorted(os.listdir("/sys/firmware")) == before


# --- propagation ------------------------------------------------------------------------------


def test_volume_propagation(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """rshared (Bidirectional): the job's mounts under the volume reach the host; rprivate (the
    default): nothing either way; rslave (HostToContainer): the host's mounts reach the job."""
    shared = tmp_path / "shared"
    shared.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "hostjob-test-shared", str(shared)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(shared)], check=True)
        for name in ("bidi", "plain", "h2c"):
            (shared / name).mkdir()
        inside = tmp_path / "in"  # missing on the host: made in the job's namespace,
        # on a private copy of tmp_path, whose existing entries (``o``) stay the host's
        (tmp_path / "o").mkdir()
        out = tmp_path / "o" / "out"
        config = base_config(
            "sh",
            "-c",
            f"mkdir {inside}/bidi/m {inside}/plain/m && mount -t tmpfs job-bidi {inside}/bidi/m"
            f" && mount -t tmpfs job-plain {inside}/plain/m && echo mounted > {out}; exec sleep 300",
        )
        config["annotations"] = {"io.hostjob.mount-mode": "bind"}
        config["mounts"] = [
            bind_volume(shared / "bidi", f"{inside}/bidi", "rshared"),
            bind_volume(shared / "plain", f"{inside}/plain"),
            bind_volume(shared / "h2c", f"{inside}/h2c", "rslave"),
        ]
        cid = new_id()
        hj.ok("run", "-d", "-b", str(bundle(config)), cid)
        assert wait_lines(out, 1) == ["mounted"]
        on_host = mounts_under(str(shared))
        assert str(shared / "bidi" / "m") in on_host
        assert str(shared / "plain" / "m") not in on_host
        for name in ("plain", "h2c"):
            (shared / name / "h").mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", f"host-{name}", str(shared / name / "h")], check=True
            )
        in_job = {
            line.split()[4]
            for line in hj.ok("exec", cid, "cat", "/proc/self/mountinfo").splitlines()
        }
        assert str(inside / "h2c" / "h") in in_job
        assert str(inside / "plain" / "h") not in in_job
        hj.ok("delete", "--force", cid)
        assert not inside.exists()
    finally:
        for point in sorted(mounts_under(str(shared)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)


def test_a_tmpfs_volume_is_the_jobs_own(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """docker's and podman's --tmpfs in bind mode: a new tmpfs at its destination in the
    private namespace (the host sees none of it; a missing target is made and removed
    again), read-only when asked."""
    scratch, frozen = tmp_path / "scratch", tmp_path / "frozen"
    script = (
        f"echo data > {scratch}/f && grep -F ' {scratch} ' /proc/self/mounts | cut -d' ' -f3,4;"
        f" touch {frozen}/x 2>/dev/null && echo written || echo refused"
    )
    config = base_config("sh", "-c", script)
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [
        {"destination": str(scratch), "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "size=2m"]},
        {"destination": str(frozen), "type": "tmpfs", "source": "tmpfs", "options": ["ro"]},
    ]  # fmt: skip
    before = [m for m in host_mounts() if m.startswith(str(tmp_path))]
    result = hj("run", "-b", str(bundle(config)), new_id())
    fstype_options, written = result.stdout.splitlines()
    fstype, _, options = fstype_options.partition(" ")
    # (6.1's tmpfs also lists inode64, which 6.18's leaves out as its default)
    assert fstype == "tmpfs" and written == "refused", result.stderr
    assert {"rw", "nosuid", "nodev", "size=2048k"} <= set(options.split(",")), options
    assert [m for m in host_mounts() if m.startswith(str(tmp_path))] == before
    assert not scratch.exists() and not frozen.exists()


def test_the_operators_default_mount_mode(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """docker cannot send annotations: `"runtimeArgs": ["--default-mount-mode=bind"]`
    puts the flag before every command; the container's own annotation still wins."""
    config = base_config("sh", "-c", 'echo "$CONTAINER_SANDBOX_MOUNT_POINT"')
    flag = ["--default-mount-mode=bind", "--default-rootfs-mount-point", str(tmp_path / "j")]
    words = hj.argv("run", "-b", str(bundle(config)), new_id())
    at = words.index("run")
    seen = subprocess.run(
        [*words[:at], *flag, *words[at:]], capture_output=True, text=True, env=hostjob_env()
    )
    assert seen.stdout == f"{tmp_path / 'j'}\n", seen.stderr
    config["annotations"] = {"io.hostjob.mount-mode": "host"}
    b = bundle(config, "own")
    words = hj.argv("run", "-b", str(b), new_id())
    seen = subprocess.run(
        [*words[:at], "--default-mount-mode=bind", *words[at:]],
        capture_output=True,
        text=True,
        env=hostjob_env(),
    )
    assert seen.stdout == f"{b / 'rootfs'}\n", seen.stderr
    bad = subprocess.run(
        [*hj.argv()[:at], "--default-mount-mode=overlay", "list"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "--default-mount-mode" in bad.stderr
