"""The node installer on a systemd node (the VM lane): the installer image run as deploy/'s
DaemonSet runs it, against the host's own containerd under systemd, then a pod under the
``hostjob`` handler through the CRI, then the pod's termination.

The image is the one ``scripts/installer-image`` builds (``build/hostjob-node.oci.tar`` in
the checkout, or ``$HOSTJOB_INSTALLER_IMAGE``): its building needs Debian's archive, which a
guest has no network for, so ``scripts/test`` builds it on the host before the lanes and the
guests find it in the checkout they share. Its layers are unpacked into a root, and the
DaemonSet container's command (read from deploy/) runs there as its privileged pod does:
root with every capability, the host's PID namespace, a mount namespace of its own whose
root is the image's, with the host's ``/`` at ``/host`` (``HostToContainer``: slave), and
SIGTERM at the pod's termination. What runc would add (its own /dev, masked paths) is what
a privileged pod does without.

Checked: the drop-in, the import line and ``/opt/hostjob`` appear; containerd was restarted
by systemd (a new invocation of its unit); the CRI serves ``hostjob`` and ``hostjob-join``;
a pod under ``hostjob`` runs a job container; at termination ``/etc/containerd/config.toml``
is byte for byte as before, no drop-in, no ``/opt/hostjob``, containerd running without the
handlers. Then the same with the host's Python made unavailable to containerd and all it
starts (systemd's ``InaccessiblePaths=``: a bind mount over each ``python3*`` in the unit's
mount namespace): the pod still runs, so the carried interpreter is what runs hostjob.

Needs systemd as PID 1 on cgroup v2 (skipped with the reason elsewhere, failed where
HOSTJOB_REQUIRE_SYSTEMD=1) and root.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import tarfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from tests.compat import harness
from tests.integration.test_systemd_cgroup import DRIVER, needs_systemd

from . import kubelet
from .conftest import CriImages

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = needs_systemd

REPO = Path(__file__).resolve().parents[2]
IMAGE = Path(os.environ.get("HOSTJOB_INSTALLER_IMAGE", REPO / "build" / "hostjob-node.oci.tar"))
DAEMONSET = REPO / "deploy" / "10-hostjob-node.yaml"
SOCKET = "/run/containerd/containerd.sock"
UNIT = "containerd.service"
CONFIG = Path("/etc/containerd/config.toml")
DROPIN_DIR = Path("/etc/containerd/hostjob")
INSTALL_DIR = Path("/opt/hostjob")
HIDE_DIR = Path("/run/systemd/system/containerd.service.d")
HIDE = HIDE_DIR / "zz-no-python.conf"
TCG = 600.0  # seconds for the installer's steps under QEMU's emulation


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=300)


def invocation() -> str:
    return systemctl("show", "-P", "InvocationID", UNIT).stdout.strip()


def the_pods_container() -> tuple[list[str], str]:
    """deploy/'s installer container: its command and where it mounts the host's root,
    checked to be the privileged, host-PID pod this test reproduces."""
    docs = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["hostPID"] is True and container["securityContext"]["privileged"] is True
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == "/" and mount["mountPropagation"] == "HostToContainer"
    return container["command"], mount["mountPath"]


def unpack_image(archive: Path, rootfs: Path) -> None:
    """The OCI archive's one image, its layers in order into ``rootfs`` (the image is this
    repository's own build: trusted)."""
    with tarfile.open(archive) as tf:
        index = json.load(tf.extractfile("index.json"))  # type: ignore[arg-type]

        def blob(digest: str) -> bytes:
            f = tf.extractfile("blobs/" + digest.replace(":", "/"))
            assert f is not None, digest
            return f.read()

        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        rootfs.mkdir(parents=True)
        for layer in manifest["layers"]:
            (rootfs.parent / "layer.tar.gz").write_bytes(blob(layer["digest"]))
            subprocess.run(
                ["tar", "-xzf", str(rootfs.parent / "layer.tar.gz"), "-C", str(rootfs)],
                check=True, timeout=300,
            )  # fmt: skip
            (rootfs.parent / "layer.tar.gz").unlink()


