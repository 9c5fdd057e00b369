"""The one conversion step: runtime-spec wire config -> hostjob's job configuration.

Like runc's ``specconv``: everything hostjob does with a config.json is decided
here, once, at ``create``: which fields are honoured, which are ignored (with one
warning each) and which are refused; the sandbox mount point and mount mode; the
volumes; the user; the hooks; the cgroup path. The result (``JobConfig``) is
persisted in the container's state and is all later commands look at.
"""

from __future__ import annotations

import os

from hostjob import jsonio, log
from hostjob.errors import ConfigError
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

    from hostjob.spec import runtime as wire

# hostjob.spec.runtime (the wire models) and hostjob.runtime.caps are imported by the
# functions that convert: commands that only read a container's record never need them.

MOUNT_MODES = ("host", "bind")
DEFAULT_BIND_MOUNT_POINT = "/hpc"
# Parent of every container cgroup whose linux.cgroupsPath is empty or relative.
CGROUP_PARENT = "/hostjob"

ANNOTATION_MOUNT_MODE = "io.hostjob.mount-mode"
ANNOTATION_MOUNT_POINT = "io.hostjob.rootfs-mount-point"
ANNOTATION_INHERIT_USER = "io.hostjob.inherit-user"
HCS_CONTAINER = "microsoft.com/hostprocess-container"
HCS_ROOTFS_LOCATION = "microsoft.com/hostprocess-rootfs-location"
HCS_INHERIT_USER = "microsoft.com/hostprocess-inherit-user"

# Mount types that only make sense inside a container's own namespaces.
CONTAINER_INTERNAL_MOUNTS = ("proc", "sysfs", "devpts", "tmpfs", "mqueue", "cgroup", "cgroup2")

RLIMIT_NAMES = (
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_LOCKS",
    "RLIMIT_MEMLOCK",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
    "RLIMIT_SIGPENDING",
    "RLIMIT_STACK",
)
RLIM_INFINITY_U64 = 2**64 - 1


# --- internal configuration --------------------------------------------------------------


class Rlimit(Model):
    __slots__ = ("hard", "soft", "type")
    type: str
    soft: int
    hard: int
    FIELDS = (("type", "type", string), ("soft", "soft", integer), ("hard", "hard", integer))


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
        "no_new_privileges",
        "oom_score_adj",
        "rlimits",
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


class Volume(Model):
    """A bind mount of the spec: a symlink in host mode, a real bind in bind mode."""

    __slots__ = ("destination", "readonly", "source")
    source: str
    destination: str
    readonly: bool
    FIELDS = (
        ("source", "source", string),
        ("destination", "destination", string),
        ("readonly", "readonly", boolean),
    )


class JobConfig(Model):
    """Everything hostjob needs to run and later manage one job container."""

    __slots__ = (
        "annotations",
        "bundle",
        "cgroups_path",
        "hooks",
        "image",
        "inherit_user",
        "mount_mode",
        "mount_point",
        "oci_version",
        "process",
        "readonly",
        "resources_json",
        "rootfs",
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
    resources_json: dict[str, Any] | None  # linux.resources, decoded by resources()
    annotations: dict[str, str]
    inherit_user: bool
    image: str | None  # hostjob run IMAGE: the image's name in the store
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
    )

    @property
    def bind_rootfs(self) -> bool:
        """Host mode with a mount point of its own: hostjob binds the rootfs there."""
        return self.mount_mode == "host" and self.mount_point != self.rootfs

    def hooks_for(self, point: str) -> list[Hook]:
        return (self.hooks or {}).get(point) or []

    def resources(self) -> wire.Resources | None:
        """The job's limits (linux.resources, with windows.resources mapped in)."""
        if self.resources_json is None:
            return None
        from hostjob.spec import runtime as wire

        resources: wire.Resources = wire.Resources.decode(self.resources_json, "resources")
        return resources


# --- loading ------------------------------------------------------------------------------


