"""The OCI runtime-spec wire format (config.json 1.0-1.2, state, features).

Field names are runtime-spec's own (``containerID``, ``blockIO``, ``kernelTCP``,
``disableOOMKiller``...); attributes are their snake_case twins. Nothing here
interprets the config: ``hostjob.config`` is the one place that turns a decoded
``Spec`` into the job container's internal configuration.
"""

from __future__ import annotations

from hostjob.errors import ConfigError
from hostjob.spec import OCI_VERSION as OCI_VERSION
from hostjob.spec._decode import (
    Model,
    any_json,
    boolean,
    int64,
    integer,
    json_object,
    list_of,
    model,
    string,
    string_list,
    string_map,
    uint16,
    uint32,
    uint64,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# --- process -------------------------------------------------------------------------


class Box(Model):
    __slots__ = ("height", "width")
    height: int | None
    width: int | None
    FIELDS = (("height", "height", uint32), ("width", "width", uint32))


class User(Model):
    __slots__ = ("additional_gids", "gid", "uid", "umask", "username")
    uid: int | None
    gid: int | None
    umask: int | None
    additional_gids: list[int] | None
    username: str | None
    FIELDS = (
        ("uid", "uid", uint32),
        ("gid", "gid", uint32),
        ("umask", "umask", uint32),
        ("additionalGids", "additional_gids", list_of(uint32)),
        ("username", "username", string),
    )


class Capabilities(Model):
    __slots__ = ("ambient", "bounding", "effective", "inheritable", "permitted")
    bounding: list[str] | None
    effective: list[str] | None
    inheritable: list[str] | None
    permitted: list[str] | None
    ambient: list[str] | None
    FIELDS = (
        ("bounding", "bounding", string_list),
        ("effective", "effective", string_list),
        ("inheritable", "inheritable", string_list),
        ("permitted", "permitted", string_list),
        ("ambient", "ambient", string_list),
    )


class Rlimit(Model):
    __slots__ = ("hard", "soft", "type")
    type: str | None
    hard: int | None
    soft: int | None
    FIELDS = (("type", "type", string), ("hard", "hard", uint64), ("soft", "soft", uint64))


class Scheduler(Model):
    __slots__ = ("deadline", "flags", "nice", "period", "policy", "priority", "runtime")
    policy: str | None
    nice: int | None
    priority: int | None
    flags: list[str] | None
    runtime: int | None
    deadline: int | None
    period: int | None
    FIELDS = (
        ("policy", "policy", string),
        ("nice", "nice", integer),
        ("priority", "priority", integer),
        ("flags", "flags", string_list),
        ("runtime", "runtime", uint64),
        ("deadline", "deadline", uint64),
        ("period", "period", uint64),
    )


class IOPriority(Model):
    __slots__ = ("klass", "priority")
    klass: str | None
    priority: int | None
    FIELDS = (("class", "klass", string), ("priority", "priority", integer))


class Process(Model):
    __slots__ = (
        "apparmor_profile",
        "args",
        "capabilities",
        "command_line",
        "console_size",
        "cwd",
        "env",
        "io_priority",
        "no_new_privileges",
        "oom_score_adj",
        "rlimits",
        "scheduler",
        "selinux_label",
        "terminal",
        "user",
    )
    terminal: bool | None
    console_size: Box | None
    user: User | None
    args: list[str] | None
    command_line: str | None
    env: list[str] | None
    cwd: str | None
    capabilities: Capabilities | None
    rlimits: list[Rlimit] | None
    no_new_privileges: bool | None
    apparmor_profile: str | None
    oom_score_adj: int | None
    scheduler: Scheduler | None
    selinux_label: str | None
    io_priority: IOPriority | None
    FIELDS = (
        ("terminal", "terminal", boolean),
        ("consoleSize", "console_size", model(Box)),
        ("user", "user", model(User)),
        ("args", "args", string_list),
        ("commandLine", "command_line", string),
        ("env", "env", string_list),
        ("cwd", "cwd", string),
        ("capabilities", "capabilities", model(Capabilities)),
        ("rlimits", "rlimits", list_of(model(Rlimit))),
        ("noNewPrivileges", "no_new_privileges", boolean),
        ("apparmorProfile", "apparmor_profile", string),
        ("oomScoreAdj", "oom_score_adj", integer),
        ("scheduler", "scheduler", model(Scheduler)),
        ("selinuxLabel", "selinux_label", string),
        ("ioPriority", "io_priority", model(IOPriority)),
    )


# --- root, mounts, hooks --------------------------------------------------------------


class Root(Model):
    __slots__ = ("path", "readonly")
    path: str | None
    readonly: bool | None
    FIELDS = (("path", "path", string), ("readonly", "readonly", boolean))


class IDMapping(Model):
    __slots__ = ("container_id", "host_id", "size")
    container_id: int | None
    host_id: int | None
    size: int | None
    FIELDS = (
        ("containerID", "container_id", uint32),
        ("hostID", "host_id", uint32),
        ("size", "size", uint32),
    )


class Mount(Model):
    __slots__ = ("destination", "gid_mappings", "options", "source", "type", "uid_mappings")
    destination: str | None
    type: str | None
    source: str | None
    options: list[str] | None
    uid_mappings: list[IDMapping] | None
    gid_mappings: list[IDMapping] | None
    FIELDS = (
        ("destination", "destination", string),
        ("type", "type", string),
        ("source", "source", string),
        ("options", "options", string_list),
        ("uidMappings", "uid_mappings", list_of(model(IDMapping))),
        ("gidMappings", "gid_mappings", list_of(model(IDMapping))),
    )


class Hook(Model):
    __slots__ = ("args", "env", "path", "timeout")
    path: str | None
    args: list[str] | None
    env: list[str] | None
    timeout: int | None
    FIELDS = (
        ("path", "path", string),
        ("args", "args", string_list),
        ("env", "env", string_list),
        ("timeout", "timeout", integer),
    )


HOOK_POINTS = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)