class InstallerPod:
    """The DaemonSet's pod on this host: started, waited for, terminated."""

    def __init__(self, rootfs: Path, log: Path) -> None:
        command, host_mount = the_pods_container()
        self.command = command
        self.log = log
        host = f"{rootfs}{host_mount}"
        for d in (host_mount, "/proc", "/sys", "/dev", "/run", "/tmp"):
            Path(f"{rootfs}{d}").mkdir(parents=True, exist_ok=True)
        script = " && ".join([
            f"mount --rbind / {host}",
            f"mount --make-rslave {host}",
            f"mount -t proc proc {rootfs}/proc",
            f"mount --rbind /sys {rootfs}/sys",
            f"mount --rbind /dev {rootfs}/dev",
            f"mount -t tmpfs tmpfs {rootfs}/run",
            f"mount -t tmpfs tmpfs {rootfs}/tmp",
            f'exec chroot {rootfs} "$@"',
        ])  # fmt: skip
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "slave", "sh", "-c", script, "sh",
                 *command],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, line: str) -> None:
        deadline = time.monotonic() + TCG
        while line not in self.text():
            assert self.proc.poll() is None, f"the installer exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {line!r} in:\n{self.text()}"
            time.sleep(0.5)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=TCG)

    def end(self) -> None:
        """The pod gone whatever happened: terminated (its uninstall), killed if stuck."""
        if self.proc.poll() is None:
            try:
                self.terminate()
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def host_containerd(
    tmp_path_factory: pytest.TempPathFactory, cri_images: CriImages
) -> Iterator[harness.Containerd]:
    """The host's containerd under systemd, with the pause and tools images; stopped again
    after the tests when it was not running before them."""
    assert DRIVER, "HOSTJOB_REQUIRE_SYSTEMD=1 but systemd does not run this host on cgroup v2"
    if os.geteuid() != 0:
        pytest.fail("the node installer's test needs root", pytrace=False)
    if not IMAGE.is_file():
        pytest.fail(
            f"no installer image at {IMAGE}: scripts/installer-image builds it (on a host"
            " with Debian's archive; scripts/test does before the VM lane)",
            pytrace=False,
        )
    was_active = systemctl("is-active", UNIT).stdout.strip() == "active"
    started = systemctl("start", UNIT)
    assert started.returncode == 0, started.stderr
    ctd = harness.Containerd(tmp_path_factory.mktemp("host-containerd"), namespace="k8s.io")
    ctd.address = Path(SOCKET)
    from hostjob.node import cri

    cri.wait(SOCKET, lambda path: bool(cri.version(path)), time.monotonic() + TCG)
    ctd.import_image(cri_images.pause, kubelet.PAUSE_IMAGE)
    ctd.import_image(cri_images.tools, kubelet.TOOLS_IMAGE)
    # the host's containerd starts sandboxes from its own configured pause image (no network
    # here to pull it): the test's pause, under that name
    sandbox = sandbox_image()
    ctd.ctr("images", "tag", "--force", kubelet.PAUSE_IMAGE, sandbox, check=True)
    yield ctd
    ctd.ctr("images", "rm", kubelet.PAUSE_IMAGE, kubelet.TOOLS_IMAGE, sandbox)
    if not was_active:
        systemctl("stop", UNIT)


@pytest.fixture
def python_hidden(request: pytest.FixtureRequest) -> Iterator[bool]:
    """With ``True``: every ``python3*`` of the host inaccessible to containerd and what it
    starts (shims, runtimes, job containers), from its next start on."""
    hide: bool = request.param
    if hide:
        paths = sorted(
            p
            for pattern in ("/usr/bin/python3*", "/usr/lib/python3*", "/usr/local/lib/python3*")
            for p in glob.glob(pattern)
        )
        assert "/usr/bin/python3" in paths, paths
        HIDE_DIR.mkdir(parents=True, exist_ok=True)
        HIDE.write_text("[Service]\nInaccessiblePaths=" + " ".join(paths) + "\n")
        assert systemctl("daemon-reload").returncode == 0
        assert systemctl("restart", UNIT).returncode == 0
    try:
        yield hide
    finally:
        if hide:
            HIDE.unlink()
            systemctl("daemon-reload")
            systemctl("restart", UNIT)


