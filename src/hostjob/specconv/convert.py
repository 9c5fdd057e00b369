"""The one conversion step: runtime-spec wire config -> hostjob's job configuration.

Like runc's ``specconv``: everything hostjob does with a config.json is decided
here, once, at ``create``: which fields are honoured, which are ignored (named in one
warning) and which are refused; the sandbox mount point and mount mode; the volumes;
the user, rlimits and capabilities; the hooks; ``windows.resources`` mapped onto Linux
limits. The result
(``hostjob.specconv.jobconfig.JobConfig``) is persisted in the container's state and is all later
commands look at.

Pure: it reads no file and probes nothing. The caller decodes the document
(``hostjob.runtime.bundle`` reads a bundle) and passes what the conversion needs to
know about the host as values (``HostFacts``); its only side effect is the log
lines that say what is ignored.
"""

from __future__ import annotations

from hostjob import log
from hostjob.boot import paths
from hostjob.errors import ConfigError, NotAJobContainer
from hostjob.specconv import execution, isolation, pods, trust
from hostjob.specconv.annotations import (
    ANNOTATION_INHERIT_USER,
    ANNOTATION_MOUNT_MODE,
    ANNOTATION_MOUNT_POINT,
    HCS_ROOTFS_LOCATION,
    inherit_user,
)
from hostjob.specconv.jobconfig import Hook, JobConfig, ProcessConfig, Rlimit, merge_resources
from hostjob.specconv.pods import default_mount_mode, is_cri, is_job_container, pod_namespaces
from hostjob.specconv.refused import refuse_linux_fields, refuse_process_fields
from hostjob.specconv.volumes import volumes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec import runtime as wire
    from hostjob.spec.resources import Resources
    from hostjob.spec.windows import WindowsResources

# hostjob.spec's wire models (runtime, resources, windows) and hostjob.linux.syscalls (capability
# names) are imported by the functions that convert: commands that only read a container's
# record never need them.

MOUNT_MODES = ("host", "bind")
DEFAULT_BIND_MOUNT_POINT = "/hpc"

# Operator defaults per runtime name: a client that cannot send annotations (docker's
# ``runtimeArgs``, a containerd ``BinaryName`` wrapper) gives them to hostjob as global
# flags. Each stands for an annotation, which still wins where a config has it. (The
# operator's switch for a pod's operator-only annotations, ``trust.ALLOW_FLAG``, comes
# the same way, under its own name.)
DEFAULT_FLAGS = {
    ANNOTATION_MOUNT_MODE: "--default-mount-mode",
    ANNOTATION_MOUNT_POINT: "--default-rootfs-mount-point",
    ANNOTATION_INHERIT_USER: "--default-inherit-user",
    execution.ANNOTATION_LOADER: "--default-loader",
    pods.ANNOTATION_POD_NAMESPACES: "--default-pod-namespaces",
}


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


class HostFacts:
    """What the conversion needs to know about the host, probed by the caller
    (``hostjob.runtime.bundle.probe_host``): ``windows.resources`` and a pod's namespaces."""

    __slots__ = ("cpus", "layer_device", "namespace_ids", "namespaces_on_host")

    def __init__(self, cpus: int = 1, layer_device: tuple[int, int] | None = None) -> None:
        self.cpus = cpus  # online CPUs: windows.resources.cpu.count/maximum are shares of them
        # (major, minor) of the block device holding the writable layer (storage limits)
        self.layer_device = layer_device
        # linux.namespaces types whose path is the host's own namespace
        self.namespaces_on_host: set[str] = set()
        # path -> (st_dev, st_ino) of each namespace path that exists
        self.namespace_ids: dict[str, tuple[int, int]] = {}


# --- the conversion -------------------------------------------------------------------------


def rootfs_of(spec: wire.Spec, bundle: str) -> str:
    """The container's rootfs: ``root.path``, relative to the bundle."""
    if spec.root is None or not spec.root.path:
        raise ConfigError("root.path is required", "root.path")
    return paths.normpath(paths.join(bundle, spec.root.path))


