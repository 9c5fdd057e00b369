"""The toolkit of our own CRI validation suite (the ``test_critest_*`` modules).

Modelled on kubernetes-sigs/cri-tools' ``critest`` (``pkg/validate``): each case makes the
CRI calls a case there makes, with messages as small as critest's (no kubelet volumes, no
resources unless the case is about them), and runs for **both** handlers of the same
containerd: ``runc``, the sanity handler (a case runc fails is a wrong case), and ``hostjob``,
the one under test. Commands are critest's own: bare busybox names (``sh``, ``top``, ``id``),
so that a job container must find its image's programs as runc's container does.

Pods are critest's default pod made fit for a job container: the host's network, PID and IPC
namespaces (``hostNetwork``, ``hostPID``, ``hostIPC``), which runc gives as well. Pods with
namespaces of their own are ``test_critest_by_design``'s: runc runs them (on the test network
of ``cni_plugin.py``), hostjob refuses them.

Safety (the suite runs on the machine it tests): nothing a case runs under the hostjob handler
writes outside the case's own temp dir -- no hostname, no sysctl, no link, no mode of ``/``;
the ``critest`` fixture fingerprints the host around every case (``helpers.host_fingerprint``)
and ``tests/conftest.py`` around the whole session.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import grpc
from cri_api.v1 import api_pb2 as cri

from .kubelet import CALL_TIMEOUT, LOG_LINE, TOOLS_IMAGE, Node, make_cgroup, remove_cgroup, wait

HANDLERS = ("runc", "hostjob")
HOST_POD = cri.NamespaceOption(network=cri.NODE, pid=cri.NODE, ipc=cri.NODE)
"""``hostNetwork``, ``hostPID`` and ``hostIPC``: the namespaces a pod of job containers has."""
UPSTREAM_POD = cri.NamespaceOption(network=cri.POD, pid=cri.NODE, ipc=cri.POD)
"""critest's own minimal pods (network and IPC of their own), but the host's PID namespace:
the pods of a measuring run (``HOSTJOB_CRI_JOIN=1``, tests/cri/README.md)."""
JOIN_RUN = os.environ.get("HOSTJOB_CRI_JOIN") == "1"
PAUSE = ["sh", "-c", "top"]
"""critest's ``pauseCmd``: a container that stays up (busybox ``top`` needs no terminal)."""
EXEC_TIMEOUT = 30


class RpcFailure(AssertionError):
    """A CRI call failed where the case expected it to succeed."""


def details(err: grpc.RpcError) -> str:
    return f"{err.code()}: {err.details()}"  # type: ignore[attr-defined]