class Hooks(Model):
    __slots__ = (
        "create_container",
        "create_runtime",
        "poststart",
        "poststop",
        "prestart",
        "start_container",
    )
    prestart: list[Hook] | None
    create_runtime: list[Hook] | None
    create_container: list[Hook] | None
    start_container: list[Hook] | None
    poststart: list[Hook] | None
    poststop: list[Hook] | None
    FIELDS = (
        ("prestart", "prestart", list_of(model(Hook))),
        ("createRuntime", "create_runtime", list_of(model(Hook))),
        ("createContainer", "create_container", list_of(model(Hook))),
        ("startContainer", "start_container", list_of(model(Hook))),
        ("poststart", "poststart", list_of(model(Hook))),
        ("poststop", "poststop", list_of(model(Hook))),
    )


# --- linux.resources -------------------------------------------------------------------


class DeviceCgroup(Model):
    __slots__ = ("access", "allow", "major", "minor", "type")
    allow: bool | None
    type: str | None
    major: int | None
    minor: int | None
    access: str | None
    FIELDS = (
        ("allow", "allow", boolean),
        ("type", "type", string),
        ("major", "major", int64),
        ("minor", "minor", int64),
        ("access", "access", string),
    )


class Memory(Model):
    __slots__ = (
        "check_before_update",
        "disable_oom_killer",
        "kernel",
        "kernel_tcp",
        "limit",
        "reservation",
        "swap",
        "swappiness",
        "use_hierarchy",
    )
    limit: int | None
    reservation: int | None
    swap: int | None
    kernel: int | None
    kernel_tcp: int | None
    swappiness: int | None
    disable_oom_killer: bool | None
    use_hierarchy: bool | None
    check_before_update: bool | None
    FIELDS = (
        ("limit", "limit", int64),
        ("reservation", "reservation", int64),
        ("swap", "swap", int64),
        ("kernel", "kernel", int64),
        ("kernelTCP", "kernel_tcp", int64),
        ("swappiness", "swappiness", uint64),
        ("disableOOMKiller", "disable_oom_killer", boolean),
        ("useHierarchy", "use_hierarchy", boolean),
        ("checkBeforeUpdate", "check_before_update", boolean),
    )


class CPU(Model):
    __slots__ = (
        "burst",
        "cpus",
        "idle",
        "mems",
        "period",
        "quota",
        "realtime_period",
        "realtime_runtime",
        "shares",
    )
    shares: int | None
    quota: int | None
    burst: int | None
    period: int | None
    realtime_runtime: int | None
    realtime_period: int | None
    cpus: str | None
    mems: str | None
    idle: int | None
    FIELDS = (
        ("shares", "shares", uint64),
        ("quota", "quota", int64),
        ("burst", "burst", uint64),
        ("period", "period", uint64),
        ("realtimeRuntime", "realtime_runtime", int64),
        ("realtimePeriod", "realtime_period", uint64),
        ("cpus", "cpus", string),
        ("mems", "mems", string),
        ("idle", "idle", int64),
    )


class Pids(Model):
    __slots__ = ("limit",)
    limit: int | None
    FIELDS = (("limit", "limit", int64),)


class WeightDevice(Model):
    __slots__ = ("leaf_weight", "major", "minor", "weight")
    major: int | None
    minor: int | None
    weight: int | None
    leaf_weight: int | None
    FIELDS = (
        ("major", "major", int64),
        ("minor", "minor", int64),
        ("weight", "weight", uint16),
        ("leafWeight", "leaf_weight", uint16),
    )


class ThrottleDevice(Model):
    __slots__ = ("major", "minor", "rate")
    major: int | None
    minor: int | None
    rate: int | None
    FIELDS = (("major", "major", int64), ("minor", "minor", int64), ("rate", "rate", uint64))