def to_job_config(
    spec: wire.Spec,
    bundle: str,
    container_id: str,
    host: HostFacts | None = None,
    defaults: dict[str, str] | None = None,
) -> JobConfig:
    """The job container that ``spec`` (a decoded config.json of the bundle at
    ``bundle``, an absolute path) describes, for the container ``container_id``.
    ``defaults``: the operator's (``DEFAULT_FLAGS``), by the annotation each stands
    for, taken where the config's annotations do not say; and under ``trust.ALLOW_FLAG``
    the operator-only choices a pod's container may make."""
    from hostjob.spec import runtime as wire
    from hostjob.spec.resources import check_unified

    defaults = defaults or {}
    annotations = dict(spec.annotations or {})
    # pod decisions read the operator's default too; the job keeps the config's own
    for_pod = pods.with_pod_default(annotations, defaults.get(pods.ANNOTATION_POD_NAMESPACES))
    if not is_job_container(for_pod):
        # The library's answer: the hostjob command's create hands it over instead.
        raise NotAJobContainer(
            "annotations: this container is not a job container: hostjob hands it to a"
            " real OCI runtime through `hostjob create` (mixed pods)"
        )
    _refuse_unsupported(spec)
    refuse_linux_fields(spec.linux or wire.Linux(), spec.mounts or [])
    _warn_ignored(spec)
    rootfs = rootfs_of(spec, bundle)
    assert spec.root is not None
    if spec.process is None:
        raise ConfigError("process is required", "process")
    cri = is_cri(annotations)
    if cri:  # the pod's author chose these annotations: never what is the operator's
        trust.refuse_operator_only(spec, annotations, defaults.get(trust.ALLOW_FLAG))
    mode_path = f"annotations.{ANNOTATION_MOUNT_MODE}"
    mount_mode = annotations.get(ANNOTATION_MOUNT_MODE)
    if not mount_mode and defaults.get(ANNOTATION_MOUNT_MODE):
        mount_mode = defaults[ANNOTATION_MOUNT_MODE]
        mode_path = DEFAULT_FLAGS[ANNOTATION_MOUNT_MODE]
    mount_mode = mount_mode or default_mount_mode(annotations)
    if mount_mode not in MOUNT_MODES:
        raise ConfigError(f"must be one of {', '.join(MOUNT_MODES)}, not {mount_mode!r}", mode_path)
    mount_point = _mount_point(
        spec, annotations, container_id, rootfs, mount_mode, defaults.get(ANNOTATION_MOUNT_POINT)
    )
    linux = spec.linux or wire.Linux()
    resources = linux.resources
    windows = spec.windows
    if windows is not None and windows.resources is not None:
        host = host or HostFacts()
        resources = merge_resources(
            resources, from_windows(windows.resources, host.cpus, host.layer_device)
        )
    if resources is not None and resources.unified:
        check_unified(resources.unified)
    if linux.seccomp is not None:
        from hostjob.seccomp import bpf

        bpf.check(linux.seccomp)
    host = host or HostFacts()
    joined = None
    if cri:  # any other client's namespaces are ignored
        pairs = [(e.type or "", e.path) for e in linux.namespaces or []]
        joined = pod_namespaces(for_pod, pairs, host.namespaces_on_host, host.namespace_ids)
    inherits = inherit_user(annotations, defaults.get(ANNOTATION_INHERIT_USER))
    found_volumes = volumes(spec.mounts or [], bundle)
    process = process_config(spec.process, "process")
    return JobConfig(
        oci_version=spec.oci_version or wire.OCI_VERSION,
        bundle=bundle,
        rootfs=rootfs,
        readonly=bool(spec.root.readonly),
        mount_mode=mount_mode,
        mount_point=mount_point,
        volumes=found_volumes,
        process=process,
        hooks=_hooks(spec.hooks),
        cgroups_path=linux.cgroups_path or "",
        resources=resources,
        annotations=annotations,
        inherit_user=inherits,
        pod_namespaces=joined or None,
        seccomp=linux.seccomp,
        auto_user=isolation.auto_user(annotations, inherits) or None,
        secrets=isolation.secrets(annotations, found_volumes),
        loader=execution.loader(annotations, defaults, DEFAULT_FLAGS),
        no_new_privileges=trust.confined(cri, mount_mode, process) or None,
    )


def _refuse_unsupported(spec: wire.Spec) -> None:
    if spec.linux is not None and spec.linux.sysctl:
        raise ConfigError(
            "job containers share the host's kernel namespaces, so sysctls would change"
            " the host; remove them (docker sends some for any network but the host's:"
            " run it with --network host)",
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
    ("linux.masked_paths", "linux.maskedPaths"),
    ("linux.readonly_paths", "linux.readonlyPaths"),
    ("linux.devices", "linux.devices"),
    ("linux.mount_label", "linux.mountLabel"),
    ("linux.time_offsets", "linux.timeOffsets"),
    ("linux.net_devices", "linux.netDevices"),
    ("process.apparmor_profile", "process.apparmorProfile"),
    ("process.selinux_label", "process.selinuxLabel"),
)


