"""The one conversion step (hostjob.specconv.convert), rule by rule: fields honoured, ignored
(in one warning line) or refused; the sandbox mount point; volumes; hcsshim's
``windows.resources`` mapping laid over ``linux.resources``; a process's start as far as the
config decides it, and ``merge_resources``. Pure: no file, no host, no root."""

from __future__ import annotations

from typing import Any

import pytest

from hostjob import log
from hostjob.errors import ConfigError, NotAJobContainer
from hostjob.spec import OCI_VERSION
from hostjob.spec import runtime as wire
from hostjob.spec.resources import Resources
from hostjob.specconv.convert import (
    DEFAULT_BIND_MOUNT_POINT,
    HostFacts,
    process_config,
    to_job_config,
    validate_mount_point,
)
from hostjob.specconv.jobconfig import JobConfig, ProcessConfig, merge_resources
from hostjob.specconv.pods import confined_namespaces, is_job_container
from tests.helpers import base_config

BUNDLE = "/srv/bundles/b1"
CID = "job1"


def convert(config: dict[str, Any], host: HostFacts | None = None) -> JobConfig:
    return to_job_config(wire.Spec.decode(config), BUNDLE, CID, host)


def with_(section: str, **values: Any) -> dict[str, Any]:
    """base_config() with ``values`` merged into its top-level ``section``."""
    config = base_config()
    config.setdefault(section, {}).update(values)
    return config


def proc(**values: Any) -> ProcessConfig:
    return process_config(wire.Process.decode({"args": ["x"], **values}), "process")


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    monkeypatch.setattr(log, "warning", lambda msg: lines.append(("warning", msg)))
    monkeypatch.setattr(log, "debug", lambda msg: lines.append(("debug", msg)))
    return lines


def refused(config: dict[str, Any], path: str, words: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        convert(config)
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value)
    return caught.value


# --- honoured -----------------------------------------------------------------------------


def test_the_base_config_converts_without_a_word(logged: list[tuple[str, str]]) -> None:
    job = convert(base_config("sleep", "1"))
    assert logged == []
    assert job.oci_version == "1.2.0"
    assert job.bundle == BUNDLE
    assert job.rootfs == f"{BUNDLE}/rootfs"
    assert job.readonly is False
    assert (job.mount_mode, job.mount_point) == ("host", f"{BUNDLE}/rootfs")
    assert job.volumes == [] and job.hooks == {} and job.annotations == {}
    assert job.cgroups_path == "" and job.resources is None and job.resources_json is None
    assert job.inherit_user is False and job.image is None
    assert job.process.args == ["sleep", "1"]


def test_oci_version_defaults_to_the_one_spoken() -> None:
    config = base_config()
    del config["ociVersion"]
    assert convert(config).oci_version == OCI_VERSION
    config["ociVersion"] = "1.0.2"
    assert convert(config).oci_version == "1.0.2"


@pytest.mark.parametrize(
    ("path", "rootfs"),
    [("rootfs", f"{BUNDLE}/rootfs"), ("./a/../fs", f"{BUNDLE}/fs"), ("/abs/fs", "/abs/fs")],
)
def test_root_path_is_relative_to_the_bundle(path: str, rootfs: str) -> None:
    job = convert(with_("root", path=path, readonly=True))
    assert job.rootfs == rootfs and job.readonly is True


def test_root_and_process_are_required() -> None:
    config = base_config()
    del config["root"]
    refused(config, "root.path", "required")
    refused(with_("root", path=""), "root.path", "required")
    config = base_config()
    del config["process"]
    refused(config, "process", "required")


def test_every_honoured_process_field_is_kept() -> None:
    config = with_(
        "process",
        args=["/bin/app", "--flag"],
        env=["A=1", "B=x=y"],
        cwd="/work",
        user={"uid": 1000, "gid": 1001, "umask": 0o27, "additionalGids": [5, 6]},
        rlimits=[{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 4096}],
        noNewPrivileges=True,
        capabilities={"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"]},
        terminal=True,
        consoleSize={"height": 24, "width": 80},
        oomScoreAdj=-100,
    )
    p = convert(config).process
    assert p.args == ["/bin/app", "--flag"] and p.env == ["A=1", "B=x=y"] and p.cwd == "/work"
    assert (p.uid, p.gid, p.umask, p.additional_gids, p.username) == (
        1000,
        1001,
        0o27,
        [5, 6],
        None,
    )
    assert [(r.type, r.soft, r.hard) for r in p.rlimits] == [("RLIMIT_NOFILE", 1024, 4096)]
    assert p.no_new_privileges is True and p.terminal is True
    assert (p.console_height, p.console_width) == (24, 80)
    assert p.oom_score_adj == -100
    assert p.capabilities == {
        "bounding": ["CAP_KILL"],
        "effective": ["CAP_KILL"],
        "inheritable": [],
        "permitted": [],
        "ambient": [],
    }