def sandbox_image() -> str:
    """The pause image the host's containerd configuration names (``sandbox_image`` in
    version 2, ``sandbox`` of the pinned images in version 3)."""
    dump = subprocess.run(
        ["containerd", "config", "dump"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    found = re.search(
        r"""^\s*(?:sandbox_image|sandbox)\s*=\s*["']([^"']+)["']""", dump, re.MULTILINE
    )
    assert found, f"no sandbox image in containerd's configuration:\n{dump}"
    return found[1]


def served() -> set[str]:
    from hostjob.node import cri

    return cri.runtime_handlers(SOCKET)


def run_a_job_pod(ctd: harness.Containerd, work: Path, systemd_cgroup: bool) -> str:
    """A pod under the ``hostjob`` handler, its one container a job container: its log."""
    node = kubelet.Node(
        ctd,
        work,
        runtime_root=work / "runtime-root",
        cgroup_root=f"hostjob-node-{uuid.uuid4().hex[:8]}",
        cgroup_driver="systemd" if systemd_cgroup else "cgroupfs",
    )
    node.start()
    try:
        pod = node.pod("installed", handler="hostjob")
        pod.run()
        c = pod.run_container(
            "job",
            ["sh", "-c", 'echo "job in ${CONTAINER_SANDBOX_MOUNT_POINT:?}"; cat /proc/1/comm'],
        )
        status = pod.wait_exited(c, timeout=TCG)
        lines = [text for _, _, text in pod.log(c)]
        assert status.exit_code == 0, (status.message, lines)
        problems = pod.delete()
    finally:
        problems_at_stop = node.stop()
    assert not problems and not problems_at_stop, problems + problems_at_stop
    return "\n".join(lines)


@pytest.mark.parametrize("python_hidden", [False, True], indirect=True, ids=["", "no-python"])
def test_the_daemonsets_pod_installs_serves_and_undoes(
    host_containerd: harness.Containerd, python_hidden: bool, tmp_path: Path
) -> None:
    if python_hidden:
        out = subprocess.run(
            ["nsenter", "-t", systemctl("show", "-P", "MainPID", UNIT).stdout.strip(), "-m",
             "/usr/bin/python3", "-S", "-c", "pass"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode != 0, "containerd's mount namespace still runs the host's python3"
    config_before = CONFIG.read_bytes() if CONFIG.exists() else None
    assert not DROPIN_DIR.exists() and not INSTALL_DIR.exists()
    assert served() & {"hostjob", "hostjob-join"} == set()
    unpack_image(IMAGE, tmp_path / "image" / "rootfs")
    identity = (tmp_path / "image/rootfs/opt/hostjob/.hostjob-node").read_text()
    first = invocation()

    pod = InstallerPod(tmp_path / "image" / "rootfs", tmp_path / "installer.log")
    try:
        pod.wait_for("installed; waiting for the pod's termination")
        assert "serves the handlers hostjob, hostjob-join" in pod.text()
        assert invocation() != first, "containerd was not restarted by systemd"
        assert systemctl("is-active", UNIT).stdout.strip() == "active"
        assert {"hostjob", "hostjob-join"} <= served()
        assert (DROPIN_DIR / "runtimes.toml").is_file()
        assert (INSTALL_DIR / ".hostjob-node").read_text() == identity
        config = CONFIG.read_bytes()
        assert b'"/etc/containerd/hostjob/runtimes.toml"' in config

        systemd_cgroup = "SystemdCgroup = true" in pod.text()
        log = run_a_job_pod(host_containerd, tmp_path / "kubelet", systemd_cgroup)
        assert "job in " in log, log

        installed = invocation()
        assert pod.terminate() == 0, pod.text()
    finally:
        pod.end()
    assert "terminating: undoing the install" in pod.text()
    assert invocation() != installed, "containerd was not restarted at the uninstall"
    assert systemctl("is-active", UNIT).stdout.strip() == "active"
    assert (CONFIG.read_bytes() if CONFIG.exists() else None) == config_before
    assert not DROPIN_DIR.exists()
    assert not INSTALL_DIR.exists()
    assert served() & {"hostjob", "hostjob-join"} == set()
