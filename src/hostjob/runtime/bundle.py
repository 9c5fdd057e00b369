"""Reading the runtime-spec documents hostjob is given as files, and probing the host
for what their conversion needs.

* a bundle (``config.json`` + rootfs): ``load_bundle`` reads and decodes the config,
  probes the host (``probe_host``: CPUs, the writable layer's block device) and
  hands both to the one conversion step, ``hostjob.specconv.convert.to_job_config``;
* ``exec --process FILE``: ``load_process``;
* ``update --resources FILE``: ``load_resources``.

A missing file or bad JSON is a one-line ``ConfigError``; ``-`` reads stdin.
"""

from __future__ import annotations

import posix

from hostjob.boot import jsonio, paths
from hostjob.errors import ConfigError
from hostjob.specconv import convert

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec import runtime as wire
    from hostjob.spec.resources import Resources
    from hostjob.specconv.jobconfig import JobConfig, ProcessConfig


def read_json(path: str, what: str) -> object:
    """Read a JSON document (``-``: stdin); a missing file or bad JSON is a one-line
    ConfigError naming ``what``."""
    if path == "-":
        path = "/dev/stdin"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as err:
        raise ConfigError(f"{what} not found: {path}") from err
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror}") from err
    try:
        return jsonio.loads(data)
    except ValueError as err:
        raise ConfigError(f"{what} is not valid JSON: {err}") from err


def read_config(bundle: str) -> object:
    """The bundle's ``config.json`` as JSON, not decoded yet."""
    return read_json(paths.join(bundle, "config.json"), "config.json")


def load_spec(bundle: str, document: object = None) -> wire.Spec:
    """The bundle's decoded ``config.json`` (``document``: as ``read_config`` read it)."""
    from hostjob.spec import runtime as wire

    spec: wire.Spec = wire.Spec.decode(read_config(bundle) if document is None else document)
    return spec


def load_bundle(
    bundle: str,
    container_id: str,
    document: object = None,
    defaults: dict[str, str] | None = None,
) -> JobConfig:
    """The job container the bundle at ``bundle`` describes (``document``: its
    ``config.json`` as ``read_config`` read it, not read again; ``defaults``: the
    operator's, as ``config.to_job_config`` takes them)."""
    bundle = paths.abspath(bundle)
    spec = load_spec(bundle, document)
    host = probe_host(spec, bundle)
    return convert.to_job_config(spec, bundle, container_id, host, defaults)


def probe_host(spec: wire.Spec, bundle: str) -> convert.HostFacts:
    """What ``to_job_config`` needs to know about this host for ``spec``: its CPUs and,
    for ``windows.resources``, the block device of the writable layer; for a pod's
    container, which of its namespaces are the host's and the identity of the others."""
    from hostjob.specconv import pods

    facts = convert.HostFacts()
    if spec.windows is not None and spec.windows.resources is not None:
        facts.layer_device = writable_layer_device(convert.rootfs_of(spec, bundle))
        facts.cpus = posix.cpu_count() or 1
    entries = spec.linux.namespaces if spec.linux is not None else None
    if entries and pods.is_cri(spec.annotations or {}):
        pairs: list[tuple[object, object]] = [(e.type, e.path) for e in entries]
        facts.namespaces_on_host = host_namespaces(pairs)
        facts.namespace_ids = namespace_ids(pairs)
    return facts


# runtime-spec namespace types -> their names under /proc/<pid>/ns
NS_FILES = {
    "pid": "pid",
    "network": "net",
    "mount": "mnt",
    "ipc": "ipc",
    "uts": "uts",
    "user": "user",
    "cgroup": "cgroup",
    "time": "time",
}


def host_namespaces(entries: list[tuple[object, object]]) -> set[str]:
    """The types of the (type, path) entries whose ``path`` is the namespace hostjob runs
    in (the host's, where containerd's shim runs): the same file (st_dev, st_ino) as
    ``/proc/self/ns/<type>``."""
    found = set()
    for kind, path in entries:
        name = NS_FILES.get(kind) if type(kind) is str else None
        if name is None or type(path) is not str or not path:
            continue
        try:
            theirs = posix.stat(path)
            ours = posix.stat(f"/proc/self/ns/{name}")
        except OSError:
            continue
        if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
            found.add(str(kind))
    return found


def namespace_ids(entries: list[tuple[object, object]]) -> dict[str, tuple[int, int]]:
    """path -> (st_dev, st_ino) of each entry's namespace file that exists: what a process
    that joins it checks the file it opens against."""
    found = {}
    for _kind, path in entries:
        if type(path) is str and path:
            try:
                st = posix.stat(path)
            except OSError:
                continue
            found[path] = (st.st_dev, st.st_ino)
    return found


def writable_layer_device(rootfs: str) -> tuple[int, int] | None:
    """(major, minor) of the block device that holds the container's writable layer:
    an overlay's upper directory, or the rootfs itself; None when it is on no block
    device (tmpfs, a missing path)."""
    from hostjob.linux.mountinfo import mount_of

    path = rootfs
    try:
        mount = mount_of(rootfs)
        if mount is not None and mount.fstype == "overlay":
            for option in mount.options.split(","):
                if option.startswith("upperdir="):
                    path = option[len("upperdir=") :]
        device = posix.stat(path).st_dev
    except OSError:
        return None
    if posix.major(device) == 0:
        return None
    return posix.major(device), posix.minor(device)


def load_process(path: str) -> ProcessConfig:
    """``exec --process FILE`` (``-`` for stdin): a runtime-spec ``process`` object."""
    from hostjob.spec import runtime as wire

    data = read_json(path, "process JSON")
    return convert.process_config(wire.Process.decode(data, "process"), "process")


def load_resources(path: str) -> Resources:
    """``update --resources FILE`` (``-`` for stdin): a runtime-spec LinuxResources."""
    from hostjob.spec.resources import Resources

    resources: Resources = Resources.decode(read_json(path, "resources JSON"), "resources")
    return resources