def test_username_is_kept_for_resolution_at_start() -> None:
    p = convert(with_("process", user={"username": "nobody"})).process
    assert (p.username, p.uid, p.gid) == ("nobody", None, None)


def test_annotations_cgroups_path_and_resources_are_kept() -> None:
    config = base_config(
        annotations={"a": "1", "io.kubernetes.cri.container-type": "container"},
        linux={"cgroupsPath": "/pods/p1/c1", "resources": {"pids": {"limit": 50}}},
    )
    job = convert(config)
    assert job.annotations == {"a": "1", "io.kubernetes.cri.container-type": "container"}
    assert job.cgroups_path == "/pods/p1/c1"
    assert job.resources is not None and job.resources.pids is not None
    assert job.resources.pids.limit == 50
    assert job.resources_json == {"pids": {"limit": 50}}  # what the record stores


def test_hooks_are_checked_and_kept_in_order() -> None:
    config = base_config(
        hooks={
            "prestart": [{"path": "/bin/a"}, {"path": "/bin/b", "args": ["b", "1"], "timeout": 3}],
            "poststop": [{"path": "/bin/c", "env": ["X=1"]}],
            "createRuntime": [],
        }
    )
    hooks = convert(config).hooks
    assert sorted(hooks) == ["poststop", "prestart"]
    a, b = hooks["prestart"]
    assert (a.path, a.args, a.env, a.timeout) == ("/bin/a", ["/bin/a"], [], None)
    assert (b.args, b.timeout) == (["b", "1"], 3)
    assert hooks["poststop"][0].env == ["X=1"]


@pytest.mark.parametrize(
    ("hook", "path"),
    [
        ({"path": "rel/hook"}, "hooks.prestart[0].path"),
        ({"path": ""}, "hooks.prestart[0].path"),
        ({"path": "/bin/x", "timeout": 0}, "hooks.prestart[0].timeout"),
        ({"path": "/bin/x", "timeout": -1}, "hooks.prestart[0].timeout"),
        # found by the CLI fuzzer: posix_spawn's ValueError crashed create
        ({"path": "/bin/x", "env": ["A=1", ""]}, "hooks.prestart[0].env[1]"),
        ({"path": "/bin/x", "env": ["=x"]}, "hooks.prestart[0].env[0]"),
        ({"path": "/bin/x", "env": ["NAME"]}, "hooks.prestart[0].env[0]"),
    ],
)
def test_bad_hooks_are_refused(hook: dict[str, Any], path: str) -> None:
    refused(base_config(hooks={"prestart": [hook]}), path)


# --- ignored: one warning line naming them all ----------------------------------------------

IGNORED = [
    ("hostname", {"hostname": "h"}),
    ("domainname", {"domainname": "d"}),
    ("linux.namespaces", {"linux": {"namespaces": [{"type": "pid"}]}}),
    ("linux.uidMappings", {"linux": {"uidMappings": [{"containerID": 0, "hostID": 1, "size": 1}]}}),
    ("linux.gidMappings", {"linux": {"gidMappings": [{"containerID": 0, "hostID": 1, "size": 1}]}}),
    ("linux.maskedPaths", {"linux": {"maskedPaths": ["/proc/kcore"]}}),
    ("linux.readonlyPaths", {"linux": {"readonlyPaths": ["/proc/sys"]}}),
    ("linux.devices", {"linux": {"devices": [{"type": "c", "path": "/dev/x"}]}}),
    ("linux.mountLabel", {"linux": {"mountLabel": "system_u:object_r:x"}}),
    # runtime-spec 1.1 and 1.2: the time namespace's offsets, devices moved into the network one
    ("linux.timeOffsets", {"linux": {"timeOffsets": {"monotonic": {"secs": 10}}}}),
    ("linux.netDevices", {"linux": {"netDevices": {"eth1": {"name": "net1"}}}}),
    ("process.apparmorProfile", {"process": {"apparmorProfile": "p"}}),
    ("process.selinuxLabel", {"process": {"selinuxLabel": "l"}}),
]


def test_seccomp_is_not_ignored(logged: list[tuple[str, str]]) -> None:
    config = base_config()
    config["linux"] = {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}
    job = convert(config)
    assert job.seccomp == {"defaultAction": "SCMP_ACT_ALLOW"}
    assert not any("seccomp" in message for _level, message in logged)


