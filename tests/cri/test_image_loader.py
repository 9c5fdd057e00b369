"""A pod's container of a Debian 13 image on this older node, through containerd's CRI as
the kubelet drives it: its programs run with the image's own loader and libraries (the
container's command, ``kubectl exec``), in bind mode (the CRI's default);
what they start is the node's; the pod annotation ``io.hostjob.loader: host`` opts out;
``$(CONTAINER_SANDBOX_MOUNT_POINT)`` in a command, as a manifest writes it, is the mount
point, and a volume is also under it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cri_api.v1 import api_pb2 as cri

from tests import distro
from tests.compat import harness

from .kubelet import Node
from .test_kubernetes import exec_sync, texts
from .test_pods import delete_and_check

TRIXIE = "localhost/hostjob-loader/trixie:13"
VERSION = "import sys; print(sys.version_info[:2], sys.prefix)"


@pytest.fixture(scope="module")
def trixie(cri_containerd: harness.Containerd, tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("trixie-cri")
    archive = distro.oci_archive(distro.distro_tar(), work / "trixie.tar", TRIXIE, ["sh"])
    cri_containerd.import_image(archive, TRIXIE)
    return TRIXIE


def test_the_images_programs_through_the_cri(kubelet_node: Node, trixie: str) -> None:
    """In bind mode, a pod's default. (Host mode, where containerd's /etc/hostname volume
    cannot be linked over the image's own file, is the bundle tests'.)"""
    node = kubelet_node
    pod = node.pod("loader")
    pod.run()
    c = pod.run_container(
        "py", ["python3", "-c", VERSION], image=trixie
    )  # the image's python3, found in its own PATH
    status = pod.wait_exited(c)
    assert status.exit_code == 0, pod.log(c)
    assert texts(pod, c) == ["(3, 13) /hpc/usr"]
    idle = pod.run_container("idle", ["sleep", "1000"], image=trixie)
    assert exec_sync(node, idle, ["jq", "--version"]).stdout == b"jq-1.7\n"
    got = exec_sync(node, idle, ["python3", "-c", "import sys; print(sys.version_info[1])"])
    assert got.stdout == b"13\n"
    # What the image's sh starts is the node's: its python3 is the host's.
    host = exec_sync(
        node, idle, ["sh", "-c", "python3 -c 'import sys; print(sys.version_info[1])'"]
    )
    assert host.stdout != b"13\n"
    delete_and_check(node, pod)


def test_the_pods_opt_out(kubelet_node: Node, trixie: str) -> None:
    """io.hostjob.loader: host -- the node's loader and libraries, as the kernel picks
    them, which this image's jq cannot use."""
    node = kubelet_node
    pod = node.pod("loader-host", annotations={"io.hostjob.loader": "host"})
    pod.run()
    c = pod.run_container("jq", ["jq", "--version"], image=trixie)
    status = pod.wait_exited(c)
    assert status.exit_code != 0
    assert any("GLIBC_2." in t for _, _, t in pod.log(c)), pod.log(c)
    delete_and_check(node, pod)


def test_a_manifests_sandbox_variable_and_volume(
    kubelet_node: Node, trixie: str, tmp_path: Path
) -> None:
    """``$(CONTAINER_SANDBOX_MOUNT_POINT)`` reaches the runtime as the manifest wrote it
    (the kubelet expands only what the pod spec defines); in bind mode the volume is also
    under the mount point."""
    node = kubelet_node
    volume = tmp_path / "config"
    volume.mkdir()
    (volume / "app.conf").write_text("from the volume\n")
    pod = node.pod("loader-var")
    pod.run()
    mounts = [cri.Mount(container_path="/etc/app-config", host_path=str(volume), readonly=True)]
    c = pod.run_container(
        "cat",
        ["$(CONTAINER_SANDBOX_MOUNT_POINT)/usr/bin/cat",
         "$(CONTAINER_SANDBOX_MOUNT_POINT)/etc/app-config/app.conf", "/etc/app-config/app.conf"],
        image=trixie, volumes=mounts,
    )  # fmt: skip
    status = pod.wait_exited(c)
    assert status.exit_code == 0, pod.log(c)
    assert texts(pod, c, "from the volume") == ["from the volume", "from the volume"]
    delete_and_check(node, pod)
