"""What Kubernetes' container runtimes tell hostjob about a container they create for a
pod (containerd's CRI plugin and CRI-O annotate every container), and what it means: the
mount mode a pod's container gets by default, whether a container is a job container
at all (mixed pods: a confined one goes to a real OCI runtime), and the namespaces such
a confined container's runtime must get. Pure: the caller reads the config."""

from __future__ import annotations

from hostjob.errors import ConfigError

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


def default_mount_mode(annotations: dict[str, str]) -> str:
    """The mount mode when ``io.hostjob.mount-mode`` does not say: bind for a container
    that Kubernetes' container runtime created for a pod (the kubelet's volumes at their
    ``mountPath``, as hcsshim does since containerd 1.7), host for anything else -- a
    pod's sandbox included."""
    kind = annotations.get(CRI_CONTAINER_TYPE) or annotations.get(CRIO_CONTAINER_TYPE)
    return "bind" if kind == "container" else "host"


def delegated(document: object) -> bool:
    """Whether a bundle's config.json (as ``bundle.read_config`` read it) is of a
    container that is not a job container, which ``hostjob.runtime.delegate`` hands to
    a real OCI runtime. One that is not even a JSON object is left to the job
    container's create, which says what is wrong with it."""
    annotations = document.get("annotations") if type(document) is dict else None
    if type(annotations) is not dict:
        return False
    values = {k: v for k, v in annotations.items() if type(k) is str and type(v) is str}
    return not is_job_container(values)


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
