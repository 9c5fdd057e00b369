"""Mixed pods at the command line: a container whose annotations say it is not a job
container is handed to a real OCI runtime -- runc, or the one ``HOSTJOB_DELEGATE_RUNTIME``
names -- with hostjob's global flags and a state root of its own (``<root>/.delegate/<name>``);
every later command on its ID goes there too, ``list`` shows both runtimes' containers, and
deleting it (also after a crash) leaves nothing in either root."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import crun_client_path, runc_like_spec
from tests.helpers import (
    Hostjob,
    base_config,
    cgroup_file_of,
    containers_left,
    make_bundle,
    make_rootfs,
    new_id,
    require_peer,
)

CONFINED = {"io.hostjob.job-container": "false"}


@pytest.fixture(autouse=True)
def _runtimes() -> None:
    require_peer("runc", "runc")


def confined_bundle(tmp_path: Path, *args: str, name: str = "confined", **spec: Any) -> Path:
    """A runc-style bundle (its own namespaces, /proc, /dev, read-only rootfs) annotated as
    not a job container."""
    bundle = tmp_path / name
    bundle.mkdir()
    rootfs = make_rootfs(bundle / "rootfs")
    config = runc_like_spec(Path("rootfs"), args or ("sleep", "300"))
    config["annotations"] = dict(CONFINED)
    config.update(spec)
    (bundle / "config.json").write_text(json.dumps(config))
    assert rootfs.is_dir()
    return bundle


def ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def runc(hj: Hostjob, name: str = "runc") -> Path:
    return hj.root / ".delegate" / name


def test_a_confined_container_through_its_whole_life(hj: Hostjob, tmp_path: Path) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(confined_bundle(tmp_path)), cid)
    route = hj.root / cid / "delegate"
    assert os.readlink(route) == "/usr/sbin/runc" or os.readlink(route).endswith("/runc")
    assert sorted(os.listdir(hj.root / cid)) == ["delegate"]  # no record: runc's state
    assert (runc(hj) / cid / "state.json").is_file()
    assert hj.status(cid) == "created"

    hj.ok("start", cid)
    state = hj.state(cid)
    assert state["status"] == "running" and state["id"] == cid
    pid = state["pid"]
    for kind in ("mnt", "pid", "ipc", "uts", "net"):  # runc's own namespaces, all of them
        assert ns(pid, kind) != ns("self", kind), kind
    assert hj.ok("exec", cid, "cat", "/proc/1/cmdline").split("\0")[:2] == ["sleep", "300"]
    assert [p for p in json.loads(hj.ok("ps", "--format", "json", cid))] == [pid]
    hj.ok("pause", cid)
    assert hj.status(cid) == "paused"
    hj.ok("resume", cid)
    assert hj.status(cid) == "running"
    hj.ok("update", "--pids-limit", "42", cid)
    pids_max = cgroup_file_of(pid, ("pids", "pids.max"), "pids.max")  # where runc put it
    assert pids_max.read_text() == "42\n"
    stats = json.loads(hj.ok("events", "--stats", cid))
    assert stats["type"] == "stats" and stats["id"] == cid

    # list: both runtimes' containers, the mode column names the runtime
    job = new_id()
    hj.ok("create", "-b", str(make_bundle(tmp_path / "job", base_config("sleep", "300"))), job)
    listed = {s["id"]: s for s in json.loads(hj.ok("list", "--format", "json"))}
    assert listed[cid]["status"] == "running" and listed[cid]["pid"] == pid
    assert listed[job]["status"] == "created" and listed[job]["mountMode"] == "host"
    assert sorted(hj.ok("list", "-q").split()) == sorted([cid, job])
    rows = {line.split()[0]: line.split() for line in hj.ok("list").splitlines()[1:]}
    assert rows[cid][6] == "runc" and rows[job][6] == "host"
    hj.ok("delete", "--force", job)

    assert "not stopped" in hj.fail("delete", cid)  # runc's rule, runc's words
    hj.ok("kill", cid, "KILL")
    hj.ok("delete", "--force", cid)
    assert not os.path.lexists(hj.root / cid)
    assert not os.path.lexists(hj.root / ".delegate"), "runc's empty state root is tidied"
    assert "does not exist" in hj.fail("state", cid)
    assert not pids_max.parent.exists()


def test_the_configured_runtime_runs_it(hj: Hostjob, tmp_path: Path) -> None:
    """HOSTJOB_DELEGATE_RUNTIME at create chooses the runtime; the route keeps it for every
    later command, whatever their environment."""
    require_peer("crun", "crun")
    crun = shutil.which("crun")
    assert crun
    # crun refuses this hybrid host's cgroup2 unless a wrapper named crun hides it
    configured = crun_client_path(Path(crun), tmp_path)
    cid = new_id()
    bundle = confined_bundle(tmp_path, "sh", "-c", "echo from-crun; sleep 300")
    hj.ok("create", "-b", str(bundle), cid, env={"HOSTJOB_DELEGATE_RUNTIME": str(configured)})
    assert os.readlink(hj.root / cid / "delegate") == str(configured)
    assert (runc(hj, "crun") / cid).is_dir() and not runc(hj).exists()
    hj.ok("start", cid)
    assert hj.status(cid) == "running"
    hj.ok("delete", "--force", cid)
    assert not os.path.lexists(hj.root / cid) and not os.path.lexists(hj.root / ".delegate")


def test_a_job_sandboxs_host_namespaces_are_not_joined(hj: Hostjob, tmp_path: Path) -> None:
    """The namespaces containerd gives a container of a pod whose sandbox is a job container
    point at the host's: IPC and PID become the container's own, network and UTS stay (a
    host-network pod), in a bundle of hostjob's that runc is given instead -- without the
    spec's hostname, which runc would set on the host's UTS namespace: the node's name."""
    name_before = socket.gethostname()
    host = os.getpid()
    namespaces = [
        {"type": "pid", "path": f"/proc/{host}/ns/pid"},
        {"type": "ipc", "path": f"/proc/{host}/ns/ipc"},
        {"type": "uts", "path": f"/proc/{host}/ns/uts"},
        {"type": "mount"},
        {"type": "network", "path": f"/proc/{host}/ns/net"},
    ]
    bundle = confined_bundle(tmp_path)
    config = json.loads((bundle / "config.json").read_text())
    config["linux"]["namespaces"] = namespaces
    (bundle / "config.json").write_text(json.dumps(config))
    cid = new_id()
    hj.ok("create", "-b", str(bundle), cid)
    given = hj.root / cid / "bundle"
    rewritten = json.loads((given / "config.json").read_text())
    assert [n.get("path") for n in rewritten["linux"]["namespaces"]] == [
        None, None, f"/proc/{host}/ns/uts", None, f"/proc/{host}/ns/net"
    ]  # fmt: skip
    assert rewritten["root"]["path"] == str(bundle / "rootfs")
    assert config["hostname"] != name_before and "hostname" not in rewritten
    assert (given / "config.json").stat().st_mode & 0o777 == 0o600
    state = hj.state(cid)
    assert state["bundle"] == str(given)
    pid = state["pid"]
    for kind in ("mnt", "pid", "ipc"):
        assert ns(pid, kind) != ns(host, kind), kind
    for kind in ("net", "uts"):
        assert ns(pid, kind) == ns(host, kind), kind
    hj.ok("delete", "--force", cid)
    assert not os.path.lexists(hj.root / cid)
    assert socket.gethostname() == name_before
    log = (tmp_path / "hostjob.log").read_text()
    assert f"hostname {config['hostname']!r} is not set" in log