@pytest.mark.parametrize(("field", "extra"), IGNORED, ids=[f for f, _e in IGNORED])
def test_an_ignored_field_costs_one_warning(
    field: str, extra: dict[str, Any], logged: list[tuple[str, str]]
) -> None:
    config = base_config()
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if key in ("linux", "process") else value
    job = convert(config)
    assert logged == [
        ("warning", f"{field} is ignored: job containers run in the host's namespaces")
    ]
    assert job.process.args == ["true"]


def test_all_ignored_fields_together_are_one_warning_line(logged: list[tuple[str, str]]) -> None:
    config = base_config()
    for _field, extra in IGNORED:
        for key, value in extra.items():
            config[key] = {**config.get(key, {}), **value} if key in ("linux", "process") else value
    convert(config)
    named = ", ".join(f for f, _e in IGNORED)
    assert logged == [
        ("warning", f"{named} are ignored: job containers run in the host's namespaces")
    ]


def test_what_docker_sends_is_one_warning_line(logged: list[tuple[str, str]]) -> None:
    """docker 20.10's config for `--network host`: five ignored fields, one line."""
    config = base_config(hostname="vm")
    config["linux"] = {
        "namespaces": [{"type": "mount"}, {"type": "network", "path": "/run/docker/netns/default"}],
        "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"},
        "maskedPaths": ["/proc/kcore"],
        "readonlyPaths": ["/proc/sys"],
    }
    convert(config)
    assert len(logged) == 1
    level, message = logged[0]
    assert level == "warning"
    for field in ("hostname", "linux.namespaces", "linux.maskedPaths", "linux.readonlyPaths"):
        assert field in message


def test_empty_ignored_fields_say_nothing(logged: list[tuple[str, str]]) -> None:
    convert(base_config(hostname="", linux={"namespaces": [], "maskedPaths": []}))
    assert logged == []


# --- refused ---------------------------------------------------------------------------------


def test_sysctl_is_refused() -> None:
    refused(base_config(linux={"sysctl": {"net.ipv4.ip_forward": "1"}}), "linux.sysctl", "host")
    refused(
        base_config(linux={"sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"}}),
        "linux.sysctl",
        "--network host",
    )


def test_vm_is_refused() -> None:
    refused(base_config(vm={"hypervisor": {"path": "/bin/qemu"}}), "vm", "virtual-machine")


def test_hyperv_with_a_job_container_is_refused() -> None:
    windows = {"hyperv": {}, "jobContainer": {}}
    refused(base_config(windows=windows), "windows.hyperv", "Hyper-V")
    convert(base_config(windows={"hyperv": {}}))  # without jobContainer: nothing to refuse


# runtime-spec 1.1-1.3 fields a job container does not apply: refused with their JSON path
NOT_APPLIED = [
    ("process.scheduler", {"process": {"scheduler": {"policy": "SCHED_BATCH"}}}, "scheduling"),
    ("process.ioPriority", {"process": {"ioPriority": {"class": "IOPRIO_CLASS_IDLE"}}}, "I/O"),
    ("process.execCPUAffinity", {"process": {"execCPUAffinity": {"final": "0"}}}, "affinity"),
    ("linux.intelRdt", {"linux": {"intelRdt": {"closID": "guaranteed_group"}}}, "RDT"),
    ("linux.personality", {"linux": {"personality": {"domain": "LINUX32"}}}, "LINUX32"),
    ("linux.personality", {"linux": {"personality": {"domain": "LINUX", "flags": ["x"]}}}, "flags"),
    (
        "linux.memoryPolicy",
        {"linux": {"memoryPolicy": {"mode": "MPOL_BIND", "nodes": "0"}}},
        "NUMA",
    ),
]


@pytest.mark.parametrize(("path", "extra", "words"), NOT_APPLIED)
def test_newer_fields_not_applied_are_refused(path: str, extra: dict[str, Any], words: str) -> None:
    config = base_config()
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value}
    refused(config, path, words)


def test_newer_process_fields_are_refused_for_exec_too() -> None:
    with pytest.raises(ConfigError) as caught:
        proc(scheduler={"policy": "SCHED_OTHER", "nice": 5})
    assert caught.value.path == "process.scheduler"


def test_the_linux_domain_without_flags_is_given(logged: list[tuple[str, str]]) -> None:
    config = base_config(linux={"personality": {"domain": "LINUX"}})
    assert convert(config).process.args == ["true"]
    assert logged == []


def test_an_idmapped_mount_is_refused() -> None:
    mapping = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    mount = {"destination": "/data", "type": "bind", "source": "/srv", "options": ["rbind"]}
    refused(
        base_config(mounts=[{**mount, "uidMappings": mapping}]), "mounts[0].uidMappings", "idmap"
    )
    refused(
        base_config(mounts=[{**mount, "gidMappings": mapping}]), "mounts[0].gidMappings", "idmap"
    )