class BlockIO(Model):
    __slots__ = (
        "leaf_weight",
        "throttle_read_bps_device",
        "throttle_read_iops_device",
        "throttle_write_bps_device",
        "throttle_write_iops_device",
        "weight",
        "weight_device",
    )
    weight: int | None
    leaf_weight: int | None
    weight_device: list[WeightDevice] | None
    throttle_read_bps_device: list[ThrottleDevice] | None
    throttle_write_bps_device: list[ThrottleDevice] | None
    throttle_read_iops_device: list[ThrottleDevice] | None
    throttle_write_iops_device: list[ThrottleDevice] | None
    FIELDS = (
        ("weight", "weight", uint16),
        ("leafWeight", "leaf_weight", uint16),
        ("weightDevice", "weight_device", list_of(model(WeightDevice))),
        ("throttleReadBpsDevice", "throttle_read_bps_device", list_of(model(ThrottleDevice))),
        ("throttleWriteBpsDevice", "throttle_write_bps_device", list_of(model(ThrottleDevice))),
        ("throttleReadIOPSDevice", "throttle_read_iops_device", list_of(model(ThrottleDevice))),
        (
            "throttleWriteIOPSDevice",
            "throttle_write_iops_device",
            list_of(model(ThrottleDevice)),
        ),
    )


class HugepageLimit(Model):
    __slots__ = ("limit", "page_size")
    page_size: str | None
    limit: int | None
    FIELDS = (("pageSize", "page_size", string), ("limit", "limit", uint64))


class InterfacePriority(Model):
    __slots__ = ("name", "priority")
    name: str | None
    priority: int | None
    FIELDS = (("name", "name", string), ("priority", "priority", uint32))


class Network(Model):
    __slots__ = ("class_id", "priorities")
    class_id: int | None
    priorities: list[InterfacePriority] | None
    FIELDS = (
        ("classID", "class_id", uint32),
        ("priorities", "priorities", list_of(model(InterfacePriority))),
    )


class Resources(Model):
    __slots__ = (
        "block_io",
        "cpu",
        "devices",
        "hugepage_limits",
        "memory",
        "network",
        "pids",
        "rdma",
        "unified",
    )
    devices: list[DeviceCgroup] | None
    memory: Memory | None
    cpu: CPU | None
    pids: Pids | None
    block_io: BlockIO | None
    hugepage_limits: list[HugepageLimit] | None
    network: Network | None
    rdma: dict[str, Any] | None
    unified: dict[str, str] | None
    FIELDS = (
        ("devices", "devices", list_of(model(DeviceCgroup))),
        ("memory", "memory", model(Memory)),
        ("cpu", "cpu", model(CPU)),
        ("pids", "pids", model(Pids)),
        ("blockIO", "block_io", model(BlockIO)),
        ("hugepageLimits", "hugepage_limits", list_of(model(HugepageLimit))),
        ("network", "network", model(Network)),
        ("rdma", "rdma", json_object),
        ("unified", "unified", string_map),
    )


_CONTROLLER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def check_unified(unified: dict[str, str]) -> None:
    """``linux.resources.unified`` names controller files only (``memory.high``): never
    ``cgroup.*``, the cgroup's own interface (``cgroup.procs`` would pull any process
    into the job, ``cgroup.subtree_control`` reshape it), and never a path."""
    for key in unified:
        controller, dot, parameter = key.partition(".")
        if (
            not dot
            or not parameter
            or not controller
            or not _CONTROLLER_CHARS.issuperset(controller)
            or "/" in parameter
            or ".." in parameter
            or "\0" in parameter
        ):
            raise ConfigError(
                f"{key!r} is not a cgroup file name (CONTROLLER.PARAMETER)",
                "linux.resources.unified",
            )
        if controller == "cgroup":
            raise ConfigError(
                f"{key!r} is a cgroup core file, not a controller setting: unified takes"
                " controller files only",
                "linux.resources.unified",
            )


# --- linux ---------------------------------------------------------------------------


class Namespace(Model):
    __slots__ = ("path", "type")
    type: str | None
    path: str | None
    FIELDS = (("type", "type", string), ("path", "path", string))


