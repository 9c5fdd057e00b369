"""How a process starts (environment, PATH, cwd, program, user), as pure functions."""

from __future__ import annotations

import grp
import os
import pwd
import resource
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.errors import ConfigError, StartError
from hostjob.runtime.launch import plan as resolve
from hostjob.runtime.launch import program as launch_program
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from hostjob.specconv.jobconfig import ProcessConfig
from tests.helpers import base_config

MP = "/var/lib/job/rootfs"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$CONTAINER_SANDBOX_MOUNT_POINT/bin", f"{MP}/bin"),
        ("${CONTAINER_SANDBOX_MOUNT_POINT}/bin", f"{MP}/bin"),
        ("%CONTAINER_SANDBOX_MOUNT_POINT%\\bin", f"{MP}\\bin"),
        ("$env:CONTAINER_SANDBOX_MOUNT_POINT/x", f"{MP}/x"),
        # Kubernetes' form, which the kubelet passes on unresolved
        ("$(CONTAINER_SANDBOX_MOUNT_POINT)/bin/app", f"{MP}/bin/app"),
        ("--root=$(CONTAINER_SANDBOX_MOUNT_POINT)", f"--root={MP}"),
        ("$(CONTAINER_SANDBOX_MOUNT_POINTS)", "$(CONTAINER_SANDBOX_MOUNT_POINTS)"),
        ("a:$CONTAINER_SANDBOX_MOUNT_POINT:b", f"a:{MP}:b"),
        ("$CONTAINER_SANDBOX_MOUNT_POINTS", "$CONTAINER_SANDBOX_MOUNT_POINTS"),
        ("$HOME %PATH% ${X}", "$HOME %PATH% ${X}"),
        ("", ""),
    ],
)
def test_substitute(text: str, expected: str) -> None:
    assert resolve.substitute(text, MP + "/") == expected


@given(st.text())
def test_substitute_without_variable_is_identity(text: str) -> None:
    if "CONTAINER_SANDBOX_MOUNT_POINT" not in text:
        assert resolve.substitute(text, MP) == text


def test_extend_path() -> None:
    assert (
        resolve.extend_path("/usr/bin:rel::/bin", MP)
        == f"/usr/bin:rel:/bin:{MP}:{MP}/usr/bin:{MP}/bin"
    )


@pytest.mark.parametrize(
    ("cwd", "mode", "expected"),
    [
        (None, "host", (MP, True)),
        ("/", "host", (MP, True)),
        ("/app", "host", (f"{MP}/app", True)),
        (f"{MP}/app", "host", (f"{MP}/app", True)),
        ("$CONTAINER_SANDBOX_MOUNT_POINT/x/../y", "host", (f"{MP}/y", True)),
        ("/data/sub", "host", (f"{MP}/data/sub", True)),  # through the volume's link
        # bind mode: the container's view too, a volume at its real path
        (None, "bind", (MP, True)),
        ("/", "bind", (MP, True)),
        ("/etc", "bind", (f"{MP}/etc", True)),
        (f"{MP}/app", "bind", (f"{MP}/app", True)),
        ("/data", "bind", ("/data", False)),
        ("/data/sub", "bind", ("/data/sub", False)),
        ("/database", "bind", (f"{MP}/database", True)),  # not under /data
        ("/var/run/secrets/x", "bind", ("/var/run/secrets/x", False)),
    ],
)
def test_working_dir(cwd: str | None, mode: str, expected: tuple[str, bool]) -> None:
    volumes = ("/data", "/var/run/secrets")
    assert resolve.working_dir(cwd, MP, mode, volumes) == expected


def process(**kw: object) -> ProcessConfig:
    base = {"args": ["x"], "env": [], "rlimits": [], "additional_gids": [], "terminal": False,
            "no_new_privileges": False}  # fmt: skip
    base.update(kw)
    return ProcessConfig(**base)


