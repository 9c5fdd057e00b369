"""The v1 manager on this host's real v1 (hybrid) hierarchies: limits the kernel enforces."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from hostjob.errors import CgroupError
from hostjob.spec.resources import Resources
from tests.integration.cgroups.conftest import Spawn, cat, cgroups_of, gone, leftovers, wait_gone

pytestmark = pytest.mark.skipif(
    cg.detect().version != 1, reason="this host is not cgroup v1 (the v2 tests cover it)"
)

PY = sys.executable


def res(data: dict[str, object]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


def counter(path: str) -> tuple[str, ...]:
    """argv of a process that rewrites an ever-growing number into ``path`` every 10 ms."""
    code = (
        "import sys, time\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    open(sys.argv[1] + '.tmp', 'w').write(str(i))\n"
        "    __import__('os').replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
        "    time.sleep(0.01)\n"
    )
    return (PY, "-c", code, path)


def read_count(path: str) -> int:
    for _ in range(100):
        try:
            return int(cat(path))
        except (FileNotFoundError, ValueError):
            time.sleep(0.01)
    raise AssertionError(f"{path} never written")


def test_create_join_destroy_leaves_nothing(parent: str, spawn: Spawn) -> None:
    path = f"{parent}/c1"
    m = open_manager(path)
    m.create()
    m.create()  # idempotent
    roots = [h.mountpoint for h in cg.detect().hierarchies]
    for root in roots:
        assert os.path.isdir(root + path), root
    p = spawn(join=m.procs_files())
    # Every hierarchy, the named and the unified one included, has the process.
    assert cgroups_of(p.pid) == [path] * len(m.procs_files())
    assert m.pids() == [p.pid]
    m.destroy()
    assert p.wait(5) == -signal.SIGKILL
    assert leftovers(path) == []
    assert not m.exists()
    m.destroy()  # idempotent


def test_memory_limit_oom_kill_is_seen(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/oom")
    limit = 48 << 20
    m.create(res({"memory": {"limit": limit, "swap": limit}}))
    watcher = m.oom_watcher()
    hog = spawn(
        PY, "-c", "chunks = []\nwhile True: chunks.append(b'x' * (1 << 20))", join=m.procs_files()
    )
    assert hog.wait(60) == -signal.SIGKILL
    # The eventfd became readable...
    readable, _, _ = select.select([watcher.fileno()], [], [], 5)
    assert readable == [watcher.fileno()]
    # ...and the kill is counted.
    assert watcher.wait(5) == 1
    assert watcher.wait(0.1) == 0
    assert m.oom_kill_count() == 1
    stats = m.stats()
    assert stats["oom_kill"] == 1
    assert stats["memory"]["usage"]["limit"] == limit
    # The job reached its limit (this kernel's v1 failcnt stays 0 on OOM: not checked).
    assert stats["memory"]["usage"]["max"] >= limit - (4 << 20)
    watcher.close()
    m.destroy()


def test_an_oom_watcher_reports_none_once_the_cgroup_is_gone(parent: str) -> None:
    m = open_manager(f"{parent}/gone")
    m.create(res({"memory": {"limit": 64 << 20}}))
    watcher = m.oom_watcher()
    assert watcher.wait(0.05) == 0
    m2 = open_manager(f"{parent}/gone")
    m2.destroy()
    assert watcher.wait(2) is None
    watcher.close()
    m.close()


def test_pids_limit_makes_the_next_fork_fail(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/pids")
    m.create(res({"pids": {"limit": 5}}))
    forker = (
        "import os, sys, time\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "except BlockingIOError:\n"
        "    print(n, flush=True)\n"
        "time.sleep(60)\n"
    )
    p = spawn(PY, "-c", forker, join=m.procs_files(), stdout=subprocess.PIPE)
    assert p.stdout is not None
    # The forker is one of the 5: 4 children fit, the 5th fork fails.
    assert p.stdout.readline().strip() == b"4"
    assert m.stats()["pids"] == {"current": 5, "limit": 5}
    assert len(m.pids()) == 5
    m.destroy()
    assert leftovers(f"{parent}/pids") == []


def test_cpu_quota_bounds_cpu_usage(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/cpu")
    m.create(res({"cpu": {"quota": 20000, "period": 100000}}))
    spawn(PY, "-c", "while True: pass", join=m.procs_files())
    time.sleep(0.3)
    before = m.stats()["cpu"]["usage"]["total"]
    t0 = time.monotonic()
    time.sleep(1.0)
    used = (m.stats()["cpu"]["usage"]["total"] - before) / 1e9
    wall = time.monotonic() - t0
    # 20% of one CPU: well under half, yet it did run.
    assert 0.05 < used / wall < 0.35, used / wall
    throttling = m.stats()["cpu"]["throttling"]
    assert throttling["periods"] > 0 and throttling["throttledPeriods"] > 0
    assert throttling["throttledTime"] > 0
    m.destroy()


DAEMON = (
    "import os, sys, time\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): os._exit(0)\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(600)\n"
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_kill_all_gets_a_double_forked_daemon(
    parent: str, spawn: Spawn, tmp_path: object, sig: int
) -> None:
    m = open_manager(f"{parent}/daemon")
    m.create()
    pidfile = f"{tmp_path}/daemon.pid"
    launcher = spawn(PY, "-c", DAEMON, pidfile, join=m.procs_files())
    assert launcher.wait(10) == 0
    daemon = read_count(pidfile)
    assert os.getsid(daemon) != os.getsid(0)  # left our session
    assert m.pids() == [daemon]
    m.kill_all(sig)
    assert wait_gone(daemon)
    assert m.wait_empty(5)
    m.destroy()


# Every process forks for ever (a fork bomb the pids limit keeps at 64).
STORM = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        os.fork()\n"
    "    except BlockingIOError:\n"
    "        time.sleep(0.001)\n"
)


def test_kill_all_while_the_job_forks(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/storm")
    m.create(res({"pids": {"limit": 64}}))
    storm = spawn(PY, "-c", STORM, join=m.procs_files())
    time.sleep(0.3)
    assert len(m.pids()) > 5
    m.kill_all(signal.SIGTERM)  # v1: freeze, signal each, thaw
    assert m.wait_empty(10)
    assert storm.wait(5) == -signal.SIGTERM
    storm2 = spawn(PY, "-c", STORM, join=m.procs_files())
    time.sleep(0.3)
    m.kill_all(signal.SIGKILL)  # hybrid: cgroup.kill in the unified hierarchy
    assert m.wait_empty(10)
    assert storm2.wait(5) == -signal.SIGKILL
    m.destroy()
    assert leftovers(f"{parent}/storm") == []


def test_freeze_stops_the_job_and_thaw_resumes_it(
    parent: str, spawn: Spawn, tmp_path: object
) -> None:
    m = open_manager(f"{parent}/freeze")
    m.create()
    count = f"{tmp_path}/count"
    spawn(*counter(count), join=m.procs_files())
    first = read_count(count)
    time.sleep(0.1)
    assert read_count(count) > first
    m.freeze()
    assert m.frozen()
    time.sleep(0.05)
    stopped = read_count(count)
    time.sleep(0.5)
    assert read_count(count) == stopped
    m.thaw()
    assert not m.frozen()
    time.sleep(0.3)
    assert read_count(count) > stopped
    m.freeze()
    m.destroy()  # a paused job is destroyed too
    assert leftovers(f"{parent}/freeze") == []


def test_update_changes_limits_the_kernel_enforces(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/update")
    m.create(res({"pids": {"limit": 100}, "memory": {"limit": 256 << 20}}))
    spawn(join=m.procs_files())
    m.update(res({"pids": {"limit": 2}, "cpu": {"quota": 50000, "period": 100000}}))
    forker = (
        "import os\ntry:\n    os.fork() or os._exit(0)\n    print('forked')\n"
        "except BlockingIOError:\n    print('refused')\n"
    )
    out = spawn(PY, "-c", forker, join=m.procs_files(), stdout=subprocess.PIPE)
    assert out.communicate(timeout=10)[0].strip() == b"refused"
    m.update(res({"pids": {"limit": 10}}))
    out = spawn(PY, "-c", forker, join=m.procs_files(), stdout=subprocess.PIPE)
    assert out.communicate(timeout=10)[0].strip() == b"forked"
    cpu = cg.detect().hierarchy("cpu")
    assert cpu is not None
    quota = cat(f"{cpu.mountpoint}{parent}/update/cpu.cfs_quota_us").strip()
    assert quota == "50000"
    # A process holding 64 MiB: a 16 MiB limit cannot be met without swap.
    holder = spawn(
        PY,
        "-c",
        "import time\nx = b'x' * (64 << 20)\nprint('ready', flush=True)\ntime.sleep(60)",
        join=m.procs_files(),
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
    with pytest.raises(CgroupError, match=r"cannot set memory limit to 16777216: the job uses"):
        m.update(res({"memory": {"limit": 16 << 20}}))
    m.destroy()


def test_stats_have_every_field(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/stats")
    m.create(
        res(
            {
                "memory": {"limit": 128 << 20},
                "pids": {"limit": 32},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 4 << 20}],
            }
        )
    )
    p = spawn(
        PY, "-c", "x = b'y' * (8 << 20)\nfor i in range(3_000_000): pass\n", join=m.procs_files()
    )
    p.wait(30)
    spawn(join=m.procs_files())
    s = json.loads(json.dumps(m.stats()))
    assert set(s) == {"cpu", "memory", "pids", "blkio", "hugetlb", "oom_kill"}
    usage = s["cpu"]["usage"]
    assert usage["total"] > 0 and usage["user"] > 0
    assert len(usage["percpu"]) == len(usage["percpu_user"]) == os.cpu_count()
    assert set(s["cpu"]["throttling"]) == {"periods", "throttledPeriods", "throttledTime"}
    mem = s["memory"]
    assert mem["usage"]["limit"] == 128 << 20
    assert mem["usage"]["max"] >= 8 << 20
    assert set(mem) == {"cache", "usage", "swap", "kernel", "kernelTCP", "raw"}
    assert "total_rss" in mem["raw"]
    assert s["pids"] == {"current": 1, "limit": 32}
    assert set(s["blkio"]) >= {"ioServiceBytesRecursive", "ioServicedRecursive"}
    # hugetlb lives in the unified hierarchy on this host.
    assert s["hugetlb"]["2MB"] == {"usage": 0, "max": 0, "failcnt": 0}
    assert s["oom_kill"] == 0
    m.destroy()


def test_hugetlb_limit_goes_to_the_unified_hierarchy(parent: str) -> None:
    mounts = cg.detect()
    if mounts.hierarchy("hugetlb") is not None or mounts.unified is None:
        pytest.skip("hugetlb is a v1 controller on this host, not a unified-only one")
    m = open_manager(f"{parent}/huge")
    m.create(res({"hugepageLimits": [{"pageSize": "2MB", "limit": 4 << 20}]}))
    leaf = f"{mounts.unified.mountpoint}{parent}/huge"
    assert cat(f"{leaf}/hugetlb.2MB.max").strip() == str(4 << 20)
    m.update(res({"hugepageLimits": [{"pageSize": "2MB", "limit": 2 << 20}]}))
    assert cat(f"{leaf}/hugetlb.2MB.max").strip() == str(2 << 20)
    m.destroy()


def test_destroy_removes_sub_cgroups_the_job_made(parent: str, spawn: Spawn) -> None:
    path = f"{parent}/nest"
    m = open_manager(path)
    m.create()
    q = spawn(join=m.procs_files())
    sub = open_manager(f"{path}/inner/deeper")
    sub.create()  # as a job managing its own sub-cgroups would
    p = spawn(join=sub.procs_files())
    assert m.pids() == sorted([p.pid, q.pid])
    m.destroy()
    assert p.wait(5) == q.wait(5) == -signal.SIGKILL
    assert leftovers(path) == []


def test_terminate_gives_sigterm_then_sigkill(parent: str, spawn: Spawn) -> None:
    m = open_manager(f"{parent}/term")
    m.create()
    polite = spawn(join=m.procs_files())
    stubborn = spawn(
        PY,
        "-c",
        "import signal, time\nsignal.signal(15, signal.SIG_IGN)\nprint('ok', flush=True)\n"
        "time.sleep(60)",
        join=m.procs_files(),
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ok\n"
    assert m.terminate(grace=0.5)
    assert polite.wait(5) == -signal.SIGTERM
    assert stubborn.wait(5) == -signal.SIGKILL
    assert gone(stubborn.pid)
    m.destroy()