# --- annotations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "inherit"),
    [
        ({}, False),
        ({"io.hostjob.inherit-user": "true"}, True),
        ({"io.hostjob.inherit-user": "1"}, True),
        ({"io.hostjob.inherit-user": "YES"}, True),
        ({"io.hostjob.inherit-user": "false"}, False),
        ({"microsoft.com/hostprocess-inherit-user": "true"}, True),
        ({"microsoft.com/hostprocess-inherit-user": "no"}, False),
    ],
)
def test_inherit_user(annotations: dict[str, str], inherit: bool) -> None:
    assert convert(base_config(annotations=annotations)).inherit_user is inherit


def test_mount_mode_annotation() -> None:
    assert convert(base_config()).mount_mode == "host"
    bind = convert(base_config(annotations={"io.hostjob.mount-mode": "bind"}))
    assert bind.mount_mode == "bind"
    refused(
        base_config(annotations={"io.hostjob.mount-mode": "overlay"}),
        "annotations.io.hostjob.mount-mode",
        "host, bind",
    )


CRI = "io.kubernetes.cri.container-type"


@pytest.mark.parametrize(
    ("annotations", "mode"),
    [
        ({CRI: "container"}, "bind"),  # containerd's CRI plugin: the kubelet's volumes
        ({"io.kubernetes.cri-o.ContainerType": "container"}, "bind"),  # CRI-O's
        ({CRI: "sandbox"}, "host"),  # the pod's sandbox stays on the host
        ({"io.kubernetes.cri-o.ContainerType": "sandbox"}, "host"),
        ({CRI: "container", "io.hostjob.mount-mode": "host"}, "host"),  # the annotation chooses
        ({CRI: "sandbox", "io.hostjob.mount-mode": "bind"}, "bind"),
        ({"io.kubernetes.container.name": "x"}, "host"),  # not the runtime's annotation
    ],
)
def test_cri_containers_default_to_bind_mode(annotations: dict[str, str], mode: str) -> None:
    job = convert(base_config(annotations=annotations))
    assert job.mount_mode == mode
    assert job.mount_point == ("/hpc" if mode == "bind" else job.rootfs)


# --- operator defaults per runtime name (global flags) ----------------------------------------

MODE, POINT, INHERIT = (
    "io.hostjob.mount-mode",
    "io.hostjob.rootfs-mount-point",
    "io.hostjob.inherit-user",
)


def with_defaults(config: dict[str, Any], **defaults: str) -> JobConfig:
    table = {"mode": MODE, "point": POINT, "inherit": INHERIT}
    chosen = {table[k]: v for k, v in defaults.items()}
    return to_job_config(wire.Spec.decode(config), BUNDLE, CID, None, chosen)


def test_the_operators_defaults_apply_where_the_annotations_say_nothing() -> None:
    job = with_defaults(base_config(), mode="bind", point="/opt/job", inherit="true")
    assert (job.mount_mode, job.mount_point, job.inherit_user) == ("bind", "/opt/job", True)
    assert job.annotations == {}  # defaults are not annotations the state shows
    assert with_defaults(base_config(), mode="bind").mount_point == DEFAULT_BIND_MOUNT_POINT
    # A CRI container's bind default and a sandbox's host default give way to the operator's.
    assert (
        with_defaults(base_config(annotations={CRI: "sandbox"}), mode="bind").mount_mode == "bind"
    )
    assert (
        with_defaults(base_config(annotations={CRI: "container"}), mode="host").mount_mode == "host"
    )


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({MODE: "host"}, ("host", "/opt/job", True)),
        ({POINT: "/srv/mine"}, ("bind", "/srv/mine", True)),
        ({"microsoft.com/hostprocess-rootfs-location": "/c"}, ("bind", f"/c/{CID}", True)),
        ({INHERIT: "false"}, ("bind", "/opt/job", False)),
        ({"microsoft.com/hostprocess-inherit-user": "false"}, ("bind", "/opt/job", False)),
    ],
)
def test_an_annotation_wins_over_the_operators_default(
    annotations: dict[str, str], expected: tuple[str, str, bool]
) -> None:
    job = with_defaults(
        base_config(annotations=annotations), mode="bind", point="/opt/job", inherit="true"
    )
    assert (job.mount_mode, job.mount_point, job.inherit_user) == expected


def test_a_mount_point_in_the_config_wins_over_the_operators_default() -> None:
    config = base_config(windows={"jobContainer": {"rootfsMountPoint": "/from/config"}})
    assert with_defaults(config, point="/opt/job").mount_point == "/from/config"


