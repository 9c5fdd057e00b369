"""Pods of job containers driven through containerd's CRI as the kubelet drives them.

Each test does the kubelet's calls with the kubelet's messages (``kubelet.py``) against
containerd 1.6 with hostjob as the runtime handler, and ends by deleting the pod in the kubelet's
order and checking that nothing is left: not in the CRI's or containerd's lists, snapshots or
state dirs, not in hostjob's state root, no mount, no shim, no process, no cgroup.

Containers created through the CRI run in bind mode unless the pod says otherwise:
the pods here that read their volumes under ``$CONTAINER_SANDBOX_MOUNT_POINT`` ask for host mode
with the annotation ``io.hostjob.mount-mode: host``, so that both modes stay covered; the
bind-mode behaviours a Kubernetes pod needs (volumes at their ``mountPath``, the in-cluster
client, the termination log, propagation) are ``test_kubernetes.py``'s, mixed pods
``test_mixed_pods.py``'s.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness

from .kubelet import (
    CALL_TIMEOUT,
    PAUSE_IMAGE,
    SERVICE_ACCOUNT_DIR,
    TERMINATION_LOG,
    TOOLS_IMAGE,
    Container,
    Node,
    Pod,
    Resources,
    wait,
)

MP = "$CONTAINER_SANDBOX_MOUNT_POINT"
SH = f"{MP}/bin/sh"
"""The image's shell, the HostProcess way: the kubelet passes ``$VAR`` through, hostjob expands
it."""
MiB = 1 << 20
FIXTURES = Path(__file__).resolve().parent / "fixtures"

IDLE = 'trap "echo got-TERM; exit 0" TERM; echo ready; sleep 1000 & wait'
"""A container that idles and exits 0 on SIGTERM (``wait`` returns at once on a trapped signal)."""
HOST_MODE = {"io.hostjob.mount-mode": "host"}
"""The pod annotation that keeps a pod's job containers in host mode (the CRI default is bind)."""


def sh(script: str) -> list[str]:
    return [SH, "-c", script]


def delete_and_check(node: Node, pod: Pod) -> None:
    """The kubelet's pod deletion, then nothing of the pod may be left."""
    ids = [pod.sandbox_id, *(c.id for c in pod.containers)]
    problems = pod.delete()
    assert not problems, problems
    left = node.leftovers(pod, ids)
    assert not left, left


def sandbox_pid(node: Node, pod: Pod) -> int:
    st = node.runtime.PodSandboxStatus(
        cri.PodSandboxStatusRequest(pod_sandbox_id=pod.sandbox_id, verbose=True),
        timeout=CALL_TIMEOUT,
    )
    return int(json.loads(st.info["info"])["pid"])


def container_pid(node: Node, c: Container) -> int:
    st = node.runtime.ContainerStatus(
        cri.ContainerStatusRequest(container_id=c.id, verbose=True), timeout=CALL_TIMEOUT
    )
    return int(json.loads(st.info["info"])["pid"])


def v1_cgroup(pid: int, controller: str) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    raise AssertionError(f"process {pid} has no {controller} cgroup")


def cgroup_file(path: str, controller: str, name: str) -> str:
    return (harness.CGROUP_ROOT / controller / path.strip("/") / name).read_text().strip()


# ---------------------------------------------------------------------------------------------


def test_runtime_and_images(kubelet_node: Node) -> None:
    """What the kubelet asks at start-up and before pulling: version, status, images."""
    node = kubelet_node
    v = node.runtime.Version(cri.VersionRequest(version="v1"), timeout=CALL_TIMEOUT)
    assert (v.runtime_name, v.runtime_api_version) == ("containerd", "v1"), v
    st = node.runtime.Status(cri.StatusRequest(), timeout=CALL_TIMEOUT)
    conditions = {c.type: c.status for c in st.status.conditions}
    assert conditions["RuntimeReady"] is True, st
    for ref in (PAUSE_IMAGE, TOOLS_IMAGE):
        image = node.images.ImageStatus(
            cri.ImageStatusRequest(image=cri.ImageSpec(image=ref)), timeout=CALL_TIMEOUT
        ).image
        assert ref in image.repo_tags and image.id.startswith("sha256:") and image.size > 0
    fs = node.images.ImageFsInfo(cri.ImageFsInfoRequest(), timeout=CALL_TIMEOUT)
    # (usage is sampled every 10 s: only where it is measured is fixed)
    snapshots = node.containerd.dir / "root" / "io.containerd.snapshotter.v1.overlayfs"
    assert [f.fs_id.mountpoint for f in fs.image_filesystems] == [str(snapshots)]


