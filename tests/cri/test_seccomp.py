"""``linux.seccomp`` through containerd's CRI: a pod's ``seccompProfile`` --
``RuntimeDefault`` (the profile containerd generates) and ``Localhost`` (a file on the node) --
is applied to the job container's processes, its init and ExecSync alike; ``Unconfined`` is no
filter at all."""

from __future__ import annotations

import json
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from .kubelet import CALL_TIMEOUT, Node
from .test_pods import delete_and_check, sh

# A user namespace: containerd's default profile allows unshare(2) only with CAP_SYS_ADMIN,
# which a pod's container lacks by default; with no filter, root may make one.
PROBE = (
    "grep '^Seccomp:' /proc/self/status | tr -s '\\t' ' ';"
    " /usr/bin/unshare -U true 2>/dev/null; echo unshare=$?"
)


def exec_sync(node: Node, cid: str, script: str) -> str:
    r = node.runtime.ExecSync(
        cri.ExecSyncRequest(container_id=cid, cmd=sh(script), timeout=30), timeout=CALL_TIMEOUT
    )
    assert r.exit_code == 0, r
    return r.stdout.decode()


def run_probe(node: Node, name: str, profile: cri.SecurityProfile, script: str) -> tuple[str, str]:
    """(the init's output, an ExecSync's output) of ``script`` under ``profile``."""
    pod = node.pod(name)
    pod.run()
    c = pod.run_container("main", sh(f"{script}; echo ready; exec sleep 300"), seccomp=profile)
    lines = "\n".join(t for _, _, t in pod.wait_log(c, "ready"))
    exec_out = exec_sync(node, c.id, script)
    delete_and_check(node, pod)
    return lines, exec_out


def test_runtime_default(kubelet_node: Node) -> None:
    profile = cri.SecurityProfile(profile_type=cri.SecurityProfile.RuntimeDefault)
    init, exec_out = run_probe(kubelet_node, "seccomp-default", profile, PROBE)
    for out in (init, exec_out):
        assert "Seccomp: 2" in out and "unshare=1" in out, out


def test_unconfined_is_no_filter(kubelet_node: Node) -> None:
    profile = cri.SecurityProfile(profile_type=cri.SecurityProfile.Unconfined)
    init, exec_out = run_probe(kubelet_node, "seccomp-unconfined", profile, PROBE)
    for out in (init, exec_out):
        assert "Seccomp: 0" in out and "unshare=0" in out, out


def test_localhost(kubelet_node: Node, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    path = tmp_path / "profile.json"
    path.write_text(
        json.dumps(
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                "syscalls": [
                    {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 30}
                ],
            }
        )
    )
    profile = cri.SecurityProfile(
        profile_type=cri.SecurityProfile.Localhost, localhost_ref=str(path)
    )
    script = f"mkdir {target}/made 2>&1; echo mkdir=$?"
    init, exec_out = run_probe(kubelet_node, "seccomp-localhost", profile, script)
    for out in (init, exec_out):
        assert "Read-only file system" in out and "mkdir=1" in out, out
    assert not (target / "made").exists()