def read_json(path: str, what: str) -> object:
    """Read a JSON document; a missing file or bad JSON is a one-line ConfigError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror}") from None
    try:
        return jsonio.loads(data)
    except ValueError as err:
        raise ConfigError(f"{what} is not valid JSON: {err}") from None


def load_spec(bundle: str) -> wire.Spec:
    from hostjob.spec import runtime as wire

    spec: wire.Spec = wire.Spec.decode(
        read_json(os.path.join(bundle, "config.json"), "config.json")
    )
    return spec


def load_bundle(bundle: str, container_id: str) -> JobConfig:
    bundle = os.path.abspath(bundle)
    return to_job_config(load_spec(bundle), bundle, container_id)


# --- the conversion -------------------------------------------------------------------------


def to_job_config(spec: wire.Spec, bundle: str, container_id: str) -> JobConfig:
    from hostjob.spec import runtime as wire

    _refuse_unsupported(spec)
    _warn_ignored(spec)
    annotations = dict(spec.annotations or {})
    if spec.root is None or not spec.root.path:
        raise ConfigError("root.path is required", "root.path")
    rootfs = os.path.normpath(os.path.join(bundle, spec.root.path))
    if spec.process is None:
        raise ConfigError("process is required", "process")
    mount_mode = annotations.get(ANNOTATION_MOUNT_MODE, "host")
    if mount_mode not in MOUNT_MODES:
        raise ConfigError(
            f"must be one of {', '.join(MOUNT_MODES)}, not {mount_mode!r}",
            f"annotations.{ANNOTATION_MOUNT_MODE}",
        )
    mount_point = _mount_point(spec, annotations, container_id, rootfs, mount_mode)
    linux = spec.linux or wire.Linux()
    resources = linux.resources
    windows = spec.windows
    if windows is not None and windows.resources is not None:
        from hostjob.cgroups.windows import from_windows

        mapped = from_windows(windows.resources, os.cpu_count() or 1, writable_layer_device(rootfs))
        resources = merge_resources(resources, mapped)
    if resources is not None and resources.unified:
        from hostjob.cgroups.resources import check_unified

        check_unified(resources.unified)
    return JobConfig(
        oci_version=spec.oci_version or wire.OCI_VERSION,
        bundle=bundle,
        rootfs=rootfs,
        readonly=bool(spec.root.readonly),
        mount_mode=mount_mode,
        mount_point=mount_point,
        volumes=_volumes(spec.mounts or [], bundle),
        process=process_config(spec.process, "process"),
        hooks=_hooks(spec.hooks),
        cgroups_path=linux.cgroups_path or "",
        resources_json=resources.to_json() if resources is not None else None,
        annotations=annotations,
        inherit_user=_truthy(annotations.get(ANNOTATION_INHERIT_USER))
        or _truthy(annotations.get(HCS_INHERIT_USER)),
    )


def merge_resources(base: wire.Resources | None, overrides: wire.Resources) -> wire.Resources:
    """``linux.resources`` with what ``windows.resources`` asks laid over it."""
    from hostjob.spec import runtime as wire

    merged = wire.Resources.decode(base.to_json()) if base is not None else wire.Resources()
    for _key, attr, _decode in wire.Resources.FIELDS:
        value = getattr(overrides, attr)
        if value is None:
            continue
        current = getattr(merged, attr)
        if isinstance(value, Model) and isinstance(current, Model):
            for _k, field, _d in value.FIELDS:
                if getattr(value, field) is not None:
                    setattr(current, field, getattr(value, field))
        else:
            setattr(merged, attr, value)
    return merged


def writable_layer_device(rootfs: str) -> tuple[int, int] | None:
    """(major, minor) of the block device that holds the container's writable layer:
    an overlay's upper directory, or the rootfs itself; None when it is on no block
    device (tmpfs, a missing path)."""
    from hostjob.mountinfo import mount_of

    path = rootfs
    try:
        mount = mount_of(rootfs)
        if mount is not None and mount.fstype == "overlay":
            for option in mount.options.split(","):
                if option.startswith("upperdir="):
                    path = option[len("upperdir=") :]
        device = os.stat(path).st_dev
    except OSError:
        return None
    if os.major(device) == 0:
        return None
    return os.major(device), os.minor(device)


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


def _refuse_unsupported(spec: wire.Spec) -> None:
    if spec.linux is not None and spec.linux.sysctl:
        raise ConfigError(
            "job containers share the host's kernel namespaces, so sysctls would change"
            " the host; remove them",
            "linux.sysctl",
        )
    if spec.vm is not None:
        raise ConfigError("virtual-machine containers are not supported by hostjob", "vm")
    windows = spec.windows
    if windows is not None and windows.hyperv is not None and windows.job_container is not None:
        raise ConfigError(
            "a job container runs on the host and cannot be isolated in Hyper-V",
            "windows.hyperv",
        )


# (attribute getter, JSON path) of fields that are accepted but mean nothing for a job
# container; each present one costs one warning line, never an error.
_IGNORED: tuple[tuple[str, str], ...] = (
    ("hostname", "hostname"),
    ("domainname", "domainname"),
    ("linux.namespaces", "linux.namespaces"),
    ("linux.uid_mappings", "linux.uidMappings"),
    ("linux.gid_mappings", "linux.gidMappings"),
    ("linux.seccomp", "linux.seccomp"),
    ("linux.masked_paths", "linux.maskedPaths"),
    ("linux.readonly_paths", "linux.readonlyPaths"),
    ("linux.devices", "linux.devices"),
    ("linux.mount_label", "linux.mountLabel"),
    ("process.apparmor_profile", "process.apparmorProfile"),
    ("process.selinux_label", "process.selinuxLabel"),
)


def _warn_ignored(spec: wire.Spec) -> None:
    for getter, path in _IGNORED:
        value: Any = spec
        for attr in getter.split("."):
            value = getattr(value, attr, None) if value is not None else None
        if value:
            log.warning(f"{path} is ignored: job containers run in the host's namespaces")


def _mount_point(
    spec: wire.Spec, annotations: dict[str, str], container_id: str, rootfs: str, mode: str
) -> str:
    """The sandbox mount point (SPEC §3)."""
    asked = None
    path = ""
    job = spec.windows.job_container if spec.windows is not None else None
    if job is not None and job.rootfs_mount_point:
        asked, path = job.rootfs_mount_point, "windows.jobContainer.rootfsMountPoint"
    elif annotations.get(ANNOTATION_MOUNT_POINT):
        asked, path = annotations[ANNOTATION_MOUNT_POINT], f"annotations.{ANNOTATION_MOUNT_POINT}"
    elif annotations.get(HCS_ROOTFS_LOCATION):
        location = annotations[HCS_ROOTFS_LOCATION]
        asked = os.path.join(location, container_id)
        path = f"annotations.{HCS_ROOTFS_LOCATION}"
    if asked is not None:
        asked = validate_mount_point(asked, path)
    if mode == "bind":
        return asked or DEFAULT_BIND_MOUNT_POINT
    return asked or rootfs


_SYSTEM_TREES = ("/proc", "/sys", "/dev")


def validate_mount_point(path: str, json_path: str) -> str:
    if not os.path.isabs(path):
        raise ConfigError(f"the mount point must be an absolute path, not {path!r}", json_path)
    path = os.path.normpath(path)
    if path == "/" or any(path == t or path.startswith(t + "/") for t in _SYSTEM_TREES):
        raise ConfigError(f"refusing to use {path} as the mount point", json_path)
    return path


def _volumes(mounts: list[wire.Mount], bundle: str) -> list[Volume]:
    volumes = []
    for i, mount in enumerate(mounts):
        options = mount.options or []
        if not mount.destination:
            raise ConfigError("destination is required", f"mounts[{i}].destination")
        if mount.type == "bind" or "bind" in options or "rbind" in options:
            if not mount.source:
                raise ConfigError("a bind mount needs a source", f"mounts[{i}].source")
            volumes.append(
                Volume(
                    source=os.path.normpath(os.path.join(bundle, mount.source)),
                    destination=os.path.normpath(os.path.join("/", mount.destination)),
                    readonly="ro" in options,
                )
            )
        elif mount.type in CONTAINER_INTERNAL_MOUNTS:
            log.debug(f"mounts[{i}] ({mount.type} on {mount.destination}) is container-internal")
        else:
            log.warning(
                f"mounts[{i}] ({mount.type} on {mount.destination}) is ignored:"
                " only bind mounts apply to job containers"
            )
    return volumes


def _hooks(hooks: wire.Hooks | None) -> dict[str, list[Hook]]:
    from hostjob.spec import runtime as wire

    table: dict[str, list[Hook]] = {}
    if hooks is None:
        return table
    for point in wire.HOOK_POINTS:
        attr = next(a for k, a, _d in wire.Hooks.FIELDS if k == point)
        entries: list[wire.Hook] = getattr(hooks, attr) or []
        converted = []
        for i, hook in enumerate(entries):
            path = f"hooks.{point}[{i}]"
            if not hook.path or not os.path.isabs(hook.path):
                raise ConfigError("a hook path must be absolute", f"{path}.path")
            if hook.timeout is not None and hook.timeout <= 0:
                raise ConfigError("a hook timeout must be positive", f"{path}.timeout")
            converted.append(
                Hook(
                    path=hook.path,
                    args=hook.args or [hook.path],
                    env=hook.env or [],
                    timeout=hook.timeout,
                )
            )
        if converted:
            table[point] = converted
    return table


def process_config(process: wire.Process, path: str) -> ProcessConfig:
    """Convert a runtime-spec ``process`` (config.json's or ``exec --process``'s)."""
    from hostjob.spec import runtime as wire

    if not process.args:
        raise ConfigError("args must name the program to run", f"{path}.args")
    for i, entry in enumerate(process.env or []):
        if "=" not in entry:
            raise ConfigError(f"{entry!r} is not KEY=VALUE", f"{path}.env[{i}]")
    # The sandbox variable makes a cwd absolute once substituted.
    if (
        process.cwd
        and not os.path.isabs(process.cwd)
        and "CONTAINER_SANDBOX_MOUNT_POINT" not in process.cwd
    ):
        raise ConfigError("cwd must be an absolute path", f"{path}.cwd")
    user = process.user or wire.User()
    box = process.console_size
    return ProcessConfig(
        args=list(process.args),
        env=list(process.env or []),
        cwd=process.cwd,
        terminal=bool(process.terminal),
        console_height=box.height if box else None,
        console_width=box.width if box else None,
        uid=user.uid,
        gid=user.gid,
        additional_gids=list(user.additional_gids or []),
        umask=user.umask,
        username=user.username,
        rlimits=_rlimits(process.rlimits or [], path),
        no_new_privileges=bool(process.no_new_privileges),
        capabilities=_capabilities(process.capabilities, path),
        oom_score_adj=process.oom_score_adj,
    )


def _rlimits(rlimits: list[wire.Rlimit], path: str) -> list[Rlimit]:
    out = []
    seen = set()
    for i, limit in enumerate(rlimits):
        where = f"{path}.rlimits[{i}]"
        if limit.type not in RLIMIT_NAMES:
            raise ConfigError(f"unknown rlimit type {limit.type!r}", f"{where}.type")
        if limit.type in seen:
            raise ConfigError(f"duplicate rlimit {limit.type}", f"{where}.type")
        seen.add(limit.type)
        soft = limit.soft if limit.soft is not None else 0
        hard = limit.hard if limit.hard is not None else 0
        if soft > hard:
            raise ConfigError("soft limit is above the hard limit", where)
        out.append(Rlimit(type=limit.type, soft=soft, hard=hard))
    return out


def _capabilities(capabilities: wire.Capabilities | None, path: str) -> dict[str, list[str]] | None:
    if capabilities is None:
        return None
    from hostjob.runtime import caps

    out: dict[str, list[str]] = {}
    for name in caps.SETS:
        values = getattr(capabilities, name)
        for i, cap in enumerate(values or []):
            if cap not in caps.NUMBERS:
                raise ConfigError(f"unknown capability {cap!r}", f"{path}.capabilities.{name}[{i}]")
        out[name] = list(values or [])
    return out


def rlimit_value(value: int) -> int:
    """runtime-spec's uint64 max is RLIM_INFINITY."""
    import resource

    return resource.RLIM_INFINITY if value >= RLIM_INFINITY_U64 else value


