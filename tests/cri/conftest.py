"""Fixtures of the CRI suite (root only; fails, never skips, when a peer cannot be installed).

* ``cri_images`` (package) — the sandbox image (``pause``, a static program built from
  ``pause.c``) and the tools image (busybox and its applets, ``tests/compat/image.build_rootfs``),
  both made with ``hostjob pack`` as oci-archives.
* ``cri_containerd`` (package) — Debian's containerd 1.6 started by ``tests/compat``'s
  ``harness.Containerd`` with the CRI plugin on: sockets, root, state and config in a temp dir;
  hostjob is the runtime handler ``hostjob``, configured by the operators' guide's
  ``containerd-config`` snippet (``BinaryName`` = the hostjob under test; the shim's runtime
  root in the temp dir); the sandbox image is ``pause``; no CNI configuration (host-network pods
  only); both images imported into namespace ``k8s.io``. At the end it is stopped, and anything
  left (tasks, mounts, shims, cgroups) fails the last test. Package scope: containerd and the
  gRPC channel end with this directory's tests, not with the whole session.
  ``containerd_session`` is the same for a test file's own containerd configured by another
  of the guide's entries (``test_systemd_driver.py``: ``containerd-config-systemd``), and
  ``node_session`` a node's start and shutdown.
* ``node`` (package) — a ``kubelet.Node`` on that containerd, with a private cgroup root.
* ``runc_node`` (package) — the same for the ``runc`` handler (runc itself, its state root in
  the temp dir): the conformance suite's sanity handler.
* the pod network: ``cni_plugin.py`` as containerd's ``loopback`` and ``hostjob-test-net``
  plugins (a namespace of the pod's own with a veth pair inside it; nothing on the host), so
  that runc can run the pods with namespaces of their own that a job container refuses.
* ``kubelet_node`` (per test) — the node; pods a test made and did not delete are deleted after it
  (kubelet's order) and whatever they left fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.compat import harness
from tests.compat.image import build_rootfs
from tests.compat.test_operator_docs import DOC_BINARY, snippet
from tests.helpers import (
    INSTALL,
    fingerprint_changes,
    host_fingerprint,
    hostjob_cmd,
    hostjob_env,
    require_peer,
)

from . import critest, kubelet

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).resolve().parent
# Where the runtimes' tables are: containerd up to 1.7 (config version 2), and 2.x (3).
RUNTIMES_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def options_table(handler: str, version: int) -> str:
    return f'[plugins."{RUNTIMES_PLUGIN[version]}".containerd.runtimes.{handler}.options]\n'


def guide_entry_for(entry: str, version: int) -> str:
    """The operators' guide's entry for this containerd: ``containerd-config`` is config
    version 2 (containerd 1.6 and 1.7), ``containerd-config-v3`` version 3 (2.x)."""
    return f"{entry}-v3" if version == 3 else entry


TEST_NETWORK = "hostjob-test-net"


def _fail(e: Exception) -> None:
    pytest.fail(f"{type(e).__name__}: {e}", pytrace=False)


def install_test_network(workdir: Path) -> None:
    """``cni_plugin.py`` as the plugins ``loopback`` and ``hostjob-test-net`` in
    ``<workdir>/cni/bin``, and a network configuration naming it in ``<workdir>/cni/net.d``."""
    for sub in ("cni/bin", "cni/net.d"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    for name in ("loopback", TEST_NETWORK):
        plugin = workdir / "cni" / "bin" / name
        plugin.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "cni_plugin.py"}" "$0" "$@"\n'
        )
        plugin.chmod(0o755)
    (workdir / "cni" / "net.d" / f"10-{TEST_NETWORK}.conflist").write_text(
        json.dumps(
            {"cniVersion": "0.4.0", "name": TEST_NETWORK, "plugins": [{"type": TEST_NETWORK}]}
        )
    )


def cri_config(
    workdir: Path,
    hostjob: Path,
    runtime_root: Path,
    runc_root: Path,
    guide_entry: str = "containerd-config",
) -> str:
    """The CRI plugin's tables for ``harness.Containerd(cri=...)``, with the operators'
    guide's snippet ``guide_entry`` (``containerd-config-systemd``: a systemd node's)."""
    # The handlers exactly as the operators' guide documents them for this containerd's
    # config version, plus the shims' runtime roots (default /run/containerd/runc, shared
    # with every other containerd on the machine).
    version = harness.containerd_config_version()
    entry = snippet(guide_entry_for(guide_entry, version)).replace(DOC_BINARY, str(hostjob))
    assert re.search(rf"^version = {version}$", entry, re.M), (
        f"{guide_entry}: not version {version}"
    )
    entry = re.sub(r"^version = \d+\n", "", entry, flags=re.M)
    handler_options, runc_options = (
        options_table("hostjob", version),
        options_table("runc", version),
    )
    assert handler_options in entry, "the guide's containerd entry has no options table"
    entry = entry.replace(handler_options, f'{handler_options}  Root = "{runtime_root}"\n')
    # runc's state in the temp dir too (the conformance suite's sanity handler), in the
    # guide's options table for runc where it has one (a table may not be given twice)
    if runc_options in entry:
        entry = entry.replace(runc_options, f'{runc_options}  Root = "{runc_root}"\n')
    else:
        entry += f'\n{runc_options}  Root = "{runc_root}"\n'
    (workdir / "certs.d").mkdir(parents=True, exist_ok=True)
    install_test_network(workdir)
    if version == 3:
        return cri_tables_v3(workdir) + entry
    return f"""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{kubelet.PAUSE_IMAGE}"
  # exec/attach/port-forward URLs: loopback, an ephemeral port
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # root lacks CAP_SYS_RESOURCE here: an OOM score below containerd's own (the sandbox's -998,
  # a Guaranteed container's -997) cannot be set by any runtime; containerd clamps it
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  # the test network (cni_plugin.py): pods with a network namespace of their own get one
  # with nothing outside it (CNI is never called for host-network pods)
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{workdir}/cni/bin"
    conf_dir = "{workdir}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{workdir}/certs.d"