def test_pod_lifecycle(kubelet_node: Node) -> None:
    """One Burstable pod through the kubelet's whole life cycle of a container: sandbox, create
    with the kubelet's mounts and limits, start, logs, exec, status, stats, update, stop with a
    grace period, a restart (attempt 1) in the same sandbox, remove, pod deletion."""
    node = kubelet_node
    limits = Resources(
        cpu_request=100, cpu_limit=500, memory_request=32 * MiB, memory_limit=64 * MiB
    )
    # a pod annotation the operators' guide lets through (pod_annotations) to the runtime
    hpc = {"microsoft.com/hostprocess-container": "true", **HOST_MODE}
    pod = node.pod("web", [limits], annotations=hpc)

    # -- RunPodSandbox: the pause process runs on the host, in the pod's cgroup
    pod.run()
    st = node.runtime.PodSandboxStatus(
        cri.PodSandboxStatusRequest(pod_sandbox_id=pod.sandbox_id), timeout=CALL_TIMEOUT
    ).status
    assert st.state == cri.SANDBOX_READY
    assert st.runtime_handler == "hostjob"
    assert st.linux.namespaces.options.network == cri.NODE
    assert st.linux.namespaces.options.pid == cri.NODE
    pause = sandbox_pid(node, pod)
    assert v1_cgroup(pause, "memory") == f"{pod.cgroup_parent}/{pod.sandbox_id}"
    assert os.readlink(f"/proc/{pause}/ns/net") == os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{pause}/ns/pid") == os.readlink("/proc/self/ns/pid")
    listed = node.runtime.ListPodSandbox(
        cri.ListPodSandboxRequest(
            filter=cri.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": pod.uid})
        ),
        timeout=CALL_TIMEOUT,
    ).items
    assert [s.id for s in listed] == [pod.sandbox_id]

    # -- CreateContainer + StartContainer with the kubelet's mounts, limits and log path
    main = pod.run_container(
        "main",
        sh(
            "echo to-stdout; echo to-stderr >&2; "
            f"echo token=$(cat {MP}{SERVICE_ACCOUNT_DIR}/token); "
            f"echo namespace=$(cat {MP}{SERVICE_ACCOUNT_DIR}/namespace); "
            f"head -n 1 {MP}/etc/hosts; "
            f"echo env=$GREETING; {IDLE}"
        ),
        resources=limits,
        env={"GREETING": "hello from the kubelet"},
    )
    log = pod.wait_log(
        main, "ready", "to-stdout", "to-stderr", f"token={pod.token}", "namespace=default"
    )
    status = pod.status(main)
    assert status.state == cri.CONTAINER_RUNNING and status.started_at > 0
    assert status.log_path == str(main.log_path)
    assert {m.container_path for m in status.mounts} == {
        SERVICE_ACCOUNT_DIR, "/etc/hosts", TERMINATION_LOG
    }  # fmt: skip
    assert ("stdout", "F", "to-stdout") in log and ("stderr", "F", "to-stderr") in log
    assert ("stdout", "F", f"token={pod.token}") in log
    assert ("stdout", "F", "namespace=default") in log
    assert ("stdout", "F", "# Kubernetes-managed hosts file (host network).") in log
    assert ("stdout", "F", "env=hello from the kubelet") in log

    # the job: the container's processes are in <pod cgroup>/<container id>, with its limits
    pid = container_pid(node, main)
    cgroup = f"{pod.cgroup_parent}/{main.id}"
    assert v1_cgroup(pid, "memory") == cgroup and v1_cgroup(pid, "cpu") == cgroup
    assert cgroup_file(cgroup, "memory", "memory.limit_in_bytes") == str(64 * MiB)
    assert cgroup_file(cgroup, "cpu", "cpu.cfs_quota_us") == "50000"
    assert cgroup_file(cgroup, "cpu", "cpu.shares") == "102"
    assert os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")  # host mode
    check_generated_config(node, pod, main)

    # -- ExecSync (probes): output, exit code, and the exec joins the job
    r = node.runtime.ExecSync(
        cri.ExecSyncRequest(
            container_id=main.id,
            cmd=sh("echo exec-out; echo exec-err >&2; cat /proc/self/cgroup; exit 3"),
            timeout=30,
        ),
        timeout=CALL_TIMEOUT,
    )
    assert r.exit_code == 3, r
    out = r.stdout.decode().splitlines()
    assert out[0] == "exec-out" and r.stderr.decode() == "exec-err\n"
    assert any(line.endswith(f":memory:{cgroup}") for line in out), out

    # a probe that outlives its timeout fails, and its process is killed
    probe = f"1000.{secrets.randbelow(10**6):06d}"  # a unique command line to look for
    with pytest.raises(grpc.RpcError) as timed_out:
        node.runtime.ExecSync(
            cri.ExecSyncRequest(container_id=main.id, cmd=sh(f"exec sleep {probe}"), timeout=1),
            timeout=CALL_TIMEOUT,
        )
    assert "timeout" in (timed_out.value.details() or ""), timed_out.value  # type: ignore[attr-defined]
    wait(lambda: not harness.processes_matching(f"sleep {probe}"), 30, "the timed-out exec to die")

    # -- ContainerStats / ListContainerStats: the job's accounting
    stats = node.runtime.ContainerStats(
        cri.ContainerStatsRequest(container_id=main.id), timeout=CALL_TIMEOUT
    ).stats
    assert stats.attributes.id == main.id
    assert stats.cpu.usage_core_nano_seconds.value > 0
    assert stats.memory.working_set_bytes.value > 0
    assert stats.memory.usage_bytes.value > 0
    listed_stats = node.runtime.ListContainerStats(
        cri.ListContainerStatsRequest(
            filter=cri.ContainerStatsFilter(pod_sandbox_id=pod.sandbox_id)
        ),
        timeout=CALL_TIMEOUT,
    ).stats
    assert [s.attributes.id for s in listed_stats] == [main.id]
    assert listed_stats[0].memory.working_set_bytes.value > 0

    # PodSandboxStats: the pod cgroup's accounting (kubelet's PodAndContainerStatsFromCRI)
    pod_stats = node.runtime.PodSandboxStats(
        cri.PodSandboxStatsRequest(pod_sandbox_id=pod.sandbox_id), timeout=CALL_TIMEOUT
    ).stats
    assert pod_stats.attributes.id == pod.sandbox_id
    assert pod_stats.linux.cpu.usage_core_nano_seconds.value > 0
    assert pod_stats.linux.memory.working_set_bytes.value > 0
    assert main.id in [s.attributes.id for s in pod_stats.linux.containers]

    # -- UpdateContainerResources (in-place resize): the job's cgroup follows
    node.runtime.UpdateContainerResources(
        cri.UpdateContainerResourcesRequest(
            container_id=main.id,
            linux=cri.LinuxContainerResources(
                cpu_period=100_000, cpu_quota=20_000, cpu_shares=204,
                memory_limit_in_bytes=48 * MiB, oom_score_adj=limits.linux(pod.qos).oom_score_adj,
            ),
        ),
        timeout=CALL_TIMEOUT,
    )  # fmt: skip
    assert cgroup_file(cgroup, "memory", "memory.limit_in_bytes") == str(48 * MiB)
    assert cgroup_file(cgroup, "cpu", "cpu.cfs_quota_us") == "20000"
    assert cgroup_file(cgroup, "cpu", "cpu.shares") == "204"
    res = pod.status(main).resources.linux
    assert (res.memory_limit_in_bytes, res.cpu_quota) == (48 * MiB, 20_000)

    # -- StopContainer with a grace period: SIGTERM, the program exits 0
    pod.stop(main, grace=30)
    status = pod.status(main)
    assert status.state == cri.CONTAINER_EXITED
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert status.finished_at >= status.started_at
    assert ("stdout", "F", "got-TERM") in pod.wait_log(main, "got-TERM")
    assert not harness.cgroup_dirs(cgroup), "the job's cgroup outlived its container"

    # -- the restart: attempt 1 of the same container in the same sandbox, which writes its
    #    termination message (under the mount point, in host mode) and fails
    again = pod.run_container(
        "main",
        sh(f"echo attempt-1; echo bye from attempt 1 > {MP}{TERMINATION_LOG}; exit 4"),
        attempt=1,
        resources=limits,
    )
    status = pod.wait_exited(again)
    assert (status.exit_code, status.reason) == (4, "Error"), status
    assert status.metadata.attempt == 1 and again.log_path.name == "1.log"
    assert [t for _, _, t in pod.wait_log(again, "attempt-1")] == ["attempt-1"]
    assert ("stdout", "F", "to-stdout") in pod.log(main), "attempt 0's log is kept"
    assert again.termination_log.read_text() == "bye from attempt 1\n"  # what the kubelet reads

    # -- RemoveContainer: attempt 0 goes, attempt 1 stays until the pod is deleted
    pod.remove(main)
    left = node.runtime.ListContainers(
        cri.ListContainersRequest(filter=cri.ContainerFilter(pod_sandbox_id=pod.sandbox_id)),
        timeout=CALL_TIMEOUT,
    ).containers
    assert [c.id for c in left] == [again.id]
    assert not os.path.lexists(node.runtime_root / main.id)

    # the leftover check sees a live pod (so that its silence after deletion means something)
    alive = "\n".join(node.leftovers(pod, [pod.sandbox_id, again.id]))
    for trace in (
        f"{pod.sandbox_id[:12]} still listed", f"path {node.runtime_root / pod.sandbox_id}",
        f"snapshot {again.id[:12]}", "shim socket", "in the pod's cgroups",
        f"cgroup {harness.CGROUP_ROOT}/memory{pod.cgroup_parent}", f"mount {pod.token_dir}",
    ):  # fmt: skip
        assert trace in alive, (trace, alive)

    delete_and_check(node, pod)


