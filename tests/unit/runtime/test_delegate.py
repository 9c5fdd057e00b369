"""Routing containers that are not job containers to a real OCI runtime (mixed pods):
the route in the state root, which runtime, which flags, the bundle the runtime is given.
No root, no runtime run (tests/integration/test_delegate.py runs runc and crun)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hostjob.cli.args import parse
from hostjob.cli.commands import create
from hostjob.cli.main import GLOBAL, Context
from hostjob.errors import ConfigError, DelegateError
from hostjob.runtime import delegate
from hostjob.runtime.bundle import read_config
from hostjob.runtime.container import Container
from hostjob.runtime.record import StateStore
from hostjob.specconv import pods
from tests.helpers import base_config


def test_a_route_is_one_symlink_in_the_containers_directory(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "root"))
    assert store.route("c1") is None  # unknown
    assert store.route("../etc") is None  # not an ID: never looked up
    store.create("c1").release()
    assert store.route("c1") is None  # a job container's directory
    store.create("c2").release()
    store.write_route("c2", "/usr/sbin/runc")
    assert store.route("c2") == "/usr/sbin/runc"
    assert store.delegate_root("/usr/sbin/runc") == str(tmp_path / "root" / ".delegate" / "runc")
    # the library never mistakes a routed container for a job container
    with pytest.raises(DelegateError, match="not a job container: /usr/sbin/runc runs it"):
        Container.load("c2", root=store.root)
    assert [c.id for c in Container.load_all(root=store.root)] == ["c1"]


def test_the_runtime_comes_from_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("runc", "crun", "hostjob"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "plain").write_text("not executable")
    monkeypatch.setenv("PATH", f"relative/dir:{bin_dir}")
    monkeypatch.delenv(delegate.ENV_RUNTIME, raising=False)
    assert delegate.runtime_path() == str(bin_dir / "runc")  # runc from PATH by default
    monkeypatch.setenv(delegate.ENV_RUNTIME, "crun")
    assert delegate.runtime_path() == str(bin_dir / "crun")
    monkeypatch.setenv(delegate.ENV_RUNTIME, str(bin_dir / "crun"))
    assert delegate.runtime_path() == str(bin_dir / "crun")
    for missing in ("youki", str(bin_dir / "plain"), str(tmp_path / "none")):
        monkeypatch.setenv(delegate.ENV_RUNTIME, missing)
        with pytest.raises(DelegateError, match="not found"):
            delegate.runtime_path()
    monkeypatch.setenv(delegate.ENV_RUNTIME, "hostjob")
    with pytest.raises(DelegateError, match="hostjob itself"):
        delegate.runtime_path()


def bundle_with(tmp_path: Path, **config: object) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(base_config(**config)))
    return bundle


@pytest.mark.parametrize(
    ("annotations", "wanted"),
    [
        (None, False),
        ({}, False),
        ({"io.hostjob.job-container": "false"}, True),
        ({"io.hostjob.job-container": "true"}, False),
        (
            {
                "io.kubernetes.cri.container-type": "sandbox",
                "io.hostjob.job-container.main": "false",
            },
            True,
        ),
        ({"io.hostjob.job-container": 5}, False),  # not a string: not an annotation to read
    ],
)
def test_which_bundles_are_handed_over(
    tmp_path: Path, annotations: dict[str, object] | None, wanted: bool
) -> None:
    bundle = bundle_with(tmp_path, **({} if annotations is None else {"annotations": annotations}))
    assert pods.delegated(read_config(str(bundle))) is wanted


def test_a_config_that_is_no_object_is_the_job_containers_to_report(tmp_path: Path) -> None:
    assert pods.delegated(["not", "an", "object"]) is False  # create says what is wrong
    assert pods.delegated({"annotations": "none"}) is False
    with pytest.raises(ConfigError, match="true or false"):
        pods.delegated({"annotations": {"io.hostjob.job-container": "x"}})
    with pytest.raises(ConfigError, match="config\\.json not found"):
        read_config(str(tmp_path))  # before wanted: one read for both


def test_the_bundle_stays_unless_namespaces_point_at_the_host(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "root"))
    store.create("c1").release()
    own = [{"type": "ipc"}, {"type": "pid"}, {"type": "network", "path": "/no/such/netns"}]
    plain = bundle_with(tmp_path, linux={"namespaces": own})
    assert delegate.confined_bundle(store, "c1", str(plain)) == str(plain)
    assert not (tmp_path / "root" / "c1" / "bundle").exists()


def test_a_job_sandboxs_namespaces_are_replaced_in_a_bundle_of_its_own(tmp_path: Path) -> None:
    """This process's namespaces stand for the host's (a job sandbox runs there)."""
    store = StateStore(str(tmp_path / "root"))
    store.create("c1").release()
    namespaces = [
        {"type": "ipc", "path": "/proc/self/ns/ipc"},
        {"type": "uts", "path": "/proc/self/ns/uts"},
        {"type": "network", "path": "/proc/self/ns/net"},
        {"type": "mount"},
    ]
    mounts = [
        {"destination": "/data", "type": "bind", "source": "data", "options": ["rbind"]},
        {"destination": "/abs", "type": "bind", "source": "/srv/abs"},
        {"destination": "/proc", "type": "proc", "source": "proc"},
    ]
    bundle = bundle_with(
        tmp_path, linux={"namespaces": namespaces, "sysctl": {"a": "1"}}, mounts=mounts, x=1
    )
    given = Path(delegate.confined_bundle(store, "c1", str(bundle)))
    assert given == tmp_path / "root" / "c1" / "bundle"
    config = json.loads((given / "config.json").read_text())
    assert config["linux"]["namespaces"] == [
        {"type": "ipc"}, namespaces[1], namespaces[2], {"type": "mount"}
    ]  # fmt: skip
    assert config["linux"]["sysctl"] == {"a": "1"}  # the rest unchanged, unknown fields too
    assert config["x"] == 1
    assert config["root"]["path"] == str(bundle / "rootfs")
    assert [m["source"] for m in config["mounts"]] == [str(bundle / "data"), "/srv/abs", "proc"]
    assert stat.S_IMODE(os.stat(given).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(given / "config.json").st_mode) == 0o600


@pytest.mark.parametrize(
    ("words", "flags"),
    [
        ([], []),
        (
            ["--log", "/l.json", "--log-format", "json"],
            ["--log", "/l.json", "--log-format", "json"],
        ),
        (["--debug", "--systemd-cgroup"], ["--debug", "--systemd-cgroup"]),
        (["--rootless", "false", "--criu", "/c"], ["--rootless=false", "--criu", "/c"]),
        (["--root", "/elsewhere"], []),  # the runtime gets a state root of its own
        # hostjob's own defaults for a job container mean nothing to the real runtime
        (["--default-mount-mode=bind", "--default-inherit-user"], []),
    ],
)
def test_the_runtime_gets_hostjobs_global_flags(words: list[str], flags: list[str]) -> None:
    ctx = Context(parse(GLOBAL, [*words, "state", "x"], stop_at_positional=True))
    assert ctx.delegate_flags() == flags


def test_the_operators_defaults_are_given_by_the_annotation_each_stands_for() -> None:
    from hostjob.specconv.convert import DEFAULT_FLAGS

    words = ["--default-mount-mode=bind", "--default-rootfs-mount-point", "/j",
             "--default-inherit-user", "--default-loader=host",
             "--default-pod-namespaces=join", "--root", "/r", "create", "x"]  # fmt: skip
    defaults = Context(parse(GLOBAL, words, stop_at_positional=True)).defaults()
    assert defaults == {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": "/j",
        "io.hostjob.inherit-user": "true",
        "io.hostjob.loader": "host",
        "io.hostjob.pod-namespaces": "join",
    }
    assert set(defaults) == set(DEFAULT_FLAGS)  # the same names as the conversion's
    assert Context(parse(GLOBAL, ["state", "x"], stop_at_positional=True)).defaults() == {}


def test_create_passes_the_clients_flags_but_the_bundle() -> None:
    words = [
        "--bundle", "/b", "--console-socket", "/s", "--pid-file", "/p", "--preserve-fds", "2",
        "--no-pivot", "--no-new-keyring", "id",
    ]  # fmt: skip
    flags = create.runtime_flags(parse(create.COMMAND, words))
    assert flags == [
        "--console-socket", "/s", "--pid-file", "/p", "--preserve-fds", "2", "--no-pivot",
        "--no-new-keyring",
    ]  # fmt: skip
    assert create.runtime_flags(parse(create.COMMAND, ["id"])) == []
