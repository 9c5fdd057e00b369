"""The job container's internal configuration: what ``hostjob.specconv.convert`` makes of a
config.json, once, at ``create``; what the container's record keeps; and all that
later commands look at.

Plain typed records (``Model`` subclasses, so that the record can store them as
JSON). They hold decisions, not wire data: the mount point and mode are decided,
volumes are the bind mounts that apply, hooks are checked, the user and
capabilities are validated. Only the resources keep runtime-spec's own shape
(``hostjob.spec.resources.Resources``: the cgroup managers read that shape), decoded
from the record once, the first time a command asks for them.

On every runtime command's path (each decodes a record): ``errors`` and
``spec._decode`` only.
"""

from __future__ import annotations

from hostjob.spec._decode import (
    Model,
    boolean,
    integer,
    json_object,
    list_of,
    map_of,
    model,
    string,
    string_list,
    string_map,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import Resources


class Rlimit(Model):
    __slots__ = ("hard", "soft", "type")
    type: str
    soft: int
    hard: int
    FIELDS = (("type", "type", string), ("soft", "soft", integer), ("hard", "hard", integer))


class Scheduler(Model):
    """``process.scheduler``, checked (runc's rules): what ``sched_setattr`` is given."""

    __slots__ = ("deadline", "flags", "nice", "period", "policy", "priority", "runtime")
    policy: str  # SCHED_OTHER, SCHED_FIFO, ... (hostjob.specconv.execution.POLICIES)
    nice: int
    priority: int
    flags: list[str]
    runtime: int
    deadline: int
    period: int
    FIELDS = (
        ("policy", "policy", string),
        ("nice", "nice", integer),
        ("priority", "priority", integer),
        ("flags", "flags", string_list),
        ("runtime", "runtime", integer),
        ("deadline", "deadline", integer),
        ("period", "period", integer),
    )


class IOPriority(Model):
    """``process.ioPriority``, checked: an ``ioprio_set`` class and level."""

    __slots__ = ("klass", "priority")
    klass: str  # IOPRIO_CLASS_RT, IOPRIO_CLASS_BE or IOPRIO_CLASS_IDLE
    priority: int
    FIELDS = (("class", "klass", string), ("priority", "priority", integer))


class ProcessConfig(Model):
    """What to run and as whom, before the job-container rules (``runtime.resolve``)."""

    __slots__ = (
        "additional_gids",
        "args",
        "capabilities",
        "console_height",
        "console_width",
        "cwd",
        "env",
        "gid",
        "io_priority",
        "no_new_privileges",
        "oom_score_adj",
        "rlimits",
        "scheduler",
        "terminal",
        "uid",
        "umask",
        "username",
    )
    args: list[str]
    env: list[str]
    cwd: str | None
    terminal: bool
    console_height: int | None
    console_width: int | None
    uid: int | None
    gid: int | None
    additional_gids: list[int]
    umask: int | None
    username: str | None
    rlimits: list[Rlimit]
    no_new_privileges: bool
    capabilities: dict[str, list[str]] | None
    oom_score_adj: int | None
    scheduler: Scheduler | None
    io_priority: IOPriority | None
    FIELDS = (
        ("args", "args", string_list),
        ("env", "env", string_list),
        ("cwd", "cwd", string),
        ("terminal", "terminal", boolean),
        ("consoleHeight", "console_height", integer),
        ("consoleWidth", "console_width", integer),
        ("uid", "uid", integer),
        ("gid", "gid", integer),
        ("additionalGids", "additional_gids", list_of(integer)),
        ("umask", "umask", integer),
        ("username", "username", string),
        ("rlimits", "rlimits", list_of(model(Rlimit))),
        ("noNewPrivileges", "no_new_privileges", boolean),
        ("capabilities", "capabilities", map_of(string_list)),
        ("oomScoreAdj", "oom_score_adj", integer),
        ("scheduler", "scheduler", model(Scheduler)),
        ("ioPriority", "io_priority", model(IOPriority)),
    )


class Hook(Model):
    __slots__ = ("args", "env", "path", "timeout")
    path: str
    args: list[str]
    env: list[str]
    timeout: int | None
    FIELDS = (
        ("path", "path", string),
        ("args", "args", string_list),
        ("env", "env", string_list),
        ("timeout", "timeout", integer),
    )


# Volume.propagation: how mounts under a bind-mode volume travel between the job's
# mount namespace and the host's (runtime-spec's rprivate / rslave / rshared options,
# Kubernetes' None / HostToContainer / Bidirectional).
PRIVATE = "rprivate"  # neither way (the default, as runc's)
SLAVE = "rslave"  # host -> job
SHARED = "rshared"  # both ways: the job's mounts reach the host
PROPAGATIONS = (PRIVATE, SLAVE, SHARED)


# Volume.kind
BIND = "bind"  # a host path: host mode's link (a read-only bind if ro), bind mode's bind
TMPFS = "tmpfs"  # a tmpfs of the container's own: under the mount point, or in bind mode's
# private namespace at its destination


class Volume(Model):
    """A mount of the spec that applies to a job container: a bind mount (a symlink in
    host mode, a read-only bind there if it is ``ro``, a real bind in bind mode) or a
    tmpfs."""

    __slots__ = ("destination", "kind", "options", "propagation", "readonly", "source")
    source: str
    destination: str
    readonly: bool
    propagation: str | None  # one of PROPAGATIONS; None in records made before it was kept
    kind: str | None  # BIND or TMPFS; None (a bind) in records made before tmpfs
    # TMPFS: the mount's flag words (nosuid, nodev, noexec, ...) and tmpfs's own
    # key=value options (size, mode, ...), checked by the conversion
    options: list[str] | None
    FIELDS = (
        ("source", "source", string),
        ("destination", "destination", string),
        ("readonly", "readonly", boolean),
        ("propagation", "propagation", string),
        ("kind", "kind", string),
        ("options", "options", string_list),
    )

    @property
    def is_tmpfs(self) -> bool:
        return self.kind == TMPFS


class PodNamespace(Model):
    """A pod's namespace that the job's processes join (``io.hostjob.pod-namespaces``):
    its type, the path containerd gave, and the file's identity when ``create`` looked,
    which the joining process checks the file it opens against."""

    __slots__ = ("device", "inode", "path", "type")
    type: str
    path: str
    device: int
    inode: int
    FIELDS = (
        ("type", "type", string),
        ("path", "path", string),
        ("device", "device", integer),
        ("inode", "inode", integer),
    )


class JobConfig(Model):
    """Everything hostjob needs to run and later manage one job container."""

    __slots__ = (
        "_resources",
        "annotations",
        "auto_user",
        "bundle",
        "cgroups_path",
        "hooks",
        "image",
        "inherit_user",
        "loader",
        "mount_mode",
        "mount_point",
        "no_new_privileges",
        "oci_version",
        "pod_namespaces",
        "process",
        "readonly",
        "resources_json",
        "rootfs",
        "seccomp",
        "secrets",
        "volumes",
    )
    oci_version: str
    bundle: str
    rootfs: str
    readonly: bool
    mount_mode: str
    mount_point: str
    volumes: list[Volume]
    process: ProcessConfig
    hooks: dict[str, list[Hook]]
    cgroups_path: str
    resources_json: dict[str, Any] | None  # how the record stores ``resources``
    annotations: dict[str, str]
    inherit_user: bool
    image: str | None  # hostjob run IMAGE: the image's name in the store
    pod_namespaces: list[PodNamespace] | None  # joined by every process of the job
    seccomp: dict[str, Any] | None  # linux.seccomp, checked: every process runs under it
    # --user auto: the process's uid and gid are a number create allocated for this
    # container (hostjob.runtime.users), held while its record exists.
    auto_user: bool | None
    # Files the job gets from the host: [source, destination in the container's view]
    # pairs, written at create, readable by the job's user only (runtime.sandbox.secrets).
    secrets: list[list[str]] | None
    # Whose loader and libraries the image's program uses: "image" or "host"
    # (io.hostjob.loader; None in records made before it: "image").
    loader: str | None
    # Every process of the job (its init and each exec, whatever its own process says)
    # runs with no_new_privs: a pod's container in bind mode that does not run as root
    # (hostjob.specconv.trust.keeps_privileges).
    no_new_privileges: bool | None
    FIELDS = (
        ("ociVersion", "oci_version", string),
        ("bundle", "bundle", string),
        ("rootfs", "rootfs", string),
        ("readonly", "readonly", boolean),
        ("mountMode", "mount_mode", string),
        ("mountPoint", "mount_point", string),
        ("volumes", "volumes", list_of(model(Volume))),
        ("process", "process", model(ProcessConfig)),
        ("hooks", "hooks", map_of(list_of(model(Hook)))),
        ("cgroupsPath", "cgroups_path", string),
        ("resources", "resources_json", json_object),
        ("annotations", "annotations", string_map),
        ("inheritUser", "inherit_user", boolean),
        ("image", "image", string),
        ("podNamespaces", "pod_namespaces", list_of(model(PodNamespace))),
        ("seccomp", "seccomp", json_object),
        ("autoUser", "auto_user", boolean),
        ("secrets", "secrets", list_of(string_list)),
        ("loader", "loader", string),
        ("noNewPrivileges", "no_new_privileges", boolean),
    )

    def __init__(self, **values: Any) -> None:
        resources = values.pop("resources", None)
        super().__init__(**values)
        self._resources: Resources | None = None
        if resources is not None:
            self.set_resources(resources)

    @property
    def resources(self) -> Resources | None:
        """The job's limits (linux.resources, with windows.resources mapped in), typed.
        A record keeps them as JSON; they are decoded once, when a command first asks
        (``state``, ``list``, ``start`` and ``kill`` never do)."""
        try:
            cached = self._resources
        except AttributeError:  # decoded from a record: nothing typed yet
            cached = self._resources = None
        if cached is None and self.resources_json is not None:
            from hostjob.spec.resources import Resources

            self._resources = Resources.decode(self.resources_json, "resources")
        return self._resources

    def set_resources(self, resources: Resources | None) -> None:
        self._resources = resources
        self.resources_json = resources.to_json() if resources is not None else None

    @property
    def bind_rootfs(self) -> bool:
        """Host mode with a mount point of its own: hostjob binds the rootfs there."""
        return self.mount_mode == "host" and self.mount_point != self.rootfs

    def hooks_for(self, point: str) -> list[Hook]:
        return (self.hooks or {}).get(point) or []


# ``stop``: seconds between the stop signal and SIGKILL to the whole job (podman's).
DEFAULT_STOP_TIMEOUT = 10


class DaemonConfig(Model):
    """How a detached image container is looked after (``hostjob run -d IMAGE``): its
    log, its restart policy, how ``stop`` ends it, and the command line that made it
    (for ``generate systemd``). Kept in the container's record; the watcher
    (``hostjob.supervisor.watcher``) and ``stop``/``logs`` read it."""

    __slots__ = (
        "command",
        "env",
        "log_dir",
        "log_max_files",
        "log_max_size",
        "max_retries",
        "remove",
        "restart",
        "stop_signal",
        "stop_timeout",
    )
    log_dir: str  # root's 0700 directory of container.log and its rotated files
    log_max_size: int
    log_max_files: int
    restart: str  # "no" | "on-failure" | "always"
    max_retries: int | None  # on-failure:N
    stop_signal: int
    stop_timeout: int  # seconds between the stop signal and SIGKILL
    remove: bool  # --rm: deleted once it has stopped for good
    command: list[str]  # hostjob run's words for the same container, in the foreground
    # The environment its command line gave (``-e``, ``--env-file``: entries as run -d
    # read them), kept out of ``command``: ``generate systemd`` writes them into a
    # root-only file the unit reads, never into the unit. None in older records.
    env: list[str] | None
    FIELDS = (
        ("logDir", "log_dir", string),
        ("logMaxSize", "log_max_size", integer),
        ("logMaxFiles", "log_max_files", integer),
        ("restart", "restart", string),
        ("maxRetries", "max_retries", integer),
        ("stopSignal", "stop_signal", integer),
        ("stopTimeout", "stop_timeout", integer),
        ("remove", "remove", boolean),
        ("command", "command", string_list),
        ("env", "env", string_list),
    )

    def restart_text(self) -> str:
        """The restart policy as ``--restart`` takes it (``no``, ``on-failure:3``)."""
        if self.restart == "on-failure" and self.max_retries is not None:
            return f"on-failure:{self.max_retries}"
        return self.restart or "no"


def merge_resources(base: Resources | None, overrides: Resources) -> Resources:
    """``base`` with every field ``overrides`` sets laid over it: a nested group
    (``memory``, ``cpu``, ...) field by field, anything else whole. Neither input is
    changed (the result shares the values it leaves alone with them). What
    ``windows.resources`` adds to ``linux.resources``, and what
    ``update`` changes in a running job."""
    merged = type(overrides)()
    for _key, attr, _decode in overrides.FIELDS:
        old = getattr(base, attr) if base is not None else None
        new = getattr(overrides, attr)
        if isinstance(new, Model) and isinstance(old, Model):
            group = type(old)()
            for _k, field, _d in old.FIELDS:
                value = getattr(new, field)
                setattr(group, field, value if value is not None else getattr(old, field))
            setattr(merged, attr, group)
        else:
            setattr(merged, attr, new if new is not None else old)
    return merged
