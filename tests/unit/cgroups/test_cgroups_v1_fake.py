"""The v1 manager against a fake v1 tree (co-mounted cpu,cpuacct; BFQ-only blkio)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Callable

import pytest

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from hostjob.errors import CgroupError, ConfigError, MissingController
from hostjob.spec.resources import Resources
from tests.unit.cgroups.fakefs import FakeCgroup1, FakeCgroup2

Spawn = Callable[..., subprocess.Popen[bytes]]
PATH = "/hostjob/c1"


def res(data: dict[str, object]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


def manager(fake: FakeCgroup1, path: str = PATH) -> cg.Manager:
    return open_manager(path, root=fake.root)


def test_create_makes_the_cgroup_in_every_hierarchy(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    assert m.version == 1
    m.create()
    for h in fake1.hierarchies:
        assert os.path.isdir(fake1.path(h, PATH)), h
    assert len(m.procs_files()) == len(fake1.hierarchies) == 9
    # cpu and cpuacct share one directory.
    from hostjob.cgroups.v1 import V1Manager

    assert isinstance(m, V1Manager)
    assert m.dir("cpu") is m.dir("cpuacct")


def test_cpuset_is_initialised_from_the_root(fake1: FakeCgroup1, spawn: Spawn) -> None:
    m = manager(fake1)
    m.create()
    for path in ("/hostjob", PATH):
        assert fake1.read(fake1.path("cpuset", path), "cpuset.cpus").strip() == "0-1"
        assert fake1.read(fake1.path("cpuset", path), "cpuset.mems").strip() == "0"
    # Parents hostjob makes let the kernel fill in the next container's cpuset.
    assert fake1.read(fake1.path("cpuset", "/hostjob"), "cgroup.clone_children") == "1"
    m.add(spawn().pid)  # the fake refuses with ENOSPC on an empty cpuset
    fake1.writes.clear()
    manager(fake1, "/hostjob/c2").create()
    assert not [w for w in fake1.writes if "cpuset." in w[0]]


def test_joining_an_uninitialised_cpuset_fails(fake1: FakeCgroup1, spawn: Spawn) -> None:
    for h in fake1.hierarchies:  # made by hand, cpuset left empty
        os.makedirs(fake1.path(h, "/raw"))
        fake1.populate(fake1.path(h, "/raw"))
    m = manager(fake1, "/raw")
    with pytest.raises(CgroupError, match=r"cpuset/raw/cgroup\.procs: No space left"):
        m.add(spawn().pid)
    m.create()  # fills in the existing, empty cgroup
    m.add(spawn().pid)


def test_memory_and_swap_are_written_in_a_kernel_acceptable_order(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    mem = fake1.path("memory", PATH)

    def limits() -> tuple[int, int]:
        return (
            int(fake1.read(mem, "memory.limit_in_bytes")),
            int(fake1.read(mem, "memory.memsw.limit_in_bytes")),
        )

    m.create(res({"memory": {"limit": 100 << 20, "swap": 200 << 20}}))
    assert limits() == (100 << 20, 200 << 20)
    m.update(res({"memory": {"limit": 300 << 20, "swap": 400 << 20}}))  # swap first
    assert limits() == (300 << 20, 400 << 20)
    m.update(res({"memory": {"limit": 50 << 20, "swap": 60 << 20}}))  # limit first
    assert limits() == (50 << 20, 60 << 20)
    m.update(res({"memory": {"limit": -1}}))  # lifts swap too
    assert limits() == (9223372036854771712, 9223372036854771712)


def test_memory_other_settings(fake1: FakeCgroup1) -> None:
    manager(fake1).create(
        res(
            {
                "memory": {
                    "reservation": 1 << 20,
                    "kernelTCP": 1 << 22,
                    "swappiness": 0,
                    "disableOOMKiller": True,
                }
            }
        )
    )
    mem = fake1.path("memory", PATH)
    assert fake1.read(mem, "memory.soft_limit_in_bytes") == str(1 << 20)
    assert fake1.read(mem, "memory.kmem.tcp.limit_in_bytes") == str(1 << 22)
    assert fake1.read(mem, "memory.swappiness") == "0"
    assert fake1.read(mem, "memory.oom_control") == "1"


def test_swap_without_swap_accounting(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    m.create()
    os.unlink(fake1.path("memory", PATH + "/memory.memsw.limit_in_bytes"))
    m.update(res({"memory": {"limit": -1}}))  # nothing to lift: fine
    with pytest.raises(CgroupError, match="no swap accounting"):
        m.update(res({"memory": {"limit": 1 << 20, "swap": 2 << 20}}))


def test_cpu(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    m.create(
        res(
            {
                "cpu": {
                    "shares": 512,
                    "quota": 20000,
                    "period": 50000,
                    "burst": 1000,
                    "idle": 0,
                    "realtimePeriod": 500000,
                    "realtimeRuntime": 1000,
                    "cpus": "1",
                    "mems": "0",
                }
            }
        )
    )
    cpu = fake1.path("cpu,cpuacct", PATH)
    got = {
        name: fake1.read(cpu, name).strip()
        for name in (
            "cpu.shares",
            "cpu.cfs_quota_us",
            "cpu.cfs_period_us",
            "cpu.cfs_burst_us",
            "cpu.idle",
            "cpu.rt_period_us",
            "cpu.rt_runtime_us",
        )
    }
    assert got == {
        "cpu.shares": "512",
        "cpu.cfs_quota_us": "20000",
        "cpu.cfs_period_us": "50000",
        "cpu.cfs_burst_us": "1000",
        "cpu.idle": "0",
        "cpu.rt_period_us": "500000",
        "cpu.rt_runtime_us": "1000",
    }
    assert fake1.read(fake1.path("cpuset", PATH), "cpuset.cpus").strip() == "1"


@pytest.mark.parametrize(("shares", "bound"), [(1, "minimum allowed is 2"), (10**6, "maximum")])
def test_cpu_shares_out_of_range(fake1: FakeCgroup1, shares: int, bound: str) -> None:
    with pytest.raises(CgroupError, match=f"cpu shares {shares} are out of range: the {bound}"):
        manager(fake1).create(res({"cpu": {"shares": shares}}))


def test_pids_blkio_hugetlb(fake1: FakeCgroup1) -> None:
    manager(fake1).create(
        res(
            {
                "pids": {"limit": 12},
                "blockIO": {
                    "weight": 300,
                    "weightDevice": [{"major": 8, "minor": 0, "weight": 700}],
                    "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1000}],
                    "throttleWriteIOPSDevice": [{"major": 8, "minor": 0, "rate": 0}],
                },
                "hugepageLimits": [{"pageSize": "2MB", "limit": 2097152}],
            }
        )
    )
    assert fake1.read(fake1.path("pids", PATH), "pids.max") == "12"
    blkio = fake1.path("blkio", PATH)
    assert fake1.read(blkio, "blkio.bfq.weight") == "300"  # no CFQ here: BFQ's file
    assert fake1.read(blkio, "blkio.bfq.weight_device") == "8:0 700\n"
    assert fake1.read(blkio, "blkio.throttle.read_bps_device") == "8:0 1000\n"
    assert fake1.read(blkio, "blkio.throttle.write_iops_device") == "8:0 0\n"
    assert fake1.read(fake1.path("hugetlb", PATH), "hugetlb.2MB.limit_in_bytes") == "2097152"


def test_update_needs_the_cgroup(fake1: FakeCgroup1) -> None:
    with pytest.raises(CgroupError, match=r"cgroup /hostjob/c1 does not exist"):
        manager(fake1).update(res({"pids": {"limit": 3}}))


def test_unified_is_refused_on_v1(fake1: FakeCgroup1) -> None:
    with pytest.raises(ConfigError, match=r"unified: cgroup v2 files cannot be set"):
        manager(fake1).create(res({"unified": {"memory.high": "1"}}))


def test_missing_controllers(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, warnings: list[str]
) -> None:
    fake = FakeCgroup1(tmp_path / "cg", hierarchies=("cpu", "cpuacct", "memory"), systemd=False)
    fake.install(monkeypatch)
    m = manager(fake)
    with pytest.raises(MissingController, match=r"'pids' .* linux\.resources\.pids\.limit"):
        m.create(res({"pids": {"limit": 3}}))
    assert not os.path.exists(fake.path("memory", "/hostjob"))
    m.create(res({"pids": {"limit": -1}}))  # "no limit" needs no controller
    assert sorted(w.split("'")[1] for w in warnings) == ["blkio", "cpuset", "freezer", "pids"]
    with pytest.raises(MissingController, match="'freezer'"):
        m.freeze()


def test_freeze_thaw_and_kill_through_the_freezer(fake1: FakeCgroup1, spawn: Spawn) -> None:
    m = manager(fake1)
    m.create()
    p = spawn()
    m.add(p.pid)
    m.freeze()
    assert m.frozen()
    m.thaw()
    assert not m.frozen()
    fake1.writes.clear()
    m.kill_all(signal.SIGTERM)
    assert p.wait(5) == -signal.SIGTERM
    assert [v for f, v in fake1.writes if f.endswith("freezer.state")] == ["FROZEN", "THAWED"]


def test_kill_without_a_freezer_chases_forks_in_rounds(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, spawn: Spawn
) -> None:
    fake = FakeCgroup1(tmp_path / "cg", hierarchies=("cpuset", "memory"), systemd=False)
    fake.install(monkeypatch)
    m = manager(fake)
    m.create()
    procs = [spawn() for _ in range(3)]
    for p in procs:
        m.add(p.pid)
    m.kill_all(signal.SIGKILL)
    assert [p.wait(5) for p in procs] == [-signal.SIGKILL] * 3
    m.destroy()
    assert not os.path.exists(fake.path("memory", PATH))


def test_hybrid_hugetlb_and_kill_go_through_cgroup2(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, spawn: Spawn
) -> None:
    # This VM's layout: no v1 hugetlb, a cgroup2 at unified/ that has it.
    fake = FakeCgroup1(tmp_path / "cg", hierarchies=("cpu", "cpuacct", "memory", "freezer"))
    fake.install(monkeypatch)
    unified = FakeCgroup2(tmp_path / "cg" / "unified", controllers=("hugetlb",))
    monkeypatch.setattr(
        fake, "owns", lambda path: path.startswith(fake.root) and not unified.owns(path)
    )
    unified.install(monkeypatch)
    # Chain the hooks: unified's for its tree, the v1 fake's for the rest.
    from hostjob.cgroups import _fs

    v2_hooks = {n: getattr(_fs, n) for n in ("mkdir", "rmdir", "read_at", "write_at", "read_path")}
    fake.install(monkeypatch)
    v1_hooks = {n: getattr(_fs, n) for n in v2_hooks}

    def route(name: str) -> Callable[..., object]:
        def call(*args: object) -> object:
            first = args[0]
            path = first if isinstance(first, str) else os.readlink(f"/proc/self/fd/{first}")
            hooks = v2_hooks if unified.owns(path) else v1_hooks
            return hooks[name](*args)

        return call

    for name in v2_hooks:
        monkeypatch.setattr(_fs, name, route(name))

    m = manager(fake)
    m.create(res({"hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}))
    leaf = unified.path(PATH)
    assert unified.read(leaf, "hugetlb.2MB.max").strip() == "0"
    assert m.procs_files()[-1] == leaf + "/cgroup.procs"
    p = spawn()
    m.add(p.pid)
    assert unified.own_pids(leaf) == [p.pid]
    assert "2MB" in m.stats()["hugetlb"]
    m.kill_all(signal.SIGKILL)
    assert p.wait(5) == -signal.SIGKILL
    assert any(f.endswith("cgroup.kill") for f, _v in unified.writes)
    m.destroy()
    assert not os.path.exists(leaf)
    assert not os.path.exists(fake.path("memory", PATH))


def test_stats(fake1: FakeCgroup1, spawn: Spawn) -> None:
    m = manager(fake1)
    m.create(res({"memory": {"limit": 1 << 30}, "pids": {"limit": 9}}))
    m.add(spawn().pid)
    cpu = fake1.path("cpu,cpuacct", PATH)
    fake1.put(cpu, "cpuacct.usage", "9000\n")
    fake1.put(cpu, "cpuacct.usage_percpu", "4000 5000 \n")
    fake1.put(cpu, "cpuacct.usage_all", "cpu user system\n0 3000 1000\n1 4000 1000\n")
    fake1.put(cpu, "cpu.stat", "nr_periods 7\nnr_throttled 2\nthrottled_time 555\n")
    mem = fake1.path("memory", PATH)
    fake1.put(mem, "memory.stat", "cache 10\nrss 20\ntotal_cache 10\n")
    fake1.put(mem, "memory.usage_in_bytes", "30\n")
    fake1.put(mem, "memory.max_usage_in_bytes", "40\n")
    fake1.put(mem, "memory.failcnt", "2\n")
    fake1.put(mem, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    blkio = fake1.path("blkio", PATH)
    fake1.put(
        blkio,
        "blkio.throttle.io_service_bytes_recursive",
        "8:0 Read 100\n8:0 Write 200\n8:0 Sync 0\n8:0 Async 300\n8:0 Total 300\nTotal 300\n",
    )
    fake1.put(blkio, "blkio.throttle.io_serviced_recursive", "8:0 Read 1\n8:0 Write 2\nTotal 3\n")
    hugetlb = fake1.path("hugetlb", PATH)
    fake1.put(hugetlb, "hugetlb.2MB.usage_in_bytes", "2097152\n")
    fake1.put(hugetlb, "hugetlb.2MB.max_usage_in_bytes", "4194304\n")
    s = m.stats()
    assert s["cpu"]["usage"] == {
        "total": 9000,
        "percpu": [4000, 5000],
        "percpu_kernel": [1000, 1000],
        "percpu_user": [3000, 4000],
        "kernel": 2000,
        "user": 7000,
    }
    assert s["cpu"]["throttling"] == {"periods": 7, "throttledPeriods": 2, "throttledTime": 555}
    assert s["memory"]["cache"] == 10
    assert s["memory"]["usage"] == {"limit": 1 << 30, "usage": 30, "max": 40, "failcnt": 2}
    assert s["memory"]["swap"]["limit"] == 9223372036854771712
    assert s["oom_kill"] == m.oom_kill_count() == 4
    assert s["pids"] == {"current": 1, "limit": 9}
    assert [(e["op"], e["value"]) for e in s["blkio"]["ioServiceBytesRecursive"]] == [
        ("Read", 100),
        ("Write", 200),
        ("Sync", 0),
        ("Async", 300),
    ]
    assert len(s["blkio"]["ioServicedRecursive"]) == 2
    assert s["hugetlb"]["2MB"] == {"usage": 2097152, "max": 4194304, "failcnt": 0}


def test_cpuacct_stat_fallback(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    m.create()
    cpu = fake1.path("cpu,cpuacct", PATH)
    os.unlink(os.path.join(cpu, "cpuacct.usage_all"))
    fake1.put(cpu, "cpuacct.stat", "user 3\nsystem 1\n")
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    usage = m.stats()["cpu"]["usage"]
    assert (usage["user"], usage["kernel"]) == (3 * tick, tick)


def test_blkio_stats_prefer_bfq_then_cfq(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    m.create()
    blkio = fake1.path("blkio", PATH)
    fake1.put(blkio, "blkio.io_service_bytes_recursive", "8:16 Read 5\nTotal 5\n")
    fake1.put(blkio, "blkio.io_serviced_recursive", "8:16 Read 1\n")
    fake1.put(blkio, "blkio.sectors_recursive", "8:16 12\n")
    s = m.stats()
    assert s["blkio"]["ioServiceBytesRecursive"] == [
        {"major": 8, "minor": 16, "op": "Read", "value": 5}
    ]
    assert s["blkio"]["sectorsRecursive"] == [{"major": 8, "minor": 16, "op": "", "value": 12}]
    fake1.put(blkio, "blkio.bfq.io_service_bytes_recursive", "8:0 Write 9\n")
    assert m.stats()["blkio"]["ioServiceBytesRecursive"][0]["value"] == 9


def test_oom_watcher_registers_an_eventfd(fake1: FakeCgroup1) -> None:
    m = manager(fake1)
    m.create(res({"memory": {"limit": 1 << 20}}))
    mem = fake1.path("memory", PATH)
    w = m.oom_watcher()
    efd, _ofd = (int(x) for x in fake1.read(mem, "cgroup.event_control").split())
    assert efd == w.fileno()
    assert w.wait(0.05) == 0
    fake1.put(mem, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    os.eventfd_write(w.fileno(), 1)  # what the kernel does on OOM
    assert w.wait(2) == 2
    m.destroy()
    assert w.wait(1) is None
    w.close()


def test_destroy_removes_every_hierarchy_and_sub_cgroups(fake1: FakeCgroup1, spawn: Spawn) -> None:
    m = manager(fake1)
    m.create()
    p = spawn()
    m.add(p.pid)
    sub = fake1.path("memory", PATH + "/sub")
    os.mkdir(sub)
    fake1.populate(sub)
    m.destroy()
    assert p.wait(5) == -signal.SIGKILL
    for h in fake1.hierarchies:
        assert not os.path.exists(fake1.path(h, PATH)), h
    m.destroy()


def test_create_failure_removes_what_it_made(fake1: FakeCgroup1) -> None:
    with pytest.raises(CgroupError):
        manager(fake1).create(res({"cpu": {"shares": 1}}))
    for h in fake1.hierarchies:
        assert not os.path.exists(fake1.path(h, "/hostjob")), h


@pytest.mark.parametrize("hierarchy", ["memory", "systemd", "cpu,cpuacct"])
def test_an_existing_cgroup_in_one_hierarchy_is_never_adopted(
    fake1: FakeCgroup1, hierarchy: str
) -> None:
    """Never adopted: create(exclusive=True) when the cgroup exists in a single hierarchy (a
    named one included) raises CgroupExists; the directories this call made in the
    other hierarchies are removed again, the existing one is left as it was."""
    from hostjob.errors import CgroupExists

    foreign = fake1.path(hierarchy, PATH)
    os.makedirs(foreign)
    fake1.populate(foreign)
    m = manager(fake1)
    with pytest.raises(CgroupExists, match=rf"cgroup {PATH} already exists \({foreign}\)"):
        m.create(res({"pids": {"limit": 3}}), exclusive=True)
    assert os.path.isdir(foreign)
    assert [w for w in fake1.writes if w[0].startswith(foreign)] == []
    for h in fake1.hierarchies:
        if h != hierarchy:
            assert not os.path.exists(fake1.path(h, PATH)), h
    m.create()  # not exclusive: adopted (what hostjob's runtime never asks for)
    assert all(os.path.isdir(fake1.path(h, PATH)) for h in fake1.hierarchies)