class Linux(Model):
    __slots__ = (
        "cgroups_path",
        "devices",
        "gid_mappings",
        "intel_rdt",
        "masked_paths",
        "mount_label",
        "namespaces",
        "personality",
        "readonly_paths",
        "resources",
        "rootfs_propagation",
        "seccomp",
        "sysctl",
        "time_offsets",
        "uid_mappings",
    )
    uid_mappings: list[IDMapping] | None
    gid_mappings: list[IDMapping] | None
    time_offsets: dict[str, Any] | None
    sysctl: dict[str, str] | None
    resources: Resources | None
    cgroups_path: str | None
    namespaces: list[Namespace] | None
    devices: list[Any] | None
    seccomp: dict[str, Any] | None
    rootfs_propagation: str | None
    masked_paths: list[str] | None
    readonly_paths: list[str] | None
    mount_label: str | None
    intel_rdt: dict[str, Any] | None
    personality: dict[str, Any] | None
    FIELDS = (
        ("uidMappings", "uid_mappings", list_of(model(IDMapping))),
        ("gidMappings", "gid_mappings", list_of(model(IDMapping))),
        ("timeOffsets", "time_offsets", json_object),
        ("sysctl", "sysctl", string_map),
        ("resources", "resources", model(Resources)),
        ("cgroupsPath", "cgroups_path", string),
        ("namespaces", "namespaces", list_of(model(Namespace))),
        ("devices", "devices", list_of(json_object)),
        ("seccomp", "seccomp", json_object),
        ("rootfsPropagation", "rootfs_propagation", string),
        ("maskedPaths", "masked_paths", string_list),
        ("readonlyPaths", "readonly_paths", string_list),
        ("mountLabel", "mount_label", string),
        ("intelRdt", "intel_rdt", json_object),
        ("personality", "personality", json_object),
    )


# --- windows -------------------------------------------------------------------------


class WindowsMemory(Model):
    __slots__ = ("limit",)
    limit: int | None
    FIELDS = (("limit", "limit", uint64),)


class WindowsCPU(Model):
    __slots__ = ("count", "maximum", "shares")
    count: int | None
    shares: int | None
    maximum: int | None
    FIELDS = (
        ("count", "count", uint64),
        ("shares", "shares", uint16),
        ("maximum", "maximum", uint16),
    )


class WindowsStorage(Model):
    __slots__ = ("bps", "iops", "sandbox_size")
    iops: int | None
    bps: int | None
    sandbox_size: int | None
    FIELDS = (
        ("iops", "iops", uint64),
        ("bps", "bps", uint64),
        ("sandboxSize", "sandbox_size", uint64),
    )


class WindowsResources(Model):
    __slots__ = ("cpu", "memory", "storage")
    memory: WindowsMemory | None
    cpu: WindowsCPU | None
    storage: WindowsStorage | None
    FIELDS = (
        ("memory", "memory", model(WindowsMemory)),
        ("cpu", "cpu", model(WindowsCPU)),
        ("storage", "storage", model(WindowsStorage)),
    )


class JobContainer(Model):
    __slots__ = ("rootfs_mount_point",)
    rootfs_mount_point: str | None
    FIELDS = (("rootfsMountPoint", "rootfs_mount_point", string),)


class Windows(Model):
    __slots__ = (
        "credential_spec",
        "devices",
        "hyperv",
        "ignore_flushes_during_boot",
        "job_container",
        "layer_folders",
        "network",
        "resources",
        "servicing",
    )
    layer_folders: list[str] | None
    devices: list[Any] | None
    resources: WindowsResources | None
    credential_spec: object
    servicing: bool | None
    ignore_flushes_during_boot: bool | None
    hyperv: dict[str, Any] | None
    network: dict[str, Any] | None
    job_container: JobContainer | None
    FIELDS = (
        ("layerFolders", "layer_folders", string_list),
        ("devices", "devices", list_of(json_object)),
        ("resources", "resources", model(WindowsResources)),
        ("credentialSpec", "credential_spec", any_json),
        ("servicing", "servicing", boolean),
        ("ignoreFlushesDuringBoot", "ignore_flushes_during_boot", boolean),
        ("hyperv", "hyperv", json_object),
        ("network", "network", json_object),
        ("jobContainer", "job_container", model(JobContainer)),
    )


# --- the whole config -------------------------------------------------------------------


class Spec(Model):
    """config.json."""

    __slots__ = (
        "annotations",
        "domainname",
        "hooks",
        "hostname",
        "linux",
        "mounts",
        "oci_version",
        "process",
        "root",
        "vm",
        "windows",
    )
    oci_version: str | None
    process: Process | None
    root: Root | None
    hostname: str | None
    domainname: str | None
    mounts: list[Mount] | None
    hooks: Hooks | None
    annotations: dict[str, str] | None
    linux: Linux | None
    windows: Windows | None
    vm: dict[str, Any] | None
    FIELDS = (
        ("ociVersion", "oci_version", string),
        ("process", "process", model(Process)),
        ("root", "root", model(Root)),
        ("hostname", "hostname", string),
        ("domainname", "domainname", string),
        ("mounts", "mounts", list_of(model(Mount))),
        ("hooks", "hooks", model(Hooks)),
        ("annotations", "annotations", string_map),
        ("linux", "linux", model(Linux)),
        ("windows", "windows", model(Windows)),
        ("vm", "vm", json_object),
    )
