"""The client configuration snippets of docs/operators.md, exercised with the real clients."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import doc_blocks
from tests.helpers import REPO

from . import docker as harness_docker
from . import harness, image
from .image import OCIImage

if TYPE_CHECKING:
    Podman = harness.Podman

DOC = REPO / "docs" / "operators.md"
DOC_BINARY = "/usr/local/bin/hostjob"


def snippet(name: str) -> str:
    """The fenced block that follows ``<!-- snippet: name -->`` in the operators' guide."""
    return doc_blocks.snippet(DOC, name)


def hostjob_binary(compat_workdir: Path) -> str:
    return str(harness.make_runtime("hostjob", compat_workdir).client_path)


@pytest.mark.parametrize(
    ("entry", "systemd"),
    [
        ("containerd-config", False),
        ("containerd-config-systemd", True),
        ("containerd-config-v3", False),
        ("containerd-config-systemd-v3", True),
    ],
)
def test_containerd_parses_the_runtime_entry(
    tmp_path: Path, compat_workdir: Path, entry: str, systemd: bool
) -> None:
    """Each entry, a cgroupfs node's and a systemd node's (which tests/cri/
    test_systemd_driver.py runs pods with in the VM lane), in config version 2 (containerd
    1.6 and 1.7; 2.x migrates it) and 3 (containerd 2.x): ``containerd config dump`` shows
    the handlers where the CRI plugin of this containerd reads them."""
    harness.ensure_peer("containerd", ["containerd"])
    native = harness.containerd_config_version()
    if entry.endswith("-v3") and native < 3:
        major, minor = harness.containerd_version()
        pytest.skip(f"containerd {major}.{minor} reads no config version 3")
    binary = hostjob_binary(compat_workdir)
    config = tmp_path / "config.toml"
    config.write_text(snippet(entry).replace(DOC_BINARY, binary))
    dump = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dump.returncode == 0, dump.stderr
    plugin = "io.containerd.cri.v1.runtime" if native == 3 else "io.containerd.grpc.v1.cri"
    runtimes = tomllib.loads(dump.stdout)["plugins"][plugin]["containerd"]["runtimes"]
    assert "hostjob" in runtimes, "containerd dropped the hostjob runtime entry"
    hostjob = runtimes["hostjob"]
    assert hostjob["runtime_type"] == "io.containerd.runc.v2"
    assert hostjob["options"]["BinaryName"] == binary
    assert "io.hostjob.*" in hostjob["pod_annotations"]
    assert "io.hostjob.*" in hostjob["container_annotations"]
    # one cgroup driver for every handler of a node (its kubelet has one)
    for handler in ("hostjob", "runc"):
        options = runtimes[handler].get("options", {})
        assert options.get("SystemdCgroup", False) is systemd, (handler, options)


def test_runtimeclass_and_pods_name_the_handler() -> None:
    """The names tie together; tests/cri/test_operator_pods.py creates the pods themselves
    through containerd's CRI."""
    runtime_class = snippet("runtimeclass")
    handler = re.search(r"^handler: (\S+)", runtime_class, re.M)
    assert handler and handler.group(1) == "hostjob"
    assert "containerd.runtimes.hostjob]" in snippet("containerd-config")
    for name in ("pod", "mixed-pod"):
        pod = snippet(name)
        assert re.search(r"^\s+runtimeClassName: hostjob$", pod, re.M), name
        assert re.search(r"^\s+hostNetwork: true$", pod, re.M), name
    assert re.search(r"^\s+hostPID: true$", snippet("pod"), re.M)


def test_podman_runs_hostjob_by_name(
    podman: Podman, test_image: OCIImage, tmp_path: Path, compat_workdir: Path
) -> None:
    binary = hostjob_binary(compat_workdir)
    conf = Path(podman.env["CONTAINERS_CONF"]).read_text()
    head, _, rest = conf.partition("[engine.runtimes]")
    tail = rest[rest.index("\n[", 1) :] if "\n[" in rest[1:] else ""
    documented = snippet("containers-conf").replace(DOC_BINARY, binary)
    custom = tmp_path / "containers.conf"
    custom.write_text(head + documented + tail)
    env = dict(podman.env, CONTAINERS_CONF=str(custom))
    name = podman.new_name("by-name")
    result = harness.run(
        [*podman.base_args(), "--runtime", "hostjob", "run", "--rm", "--name", name, test_image.ref,
         "sh", "-c", 'echo "sandbox=$CONTAINER_SANDBOX_MOUNT_POINT"'],
        env=env,
        timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("sandbox=/") and line != "sandbox=/", result.stdout
    harness.wait_for(
        lambda: not podman.leftovers(name, harness.make_runtime("hostjob", compat_workdir)),
        5.0,
        0.1,
    )


def test_docker_runs_the_documented_runtimes(
    docker: harness_docker.Docker, compat_workdir: Path
) -> None:
    """The docker suite's dockerd has exactly the documented runtimes (with this run's
    binary), and the documented `docker run` line runs there, with the suite's image."""
    binary = hostjob_binary(compat_workdir)
    documented = json.loads(snippet("daemon-json").replace(DOC_BINARY, binary))
    running = json.loads(docker.config.read_text())
    assert documented["runtimes"] == running["runtimes"]
    line = shlex.split(snippet("docker-run").replace("\\\n", " "))
    assert line[:2] == ["docker", "run"] and "--network" in line and "busybox" in line
    words = [image.IMAGE_REF if w == "busybox" else w for w in line[1:]]
    result = docker.docker(*words, timeout=90)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("image at /") and "$" not in result.stdout, result.stdout
