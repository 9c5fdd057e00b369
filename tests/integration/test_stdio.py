"""Terminals (--console-socket), pidfds (--pidfd-socket), extra fds (--preserve-fds,
LISTEN_FDS) and run -t."""

from __future__ import annotations

import array
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.helpers import Hostjob, base_config, hostjob_env, new_id, wait_for


class ConsoleServer:
    """What containerd's shim does: listen, receive the pty master over SCM_RIGHTS."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(1)
        self.sock.settimeout(20)

    def receive(self) -> tuple[int, str]:
        conn, _ = self.sock.accept()
        with conn:
            fds = array.array("i")
            msg, ancdata, _flags, _addr = conn.recvmsg(1024, socket.CMSG_SPACE(fds.itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: fds.itemsize])
        return fds[0], msg.decode()

    def close(self) -> None:
        self.sock.close()


def read_until_eof(fd: int, timeout: float = 20) -> str:
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO once the slave side is closed
            break
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def at_fd3(fd: int) -> dict:  # type: ignore[type-arg]
    """subprocess arguments that hand ``fd`` to hostjob as fd 3 (where runc's clients
    put extra fds) without touching the test process's own fd 3."""
    return {"preexec_fn": lambda: os.dup2(fd, 3), "pass_fds": (3,)}


def test_console_socket(hj: Hostjob, bundle, tmp_path: Path) -> None:
    server = ConsoleServer(tmp_path / "console.sock")
    config = base_config("sh", "-c", "tty; stty size; test -t 0 && echo stdin-is-tty")
    config["process"]["terminal"] = True
    config["process"]["consoleSize"] = {"height": 33, "width": 111}
    cid = new_id()
    try:
        create = subprocess.Popen(
            hj.argv("create", "-b", str(bundle(config)), "--console-socket", str(server.path), cid),
            env=hostjob_env(),
            stderr=subprocess.DEVNULL,
        )
        master, name = server.receive()
        assert create.wait(timeout=20) == 0
        assert name.startswith("/dev/pts/")
        hj.ok("start", cid)
        output = read_until_eof(master)
        os.close(master)
    finally:
        server.close()
    lines = [line.strip() for line in output.splitlines()]
    assert lines[0] == name
    assert lines[1] == "33 111"
    assert lines[2] == "stdin-is-tty"
    hj.ok("delete", "--force", cid)


def pidfd_pid(pidfd: int) -> int:
    """The pid a pidfd refers to (its fdinfo's ``Pid:``)."""
    for line in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines():
        if line.startswith("Pid:"):
            return int(line.split()[1])
    raise AssertionError("no Pid: in the pidfd's fdinfo")


def test_pidfd_socket_of_create_and_exec(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """runc 1.2's --pidfd-socket: the init's pidfd ("standard") at create, an exec's
    ("setns"); the client signals the very process through it."""
    server = ConsoleServer(tmp_path / "pidfd.sock")
    cid = new_id()
    pid_file = tmp_path / "pid"
    config = base_config("sh", "-c", 'trap "exit 0" TERM; while :; do sleep 1; done')
    try:
        create = subprocess.Popen(
            hj.argv("create", "-b", str(bundle(config)), "--pid-file", str(pid_file),
                    "--pidfd-socket", str(server.path), cid),
            env=hostjob_env(),
        )  # fmt: skip
        pidfd, kind = server.receive()
        assert create.wait(timeout=20) == 0
        assert kind == "standard"
        assert pidfd_pid(pidfd) == int(pid_file.read_text())
        hj.ok("start", cid)
        exec_pid = tmp_path / "exec-pid"
        hj.ok("exec", "--detach", "--pid-file", str(exec_pid), "--pidfd-socket",
              str(server.path), cid, "sleep", "300")  # fmt: skip
        exec_fd, exec_kind = server.receive()
        assert exec_kind == "setns"
        assert pidfd_pid(exec_fd) == int(exec_pid.read_text())
        signal.pidfd_send_signal(exec_fd, signal.SIGKILL)
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        os.close(exec_fd)
        os.close(pidfd)
    finally:
        server.close()
    assert wait_for(lambda: hj.status(cid) == "stopped", 20)
    hj.ok("delete", cid)


def test_pidfd_socket_that_nobody_serves_fails_create(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    missing = tmp_path / "nobody.sock"
    err = hj.fail(
        "create", "-b", str(bundle(base_config("true"))), "--pidfd-socket", str(missing), cid
    )
    assert "pidfd socket" in err, err
    assert not (hj.root / cid).exists()


def test_terminal_without_socket_is_refused_for_create(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["process"]["terminal"] = True
    cid = new_id()
    assert "console-socket" in hj.fail("create", "-b", str(bundle(config)), cid)
    assert not (hj.root / cid).exists()


def test_run_tty_proxies_terminal(hj: Hostjob, bundle) -> None:
    config = base_config("sh", "-c", "read x; echo got:$x; tty")
    config["process"]["terminal"] = True
    result = hj("run", "-b", str(bundle(config)), new_id(), input="hello\n")
    assert result.returncode == 0, result.stderr
    assert "got:hello" in result.stdout
    assert "/dev/pts/" in result.stdout


def test_preserve_fds(hj: Hostjob, bundle, tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    config = base_config("sh", "-c", "echo through-fd-3 >&3")
    try:
        result = hj(
            "run", "--preserve-fds", "1", "-b", str(bundle(config)), new_id(), **at_fd3(write_end)
        )
    finally:
        os.close(write_end)
    assert result.returncode == 0, result.stderr
    assert os.read(read_end, 100) == b"through-fd-3\n"
    os.close(read_end)


def test_listen_fds(hj: Hostjob, bundle) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    config = base_config(
        "sh",
        "-c",
        'echo "fds=$LISTEN_FDS pid=$LISTEN_PID self=$$"; test -e /proc/self/fd/3 && echo has-3',
    )
    try:
        result = hj(
            "run",
            "-b",
            str(bundle(config)),
            new_id(),
            env={"LISTEN_FDS": "1"},
            **at_fd3(listener.fileno()),
        )
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    values = dict(part.split("=") for part in first.split())
    assert values["fds"] == "1"
    assert values["pid"] == values["self"]
    assert second == "has-3"
