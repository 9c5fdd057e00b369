"""critest's security-context cases (``security_context_linux.go``), for both handlers: the
user and groups, capabilities, ``noNewPrivileges``, seccomp (unconfined, ``Localhost``,
``RuntimeDefault``), and the host's network, PID and IPC namespaces of a host pod.

What a denied call is tried on is always the case's own: ``chmod`` of a file in its temp dir,
``unshare -U`` (a user namespace of the process's own, gone when it exits), ``ping`` of
127.0.0.1 -- never ``/``, the hostname or anything else of the host's (critest's own seccomp
cases ``chmod 400 /`` and set the hostname: under a job container those are the host's).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from .critest import PAUSE, Critest

CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN = 12, 13, 21


def status_field(ct: Critest, cid: str, field: str) -> str:
    """A field of ``/proc/self/status`` as a process exec'd in the container sees it."""
    for line in ct.exec_ok(cid, ["cat", "/proc/self/status"]).splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return value.strip()
    raise AssertionError(f"no {field} in /proc/self/status")


def caps(ct: Critest, cid: str, field: str = "CapEff") -> int:
    return int(status_field(ct, cid, field), 16)


# ---- users and groups ------------------------------------------------------------------------


def test_run_as_user(ct: Critest) -> None:
    sb = ct.run_pod()
    cid = sb.run("user", PAUSE, security={"run_as_user": cri.Int64Value(value=1001)})
    assert ct.exec_ok(cid, ["id", "-u"]) == "1001\n"


def test_run_as_username(ct: Critest) -> None:
    """``runAsUserName``: containerd resolves the name in the image's ``/etc/passwd``."""
    sb = ct.run_pod()
    cid = sb.run("username", PAUSE, security={"run_as_username": "nobody"})
    assert ct.exec_ok(cid, ["id", "-nu"]) == "nobody\n"
    assert ct.exec_ok(cid, ["id", "-u"]) == "65534\n"


def test_run_as_group(ct: Critest) -> None:
    sb = ct.run_pod()
    security = {
        "run_as_user": cri.Int64Value(value=1001),
        "run_as_group": cri.Int64Value(value=1002),
    }
    cid = sb.run("group", ["sh", "-c", "echo $(id -u):$(id -g)"], security=security)
    assert ct.wait_state(cid, cri.CONTAINER_EXITED).exit_code == 0
    assert sb.wait_log(cid, "1001:1002") == ["1001:1002"]


def test_run_as_group_without_run_as_user_is_an_error(ct: Critest) -> None:
    sb = ct.run_pod()
    with pytest.raises(grpc.RpcError):
        sb.create("group-only", PAUSE, security={"run_as_group": cri.Int64Value(value=1002)})


def test_supplemental_groups(ct: Critest) -> None:
    sb = ct.run_pod()
    cid = sb.run("groups", PAUSE, security={"supplemental_groups": [1234, 5678]})
    groups = ct.exec_ok(cid, ["id", "-G"]).split()
    assert "1234" in groups and "5678" in groups, groups


# ---- capabilities and privilege ---------------------------------------------------------------


def test_adding_a_capability(ct: Critest) -> None:
    """critest adds ``NET_ADMIN`` and makes a bridge; here the capability sets say it (a job
    container's bridge would be the host's)."""
    sb = ct.run_pod()
    added = sb.run(
        "net-admin",
        PAUSE,
        security={"capabilities": cri.Capability(add_capabilities=["NET_ADMIN"])},
    )
    plain = sb.run("default", PAUSE)
    assert caps(ct, added) & (1 << CAP_NET_ADMIN)
    assert not caps(ct, plain) & (1 << CAP_NET_ADMIN)


def test_dropping_a_capability(ct: Critest) -> None:
    """Without ``NET_RAW``, ``ping`` (of 127.0.0.1) is denied."""
    sb = ct.run_pod()
    cid = sb.run(
        "no-net-raw",
        PAUSE,
        security={"capabilities": cri.Capability(drop_capabilities=["NET_RAW"])},
    )
    assert not caps(ct, cid) & (1 << CAP_NET_RAW)
    r = ct.exec_sync(cid, ["ping", "-c", "1", "-W", "1", "127.0.0.1"])
    assert r.exit_code != 0 and b"permission denied" in r.stderr.lower(), r


def test_adding_all_capabilities(ct: Critest) -> None:
    sb = ct.run_pod()
    cid = sb.run(
        "all-caps", PAUSE, security={"capabilities": cri.Capability(add_capabilities=["ALL"])}
    )
    bounding = caps(ct, cid, "CapBnd")
    assert bounding and bounding & (1 << CAP_SYS_ADMIN) and bounding & (1 << CAP_NET_ADMIN)


def test_dropping_all_capabilities(ct: Critest) -> None:
    sb = ct.run_pod()
    cid = sb.run(
        "no-caps", PAUSE, security={"capabilities": cri.Capability(drop_capabilities=["ALL"])}
    )
    assert (caps(ct, cid, "CapBnd"), caps(ct, cid, "CapEff")) == (0, 0)


