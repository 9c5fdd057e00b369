"""The v2 manager on a real cgroup2 hierarchy.

On this hybrid host that is /sys/fs/cgroup/unified, whose only controller is
hugetlb: the core files (procs, freeze, kill, events) and hugetlb are real; the
other controllers' limits are covered by the fake cgroup2 tree in tests/unit.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from hostjob.errors import MissingController
from hostjob.spec.resources import Resources
from tests.helpers import wait_for
from tests.integration.cgroups.conftest import Spawn, cat, leftovers, wait_gone

UNIFIED = cg.detect().unified
pytestmark = pytest.mark.skipif(UNIFIED is None, reason="no cgroup2 hierarchy is mounted here")


def res(data: dict[str, object]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


def manager(path: str) -> cg.Manager:
    assert UNIFIED is not None
    m = open_manager(path, root=UNIFIED.mountpoint)
    assert m.version == 2
    return m


def controllers() -> set[str]:
    assert UNIFIED is not None
    return set(cat(f"{UNIFIED.mountpoint}/cgroup.controllers").split())


def test_create_add_freeze_kill_destroy(parent: str, spawn: Spawn, tmp_path: object) -> None:
    assert UNIFIED is not None
    path = f"{parent}/job"
    m = manager(path)
    m.create()
    leaf = UNIFIED.mountpoint + path
    assert m.procs_files() == [leaf + "/cgroup.procs"]
    # Controllers the root has are enabled down to the job.
    assert set(cat(leaf + "/cgroup.controllers").split()) == controllers()
    count = f"{tmp_path}/count"
    p = spawn(
        "sh",
        "-c",
        f"i=0; while :; do i=$((i+1)); echo $i > {count}; sleep 0.01; done",
        join=m.procs_files(),
    )
    assert m.wait_empty(0.05) is False
    assert p.pid in m.pids()
    assert "populated 1" in cat(leaf + "/cgroup.events")
    assert wait_for(lambda: os.path.exists(count)), "the loop never started"
    m.freeze()
    assert m.frozen() and "frozen 1" in cat(leaf + "/cgroup.events")
    time.sleep(0.05)
    stopped = cat(count)
    time.sleep(0.4)
    assert cat(count) == stopped
    m.thaw()
    assert not m.frozen()
    assert wait_for(lambda: cat(count) != stopped), "the loop never went on after thaw"
    m.kill_all(signal.SIGTERM)  # freeze, signal each, thaw
    assert p.wait(5) == -signal.SIGTERM
    assert m.wait_empty(5)
    m.destroy()
    assert leftovers(path) == []


def test_cgroup_kill_gets_forks_and_daemons(parent: str, spawn: Spawn) -> None:
    m = manager(f"{parent}/kill")
    m.create()
    storm = spawn("sh", "-c", "while :; do sleep 100 & sleep 0.01; done", join=m.procs_files())
    daemon = spawn(
        sys.executable,
        "-c",
        "import os, time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
        "time.sleep(600)",
        join=m.procs_files(),
    )
    assert daemon.wait(5) == 0
    time.sleep(0.3)
    pids = m.pids()
    assert len(pids) > 3
    m.kill_all(signal.SIGKILL)  # cgroup.kill
    assert m.wait_empty(5)
    assert storm.wait(5) == -signal.SIGKILL
    assert all(wait_gone(pid) for pid in pids)
    m.destroy()


def test_hugetlb_limits_and_stats(parent: str) -> None:
    if "hugetlb" not in controllers():
        pytest.skip("this cgroup2 hierarchy has no hugetlb controller")
    assert UNIFIED is not None
    m = manager(f"{parent}/huge")
    m.create(res({"hugepageLimits": [{"pageSize": "2MB", "limit": 6 << 20}]}))
    leaf = f"{UNIFIED.mountpoint}{parent}/huge"
    assert cat(leaf + "/hugetlb.2MB.max").strip() == str(6 << 20)
    if os.path.exists(leaf + "/hugetlb.2MB.rsvd.max"):
        assert cat(leaf + "/hugetlb.2MB.rsvd.max").strip() == str(6 << 20)
    m.update(res({"unified": {"hugetlb.1GB.max": "0"}}))
    assert cat(leaf + "/hugetlb.1GB.max").strip() == "0"
    s = m.stats()
    assert s["hugetlb"]["2MB"] == {"usage": 0, "max": 0, "failcnt": 0}
    assert s["cpu"]["usage"]["total"] == 0  # cpu.stat is core: it exists without the controller
    m.destroy()


def test_a_limit_whose_controller_is_missing(parent: str) -> None:
    missing = {"memory", "pids", "cpu"} - controllers()
    if not missing:
        pytest.skip("this cgroup2 hierarchy has every controller")
    controller = sorted(missing)[0]
    data = {
        "memory": {"memory": {"limit": 1 << 20}},
        "pids": {"pids": {"limit": 3}},
        "cpu": {"cpu": {"shares": 512}},
    }[controller]
    m = manager(f"{parent}/missing")
    with pytest.raises(MissingController, match=f"'{controller}'"):
        m.create(res(data))
    assert not m.exists()
    m.create()
    with pytest.raises(MissingController, match="'memory'"):
        m.oom_watcher()
    m.destroy()
