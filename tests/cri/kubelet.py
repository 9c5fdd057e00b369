"""A test kubelet: what the kubelet does on one node through containerd's CRI (``runtime.v1``).

The kubelet talks to containerd only through the CRI gRPC API, so doing the same calls with the
same messages from Python is a faithful stand-in for the runtime's side of Kubernetes. This
module does the kubelet's work around those calls too, as the kubelet does it:

* **cgroups** (``--cgroup-driver=cgroupfs``): the QoS cgroups ``<cgroup-root>/kubepods``,
  ``…/kubepods/burstable`` and ``…/kubepods/besteffort`` made at node start-up, and one cgroup per
  pod (``…/kubepods/pod<uid>`` for Guaranteed pods, ``…/kubepods/<qos>/pod<uid>`` otherwise)
  made in every hierarchy before ``RunPodSandbox`` and removed after ``RemovePodSandbox``; cpuset
  cgroups get their parent's CPUs and memory nodes, as libcontainer gives them; the pod's
  ``cpu.shares`` (2 for BestEffort) and, when every container has one, memory limit and CPU
  quota. ``cgroup_root`` plays the kubelet's ``--cgroup-root``: a private one per test session.
  With ``cgroup_driver="systemd"`` (``--cgroup-driver=systemd``, kubeadm's default, on a host
  that systemd runs on cgroup v2) the same tree is systemd's slices, which the kubelet starts
  as transient units over D-Bus: ``kubepods.slice``, ``kubepods-burstable.slice``,
  ``kubepods-besteffort.slice`` (the kubelet's default cgroup root ``/``), and per pod
  ``kubepods[-<qos>]-pod<uid>.slice`` (the UID's dashes as underscores, since a dash in a
  slice name is a level of nesting), stopped after ``RemovePodSandbox``; the cgroup parent
  the kubelet passes is the slice's expanded path, whose ``.slice`` ending tells containerd
  to hand the runtime ``<pod slice>:cri-containerd:<id>``.
* **the pod directory** (``<root-dir>/pods/<uid>``, ``--root-dir``): ``etc-hosts`` (a copy of
  the node's ``/etc/hosts`` for a host-network pod), one termination-log file per container
  (``containers/<name>/<random>``), and the service-account token volume as the kubelet
  projects it: a tmpfs at ``volumes/kubernetes.io~projected/kube-api-access-<random>`` written by
  the atomic writer (``..<timestamp>/{token,ca.crt,namespace}``, ``..data -> ..<timestamp>``,
  ``token -> ..data/token``), mounted read-only at ``/var/run/secrets/kubernetes.io/
  serviceaccount``;
* **logs**: the pod's log directory ``<log-dir>/<namespace>_<name>_<uid>`` and the container's
  ``log_path`` ``<name>/<attempt>.log``; lines in the CRI format ``<time> <stream> <P|F> <text>``;
* **the calls**, with the kubelet's messages: labels (``io.kubernetes.pod.*``,
  ``io.kubernetes.container.name``), annotations (restart count, termination message path),
  the namespace options (host network and PID), masked and read-only paths, resources as the
  kubelet computes them from requests and limits (shares, quota/period, memory limit, OOM score
  adjustment), ``StopContainer`` with the grace period, and pod deletion in the kubelet's order
  (stop containers, stop the sandbox, remove containers, remove the sandbox, remove the pod's
  cgroup and directories).

What a kubelet does that this one does not is listed in ``tests/cri/README.md``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

from tests.compat import harness

if TYPE_CHECKING:
    from collections.abc import Callable

TOOLS_IMAGE = "localhost/hostjob-cri/tools:1"
"""busybox and its applets, made with ``hostjob pack`` (see ``conftest.py``)."""
PAUSE_IMAGE = "localhost/hostjob-cri/pause:1"
"""The sandbox image: the static ``pause`` built from ``pause.c``."""

CALL_TIMEOUT = 120.0
"""Deadline of one CRI call (generous: the machine is shared with other test runs)."""

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TERMINATION_LOG = "/dev/termination-log"
MASKED_PATHS = [
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
]  # fmt: skip
"""What the kubelet passes as ``masked_paths`` for a container with the default procMount."""
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]

SERVICE_ENV = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
"""The ``kubernetes`` service's variables the kubelet gives every container (in-cluster
clients need them); only strings here."""

HOST_NAMESPACES = cri.NamespaceOption(network=cri.NODE, pid=cri.NODE, ipc=cri.NODE)
"""``hostNetwork: true`` + ``hostPID: true`` + ``hostIPC: true``: what a pod of job containers
must say (any namespace of its own is refused)."""

LOG_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) "
    r"(?P<stream>stdout|stderr) (?P<tag>[PF]) (?P<text>.*)$"
)


class KubeletError(Exception):
    """The test kubelet could not do a step (its own work, not a CRI call's)."""


def wait(pred: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``pred()`` until true; raise AssertionError naming ``what`` after ``timeout`` s."""
    if not harness.wait_for(pred, timeout, interval):
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


# ---------------------------------------------------------------------------------------------
# cgroups, the kubelet's cgroupfs layout


def _cpuset_init(path: Path) -> None:
    """A new v1 cpuset cgroup has no CPUs and memory nodes: copy the parent's, as libcontainer
    does (a process cannot join an empty cpuset)."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        f = path / name
        if f.exists() and not f.read_text().strip():
            f.write_text((path.parent / name).read_text())


def make_cgroup(path: str) -> None:
    """mkdir cgroup ``path`` (absolute, from the hierarchy root) and its parents in every
    hierarchy (v1 controllers, named ones, the hybrid cgroup2), as the kubelet's cgroupfs
    manager does; on a unified host each new level gets its parent's controllers (the
    kubelet's libcontainer enables them in ``cgroup.subtree_control``)."""
    unified = harness.cgroup_mode() == "unified"
    for top in harness.cgroup_hierarchies():
        d = top
        for part in path.strip("/").split("/"):
            if unified:
                _enable_controllers(d)
            d = d / part
            try:
                d.mkdir()
            except FileExistsError:
                pass
            if top.name == "cpuset":
                _cpuset_init(d)


def _enable_controllers(d: Path) -> None:
    wanted = set((d / "cgroup.controllers").read_text().split())
    enabled = set((d / "cgroup.subtree_control").read_text().split())
    for controller in sorted(wanted - enabled):
        (d / "cgroup.subtree_control").write_text(f"+{controller}")


def write_cgroup(path: str, controller: str, name: str, value: int | str) -> None:
    """A v1 controller's file of cgroup ``path``; on a unified host the v2 file the kubelet
    writes for it (``cpu.weight`` for ``cpu.shares``, ``memory.max``, ``cpu.max``)."""
    if harness.cgroup_mode() != "unified":
        (harness.CGROUP_ROOT / controller / path.strip("/") / name).write_text(str(value))
        return
    d = harness.CGROUP_ROOT / path.strip("/")
    if name == "cpu.shares":
        (d / "cpu.weight").write_text(str(cpu_weight(int(value))))
    elif name == "memory.limit_in_bytes":
        (d / "memory.max").write_text(str(value))
    elif name == "cpu.cfs_quota_us":
        (d / "cpu.max").write_text(f"{value} 100000")
    elif name != "cpu.cfs_period_us":  # cpu.max holds both (the period 100 ms, as here)
        raise KubeletError(f"no cgroup v2 file for {controller} {name}")


def cgroup_procs(path: str) -> list[int]:
    """Every process in cgroup ``path`` or below it (any hierarchy)."""
    pids: set[int] = set()
    for top in harness.cgroup_dirs(path):
        for procs in top.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
    return sorted(pids)


def processes_in_cgroups(needle: str) -> list[int]:
    """Processes whose cgroup path (any hierarchy) contains ``needle`` (a pod UID)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cgroup") as f:
                    if needle in f.read():
                        found.append(int(d))
            except OSError:
                pass
    return found


def remove_cgroup(path: str) -> list[str]:
    """rmdir cgroup ``path`` (and only it: the kubelet's pod cgroup must be empty by now) in
    every hierarchy; what could not be removed, with why."""
    problems = []
    for d in harness.cgroup_dirs(path):
        children = [c.name for c in d.iterdir() if c.is_dir()]
        if children:
            problems.append(f"cgroup {d} still has children {children}")
            continue
        try:
            d.rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            # an exiting process may still be accounted for a moment
            gone = e.errno == errno.EBUSY and harness.wait_for(lambda d=d: _rmdir(d), 5.0, 0.05)
            if not gone:
                problems.append(f"cgroup {d}: {e.strerror} (processes {cgroup_procs(path)})")
    return problems


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# cgroups, the kubelet's systemd layout (--cgroup-driver=systemd)


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=60)


def unit_properties(unit: str, *props: str) -> dict[str, str]:
    """``systemctl show -p`` of ``unit`` as a dict (a unit systemd does not know has
    ``LoadState=not-found`` and ``ActiveState=inactive``)."""
    out = systemctl("show", unit, "-p", ",".join(props)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def slice_path(unit: str) -> str:
    """The cgroup of slice ``unit``, as systemd nests it: each dash is a level
    (``a-b.slice`` -> ``/a.slice/a-b.slice``)."""
    parts = unit.removesuffix(".slice").split("-")
    return "".join("/" + "-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def start_slice(unit: str, properties: list[tuple[str, ...]]) -> None:
    """Start ``unit`` as the transient slice the kubelet's systemd cgroup manager makes
    (libcontainer's: no default dependencies, a want on its parent, accounting on, the
    limits as properties: ``(name, D-Bus signature, busctl's words for the value)``), and
    wait until systemd reports it active."""
    parent = unit.rpartition("-")[0]
    props: list[tuple[str, ...]] = [
        ("Description", "s", f"libcontainer container {unit}"),
        ("DefaultDependencies", "b", "false"),
        *([("Wants", "as", "1", f"{parent}.slice")] if parent else []),
        ("MemoryAccounting", "b", "true"),
        ("CPUAccounting", "b", "true"),
        ("IOAccounting", "b", "true"),
        ("TasksAccounting", "b", "true"),
        *properties,
    ]
    argv = ["busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
            unit, "replace", str(len(props))]  # fmt: skip
    for prop in props:
        argv += prop
    argv.append("0")  # no auxiliary units
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise KubeletError(f"cannot start the slice {unit}: {done.stderr.strip()}")
    wait(
        lambda: unit_properties(unit, "ActiveState").get("ActiveState") == "active",
        30,
        f"systemd to start {unit}",
    )


def stop_slice(unit: str) -> list[str]:
    """Stop slice ``unit`` (what the kubelet does with a deleted pod's); what is left of it.
    Stopping a slice stops every unit in it: so what the runtime left in it (a scope, a
    cgroup) is reported first, as the cgroupfs kubelet's rmdir of a pod cgroup that still
    has children would fail."""
    problems = [
        f"{unit} still holds {child.name} when the kubelet stops it"
        for d in harness.cgroup_dirs(slice_path(unit))
        for child in d.iterdir()
        if child.is_dir()
    ]
    done = systemctl("stop", unit)
    if done.returncode != 0:
        problems.append(f"systemctl stop {unit}: {done.stderr.strip()}")
    problems += [f"cgroup {d}" for d in harness.cgroup_dirs(slice_path(unit))]
    return problems


# ---------------------------------------------------------------------------------------------
# resources, as the kubelet turns requests and limits into the CRI's LinuxContainerResources


class Resources:
    """A container's ``resources`` (CPU in millicores, memory in bytes; 0 = not set)."""

    __slots__ = ("cpu_limit", "cpu_request", "memory_limit", "memory_request")

    def __init__(
        self,
        *,
        cpu_request: int = 0,
        cpu_limit: int = 0,
        memory_request: int = 0,
        memory_limit: int = 0,
    ) -> None:
        # the API server defaults a request to its limit
        self.cpu_request = cpu_request or cpu_limit
        self.cpu_limit = cpu_limit
        self.memory_request = memory_request or memory_limit
        self.memory_limit = memory_limit

    def qos(self) -> str:
        if not (self.cpu_request or self.memory_request or self.cpu_limit or self.memory_limit):
            return "besteffort"
        if (
            self.cpu_limit
            and self.memory_limit
            and self.cpu_request == self.cpu_limit
            and self.memory_request == self.memory_limit
        ):
            return "guaranteed"
        return "burstable"

    def cpu_shares(self) -> int:
        # kubelet's MilliCPUToShares: 2 when no request
        return max(2, self.cpu_request * 1024 // 1000) if self.cpu_request else 2

    def linux(self, qos: str) -> cri.LinuxContainerResources:
        """What the kubelet puts in ``linux.resources`` (cgroup v1, CFS quota on)."""
        res = cri.LinuxContainerResources(cpu_shares=self.cpu_shares())
        if self.cpu_limit:
            res.cpu_period = 100_000
            res.cpu_quota = self.cpu_limit * 100_000 // 1000
        if self.memory_limit:
            res.memory_limit_in_bytes = self.memory_limit
        # the kubelet's OOM score policy: Guaranteed -997, BestEffort 1000, Burstable between
        if qos == "guaranteed":
            res.oom_score_adj = -997
        elif qos == "besteffort":
            res.oom_score_adj = 1000
        else:
            machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            adj = 1000 - (1000 * self.memory_request) // machine
            res.oom_score_adj = int(min(max(adj, 3), 999))
        return res


# ---------------------------------------------------------------------------------------------
# the node


QOS_SLICES = ("kubepods.slice", "kubepods-burstable.slice", "kubepods-besteffort.slice")


def cpu_weight(shares: int) -> int:
    """libcontainer's cgroup v2 value of ``cpu.shares`` (``ConvertCPUSharesToCgroupV2Value``)."""
    return 1 + ((shares - 2) * 9999) // 262142 if shares else 0


class Node:
    """One node's kubelet state: the CRI client (runtime and image services on containerd's
    socket), the kubelet's root and log dirs, and the QoS cgroups under ``cgroup_root`` (with
    ``cgroup_driver="systemd"``: the QoS slices, and ``cgroup_root`` is not used)."""

    def __init__(
        self,
        containerd: harness.Containerd,
        workdir: Path,
        runtime_root: Path,
        cgroup_root: str,
        handler: str = "hostjob",
        cgroup_driver: str = "cgroupfs",
    ) -> None:
        assert cgroup_driver in ("cgroupfs", "systemd"), cgroup_driver
        self.cgroup_driver = cgroup_driver
        self.containerd = containerd
        self.root_dir = workdir / "kubelet"
        self.log_dir = workdir / "log" / "pods"
        self.runtime_root = runtime_root / containerd.namespace
        # where runc keeps the containers hostjob hands it (those that are not job containers)
        self.delegate_root = self.runtime_root / ".delegate" / "runc"
        self.cgroup_root = "/" + cgroup_root.strip("/")
        self.handler = handler
        self.channel = grpc.insecure_channel(f"unix://{containerd.address}")
        self.runtime = cri_grpc.RuntimeServiceStub(self.channel)
        self.images = cri_grpc.ImageServiceStub(self.channel)
        self.pods: list[Pod] = []

    # -- node start-up and shutdown
    def start(self) -> None:
        """Make the kubelet's dirs and QoS cgroups; wait until the CRI answers ``Status``."""
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.cgroup_driver == "systemd":
            self._start_qos_slices()
        else:
            for qos in ("", "/burstable", "/besteffort"):
                make_cgroup(f"{self.cgroup_root}/kubepods{qos}")
            write_cgroup(f"{self.cgroup_root}/kubepods/besteffort", "cpu", "cpu.shares", 2)

        def ready() -> bool:
            try:
                status = self.runtime.Status(cri.StatusRequest(), timeout=10)
            except grpc.RpcError:
                return False
            return any(c.type == "RuntimeReady" and c.status for c in status.status.conditions)

        wait(ready, 60, "containerd's CRI to report RuntimeReady")

    def _start_qos_slices(self) -> None:
        """The QoS slices, as the kubelet's QoS container manager starts them (BestEffort's
        ``cpu.shares`` 2); one that is active already belongs to a real kubelet on this host,
        whose pods a test must not touch."""
        taken = [
            u for u in QOS_SLICES if unit_properties(u, "ActiveState")["ActiveState"] != "inactive"
        ]
        if taken:
            raise KubeletError(f"{taken} active already: a kubelet runs this host")
        for unit in QOS_SLICES:
            weight = [("CPUWeight", "t", str(cpu_weight(2)))] if "besteffort" in unit else []
            start_slice(unit, weight)

    def stop(self) -> list[str]:
        """Delete every pod left (each one is a problem), then the QoS cgroups and the
        cgroup root; what was found."""
        problems = []
        for pod in list(self.pods):
            problems.append(f"pod {pod.name} ({pod.uid}) left at node shutdown")
            problems += pod.delete(grace=0)
        try:
            left = self.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=CALL_TIMEOUT)
            for sb in left.items:
                problems.append(f"sandbox {sb.id} ({sb.metadata.name}) still listed")
                self.runtime.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sb.id))
                self.runtime.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=sb.id))
        except grpc.RpcError as e:
            problems.append(f"cleanup through the CRI failed: {e.code()}: {e.details()}")
        self.channel.close()
        if self.cgroup_driver == "systemd":
            for unit in reversed(QOS_SLICES):
                problems += stop_slice(unit)
            return problems
        for qos in ("/burstable", "/besteffort", ""):
            problems += remove_cgroup(f"{self.cgroup_root}/kubepods{qos}")
        problems += remove_cgroup(self.cgroup_root)
        return problems

    # -- images
    def image_id(self, ref: str) -> str:
        """The image ID (config digest) the kubelet passes to ``CreateContainer``."""
        st = self.images.ImageStatus(
            cri.ImageStatusRequest(image=cri.ImageSpec(image=ref)), timeout=CALL_TIMEOUT
        )
        if not st.image.id:
            raise KubeletError(f"image {ref} not known to the CRI")
        return st.image.id

    # -- pods
    def pod(self, name: str, resources: list[Resources] | None = None, **kw: object) -> Pod:
        pod = Pod(self, name, resources or [Resources()], **kw)  # type: ignore[arg-type]
        self.pods.append(pod)
        return pod

    def shim_socket(self, sandbox_id: str) -> Path:
        """The runc shim of a pod serves all its containers (grouped by sandbox ID)."""
        ctd = self.containerd
        key = f"{ctd.address}/{ctd.namespace}/{sandbox_id}"
        return Path("/run/containerd/s") / hashlib.sha256(key.encode()).hexdigest()

    def container_paths(self, cid: str) -> list[Path]:
        """Where containerd, its CRI plugin and the runtime keep state for one container or
        sandbox ID."""
        d = self.containerd.dir
        # the CRI's own dirs: its one plugin's up to 1.7; 2.x's runtime plugin keeps them
        cri = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
        return [
            self.runtime_root / cid,
            self.delegate_root / cid,
            d / "state" / "io.containerd.runtime.v2.task" / self.containerd.namespace / cid,
            *(d / top / plugin / kind / cid for top in ("state", "root") for plugin in cri
              for kind in ("sandboxes", "containers")),
        ]  # fmt: skip

    def snapshots(self) -> set[str]:
        out = self.containerd.ctr("snapshots", "ls", check=True).stdout.splitlines()[1:]
        return {line.split()[0] for line in out if line.split()}

    def leftovers(self, pod: Pod, ids: list[str]) -> list[str]:
        """Everything a deleted pod (sandbox and container ``ids``) left: in the CRI's and
        containerd's lists, snapshots, state dirs (containerd's, its CRI plugin's, the runtime's),
        mounts, the shim and its socket, processes in the pod's cgroups, the pod cgroup."""
        bad = []
        rt = self.runtime
        sandboxes = rt.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=CALL_TIMEOUT).items
        containers = rt.ListContainers(cri.ListContainersRequest(), timeout=CALL_TIMEOUT)
        known = {s.id for s in sandboxes} | {c.id for c in containers.containers}
        known |= set(self.containerd.containers()) | set(self.containerd.tasks())
        snapshots = self.snapshots()
        for i in ids:
            if i in known:
                bad.append(f"{i[:12]} still listed by the CRI, containerd or its tasks")
            if i in snapshots:
                bad.append(f"snapshot {i[:12]}")
            bad += [f"path {p}" for p in self.container_paths(i) if os.path.lexists(p)]
            bad += [f"mount {m}" for m in harness.mounts_mentioning(i)]
        bad += [f"mount {m}" for m in harness.mounts_mentioning(pod.uid)]
        if pod.sandbox_id:
            if os.path.lexists(self.shim_socket(pod.sandbox_id)):
                bad.append(f"shim socket {self.shim_socket(pod.sandbox_id)}")
            bad += [f"shim {p}: {c[:100]}" for p, c in self.containerd.shims(pod.sandbox_id)]
        # the UID as a cgroupfs pod cgroup spells it, and as a systemd slice name does
        for needle in sorted({pod.uid, pod.uid.replace("-", "_")}):
            bad += [f"process {p} in the pod's cgroups" for p in processes_in_cgroups(needle)]
        bad += [f"cgroup {d}" for d in harness.cgroup_dirs(pod.cgroup_parent)]
        return bad


class Container:
    """One container the kubelet created: its ID, name, attempt and kubelet-side files."""

    __slots__ = ("attempt", "id", "log_path", "name", "termination_log")

    def __init__(self, cid: str, name: str, attempt: int, log_path: Path, term: Path) -> None:
        self.id = cid
        self.name = name
        self.attempt = attempt
        self.log_path = log_path
        self.termination_log = term

    def __repr__(self) -> str:
        return f"Container({self.name}/{self.attempt}, {self.id[:12]})"


class Pod:
    """One pod: its sandbox config, cgroup, directories and containers."""

    def __init__(
        self,
        node: Node,
        name: str,
        resources: list[Resources],
        *,
        namespace: str = "default",
        namespaces: cri.NamespaceOption = HOST_NAMESPACES,
        annotations: dict[str, str] | None = None,
        privileged: bool = False,
        handler: str = "",
    ) -> None:
        self.node = node
        self.handler = handler or node.handler  # the pod's RuntimeClass handler
        self.privileged = privileged  # a privileged container in it (kubelet: sandbox too)
        self.name = name
        self.namespace = namespace
        self.uid = str(uuid.uuid4())
        self.namespaces = namespaces
        self.annotations = {"kubernetes.io/config.source": "api", **(annotations or {})}
        self.qos = _pod_qos(resources)
        qos_dir = "" if self.qos == "guaranteed" else f"/{self.qos}"
        self.cgroup_parent = f"{node.cgroup_root}/kubepods{qos_dir}/pod{self.uid}"
        self.slice = ""  # the pod's slice under the systemd driver
        if node.cgroup_driver == "systemd":
            qos_part = "" if self.qos == "guaranteed" else f"-{self.qos}"
            self.slice = f"kubepods{qos_part}-pod{self.uid.replace('-', '_')}.slice"
            self.cgroup_parent = slice_path(self.slice)
        self.resources = resources
        self.dir = node.root_dir / "pods" / self.uid
        self.log_dir = node.log_dir / f"{namespace}_{name}_{self.uid}"
        self.token_dir = (
            self.dir / "volumes" / "kubernetes.io~projected" / f"kube-api-access-{_rand(5)}"
        )
        self.token = f"token-{self.uid}"
        self.sandbox_id = ""
        self.sandbox_config: cri.PodSandboxConfig | None = None
        self.containers: list[Container] = []
        self._cgroup_made = False
        self._token_mounted = False

    def __repr__(self) -> str:
        return f"Pod({self.name}, {self.uid})"

    # -- the sandbox
    def labels(self) -> dict[str, str]:
        return {
            "io.kubernetes.pod.name": self.name,
            "io.kubernetes.pod.namespace": self.namespace,
            "io.kubernetes.pod.uid": self.uid,
        }

    def config(self) -> cri.PodSandboxConfig:
        # no hostname and no DNS config for a host-network pod: containerd copies the node's
        return cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(
                name=self.name, uid=self.uid, namespace=self.namespace, attempt=0
            ),
            log_directory=str(self.log_dir),
            labels=self.labels(),
            annotations=self.annotations,
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=self.cgroup_parent,
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=self.namespaces, privileged=self.privileged
                ),
            ),
        )

    def run(self) -> str:
        """The kubelet's pod start: the pod cgroup, directories and volumes, then
        ``RunPodSandbox``."""
        if self.slice:
            start_slice(self.slice, self._slice_limits())
        else:
            make_cgroup(self.cgroup_parent)
        self._cgroup_made = True
        if not self.slice:
            self._set_pod_limits()
        self.log_dir.mkdir(parents=True)
        (self.dir / "containers").mkdir(parents=True)
        hosts = Path("/etc/hosts").read_text() if os.path.exists("/etc/hosts") else ""
        (self.dir / "etc-hosts").write_text(
            "# Kubernetes-managed hosts file (host network).\n" + hosts
        )
        self._project_token()
        self.sandbox_config = self.config()
        resp = self.node.runtime.RunPodSandbox(
            cri.RunPodSandboxRequest(config=self.sandbox_config, runtime_handler=self.handler),
            timeout=CALL_TIMEOUT,
        )
        self.sandbox_id = resp.pod_sandbox_id
        return self.sandbox_id

    def _set_pod_limits(self) -> None:
        """The pod cgroup's values, as the kubelet's pod container manager sets them."""
        shares = sum(r.cpu_shares() if r.cpu_request else 0 for r in self.resources)
        write_cgroup(self.cgroup_parent, "cpu", "cpu.shares", max(shares, 2))
        if all(r.cpu_limit for r in self.resources):
            write_cgroup(self.cgroup_parent, "cpu", "cpu.cfs_period_us", 100_000)
            quota = sum(r.cpu_limit * 100_000 // 1000 for r in self.resources)
            write_cgroup(self.cgroup_parent, "cpu", "cpu.cfs_quota_us", quota)
        if all(r.memory_limit for r in self.resources):
            limit = sum(r.memory_limit for r in self.resources)
            write_cgroup(self.cgroup_parent, "memory", "memory.limit_in_bytes", limit)

    def _slice_limits(self) -> list[tuple[str, ...]]:
        """The same values as the pod slice's properties (the systemd driver's)."""
        shares = sum(r.cpu_shares() if r.cpu_request else 0 for r in self.resources)
        props: list[tuple[str, ...]] = [("CPUWeight", "t", str(cpu_weight(max(shares, 2))))]
        if all(r.cpu_limit for r in self.resources):
            per_sec = sum(r.cpu_limit for r in self.resources) * 1000  # millicores -> us per s
            props.append(("CPUQuotaPerSecUSec", "t", str(per_sec)))
        if all(r.memory_limit for r in self.resources):
            props.append(("MemoryMax", "t", str(sum(r.memory_limit for r in self.resources))))
        return props

    def _project_token(self) -> None:
        """The service-account token volume: a tmpfs written by the kubelet's atomic writer."""
        d = self.token_dir
        d.mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(d)],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        self._token_mounted = True
        (d / "..data").symlink_to(self._write_payload())
        for name in ("token", "ca.crt", "namespace"):
            (d / name).symlink_to(f"..data/{name}")

    def _write_payload(self) -> str:
        """The atomic writer's new ``..<timestamp>`` directory with the volume's files."""
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + _rand(9)
        (self.token_dir / stamp).mkdir(mode=0o755)
        for name, value in (
            ("token", self.token),
            ("ca.crt", "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"),
            ("namespace", self.namespace),
        ):
            (self.token_dir / stamp / name).write_text(value)
            (self.token_dir / stamp / name).chmod(0o644)
        return stamp

    def rotate_token(self, token: str) -> None:
        """A new token, as the kubelet's atomic writer publishes it: the files in a new
        ``..<timestamp>`` directory, ``..data_tmp`` pointing there renamed over ``..data``,
        the old directory removed (``token -> ..data/token`` never changes)."""
        d = self.token_dir
        old = os.readlink(d / "..data")
        self.token = token
        (d / "..data_tmp").symlink_to(self._write_payload())
        os.rename(d / "..data_tmp", d / "..data")
        shutil.rmtree(d / old)

    # -- containers
    def container_config(
        self,
        name: str,
        command: list[str],
        *,
        attempt: int = 0,
        resources: Resources | None = None,
        volumes: list[cri.Mount] | None = None,
        annotations: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        init: bool = False,
        privileged: bool = False,
        image: str = TOOLS_IMAGE,
        seccomp: cri.SecurityProfile | None = None,
    ) -> tuple[cri.ContainerConfig, Path]:
        """The kubelet's ContainerConfig for one container of this pod (and the termination-log
        file it made for it): ``volumes``, the token volume (admission appends it to the
        volume mounts), ``/etc/hosts`` and ``/dev/termination-log``, in the kubelet's order."""
        res = resources or Resources()
        term = self.dir / "containers" / name / _rand(8)
        term.parent.mkdir(parents=True, exist_ok=True)
        term.touch(mode=0o666)
        mounts = [
            *(volumes or []),
            cri.Mount(
                container_path=SERVICE_ACCOUNT_DIR, host_path=str(self.token_dir), readonly=True
            ),
            cri.Mount(container_path="/etc/hosts", host_path=str(self.dir / "etc-hosts")),
            cri.Mount(container_path=TERMINATION_LOG, host_path=str(term)),
        ]
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=attempt),
            image=cri.ImageSpec(image=self.node.image_id(image)),
            command=command,
            envs=[cri.KeyValue(key=k, value=v) for k, v in {**SERVICE_ENV, **(env or {})}.items()],
            mounts=mounts,
            labels={**self.labels(), "io.kubernetes.container.name": name},
            annotations={
                "io.kubernetes.container.restartCount": str(attempt),
                "io.kubernetes.container.terminationMessagePath": TERMINATION_LOG,
                "io.kubernetes.container.terminationMessagePolicy": "File",
                "io.kubernetes.pod.terminationGracePeriod": "30",
                "io.kubernetes.container.type": "init" if init else "container",
                **(annotations or {}),
            },
            log_path=f"{name}/{attempt}.log",
            linux=cri.LinuxContainerConfig(
                resources=res.linux(self.qos),
                security_context=cri.LinuxContainerSecurityContext(
                    namespace_options=self.namespaces,
                    privileged=privileged,
                    masked_paths=MASKED_PATHS,
                    readonly_paths=READONLY_PATHS,
                    seccomp=seccomp,
                ),
            ),
        )
        return config, term

    def create(self, name: str, command: list[str], **kw: object) -> Container:
        """``CreateContainer`` (the kubelet always passes the sandbox config along)."""
        config, term = self.container_config(name, command, **kw)  # type: ignore[arg-type]
        resp = self.node.runtime.CreateContainer(
            cri.CreateContainerRequest(
                pod_sandbox_id=self.sandbox_id, config=config, sandbox_config=self.sandbox_config
            ),
            timeout=CALL_TIMEOUT,
        )
        c = Container(
            resp.container_id, name, config.metadata.attempt, self.log_dir / config.log_path, term
        )
        self.containers.append(c)
        return c

    def start(self, container: Container) -> None:
        self.node.runtime.StartContainer(
            cri.StartContainerRequest(container_id=container.id), timeout=CALL_TIMEOUT
        )

    def run_container(self, name: str, command: list[str], **kw: object) -> Container:
        c = self.create(name, command, **kw)
        self.start(c)
        return c

    def status(self, container: Container) -> cri.ContainerStatus:
        return self.node.runtime.ContainerStatus(
            cri.ContainerStatusRequest(container_id=container.id), timeout=CALL_TIMEOUT
        ).status

    def wait_exited(self, container: Container, timeout: float = 60) -> cri.ContainerStatus:
        wait(
            lambda: self.status(container).state == cri.CONTAINER_EXITED,
            timeout,
            f"{container} to exit",
        )
        return self.status(container)

    def log(self, container: Container) -> list[tuple[str, str, str]]:
        """(stream, tag, text) of each line of the container's CRI log; a line in another
        format fails the test."""
        if not container.log_path.exists():
            return []
        out = []
        for line in container.log_path.read_text().splitlines():
            m = LOG_LINE.match(line)
            assert m, f"not a CRI log line: {line!r}"
            out.append((m["stream"], m["tag"], m["text"]))
        return out

    def wait_log(
        self, container: Container, *texts: str, timeout: float = 60
    ) -> list[tuple[str, str, str]]:
        """Wait until each of ``texts`` is a line of the container's log (containerd copies
        stdout and stderr on their own, a little after the program wrote them); the log."""
        wait(
            lambda: set(texts) <= {t for _, _, t in self.log(container)},
            timeout,
            f"{texts} in the log of {container}",
        )
        return self.log(container)

    def stop(self, container: Container, grace: int) -> None:
        self.node.runtime.StopContainer(
            cri.StopContainerRequest(container_id=container.id, timeout=grace),
            timeout=CALL_TIMEOUT + grace,
        )

    def remove(self, container: Container) -> None:
        self.node.runtime.RemoveContainer(
            cri.RemoveContainerRequest(container_id=container.id), timeout=CALL_TIMEOUT
        )
        self.containers.remove(container)

    # -- deletion
    def delete(self, grace: int = 2) -> list[str]:
        """The kubelet's pod deletion, each step tried even when one before failed: stop the
        containers (grace period), stop the sandbox, remove containers and sandbox, remove the
        pod cgroup and the pod's directories. Returns what failed."""
        problems: list[str] = []
        rt = self.node.runtime

        def step(what: str, call: Callable[..., object], *args: object, **kw: object) -> None:
            try:
                call(*args, **kw)
            except grpc.RpcError as e:
                problems.append(f"{what}: {e}")
            except (OSError, subprocess.SubprocessError) as e:
                problems.append(f"{what}: {e}")

        if self.sandbox_id:
            for c in self.containers:
                step(f"StopContainer {c}", self.stop, c, grace)
            step(
                "StopPodSandbox",
                rt.StopPodSandbox,
                cri.StopPodSandboxRequest(pod_sandbox_id=self.sandbox_id),
                timeout=CALL_TIMEOUT,
            )
            for c in list(self.containers):
                step(f"RemoveContainer {c}", self.remove, c)
            step(
                "RemovePodSandbox",
                rt.RemovePodSandbox,
                cri.RemovePodSandboxRequest(pod_sandbox_id=self.sandbox_id),
                timeout=CALL_TIMEOUT,
            )
        if self._cgroup_made and self.slice:
            problems += stop_slice(self.slice)
            self._cgroup_made = False
        if self._cgroup_made:
            left = remove_cgroup(self.cgroup_parent)
            if left:
                # leave nothing behind even then: kill what is in the pod cgroup and retry
                problems += left
                harness.kill_pids(cgroup_procs(self.cgroup_parent))
                harness.remove_cgroup(self.cgroup_parent)
            self._cgroup_made = False
        if self._token_mounted:
            step("umount token volume", _umount, self.token_dir)
            self._token_mounted = False
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        if self in self.node.pods:
            self.node.pods.remove(self)
        return problems


def _pod_qos(resources: list[Resources]) -> str:
    classes = {r.qos() for r in resources}
    if classes == {"guaranteed"}:
        return "guaranteed"
    if classes == {"besteffort"}:
        return "besteffort"
    return "burstable"


def _rand(n: int) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's random-name alphabet
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True, capture_output=True, timeout=30)