def test_a_bad_default_is_refused_naming_its_flag() -> None:
    with pytest.raises(ConfigError) as caught:
        with_defaults(base_config(), mode="overlay")
    assert caught.value.path == "--default-mount-mode"
    with pytest.raises(ConfigError) as caught:
        with_defaults(base_config(), point="/proc/x")
    assert caught.value.path == "--default-rootfs-mount-point"


# --- mixed pods: which containers are job containers ------------------------------------------

NAME = "io.kubernetes.cri.container-name"
JOB = "io.hostjob.job-container"


@pytest.mark.parametrize(
    ("annotations", "job"),
    [
        ({}, True),
        ({JOB: "false"}, False),
        ({JOB: "False"}, False),
        ({JOB: "true"}, True),
        # the pod annotation naming a container reaches every container and the sandbox
        ({CRI: "container", NAME: "main", f"{JOB}.main": "false"}, False),
        ({CRI: "container", NAME: "init", f"{JOB}.main": "false"}, True),
        ({CRI: "sandbox", f"{JOB}.main": "false"}, False),  # the pod's namespaces: runc's
        ({CRI: "sandbox", f"{JOB}.main": "true"}, True),
        ({CRI: "sandbox", JOB: "false"}, False),  # a pod of confined containers only
        # the named one is the more specific
        ({CRI: "container", NAME: "main", f"{JOB}.main": "true", JOB: "false"}, True),
        ({CRI: "container", NAME: "side", f"{JOB}.main": "true", JOB: "false"}, False),
        ({f"{JOB}.main": "false"}, True),  # no name, not a sandbox: nothing names it
    ],
)
def test_which_containers_are_job_containers(annotations: dict[str, str], job: bool) -> None:
    assert is_job_container(annotations) is job


def test_a_container_that_is_not_a_job_container_is_never_converted() -> None:
    """The library's answer, which the hostjob command's create takes as its cue to hand
    the container over (hostjob.runtime.delegate)."""
    sandbox = {CRI: "sandbox", f"{JOB}.app": "false"}
    for refused_ones in ({JOB: "false"}, sandbox):
        with pytest.raises(NotAJobContainer, match=r"^annotations: this container is not a job"):
            convert(base_config(annotations=refused_ones))


@pytest.mark.parametrize("key", [JOB, f"{JOB}.main"])
def test_a_job_container_value_is_true_or_false(key: str) -> None:
    annotations = {CRI: "container", NAME: "main", key: "maybe"}
    refused(base_config(annotations=annotations), f"annotations.{key}", "true or false")


HOST = "/proc/1/ns/"
POD = "/proc/4242/ns/"


def ns(kind: str, path: str | None = None) -> dict[str, str]:
    return {"type": kind, **({"path": path} if path else {})}


def test_a_job_sandbox_namespaces_become_the_confined_containers_own() -> None:
    """containerd's entries for a container of a host-network pod whose sandbox runs on the
    host: IPC and PID become its own, network and UTS stay the host's (as under runc)."""
    entries = [
        ns("pid", POD + "pid"), ns("ipc", POD + "ipc"), ns("uts", POD + "uts"), ns("mount"),
        ns("network", POD + "net"),
    ]  # fmt: skip
    on_host = {"pid", "ipc", "uts", "network"}
    assert confined_namespaces(entries, on_host) == [
        ns("pid"), ns("ipc"), ns("uts", POD + "uts"), ns("mount"), ns("network", POD + "net")
    ]  # fmt: skip
    # not the host's network (a namespace of the pod's): UTS becomes its own too
    assert confined_namespaces(entries, on_host - {"network"}) == [
        ns("pid"), ns("ipc"), ns("uts"), ns("mount"), ns("network", POD + "net")
    ]  # fmt: skip
    # no network entry at all is the runtime's network: the host's
    no_net = [ns("ipc", HOST + "ipc"), ns("uts", HOST + "uts")]
    assert confined_namespaces(no_net, {"ipc", "uts"}) == [ns("ipc"), ns("uts", HOST + "uts")]


def test_a_real_sandboxs_namespaces_stay() -> None:
    entries = [ns("pid"), ns("ipc", POD + "ipc"), ns("network", POD + "net"), ns("mount")]
    assert confined_namespaces(entries, set()) is None
    assert confined_namespaces([ns("ipc"), ns("pid")], {"ipc", "pid"}) is None  # new already


# --- the sandbox mount point ------------------------------------------------------------------


def test_host_mode_without_a_mount_point_uses_the_rootfs() -> None:
    job = convert(base_config())
    assert job.mount_point == job.rootfs and not job.bind_rootfs