def _warn_ignored(spec: wire.Spec) -> None:
    """One line naming every ignored field present: every client sends several of them
    (docker and podman five), and an operator reads the line on every container."""
    present = []
    for getter, path in _IGNORED:
        value: Any = spec
        for attr in getter.split("."):
            value = getattr(value, attr, None) if value is not None else None
        if value:
            present.append(path)
    if present:
        verb = "is" if len(present) == 1 else "are"
        log.warning(
            f"{', '.join(present)} {verb} ignored: job containers run in the host's namespaces"
        )


def _mount_point(
    spec: wire.Spec,
    annotations: dict[str, str],
    container_id: str,
    rootfs: str,
    mode: str,
    default: str | None = None,
) -> str:
    """The sandbox mount point: ``rootfsMountPoint`` or its annotations, else the
    operator's default, else the rootfs itself (host mode) or ``/hpc`` (bind mode)."""
    asked = None
    path = ""
    job = spec.windows.job_container if spec.windows is not None else None
    if job is not None and job.rootfs_mount_point:
        asked, path = job.rootfs_mount_point, "windows.jobContainer.rootfsMountPoint"
    elif annotations.get(ANNOTATION_MOUNT_POINT):
        asked, path = annotations[ANNOTATION_MOUNT_POINT], f"annotations.{ANNOTATION_MOUNT_POINT}"
    elif annotations.get(HCS_ROOTFS_LOCATION):
        location = annotations[HCS_ROOTFS_LOCATION]
        asked = paths.join(location, container_id)
        path = f"annotations.{HCS_ROOTFS_LOCATION}"
    elif default:
        asked, path = default, DEFAULT_FLAGS[ANNOTATION_MOUNT_POINT]
    if asked is not None:
        asked = validate_mount_point(asked, path)
    if mode == "bind":
        return asked or DEFAULT_BIND_MOUNT_POINT
    return asked or rootfs


_SYSTEM_TREES = ("/proc", "/sys", "/dev")