def test_no_new_privileges(ct: Critest) -> None:
    """``allowPrivilegeEscalation: false`` is the ``no_new_privs`` bit of every process.
    (Its ``true`` for a non-root container is by design not what hostjob gives in bind
    mode: ``test_critest_by_design.py::test_privilege_escalation``.)"""
    sb = ct.run_pod()
    security = {"no_new_privs": True, "run_as_user": cri.Int64Value(value=1000)}
    cid = sb.run("nnp", PAUSE, security=security)
    assert status_field(ct, cid, "NoNewPrivs") == "1"


# ---- seccomp ---------------------------------------------------------------------------------

BLOCK_CHMOD = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["chmod", "fchmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}],
}
"""critest's ``seccompBlockChmodProfile`` (plus ``fchmod``)."""


def seccomp_container(ct: Critest, tmp: Path, profile: cri.SecurityProfile) -> tuple[str, Path]:
    """A running container with ``profile`` and the case's temp dir as a volume; the file it
    may try to chmod (the case's own, mode 0644)."""
    owned = tmp / "owned-by-the-test"
    owned.write_text("mine\n")
    owned.chmod(0o644)
    sb = ct.run_pod()
    mounts = [cri.Mount(container_path=str(tmp), host_path=str(tmp))]
    cid = sb.run("seccomp", PAUSE, mounts=mounts, security={"seccomp": profile})
    return cid, owned


def test_seccomp_unconfined(ct: Critest, tmp_path: Path) -> None:
    """No filter (``Seccomp: 0``): chmod and a user namespace of one's own work."""
    unconfined = cri.SecurityProfile(profile_type=cri.SecurityProfile.Unconfined)
    cid, owned = seccomp_container(ct, tmp_path, unconfined)
    assert status_field(ct, cid, "Seccomp") == "0"
    ct.exec_ok(cid, ["chmod", "600", str(owned)])
    assert owned.stat().st_mode & 0o777 == 0o600
    ct.exec_ok(cid, ["unshare", "-U", "true"])


def test_seccomp_localhost_profile(ct: Critest, tmp_path: Path) -> None:
    """A ``Localhost`` profile denying chmod: ``chmod`` of the case's own file fails with
    EPERM, the file keeps its mode; the filter is on (``Seccomp: 2``) for every exec."""
    profile_path = tmp_path / "block-chmod.json"
    profile_path.write_text(json.dumps(BLOCK_CHMOD))
    localhost = cri.SecurityProfile(
        profile_type=cri.SecurityProfile.Localhost, localhost_ref=str(profile_path)
    )
    cid, owned = seccomp_container(ct, tmp_path, localhost)
    assert status_field(ct, cid, "Seccomp") == "2"
    r = ct.exec_sync(cid, ["chmod", "400", str(owned)])
    assert r.exit_code != 0 and b"Operation not permitted" in r.stderr, r
    assert owned.stat().st_mode & 0o777 == 0o644


def test_seccomp_runtime_default(ct: Critest, tmp_path: Path) -> None:
    """containerd's ``RuntimeDefault`` profile: filtered (``Seccomp: 2``); ``unshare`` without
    ``CAP_SYS_ADMIN`` is denied with EPERM (unconfined it works: the case above); chmod is
    allowed."""
    default = cri.SecurityProfile(profile_type=cri.SecurityProfile.RuntimeDefault)
    cid, owned = seccomp_container(ct, tmp_path, default)
    assert status_field(ct, cid, "Seccomp") == "2"
    r = ct.exec_sync(cid, ["unshare", "-U", "true"])
    assert r.exit_code != 0 and b"Operation not permitted" in r.stderr, r
    ct.exec_ok(cid, ["chmod", "600", str(owned)])


# ---- the host's namespaces (what a job container's pod asks for) ------------------------------


def test_host_network(ct: Critest) -> None:
    """critest's "HostNetwork is true": the container sees a port the host listens on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        sb = ct.run_pod()
        cid = sb.run("host-net", PAUSE)
        listed = ct.exec_ok(cid, ["netstat", "-ltn"])
        assert f"127.0.0.1:{port} " in listed, listed


def test_host_pid(ct: Critest) -> None:
    """critest's "HostPID": the container sees the host's processes (this test's own)."""
    sb = ct.run_pod()
    cid = sb.run("host-pid", PAUSE)
    me = os.getpid()
    assert ct.exec_ok(cid, ["cat", f"/proc/{me}/stat"]).split()[0] == str(me)


def test_host_ipc(ct: Critest) -> None:
    """critest's "HostIpc is true": the container is in the host's IPC namespace."""
    sb = ct.run_pod()
    cid = sb.run("host-ipc", PAUSE)
    assert ct.exec_ok(cid, ["readlink", "/proc/self/ns/ipc"]).strip() == os.readlink(
        "/proc/self/ns/ipc"
    )
