"""Pods on a systemd node: containerd's CRI with ``SystemdCgroup = true``.

A kubelet with ``cgroupDriver: systemd`` makes its pod cgroups systemd slices, and containerd
then hands the runtime ``<pod slice>:cri-containerd:<id>`` as the cgroups path, with
``--systemd-cgroup`` from the shim. This file starts a containerd of its own configured by the
operators' guide's ``containerd-config-systemd`` snippet (so the guide is what is tested), a
test kubelet on the systemd driver (``kubelet.Node(cgroup_driver="systemd")``: the QoS and pod
slices), and checks for each handler of that snippet, hostjob and runc beside it (the sanity
handler), that each container is a scope systemd knows in the pod's slice, with the CRI
container's memory limit as the unit's ``MemoryMax`` (and after ``UpdateContainerResources``
the new one), and that the pod's deletion leaves no unit and no cgroup.

Needs systemd as PID 1 on cgroup v2 (the VM lane): skipped with the reason elsewhere, failed
instead where HOSTJOB_REQUIRE_SYSTEMD=1 (``tests/integration/test_systemd_cgroup.py``'s
marker). Root only, like the rest of tests/cri.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness
from tests.integration.test_systemd_cgroup import DRIVER, needs_systemd

from .conftest import CriImages, containerd_session, node_session
from .kubelet import CALL_TIMEOUT, Node, Pod, Resources, systemctl, unit_properties, wait
from .test_pods import container_pid, sandbox_pid

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = needs_systemd

MiB = 1 << 20
LIMIT = 64 * MiB
NEW_LIMIT = 96 * MiB
PREFIX = "cri-containerd"
"""What containerd 1.6 puts between the pod slice and the container ID (``getCgroupsPath``)."""
IDLE = 'trap "exit 0" TERM; echo ready; sleep 1000 & wait'


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert DRIVER, "HOSTJOB_REQUIRE_SYSTEMD=1 but systemd does not run this host on cgroup v2"
    if os.geteuid() != 0:
        pytest.fail("tests/cri needs root", pytrace=False)
    return tmp_path_factory.mktemp("cri-systemd")


@pytest.fixture(scope="module")
def systemd_node(workdir: Path, cri_images: CriImages) -> Iterator[Node]:
    """A kubelet on the systemd driver in front of containerd configured by the guide's
    systemd node entry; pods of either handler (``Pod(handler=...)``)."""
    for ctd in containerd_session(workdir, cri_images, "containerd-config-systemd"):
        yield from node_session(
            Node(
                ctd,
                workdir,
                runtime_root=workdir / "runtime-root",
                cgroup_root="/",
                cgroup_driver="systemd",
            )
        )


@pytest.fixture
def node(systemd_node: Node) -> Iterator[Node]:
    """The node; a pod the test did not delete is deleted after it, and what it left fails
    the test."""
    yield systemd_node
    problems = []
    for pod in list(systemd_node.pods):
        problems += pod.delete(grace=0)
    if problems:
        pytest.fail("pods left behind by the test:\n" + "\n".join(problems), pytrace=False)


def own_cgroup(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read()


def assert_scope(pid: int, pod: Pod, cid: str) -> str:
    """``pid`` is in the running scope of container ``cid``, in the pod's slice: the scope's
    unit name."""
    unit = f"{PREFIX}-{cid}.scope"
    path = f"{pod.cgroup_parent}/{unit}"
    assert own_cgroup(pid) == f"0::{path}\n", (pid, path)
    props = unit_properties(unit, "ActiveState", "ControlGroup", "Slice", "LoadState")
    assert props == {
        "LoadState": "loaded",
        "ActiveState": "active",
        "ControlGroup": path,
        "Slice": pod.slice,
    }, unit
    return unit


def assert_gone(unit: str, path: str, forgotten: bool = True) -> None:
    """systemd has stopped ``unit`` (not failed) and, with ``forgotten``, no longer has it at
    all; its cgroup is gone."""
    wait(
        lambda: unit_properties(unit, "ActiveState")["ActiveState"] == "inactive",
        10,
        f"{unit} to be stopped",
    )
    if forgotten:
        props = unit_properties(unit, "LoadState", "ActiveState")
        assert props == {"LoadState": "not-found", "ActiveState": "inactive"}, (unit, props)
    assert harness.cgroup_dirs(path) == [], path


@pytest.mark.parametrize("handler", ["hostjob", "runc"])
def test_containers_are_scopes_in_the_pods_slice(node: Node, handler: str) -> None:
    # a memory limit on its one container: a Burstable pod (kubepods-burstable.slice)
    pod = node.pod(f"systemd-{handler}", [Resources(memory_limit=LIMIT)], handler=handler)
    assert pod.cgroup_parent.startswith("/kubepods.slice/kubepods-burstable.slice/")
    pod.run()
    sandbox_unit = assert_scope(sandbox_pid(node, pod), pod, pod.sandbox_id)
    c = pod.run_container("main", ["sh", "-c", IDLE], resources=Resources(memory_limit=LIMIT))
    pod.wait_log(c, "ready")
    pid = container_pid(node, c)
    unit = assert_scope(pid, pod, c.id)
    path = f"{pod.cgroup_parent}/{unit}"
    status = systemctl("status", unit)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"─{pid} " in status.stdout, (
        status.stdout
    )  # the container's process, as systemd lists it
    # the CRI container's limit is the unit's property (which systemd keeps), and so the file
    assert unit_properties(unit, "MemoryMax") == {"MemoryMax": str(LIMIT)}
    assert Path(f"/sys/fs/cgroup{path}/memory.max").read_text().strip() == str(LIMIT)
    # the kubelet's in-place resize: the unit's property changes, not only the file
    node.runtime.UpdateContainerResources(
        cri.UpdateContainerResourcesRequest(
            container_id=c.id,
            linux=cri.LinuxContainerResources(cpu_shares=2, memory_limit_in_bytes=NEW_LIMIT),
        ),
        timeout=CALL_TIMEOUT,
    )
    assert unit_properties(unit, "MemoryMax") == {"MemoryMax": str(NEW_LIMIT)}
    assert Path(f"/sys/fs/cgroup{path}/memory.max").read_text().strip() == str(NEW_LIMIT)
    # a probe's process is in the container's scope too (runc's sees it as the root of the
    # cgroup namespace containerd gives its containers on cgroup v2; a job's is the host's)
    out = node.runtime.ExecSync(
        cri.ExecSyncRequest(container_id=c.id, cmd=["cat", "/proc/self/cgroup"], timeout=60),
        timeout=CALL_TIMEOUT,
    )
    seen = path if handler == "hostjob" else "/"
    assert (out.exit_code, out.stdout.decode()) == (0, f"0::{seen}\n"), out

    # the kubelet's deletion, step by step: each scope ends with its CRI object
    ids = [pod.sandbox_id, c.id]
    pod.stop(c, grace=5)
    assert pod.wait_exited(c).exit_code == 0
    pod.remove(c)
    assert_gone(unit, path)
    assert unit_properties(sandbox_unit, "ActiveState")["ActiveState"] == "active"
    rt = node.runtime
    rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=60)
    rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=60)
    assert_gone(sandbox_unit, f"{pod.cgroup_parent}/{sandbox_unit}")
    # what is the kubelet's own: the pod slice (found empty: stop_slice says what it held)
    # and the pod's dirs; the CRI's part is done
    sandbox_id, pod.sandbox_id = pod.sandbox_id, ""
    problems = pod.delete()
    assert not problems, problems
    pod.sandbox_id = sandbox_id
    left = node.leftovers(pod, ids)
    runc_root = node.containerd.dir.parent / "runc-root" / node.containerd.namespace
    left += [f"runc state {i}" for i in ids if (runc_root / i).exists()]
    assert not left, left
    # (the kubelet's slice: stopped; systemd forgets a stopped unit when it collects it)
    assert_gone(pod.slice, pod.cgroup_parent, forgotten=False)