def check_generated_config(node: Node, pod: Pod, c: Container) -> None:
    """The OCI config containerd generated for a running container has the kubelet's mounts with
    the options recorded in ``fixtures/cri-container-config.json`` (captured from a real run; the
    evidence ``tests/cri/README.md``'s "What containerd passes" is written from)."""
    bundle = node.containerd.dir / "state" / "io.containerd.runtime.v2.task" / "k8s.io" / c.id
    live = json.loads((bundle / "config.json").read_text())
    recorded = json.loads((FIXTURES / "cri-container-config.json").read_text())

    def kubelet_mounts(config: dict[str, object]) -> dict[str, tuple[str, list[str]]]:
        mounts = config["mounts"]
        assert isinstance(mounts, list)
        wanted = {SERVICE_ACCOUNT_DIR, "/etc/hosts", TERMINATION_LOG}
        return {
            m["destination"]: (m["type"], m["options"])
            for m in mounts
            if m["destination"] in wanted
        }

    assert kubelet_mounts(live) == kubelet_mounts(recorded)
    for key in (
        "io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id",
        "io.kubernetes.cri.container-name", "io.kubernetes.cri.sandbox-uid",
    ):  # fmt: skip
        assert key in live["annotations"] and key in recorded["annotations"], key
    assert live["annotations"]["io.kubernetes.cri.sandbox-id"] == pod.sandbox_id
    for key, value in pod.annotations.items():  # pod annotations reach every container ...
        if key.startswith(("io.hostjob.", "microsoft.com/hostprocess-")):
            assert live["annotations"][key] == value, key
    # ... but the kubelet's own container annotations do not (container_annotations filters them)
    assert not [k for k in live["annotations"] if k.startswith("io.kubernetes.container.")]
    tokens = [m for m in live["mounts"] if m["destination"] == SERVICE_ACCOUNT_DIR]
    assert tokens[0]["source"] == str(pod.token_dir)


