"""critest's streaming cases (``streaming.go``), for both handlers: ``Exec``, ``Attach`` and
``PortForward`` return a URL of containerd's streaming server, which ``streaming.py`` speaks
to as kubectl does (WebSocket, the remotecommand and port-forward protocols)."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from .critest import PAUSE, Critest
from .kubelet import CALL_TIMEOUT, wait
from .streaming import PortForward, RemoteCommand

STREAM_TIMEOUT = 60


def exec_url(ct: Critest, cid: str, cmd: list[str], **kw: bool) -> str:
    resp = ct.rt.Exec(cri.ExecRequest(container_id=cid, cmd=cmd, **kw), timeout=CALL_TIMEOUT)
    assert resp.url.startswith("http://127.0.0.1:"), resp.url
    return str(resp.url)


def test_exec_without_tty(ct: Critest) -> None:
    """Exec with tty=false, stdin=false: the output on its channels, the exit status on the
    error channel (critest's ``echo hello``, and a failing command's exit code)."""
    sb = ct.run_pod()
    cid = sb.run("exec", PAUSE)
    url = exec_url(ct, cid, ["echo", "hello"], stdout=True, stderr=True)
    with RemoteCommand(url) as s:
        assert s.protocol == "v4.channel.k8s.io"  # containerd 1.6's newest
        s.wait_closed(STREAM_TIMEOUT)
        assert (s.stdout(), s.stderr(), s.exit_code()) == (b"hello\n", b"", 0), s.received

    url = exec_url(
        ct, cid, ["sh", "-c", "echo to-out; echo to-err >&2; exit 7"], stdout=True, stderr=True
    )
    with RemoteCommand(url) as s:
        s.wait_closed(STREAM_TIMEOUT)
        assert (s.stdout(), s.stderr(), s.exit_code()) == (b"to-out\n", b"to-err\n", 7)


def test_exec_with_tty_and_stdin(ct: Critest) -> None:
    """Exec with tty=true, stdin=true: the command is on a terminal that the resize channel
    sizes, reads what is sent on stdin (echoed by the terminal), and exits 0."""
    sb = ct.run_pod()
    cid = sb.run("exec-tty", PAUSE)
    script = (
        'test -t 0 && echo on-a-tty; while [ "$(stty size)" != "40 100" ]; do sleep 0.05; done; '
        'echo resized; read line; echo "got:$line"'
    )
    url = exec_url(ct, cid, ["sh", "-c", script], stdin=True, stdout=True, tty=True)
    with RemoteCommand(url) as s:
        s.resize(100, 40)
        s.wait(lambda: b"resized" in s.stdout(), STREAM_TIMEOUT, "the resize to reach the tty")
        s.stdin(b"hello\n")
        s.wait_closed(STREAM_TIMEOUT)
        out = s.stdout()
        assert b"on-a-tty" in out and b"got:hello" in out, out
        assert b"\r\n" in out, "no terminal line discipline"
        assert s.exit_code() == 0 and s.stderr() == b""


def test_attach(ct: Critest) -> None:
    """Attach to a shell reading its stdin (critest's ``createShellContainer``: stdin and
    stdin_once): what is written runs, its output comes back; when the attach ends, the
    container's stdin closes and the shell exits."""
    sb = ct.run_pod()
    cid = sb.run("attach", ["sh"], stdin=True, stdin_once=True)
    resp = ct.rt.Attach(
        cri.AttachRequest(container_id=cid, stdin=True, stdout=True, stderr=True),
        timeout=CALL_TIMEOUT,
    )
    with RemoteCommand(resp.url) as s:
        s.stdin(b"echo hello\n")
        s.wait(lambda: s.stdout() == b"hello\n", STREAM_TIMEOUT, "the echo's output")
        s.stdin(b"echo to-err >&2\n")
        s.wait(lambda: s.stderr() == b"to-err\n", STREAM_TIMEOUT, "the echo's stderr")
    st = ct.wait_state(cid, cri.CONTAINER_EXITED)
    assert st.exit_code == 0, st
    assert sorted(t for _, _, t in sb.log(cid)) == ["hello", "to-err"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (the host's network namespace)."""
    want = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == want and fields[3] == "0A":
            return True
    return False


def test_port_forward(ct: Critest, tmp_path: Path) -> None:
    """PortForward to a web server in the pod (busybox ``httpd`` on 127.0.0.1: the pod is on
    the host's network) answers through the stream."""
    www = tmp_path / "www"
    www.mkdir()
    token = secrets.token_hex(8)
    (www / "index.html").write_text(f"served {token}\n")
    port = free_port()
    sb = ct.run_pod()
    ct_mounts = [cri.Mount(container_path=str(www), host_path=str(www), readonly=True)]
    sb.run("web", ["httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", str(www)], mounts=ct_mounts)
    wait(lambda: listening(port), 30, f"the web server on 127.0.0.1:{port}")
    resp = ct.rt.PortForward(
        cri.PortForwardRequest(pod_sandbox_id=sb.sandbox_id, port=[port]), timeout=CALL_TIMEOUT
    )
    with PortForward(resp.url, port) as pf:
        answer = pf.exchange(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n", STREAM_TIMEOUT)
    assert answer.split(b"\r\n", 1)[0].endswith(b" 200 OK"), answer
    assert answer.endswith(f"served {token}\n".encode()), answer