def rlimit_number(name: str) -> int:
    """RLIMIT_NOFILE -> its number on this platform (the resource module's)."""
    import resource

    number: int = getattr(resource, name)
    return number


# --- exec -----------------------------------------------------------------------------------


def load_process(path: str) -> ProcessConfig:
    """``exec --process FILE`` (``-`` for stdin): a runtime-spec ``process`` object."""
    from hostjob.spec import runtime as wire

    data = read_json("/dev/stdin" if path == "-" else path, "process JSON")
    return process_config(wire.Process.decode(data, "process"), "process")


def process_for_exec(
    base: ProcessConfig,
    args: list[str],
    *,
    env: tuple[str, ...] | list[str] = (),
    cwd: str | None = None,
    user: str | None = None,
    additional_gids: list[int] | None = None,
    tty: bool | None = None,
    no_new_privileges: bool | None = None,
    capabilities: tuple[str, ...] | list[str] = (),
) -> ProcessConfig:
    """``exec ID CMD...``: the container's own process, with runc's overrides applied."""
    if not args:
        raise ConfigError("exec needs a command to run")
    for entry in env:
        if "=" not in entry:
            raise ConfigError(f"--env {entry!r} is not KEY=VALUE")
    process: ProcessConfig = ProcessConfig.decode(base.to_json())
    process.args = list(args)
    process.env = [*process.env, *env]
    if cwd:
        process.cwd = cwd
    process.terminal = bool(tty)
    if no_new_privileges is not None:
        process.no_new_privileges = no_new_privileges
    if user:
        uid_text, _, gid_text = user.partition(":")
        if uid_text.isdigit() and (not gid_text or gid_text.isdigit()):
            process.uid = int(uid_text)
            process.gid = int(gid_text) if gid_text else 0
            process.username = None
        else:
            process.uid, process.gid, process.username = None, None, user
        process.additional_gids = []
    if additional_gids is not None:
        process.additional_gids = list(additional_gids)
    if capabilities and process.capabilities is not None:
        from hostjob.runtime import caps

        for cap in capabilities:
            if cap not in caps.NUMBERS:
                raise ConfigError(f"unknown capability {cap!r}")
        for name in ("bounding", "effective", "inheritable", "permitted", "ambient"):
            process.capabilities[name] = [*process.capabilities.get(name, []), *capabilities]
    return process


