"""What Kubernetes' container runtimes tell hostjob about a container they create for a
pod (containerd's CRI plugin and CRI-O annotate every container), and what it means: the
mount mode a pod's container gets by default, whether a container is a job container
at all (mixed pods: a confined one goes to a real OCI runtime), and the namespaces such
a confined container's runtime must get. Pure: the caller reads the config."""

from __future__ import annotations

from hostjob.errors import ConfigError
from hostjob.specconv.jobconfig import PodNamespace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# What Kubernetes' container runtimes tell a runtime about a container they create:
# containerd's CRI plugin ("sandbox" | "container", and the container's name in the pod
# spec) and CRI-O ("sandbox" | "container").
CRI_CONTAINER_TYPE = "io.kubernetes.cri.container-type"
CRI_CONTAINER_NAME = "io.kubernetes.cri.container-name"
CRIO_CONTAINER_TYPE = "io.kubernetes.cri-o.ContainerType"

# A container hostjob hands to a real OCI runtime says "false" here (or its pod does,
# naming it: ``io.hostjob.job-container.<name>``).
ANNOTATION_JOB_CONTAINER = "io.hostjob.job-container"

# A pod annotation: "join" makes the pod's job containers join its sandbox's network, IPC
# and UTS namespaces (the sandbox then goes to the real runtime, which makes them).
ANNOTATION_POD_NAMESPACES = "io.hostjob.pod-namespaces"
POD_NAMESPACES_JOIN = "join"


def is_cri(annotations: dict[str, str]) -> bool:
    """Whether Kubernetes' container runtime (containerd's CRI plugin, CRI-O) created the
    container, for a pod."""
    return CRI_CONTAINER_TYPE in annotations or CRIO_CONTAINER_TYPE in annotations


def default_mount_mode(annotations: dict[str, str]) -> str:
    """The mount mode when ``io.hostjob.mount-mode`` does not say: bind for a container
    that Kubernetes' container runtime created for a pod (the kubelet's volumes at their
    ``mountPath``, as hcsshim does since containerd 1.7), host for anything else -- a
    pod's sandbox included."""
    kind = annotations.get(CRI_CONTAINER_TYPE) or annotations.get(CRIO_CONTAINER_TYPE)
    return "bind" if kind == "container" else "host"


def with_pod_default(annotations: dict[str, str], default: str | None) -> dict[str, str]:
    """A Kubernetes container's annotations with the operator's default for
    ``io.hostjob.pod-namespaces`` (``--default-pod-namespaces``, per runtime handler)
    where the pod does not say: what every pod decision reads. Any other container's
    are returned as they are (the setting means something only for a pod's)."""
    if not default or ANNOTATION_POD_NAMESPACES in annotations or not is_cri(annotations):
        return annotations
    return {**annotations, ANNOTATION_POD_NAMESPACES: default}


def delegated(document: object, pod_default: str | None = None) -> bool:
    """Whether a bundle's config.json (as ``bundle.read_config`` read it) is of a
    container that is not a job container, which ``hostjob.runtime.delegate`` hands to
    a real OCI runtime (``pod_default``: the operator's ``--default-pod-namespaces``).
    One that is not even a JSON object is left to the job container's create, which
    says what is wrong with it."""
    annotations = document.get("annotations") if type(document) is dict else None
    if type(annotations) is not dict:
        return False
    values = {k: v for k, v in annotations.items() if type(k) is str and type(v) is str}
    return not is_job_container(with_pod_default(values, pod_default))


def is_job_container(annotations: dict[str, str]) -> bool:
    """Whether the container is a job container, or one that hostjob hands to a real
    OCI runtime (mixed pods, docs/operators.md). In order:

    * ``io.hostjob.job-container.<name>`` (a pod annotation naming one container of the
      pod: a pod spec cannot set a container's annotations, and containerd passes the
      pod's on to every container) for the container of that name;
    * ``io.hostjob.job-container`` (the container's own annotation, or the pod's);
    * a pod's sandbox whose pod names any container that is not a job container is not
      one either: the real runtime then makes the pod's namespaces, which the confined
      containers join as they would under it (job containers ignore them);
    * otherwise, a job container.

    A value other than true or false is a ConfigError."""
    name = annotations.get(CRI_CONTAINER_NAME)
    if name:
        named = _job_container_value(annotations, f"{ANNOTATION_JOB_CONTAINER}.{name}")
        if named is not None:
            return named
    own = _job_container_value(annotations, ANNOTATION_JOB_CONTAINER)
    if own is not None:
        return own
    kind = annotations.get(CRI_CONTAINER_TYPE) or annotations.get(CRIO_CONTAINER_TYPE)
    if kind == "sandbox":
        if joins_pod_namespaces(annotations):
            return False  # the pause holds real namespaces for the job containers to join
        prefix = ANNOTATION_JOB_CONTAINER + "."
        for key in sorted(annotations):
            if key.startswith(prefix) and _job_container_value(annotations, key) is False:
                return False
    return True


def _job_container_value(annotations: dict[str, str], key: str) -> bool | None:
    value = annotations.get(key)
    if value is None:
        return None
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"must be true or false, not {value!r}", f"annotations.{key}")


# Namespaces a confined container's delegate must not join when they are the host's.
_CONFINED_OWN = ("ipc", "pid")


