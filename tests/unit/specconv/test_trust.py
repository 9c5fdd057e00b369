"""What a Kubernetes pod's author may choose and what only the operator may: the
operator-only annotations refused for a container created through the CRI unless the
handler's ``--allow-pod-annotations`` lets them through, the same annotations honoured
for every other client, and ``no_new_privs`` for a non-root pod in bind mode. Pure:
configs as containerd generates them (``tests/cri/fixtures``), no root."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hostjob.errors import ConfigError, InvalidArgument
from hostjob.runtime.launch.plan import plan
from hostjob.spec import runtime as wire
from hostjob.specconv import trust
from hostjob.specconv.convert import HostFacts, to_job_config
from hostjob.specconv.jobconfig import JobConfig

FIXTURE = Path(__file__).resolve().parents[2] / "cri" / "fixtures" / "cri-container-config.json"
SANDBOX = FIXTURE.with_name("cri-sandbox-config.json")
HOST_NAMESPACES = {"network", "ipc", "uts", "pid"}

# (annotation, value, the choice that lets a pod ask for it)
OPERATOR_ONLY = [
    ("io.hostjob.inherit-user", "true", "inherit-user"),
    ("microsoft.com/hostprocess-inherit-user", "TRUE", "inherit-user"),
    ("io.hostjob.secrets", "/etc/shadow:/leak", "secrets"),
    ("io.hostjob.rootfs-mount-point", "/var/spool/cron/crontabs", "mount-point"),
    ("microsoft.com/hostprocess-rootfs-location", "/etc", "mount-point"),
]


def cri_config(path: Path = FIXTURE, **annotations: str) -> dict[str, Any]:
    """containerd's config of a pod's container, placeholders filled in."""
    document: dict[str, Any] = json.loads(path.read_text().replace("<", "").replace(">", ""))
    document["annotations"] = {
        k: v for k, v in document["annotations"].items() if not k.startswith("io.hostjob.")
    }
    document["annotations"].update(annotations)
    document["mounts"] = []  # their sources are the recorded run's
    capabilities = document["process"].get("capabilities") or {}
    for name, value in capabilities.items():
        if value == "(same as bounding)":  # how the recording abbreviates
            capabilities[name] = capabilities["bounding"]
    return document


def convert(document: dict[str, Any], defaults: dict[str, str] | None = None) -> JobConfig:
    host = HostFacts()
    host.namespaces_on_host = set(HOST_NAMESPACES)
    return to_job_config(wire.Spec.decode(document), "/srv/b", "c1", host, defaults)


@pytest.mark.parametrize(("key", "value", "choice"), OPERATOR_ONLY)
def test_a_pods_operator_only_annotation_is_refused_naming_it_and_the_switch(
    key: str, value: str, choice: str
) -> None:
    for path in (FIXTURE, SANDBOX):
        with pytest.raises(ConfigError) as caught:
            convert(cri_config(path, **{key: value}))
        line = str(caught.value)
        assert caught.value.path == f"annotations.{key}"
        assert f"--allow-pod-annotations={choice}" in line and "\n" not in line
    # The operator's switch lets exactly that choice through (and "all" every one).
    job = convert(cri_config(**{key: value}), {trust.ALLOW_FLAG: choice})
    assert job.annotations[key] == value
    convert(cri_config(**{key: value}), {trust.ALLOW_FLAG: "all"})
    other = next(c for c in trust.OPERATOR_ONLY if c != choice)
    with pytest.raises(ConfigError):
        convert(cri_config(**{key: value}), {trust.ALLOW_FLAG: other})


def test_the_same_annotations_are_the_operators_everywhere_else() -> None:
    """A bundle of ctr, podman, docker or ``hostjob run``: the operator wrote it."""
    for key, value, _choice in OPERATOR_ONLY:
        document = cri_config(**{key: value})
        for cri_key in [k for k in document["annotations"] if k.startswith("io.kubernetes.")]:
            del document["annotations"][cri_key]
        assert convert(document).annotations[key] == value
    inherit = cri_config(**{"io.hostjob.inherit-user": "true"})
    inherit["annotations"] = {"io.hostjob.inherit-user": "true"}
    assert convert(inherit).inherit_user


def test_what_a_pod_may_choose_is_never_refused() -> None:
    allowed = {
        "io.hostjob.mount-mode": "host",
        "io.hostjob.user": "auto",
        "io.hostjob.inherit-user": "false",  # less than the operator's default
        "microsoft.com/hostprocess-container": "true",
        "io.hostjob.job-container.other": "true",
    }
    job = convert(cri_config(**allowed), {"io.hostjob.inherit-user": "true"})
    assert job.auto_user and not job.inherit_user and job.mount_mode == "host"
    # The operator's own defaults are not the pod's asking.
    defaults = {"io.hostjob.inherit-user": "true", "io.hostjob.rootfs-mount-point": "/srv/mp"}
    job = convert(cri_config(**{"io.hostjob.mount-mode": "host"}), defaults)
    assert job.inherit_user and job.mount_point == "/srv/mp"


def test_a_mount_point_in_the_config_is_the_operators_too() -> None:
    document = cri_config()
    document["windows"] = {"jobContainer": {"rootfsMountPoint": "/etc/cron.d/x"}}
    with pytest.raises(ConfigError) as caught:
        convert(document)
    assert caught.value.path == trust.WINDOWS_MOUNT_POINT
    assert convert(document, {trust.ALLOW_FLAG: "mount-point"}).mount_point == "/etc/cron.d/x"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", set()),
        ("secrets", {"secrets"}),
        (" secrets , mount-point ", {"secrets", "mount-point"}),
        ("all", {"inherit-user", "secrets", "mount-point"}),
    ],
)
def test_the_switch_names_choices(text: str, expected: set[str]) -> None:
    assert trust.parse_allowed(text) == expected


def test_an_unknown_choice_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown choice 'root'.*inherit-user"):
        trust.parse_allowed("secrets,root")


def test_a_non_root_pod_in_bind_mode_gains_no_privileges_in_any_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    document = cri_config()
    document["process"]["user"] = {"uid": 1000, "gid": 1000}
    job = convert(document)
    assert job.mount_mode == "bind" and job.no_new_privileges
    assert not job.process.no_new_privileges  # asked of the job: every exec too
    process = copy.deepcopy(job.process)
    assert plan(job, process).no_new_privileges
    assert JobConfig.decode(job.to_json()).no_new_privileges
    # Not for root, nor in host mode, nor for any client but Kubernetes' runtime.
    document["process"]["user"] = {"uid": 0, "gid": 0}
    assert not convert(document).no_new_privileges
    document["process"]["user"] = {"uid": 1000, "gid": 1000}
    document["annotations"]["io.hostjob.mount-mode"] = "host"
    assert not convert(document).no_new_privileges
    plain = cri_config()
    plain["annotations"] = {"io.hostjob.mount-mode": "bind"}
    plain["process"]["user"] = {"uid": 1000, "gid": 1000}
    assert not convert(plain).no_new_privileges


def test_the_fixtures_are_containerds() -> None:
    """The refusals above are of the configs containerd really generates."""
    document = cri_config()
    assert document["annotations"]["io.kubernetes.cri.container-type"] == "container"
    assert cri_config(SANDBOX)["annotations"]["io.kubernetes.cri.container-type"] == "sandbox"