def test_stop_grace_period_then_kill(kubelet_node: Node) -> None:
    """StopContainer sends SIGTERM, waits the grace period, then SIGKILLs a program that does
    not exit; the job's other processes go with it."""
    node = kubelet_node
    pod = node.pod("stubborn")
    pod.run()
    c = pod.run_container(
        "main", sh('trap "echo got-TERM" TERM; echo ready; sleep 1000 & while :; do wait; done')
    )
    pod.wait_log(c, "ready")
    pod.stop(c, grace=4)
    status = pod.status(c)
    assert (status.state, status.exit_code, status.reason) == (cri.CONTAINER_EXITED, 137, "Error")
    assert ("stdout", "F", "got-TERM") in pod.wait_log(c, "got-TERM"), "SIGTERM came first"
    wait(
        lambda: not harness.cgroup_dirs(f"{pod.cgroup_parent}/{c.id}"),
        30,
        "the job's cgroup (and its sleep) to go",
    )
    delete_and_check(node, pod)


def test_init_container_then_main(kubelet_node: Node) -> None:
    """An init container runs to completion before the main container starts; they share an
    emptyDir volume (host mode: under the mount point; ``test_kubernetes`` has the bind-mode
    twin)."""
    node = kubelet_node
    pod = node.pod("with-init", annotations=HOST_MODE)
    pod.run()
    empty_dir = pod.dir / "volumes" / "kubernetes.io~empty-dir" / "work"
    empty_dir.mkdir(parents=True)
    volume = [cri.Mount(container_path="/work", host_path=str(empty_dir))]
    init = pod.run_container(
        "prepare",
        sh(f"echo prepared > {MP}/work/state; echo init-done"),
        volumes=volume,
        init=True,
    )
    status = pod.wait_exited(init)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert (empty_dir / "state").read_text() == "prepared\n"
    main = pod.run_container("main", sh(f"echo main-read=$(cat {MP}/work/state)"), volumes=volume)
    status = pod.wait_exited(main)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert [t for _, _, t in pod.wait_log(init, "init-done")] == ["init-done"]
    assert [t for _, _, t in pod.wait_log(main, "main-read=prepared")] == ["main-read=prepared"]
    delete_and_check(node, pod)