class Sandbox:
    """One pod sandbox made by a case: its config, cgroup parent, log dir and containers."""

    def __init__(self, c: Critest, name: str, config: cri.PodSandboxConfig, uid: str) -> None:
        self.critest = c
        self.name = name
        self.config = config
        self.uid = uid
        self.cgroup_parent = config.linux.cgroup_parent
        self.log_dir = Path(config.log_directory)
        self.sandbox_id = ""
        self.containers: list[str] = []

    # -- containers
    def container_config(
        self,
        name: str,
        command: list[str] | None,
        *,
        args: list[str] | None = None,
        mounts: list[cri.Mount] | None = None,
        security: dict[str, Any] | None = None,
        resources: cri.LinuxContainerResources | None = None,
        stdin: bool = False,
        stdin_once: bool = False,
        tty: bool = False,
        labels: dict[str, str] | None = None,
        image: str = TOOLS_IMAGE,
        log: bool = True,
    ) -> cri.ContainerConfig:
        sec = {"namespace_options": self.config.linux.security_context.namespace_options}
        sec.update(security or {})
        return cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=0),
            image=cri.ImageSpec(image=self.critest.node.image_id(image)),
            command=command or [],
            args=args or [],
            mounts=mounts or [],
            labels=labels or {},
            stdin=stdin,
            stdin_once=stdin_once,
            tty=tty,
            log_path=f"{name}.log" if log else "",
            linux=cri.LinuxContainerConfig(
                resources=resources, security_context=cri.LinuxContainerSecurityContext(**sec)
            ),
        )

    def create(self, name: str, command: list[str] | None, **kw: Any) -> str:
        """``CreateContainer``; the container's ID (removed with the pod)."""
        config = self.container_config(name, command, **kw)
        return self.create_config(config)

    def create_config(self, config: cri.ContainerConfig) -> str:
        resp = self.critest.rt.CreateContainer(
            cri.CreateContainerRequest(
                pod_sandbox_id=self.sandbox_id, config=config, sandbox_config=self.config
            ),
            timeout=CALL_TIMEOUT,
        )
        self.containers.append(resp.container_id)
        return resp.container_id

    def start(self, cid: str) -> None:
        self.critest.rt.StartContainer(
            cri.StartContainerRequest(container_id=cid), timeout=CALL_TIMEOUT
        )

    def run(self, name: str, command: list[str] | None, **kw: Any) -> str:
        """Create and start a container; wait until it runs (critest's ``testStartContainer``)
        or has exited, whichever comes first."""
        cid = self.create(name, command, **kw)
        self.start(cid)
        c = self.critest
        wait(lambda: c.status(cid).state != cri.CONTAINER_CREATED, 60, f"{name} to start")
        return cid

    def log_path(self, cid: str) -> Path:
        return Path(self.critest.status(cid).log_path)

    def log(self, cid: str, path: Path | None = None) -> list[tuple[str, str, str]]:
        """(stream, tag, text) of each line of a container's CRI log."""
        path = path or self.log_path(cid)
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            m = LOG_LINE.match(line)
            assert m, f"not a CRI log line: {line!r}"
            out.append((m["stream"], m["tag"], m["text"]))
        return out

    def wait_log(self, cid: str, *texts: str, timeout: float = 60) -> list[str]:
        """Wait until each of ``texts`` is a line of the container's log; the log's texts."""
        wait(
            lambda: set(texts) <= {t for _, _, t in self.log(cid)},
            timeout,
            f"{texts} in the log of {cid[:12]}",
        )
        return [t for _, _, t in self.log(cid)]

    # -- the end
    def delete(self) -> list[str]:
        """Stop and remove containers and sandbox, the pod cgroup and log dir; what failed."""
        problems: list[str] = []
        rt = self.critest.rt

        def step(what: str, call: Any, request: Any) -> None:
            try:
                call(request, timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                    problems.append(f"{what}: {details(e)}")

        if self.sandbox_id:
            for cid in self.containers:
                step(f"StopContainer {cid[:12]}", rt.StopContainer,
                     cri.StopContainerRequest(container_id=cid, timeout=0))  # fmt: skip
            step("StopPodSandbox", rt.StopPodSandbox,
                 cri.StopPodSandboxRequest(pod_sandbox_id=self.sandbox_id))  # fmt: skip
            for cid in self.containers:
                try:
                    rt.RemoveContainer(
                        cri.RemoveContainerRequest(container_id=cid), timeout=CALL_TIMEOUT
                    )
                except grpc.RpcError:
                    # (containerd can still see a container that exited while it was being
                    # stopped as running: the kubelet stops and removes it again)
                    step(f"StopContainer {cid[:12]} again", rt.StopContainer,
                         cri.StopContainerRequest(container_id=cid, timeout=0))  # fmt: skip
                    step(f"RemoveContainer {cid[:12]}", rt.RemoveContainer,
                         cri.RemoveContainerRequest(container_id=cid))  # fmt: skip
            step("RemovePodSandbox", rt.RemovePodSandbox,
                 cri.RemovePodSandboxRequest(pod_sandbox_id=self.sandbox_id))  # fmt: skip
        problems += remove_cgroup(self.cgroup_parent)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        return problems


class Critest:
    """One handler's CRI client for a case: makes pods (deleted after the case) and wraps the
    calls critest's helpers make."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.rt = node.runtime
        self.handler = node.handler
        self.sandboxes: list[Sandbox] = []

    def __repr__(self) -> str:
        return f"Critest({self.handler})"

    # -- sandboxes
    def sandbox_config(
        self,
        name: str,
        *,
        namespaces: cri.NamespaceOption | None = None,
        privileged: bool = False,
        dns: cri.DNSConfig | None = None,
        hostname: str = "",
        sysctls: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> tuple[cri.PodSandboxConfig, str]:
        if namespaces is None:
            namespaces = UPSTREAM_POD if JOIN_RUN else HOST_POD
        uid = str(uuid.uuid4())
        log_dir = self.node.log_dir / f"critest_{name}_{uid}"
        config = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=uid, namespace="critest", attempt=0),
            hostname=hostname,
            log_directory=str(log_dir),
            dns_config=dns,
            labels={"io.kubernetes.pod.uid": uid, **(labels or {})},
            annotations=annotations or {},
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=f"{self.node.cgroup_root}/kubepods/besteffort/pod{uid}",
                sysctls=sysctls or {},
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=namespaces, privileged=privileged
                ),
            ),
        )
        return config, uid

    def pod(self, name: str, **kw: Any) -> Sandbox:
        """A sandbox made ready for ``run_pod`` (its cgroup and log dir, as the kubelet does)
        but not run yet: a case that expects ``RunPodSandbox`` to fail calls it itself."""
        config, uid = self.sandbox_config(name, **kw)
        sb = Sandbox(self, name, config, uid)
        make_cgroup(sb.cgroup_parent)
        sb.log_dir.mkdir(parents=True)
        self.sandboxes.append(sb)
        return sb

    def run_pod(self, name: str = "critest", **kw: Any) -> Sandbox:
        sb = self.pod(name, **kw)
        self.run_sandbox(sb)
        return sb

    def run_sandbox(self, sb: Sandbox) -> str:
        resp = self.rt.RunPodSandbox(
            cri.RunPodSandboxRequest(config=sb.config, runtime_handler=self.handler),
            timeout=CALL_TIMEOUT,
        )
        sb.sandbox_id = resp.pod_sandbox_id
        return sb.sandbox_id

    def cleanup(self) -> list[str]:
        problems = []
        for sb in self.sandboxes:
            ids = [sb.sandbox_id, *sb.containers]
            problems += sb.delete()
            problems += self.node.leftovers(sb, [i for i in ids if i])  # type: ignore[arg-type]
        self.sandboxes.clear()
        return problems

    # -- the calls
    def status(self, cid: str) -> cri.ContainerStatus:
        return self.rt.ContainerStatus(
            cri.ContainerStatusRequest(container_id=cid), timeout=CALL_TIMEOUT
        ).status

    def info(self, cid: str) -> dict[str, Any]:
        """``ContainerStatus``'s verbose info (containerd's: pid, the OCI config, ...)."""
        st = self.rt.ContainerStatus(
            cri.ContainerStatusRequest(container_id=cid, verbose=True), timeout=CALL_TIMEOUT
        )
        info: dict[str, Any] = json.loads(st.info["info"])
        return info

    def pid(self, cid: str) -> int:
        return int(self.info(cid)["pid"])

    def wait_state(self, cid: str, state: int, timeout: float = 60) -> cri.ContainerStatus:
        name = cri.ContainerState.Name(state)  # type: ignore[arg-type]
        wait(lambda: self.status(cid).state == state, timeout, f"{cid[:12]} to be {name}")
        return self.status(cid)

    def exec_sync(
        self, cid: str, cmd: list[str], timeout: int = EXEC_TIMEOUT
    ) -> cri.ExecSyncResponse:
        return self.rt.ExecSync(
            cri.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout),
            timeout=CALL_TIMEOUT,
        )

    def exec_ok(self, cid: str, cmd: list[str]) -> str:
        """critest's ``execSyncContainer``: exit 0, nothing on stderr; stdout."""
        r = self.exec_sync(cid, cmd)
        assert (r.exit_code, r.stderr) == (0, b""), (cmd, r.exit_code, r.stdout, r.stderr)
        return r.stdout.decode()

    def list_containers(self, **filters: Any) -> list[str]:
        items = self.rt.ListContainers(
            cri.ListContainersRequest(filter=cri.ContainerFilter(**filters)),
            timeout=CALL_TIMEOUT,
        ).containers
        return [c.id for c in items]

    def list_sandboxes(self, **filters: Any) -> list[str]:
        items = self.rt.ListPodSandbox(
            cri.ListPodSandboxRequest(filter=cri.PodSandboxFilter(**filters)),
            timeout=CALL_TIMEOUT,
        ).items
        return [s.id for s in items]
