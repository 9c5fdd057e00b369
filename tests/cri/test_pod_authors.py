"""A pod's author through containerd's real CRI, with the operators' guide's configuration
(``containerd-config``: ``pod_annotations = ["io.hostjob.*", "microsoft.com/hostprocess-*"]``,
the test's ``hostjob`` handler): a uid-1000 pod with no capability gets what uid 1000 may do
on the host and nothing more (SECURITY.md, "Kubernetes pod authors").

containerd passes a pod's annotations to its sandbox and every container, so a pod that asks
for what only the operator may choose is refused at ``RunPodSandbox`` with hostjob's one
line, which the kubelet shows as the pod's error, and containerd keeps nothing of it; the
same pod without the annotation runs as its uid. Its volumes at paths the host lacks
(``/etc/nologin``) are in its namespace only, and in bind mode a setuid program of the host
gives it nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from tests.compat.test_operator_docs import snippet

from .kubelet import Node
from .test_pods import IDLE, container_pid, delete_and_check, sh

POD_UID = 1000
SHOW = "echo uid=$(id -u); grep -E '^(CapEff|NoNewPrivs):' /proc/self/status"


def status_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def test_the_handler_is_the_guides() -> None:
    """The refusals below are of the configuration the guide tells operators to use."""
    config = snippet("containerd-config")
    assert 'pod_annotations = ["io.hostjob.*", "microsoft.com/hostprocess-*"]' in config


@pytest.mark.parametrize(
    ("key", "value", "choice"),
    [
        ("io.hostjob.inherit-user", "true", "inherit-user"),
        ("microsoft.com/hostprocess-inherit-user", "true", "inherit-user"),
        ("io.hostjob.secrets", "/etc/shadow:/leak", "secrets"),
        ("io.hostjob.rootfs-mount-point", "/var/spool/cron/crontabs", "mount-point"),
    ],
)
def test_a_pod_asking_for_the_operators_choice_is_refused(
    kubelet_node: Node, key: str, value: str, choice: str
) -> None:
    node = kubelet_node
    asked = {key: value, "io.hostjob.mount-mode": "host"}
    pod = node.pod(f"asks-{choice}", annotations=asked)
    with pytest.raises(grpc.RpcError) as refused:
        pod.run()
    details = refused.value.details() or ""
    assert f"annotations.{key}" in details, details
    assert f"--allow-pod-annotations={choice}" in details, details
    assert not pod.sandbox_id
    assert not pod.delete() and not node.leftovers(pod, [])  # no sandbox was ever made
    if choice == "mount-point":
        assert not os.path.lexists(value) or not os.listdir(value)

    # The control: the same pod without it, its container as uid 1000, no capability (in
    # bind mode, a pod's default: the image at /hpc, which uid 1000 reaches).
    control = node.pod(f"control-{choice}")
    control.run()
    main = control.run_container("main", sh(f"{SHOW}; {IDLE}"), user=POD_UID)
    lines = [t for _, _, t in control.wait_log(main, "ready")]
    assert lines[0] == f"uid={POD_UID}", lines
    assert lines[1].split() == ["CapEff:", "0000000000000000"], lines
    delete_and_check(node, control)


def test_a_pods_missing_mount_path_is_its_own_and_setuid_gives_it_nothing(
    kubelet_node: Node, tmp_path: Path
) -> None:
    """Bind mode (a pod's default): a volume at ``/etc/nologin``, which the host lacks, is in
    the pod's view and never on the host; the pod's processes and its exec run with
    ``no_new_privs``."""
    from cri_api.v1 import api_pb2 as cri

    node = kubelet_node
    assert not os.path.lexists("/etc/nologin"), "the host has one: nothing to show"
    pod = node.pod("mount-path")
    pod.run()
    source = pod.dir / "volumes" / "kubernetes.io~configmap" / "nologin"
    source.parent.mkdir(parents=True)
    source.write_text("the pod's nologin\n")
    volume = [cri.Mount(container_path="/etc/nologin", host_path=str(source), readonly=True)]
    main = pod.run_container(
        "main", sh(f"cat /etc/nologin; {SHOW}; {IDLE}"), volumes=volume, user=POD_UID
    )
    lines = [t for _, _, t in pod.wait_log(main, "ready")]
    assert lines[0] == "the pod's nologin" and lines[1] == f"uid={POD_UID}", lines
    assert lines[3].split() == ["NoNewPrivs:", "1"], lines
    assert not os.path.lexists("/etc/nologin")
    pid = container_pid(node, main)
    assert status_of(pid)["NoNewPrivs"] == "1"
    r = node.runtime.ExecSync(
        cri.ExecSyncRequest(container_id=main.id, cmd=sh("cat /etc/nologin; " + SHOW), timeout=60),
        timeout=120,
    )
    assert r.exit_code == 0, r.stderr
    out = r.stdout.decode().splitlines()
    assert out[0] == "the pod's nologin" and out[3].split() == ["NoNewPrivs:", "1"], out
    delete_and_check(node, pod)
    assert not os.path.lexists("/etc/nologin")
