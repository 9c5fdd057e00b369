"""The ``hostjob-join`` handler: hostjob with ``--default-pod-namespaces join`` as its
handler's default (``deploy/``'s second RuntimeClass), so that an ordinary pod spec -- a
pod of its own network, IPC and UTS namespaces, as the upstream CRI validation suite's
pods all are -- runs instead of being refused at ``RunPodSandbox``.

The sandbox of such a pod goes to the real runtime (runc), whose pause holds the pod's
namespaces; each job container joins its network, IPC and UTS namespaces and stays in the
host's PID namespace. A pod that asks for a PID namespace of its own is still refused, naming
``hostPID``: a running process cannot enter another PID
namespace, and a job's processes see the host's ``/proc``, so in a PID namespace of the
pod's their numbers would not be the ones they signal (refused when the runtime creates
the container, at ``StartContainer``). This file starts a containerd of
its own with both handlers as the installer writes them (``hostjob`` and ``hostjob-join``,
the latter a wrapper that adds the flag, as the installer's ``bin/hostjob-join`` does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness
from tests.helpers import fingerprint_changes, host_fingerprint

from .conftest import RUNTIMES_PLUGIN, CriImages, containerd_session, node_session
from .critest import PAUSE, Critest, details
from .kubelet import CALL_TIMEOUT, Node

if TYPE_CHECKING:
    from collections.abc import Iterator

HANDLER = "hostjob-join"
OWN_NAMESPACES = cri.NamespaceOption(network=cri.POD, pid=cri.NODE, ipc=cri.POD)
"""What an ordinary pod spec asks for (no hostNetwork, no hostIPC), but hostPID."""


def join_handler(workdir: Path, hostjob: Path, version: int) -> str:
    """The ``hostjob-join`` handler's tables: a wrapper as its ``BinaryName`` that runs
    hostjob with ``--default-pod-namespaces=join``; its shim's runtime root in
    ``workdir``."""
    wrapper = workdir / "hostjob-join"
    wrapper.write_text(f'#!/bin/sh\nexec "{hostjob}" --default-pod-namespaces=join "$@"\n')
    wrapper.chmod(0o755)
    table = f'[plugins."{RUNTIMES_PLUGIN[version]}".containerd.runtimes.{HANDLER}]'
    return f"""
{table}
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = ["io.hostjob.*"]
  container_annotations = ["io.hostjob.*"]
{table[:-1]}.options]
  BinaryName = "{wrapper}"
  Root = "{workdir / "join-root"}"
"""


@pytest.fixture(scope="module")
def join_node(tmp_path_factory: pytest.TempPathFactory, cri_images: CriImages) -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.fail("tests/cri needs root", pytrace=False)
    workdir = tmp_path_factory.mktemp("cri-join")
    hostjob = harness.find_hostjob(workdir=workdir)
    extra = join_handler(workdir, hostjob, harness.containerd_config_version())
    for ctd in containerd_session(workdir, cri_images, extra=extra):
        yield from node_session(
            Node(ctd, workdir, runtime_root=workdir / "join-root", cgroup_root="hostjob-cri-join",
                 handler=HANDLER)
        )  # fmt: skip


@pytest.fixture
def ct(join_node: Node) -> Iterator[Critest]:
    before = host_fingerprint()
    client = Critest(join_node)
    yield client
    problems = client.cleanup()
    problems += [f"the host changed: {c}" for c in fingerprint_changes(before, host_fingerprint())]
    if problems:
        pytest.fail("after the case:\n" + "\n".join(problems), pytrace=False)


def _sandbox_pid(ct: Critest, sandbox_id: str) -> int:
    status = ct.rt.PodSandboxStatus(
        cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
        timeout=CALL_TIMEOUT,
    )
    return int(json.loads(status.info["info"])["pid"])


def test_a_pod_of_its_own_namespaces_runs_and_its_job_containers_join_them(
    ct: Critest,
) -> None:
    sb = ct.run_pod("own-namespaces", namespaces=OWN_NAMESPACES)
    pause = _sandbox_pid(ct, sb.sandbox_id)
    cid = sb.run("joined", PAUSE)
    for kind in ("net", "ipc", "uts"):
        inside = ct.exec_ok(cid, ["readlink", f"/proc/self/ns/{kind}"]).strip()
        assert inside == os.readlink(f"/proc/{pause}/ns/{kind}"), kind  # the sandbox's
        assert inside != os.readlink(f"/proc/self/ns/{kind}"), kind  # not the host's
    # a job container still: the host's PID namespace, the image at its mount point
    assert ct.exec_ok(cid, ["readlink", "/proc/self/ns/pid"]).strip() == os.readlink(
        "/proc/self/ns/pid"
    )
    mount_point = ct.exec_ok(cid, ["sh", "-c", 'echo "$CONTAINER_SANDBOX_MOUNT_POINT"']).strip()
    assert mount_point.startswith("/"), mount_point


def test_a_pod_that_names_the_host_namespaces_runs_as_under_hostjob(ct: Critest) -> None:
    """A hostNetwork, hostIPC and hostPID pod under the handler: its sandbox is runc's
    pause on the host's namespaces, and the job container's are the host's as before."""
    sb = ct.run_pod("host-namespaces")
    cid = sb.run("on-host", PAUSE)
    for kind in ("net", "ipc", "pid"):
        inside = ct.exec_ok(cid, ["readlink", f"/proc/self/ns/{kind}"]).strip()
        assert inside == os.readlink(f"/proc/self/ns/{kind}"), kind


def test_a_pod_of_its_own_pid_namespace_is_still_refused(ct: Critest) -> None:
    ns = cri.NamespaceOption(network=cri.POD, pid=cri.POD, ipc=cri.POD)
    sb = ct.run_pod("own-pid", namespaces=ns)
    with pytest.raises(grpc.RpcError) as info:
        sb.run("refused", PAUSE)
    message = details(info.value)
    assert "hostPID: true" in message, message
    assert "\n" not in message, message
