"""The installer's plan for a node's containerd: a drop-in with hostjob's handlers on the
node's cgroup driver, one imports entry added to the node's file, and every
configuration it cannot merge safely refused before anything is written."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from hostjob.node import containerd
from hostjob.node.containerd import CRI_V2, CRI_V3, DROPIN, Unmergeable

HANDLERS = containerd.handlers_of("/opt/hostjob/bin")


def reader(files: dict[str, bytes]) -> Any:
    """The host's files as ``plan`` reads them (``glob``: the names a pattern matches)."""
    import fnmatch

    def read(path: str, glob: bool = False) -> Any:
        if glob:
            return [name for name in files if fnmatch.fnmatch(name, path)]
        return files.get(path)

    return read


def runtimes(dropin: str, version: int) -> dict[str, Any]:
    plugin = CRI_V2 if version == 2 else CRI_V3
    found: dict[str, Any] = tomllib.loads(dropin)["plugins"][plugin]["containerd"]["runtimes"]
    return found


V2_SYSTEMD = b"""version = 2
# a node's own file, comments kept
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


def test_version_2_drop_in_holds_the_whole_cri_section_with_the_handlers() -> None:
    plan = containerd.plan(V2_SYSTEMD, "1.6.20~ds1", HANDLERS, reader({}))
    assert plan.version == 2 and plan.systemd_cgroup is True
    dropin = tomllib.loads(plan.dropin)
    cri = dropin["plugins"][CRI_V2]
    assert cri["sandbox_image"] == "registry.example/pause:3.9"  # the node's section kept
    found = runtimes(plan.dropin, 2)
    assert set(found) == {"runc", "hostjob", "hostjob-join"}
    assert found["hostjob"]["options"] == {
        "BinaryName": "/opt/hostjob/bin/hostjob",
        "SystemdCgroup": True,
    }
    assert found["hostjob-join"]["options"]["BinaryName"] == "/opt/hostjob/bin/hostjob-join"
    assert found["hostjob"]["pod_annotations"] == ["io.hostjob.*", "microsoft.com/hostprocess-*"]
    # the node's file: one line more, its comments and tables as they were
    assert plan.after is not None
    added = set(plan.after.decode().splitlines()) - set(V2_SYSTEMD.decode().splitlines())
    assert added == {f'imports = ["{DROPIN}"]  # hostjob node installer'}
    expected = dict(tomllib.loads(V2_SYSTEMD.decode()), imports=[DROPIN])
    assert tomllib.loads(plan.after.decode()) == expected


def test_version_2_keeps_containerds_own_runc_and_the_cgroupfs_driver() -> None:
    config = b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_selinux = false\n'
    plan = containerd.plan(config, "1.7.24", HANDLERS, reader({}))
    found = runtimes(plan.dropin, 2)
    assert found["runc"] == {"runtime_type": "io.containerd.runc.v2"}
    assert plan.systemd_cgroup is False
    assert found["hostjob"]["options"]["SystemdCgroup"] is False


def test_version_2_reads_the_cri_section_of_the_last_import_that_has_one() -> None:
    config = b'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    files = {
        "/etc/containerd/conf.d/10-a.toml": b'[plugins."io.containerd.grpc.v1.cri"]\n'
        b'  sandbox_image = "a"\n',
        "/etc/containerd/conf.d/20-b.toml": b'[plugins."io.containerd.grpc.v1.cri"'
        b".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
    }
    plan = containerd.plan(config, "1.6.20", HANDLERS, reader(files))
    cri = tomllib.loads(plan.dropin)["plugins"][CRI_V2]
    assert "sandbox_image" not in cri  # 20-b's section replaced 10-a's, as containerd does
    assert plan.systemd_cgroup is True
    assert tomllib.loads(plan.after.decode())["imports"] == [  # type: ignore[union-attr]
        "/etc/containerd/conf.d/*.toml",
        DROPIN,
    ]


def test_version_3_drop_in_holds_the_handlers_alone_on_the_merged_driver() -> None:
    config = b'version = 3\nimports = ["/etc/containerd/extra.toml"]\n'
    files = {
        "/etc/containerd/extra.toml": b'[plugins."io.containerd.cri.v1.runtime".containerd'
        b".runtimes.runc.options]\n  SystemdCgroup = true\n"
    }
    plan = containerd.plan(config, "v2.0.4", HANDLERS, reader(files))
    dropin = tomllib.loads(plan.dropin)
    assert dropin["version"] == 3
    assert set(dropin["plugins"][CRI_V3]["containerd"]["runtimes"]) == {"hostjob", "hostjob-join"}
    assert plan.systemd_cgroup is True


def test_no_node_file_gets_one_that_imports_the_drop_in() -> None:
    plan = containerd.plan(None, "v2.0.4", HANDLERS, reader({}))
    assert plan.before is None
    assert tomllib.loads(plan.after.decode()) == {"version": 3, "imports": [DROPIN]}  # type: ignore[union-attr]
    # containerd 2.2 imports conf.d by default: a file of the installer's keeps that
    plan = containerd.plan(None, "v2.2.0", HANDLERS, reader({}))
    assert tomllib.loads(plan.after.decode())["imports"] == [containerd.CONF_D, DROPIN]  # type: ignore[union-attr]
    plan = containerd.plan(None, "1.6.20", HANDLERS, reader({}))
    assert tomllib.loads(plan.after.decode())["version"] == 2  # type: ignore[union-attr]


def test_a_one_line_imports_array_gets_the_entry_appended() -> None:
    config = b'version = 2\nimports = ["/etc/a.toml"] # theirs\n[grpc]\n  uid = 0\n'
    plan = containerd.plan(config, "1.6.20", HANDLERS, reader({}))
    lines = plan.after.decode().splitlines()  # type: ignore[union-attr]
    assert lines[1] == f'imports = ["/etc/a.toml", "{DROPIN}"]  # hostjob node installer'
    assert lines[2:] == ["[grpc]", "  uid = 0", ""][: len(lines) - 2]


def test_a_file_that_imports_the_drop_in_already_is_left_as_it_is() -> None:
    config = b'version = 2\nimports = ["/etc/containerd/hostjob/*.toml"]\n'
    assert containerd.plan(config, "1.6.20", HANDLERS, reader({})).after is None


@pytest.mark.parametrize(
    ("config", "version", "says"),
    [
        (b"[plugins.cri]\n  x = 1\n", "1.6.20", "version 1 configuration"),
        (b"version = 3\n", "1.7.2", "not one containerd 1.x reads"),
        (b"version = 4\n", "v2.0.0", "not one containerd 2.x reads"),
        (b'version = 2\nimports = [\n  "/etc/a.toml",\n]\n', "1.6.20", "by hand"),
        (b"version = 2\nimports = 1\n", "1.6.20", "not a list of paths"),
        (
            b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hostjob]\n'
            b'  runtime_type = "io.containerd.runc.v2"\n',
            "1.6.20",
            "already has a runtime handler named hostjob",
        ),
        (b"version = = 2\n", "1.6.20", "not TOML the installer can read"),
        (b"version = 2\n", "nightly", "not one the installer reads"),
        (
            b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  t = 1979-05-27\n',
            "1.6.20",
            "cannot be written back",
        ),
    ],
)
def test_what_cannot_be_merged_safely_is_refused(config: bytes, version: str, says: str) -> None:
    with pytest.raises(Unmergeable, match=says) as info:
        containerd.plan(config, version, HANDLERS, reader({}))
    assert "\n" not in str(info.value)


def test_containerd_major() -> None:
    assert containerd.containerd_major("1.6.20~ds1") == 1
    assert containerd.containerd_major("v2.1.0") == 2


def test_whether_the_node_file_imports_the_drop_in() -> None:
    assert containerd.imports_dropin(f'version = 2\nimports = ["{DROPIN}"]\n'.encode())
    assert containerd.imports_dropin(b'version = 2\nimports = ["/etc/containerd/*/*.toml"]\n')
    assert not containerd.imports_dropin(b'version = 2\nimports = ["/etc/other.toml"]\n')
    assert not containerd.imports_dropin(None)
    assert containerd.imports_dropin(b"version = = 2\n")  # unreadable: the drop-in stays
