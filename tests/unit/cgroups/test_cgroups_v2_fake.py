"""The v2 manager against a fake cgroup2 tree that behaves like the kernel's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import hostjob.cgroups as cg
import hostjob.errors as cg_errors
from hostjob.cgroups.driver import open_manager
from hostjob.cgroups.resources import cpu_shares_to_weight
from hostjob.errors import CgroupError, ConfigError, MissingController
from hostjob.spec.resources import Resources
from tests.helpers import wait_for
from tests.unit.cgroups.fakefs import FakeCgroup2

Spawn = Callable[..., subprocess.Popen[bytes]]
PATH = "/hostjob/c1"


def res(data: dict[str, object]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


def manager(fake: FakeCgroup2, path: str = PATH) -> cg.Manager:
    return open_manager(path, root=fake.root)


def test_create_enables_controllers_down_the_tree(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    assert m.version == 2
    m.create()
    leaf = fake2.path(PATH)
    all_ctrls = "cpuset cpu io memory hugetlb pids"
    assert fake2.read(fake2.root, "cgroup.subtree_control").strip() == all_ctrls
    assert fake2.read(fake2.path("/hostjob"), "cgroup.subtree_control").strip() == all_ctrls
    # The leaf holds processes: it never delegates.
    assert fake2.read(leaf, "cgroup.subtree_control").strip() == ""
    assert fake2.read(leaf, "cgroup.controllers").strip() == all_ctrls
    for name in ("memory.max", "cpu.max", "io.max", "pids.max", "hugetlb.2MB.max", "cpuset.cpus"):
        assert os.path.exists(os.path.join(leaf, name)), name
    assert m.procs_files() == [leaf + "/cgroup.procs"]
    assert m.exists()


def test_controller_files_appear_only_when_enabled(fake2: FakeCgroup2) -> None:
    os.mkdir(fake2.path("/other"))
    fake2.populate(fake2.path("/other"))
    assert not os.path.exists(fake2.path("/other/memory.max"))
    manager(fake2, "/other/c").create()
    # Enabling at the root made the files appear in the existing sibling too.
    assert os.path.exists(fake2.path("/other/memory.max"))


def test_create_is_idempotent_and_cheap_the_second_time(fake2: FakeCgroup2) -> None:
    manager(fake2).create()
    fake2.writes.clear()
    manager(fake2).create()
    manager(fake2, "/hostjob/c2").create()
    assert fake2.writes == []  # controllers already there: reads only


def test_every_limit_lands_in_its_file(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    m.create(
        res(
            {
                "memory": {"limit": 256 << 20, "reservation": 128 << 20, "swap": 512 << 20},
                "cpu": {
                    "shares": 1024,
                    "quota": 50000,
                    "period": 200000,
                    "burst": 10000,
                    "cpus": "0-1",
                    "mems": "0",
                    "idle": 0,
                },
                "pids": {"limit": 64},
                "blockIO": {
                    "weight": 500,
                    "weightDevice": [{"major": 8, "minor": 0, "weight": 1000}],
                    "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}],
                    "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 0}],
                    "throttleReadIOPSDevice": [{"major": 8, "minor": 16, "rate": 100}],
                    "throttleWriteIOPSDevice": [{"major": 8, "minor": 16, "rate": 200}],
                },
                "hugepageLimits": [{"pageSize": "2MB", "limit": 4 << 20}],
                "unified": {"memory.high": "300000000"},
            }
        )
    )
    leaf = fake2.path(PATH)

    def f(name: str) -> str:
        return fake2.read(leaf, name).strip()

    assert f("memory.max") == str(256 << 20)
    assert f("memory.low") == str(128 << 20)
    assert f("memory.swap.max") == str(256 << 20)  # memory+swap minus memory
    assert f("memory.high") == "300000000"
    assert f("cpu.weight") == str(cpu_shares_to_weight(1024)) == "39"
    assert f("cpu.max") == "50000 200000"
    assert f("cpu.max.burst") == "10000"
    assert f("cpu.idle") == "0"
    assert (f("cpuset.cpus"), f("cpuset.mems")) == ("0-1", "0")
    assert f("pids.max") == "64"
    assert f("io.weight").splitlines() == ["default 4950", "8:0 10000"]
    assert f("io.max").splitlines() == [
        "8:0 rbps=1048576 wbps=max riops=max wiops=max",
        "8:16 rbps=max wbps=max riops=100 wiops=200",
    ]
    assert f("hugetlb.2MB.max") == f("hugetlb.2MB.rsvd.max") == str(4 << 20)


def test_bfq_takes_blkio_weights_unconverted(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pathlib

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", bfq=True)
    fake.install(monkeypatch)
    manager(fake).create(
        res({"blockIO": {"weight": 500, "weightDevice": [{"major": 8, "minor": 0, "weight": 20}]}})
    )
    assert fake.read(fake.path(PATH), "io.bfq.weight").split("\n")[:2] == ["default 500", "8:0 20"]
    assert fake.read(fake.path(PATH), "io.weight").strip() == "default 100"


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ({"limit": -1}, {"memory.max": "max", "memory.swap.max": "max"}),
        ({"limit": 1000, "swap": 1000}, {"memory.max": "1000", "memory.swap.max": "0"}),
        ({"limit": 1000, "swap": -1}, {"memory.max": "1000", "memory.swap.max": "max"}),
        ({"reservation": 77}, {"memory.low": "77", "memory.max": "max"}),
    ],
)
def test_memory_conversions(
    fake2: FakeCgroup2, memory: dict[str, int], expected: dict[str, str]
) -> None:
    manager(fake2).create(res({"memory": memory}))
    for name, value in expected.items():
        assert fake2.read(fake2.path(PATH), name).strip() == value, name


@pytest.mark.parametrize(("limit", "value"), [(0, "max"), (-1, "max"), (5, "5")])
def test_pids_limit(fake2: FakeCgroup2, limit: int, value: str) -> None:
    manager(fake2).create(res({"pids": {"limit": limit}}))
    assert fake2.read(fake2.path(PATH), "pids.max").strip() == value


def test_cpu_max_keeps_the_other_half(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    m.create(res({"cpu": {"quota": 30000, "period": 60000}}))
    m.update(res({"cpu": {"period": 90000}}))
    assert fake2.read(fake2.path(PATH), "cpu.max").strip() == "30000 90000"
    m.update(res({"cpu": {"quota": 20000}}))
    assert fake2.read(fake2.path(PATH), "cpu.max").strip() == "20000 90000"
    m.update(res({"cpu": {"quota": -1}}))
    assert fake2.read(fake2.path(PATH), "cpu.max").strip() == "max 90000"


def test_idle_cgroup_gets_no_weight(fake2: FakeCgroup2) -> None:
    manager(fake2).create(res({"cpu": {"idle": 1, "shares": 4096}}))
    assert fake2.read(fake2.path(PATH), "cpu.idle").strip() == "1"
    assert fake2.read(fake2.path(PATH), "cpu.weight").strip() == "100"


def test_missing_controller_needed_by_a_limit(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, warnings: list[str]
) -> None:
    import pathlib

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", controllers=("cpu", "memory"))
    fake.install(monkeypatch)
    m = manager(fake)
    with pytest.raises(MissingController, match=r"'pids' .* linux\.resources\.pids\.limit"):
        m.create(res({"pids": {"limit": 10}}))
    assert not os.path.exists(fake.path("/hostjob"))  # refused before any mkdir
    m.create(res({"memory": {"limit": 4096}}))
    missing = sorted(w.split("'")[1] for w in warnings)
    assert missing == ["cpuset", "io", "pids"]


def test_unified_keys(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    with pytest.raises(MissingController, match="'rdma'"):
        m.create(res({"unified": {"rdma.max": "mlx4_0 hca_handle=2"}}))
    with pytest.raises(ConfigError, match="not a cgroup file name"):
        m.create(res({"unified": {"../../x.y": "1"}}))
    m.create(res({"unified": {"pids.max": "7"}}))
    assert fake2.read(fake2.path(PATH), "pids.max").strip() == "7"


@pytest.mark.parametrize(
    "key", ["cgroup.procs", "cgroup.subtree_control", "cgroup.max.depth", "cgroup.kill"]
)
def test_unified_never_takes_cgroup_core_files(fake2: FakeCgroup2, spawn: Spawn, key: str) -> None:
    """Controller files only: `unified: {"cgroup.procs": PID}` would pull any process into the job
    (and have it killed with it); every cgroup.* file is refused, at create and at update,
    before anything is written."""
    victim = spawn()
    value = str(victim.pid)
    m = manager(fake2)
    with pytest.raises(ConfigError, match=r"cgroup core file, not a controller setting"):
        m.create(res({"unified": {key: value}}))
    assert not os.path.exists(fake2.path(PATH))
    m.create()
    before = fake2.read(fake2.path(PATH), "cgroup.procs")
    with pytest.raises(ConfigError, match=r"cgroup core file, not a controller setting"):
        m.update(res({"unified": {key: value}, "pids": {"limit": 9}}))
    assert fake2.read(fake2.path(PATH), "cgroup.procs") == before
    assert fake2.read(fake2.path(PATH), "pids.max").strip() == "max"  # nothing written
    assert victim.poll() is None


def test_unified_update_needs_the_controller_enabled_in_the_job(fake2: FakeCgroup2) -> None:
    """A controller file whose controller the job's cgroup lacks is refused at update."""
    from hostjob.cgroups import _fs

    m = manager(fake2)
    m.create()
    parent = _fs.Dir(fake2.path("/hostjob"))
    parent.write("cgroup.subtree_control", "-pids")
    parent.close()
    assert "pids" not in fake2.read(fake2.path(PATH), "cgroup.controllers").split()
    with pytest.raises(MissingController, match="'pids'"):
        m.update(res({"unified": {"pids.max": "5"}}))
    m.update(res({"unified": {"memory.high": "1048576"}}))
    assert fake2.read(fake2.path(PATH), "memory.high").strip() == "1048576"


