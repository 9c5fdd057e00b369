"""A pod's container as containerd's CRI plugin hands it to the runtime, for the tests of
what a Kubernetes pod's author may do (``test_runtime_pods.py``, ``test_runtime_bind_targets.py``).

containerd builds the config from the pod: its ``io.kubernetes.cri.*`` annotations (a
pod's container: ``container-type: container``), the pod's annotations that the handler's
``pod_annotations`` lets through, the pod's user -- here uid 1000 with no capability, what
a cluster policy forcing non-root pods gives -- and the pod's namespaces: a job
container's pod is on the host's network, IPC and PID, so the paths are the host's own
namespaces (this process's). The same config without the CRI's annotations is an
operator's bundle: what it asks for is theirs to choose, which shows what an annotation
gives when nothing stops it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.compat.test_operator_docs import DOC_BINARY, snippet
from tests.helpers import Hostjob, base_config, hostjob_cmd

POD_UID = 1000
CRI_ANNOTATIONS = {
    "io.kubernetes.cri.container-type": "container",
    "io.kubernetes.cri.container-name": "main",
    "io.kubernetes.cri.sandbox-id": "0" * 64,
    "io.kubernetes.cri.sandbox-name": "attacker",
    "io.kubernetes.cri.sandbox-namespace": "tenant",
    "io.kubernetes.cri.sandbox-uid": "6e1b7b1c-0000-4000-8000-000000000000",
    "io.kubernetes.cri.image-name": "registry.example.com/tenant/tool:1",
}
NO_CAPABILITIES = {s: [] for s in ("bounding", "effective", "permitted", "inheritable", "ambient")}


def pod_config(
    *args: str,
    annotations: dict[str, str] | None = None,
    uid: int = POD_UID,
    cri: bool = True,
    mounts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """containerd's config of a pod's container running ``args`` as ``uid`` (no
    capability unless root); ``cri=False``: the same as an operator's bundle."""
    config = base_config(*args)
    config["process"]["user"] = {"uid": uid, "gid": uid}
    if uid:
        config["process"]["capabilities"] = dict(NO_CAPABILITIES)
    pid = os.getpid()
    namespaces = [
        {"type": kind, "path": f"/proc/{pid}/ns/{name}"}
        for kind, name in (("ipc", "ipc"), ("uts", "uts"), ("network", "net"))
    ]
    config["linux"] = {"namespaces": [*namespaces, {"type": "mount"}]}
    config["annotations"] = {**(CRI_ANNOTATIONS if cri else {}), **(annotations or {})}
    config["mounts"] = mounts or []
    return config


def bind_volume(source: Path | str, destination: str, readonly: bool = False) -> dict[str, Any]:
    """A volume as containerd passes the kubelet's (``rbind``, ``rprivate``)."""
    options = ["rbind", "rprivate", "ro" if readonly else "rw"]
    return {"type": "bind", "source": str(source), "destination": destination, "options": options}


class Node(Hostjob):
    """hostjob as a runtime handler runs it: with the operator's global flags (its
    ``BinaryName`` wrapper's), here a mount point in the test's directory rather than
    the host's ``/hpc``; ``binary``: the handler's ``BinaryName`` when it is not
    hostjob itself (a wrapper)."""

    def __init__(
        self, root: Path, flags: list[str], log: Path | None = None, binary: str | None = None
    ) -> None:
        super().__init__(root, log)
        self.flags = flags
        self.binary = binary

    def argv(self, *args: str) -> list[str]:
        words = super().argv()
        if self.binary is not None:
            words = [self.binary, *words[len(hostjob_cmd()) :]]
        return [*words, *self.flags, *args]

    def with_flags(self, *flags: str) -> Node:
        return Node(self.root, [*self.flags, *flags], self.log, self.binary)

    def through(self, binary: str) -> Node:
        """The same handler with ``binary`` as its ``BinaryName``."""
        return Node(self.root, self.flags, self.log, binary)

    def run_bundle(self, bundle: Path, container_id: str) -> str:
        """``run`` of the bundle in the foreground: what the job printed."""
        return self.ok("run", "-b", str(bundle), container_id)

    def exec_process(self, container_id: str, process: dict[str, Any], path: Path) -> str:
        """``exec --process`` as containerd's shim runs a CRI exec."""
        path.write_text(json.dumps(process))
        return self.ok("exec", "--process", str(path), container_id)

    def start_detached(self, bundle: Path, container_id: str, **env: str) -> None:
        """``create`` + ``start``, as the shim does."""
        self.ok("create", "-b", str(bundle), container_id, env=env or None)
        self.ok("start", container_id)


def run_as(uid: int, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` as ``uid`` (its gid the same), no groups; ``args`` are ``$1``..."""
    argv = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"]
    return subprocess.run(
        [*argv, "sh", "-c", script, "sh", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def trusted_handler(directory: Path) -> str:
    """The operators' guide's wrapper for a handler whose pod authors the operator trusts
    (snippet ``trusted-handler``), written to ``directory`` with the hostjob under test
    for the guide's: the program that handler's ``BinaryName`` names."""
    wrapper = directory / "hostjob-trusted"
    wrapper.write_text(snippet("trusted-handler").replace(DOC_BINARY, hostjob_cmd()[0]))
    wrapper.chmod(0o755)
    return str(wrapper)
