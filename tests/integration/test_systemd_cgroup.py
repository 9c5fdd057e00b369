"""``--systemd-cgroup`` on the hosts users run and on this one.

Where systemd runs the host on the unified hierarchy (the VM lane: Debian 12's systemd 252
on cgroup v2), the job is a transient scope that systemd itself knows: ``systemctl status``
shows it with the job's processes, its limits are unit properties, ``update`` changes
them, ``delete`` stops it and nothing is left (no unit, no failed unit, no cgroup).
Everywhere else ``slice:prefix:name`` is mapped onto cgroupfs as before, and the log says
why once. Each test says which host it needs; the VM lane sets HOSTJOB_REQUIRE_SYSTEMD=1,
so that there a test that needs systemd fails instead of being skipped."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hostjob.cgroups import systemd
from tests.helpers import Hostjob, alive, base_config, cgroup_dirs, new_id, proc_cgroup, wait_for

V2 = os.path.isfile("/sys/fs/cgroup/cgroup.controllers")
DRIVER = systemd.booted() and V2
REQUIRED = os.environ.get("HOSTJOB_REQUIRE_SYSTEMD") == "1"

needs_systemd = pytest.mark.skipif(
    not DRIVER and not REQUIRED, reason="needs systemd as PID 1 on cgroup v2 (the VM lane)"
)
needs_no_systemd = pytest.mark.skipif(
    DRIVER, reason="the cgroupfs mapping is for hosts where systemd cannot make the scope"
)


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=30)


def show(unit: str, *props: str) -> dict[str, str]:
    out = systemctl("show", unit, "-p", ",".join(props)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@needs_no_systemd
def test_without_systemd_the_path_is_mapped_onto_cgroupfs(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    cid = new_id()
    config = base_config("sleep", "300")
    config["linux"] = {"cgroupsPath": f"hjtest-apps.slice:hostjob:{cid}"}
    pid_file = tmp_path / "pid"
    hj.ok("--systemd-cgroup", "create", "-b", str(bundle(config)), "--pid-file", str(pid_file), cid)
    expected = f"/hjtest.slice/hjtest-apps.slice/hostjob-{cid}.scope"
    assert f":{expected}\n" in proc_cgroup(int(pid_file.read_text()))
    logged = (tmp_path / "hostjob.log").read_text()
    assert logged.count("--systemd-cgroup:") == 1, logged  # said once, with the reason
    hj.ok("--systemd-cgroup", "delete", "--force", cid)
    assert cgroup_dirs(expected) == []
    assert cgroup_dirs("/hjtest.slice") == []  # no empty slice left behind


@needs_systemd
def test_the_job_is_a_scope_systemd_knows(hj: Hostjob, bundle, tmp_path: Path) -> None:
    assert DRIVER, "HOSTJOB_REQUIRE_SYSTEMD=1 but systemd does not run this host on cgroup v2"
    cid = new_id()
    unit = f"hostjob-{cid}.scope"
    config = base_config("sleep", "300")
    config["linux"] = {
        "cgroupsPath": f"system.slice:hostjob:{cid}",
        "resources": {
            "memory": {"limit": 64 << 20},
            "pids": {"limit": 32},
            "cpu": {"shares": 512},
            "unified": {"memory.high": str(48 << 20)},
        },
    }
    pid_file = tmp_path / "pid"
    hj.ok("--systemd-cgroup", "create", "-b", str(bundle(config)), "--pid-file", str(pid_file), cid)
    pid = int(pid_file.read_text())
    status = systemctl("status", unit)
    assert status.returncode == 0, status.stdout + status.stderr
    assert str(pid) in status.stdout  # the job's process, as systemd lists it
    props = show(unit, "MemoryMax", "TasksMax", "Delegate", "CPUWeight", "Slice", "ActiveState")
    assert props == {
        "MemoryMax": str(64 << 20),
        "TasksMax": "32",
        "Delegate": "yes",
        "CPUWeight": "20",
        "Slice": "system.slice",
        "ActiveState": "active",
    }
    path = f"/sys/fs/cgroup/system.slice/{unit}"
    assert f"0::/system.slice/{unit}\n" == proc_cgroup(pid)
    assert Path(path, "memory.high").read_text().strip() == str(48 << 20)  # not a property
    hj.ok("--systemd-cgroup", "start", cid)
    # update: a property systemd knows, changed on the unit (and so in the file)
    hj.ok("--systemd-cgroup", "update", "--memory", "128m", cid)
    assert show(unit, "MemoryMax") == {"MemoryMax": str(128 << 20)}
    assert Path(path, "memory.max").read_text().strip() == str(128 << 20)
    # an exec lands in the scope too
    out = hj.ok("--systemd-cgroup", "exec", cid, "cat", "/proc/self/cgroup")
    assert out == f"0::/system.slice/{unit}\n"
    hj.ok("--systemd-cgroup", "delete", "--force", cid)
    assert wait_for(lambda: not alive(pid), 10)
    gone = systemctl("status", unit)
    assert gone.returncode == 4, gone.stdout + gone.stderr  # "could not be found"
    assert systemctl("is-failed", unit).stdout.strip() != "failed"
    assert not os.path.exists(path)


@needs_systemd
def test_a_scope_whose_init_ended_is_deleted_cleanly(hj: Hostjob, bundle) -> None:
    cid = new_id()
    unit = f"hostjob-{cid}.scope"
    config = base_config("true")
    config["linux"] = {"cgroupsPath": f"system.slice:hostjob:{cid}"}
    hj.ok("--systemd-cgroup", "create", "-b", str(bundle(config)), cid)
    hj.ok("--systemd-cgroup", "start", cid)
    assert wait_for(lambda: hj.status(cid) == "stopped", 10)
    hj.ok("--systemd-cgroup", "delete", cid)
    assert systemctl("status", unit).returncode == 4
    assert json.loads(hj.ok("list", "--format", "json")) == []


@needs_systemd
def test_the_default_path_is_a_scope_in_system_slice(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    pid_file = tmp_path / "pid"
    b = bundle(base_config("sleep", "300"))
    hj.ok("--systemd-cgroup", "create", "-b", str(b), "--pid-file", str(pid_file), cid)
    assert proc_cgroup(int(pid_file.read_text())) == f"0::/system.slice/hostjob-{cid}.scope\n"
    hj.ok("--systemd-cgroup", "delete", "--force", cid)
    assert systemctl("status", f"hostjob-{cid}.scope").returncode == 4
