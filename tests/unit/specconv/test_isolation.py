"""The operator's ways to keep one job from another, as annotations and as ``hostjob run``
flags: ``io.hostjob.user: auto`` (``--user auto``) and ``io.hostjob.secrets``
(``--secret SRC:DST``). Pure: no file but the secret sources the flags name, no root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostjob.errors import ConfigError, HostjobError
from hostjob.images.imagespec import ContainerConfig
from hostjob.images.runspec import RunFlags, build_spec
from hostjob.spec import runtime as wire
from hostjob.specconv.annotations import ANNOTATION_INHERIT_USER, HCS_INHERIT_USER
from hostjob.specconv.convert import to_job_config
from hostjob.specconv.isolation import ANNOTATION_SECRETS, ANNOTATION_USER
from hostjob.specconv.jobconfig import JobConfig
from tests.helpers import base_config


def convert(annotations: dict[str, str], **config: Any) -> JobConfig:
    document = base_config(**config)
    document["annotations"] = annotations
    return to_job_config(wire.Spec.decode(document), "/srv/b", "job1")


def image(**fields: object) -> ContainerConfig:
    config = ContainerConfig.decode({"Cmd": ["/bin/true"], **fields})
    assert isinstance(config, ContainerConfig)
    return config


def test_the_user_annotation_asks_for_a_uid_of_the_containers_own() -> None:
    job = convert({ANNOTATION_USER: "auto"})
    assert job.auto_user
    assert not convert({}).auto_user
    # The record keeps it, and an older record (without the field) reads as not asked.
    again = JobConfig.decode(job.to_json())
    assert again.auto_user
    del (plain := job.to_json())["autoUser"]
    assert not JobConfig.decode(plain).auto_user


@pytest.mark.parametrize("value", ["", "Auto", "1000", "nobody", "auto "])
def test_the_user_annotation_takes_auto_only(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        convert({ANNOTATION_USER: value})
    assert caught.value.path == f"annotations.{ANNOTATION_USER}"


@pytest.mark.parametrize("key", [ANNOTATION_INHERIT_USER, HCS_INHERIT_USER])
def test_auto_and_inherit_user_together_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="two different users"):
        convert({ANNOTATION_USER: "auto", key: "true"})
    assert convert({ANNOTATION_USER: "auto", key: "false"}).auto_user


def test_the_secrets_annotation_is_pairs_of_absolute_paths() -> None:
    job = convert({ANNOTATION_SECRETS: "/etc/app/token:/run/secrets/token, /k:/a//b/./key"})
    assert job.secrets == [["/etc/app/token", "/run/secrets/token"], ["/k", "/a/b/key"]]
    assert convert({}).secrets is None
    assert JobConfig.decode(job.to_json()).secrets == job.secrets


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("/etc/token", "is not SRC:DST"),
        ("/etc/token:", "is not SRC:DST"),
        (":/run/x", "is not SRC:DST"),
        ("/a:/b:/c", "is not SRC:DST"),
        ("token:/run/x", "absolute"),
        ("/etc/token:run/x", "absolute"),
        ("/etc/token:/run/../../etc/shadow", "'..'"),
        ("/etc/token:/", "must name a file"),
        ("/a:/run/x,/b:/run/x", "given twice"),
        ("/a:/data/key", "lies on the volume at /data"),
        ("/a:/data", "lies on the volume at /data"),
    ],
)
def test_bad_secrets_are_refused(value: str, words: str) -> None:
    mounts = [{"destination": "/data", "type": "bind", "source": "/srv", "options": ["rbind"]}]
    with pytest.raises(ConfigError) as caught:
        convert({ANNOTATION_SECRETS: value}, mounts=mounts)
    assert words in str(caught.value)
    assert caught.value.path == f"annotations.{ANNOTATION_SECRETS}"


def test_run_user_auto_is_the_annotation_and_wins_over_the_image() -> None:
    spec = build_spec(image(User="1000:1000"), RunFlags(user="auto"))
    assert spec["annotations"] == {ANNOTATION_USER: "auto"}
    assert "user" not in spec["process"]
    job = to_job_config(wire.Spec.decode(spec), "/run/hostjob/x", "x")
    assert job.auto_user and not job.inherit_user


@pytest.mark.parametrize("key", [ANNOTATION_INHERIT_USER, HCS_INHERIT_USER])
def test_run_user_auto_drops_an_inherit_annotation(key: str) -> None:
    spec = build_spec(image(), RunFlags(user="auto", annotations=[f"{key}=true"]))
    assert spec["annotations"] == {ANNOTATION_USER: "auto"}


def test_run_an_explicit_user_drops_a_user_annotation() -> None:
    spec = build_spec(image(), RunFlags(user="7:3", annotations=[f"{ANNOTATION_USER}=auto"]))
    assert ANNOTATION_USER not in spec["annotations"]
    assert spec["process"]["user"] == {"uid": 7, "gid": 3}


def test_run_the_user_annotation_alone_is_as_user_auto() -> None:
    spec = build_spec(image(), RunFlags(annotations=[f"{ANNOTATION_USER}=auto"]))
    # Not the launcher's identity (the default without a user): the annotation's.
    assert spec["annotations"] == {ANNOTATION_USER: "auto"}


def test_an_images_label_never_asks_for_a_user_or_a_secret() -> None:
    labels = {ANNOTATION_USER: "auto", ANNOTATION_SECRETS: "/etc/shadow:/run/s"}
    spec = build_spec(image(Labels=labels, User="5"), RunFlags())
    assert spec["annotations"] == {}


def test_run_secrets_become_the_annotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("t0k3n")
    (tmp_path / "key").write_text("k3y")
    monkeypatch.chdir(tmp_path)
    flags = RunFlags(
        secrets=["token:/run/secrets/token", f"{tmp_path}/key:/etc/app//key"],
        annotations=[f"{ANNOTATION_SECRETS}=/etc/hostname:/run/host"],
    )
    spec = build_spec(image(), flags)
    assert spec["annotations"][ANNOTATION_SECRETS] == (
        f"/etc/hostname:/run/host,{tmp_path}/token:/run/secrets/token,{tmp_path}/key:/etc/app/key"
    )
    assert "t0k3n" not in str(spec)  # the paths, never the contents
    job = to_job_config(wire.Spec.decode(spec), "/run/hostjob/x", "x")
    assert job.secrets is not None and len(job.secrets) == 3


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("{d}/missing:/run/x", "is not a file"),
        ("{d}:/run/x", "is not a file"),
        ("{d}/token", "expected SRC:DST"),
        ("{d}/token:/run/a,b", "without commas"),
        ("{d}/token:run/x", "absolute"),
        ("{d}/token:/x/../../y", "'..'"),
    ],
)
def test_run_bad_secrets_fail_before_anything_is_made(
    tmp_path: Path, entry: str, words: str
) -> None:
    (tmp_path / "token").write_text("t")
    with pytest.raises(HostjobError) as caught:
        RunFlags(secrets=[entry.format(d=tmp_path)]).check()
    assert words in str(caught.value)
