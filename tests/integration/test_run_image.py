"""`hostjob run IMAGE` — config from the image and the flags, the overlay as the
sandbox, the same lifecycle as a bundle, and nothing left behind with --rm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from tests.helpers import (
    BUSYBOX,
    Hostjob,
    cgroup_dirs,
    containers_left,
    hostjob_env,
    job_file,
    mounts_under,
    new_id,
)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-layer job-container image: busybox, a tool, a motd; Cmd, Env, WorkingDir."""
    src = tmp_path_factory.mktemp("image-src")
    (src / "bin").mkdir()
    (src / "etc").mkdir()
    (src / "opt" / "app").mkdir(parents=True)
    (src / "bin" / "busybox").write_bytes(Path(BUSYBOX).read_bytes())
    (src / "bin" / "busybox").chmod(0o755)
    for applet in ("sh", "cat", "echo", "id", "pwd", "sleep", "ls", "env", "stty", "tty"):
        (src / "bin" / applet).symlink_to("busybox")
    (src / "etc" / "motd").write_text("from the image\n")
    tool = src / "opt" / "app" / "tool"
    tool.write_text("#!/bin/sh\necho tool says $GREETING from $(pwd)\n")
    tool.chmod(0o755)
    layout = tmp_path_factory.mktemp("layout")
    pack(
        str(src),
        f"oci:{layout}:v1",
        cmd=["/opt/app/tool"],
        env=["PATH=/usr/bin:/bin", "GREETING=hello"],
        workdir="/opt/app",
        labels={"org.example.role": "tool"},
    )
    return f"oci:{layout}:v1"


@pytest.fixture
def store(tmp_path: Path) -> str:
    # Containers here run as other users too: they must reach their rootfs under the
    # state root, which pytest's private (0700) temp dirs would hide.
    for directory in (tmp_path, *tmp_path.parents):
        if str(directory).startswith("/tmp/") and directory.is_dir():
            directory.chmod(directory.stat().st_mode | 0o711)
    return str(tmp_path / "store")


def leftovers(hj: Hostjob, cid: str, store: str) -> list[str]:
    found = []
    if (hj.root / cid).exists():
        found.append("state")
    found += cgroup_dirs(f"/hostjob/{cid}")
    found += mounts_under(str(hj.root / cid))
    for sub in ("rw", "containers"):
        directory = Path(store) / sub
        if directory.exists():
            found += [f"{sub}/{name}" for name in os.listdir(directory) if cid in name]
    return found


def test_image_config_is_the_default(hj: Hostjob, image: str, store: str) -> None:
    cid = new_id()
    result = hj("run", "--rm", "-q", "--store", store, "--name", cid, image)
    assert result.returncode == 0, result.stderr
    mount_point = hj.root / cid / "rootfs"
    assert result.stdout == f"tool says hello from {mount_point}/opt/app\n"
    assert leftovers(hj, cid, store) == []


