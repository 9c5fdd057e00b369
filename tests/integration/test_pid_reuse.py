"""Pid reuse: a container whose init died and whose pid number now
belongs to another process is ``stopped``, and no verb ever signals that stranger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import Hostjob, alive, base_config, new_id

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}"):
        assert time.monotonic() < deadline, f"pid {pid} was not reaped"
        time.sleep(0.01)


def spawn_with_pid(pid: int, attempts: int = 200) -> subprocess.Popen[bytes] | None:
    """A `sleep` that gets exactly ``pid`` (ns_last_pid = pid - 1, then fork)."""
    for _ in range(attempts):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(["sleep", "300"])
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None  # the machine forked too busily in between, every time


def check_stranger_untouched(hj: Hostjob, cid: str, stranger: subprocess.Popen[bytes]) -> None:
    state = hj.state(cid)
    assert state["status"] == "stopped" and state["pid"] == 0, state
    assert "container not running" in hj.fail("kill", cid, "KILL")
    assert "container not running" in hj.fail("kill", cid, "TERM")
    hj.ok("kill", "--all", cid, "KILL")  # the job's cgroup: the stranger is not in it
    listed = json.loads(hj.ok("list", "--format", "json"))
    assert [c["status"] for c in listed if c["id"] == cid] == ["stopped"]
    hj.ok("delete", cid)  # stopped: delete without --force
    time.sleep(0.05)
    assert stranger.poll() is None and alive(stranger.pid), "the stranger was signalled"


def test_recycled_pid_by_ns_last_pid(hj: Hostjob, bundle) -> None:
    """The init is killed and reaped; a new process is made to take its pid number."""
    if not os.path.exists(NS_LAST_PID):
        pytest.fail("kernel without ns_last_pid (CONFIG_CHECKPOINT_RESTORE)")
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    hj.ok("start", cid)
    pid = hj.state(cid)["pid"]
    os.kill(pid, signal.SIGKILL)  # behind hostjob's back; its reaper collects it
    wait_gone(pid)
    stranger = spawn_with_pid(pid)
    assert stranger is not None, "could not get the pid reused"
    try:
        check_stranger_untouched(hj, cid, stranger)
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("phase", ["created", "running"])
def test_record_pointing_at_a_stranger(hj: Hostjob, bundle, phase: str) -> None:
    """The record's pid names a live unrelated process (other start time)."""
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    if phase == "running":
        hj.ok("start", cid)
    real = hj.state(cid)["pid"]
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        path = Path(hj.root, cid, "state.json")
        record = json.loads(path.read_text())
        record["pid"] = stranger.pid  # startTime stays the init's: it differs
        path.write_text(json.dumps(record))
        check_stranger_untouched(hj, cid, stranger)
    finally:
        stranger.kill()
        stranger.wait()
    # delete removed the cgroup, taking the real (orphaned) init with it
    wait_gone(real)


def test_zombie_init_is_stopped(tmp_path: Path, bundle) -> None:
    """An init that exited but is not reaped yet (we are its parent) is stopped."""
    from hostjob import Container, ContainerNotRunning

    b = bundle(base_config("sleep", "300"))
    root = str(tmp_path / "state")
    container = Container.create(new_id(), str(b), root=root)
    container.start()
    pid = container.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert os.path.exists(f"/proc/{pid}")  # a zombie: the number is still taken
    container.reload()
    assert container.status() == "stopped"
    with pytest.raises(ContainerNotRunning):
        container.kill(signal.SIGTERM)
    container.delete()
    os.waitpid(pid, 0)