def test_the_hosts_own_name_is_kept_in_the_hosts_uts_namespace(hj: Hostjob, tmp_path: Path) -> None:
    """A pod on the host's network whose hostname is the node's (what the kubelet sends for
    such a pod): nothing to drop, so runc is given the bundle as it is."""
    name_before = socket.gethostname()
    host = os.getpid()
    bundle = confined_bundle(tmp_path, hostname=name_before)
    config = json.loads((bundle / "config.json").read_text())
    config["linux"]["namespaces"] = [
        {"type": "mount"},
        {"type": "pid"},
        {"type": "ipc"},
        {"type": "uts", "path": f"/proc/{host}/ns/uts"},
        {"type": "network", "path": f"/proc/{host}/ns/net"},
    ]
    (bundle / "config.json").write_text(json.dumps(config))
    cid = new_id()
    hj.ok("create", "-b", str(bundle), cid)
    assert hj.state(cid)["bundle"] == str(bundle)
    assert ns(hj.state(cid)["pid"], "uts") == ns(host, "uts")
    hj.ok("delete", "--force", cid)
    assert socket.gethostname() == name_before


def test_a_failed_create_leaves_nothing(hj: Hostjob, tmp_path: Path) -> None:
    bundle = confined_bundle(tmp_path)
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["path"] = "no-such-rootfs"
    (bundle / "config.json").write_text(json.dumps(config))
    cid = new_id()
    assert hj.fail("create", "-b", str(bundle), cid)  # runc's own one-line error
    assert not os.path.lexists(hj.root / cid)
    assert "does not exist" in hj.fail("state", cid)


