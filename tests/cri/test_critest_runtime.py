"""critest's runtime info and pod sandbox cases (``runtime_info.go``, ``pod.go``), for both
handlers: the calls a kubelet makes at start-up and around every pod."""

from __future__ import annotations

import json

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness

from .critest import Critest
from .kubelet import CALL_TIMEOUT


def test_runtime_version(ct: Critest) -> None:
    """``Version``: containerd serving the CRI as ``runtime.v1``."""
    v = ct.rt.Version(cri.VersionRequest(version="v1"), timeout=CALL_TIMEOUT)
    assert (v.version, v.runtime_name, v.runtime_api_version) == ("0.1.0", "containerd", "v1"), v
    assert v.runtime_version.startswith("{}.{}.".format(*harness.containerd_version())), v


def test_runtime_status(ct: Critest) -> None:
    """``Status``: the conditions as containerd reports them -- RuntimeReady, and NetworkReady
    (the test network is configured: ``cni_plugin.py``) -- and, verbose, the runtime handler
    among those containerd knows, with the binary it runs."""
    st = ct.rt.Status(cri.StatusRequest(verbose=True), timeout=CALL_TIMEOUT)
    conditions = {c.type: (c.status, c.reason) for c in st.status.conditions}
    # containerd 1.7 and later add one about its own config (1.7 deprecates the v1 runtime,
    # whose root the harness's version 2 config names); 2.x, on version 3, has none
    deprecations = conditions.pop("ContainerdHasNoDeprecationWarnings", None)
    assert conditions == {"RuntimeReady": (True, ""), "NetworkReady": (True, "")}, conditions
    if harness.containerd_version() >= (2, 0):
        assert deprecations == (True, ""), deprecations
    elif harness.containerd_version() >= (1, 7):
        assert deprecations in ((True, ""), (False, "ContainerdHasDeprecationWarnings"))
    config = json.loads(st.info["config"])
    runtime = config["containerd"]["runtimes"][ct.handler]
    assert runtime["runtimeType"] == "io.containerd.runc.v2"
    binary = runtime["options"].get("BinaryName", "")
    assert binary.endswith("hostjob") if ct.handler == "hostjob" else binary == ""


def test_pod_sandbox_lifecycle(ct: Critest) -> None:
    """Run, status, list (by ID, state and label), stop, remove -- critest's ``pod.go``."""
    sb = ct.run_pod("lifecycle", labels={"critest": "lifecycle"})
    sid = sb.sandbox_id
    st = ct.rt.PodSandboxStatus(
        cri.PodSandboxStatusRequest(pod_sandbox_id=sid), timeout=CALL_TIMEOUT
    ).status
    assert st.state == cri.SANDBOX_READY and st.runtime_handler == ct.handler
    assert (st.metadata.name, st.metadata.uid) == ("lifecycle", sb.uid)
    assert st.linux.namespaces.options.network == cri.NODE and st.created_at > 0
    assert st.labels["critest"] == "lifecycle"

    assert ct.list_sandboxes(id=sid) == [sid]
    ready = cri.PodSandboxStateValue(state=cri.SANDBOX_READY)
    assert sid in ct.list_sandboxes(state=ready)
    assert ct.list_sandboxes(label_selector={"io.kubernetes.pod.uid": sb.uid}) == [sid]
    assert ct.list_sandboxes(label_selector={"critest": "no-such-label"}) == []

    ct.rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=CALL_TIMEOUT)
    st = ct.rt.PodSandboxStatus(
        cri.PodSandboxStatusRequest(pod_sandbox_id=sid), timeout=CALL_TIMEOUT
    ).status
    assert st.state == cri.SANDBOX_NOTREADY
    assert sid not in ct.list_sandboxes(state=ready)
    not_ready = cri.PodSandboxStateValue(state=cri.SANDBOX_NOTREADY)
    assert ct.list_sandboxes(id=sid, state=not_ready) == [sid]

    ct.rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=CALL_TIMEOUT)
    assert ct.list_sandboxes(id=sid) == []
    with pytest.raises(grpc.RpcError) as gone:
        ct.rt.PodSandboxStatus(
            cri.PodSandboxStatusRequest(pod_sandbox_id=sid), timeout=CALL_TIMEOUT
        )
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