def snapshot(top: str) -> dict[str, str]:
    out = {}
    for directory, _dirs, files in os.walk(top):
        for name in files:
            with open(os.path.join(directory, name)) as f:
                out[os.path.join(directory, name)] = f.read()
        out[directory] = "<dir>"
    return out


def test_an_existing_cgroup_is_never_adopted(fake2: FakeCgroup2, spawn: Spawn) -> None:
    """Never adopted: create(exclusive=True) of a cgroup someone else made, empty or not,
    raises CgroupExists and leaves it as it was: nothing written, killed or removed."""
    os.makedirs(fake2.path("/hostjob"))
    fake2.populate(fake2.path("/hostjob"))
    foreign = fake2.path(PATH)
    os.mkdir(foreign)
    fake2.populate(foreign)
    os.mkdir(os.path.join(foreign, "sub"))
    fake2.populate(os.path.join(foreign, "sub"))
    before = snapshot(fake2.root)
    m = manager(fake2)
    with pytest.raises(cg_errors.CgroupExists, match=r"cgroup /hostjob/c1 already exists"):
        m.create(res({"pids": {"limit": 3}}), exclusive=True)
    assert snapshot(fake2.root) == before  # nothing written, made or removed anywhere
    victim = spawn()
    fake2.move_pid(fake2.root, foreign, victim.pid)
    with pytest.raises(cg_errors.CgroupExists, match=rf"already holds processes \({victim.pid}\)"):
        raise cg_errors.CgroupExists(PATH, foreign, m.pids())
    with pytest.raises(cg_errors.CgroupExists):
        m.create(exclusive=True)
    assert victim.poll() is None and fake2.own_pids(foreign) == [victim.pid]
    # The same call on a new path makes it, as usual.
    manager(fake2, "/hostjob/c2").create(exclusive=True)
    assert os.path.isdir(fake2.path("/hostjob/c2"))


