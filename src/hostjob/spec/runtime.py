"""The OCI runtime-spec wire format (config.json 1.0-1.2, state, features).

Field names are runtime-spec's own (``containerID``, ``blockIO``, ``kernelTCP``,
``disableOOMKiller``...); attributes are their snake_case twins. Nothing here
interprets the config: ``hostjob.specconv.convert`` is the one place that turns a decoded
``Spec`` into the job container's internal configuration.
"""

from __future__ import annotations

from hostjob.spec import OCI_VERSION as OCI_VERSION
from hostjob.spec._decode import (
    Model,
    boolean,
    integer,
    json_object,
    list_of,
    model,
    string,
    string_list,
    string_map,
    uint32,
    uint64,
)
from hostjob.spec.resources import Resources
from hostjob.spec.windows import Windows

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
        "exec_cpu_affinity",
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
    exec_cpu_affinity: dict[str, Any] | None
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
        ("execCPUAffinity", "exec_cpu_affinity", json_object),
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
        "memory_policy",
        "mount_label",
        "namespaces",
        "net_devices",
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
    net_devices: dict[str, Any] | None
    memory_policy: dict[str, Any] | None
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
        ("netDevices", "net_devices", json_object),
        ("memoryPolicy", "memory_policy", json_object),
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