def test_host_mode_with_a_mount_point_binds_the_rootfs_there() -> None:
    job = convert(base_config(windows={"jobContainer": {"rootfsMountPoint": "/opt/job/./x/"}}))
    assert job.mount_point == "/opt/job/x" and job.bind_rootfs


@pytest.mark.parametrize(
    ("windows", "annotations", "expected"),
    [
        ({"rootfsMountPoint": "/a"}, {"io.hostjob.rootfs-mount-point": "/b"}, "/a"),
        ({}, {"io.hostjob.rootfs-mount-point": "/b"}, "/b"),
        (
            {},
            {
                "io.hostjob.rootfs-mount-point": "/b",
                "microsoft.com/hostprocess-rootfs-location": "/c",
            },
            "/b",
        ),
        ({}, {"microsoft.com/hostprocess-rootfs-location": "/c"}, f"/c/{CID}"),
    ],
)
def test_mount_point_sources_in_order(
    windows: dict[str, str], annotations: dict[str, str], expected: str
) -> None:
    config = base_config(windows={"jobContainer": windows}, annotations=annotations)
    assert convert(config).mount_point == expected


def test_bind_mode_mount_point() -> None:
    bind = {"io.hostjob.mount-mode": "bind"}
    assert convert(base_config(annotations=bind)).mount_point == DEFAULT_BIND_MOUNT_POINT == "/hpc"
    asked = {**bind, "io.hostjob.rootfs-mount-point": "/mnt/job"}
    job = convert(base_config(annotations=asked))
    assert job.mount_point == "/mnt/job" and not job.bind_rootfs


@pytest.mark.parametrize(
    "asked", ["relative/dir", "/", "/proc", "/proc/1", "/sys/fs/x", "/dev", "/dev/shm/x", "/x/../"]
)
def test_refused_mount_points(asked: str) -> None:
    path = "windows.jobContainer.rootfsMountPoint"
    refused(base_config(windows={"jobContainer": {"rootfsMountPoint": asked}}), path)
    with pytest.raises(ConfigError):
        validate_mount_point(asked, "x")


def test_refused_mount_point_from_an_annotation_names_it() -> None:
    key = "io.hostjob.rootfs-mount-point"
    refused(base_config(annotations={key: "/sys"}), f"annotations.{key}", "/sys")
    hcs = "microsoft.com/hostprocess-rootfs-location"
    refused(base_config(annotations={hcs: "rel"}), f"annotations.{hcs}", "absolute")


@pytest.mark.parametrize("asked", ["/procfs", "/system", "/devices/x", "/opt//job"])
def test_near_misses_are_fine(asked: str) -> None:
    assert validate_mount_point(asked, "x") == asked.replace("//", "/")


# --- volumes ----------------------------------------------------------------------------------


def test_bind_mounts_become_volumes(logged: list[tuple[str, str]]) -> None:
    mounts = [
        {"type": "bind", "source": "data", "destination": "data/in", "options": ["ro"]},
        {"type": "none", "source": "/var/log", "destination": "/logs", "options": ["rbind"]},
        {"source": "/etc/hosts", "destination": "/etc/hosts", "options": ["bind", "rw"]},
    ]
    volumes = convert(base_config(mounts=mounts)).volumes
    assert [(v.source, v.destination, v.readonly) for v in volumes] == [
        (f"{BUNDLE}/data", "/data/in", True),
        ("/var/log", "/logs", False),
        ("/etc/hosts", "/etc/hosts", False),
    ]
    assert logged == []


@pytest.mark.parametrize(
    ("options", "propagation"),
    [
        ([], "rprivate"),  # runc's default
        (["rbind", "rprivate", "rw"], "rprivate"),  # Kubernetes' None
        (["rbind", "rslave", "rw"], "rslave"),  # HostToContainer
        (["rbind", "rshared", "rw"], "rshared"),  # Bidirectional
        (["bind", "shared"], "rshared"),
        (["bind", "slave"], "rslave"),
        (["rbind", "runbindable"], "rprivate"),
        (["rshared", "rslave"], "rslave"),  # the last one given wins, as in runc
    ],
)
def test_volumes_keep_their_propagation(options: list[str], propagation: str) -> None:
    mounts = [{"type": "bind", "source": "/s", "destination": "/d", "options": options}]
    assert convert(base_config(mounts=mounts)).volumes[0].propagation == propagation


CONTAINERD_RUN = ["nosuid", "strictatime", "mode=755", "size=65536k"]


