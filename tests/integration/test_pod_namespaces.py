"""Against the kernel: a pod's container asking for namespaces a job container cannot
give is refused at create; with ``io.hostjob.pod-namespaces: join`` it joins a real network
namespace (``ip netns add``) and a sandbox's IPC and UTS namespaces -- its init and every
exec -- while its files, processes and cgroup stay the host's."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, mounts_under, new_id

CONTAINER = {"io.kubernetes.cri.container-type": "container", "io.hostjob.mount-mode": "host"}
JOIN = {"io.hostjob.pod-namespaces": "join"}


class Sandbox:
    """A pod sandbox's namespaces: a named network namespace and a process holding IPC
    and UTS namespaces of its own (named ``pod-<n>``)."""

    def __init__(self) -> None:
        self.name = f"hj-{uuid.uuid4().hex[:8]}"
        self.netns = f"/var/run/netns/{self.name}"
        self.hostname = f"pod-{self.name}"
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        # `&&`: the name is set only once unshare made the new UTS namespace
        self.holder = subprocess.Popen(
            ["unshare", "--ipc", "--uts", "sh", "-c", f"hostname {self.hostname} && exec sleep 600"]
        )
        for _ in range(500):
            if ns(self.holder.pid, "uts") != ns("self", "uts"):
                out = subprocess.run(
                    ["nsenter", "-t", str(self.holder.pid), "-u", "hostname"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                if out == self.hostname:
                    break
            time.sleep(0.01)

    def namespaces(self, pid: str = "/proc/self/ns/pid") -> list[dict[str, str]]:
        return [
            {"type": "pid", "path": f"/proc/{os.getpid()}/ns/pid"},
            {"type": "ipc", "path": f"/proc/{self.holder.pid}/ns/ipc"},
            {"type": "uts", "path": f"/proc/{self.holder.pid}/ns/uts"},
            {"type": "mount"},
            {"type": "network", "path": self.netns},
        ]

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()
        subprocess.run(["ip", "netns", "delete", self.name], check=True)


def ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


NETNS_DIR = "/run/netns"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    name = socket.gethostname()
    had_dir, had_mount = os.path.isdir(NETNS_DIR), bool(mounts_under(NETNS_DIR))
    box = Sandbox()
    try:
        yield box
    finally:
        box.close()
        assert not os.path.exists(box.netns)
        assert socket.gethostname() == name, "the host's name changed"
        # The first `ip netns add` on a machine makes /run/netns (and a mount of it on
        # itself, shared), which `ip netns delete` leaves: the suite must not.
        while (
            not had_mount
            and set(mounts_under(NETNS_DIR)) == {NETNS_DIR}
            and not os.listdir(NETNS_DIR)
        ):
            subprocess.run(["umount", NETNS_DIR], check=True)
        if not had_dir and os.path.isdir(NETNS_DIR) and not os.listdir(NETNS_DIR):
            os.rmdir(NETNS_DIR)


def config(annotations: dict[str, str], namespaces: list[dict[str, str]], *args: str) -> dict:  # type: ignore[type-arg]
    spec = base_config(*args)
    spec["annotations"] = annotations
    spec["linux"] = {"namespaces": namespaces}
    return spec


@pytest.mark.parametrize("mode", ["host", "bind"])
def test_a_joining_pods_container_is_in_the_pods_namespaces(
    hj: Hostjob, bundle, sandbox: Sandbox, mode: str
) -> None:
    annotations = {**CONTAINER, **JOIN, "io.hostjob.mount-mode": mode}
    spec = config(annotations, sandbox.namespaces(), "sleep", "300")
    cid = new_id()
    hj.ok("create", "-b", str(bundle(spec)), cid)
    try:
        pid = hj.state(cid)["pid"]
        netns = os.stat(sandbox.netns)
        for kind in ("ipc", "uts"):
            assert ns(pid, kind) == ns(sandbox.holder.pid, kind), kind
        assert ns(pid, "net") == f"net:[{netns.st_ino}]"
        for kind in ("pid", "cgroup", "user"):  # the host's
            assert ns(pid, kind) == ns("self", kind), kind
        assert (ns(pid, "mnt") == ns("self", "mnt")) == (mode == "host")
        hj.ok("start", cid)
        script = "hostname; readlink /proc/self/ns/net; cat /proc/self/net/dev"
        name, net, devices = hj.ok("exec", cid, "sh", "-c", script).split("\n", 2)
        assert name == sandbox.hostname
        assert net == f"net:[{netns.st_ino}]"
        links = [line.split(":")[0].strip() for line in devices.splitlines() if ":" in line]
        assert links == ["lo"]  # the pod's network, not the host's links
        # the host's files and processes
        assert hj.ok("exec", cid, "cat", "/proc/1/comm") == Path("/proc/1/comm").read_text()
    finally:
        hj.ok("delete", "--force", cid)


def test_without_join_the_pods_namespaces_are_refused(
    hj: Hostjob, bundle, sandbox: Sandbox, no_leaks
) -> None:
    cid = new_id()
    spec = config(CONTAINER, sandbox.namespaces())
    error = hj.fail("create", "-b", str(bundle(spec)), cid)
    assert error.strip() == (
        "linux.namespaces: the pod asks for its own network, UTS and IPC namespaces, which a"
        " job container cannot give (it runs in the host's): set hostNetwork: true and"
        " hostIPC: true in the pod spec, or the pod annotation io.hostjob.pod-namespaces:"
        " join to join the pod's network, IPC and UTS namespaces"
    )
    assert not (hj.root / cid).exists()
    no_leaks(cid)


def test_a_host_process_pod_runs_in_the_hosts_namespaces(hj: Hostjob, bundle) -> None:
    """A pod on the host's network, IPC and PID: containerd's paths are the host's own
    namespaces (its sandbox runs on the host), compared by file, not by presence."""
    host = os.getpid()
    namespaces = [
        {"type": kind, "path": f"/proc/{host}/ns/{name}"}
        for kind, name in (("pid", "pid"), ("ipc", "ipc"), ("uts", "uts"), ("network", "net"))
    ]
    cid = new_id()
    hj.ok("create", "-b", str(bundle(config(CONTAINER, namespaces, "sleep", "300"))), cid)
    pid = hj.state(cid)["pid"]
    for kind in ("pid", "ipc", "uts", "net"):
        assert ns(pid, kind) == ns("self", kind), kind
    hj.ok("delete", "--force", cid)


def test_a_pid_namespace_is_refused_even_with_join(hj: Hostjob, bundle, sandbox: Sandbox) -> None:
    namespaces = [*sandbox.namespaces()[1:], {"type": "pid"}]
    cid = new_id()
    error = hj.fail("create", "-b", str(bundle(config({**CONTAINER, **JOIN}, namespaces))), cid)
    assert "set hostPID: true in the pod spec" in error
    assert not (hj.root / cid).exists()


def test_other_clients_namespaces_are_ignored(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    spec = config({}, [{"type": "network"}, {"type": "pid"}, {"type": "uts"}], "sleep", "300")
    hj.ok("create", "-b", str(bundle(spec)), cid)
    pid = hj.state(cid)["pid"]
    for kind in ("pid", "uts", "net"):
        assert ns(pid, kind) == ns("self", kind), kind
    hj.ok("delete", "--force", cid)
    log = (tmp_path / "hostjob.log").read_text()
    assert log.count("linux.namespaces") == 1


def test_a_namespace_swapped_since_create_looked_is_not_joined(sandbox: Sandbox) -> None:
    """The child opens the path and checks it is the namespace create found there."""
    from hostjob.errors import StartError
    from hostjob.runtime.sandbox.join import join_pod
    from hostjob.specconv.jobconfig import PodNamespace

    st = os.stat(sandbox.netns)
    stale = PodNamespace(type="network", path=sandbox.netns, device=st.st_dev, inode=st.st_ino + 1)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            join_pod([stale])()
            message = "joined"
        except StartError as err:
            message = str(err)
        os.write(write_end, message.encode() + b"|" + ns("self", "net").encode())
        os._exit(0)
    os.close(write_end)
    message, _, net = os.read(read_end, 4096).decode().partition("|")
    os.waitpid(child, 0)
    assert "is no longer the one create found there" in message, message
    assert net == ns("self", "net")  # nothing was joined


def test_the_operators_default_joins_without_the_annotation(
    hj: Hostjob, bundle, sandbox: Sandbox
) -> None:
    """`--default-pod-namespaces join`, a containerd handler's setting for every pod it
    runs: the pod's container joins as with the annotation, and so does its exec."""
    spec = config(CONTAINER, sandbox.namespaces(), "sleep", "300")
    cid = new_id()

    def with_default(*words: str) -> subprocess.CompletedProcess[str]:
        # through hj: its output goes to files (the container would hold a pipe open)
        return hj("--default-pod-namespaces", "join", *words)

    created = with_default("create", "-b", str(bundle(spec)), cid)
    assert created.returncode == 0, created.stderr
    try:
        pid = hj.state(cid)["pid"]
        for kind in ("ipc", "uts"):
            assert ns(pid, kind) == ns(sandbox.holder.pid, kind), kind
        assert ns(pid, "net") == f"net:[{os.stat(sandbox.netns).st_ino}]"
        assert ns(pid, "pid") == ns("self", "pid")
        seen = with_default("exec", cid, "hostname")
        assert seen.stdout.strip() == sandbox.hostname, seen.stderr
    finally:
        hj.ok("delete", "--force", cid)
    bad_flag = subprocess.run(
        [*hj.argv()[:1], "--default-pod-namespaces", "own", "list"], capture_output=True, text=True
    )
    assert bad_flag.returncode != 0
    assert bad_flag.stderr.strip() == "invalid --default-pod-namespaces: 'own' (join)"