def test_build_env_order_and_override() -> None:
    creds = resolve.Credentials(0, 0, [], "/root", "root", "/bin/bash")
    env = resolve.build_env(
        process(
            env=[
                "A=1",
                "PATH=/bin",
                "A=2",
                "CONTAINER_SANDBOX_MOUNT_POINT=/x",
                "B=$CONTAINER_SANDBOX_MOUNT_POINT",
            ]
        ),
        creds,
        MP,
        inherit=False,
    )
    assert env[-1] == f"CONTAINER_SANDBOX_MOUNT_POINT={MP}"
    values = dict(e.split("=", 1) for e in env)
    assert values["A"] == "2" and values["B"] == MP
    assert values["PATH"] == f"/bin:{MP}:{MP}/bin"
    assert values["HOME"] == "/root" and values["USER"] == "root" and values["SHELL"] == "/bin/bash"


def test_the_hosts_etc_environment_is_the_base_of_a_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a login's (pam_env): proxies and locale from /etc/environment, under the
    account's identity and the config's own variables."""
    etc = tmp_path / "environment"
    etc.write_text(
        "# proxies for every login\n"
        "http_proxy=http://proxy:3128\n"
        'export LANG="C.UTF-8"\n'
        "NO_PROXY='localhost,.svc'\n"
        "HOME=/nowhere\n"
        "not a variable\n"
        "1BAD=x\n"
        "\n"
    )
    monkeypatch.setattr(resolve, "HOST_ENVIRONMENT", str(etc))
    creds = resolve.Credentials(0, 0, [], "/root", "root", "/bin/bash")
    env = resolve.build_env(process(env=["LANG=de_DE.UTF-8"]), creds, MP, inherit=False)
    values = dict(e.split("=", 1) for e in env)
    assert values["http_proxy"] == "http://proxy:3128"
    assert values["NO_PROXY"] == "localhost,.svc"
    assert values["LANG"] == "de_DE.UTF-8"  # the config wins
    assert values["HOME"] == "/root"  # the account's identity wins
    assert "not a variable" not in " ".join(env) and "1BAD" not in values
    assert values["PATH"].startswith(resolve.DEFAULT_PATH + ":")
    # A PATH of /etc/environment is the login's PATH, as pam_env makes it.
    etc.write_text("PATH=/opt/site/bin:/usr/bin\n")
    env = resolve.build_env(process(), creds, MP, inherit=False)
    assert dict(e.split("=", 1) for e in env)["PATH"].startswith("/opt/site/bin:/usr/bin:")
    # Inheriting the launcher's environment takes that, not /etc/environment.
    etc.write_text("ONLY_IN_ETC=1\n")
    env = resolve.build_env(process(), creds, MP, inherit=True)
    assert not any(e.startswith("ONLY_IN_ETC=") for e in env)


def test_no_etc_environment_is_an_empty_one(tmp_path: Path) -> None:
    assert resolve.host_environment(str(tmp_path / "missing")) == {}


def test_numeric_user_without_passwd_entry() -> None:
    creds = resolve.resolve_user(process(uid=4242, gid=4343, additional_gids=[7]), inherit=False)
    assert (creds.uid, creds.gid, creds.groups, creds.home, creds.name) == (
        4242,
        4343,
        [7],
        "/",
        None,
    )


# --- Program: found as the child will find it ----------------------------------------------


def executable(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def test_bare_names_are_searched_in_path(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    executable(second / "tool")
    executable(first / "other")
    found = launch_program.find_program("tool", "/", f"{first}:{second}", MP)
    assert found == str(second / "tool")
    with pytest.raises(StartError, match=r'exec: "nope": executable file not found in \$PATH'):
        launch_program.find_program("nope", "/", f"{first}:{second}", MP)


def test_a_relative_path_is_taken_from_the_working_directory(tmp_path: Path) -> None:
    executable(tmp_path / "bin" / "app")
    assert launch_program.find_program("bin/app", str(tmp_path), "", MP) == f"{tmp_path}/bin/app"


def test_an_absolute_path_is_the_hosts_else_the_mount_points(tmp_path: Path) -> None:
    host = executable(tmp_path / "host-tool")
    assert launch_program.find_program(str(host), "/", "", MP) == str(host)
    mount_point = tmp_path / "mp"
    executable(mount_point / "opt" / "app")
    assert (
        launch_program.find_program("/opt/app", "/", "", str(mount_point))
        == f"{mount_point}/opt/app"
    )


def test_a_directory_or_a_non_executable_is_a_start_error(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(StartError, match="is a directory"):
        launch_program.find_program(str(tmp_path / "dir"), "/", "", MP)
    plain = executable(tmp_path / "plain", 0o644)
    with pytest.raises(StartError, match="permission denied"):
        launch_program.find_program(str(plain), "/", "", MP)
    with pytest.raises(StartError, match="no such file or directory"):
        launch_program.find_program(str(tmp_path / "gone"), "/", "", MP)


# --- User ------------------------------------------------------------------------------


def test_a_user_name_is_resolved_through_the_hosts_passwd() -> None:
    root = pwd.getpwuid(0)
    creds = resolve.resolve_user(process(username=root.pw_name), inherit=False)
    assert (creds.uid, creds.gid, creds.home, creds.name) == (0, root.pw_gid, root.pw_dir, "root")
    numeric = resolve.resolve_user(process(username="4242:77"), inherit=False)
    assert (numeric.uid, numeric.gid) == (4242, 77)


def test_a_group_name_is_never_resolved_to_a_shared_uid() -> None:
    """``create`` gives a container whose user names a group a uid of its own
    (``tests/unit/runtime/test_users.py``); any other process naming one is refused."""
    group = next(g for g in grp.getgrall() if not _is_user(g.gr_name))  # e.g. "adm"
    with pytest.raises(ConfigError, match="is a group: only a container's own user"):
        resolve.resolve_user(process(username=group.gr_name), inherit=False)


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_an_unknown_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="neither a user nor a group"):
        resolve.resolve_user(process(username="no-such-user-or-group-x"), inherit=False)
    with pytest.raises(ConfigError, match="not a valid name"):
        resolve.resolve_user(process(username="a\0b"), inherit=False)


def test_inherit_mode_keeps_the_launchers_credentials() -> None:
    creds = resolve.resolve_user(process(uid=4242, gid=4242), inherit=True)
    assert (creds.uid, creds.gid) == (os.getuid(), os.getgid())


# --- A converted config, planned (end to end, no fork) ------------------------------------


def test_plan_of_a_converted_config() -> None:
    config = base_config(
        "$CONTAINER_SANDBOX_MOUNT_POINT/bin/app",
        "--in=${CONTAINER_SANDBOX_MOUNT_POINT}/data",
    )
    config["process"]["env"] = ["PATH=/bin", "A=%CONTAINER_SANDBOX_MOUNT_POINT%/a", "A=last"]
    config["process"]["cwd"] = "/app"
    config["process"]["user"] = {"uid": 0, "gid": 0, "umask": 0o22}
    config["process"]["rlimits"] = [
        {"type": "RLIMIT_NOFILE", "soft": 64, "hard": 18446744073709551615}
    ]
    job = to_job_config(wire.Spec.decode(config), "/b", "c1")
    plan = resolve.plan(job, job.process)
    mp = "/b/rootfs"
    assert plan.mount_point == mp
    assert plan.args == [f"{mp}/bin/app", f"--in={mp}/data"]
    env = dict(e.split("=", 1) for e in plan.env)
    assert env["A"] == "last" and env["HOME"] == pwd.getpwuid(0).pw_dir
    assert env["PATH"] == f"/bin:{mp}:{mp}/bin"
    assert plan.env[-1] == f"CONTAINER_SANDBOX_MOUNT_POINT={mp}"
    assert (plan.cwd, plan.create_cwd) == (f"{mp}/app", True)
    assert plan.umask == 0o22
    assert plan.rlimits == [(resource.RLIMIT_NOFILE, 64, resource.RLIM_INFINITY)]
    assert plan.capabilities is None


def test_signal_names() -> None:
    from hostjob.linux.signals import parse_signal, signal_name

    assert signal_name(9) == "SIGKILL"
    assert signal_name(6) == "SIGABRT"  # not its alias SIGIOT
    assert signal_name(17) == "SIGCHLD"
    assert signal_name(parse_signal("SIGRTMIN+3")) == "SIGRTMIN+3"
    assert signal_name(0) == "0"
    for name in ("SIGTERM", "SIGQUIT", "SIGUSR1", "SIGRTMIN"):
        assert signal_name(parse_signal(name)) == name
