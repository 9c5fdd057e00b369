"""The pod specs of ``docs/operators.md``, created through the test kubelet as a kubelet would
create them: the guide's ``pod`` (a node set-up job container, bind mode by default) and
``mixed-pod`` (a job init container, then a container that runc runs).

Each snippet is read as the API server reads it (YAML) and turned into the kubelet's CRI calls:
``runtimeClassName`` -> the handler, ``hostNetwork``/``hostPID`` -> the namespace options, the
annotations, each container's command, resources and volume mounts, init containers first.
Two things are stand-ins: the images (packed with ``hostjob pack`` and imported under the
snippets' references) and the ``hostPath`` sources (moved into a temp dir, so that the test
never writes the host's ``/etc/cni/net.d``); the ``mountPath`` values are the snippets' own.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from cri_api.v1 import api_pb2 as cri

from tests.compat.image import build_rootfs
from tests.compat.test_operator_docs import snippet

from .conftest import _pack
from .kubelet import Container, Node, Pod, Resources
from .test_pods import container_pid, delete_and_check

NODE_TOOLS = "registry.example.com/node-tools:1.4"
APP = "registry.example.com/app:2.0"
CNI_CONF = '{"cniVersion": "1.0.0", "name": "node", "plugins": []}\n'


@pytest.fixture(scope="module")
def snippet_images(node: Node, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The snippets' images: node tools (busybox and a CNI configuration), an app (busybox)."""
    work = tmp_path_factory.mktemp("snippet-images")
    for ref, extra in ((NODE_TOOLS, {"etc/cni/10-node.conflist": CNI_CONF}), (APP, {})):
        name = ref.rsplit("/", 1)[1].replace(":", "-")
        rootfs = build_rootfs(work / name)
        for path, text in extra.items():
            (rootfs / path).parent.mkdir(parents=True, exist_ok=True)
            (rootfs / path).write_text(text)
        archive = work / f"{name}.oci.tar"
        _pack(rootfs, archive, ref, "--env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
        node.containerd.import_image(archive, ref)


def millicores(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def size(q: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", q)
    assert m, q
    unit = m[2] or ""
    power = " KMGT".index(unit[:1] or " ") if unit else 0
    return int(m[1]) * (1024 if unit.endswith("i") else 1000) ** power


def resources(c: dict[str, Any]) -> Resources:
    limits = (c.get("resources") or {}).get("limits") or {}
    return Resources(
        cpu_limit=millicores(str(limits["cpu"])) if "cpu" in limits else 0,
        memory_limit=size(str(limits["memory"])) if "memory" in limits else 0,
    )


class SnippetPod:
    """A pod spec of the guide, run through the test kubelet."""

    def __init__(self, node: Node, name: str, host_root: Path) -> None:
        self.spec: dict[str, Any] = yaml.safe_load(snippet(name))
        assert self.spec["kind"] == "Pod"
        spec = self.spec["spec"]
        assert spec["runtimeClassName"] == node.handler  # the RuntimeClass's handler
        self.containers = [*spec.get("initContainers", []), *spec["containers"]]
        self.inits = {c["name"] for c in spec.get("initContainers", [])}
        # the kubelet makes a hostPath of type DirectoryOrCreate; the sources live in a temp dir
        self.host_paths: dict[str, Path] = {}
        for volume in spec.get("volumes", []):
            source = host_root / volume["hostPath"]["path"].lstrip("/")
            source.mkdir(parents=True, exist_ok=True)
            self.host_paths[volume["name"]] = source
        meta = self.spec["metadata"]
        self.pod: Pod = node.pod(
            meta["name"],
            [resources(c) for c in self.containers],
            namespaces=cri.NamespaceOption(
                network=cri.NODE if spec.get("hostNetwork") else cri.POD,
                pid=cri.NODE if spec.get("hostPID") else cri.CONTAINER,
                ipc=cri.NODE if spec.get("hostIPC") else cri.POD,
            ),
            annotations=meta.get("annotations") or {},
        )

    def run(self) -> dict[str, Container]:
        """The sandbox, each init container to completion, then the containers."""
        self.pod.run()
        started = {}
        for c in self.containers:
            mounts = [
                cri.Mount(
                    container_path=m["mountPath"],
                    host_path=str(self.host_paths[m["name"]]),
                    readonly=bool(m.get("readOnly")),
                )
                for m in c.get("volumeMounts", [])
            ]
            init = c["name"] in self.inits
            started[c["name"]] = self.pod.run_container(
                c["name"],
                [*c["command"], *c.get("args", [])],
                image=c["image"],
                resources=resources(c),
                volumes=mounts,
                init=init,
            )
            if init:
                status = self.pod.wait_exited(started[c["name"]])
                assert (status.exit_code, status.reason) == (0, "Completed"), (c["name"], status)
        return started


def test_the_guides_pod(kubelet_node: Node, snippet_images: None, tmp_path: Path) -> None:
    """A job container that configures the node: bind mode by default, its volume at its
    ``mountPath`` (a directory the host has), the image under ``$CONTAINER_SANDBOX_MOUNT_POINT``,
    the pod's limits on its job."""
    node = kubelet_node
    host_cni = sorted(os.listdir("/etc/cni/net.d")) if os.path.isdir("/etc/cni/net.d") else None
    pod = SnippetPod(node, "pod", tmp_path / "host")
    assert pod.pod.qos == "guaranteed"
    setup = pod.run()["setup"]
    status = pod.pod.wait_exited(setup)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert [t for _, _, t in pod.pod.wait_log(setup, "configured")] == ["configured"]
    assert (pod.host_paths["etc-cni"] / "10-node.conflist").read_text() == CNI_CONF
    host_now = sorted(os.listdir("/etc/cni/net.d")) if os.path.isdir("/etc/cni/net.d") else None
    assert host_now == host_cni, "the host's /etc/cni/net.d was written"
    delete_and_check(node, pod.pod)


def test_the_guides_mixed_pod(kubelet_node: Node, snippet_images: None, tmp_path: Path) -> None:
    """The job init container prepares the host, at the volume's host path; the app runs
    confined, by runc (in the pod's sandbox, runc's too), and reads what the init wrote."""
    node = kubelet_node
    existed = os.path.lexists("/var/lib/app-data")
    pod = SnippetPod(node, "mixed-pod", tmp_path / "host")
    app = pod.run()["app"]
    line = f"prepared on {socket.gethostname()}"
    assert [t for _, _, t in pod.pod.wait_log(app, line)] == [line]
    assert os.readlink(node.runtime_root / app.id / "delegate").endswith("/runc")
    assert os.readlink(node.runtime_root / pod.pod.sandbox_id / "delegate").endswith("/runc")
    pid = container_pid(node, app)
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    delete_and_check(node, pod.pod)
    assert os.path.lexists("/var/lib/app-data") == existed