def test_oom_kill_is_reported(kubelet_node: Node) -> None:
    """A Guaranteed container that outgrows its memory limit is OOM-killed in its job's cgroup
    and the CRI reports reason OOMKilled."""
    node = kubelet_node
    limits = Resources(cpu_limit=200, memory_limit=24 * MiB)
    pod = node.pod("hungry", [limits])
    assert pod.qos == "guaranteed" and "/besteffort" not in pod.cgroup_parent
    pod.run()
    c = pod.run_container("main", sh("echo filling; exec tail /dev/zero"), resources=limits)
    status = pod.wait_exited(c, timeout=120)
    assert (status.exit_code, status.reason) == (137, "OOMKilled"), status
    assert [t for _, _, t in pod.wait_log(c, "filling")] == ["filling"]
    delete_and_check(node, pod)


def test_a_pod_asking_for_its_own_namespaces_is_refused(kubelet_node: Node) -> None:
    """A host-network pod that did not ask for the host's PID and IPC namespaces: the job
    sandbox cannot give them, and RunPodSandbox fails with the line the kubelet shows."""
    node = kubelet_node
    pod = node.pod(
        "no-host-pid",
        namespaces=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER, ipc=cri.POD),
    )
    with pytest.raises(grpc.RpcError) as caught:
        pod.run()
    assert (
        "OCI runtime create failed: linux.namespaces: the pod asks for its own IPC and PID"
        " namespaces, which a job container cannot give (it runs in the host's): set hostIPC:"
        " true and hostPID: true in the pod spec, or the pod annotation"
        " io.hostjob.pod-namespaces: join to join the pod's network, IPC and UTS namespaces"
    ) in caught.value.details(), caught.value.details()
    assert not pod.sandbox_id
    sandboxes = node.runtime.ListPodSandbox(
        cri.ListPodSandboxRequest(
            filter=cri.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": pod.uid})
        ),
        timeout=CALL_TIMEOUT,
    ).items
    assert not sandboxes, sandboxes  # containerd removed what it made
    made = list(node.runtime_root.iterdir()) if node.runtime_root.exists() else []
    assert not [p for p in made if not p.name.startswith(".")], made
    assert not pod.delete()