def test_container_internal_mounts_are_dropped_quietly(logged: list[tuple[str, str]]) -> None:
    internal = ["proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2"]
    mounts = [{"type": t, "source": t, "destination": f"/{t}"} for t in internal]
    # the tmpfs mounts of every client's default spec: a job has the host's /dev and /run
    system = [("/dev", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
              ("/dev/shm", ["nosuid", "noexec", "nodev", "mode=1777", "size=67108864"]),
              ("/sys/fs/x", []), ("/run", CONTAINERD_RUN)]  # fmt: skip
    mounts += [
        {"type": "tmpfs", "source": "tmpfs", "destination": d, "options": o} for d, o in system
    ]
    assert convert(base_config(mounts=mounts)).volumes == []
    assert [level for level, _msg in logged] == ["debug"] * len(mounts)


def test_a_tmpfs_is_a_volume_of_its_own(logged: list[tuple[str, str]]) -> None:
    mounts = [
        # docker run --tmpfs /scratch:size=1m,mode=1770
        {"type": "tmpfs", "source": "tmpfs", "destination": "/scratch",
         "options": ["noexec", "nosuid", "nodev", "rprivate", "size=1m", "mode=1770"]},
        # podman run --tmpfs /cache:ro
        {"type": "tmpfs", "source": "tmpfs", "destination": "cache/",
         "options": ["ro", "rprivate", "nosuid", "nodev", "tmpcopyup"]},
        # a /run tmpfs someone asked for (not containerd's default)
        {"type": "tmpfs", "source": "tmpfs", "destination": "/run", "options": ["size=2m"]},
    ]  # fmt: skip
    found = convert(base_config(mounts=mounts)).volumes
    assert [(v.kind, v.destination, v.readonly, v.options) for v in found] == [
        ("tmpfs", "/scratch", False, ["noexec", "nosuid", "nodev", "size=1m", "mode=1770"]),
        ("tmpfs", "/cache", True, ["nosuid", "nodev", "tmpcopyup"]),
        ("tmpfs", "/run", False, ["size=2m"]),
    ]
    assert all(v.is_tmpfs and v.source == "tmpfs" for v in found)
    assert logged == []


@pytest.mark.parametrize("option", ["nosuchflag", "bogus=1", "loop"])
def test_an_unknown_tmpfs_option_is_refused(option: str) -> None:
    mounts = [
        {"type": "tmpfs", "source": "tmpfs", "destination": "/t", "options": ["nodev", option]}
    ]
    refused(base_config(mounts=mounts), "mounts[0].options[1]", "unknown tmpfs option")


def test_other_mount_types_are_ignored_with_a_warning(logged: list[tuple[str, str]]) -> None:
    mounts = [{"type": "nfs", "source": "srv:/x", "destination": "/x"}]
    assert convert(base_config(mounts=mounts)).volumes == []
    assert logged == [
        (
            "warning",
            "mounts[0] (nfs on /x) is ignored: only bind and tmpfs mounts apply to job containers",
        )
    ]


def test_bad_bind_mounts_are_refused() -> None:
    refused(base_config(mounts=[{"type": "bind", "source": "/x"}]), "mounts[0].destination")
    refused(base_config(mounts=[{"type": "bind", "destination": "/x"}]), "mounts[0].source")


# --- windows.resources, laid over linux.resources -------------------------------------------


def test_windows_resources_are_mapped_with_the_hosts_cpus() -> None:
    config = base_config(windows={"resources": {"cpu": {"count": 2}}})
    cpu = convert(config, HostFacts(cpus=8)).resources.cpu  # type: ignore[union-attr]
    assert cpu is not None and (cpu.quota, cpu.period) == (200000, 100000)
    clamped = convert(base_config(windows={"resources": {"cpu": {"count": 4}}}), HostFacts(2))
    assert clamped.resources is not None and clamped.resources.cpu is not None
    assert clamped.resources.cpu.quota == 200000


def test_windows_resources_override_linux_field_by_field() -> None:
    config = base_config(
        linux={"resources": {"memory": {"limit": 1 << 20, "swap": 1 << 22}, "pids": {"limit": 9}}},
        windows={"resources": {"memory": {"limit": 1 << 30}, "cpu": {"shares": 5000}}},
    )
    res = convert(config).resources
    assert res is not None and res.memory is not None and res.cpu is not None
    assert (res.memory.limit, res.memory.swap) == (1 << 30, 1 << 22)
    assert res.pids is not None and res.pids.limit == 9
    assert res.cpu.shares is not None and res.cpu.quota is None


def test_windows_storage_throttles_the_layer_device(logged: list[tuple[str, str]]) -> None:
    config = base_config(windows={"resources": {"storage": {"iops": 100, "bps": 4096}}})
    res = convert(config, HostFacts(cpus=2, layer_device=(8, 16))).resources
    assert res is not None and res.block_io is not None
    reads = res.block_io.throttle_read_iops_device or []
    assert [(d.major, d.minor, d.rate) for d in reads] == [(8, 16, 100)]
    assert [d.rate for d in res.block_io.throttle_write_bps_device or []] == [4096]
    assert logged == []
    # Without a block device under the writable layer: a warning, no throttle.
    res = convert(config, HostFacts(cpus=2)).resources
    assert res is not None and res.block_io is None
    assert [level for level, _m in logged] == ["warning"]


def test_windows_cpu_limits_are_mutually_exclusive() -> None:
    windows = {"resources": {"cpu": {"count": 1, "maximum": 5000}}}
    refused(base_config(windows=windows), "windows.resources.cpu", "mutually exclusive")


def test_unified_files_are_checked_at_conversion() -> None:
    linux = {"resources": {"unified": {"memory.high": "1G"}}}
    assert convert(base_config(linux=linux)).resources is not None
    for key in ("cgroup.procs", "memory", "../x.y", "memory.a/b"):
        linux = {"resources": {"unified": {key: "1"}}}
        refused(base_config(linux=linux), "linux.resources.unified")


# --- how a process starts, as far as the config decides it -----------------------------------


def test_args_must_name_a_program() -> None:
    with pytest.raises(ConfigError, match=r"process\.args: args must name"):
        proc(args=[])
    refused(with_("process", args=[]), "process.args")


@pytest.mark.parametrize("entry", ["NOEQUALS", ""])
def test_env_entries_are_key_value(entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        proc(env=["A=1", entry])
    assert caught.value.path == "process.env[1]"


@pytest.mark.parametrize(
    ("cwd", "ok"),
    [
        ("/abs", True),
        ("", True),
        ("$CONTAINER_SANDBOX_MOUNT_POINT/app", True),
        ("%CONTAINER_SANDBOX_MOUNT_POINT%/app", True),
        ("relative", False),
        ("./x", False),
    ],
)
def test_cwd_must_be_absolute_unless_it_names_the_mount_point(cwd: str, ok: bool) -> None:
    if ok:
        assert proc(cwd=cwd).cwd == cwd
    else:
        with pytest.raises(ConfigError, match="absolute"):
            proc(cwd=cwd)


@pytest.mark.parametrize(
    ("rlimits", "path"),
    [
        ([{"type": "RLIMIT_BOGUS", "soft": 1, "hard": 1}], "process.rlimits[0].type"),
        (
            [{"type": "RLIMIT_NOFILE", "soft": 1, "hard": 2}] * 2,
            "process.rlimits[1].type",
        ),
        ([{"type": "RLIMIT_CORE", "soft": 5, "hard": 4}], "process.rlimits[0]"),
    ],
)
def test_bad_rlimits_are_refused(rlimits: list[dict[str, Any]], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        proc(rlimits=rlimits)
    assert caught.value.path == path


def test_missing_rlimit_values_are_zero() -> None:
    limits = proc(rlimits=[{"type": "RLIMIT_CORE"}]).rlimits
    assert [(r.soft, r.hard) for r in limits] == [(0, 0)]


def test_unknown_capabilities_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        proc(capabilities={"ambient": ["CAP_KILL", "CAP_TELEPORT"]})
    assert caught.value.path == "process.capabilities.ambient[1]"
    assert proc().capabilities is None  # none asked: the sets are left as they are


# --- merge_resources ---------------------------------------------------------------------


def resources(data: dict[str, Any]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


def test_merge_lays_fields_over_groups_and_replaces_the_rest() -> None:
    base = resources(
        {
            "memory": {"limit": 100, "swap": 200},
            "cpu": {"shares": 512},
            "unified": {"memory.high": "1"},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 1}],
        }
    )
    before = base.to_json()
    over = resources(
        {"memory": {"limit": 150}, "pids": {"limit": 7}, "unified": {"io.weight": "5"}}
    )
    merged = merge_resources(base, over)
    assert merged.to_json() == {
        "memory": {"limit": 150, "swap": 200},
        "cpu": {"shares": 512},
        "pids": {"limit": 7},
        "unified": {"io.weight": "5"},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 1}],
    }
    assert base.to_json() == before  # the inputs are not changed
    merged.memory.limit = 1  # type: ignore[union-attr]
    assert base.memory is not None and base.memory.limit == 100


def test_merge_onto_nothing_is_the_overrides() -> None:
    over = resources({"cpu": {"quota": 5000, "period": 10000}})
    assert merge_resources(None, over).to_json() == over.to_json()
    assert merge_resources(over, resources({})).to_json() == over.to_json()