# --- update ------------------------------------------------------------------------------


def load_resources(path: str) -> wire.Resources:
    """``update --resources FILE`` (``-`` for stdin): a runtime-spec LinuxResources."""
    from hostjob.spec import runtime as wire

    data = read_json("/dev/stdin" if path == "-" else path, "resources JSON")
    resources: wire.Resources = wire.Resources.decode(data, "resources")
    return resources


def resources_from_values(
    *,
    memory: int | None = None,
    memory_reservation: int | None = None,
    memory_swap: int | None = None,
    kernel_memory: int | None = None,
    kernel_memory_tcp: int | None = None,
    cpu_shares: int | None = None,
    cpu_quota: int | None = None,
    cpu_period: int | None = None,
    cpu_rt_runtime: int | None = None,
    cpu_rt_period: int | None = None,
    cpuset_cpus: str | None = None,
    cpuset_mems: str | None = None,
    cpu_idle: int | None = None,
    blkio_weight: int | None = None,
    pids_limit: int | None = None,
) -> wire.Resources:
    """runc's single-value ``update`` flags (and ``hostjob run``'s) as LinuxResources."""
    from hostjob.spec import runtime as wire

    out = wire.Resources()
    mem = wire.Memory(
        limit=memory,
        reservation=memory_reservation,
        swap=memory_swap,
        kernel=kernel_memory,
        kernel_tcp=kernel_memory_tcp,
    )
    if mem.to_json():
        out.memory = mem
    cpu = wire.CPU(
        shares=cpu_shares,
        quota=cpu_quota,
        period=cpu_period,
        realtime_runtime=cpu_rt_runtime,
        realtime_period=cpu_rt_period,
        cpus=cpuset_cpus,
        mems=cpuset_mems,
        idle=cpu_idle,
    )
    if cpu.to_json():
        out.cpu = cpu
    if blkio_weight is not None:
        out.block_io = wire.BlockIO(weight=blkio_weight)
    if pids_limit is not None:
        out.pids = wire.Pids(limit=pids_limit)
    return out