def test_bad_values_name_file_and_value_and_roll_back(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    with pytest.raises(
        CgroupError, match=r"cannot write '0' to .*/hostjob/c1/cpu\.weight: Invalid"
    ):
        m.create(res({"unified": {"cpu.weight": "0"}}))
    # Nothing this failed create made is left behind.
    assert not os.path.exists(fake2.path("/hostjob"))
    with pytest.raises(ConfigError, match=r"memory\.swap: a swap limit needs a memory limit"):
        m.create(res({"memory": {"swap": 4096}}))


def test_failed_update_keeps_an_existing_cgroup(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    with pytest.raises(CgroupError, match="does not exist"):
        m.update(res({"pids": {"limit": 3}}))
    m.create()
    with pytest.raises(CgroupError):
        m.update(res({"unified": {"memory.max": "lots"}}))
    assert m.exists()


def test_a_planted_symlink_is_not_followed(fake2: FakeCgroup2, tmp_path: object) -> None:
    import pathlib

    m = manager(fake2)
    m.create()
    outside = pathlib.Path(str(tmp_path)) / "outside"
    outside.write_text("keep\n")
    os.unlink(fake2.path(PATH + "/memory.max"))
    os.symlink(outside, fake2.path(PATH + "/memory.max"))
    with pytest.raises(CgroupError, match=r"memory\.max"):
        m.update(res({"memory": {"limit": 4096}}))
    assert outside.read_text() == "keep\n"


def test_add_pids_and_sub_cgroups(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    a, b = spawn(), spawn()
    m.add(a.pid)
    sub = fake2.path(PATH + "/sub")
    os.mkdir(sub)
    fake2.populate(sub)
    fake2.on_write(sub, "cgroup.procs", str(b.pid))
    assert m.pids() == sorted([a.pid, b.pid])
    a.kill()
    a.wait()
    assert m.pids() == [b.pid]
    with pytest.raises(CgroupError, match=r"cannot write '999999999' to .*cgroup\.procs"):
        m.add(999999999)


def test_freeze_thaw(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    m.add(spawn().pid)
    assert not m.frozen()
    m.freeze()
    assert m.frozen()
    assert "frozen 1" in fake2.read(fake2.path(PATH), "cgroup.events")
    m.thaw()
    assert not m.frozen()


def test_kill_all_sigkill_uses_cgroup_kill(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    p = spawn()
    m.add(p.pid)
    m.kill_all(signal.SIGKILL)
    assert p.wait(5) == -signal.SIGKILL
    assert [w for w in fake2.writes if "cgroup.freeze" in w[0]] == []
    assert m.wait_empty(1)


def test_kill_all_other_signals_freeze_signal_thaw(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    p = spawn()
    m.add(p.pid)
    fake2.writes.clear()
    m.kill_all(signal.SIGTERM)
    assert p.wait(5) == -signal.SIGTERM
    assert [(os.path.basename(f), v) for f, v in fake2.writes] == [
        ("cgroup.freeze", "1"),
        ("cgroup.freeze", "0"),
    ]


def test_sigkill_without_cgroup_kill(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, spawn: Spawn
) -> None:
    import pathlib

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", kill_file=False)
    fake.install(monkeypatch)
    m = manager(fake)
    m.create()
    p = spawn()
    m.add(p.pid)
    m.kill_all(signal.SIGKILL)
    assert p.wait(5) == -signal.SIGKILL
    assert ("cgroup.freeze", "1") in [(os.path.basename(f), v) for f, v in fake.writes]


def test_kill_all_on_a_paused_job_leaves_it_paused(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    m.add(spawn().pid)
    m.freeze()
    m.kill_all(signal.SIGCONT)
    assert m.frozen()


def test_wait_empty(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    assert m.wait_empty(0)
    p = spawn("sleep", "0.3")
    m.add(p.pid)
    assert not m.wait_empty(0.05)
    assert m.wait_empty(5)
    p.wait()


def test_terminate_escalates_to_sigkill(fake2: FakeCgroup2, spawn: Spawn, tmp_path: Path) -> None:
    m = manager(fake2)
    m.create()
    ready = tmp_path / "ignoring"
    stubborn = spawn(
        sys.executable,
        "-c",
        "import signal,time; signal.signal(15, signal.SIG_IGN);"
        f" open({str(ready)!r}, 'w').close(); time.sleep(60)",
    )
    # SIGTERM must find the handler in place: a fixed pause is too short on a slow host.
    assert wait_for(ready.exists, timeout=30)
    m.add(stubborn.pid)
    start = time.monotonic()
    assert m.terminate(grace=0.3)
    assert stubborn.wait(5) == -signal.SIGKILL
    assert time.monotonic() - start < 3


def test_destroy_kills_and_removes_everything(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create()
    p, q = spawn(), spawn()
    m.add(p.pid)
    sub = fake2.path(PATH + "/sub/deeper")
    os.makedirs(sub)
    fake2.populate(os.path.dirname(sub))
    fake2.populate(sub)
    fake2.on_write(sub, "cgroup.procs", str(q.pid))
    m.destroy()
    assert p.wait(5) == q.wait(5) == -signal.SIGKILL
    assert not os.path.exists(fake2.path(PATH))
    assert os.path.exists(fake2.path("/hostjob"))  # the shared parent stays, as with runc
    m.destroy()  # again: nothing to do, no error
    manager(fake2, "/hostjob/never-made").destroy()


def test_destroy_gives_up_on_unkillable_processes(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, spawn: Spawn
) -> None:
    import pathlib

    import hostjob.cgroups._manager as mgr

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", kill_file=False)
    fake.install(monkeypatch)
    m = manager(fake)
    m.create()
    p = spawn()
    m.add(p.pid)
    # As if the process sat in uninterruptible sleep: no signal gets through.
    monkeypatch.setattr(mgr, "signal_pidfd", lambda fd, pid, sig: None)
    start = time.monotonic()
    with pytest.raises(CgroupError, match=rf"cannot remove cgroup {PATH}: processes \[{p.pid}\]"):
        m.destroy(timeout=0.3)
    assert time.monotonic() - start < 3
    assert m.exists()


def test_stats(fake2: FakeCgroup2, spawn: Spawn) -> None:
    m = manager(fake2)
    m.create(res({"memory": {"limit": 1 << 30, "swap": 2 << 30}, "pids": {"limit": 50}}))
    m.add(spawn().pid)
    leaf = fake2.path(PATH)
    fake2.put(
        leaf,
        "cpu.stat",
        "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\n"
        "nr_periods 10\nnr_throttled 4\nthrottled_usec 700\n",
    )
    fake2.put(leaf, "memory.stat", "anon 100\nfile 200\nkernel 8\n")
    fake2.put(leaf, "memory.current", "300\n")
    fake2.put(leaf, "memory.peak", "900\n")
    fake2.put(leaf, "memory.swap.current", "50\n")
    fake2.put(leaf, "memory.events", "low 0\nhigh 0\nmax 6\noom 2\noom_kill 1\n")
    fake2.put(leaf, "io.stat", "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n")
    fake2.put(leaf, "hugetlb.2MB.current", "2097152\n")
    fake2.put(leaf, "hugetlb.2MB.events", "max 3\n")
    s = m.stats()
    json.dumps(s)
    assert s["cpu"] == {
        "usage": {
            "total": 5_000_000,
            "percpu": [],
            "percpu_kernel": [],
            "percpu_user": [],
            "kernel": 2_000_000,
            "user": 3_000_000,
        },
        "throttling": {"periods": 10, "throttledPeriods": 4, "throttledTime": 700_000},
    }
    mem = s["memory"]
    assert mem["cache"] == 200
    assert mem["raw"] == {"anon": 100, "file": 200, "kernel": 8}
    assert mem["usage"] == {"limit": 1 << 30, "usage": 300, "max": 900, "failcnt": 6}
    assert mem["swap"]["usage"] == 350 and mem["swap"]["limit"] == 2 << 30
    assert s["pids"] == {"current": 1, "limit": 50}
    assert s["blkio"]["ioServiceBytesRecursive"] == [
        {"major": 8, "minor": 0, "op": "Read", "value": 10},
        {"major": 8, "minor": 0, "op": "Write", "value": 20},
    ]
    assert s["blkio"]["ioServicedRecursive"][1] == {
        "major": 8,
        "minor": 0,
        "op": "Write",
        "value": 2,
    }
    assert s["hugetlb"]["2MB"] == {"usage": 2097152, "max": 0, "failcnt": 3}
    assert s["hugetlb"]["1GB"]["usage"] == 0
    assert s["oom_kill"] == m.oom_kill_count() == 1


def test_stats_without_controllers_and_limits(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pathlib

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", controllers=())
    fake.install(monkeypatch)
    m = manager(fake)
    m.create()
    s = m.stats()
    assert s["memory"]["usage"]["limit"] == 0 and s["pids"] == {"current": 0, "limit": 0}
    assert s["hugetlb"] == {} and m.oom_kill_count() == 0
    m.destroy()
    with pytest.raises(CgroupError, match="does not exist"):
        m.stats()


def test_oom_watcher(fake2: FakeCgroup2) -> None:
    m = manager(fake2)
    m.create(res({"memory": {"limit": 1 << 20}}))
    leaf = fake2.path(PATH)
    w = m.oom_watcher()
    assert w.fileno() >= 0
    assert w.wait(0.05) == 0
    fake2.put(leaf, "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    assert w.wait(2) == 2
    assert w.wait(0) == 0
    second = m.oom_watcher()  # counts from the moment it is made
    assert second.wait(0) == 0
    fake2.put(leaf, "memory.events", "low 0\nhigh 0\nmax 9\noom 3\noom_kill 3\n")
    assert second.wait(2) == 1
    second.close()
    m.destroy()
    assert w.wait(1) is None
    w.close()


def test_oom_watcher_needs_memory(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import pathlib

    fake = FakeCgroup2(pathlib.Path(str(tmp_path)) / "cg", controllers=("pids",))
    fake.install(monkeypatch)
    m = manager(fake)
    m.create()
    with pytest.raises(MissingController, match="'memory'"):
        m.oom_watcher()


def test_context_manager_closes_fds(fake2: FakeCgroup2) -> None:
    before = len(os.listdir("/proc/self/fd"))
    with manager(fake2) as m:
        m.create()
        m.stats()
    assert len(os.listdir("/proc/self/fd")) == before
