"""exec: another process in the job, with the init's treatment and runc's flags."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, hostjob_env, new_id, proc_cgroup
from tests.integration.test_stdio import ConsoleServer, read_until_eof


@pytest.fixture
def running(hj: Hostjob, bundle) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A running job container (sleeping init), deleted afterwards."""
    cid = new_id()
    config = base_config("sleep", "300")
    config["process"]["env"] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_CONFIG=yes"]
    hj.ok("run", "-d", "-b", str(bundle(config)), cid)
    yield cid
    hj("delete", "--force", cid)


def test_exec_output_and_exit_code(hj: Hostjob, running: str) -> None:
    result = hj("exec", running, "sh", "-c", "echo out; echo err >&2; exit 5")
    assert result.returncode == 5
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"


def test_exec_gets_job_container_treatment(hj: Hostjob, running: str, tmp_path: Path) -> None:
    mp = str(tmp_path / "bundle" / "rootfs")
    out = hj.ok("exec", "-e", "EXTRA=$CONTAINER_SANDBOX_MOUNT_POINT/x", "--cwd", "/etc", running, "sh", "-c",
                'echo "$CONTAINER_SANDBOX_MOUNT_POINT|$EXTRA|$FROM_CONFIG|$(pwd)|$PATH"')  # fmt: skip
    sandbox, extra, from_config, cwd, path = out.strip().split("|")
    assert sandbox == mp
    assert extra == f"{mp}/x"
    assert from_config == "yes"  # the container's own env is the base, as runc does
    assert cwd == f"{mp}/etc"
    assert path.endswith(f":{mp}:{mp}/usr/sbin:{mp}/usr/bin:{mp}/sbin:{mp}/bin")


def test_exec_lands_in_the_job_and_dies_with_kill_all(
    hj: Hostjob, running: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "exec.pid"
    hj.ok("exec", "-d", "--pid-file", str(pid_file), running, "sleep", "300")
    raw = pid_file.read_bytes()
    assert raw.isdigit()
    pid = int(raw)
    assert f"/hostjob/{running}" in proc_cgroup(pid)
    hj.ok("kill", "--all", running, "KILL")
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.02)
    assert hj.status(running) == "stopped"


def test_exec_as_user(hj: Hostjob, running: str) -> None:
    assert hj.ok("exec", "--user", "1234:2345", running, "sh", "-c", "id -u; id -g").split() == [
        "1234",
        "2345",
    ]
    assert hj.ok("exec", "-u", "nobody", running, "id", "-un") == "nobody\n"
    assert hj.ok("exec", running, "id", "-u") == "0\n"  # the container's user by default
    groups = hj.ok("exec", "-u", "1234", "-g", "77", "-g", "88", running, "id", "-G").split()
    assert {"77", "88"} <= set(groups)


def test_exec_process_file(hj: Hostjob, running: str, tmp_path: Path) -> None:
    process = {
        "args": ["sh", "-c", "echo $A; id -u; exit 3"],
        "env": ["A=from-process-json"],
        "cwd": "/",
        "user": {"uid": 4321, "gid": 4321},
    }
    path = tmp_path / "process.json"
    path.write_text(json.dumps(process))
    result = hj("exec", "--process", str(path), running)
    assert result.returncode == 3
    assert result.stdout.split() == ["from-process-json", "4321"]
    path.write_text('{"args": "not-a-list"}')
    assert "process.args" in hj.fail("exec", "--process", str(path), running)


def test_exec_missing_program(hj: Hostjob, running: str) -> None:
    assert 'exec: "nope": executable file not found' in hj.fail("exec", running, "nope")


def test_exec_tty_through_console_socket(hj: Hostjob, running: str, tmp_path: Path) -> None:
    server = ConsoleServer(tmp_path / "exec-console.sock")
    try:
        proc = subprocess.Popen(
            hj.argv(
                "exec",
                "-t",
                "--console-socket",
                str(server.path),
                running,
                "sh",
                "-c",
                "tty; exit 4",
            ),
            env=hostjob_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        master, name = server.receive()
        output = read_until_eof(master)
        os.close(master)
        assert proc.wait(timeout=20) == 4
    finally:
        server.close()
    assert output.strip() == name


def test_exec_tty_proxied(hj: Hostjob, running: str) -> None:
    result = hj("exec", "-t", running, "sh", "-c", "read x; echo got:$x; tty", input="hi\n")
    assert result.returncode == 0, result.stderr
    assert "got:hi" in result.stdout and "/dev/pts/" in result.stdout


def test_exec_on_stopped_container(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("run", "-d", "-b", str(bundle(base_config("true"))), cid)
    deadline = time.monotonic() + 10
    while hj.status(cid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "container not running" in hj.fail("exec", cid, "true")
    assert "container does not exist" in hj.fail("exec", "nosuch", "true")
    hj.ok("delete", cid)


def test_exec_flags_accepted(hj: Hostjob, running: str) -> None:
    out = hj.ok("exec", "--no-new-privs", "--cap", "CAP_KILL", "--process-label", "x",
                "--apparmor", "y", "--ignore-paused", running, "grep", "NoNewPrivs", "/proc/self/status")  # fmt: skip
    assert out.split() == ["NoNewPrivs:", "1"]
