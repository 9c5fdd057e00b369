"""``hostjob run IMAGE``'s config.json: the image is data, the flags are policy."""

from __future__ import annotations

import pytest

from hostjob.errors import ConfigError, InvalidArgument
from hostjob.images.imagespec import ContainerConfig
from hostjob.images.runspec import RunFlags, build_spec
from hostjob.spec import runtime as wire
from hostjob.specconv.annotations import (
    ANNOTATION_INHERIT_USER,
    ANNOTATION_MOUNT_MODE,
    ANNOTATION_MOUNT_POINT,
    HCS_INHERIT_USER,
)
from hostjob.specconv.convert import to_job_config

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
    uid = unknown_uid()
    spec = build_spec(image(User=str(uid)), flags)
    assert spec["process"]["user"] == {"uid": uid, "gid": 0}
    assert not job_of(spec).inherit_user


def unknown_uid() -> int:
    """A uid without a passwd entry on this host."""
    import pwd

    known = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(4242, 10**6) if uid not in known)


def test_every_form_of_the_images_user() -> None:
    """The image-spec's forms: uid, uid:gid, name, name:group, uid:group, name:gid. A
    group given by name is the host's; a uid alone gets its passwd entry's groups (gid
    0 without one, as docker does); a name is resolved by the runtime."""
    import grp
    import os
    import pwd

    def user_of(text: str) -> object:
        return build_spec(image(User=text), RunFlags())["process"]["user"]

    root_group = grp.getgrgid(0).gr_name
    nobody = pwd.getpwnam("nobody")
    assert user_of("0") == {"uid": 0, "gid": 0}
    assert user_of("7:8") == {"uid": 7, "gid": 8}
    assert user_of(f"{nobody.pw_uid}") == {
        "uid": nobody.pw_uid,
        "gid": nobody.pw_gid,
        **(
            {"additionalGids": groups}
            if (groups := sorted(set(os.getgrouplist("nobody", nobody.pw_gid)) - {nobody.pw_gid}))
            else {}
        ),
    }
    assert user_of("nobody") == {"username": "nobody"}
    assert user_of(f"nobody:{root_group}") == {"username": "nobody", "gid": 0}
    assert user_of("nobody:5") == {"username": "nobody", "gid": 5}
    assert user_of(f"9:{root_group}") == {"uid": 9, "gid": 0}
    job = job_of(build_spec(image(User=f"nobody:{root_group}"), RunFlags()))
    assert job.process.username == "nobody" and job.process.gid == 0


@pytest.mark.parametrize(
    ("user", "error"),
    [
        (":", "expected user[:group]"),
        ("a:", "expected user[:group]"),
        (":0", "expected user[:group]"),
        ("nobody:no-such-group-here", "no group 'no-such-group-here' on this host"),
        ("4294967295", "4294967295 is out of range for an ID"),
        ("1" * 5000, "111111111111 is out of range for an ID"),
        ("0:99999999999", "99999999999 is out of range for an ID"),
    ],
)
def test_a_bad_user_is_one_line_naming_where_it_came_from(user: str, error: str) -> None:
    with pytest.raises(ConfigError, match=r"^the image's User ") as found:
        build_spec(image(User=user), RunFlags())
    assert error in str(found.value) and "\n" not in str(found.value)
    with pytest.raises(InvalidArgument, match=r"^--user "):
        RunFlags(user=user).check()


@pytest.mark.parametrize("entry", ["NAME", "=value", ""])
def test_an_image_env_entry_that_is_not_name_value_names_the_field(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"^the image's Env\[1\] .* is not NAME=VALUE$"):
        build_spec(image(Env=["A=1", entry]), RunFlags())


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