def confined_namespaces(
    entries: list[dict[str, Any]], on_host: set[str]
) -> list[dict[str, Any]] | None:
    """``linux.namespaces`` for a container that is not a job container, as its real
    runtime must get them; None when they stay as they are.

    In a pod whose sandbox is a job container (only the container's own annotation
    said it is confined), containerd points the container's ``ipc``, ``uts``, ``pid``
    and ``network`` entries at the sandbox's namespaces -- the host's, where a job
    sandbox runs. ``on_host`` names the entry types whose ``path`` is the host's own
    namespace (probed by the caller). Such an ``ipc`` or ``pid`` entry becomes a new
    namespace of the container's own: never the host's. ``network`` stays: the pod's
    network is the host's there. ``uts`` follows the network as Kubernetes has it: a
    pod on the host's network shares the host's UTS namespace (what runc does with a
    sandbox of its own for the same pod), any other gets its own."""
    host_network = "network" in on_host or not any(e.get("type") == "network" for e in entries)
    own = set(_CONFINED_OWN) if host_network else {*_CONFINED_OWN, "uts"}
    out = []
    changed = False
    for entry in entries:
        kind = entry.get("type")
        if kind in own and kind in on_host and entry.get("path"):
            out.append({k: v for k, v in entry.items() if k != "path"})
            changed = True
        else:
            out.append(entry)
    return out if changed else None


def joins_pod_namespaces(annotations: dict[str, str]) -> bool:
    """``io.hostjob.pod-namespaces: join``; another value is a ConfigError."""
    value = annotations.get(ANNOTATION_POD_NAMESPACES)
    if value is None:
        return False
    if value != POD_NAMESPACES_JOIN:
        raise ConfigError(
            f"must be {POD_NAMESPACES_JOIN!r}, not {value!r}",
            f"annotations.{ANNOTATION_POD_NAMESPACES}",
        )
    return True


# The namespaces a pod asks for that a job container cannot have of its own, each with
# the pod field that puts the pod in the host's (Kubernetes gives a pod the host's UTS
# namespace with its network).
_POD_FIELDS = {
    "network": ("network", "hostNetwork"),
    "uts": ("UTS", "hostNetwork"),
    "ipc": ("IPC", "hostIPC"),
    "pid": ("PID", "hostPID"),
    "user": ("user", "hostUsers"),
}
JOINABLE = ("network", "ipc", "uts")


def pod_namespaces(
    annotations: dict[str, str],
    entries: list[tuple[str, str | None]],
    on_host: set[str],
    ids: dict[str, tuple[int, int]],
) -> list[PodNamespace]:
    """For a job container that Kubernetes' runtime created (``is_cri``): the namespaces it
    joins, else a ConfigError naming the pod fields to set. ``entries``: its
    ``linux.namespaces`` as (type, path); ``on_host`` and ``ids`` the caller's probes (the
    types whose path is the host's namespace; path -> (st_dev, st_ino)).

    containerd lists a namespace for every container: the sandbox's own (no ``path``: a new
    namespace) and, for a container, the sandbox's by ``path``. A pod on the host's network,
    IPC and PID (a HostProcess-style pod, whose sandbox runs on the host) gets entries
    whose path is the host's own namespace: ``on_host`` names those types (the caller
    compares the files with its own, never deciding by presence). Any other network, IPC,
    UTS or PID entry asks for isolation a process on the host does not have: refused --
    unless the pod opts in with ``io.hostjob.pod-namespaces: join``, and then a network,
    IPC or UTS path (its sandbox's, made by the real runtime) is joined. A PID namespace
    cannot be joined by a process that is already running: always refused."""
    join = joins_pod_namespaces(annotations)
    joined: dict[str, str] = {}
    refused: list[str] = []
    for kind, path in entries:
        if kind not in _POD_FIELDS or kind in on_host:
            continue
        if join and kind in JOINABLE and path:
            joined[kind] = path
        elif kind not in refused:
            refused.append(kind)
    if refused:
        raise ConfigError(refusal(refused, join), "linux.namespaces")
    out = []
    for kind, path in joined.items():
        found = ids.get(path)
        if found is None:
            raise ConfigError(f"the {kind} namespace {path} does not exist", "linux.namespaces")
        out.append(PodNamespace(type=kind, path=path, device=found[0], inode=found[1]))
    return out


def refusal(kinds: list[str], join: bool) -> str:
    """The one line that says which pod fields a refused pod must set."""
    order = list(_POD_FIELDS)
    kinds = sorted(kinds, key=order.index)
    names = _and([_POD_FIELDS[k][0] for k in kinds])
    fields = _and([f"{f}: true" for f in dict.fromkeys(_POD_FIELDS[k][1] for k in kinds)])
    plural = "s" if len(kinds) > 1 else ""
    line = (
        f"the pod asks for its own {names} namespace{plural}, which a job container cannot"
        f" give (it runs in the host's): set {fields} in the pod spec"
    )
    if not join and any(k in JOINABLE for k in kinds):
        line += (
            f", or the pod annotation {ANNOTATION_POD_NAMESPACES}: {POD_NAMESPACES_JOIN}"
            " to join the pod's network, IPC and UTS namespaces"
        )
    return line


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
