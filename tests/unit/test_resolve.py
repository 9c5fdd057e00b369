"""SPEC §6 rules as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.job import ProcessConfig
from hostjob.runtime import resolve

MP = "/var/lib/job/rootfs"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$CONTAINER_SANDBOX_MOUNT_POINT/bin", f"{MP}/bin"),
        ("${CONTAINER_SANDBOX_MOUNT_POINT}/bin", f"{MP}/bin"),
        ("%CONTAINER_SANDBOX_MOUNT_POINT%\\bin", f"{MP}\\bin"),
        ("$env:CONTAINER_SANDBOX_MOUNT_POINT/x", f"{MP}/x"),
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
        ("/srv", "bind", ("/srv", False)),
        (None, "bind", (MP, False)),
    ],
)
def test_working_dir(cwd: str | None, mode: str, expected: tuple[str, bool]) -> None:
    assert resolve.working_dir(cwd, MP, mode) == expected


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


def test_numeric_user_without_passwd_entry() -> None:
    creds = resolve.resolve_user(process(uid=4242, gid=4343, additional_gids=[7]), inherit=False)
    assert (creds.uid, creds.gid, creds.groups, creds.home, creds.name) == (
        4242,
        4343,
        [7],
        "/",
        None,
    )
