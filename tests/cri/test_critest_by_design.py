"""critest's cases a job container cannot pass by design, each with its reason and what the
hostjob handler gives instead -- nothing is skipped in silence.

Each case runs for both handlers: runc shows the pod gets what it asks for (the case is
right), hostjob shows the refusal (or the one thing it gives instead). The pods that runc
runs here have namespaces of their own (on the test network of ``cni_plugin.py``: a veth pair
inside the pod's namespace); what they change -- a hostname, a sysctl, a bridge -- is the
pod's, and the ``ct`` fixture's fingerprint checks that the host's is not. Under hostjob no
container of these pods is ever started: a sandbox that is not refused fails the case before
anything runs in it.

``BY_DESIGN`` is the list; ``docs/operators.md`` ("What a pod gets from a job container")
says the same, which ``test_the_operators_guide_lists_them`` checks.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from tests.helpers import REPO

from .critest import HOST_POD, PAUSE, Critest, Sandbox, details

HOST_NETWORK_ONLY = cri.NamespaceOption(network=cri.POD, pid=cri.NODE, ipc=cri.NODE)
POD_NAMESPACES = cri.NamespaceOption(network=cri.POD, pid=cri.POD, ipc=cri.POD)
JOIN = {"io.hostjob.pod-namespaces": "join"}
"""The pod annotation with which a job container joins the pod's network, IPC and UTS
namespaces (made by the real runtime's sandbox) instead of being refused."""


class ByDesign(NamedTuple):
    """One critest case a job container cannot pass: the case (``critest``), why, and what
    the hostjob handler does instead (``instead``; ``refusal``: a fragment of its line)."""

    name: str
    critest: str
    reason: str
    instead: str
    refusal: str


BY_DESIGN = [
    ByDesign(
        "own_network",
        'Security Context NamespaceOption: "HostNetwork is false"',
        "a job container's processes are on the host's network",
        "RunPodSandbox is refused, naming hostNetwork: true; with the pod annotation "
        "io.hostjob.pod-namespaces: join the pod's network is joined instead",
        "set hostNetwork: true in the pod spec",
    ),
    ByDesign(
        "hostname",
        "SeccompProfilePath: setting the hostname (unconfined, blocked by a profile, privileged)",
        "the UTS namespace comes with the pod's network: a job container's hostname is the "
        "node's, and setting it renames the node",
        "RunPodSandbox is refused, naming hostNetwork: true",
        "set hostNetwork: true in the pod spec",
    ),
    ByDesign(
        "network_management",
        'bucket: "Privileged is true" (brctl addbr)',
        "links and bridges made on the host's network are the node's",
        "RunPodSandbox is refused, naming hostNetwork: true",
        "set hostNetwork: true in the pod spec",
    ),
    ByDesign(
        "sysctls",
        "sysctls of the pod's namespaces",
        "in the host's namespaces a sysctl is the node's",
        "RunPodSandbox is refused: sysctls would change the host",
        "sysctls would change the host",
    ),
    ByDesign(
        "private_ipc",
        'Security Context NamespaceOption: "HostIpc is false"',
        "a job container's processes are in the host's IPC namespace",
        "RunPodSandbox is refused, naming hostIPC: true; with the pod annotation "
        "io.hostjob.pod-namespaces: join the pod's IPC namespace is joined instead",
        "set hostIPC: true in the pod spec",
    ),
    ByDesign(
        "private_pid",
        'Security Context NamespaceOption: "PodPID", "ContainerPID"',
        "a job container's processes are in the host's PID namespace (and a running process "
        "cannot join another)",
        "RunPodSandbox is refused, naming hostPID: true",
        "set hostPID: true in the pod spec",
    ),
    ByDesign(
        "read_only_rootfs",
        'bucket: "ReadOnlyRootfs is true"',
        "a job container's / is the host's",
        "not refused: the image is read-only at $CONTAINER_SANDBOX_MOUNT_POINT",
        "",
    ),
    ByDesign(
        "privilege_escalation",
        'NoNewPrivs: "should allow privilege escalation when false"',
        "in bind mode a pod's volumes lie over host paths in its mount namespace, where a "
        "setuid program of the host would read them as root",
        "not refused: every process of a container in bind mode that does not run as root "
        "runs with no_new_privs, named once in hostjob's log; a root container's as asked",
        "",
    ),
    ByDesign(
        "masked_and_read_only_paths",
        'bucket: "MaskedPaths", "ReadonlyPaths"',
        "they hide parts of a container's own /proc and /sys; a job container's are the "
        "host's, and the kubelet asks for its defaults for every container",
        "not refused: named once in hostjob's log, not applied",
        "",
    ),
]
CASES = {c.name: c for c in BY_DESIGN}


def refused(ct: Critest, case: str, **pod: object) -> str:
    """The hostjob side: ``RunPodSandbox`` of the pod fails with the one line of ``case``'s
    refusal (returned). A sandbox that runs fails the case at once: nothing runs in it."""
    sb = ct.pod(case.replace("_", "-"), **pod)  # type: ignore[arg-type]
    try:
        ct.run_sandbox(sb)
    except grpc.RpcError as e:
        message = details(e)
        assert CASES[case].refusal in message, message
        assert "\n" not in message, message
        return message
    pytest.fail(f"RunPodSandbox was not refused ({CASES[case].instead} was expected)")


def netstat(ct: Critest, sb: Sandbox, name: str) -> tuple[str, str]:
    """(what ``netstat -ltn`` lists, the network namespace) of a container of ``sb``."""
    cid = sb.run(name, PAUSE)
    return ct.exec_ok(cid, ["netstat", "-ltn"]), ct.exec_ok(cid, ["readlink", "/proc/self/ns/net"])


def test_own_network(ct: Critest) -> None:
    """runc: the pod's own network namespace, where a port the host listens on is not seen.
    hostjob: refused -- and with ``io.hostjob.pod-namespaces: join`` the job container joins
    the pod's network instead (runc's sandbox holds it), where the host's port is not seen."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        if ct.handler == "hostjob":
            refused(ct, "own_network", namespaces=HOST_NETWORK_ONLY)
            sb = ct.run_pod(namespaces=HOST_NETWORK_ONLY, annotations=JOIN)
        else:
            sb = ct.run_pod(namespaces=HOST_NETWORK_ONLY)
        listed, ns = netstat(ct, sb, "own-net")
        assert f":{port} " not in listed, listed
        assert ns.strip() != os.readlink("/proc/self/ns/net")


BLOCK_SETHOSTNAME = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}],
}


def test_hostname(ct: Critest, tmp_path: Path) -> None:
    host = socket.gethostname()
    if ct.handler == "hostjob":
        refused(ct, "hostname", namespaces=HOST_NETWORK_ONLY, hostname="critest-pod")
        return
    sb = ct.run_pod(namespaces=HOST_NETWORK_ONLY, hostname="critest-pod")
    admin = cri.Capability(add_capabilities=["SYS_ADMIN"])
    unconfined = cri.SecurityProfile(profile_type=cri.SecurityProfile.Unconfined)
    free = sb.run("hostname", PAUSE, security={"capabilities": admin, "seccomp": unconfined})
    assert ct.exec_ok(free, ["hostname"]) == "critest-pod\n"
    ct.exec_ok(free, ["hostname", "ANewHostName"])
    assert ct.exec_ok(free, ["hostname"]) == "ANewHostName\n"
    profile = tmp_path / "block-sethostname.json"
    profile.write_text(json.dumps(BLOCK_SETHOSTNAME))
    blocked = cri.SecurityProfile(
        profile_type=cri.SecurityProfile.Localhost, localhost_ref=str(profile)
    )
    cid = sb.run("no-sethostname", PAUSE, security={"capabilities": admin, "seccomp": blocked})
    assert ct.exec_sync(cid, ["hostname", "AnotherName"]).exit_code != 0
    assert socket.gethostname() == host


def test_network_management(ct: Critest) -> None:
    if ct.handler == "hostjob":
        refused(ct, "network_management", namespaces=HOST_NETWORK_ONLY, privileged=True)
        return
    sb = ct.run_pod(namespaces=HOST_NETWORK_ONLY, privileged=True)
    cid = sb.run("brctl", PAUSE, security={"privileged": True})
    ct.exec_ok(cid, ["brctl", "addbr", "foobar"])
    assert "foobar" in ct.exec_ok(cid, ["ls", "/sys/class/net"]).split()
    assert not os.path.exists("/sys/class/net/foobar")


def _sysctl(name: str) -> str:
    return Path("/proc/sys", name.replace(".", "/")).read_text().strip()


def test_sysctls(ct: Critest) -> None:
    if ct.handler == "hostjob":
        # the host's own value: even a runtime that applied it would change nothing
        same = {"kernel.shm_rmid_forced": _sysctl("kernel.shm_rmid_forced")}
        refused(ct, "sysctls", namespaces=HOST_POD, sysctls=same)
        return
    wanted = {
        "kernel.shm_rmid_forced": "1" if _sysctl("kernel.shm_rmid_forced") == "0" else "0",
        "net.ipv4.ip_unprivileged_port_start": "0",
    }
    sb = ct.run_pod(namespaces=POD_NAMESPACES, sysctls=wanted)
    cid = sb.run("sysctls", PAUSE)
    for name, value in wanted.items():
        path = "/proc/sys/" + name.replace(".", "/")
        assert ct.exec_ok(cid, ["cat", path]) == f"{value}\n", name
        assert _sysctl(name) != value, f"the host's {name} changed"


def test_private_ipc(ct: Critest) -> None:
    """runc: the pod's own IPC namespace. hostjob: refused -- or, with
    ``io.hostjob.pod-namespaces: join``, the pod's joined."""
    ns = cri.NamespaceOption(network=cri.NODE, pid=cri.NODE, ipc=cri.POD)
    if ct.handler == "hostjob":
        refused(ct, "private_ipc", namespaces=ns)
        sb = ct.run_pod(namespaces=ns, annotations=JOIN)
    else:
        sb = ct.run_pod(namespaces=ns)
    cid = sb.run("own-ipc", PAUSE)
    assert ct.exec_ok(cid, ["readlink", "/proc/self/ns/ipc"]).strip() != os.readlink(
        "/proc/self/ns/ipc"
    )


@pytest.mark.parametrize("mode", ["pod", "container"])
def test_private_pid(ct: Critest, mode: str) -> None:
    pid = cri.POD if mode == "pod" else cri.CONTAINER
    ns = cri.NamespaceOption(network=cri.NODE, pid=pid, ipc=cri.NODE)
    if ct.handler == "hostjob":
        refused(ct, "private_pid", namespaces=ns)
        return
    sb = ct.run_pod(namespaces=ns)
    cid = sb.run("own-pid", PAUSE)
    first = ct.exec_ok(cid, ["cat", "/proc/1/cmdline"]).split("\0")[0]
    # PodPID: the pod's first process is the pause; ContainerPID: the container's own (busybox
    # sh runs its one command in its own place)
    assert first == ("/pause" if mode == "pod" else "top"), first


def test_read_only_rootfs(ct: Critest) -> None:
    sb = ct.run_pod()
    security = {"readonly_rootfs": True}
    if ct.handler == "hostjob":
        # a write where the image is, never at the host's /
        script = 'test -n "$CONTAINER_SANDBOX_MOUNT_POINT" || exit 99; '
        script += 'touch "$CONTAINER_SANDBOX_MOUNT_POINT/critest-ro"'
    else:
        script = "touch /critest-ro"
    cid = sb.run("ro-rootfs", ["sh", "-c", script], security=security)
    st = ct.wait_state(cid, cri.CONTAINER_EXITED)
    assert st.exit_code == 1, st
    assert any("Read-only file system" in t for _, _, t in sb.log(cid)), sb.log(cid)


def test_privilege_escalation(ct: Critest) -> None:
    """critest's ``no_new_privs: false`` for a uid-1000 container (``allowPrivilegeEscalation``,
    Kubernetes' default): runc leaves the bit clear; hostjob sets it in bind mode (a pod's
    default) and says so once in its log, and leaves a root container's clear."""
    sb = ct.run_pod()
    escalating = {"no_new_privs": False, "run_as_user": cri.Int64Value(value=1000)}
    cid = sb.run("may-escalate", PAUSE, security=escalating)
    nnp = ct.exec_ok(cid, ["grep", "NoNewPrivs", "/proc/self/status"]).split()[1]
    if ct.handler != "hostjob":
        assert nnp == "0"
        return
    assert nnp == "1"
    named = [line for line in runtime_log(ct, cid) if "noNewPrivileges is set" in line]
    assert len(named) == 1, runtime_log(ct, cid)
    root = sb.run("root", PAUSE, security={"no_new_privs": False})
    assert ct.exec_ok(root, ["grep", "NoNewPrivs", "/proc/self/status"]).split()[1] == "0"


def test_masked_and_read_only_paths(ct: Critest, tmp_path: Path) -> None:
    """critest masks ``/bin/ls`` and makes ``/tmp`` read-only; here both are the case's own
    (a file and a directory in its temp dir, a volume at the same path)."""
    (tmp_path / "masked").write_text("not masked\n")
    ro = tmp_path / "read-only"
    ro.mkdir()
    sb = ct.run_pod()
    security = {"masked_paths": [str(tmp_path / "masked")], "readonly_paths": [str(ro)]}
    mounts = [cri.Mount(container_path=str(tmp_path), host_path=str(tmp_path))]
    cid = sb.run("masked", PAUSE, security=security, mounts=mounts)
    seen = ct.exec_ok(cid, ["cat", str(tmp_path / "masked")])
    write = ct.exec_sync(cid, ["touch", f"{ro}/new"])
    if ct.handler == "hostjob":
        # named in hostjob's log (the one the shim keeps in the bundle), not applied: the
        # job's processes see the host's paths
        assert (seen, write.exit_code) == ("not masked\n", 0), (seen, write)
        log = runtime_log(ct, cid)
        for field in ("linux.maskedPaths", "linux.readonlyPaths"):
            named = [line for line in log if field in line and "ignored" in line]
            assert len(named) == 1, (field, log)
        return
    assert seen == "", seen
    assert write.exit_code != 0 and b"Read-only file system" in write.stderr, write


def runtime_log(ct: Critest, cid: str) -> list[str]:
    """The lines the runtime wrote to the log the runc shim gives it (``--log`` in the
    container's bundle)."""
    ctd = ct.node.containerd
    bundle = ctd.dir / "state" / "io.containerd.runtime.v2.task" / ctd.namespace / cid
    return (bundle / "log.json").read_text().splitlines()


def test_the_operators_guide_lists_them() -> None:
    """``docs/operators.md``'s "What a pod gets from a job container" has one line per case,
    with its reason and what hostjob does instead."""
    guide = (REPO / "docs" / "operators.md").read_text()
    m = re.search(r"^### What a pod gets from a job container\n(.*?)(?=^#)", guide, re.S | re.M)
    assert m, "docs/operators.md has no section 'What a pod gets from a job container'"
    section = " ".join(m.group(1).replace("`", "").split())
    for case in BY_DESIGN:
        assert case.reason in section, (case.name, case.reason)
        assert case.instead in section, (case.name, case.instead)