@pytest.mark.parametrize("point", ["delegate:after-route", "delegate:after-runtime-delete"])
def test_delete_force_after_a_crash_leaves_nothing(hj: Hostjob, tmp_path: Path, point: str) -> None:
    cid = new_id()
    bundle = str(confined_bundle(tmp_path))
    crash = {"HOSTJOB_CRASH_AT": point}
    if point == "delegate:after-route":
        assert hj("create", "-b", bundle, cid, env=crash).returncode == -9
    else:
        hj.ok("create", "-b", bundle, cid)
        assert hj("delete", "--force", cid, env=crash).returncode == -9
    assert os.path.lexists(hj.root / cid / "delegate")  # the route outlived the crash
    assert "does not exist" in hj.fail("state", cid)  # runc knows no such container
    hj.ok("delete", "--force", cid)
    assert not os.path.lexists(hj.root / cid) and not os.path.lexists(hj.root / ".delegate")


def test_no_runtime_no_container(hj: Hostjob, tmp_path: Path) -> None:
    bundle = str(confined_bundle(tmp_path))
    missing = {"HOSTJOB_DELEGATE_RUNTIME": str(tmp_path / "no-runc")}
    assert "HOSTJOB_DELEGATE_RUNTIME" in hj.fail("create", "-b", bundle, new_id(), env=missing)
    itself = {"HOSTJOB_DELEGATE_RUNTIME": "hostjob", "PATH": f"{Path(hj.argv()[0]).parent}:/bin"}
    if Path(hj.argv()[0]).name == "hostjob":
        assert "hostjob itself" in hj.fail("create", "-b", bundle, new_id(), env=itself)
    assert containers_left(hj.root) == []


def test_run_and_the_library_refuse_it(hj: Hostjob, tmp_path: Path) -> None:
    """Only create hands a container over: ``run`` of such a bundle says what it is."""
    bundle = str(confined_bundle(tmp_path))
    assert "not a job container" in hj.fail("run", "-b", bundle, new_id())
    assert containers_left(hj.root) == []


def test_one_id_across_both_runtimes(hj: Hostjob, tmp_path: Path) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(confined_bundle(tmp_path)), cid)
    job = make_bundle(tmp_path / "job", base_config("sleep", "300"))
    assert "already exists" in hj.fail("create", "-b", str(job), cid)
    other = new_id()
    hj.ok("create", "-b", str(job), other)
    assert "already exists" in hj.fail(
        "create", "-b", str(confined_bundle(tmp_path, name="c2")), other
    )
    hj.ok("delete", "--force", cid)
    hj.ok("delete", "--force", other)