{entry}"""


def cri_tables_v3(workdir: Path) -> str:
    """``cri_config``'s tables for containerd 2.x (config version 3), where the CRI is three
    plugins: the images (snapshotter, the sandbox image, registries), the runtime (CNI,
    AppArmor, OOM scores, the runtimes) and the gRPC service (the streaming server)."""
    return f"""
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{kubelet.PAUSE_IMAGE}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{workdir}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  # as in version 2's tables: root lacks CAP_SYS_RESOURCE where the host is a container
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{workdir}/cni/bin"]
    conf_dir = "{workdir}/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

"""


# ---- images ---------------------------------------------------------------------------------


class CriImages:
    __slots__ = ("pause", "tools")

    def __init__(self, pause: Path, tools: Path) -> None:
        self.pause = pause
        self.tools = tools


def _pack(src: Path, archive: Path, ref: str, *options: str) -> None:
    done = subprocess.run(
        [*hostjob_cmd(), "pack", str(src), "--to", f"oci-archive:{archive}:{ref}", *options],
        capture_output=True, text=True, timeout=120, env=hostjob_env(),
    )  # fmt: skip
    assert done.returncode == 0, f"hostjob pack {ref} failed: {done.stderr}"


def build_pause(dest: Path) -> None:
    """``pause.c`` -> a static ``dest`` (no libc in the image)."""
    argv = ["gcc", "-static", "-Os", "-s", "-o", str(dest), str(HERE / "pause.c")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        # gcc without the static C library: the cc peer brings both
        subprocess.run([str(INSTALL), "--peers", "cc"], capture_output=True, timeout=900)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"cannot build the pause program: {done.stderr}"


@pytest.fixture(scope="package")
def cri_images(tmp_path_factory: pytest.TempPathFactory) -> CriImages:
    require_peer("probes", "gcc")
    require_peer("image", "busybox")
    work = tmp_path_factory.mktemp("cri-images")
    pause_dir = work / "pause"
    pause_dir.mkdir()
    build_pause(pause_dir / "pause")
    pause = work / "pause.oci.tar"
    _pack(pause_dir, pause, kubelet.PAUSE_IMAGE, "--entrypoint", "/pause")
    tools = work / "tools.oci.tar"
    _pack(
        build_rootfs(work / "tools"), tools, kubelet.TOOLS_IMAGE,
        "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--cmd", "sh",
    )  # fmt: skip
    return CriImages(pause, tools)


# ---- containerd and the node ----------------------------------------------------------------


@pytest.fixture(scope="package", autouse=True)
def _host_traces() -> Iterator[None]:
    """Remove the host dirs containerd creates outside the temp dirs (when they were absent)."""
    traces = harness.HostTraces()
    # containerd keeps the network namespaces of pods that are not on the host's network here
    netns_dir = "/run/netns"
    had_netns_dir = os.path.lexists(netns_dir)
    yield
    traces.cleanup()
    if not had_netns_dir:
        try:
            os.rmdir(netns_dir)
        except OSError:
            pass


@pytest.fixture(scope="package")
def cri_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("tests/cri needs root", pytrace=False)
    return tmp_path_factory.mktemp("cri")


@pytest.fixture(scope="package")
def cri_containerd(cri_workdir: Path, cri_images: CriImages) -> Iterator[harness.Containerd]:
    yield from containerd_session(cri_workdir, cri_images)


def containerd_session(
    workdir: Path, images: CriImages, guide_entry: str = "containerd-config", extra: str = ""
) -> Iterator[harness.Containerd]:
    """containerd in ``workdir`` with the CRI plugin configured by the guide's
    ``guide_entry`` (and the tables ``extra`` after it) and both images imported; stopped
    after the tests, and what its teardown finds left fails the last one."""
    require_peer("containerd", "containerd", "ctr", "containerd-shim-runc-v2")
    # what a node has: procps' top (not busybox's), ip and nsenter (the test network plugin)
    require_peer("node", "top", "ip", "nsenter")
    try:
        hostjob = harness.find_hostjob(workdir=workdir)
    except harness.HarnessError as e:
        _fail(e)
        raise
    if critest.JOIN_RUN:
        # the measuring run: the hostjob handler as deploy/'s hostjob-join
        wrapper = workdir / "hostjob-join"
        wrapper.write_text(f'#!/bin/sh\nexec "{hostjob}" --default-pod-namespaces=join "$@"\n')
        wrapper.chmod(0o755)
        hostjob = wrapper
    config = cri_config(
        workdir, hostjob, workdir / "runtime-root", workdir / "runc-root", guide_entry
    )
    config += extra
    ctd = harness.Containerd(workdir / "containerd", namespace="k8s.io", cri=config)
    try:
        ctd.start()
        ctd.import_image(images.pause, kubelet.PAUSE_IMAGE)
        ctd.import_image(images.tools, kubelet.TOOLS_IMAGE)
    except harness.HarnessError as e:
        ctd.stop()
        _fail(e)
    yield ctd
    problems = ctd.stop()
    if problems:
        pytest.fail("containerd teardown found leftovers:\n" + "\n".join(problems), pytrace=False)


def node_session(n: kubelet.Node) -> Iterator[kubelet.Node]:
    """Start a node, hand it to the tests, stop it: what its shutdown finds left fails the
    last test."""
    try:
        n.start()
    except (AssertionError, kubelet.KubeletError):
        n.stop()
        raise
    yield n
    problems = n.stop()
    if problems:
        pytest.fail(
            f"{n.handler} node shutdown found leftovers:\n" + "\n".join(problems), pytrace=False
        )


@pytest.fixture(scope="package")
def node(cri_containerd: harness.Containerd, cri_workdir: Path) -> Iterator[kubelet.Node]:
    yield from node_session(
        kubelet.Node(
            cri_containerd,
            cri_workdir,
            runtime_root=cri_workdir / "runtime-root",
            cgroup_root=f"hostjob-cri-{uuid.uuid4().hex[:8]}",
        )
    )


@pytest.fixture(scope="package")
def runc_node(cri_containerd: harness.Containerd, cri_workdir: Path) -> Iterator[kubelet.Node]:
    """The ``runc`` handler's node: the conformance suite's sanity handler."""
    yield from node_session(
        kubelet.Node(
            cri_containerd,
            cri_workdir / "runc-node",
            runtime_root=cri_workdir / "runc-root",
            cgroup_root=f"hostjob-cri-runc-{uuid.uuid4().hex[:8]}",
            handler="runc",
        )
    )


@pytest.fixture
def kubelet_node(node: kubelet.Node) -> Iterator[kubelet.Node]:
    before = list(node.pods)
    yield node
    problems = []
    for pod in [p for p in node.pods if p not in before]:
        ids = [pod.sandbox_id, *(c.id for c in pod.containers)]
        problems += pod.delete(grace=0)
        problems += node.leftovers(pod, [i for i in ids if i])
    if problems:
        pytest.fail("pods left behind by the test:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture(params=critest.HANDLERS)
def ct(
    request: pytest.FixtureRequest, node: kubelet.Node, runc_node: kubelet.Node
) -> Iterator[critest.Critest]:
    """The conformance suite's client for one handler (each case runs for both): the pods the
    case made are deleted after it, and whatever they left, or any change to the host (its
    fingerprint before and after the case), fails it."""
    n = node if request.param == "hostjob" else runc_node
    before = host_fingerprint()
    client = critest.Critest(n)
    yield client
    problems = client.cleanup()
    changes = fingerprint_changes(before, host_fingerprint())
    problems += [f"the host changed: {c}" for c in changes]
    if problems:
        pytest.fail(f"after the case ({n.handler}):\n" + "\n".join(problems), pytrace=False)