def test_flags_override_the_image(hj: Hostjob, image: str, store: str, tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text("# comment\nFROM_FILE=yes\n\nGREETING=from-file\n")
    cid = new_id()
    script = 'echo "$GREETING $FROM_FILE $EXTRA $(pwd) $(id -u):$(id -g)"'
    result = hj(
        "run", "--rm", "-q", "--store", store, "--name", cid, "--env-file", str(env_file),
        "-e", "EXTRA=flag", "--cwd", "/etc", "--user", "1234:5678", image, "sh", "-c", script,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "from-file",
        "yes",
        "flag",
        f"{hj.root / cid}/rootfs/etc",
        "1234:5678",
    ]
    result = hj(
        "run", "--rm", "-q", "--store", store, "--entrypoint", "/bin/echo", image, "only", "args"
    )
    assert result.stdout == "only args\n"
    result = hj(
        "run", "--rm", "-q", "--store", store, "--entrypoint", '["/bin/sh", "-c"]', image, "exit 9"
    )
    assert result.returncode == 9


def test_no_user_means_the_launchers(hj: Hostjob, image: str, store: str) -> None:
    result = hj("run", "--rm", "-q", "--store", store, image, "id", "-u")
    assert result.stdout == f"{os.getuid()}\n"


def test_exit_status_and_signals(hj: Hostjob, image: str, store: str, tmp_path: Path) -> None:
    assert (
        hj("run", "--rm", "-q", "--store", store, image, "sh", "-c", "kill -9 $$").returncode == 137
    )
    marker = tmp_path / "got-term"
    script = f"trap 'echo term > {marker}; exit 42' TERM; while :; do sleep 0.05; done"
    cid = new_id()
    runner = subprocess.Popen(
        hj.argv("run", "--rm", "-q", "--store", store, "--name", cid, image, "sh", "-c", script),
        env=hostjob_env(),
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not (hj.root / cid).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 42
    assert marker.read_text() == "term\n"
    assert leftovers(hj, cid, store) == []


def test_kept_container_until_delete(hj: Hostjob, image: str, store: str) -> None:
    cid = new_id()
    host_file = f"/tmp/{cid}-written-on-the-host"
    try:
        result = hj(
            "run",
            "-q",
            "--store",
            store,
            "--name",
            cid,
            image,
            "sh",
            "-c",
            f"echo data > {host_file}; echo written > $CONTAINER_SANDBOX_MOUNT_POINT/etc/new",
        )
        assert result.returncode == 0, result.stderr
        with open(host_file) as f:  # host mode: its /tmp is the host's
            assert f.read() == "data\n"
    finally:
        if os.path.exists(host_file):
            os.unlink(host_file)
    state = hj.state(cid)
    assert state["status"] == "stopped"
    # The image's labels are data (shown by `inspect`), never annotations: an image is not
    # trusted to choose how it runs.
    assert "org.example.role" not in state["annotations"]
    assert (
        json.loads((hj.root / cid / "config.json").read_text())["process"]["cwd"]
        == "$CONTAINER_SANDBOX_MOUNT_POINT/opt/app"
    )
    assert (
        hj.root / cid / "rootfs" / "etc" / "new"
    ).read_text() == "written\n"  # its writable layer
    hj.ok("delete", cid)
    assert leftovers(hj, cid, store) == []


def test_detached_and_detached_rm(hj: Hostjob, image: str, store: str) -> None:
    cid = new_id()
    out = hj.ok("run", "-d", "-q", "--store", store, "--name", cid, image, "sleep", "300")
    assert out == f"{cid}\n"
    assert hj.status(cid) == "running"
    assert (
        hj.ok("exec", cid, "cat", "$CONTAINER_SANDBOX_MOUNT_POINT/etc/motd") == "from the image\n"
    )
    hj.ok("delete", "--force", cid)
    assert leftovers(hj, cid, store) == []

    cid = new_id()
    hj.ok("run", "-d", "--rm", "-q", "--store", store, "--name", cid, image, "sleep", "1")
    deadline = time.monotonic() + 20
    while (hj.root / cid).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(hj, cid, store) == []


def test_limits_and_volumes(hj: Hostjob, image: str, store: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("volume\n")
    cid = new_id()
    hj.ok("run", "-d", "-q", "--store", store, "--name", cid, "--memory", "64m", "--cpus", "0.5",
          "--pids-limit", "20", "-v", f"{data}:/srv/data:ro", image, "sleep", "300")  # fmt: skip
    job = f"/hostjob/{cid}"
    memory = job_file(job, ("memory", "memory.limit_in_bytes"), "memory.max")
    assert memory.read_text().strip() == str(64 << 20)
    cpu = job_file(job, ("cpu", "cpu.cfs_quota_us"), "cpu.max").read_text().split()
    assert cpu[0] == "50000"
    assert job_file(job, ("pids", "pids.max"), "pids.max").read_text().strip() == "20"
    assert hj.ok("exec", cid, "cat", "$CONTAINER_SANDBOX_MOUNT_POINT/srv/data/f") == "volume\n"
    hj.ok("delete", "--force", cid)
    assert leftovers(hj, cid, store) == []
    assert (data / "f").read_text() == "volume\n"


def test_bind_mode_and_mount_point(hj: Hostjob, image: str, store: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("bound\n")
    result = hj("run", "--rm", "-q", "--store", store, "--mount-mode", "bind", "-v", f"{data}:{tmp_path}/dst:ro",
                image, "sh", "-c", f'echo $CONTAINER_SANDBOX_MOUNT_POINT; cat /hpc/etc/motd; cat {tmp_path}/dst/f')  # fmt: skip
    assert result.stdout.splitlines() == ["/hpc", "from the image", "bound"], result.stderr
    mount_point = tmp_path / "sandbox"
    result = hj(
        "run",
        "--rm",
        "-q",
        "--store",
        store,
        "--mount-point",
        str(mount_point),
        image,
        "cat",
        f"{mount_point}/etc/motd",
    )
    assert result.stdout == "from the image\n", result.stderr
    assert mounts_under(str(mount_point)) == [] and not mount_point.exists()


def test_tty(hj: Hostjob, image: str, store: str) -> None:
    result = hj(
        "run",
        "--rm",
        "-q",
        "-t",
        "--store",
        store,
        image,
        "sh",
        "-c",
        "read x; echo got:$x; tty",
        input="hi\n",
    )
    assert result.returncode == 0, result.stderr
    assert "got:hi" in result.stdout and "/dev/pts/" in result.stdout


def test_bad_input(hj: Hostjob, store: str, image: str) -> None:
    assert "no such image" in hj.fail("run", "--store", store, "--pull", "never", "nosuch:latest")
    assert hj.fail("run", "--store", store, "UPPER/case::x")
    assert "--volume" in hj.fail("run", "--store", store, "-v", "nocolon", image)
    assert "--mount-mode" in hj.fail("run", "--store", store, "--mount-mode", "weird", image)
    assert "invalid container ID" in hj.fail("run", "--store", store, "--name", "../x", image)
    assert not Path(store, "blobs").exists()  # refused before anything was pulled
    assert containers_left(hj.root) == []
