"""Mixed pods: a job init container prepares the node, then a confined main
container runs as an ordinary namespaced container, by runc, in the same pod.

Both ways of saying which container is not a job container:

* ``pod`` -- the pod annotation ``io.hostjob.job-container.<name>: "false"`` (what a pod spec
  can say: the kubelet gives containers no annotations of the spec's, and containerd passes the
  pod's to the sandbox and every container). The sandbox then is runc's too: the pause holds
  real pod namespaces, which the confined container joins as it would in any pod;
* ``container`` -- the container's own annotation ``io.hostjob.job-container: "false"`` (a
  direct CRI client, or containerd's ``container_annotations``). The sandbox is a job container
  then, its namespaces the host's: the confined container gets IPC and PID namespaces of its own
  instead of joining those.

The pod is on the host's network and PID namespace (its job container cannot have a PID
namespace of its own: without ``hostPID`` it is refused); in the ``pod`` form it keeps its own
IPC namespace, which the job init container joins (``io.hostjob.pod-namespaces: join``), in
the ``container`` form the job sandbox asks for the host's IPC too. Kubernetes shares the
host's network and UTS namespaces with every container of a host-network pod, and so does runc
with a sandbox of its own: the confined container is asserted to have exactly that -- the
host's network and UTS namespaces, mount, PID and IPC namespaces of its own (hostjob never
gives a confined container the host's IPC or PID namespace).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2 as cri

from tests.helpers import hostjob_cmd

from .kubelet import CALL_TIMEOUT, Node
from .test_pods import IDLE, container_pid, delete_and_check, sandbox_pid, sh, v1_cgroup

JOINED_IPC = cri.NamespaceOption(network=cri.NODE, pid=cri.NODE, ipc=cri.POD)
ALL_HOST = cri.NamespaceOption(network=cri.NODE, pid=cri.NODE, ipc=cri.NODE)
JOIN = {"io.hostjob.pod-namespaces": "join"}
NAMESPACES = ("mnt", "pid", "ipc", "net", "uts")
IMAGE_ROOT = "bin dev etc proc root run sys tmp usr var"
"""The tools image's top-level directories (``tests/compat/image.DIRS``)."""


def host_ns(kind: str) -> str:
    return os.readlink(f"/proc/self/ns/{kind}")


def runc_ids(root: Path) -> list[str]:
    done = subprocess.run(
        ["runc", "--root", str(root), "list", "-q"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("form", ["pod", "container"])
def test_job_init_then_confined_main(kubelet_node: Node, tmp_path: Path, form: str) -> None:
    node = kubelet_node
    marker = tmp_path / "prepared-by-init"
    pod_annotations = {"io.hostjob.job-container.main": "false", **JOIN} if form == "pod" else {}
    main_annotations = {"io.hostjob.job-container": "false"} if form == "container" else {}
    namespaces = JOINED_IPC if form == "pod" else ALL_HOST
    pod = node.pod(f"mixed-{form}", namespaces=namespaces, annotations=pod_annotations)
    pod.run()

    # the sandbox: runc's when the pod names a confined container, else a job container
    pause = sandbox_pid(node, pod)
    route = node.runtime_root / pod.sandbox_id / "delegate"
    if form == "pod":
        assert os.readlink(route).endswith("/runc")
        assert pod.sandbox_id in runc_ids(node.delegate_root)
        assert os.readlink(f"/proc/{pause}/ns/ipc") != host_ns("ipc")  # the pod's own
        assert os.readlink(f"/proc/{pause}/ns/pid") == host_ns("pid")  # hostPID
    else:
        assert not os.path.lexists(route)
        assert os.readlink(f"/proc/{pause}/ns/ipc") == host_ns("ipc")  # a job: the host's
    assert os.readlink(f"/proc/{pause}/ns/net") == host_ns("net")
    assert v1_cgroup(pause, "memory") == f"{pod.cgroup_parent}/{pod.sandbox_id}"

    # the init container is a job container: it writes on the host, at an absolute path
    # (in the pod form it joins the pod's IPC namespace, runc's pause's)
    script = f"echo prepared > {marker}; echo ipc=$(readlink /proc/self/ns/ipc); echo init-done"
    init = pod.run_container("prepare", sh(script), init=True)
    status = pod.wait_exited(init)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert marker.read_text() == "prepared\n"
    ipc = [t for _, _, t in pod.log(init) if t.startswith("ipc=")]
    assert ipc == [f"ipc={os.readlink(f'/proc/{pause}/ns/ipc')}"], ipc

    # the main container is confined: runc runs it in namespaces of its own
    script = "; ".join(
        [f"echo {kind}=$(readlink /proc/self/ns/{kind})" for kind in NAMESPACES]
        + [
            "echo self=$$",
            'echo "pid1=$(tr "\\0" " " < /proc/1/cmdline)"',
            f"test -e {marker} && echo init-file=seen || echo init-file=unseen",
            "echo root=$(ls /)",
            IDLE,
        ]
    )
    main = pod.run_container("main", ["sh", "-c", script], annotations=main_annotations)
    lines = [t for _, _, t in pod.wait_log(main, "ready")]
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    for kind in ("mnt", "pid", "ipc"):
        assert seen[kind] != host_ns(kind), (kind, seen)
    for kind in ("net", "uts"):
        assert seen[kind] == host_ns(kind), (kind, seen)  # a host-network pod, as under runc
    assert seen["self"] == "1" and seen["pid1"].startswith("sh -c "), seen
    assert seen["init-file"] == "unseen"  # the image's /, not the host's
    assert seen["root"] == IMAGE_ROOT
    if form == "pod":
        assert seen["ipc"] == os.readlink(f"/proc/{pause}/ns/ipc"), "joins the pod's IPC"

    assert os.readlink(node.runtime_root / main.id / "delegate").endswith("/runc")
    assert main.id in runc_ids(node.delegate_root)
    pid = container_pid(node, main)
    assert v1_cgroup(pid, "memory") == f"{pod.cgroup_parent}/{main.id}"
    assert pod.status(main).state == cri.CONTAINER_RUNNING
    r = node.runtime.ExecSync(
        cri.ExecSyncRequest(
            container_id=main.id, cmd=["readlink", "/proc/self/ns/mnt"], timeout=30
        ),
        timeout=CALL_TIMEOUT,
    )
    assert (r.exit_code, r.stdout.decode().strip()) == (0, seen["mnt"]), r
    stats = node.runtime.ContainerStats(
        cri.ContainerStatsRequest(container_id=main.id), timeout=CALL_TIMEOUT
    ).stats
    assert stats.memory.working_set_bytes.value > 0

    # hostjob's list shows both runtimes' containers
    listed = subprocess.run(
        [*hostjob_cmd(), "--root", str(node.runtime_root), "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows[main.id][6] == "runc", listed.stdout
    assert rows[pod.sandbox_id][6] == ("runc" if form == "pod" else "host"), listed.stdout

    pod.stop(main, grace=10)
    status = pod.status(main)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    delete_and_check(node, pod)
    # (before any runc command: runc makes its state root when it is missing)
    assert not (node.runtime_root / ".delegate").exists(), "runc's empty state root is tidied"