def validate_mount_point(path: str, json_path: str) -> str:
    if not paths.isabs(path):
        raise ConfigError(f"the mount point must be an absolute path, not {path!r}", json_path)
    path = paths.normpath(path)
    if path == "/" or any(path == t or path.startswith(t + "/") for t in _SYSTEM_TREES):
        raise ConfigError(f"refusing to use {path} as the mount point", json_path)
    return path


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
            if not hook.path or not paths.isabs(hook.path):
                raise ConfigError("a hook path must be absolute", f"{path}.path")
            if hook.timeout is not None and hook.timeout <= 0:
                raise ConfigError("a hook timeout must be positive", f"{path}.timeout")
            for j, entry in enumerate(hook.env or []):
                # A hook is spawned with the entries as a mapping: a nameless one
                # cannot be passed (posix_spawn's ValueError, a crash of create).
                if "=" not in entry or entry.startswith("="):
                    raise ConfigError(f"{entry!r} is not KEY=VALUE", f"{path}.env[{j}]")
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
    refuse_process_fields(process, path)
    for i, entry in enumerate(process.env or []):
        if "=" not in entry:
            raise ConfigError(f"{entry!r} is not KEY=VALUE", f"{path}.env[{i}]")
    # The sandbox variable makes a cwd absolute once substituted.
    if (
        process.cwd
        and not paths.isabs(process.cwd)
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
        scheduler=execution.scheduler(process.scheduler, path),
        io_priority=execution.io_priority(process.io_priority, path),
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
    from hostjob.linux.capabilities import CAP_NUMBERS, CAP_SETS

    out: dict[str, list[str]] = {}
    for name in CAP_SETS:
        values = getattr(capabilities, name)
        for i, cap in enumerate(values or []):
            if cap not in CAP_NUMBERS:
                raise ConfigError(f"unknown capability {cap!r}", f"{path}.capabilities.{name}[{i}]")
        out[name] = list(values or [])
    return out


# --- windows.resources ----------------------------------------------------------------------
# ``windows.resources`` -> ``linux.resources``, as hcsshim maps them onto a job object.
#
# * ``cpu.count``, ``cpu.maximum`` and ``cpu.shares`` are mutually exclusive (hcsshim's
#   ``ConvertCPULimits``); 0 means unset.
# * ``count`` is clamped to the host's CPUs and becomes a CFS quota of ``count /
#   hostCPUs`` of the machine over the default 100 ms period, i.e. ``count`` CPUs.
# * ``maximum`` is in hundredths of a percent of the whole machine (1-10000): a quota
#   of ``maximum / 10000 * hostCPUs`` CPUs.
# * ``shares`` (0-10000, hcsshim's processor weight) is a relative weight on the same
#   scale as cgroup v2's ``cpu.weight``; it is expressed as the ``cpu.shares`` that
#   runc's conversion turns back into exactly that weight (and that v1 uses as is).
# * ``memory.limit`` is the memory limit.
# * ``storage.iops`` / ``storage.bps`` throttle reads and writes on the block device
#   that holds the container's writable layer (``io_device``).
#

DEFAULT_CFS_PERIOD = 100000
MIN_QUOTA = 1000  # the kernel refuses a CFS quota below 1 ms


def cpu_weight_to_shares(weight: int) -> int:
    """cpu.weight [1, 10000] -> the smallest cpu.shares that the cgroup v2 conversion
    (``hostjob.cgroups.resources.cpu_shares_to_weight``, runc's) maps back onto it."""
    weight = min(max(weight, 1), 10000)
    return 2 + -((-(weight - 1) * 262142) // 9999)


def from_windows(
    res: WindowsResources, host_cpus: int, io_device: tuple[int, int] | None
) -> Resources:
    """The Linux resources that give a job container what ``windows.resources`` asks."""
    from hostjob.spec.resources import CPU, BlockIO, Memory, Resources, ThrottleDevice

    out = Resources()
    host_cpus = max(host_cpus, 1)
    cpu = res.cpu
    if cpu is not None:
        count, maximum, shares = cpu.count or 0, cpu.maximum or 0, cpu.shares or 0
        if sum(1 for v in (count, maximum, shares) if v) > 1:
            raise ConfigError(
                f"cpu.count ({count}), cpu.maximum ({maximum}) and cpu.shares ({shares})"
                " are mutually exclusive",
                "windows.resources.cpu",
            )
        if count:
            if count > host_cpus:
                log.warning(
                    f"windows.resources.cpu.count {count} is more than this host's"
                    f" {host_cpus} CPUs: using {host_cpus}"
                )
                count = host_cpus
            out.cpu = CPU(quota=count * DEFAULT_CFS_PERIOD, period=DEFAULT_CFS_PERIOD)
        elif maximum:
            if maximum > 10000:
                raise ConfigError(
                    f"{maximum} is out of range [1, 10000] (hundredths of a percent)",
                    "windows.resources.cpu.maximum",
                )
            quota = maximum * host_cpus * DEFAULT_CFS_PERIOD // 10000
            out.cpu = CPU(quota=max(quota, MIN_QUOTA), period=DEFAULT_CFS_PERIOD)
        elif shares:
            if shares > 10000:
                raise ConfigError(
                    f"{shares} is out of range [0, 10000]", "windows.resources.cpu.shares"
                )
            out.cpu = CPU(shares=cpu_weight_to_shares(shares))
    if res.memory is not None and res.memory.limit:
        out.memory = Memory(limit=res.memory.limit)
    storage = res.storage
    if storage is not None and (storage.iops or storage.bps):
        if io_device is None:
            log.warning(
                "windows.resources.storage is ignored: the writable layer is on no block device"
            )
        else:
            major, minor = io_device
            block_io = BlockIO()
            if storage.iops:
                block_io.throttle_read_iops_device = [
                    ThrottleDevice(major=major, minor=minor, rate=storage.iops)
                ]
                block_io.throttle_write_iops_device = [
                    ThrottleDevice(major=major, minor=minor, rate=storage.iops)
                ]
            if storage.bps:
                block_io.throttle_read_bps_device = [
                    ThrottleDevice(major=major, minor=minor, rate=storage.bps)
                ]
                block_io.throttle_write_bps_device = [
                    ThrottleDevice(major=major, minor=minor, rate=storage.bps)
                ]
            out.block_io = block_io
    if storage is not None and storage.sandbox_size:
        log.warning("windows.resources.storage.sandboxSize is ignored on Linux")
    return out
