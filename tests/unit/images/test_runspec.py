"""``hostjob run IMAGE``'s config.json: the image is data, the flags are policy."""

from __future__ import annotations

import pytest

from hostjob.config import (
    ANNOTATION_INHERIT_USER,
    ANNOTATION_MOUNT_MODE,
    ANNOTATION_MOUNT_POINT,
    HCS_INHERIT_USER,
    to_job_config,
)
from hostjob.images.runspec import RunFlags, build_spec
from hostjob.spec import runtime as wire
from hostjob.spec.image import ContainerConfig

HOSTILE_LABELS = {
    ANNOTATION_INHERIT_USER: "true",
    ANNOTATION_MOUNT_POINT: "/etc",
    ANNOTATION_MOUNT_MODE: "bind",
    HCS_INHERIT_USER: "true",
    "microsoft.com/hostprocess-rootfs-location": "/root",
    "io.kubernetes.cri.container-type": "container",
    "org.example.team": "infra",
}


def image(**fields: object) -> ContainerConfig:
    config = ContainerConfig.decode({"Cmd": ["/bin/true"], **fields})
    assert isinstance(config, ContainerConfig)
    return config


def job_of(spec: dict[str, object]):  # type: ignore[no-untyped-def]
    return to_job_config(wire.Spec.decode(spec), "/run/hostjob/x", "x")


def test_labels_never_become_annotations() -> None:
    spec = build_spec(image(Labels=HOSTILE_LABELS, User="1000:1000"), RunFlags())
    assert spec["annotations"] == {}
    job = job_of(spec)
    assert not job.inherit_user and job.mount_mode == "host"
    assert job.mount_point == job.rootfs == "/run/hostjob/x/rootfs"
    assert spec["process"]["user"] == {"uid": 1000, "gid": 1000}


def test_only_flags_make_annotations() -> None:
    flags = RunFlags(
        annotations=["a=1", f"{ANNOTATION_MOUNT_MODE}=host"],
        mount_mode="bind",
        mount_point="/opt/tool",
        user="7",
    )
    spec = build_spec(image(Labels=HOSTILE_LABELS), flags)
    assert spec["annotations"] == {
        "a": "1",
        ANNOTATION_MOUNT_MODE: "bind",
        ANNOTATION_MOUNT_POINT: "/opt/tool",
    }


@pytest.mark.parametrize("key", [ANNOTATION_INHERIT_USER, HCS_INHERIT_USER])
def test_an_explicit_user_wins_over_an_inherit_annotation(key: str) -> None:
    spec = build_spec(image(), RunFlags(user="65534:65534", annotations=[f"{key}=true"]))
    assert spec["process"]["user"] == {"uid": 65534, "gid": 65534}
    assert key not in spec["annotations"]
    assert not job_of(spec).inherit_user


def test_an_inherit_annotation_wins_over_the_images_user() -> None:
    flags = RunFlags(annotations=[f"{ANNOTATION_INHERIT_USER}=true"])
    spec = build_spec(image(User="1000"), flags)
    assert "user" not in spec["process"] and job_of(spec).inherit_user
    # "false" asks for nothing: the image's User stays.
    flags = RunFlags(annotations=[f"{ANNOTATION_INHERIT_USER}=false"])
    spec = build_spec(image(User="1000"), flags)
    assert spec["process"]["user"] == {"uid": 1000, "gid": 0}
    assert not job_of(spec).inherit_user


def test_no_user_anywhere_inherits_the_launcher() -> None:
    spec = build_spec(image(Labels={ANNOTATION_INHERIT_USER: "false"}), RunFlags())
    assert spec["annotations"] == {ANNOTATION_INHERIT_USER: "true"}


@pytest.mark.parametrize(
    ("workdir", "cwd"),
    [
        ("/opt/app", "$CONTAINER_SANDBOX_MOUNT_POINT/opt/app"),
        ("", "$CONTAINER_SANDBOX_MOUNT_POINT/"),
        ("../../../../etc", "$CONTAINER_SANDBOX_MOUNT_POINT/etc"),
        ("/a/../../../root/.ssh", "$CONTAINER_SANDBOX_MOUNT_POINT/root/.ssh"),
        ("//x//./y/", "$CONTAINER_SANDBOX_MOUNT_POINT/x/y"),
    ],
)
def test_the_images_working_dir_stays_in_the_image(workdir: str, cwd: str) -> None:
    spec = build_spec(image(WorkingDir=workdir), RunFlags())
    assert spec["process"]["cwd"] == cwd


def test_image_volumes_and_stop_signal_are_ignored() -> None:
    spec = build_spec(image(Volumes={"/etc": {}}, StopSignal="SIGKILL"), RunFlags())
    assert spec["mounts"] == [] and "linux" not in spec
