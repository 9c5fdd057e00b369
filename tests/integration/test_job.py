"""The job through the CLI on this host's real cgroups: limits the kernel enforces,
accounting, kill-all, pause/resume, update, ps, events, stats, and the end of the job."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    CGROUP_V2,
    Hostjob,
    alive,
    base_config,
    cgroup_dirs,
    ext4_mount,
    hostjob_env,
    job_file,
    make_bundle,
    new_id,
    wait_for,
)

LOOP = "while :; do sleep 0.05; done"


def detached(hj: Hostjob, bundle, config: dict, name: str = "bundle") -> str:  # type: ignore[no-untyped-def, type-arg]
    cid = new_id()
    hj.ok("run", "-d", "-b", str(bundle(config, name)), cid)
    return cid


def test_memory_limit_oom_kills_and_reports(hj: Hostjob, bundle, tmp_path: Path) -> None:
    hog = "import time; b = []\nwhile True: b.append(bytearray(4 << 20)); time.sleep(0.001)"
    config = base_config("sh", "-c", f"{LOOP}")
    config["linux"] = {"resources": {"memory": {"limit": 64 << 20, "swap": 64 << 20}}}
    cid = detached(hj, bundle, config)
    events = subprocess.Popen(
        hj.argv("events", "--interval", "1s", cid),
        stdout=subprocess.PIPE,
        text=True,
        env=hostjob_env(),
    )
    try:
        time.sleep(0.5)
        result = hj("exec", cid, "/usr/bin/python3", "-c", hog, timeout=60)
        assert result.returncode == 128 + 9, result  # the OOM killer's SIGKILL
        seen = []
        deadline = time.monotonic() + 20
        assert events.stdout is not None
        while time.monotonic() < deadline:
            line = events.stdout.readline()
            event = json.loads(line)
            seen.append(event["type"])
            if event["type"] == "oom":
                assert event["id"] == cid
                break
        assert "oom" in seen, seen
    finally:
        events.kill()
        events.wait()
        if events.stdout:
            events.stdout.close()
    stats = json.loads(hj.ok("stats", "--json", "--interval", "0", cid))
    assert stats["oomKills"] >= 1
    assert stats["memory"]["limit"] == 64 << 20
    hj.ok("delete", "--force", cid)


def test_pids_limit_stops_the_extra_fork(hj: Hostjob, bundle) -> None:
    config = base_config("sleep", "300")
    config["linux"] = {"resources": {"pids": {"limit": 5}}}
    cid = detached(hj, bundle, config)
    # init (1) + this shell (1) + 3 sleeps = 5: the 4th background sleep must fail.
    script = "for i in 1 2 3; do sleep 30 & done; sleep 30 & echo $?; wait"
    result = hj(
        "exec",
        cid,
        "sh",
        "-c",
        "for i in 1 2 3; do sleep 30 & done; if sleep 30 & then :; fi; wait; echo done",
        timeout=60,
    )
    del script
    assert "Resource temporarily unavailable" in result.stderr or "fork" in result.stderr.lower(), (
        result
    )
    hj.ok("delete", "--force", cid)


def test_cpu_quota_bounds_usage(hj: Hostjob, bundle) -> None:
    config = base_config("sh", "-c", "while :; do :; done")
    config["linux"] = {"resources": {"cpu": {"quota": 20000, "period": 100000}}}
    cid = detached(hj, bundle, config)
    time.sleep(0.3)
    stats = json.loads(hj.ok("stats", "--json", "--interval", "2s", cid))
    assert stats["cpuPercent"] is not None
    assert stats["cpuPercent"] < 35, stats  # 20 % of one CPU, with scheduling slack
    assert stats["cpuPercent"] > 5, stats  # and it did run
    hj.ok("delete", "--force", cid)


def test_kill_all_reaches_double_forked_daemons(hj: Hostjob, bundle, tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    config = base_config("sleep", "300")
    cid = detached(hj, bundle, config)
    daemonize = f"setsid sh -c 'sh -c \"echo \\$\\$ > {pid_file}; exec sleep 300\" &' </dev/null >/dev/null 2>&1"
    hj.ok("exec", cid, "sh", "-c", daemonize)
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit())
    daemon = int(pid_file.read_text())
    assert alive(daemon)
    with open(f"/proc/{daemon}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    assert fields[1] == "1" or fields[1] != str(hj.state(cid)["pid"])  # re-parented: left the init
    assert daemon in json.loads(hj.ok("ps", "--format", "json", cid))
    hj.ok("kill", "--all", cid, "KILL")
    assert wait_for(lambda: not alive(daemon))
    hj.ok("delete", "--force", cid)


def test_pause_freezes_and_resume_thaws(hj: Hostjob, bundle, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    config = base_config(
        "sh", "-c", f"i=0; while :; do i=$((i+1)); echo $i > {counter}; sleep 0.02; done"
    )
    cid = detached(hj, bundle, config)
    assert wait_for(lambda: counter.exists() and counter.read_text().strip() != "")
    hj.ok("pause", cid)
    assert hj.status(cid) == "paused"
    time.sleep(0.2)
    frozen = counter.read_text()
    time.sleep(0.5)
    assert counter.read_text() == frozen, "a paused job kept running"
    assert "paused" in hj.fail("exec", cid, "true")
    assert "already paused" in hj.fail("pause", cid)
    hj.ok("resume", cid)
    assert hj.status(cid) == "running"
    assert wait_for(lambda: counter.read_text() != frozen)
    assert "not paused" in hj.fail("resume", cid)
    hj.ok("pause", cid)
    hj.ok("kill", "--all", cid, "KILL")  # even frozen processes die
    assert wait_for(lambda: hj.status(cid) == "stopped")
    hj.ok("delete", cid)


def test_delete_force_of_a_paused_container(hj: Hostjob, bundle) -> None:
    cid = detached(hj, bundle, base_config("sleep", "300"))
    hj.ok("pause", cid)
    hj.ok("delete", "--force", cid)
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_update_changes_an_enforced_limit(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = detached(hj, bundle, base_config("sleep", "300"))
    fork_three = "sleep 30 & sleep 30 & sleep 30 & wait"
    assert hj("exec", cid, "sh", "-c", "sleep 0.1 & sleep 0.1 & sleep 0.1 & wait").returncode == 0
    hj.ok("update", "--pids-limit", "3", cid)
    result = hj("exec", cid, "sh", "-c", fork_three, timeout=60)
    assert "fork" in result.stderr.lower() or "unavailable" in result.stderr, result
    resources = tmp_path / "resources.json"
    resources.write_text(json.dumps({"pids": {"limit": 100}, "memory": {"limit": 128 << 20}}))
    hj.ok("update", "--resources", str(resources), cid)
    assert hj("exec", cid, "sh", "-c", "sleep 0.1 & sleep 0.1 & sleep 0.1 & wait").returncode == 0
    stats = json.loads(hj.ok("stats", "--json", "--interval", "0", cid))
    assert stats["pids"]["limit"] == 100 and stats["memory"]["limit"] == 128 << 20
    assert hj.ok("update", "--memory", "96m", cid) == ""
    stats = json.loads(hj.ok("stats", "--json", "--interval", "0", cid))
    assert stats["memory"]["limit"] == 96 << 20
    assert "needs --resources" in hj.fail("update", cid)
    assert "invalid --memory" in hj.fail("update", "--memory", "lots", cid)
    resources.write_text('{"memory": {"limit": "1g"}}')
    assert "resources.memory.limit" in hj.fail("update", "-r", str(resources), cid)
    hj.ok("delete", "--force", cid)


def test_events_stats_shape(hj: Hostjob, bundle) -> None:
    config = base_config("sleep", "300")
    config["linux"] = {"resources": {"memory": {"limit": 256 << 20}, "pids": {"limit": 50}}}
    cid = detached(hj, bundle, config)
    lines = hj.ok("events", "--stats", cid).splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "stats" and event["id"] == cid
    data = event["data"]
    for key in ("cpu", "memory", "pids", "blkio", "hugetlb"):
        assert key in data, key
    assert {"total", "percpu", "kernel", "user"} <= set(data["cpu"]["usage"])
    assert {"periods", "throttledPeriods", "throttledTime"} <= set(data["cpu"]["throttling"])
    assert {"limit", "usage", "max", "failcnt"} <= set(data["memory"]["usage"])
    assert data["memory"]["usage"]["limit"] == 256 << 20
    assert data["pids"] == {"current": 1, "limit": 50}
    assert "ioServiceBytesRecursive" in data["blkio"]
    hj.ok("delete", "--force", cid)


def test_stats_table(hj: Hostjob, bundle) -> None:
    cid = detached(hj, bundle, base_config("sleep", "300"))
    table = hj.ok("stats", "--interval", "0.2s", cid)
    for label in (
        "CPU %",
        "MEMORY",
        "MEMORY PEAK",
        "PIDS",
        "IO READ / WRITE",
        "OOM KILLS",
        "UPTIME",
    ):
        assert label in table, label
    hj.ok("delete", "--force", cid)


def test_ps_table_and_json(hj: Hostjob, bundle) -> None:
    # "; wait": a shell that runs its last command in its own place (busybox sh) stays
    cid = detached(hj, bundle, base_config("sh", "-c", "sleep 300 & sleep 300; wait"))
    assert wait_for(lambda: len(json.loads(hj.ok("ps", "--format", "json", cid))) == 3)
    table = hj.ok("ps", cid).splitlines()
    assert table[0].split()[:2] == ["UID", "PID"] and len(table) == 4
    assert "sleep 300" in "\n".join(table)
    wide = hj.ok("ps", cid, "-o", "pid,comm").splitlines()
    assert wide[0].split() == ["PID", "COMMAND"] and len(wide) == 4
    hj.ok("delete", "--force", cid)


def test_detached_job_ends_at_delete_with_sigterm_first(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    marker = tmp_path / "daemon-term"
    daemon = f"setsid sh -c 'trap \"echo term > {marker}; exit 0\" TERM; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &"
    cid = detached(hj, bundle, base_config("sh", "-c", daemon))
    assert wait_for(lambda: hj.status(cid) == "stopped")  # the init left; the daemon lives on
    assert json.loads(hj.ok("ps", "--format", "json", cid))  # ... and is still in the job
    hj.ok("delete", cid, env={"HOSTJOB_STOP_GRACE": "5"})
    assert marker.read_text() == "term\n"  # got SIGTERM (and exited before SIGKILL)
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_foreground_run_ends_the_job(hj: Hostjob, bundle, tmp_path: Path) -> None:
    stubborn = tmp_path / "stubborn.pid"
    daemon = f"setsid sh -c 'trap \"\" TERM; echo $$ > {stubborn}; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 & sleep 0.3; exit 3"
    started = time.monotonic()
    result = hj(
        "run",
        "-b",
        str(bundle(base_config("sh", "-c", daemon))),
        new_id(),
        env={"HOSTJOB_STOP_GRACE": "1"},
    )
    assert result.returncode == 3
    assert time.monotonic() - started < 15
    assert not alive(int(stubborn.read_text()))  # ignored SIGTERM, got SIGKILL after the grace


CPUS = os.cpu_count() or 1


@pytest.mark.parametrize(
    ("windows", "expect"),
    [
        # (v1 controller, file, value), (v2 file, value): the same limit on either host
        (
            {"cpu": {"count": 1}},
            [(("cpu", "cpu.cfs_quota_us"), "100000", "cpu.max", "100000 100000")],
        ),
        (
            {"cpu": {"maximum": 5000}},
            [
                (
                    ("cpu", "cpu.cfs_quota_us"),
                    str(5000 * CPUS * 10),
                    "cpu.max",
                    f"{5000 * CPUS * 10} 100000",
                )
            ],
        ),
        (
            {"memory": {"limit": 100 << 20}},
            [(("memory", "memory.limit_in_bytes"), str(100 << 20), "memory.max", str(100 << 20))],
        ),
    ],
)
def test_windows_resources(hj: Hostjob, bundle, windows: dict, expect: list) -> None:  # type: ignore[type-arg]
    config = base_config("sleep", "300")
    config["windows"] = {"resources": windows}
    cid = detached(hj, bundle, config)
    for v1, v1_value, v2, v2_value in expect:
        wanted = v2_value if CGROUP_V2 else v1_value
        assert job_file(f"/hostjob/{cid}", v1, v2).read_text().strip() == wanted
    hj.ok("delete", "--force", cid)


@pytest.fixture
def block_device(tmp_path: Path) -> Iterator[Path]:
    """An ext4 filesystem on a loop device, mounted: a writable layer on a real block
    device (tmpfs, where /tmp often is, has none)."""
    with ext4_mount(tmp_path, 64 << 20) as mnt:
        yield mnt


def test_windows_storage_limits_the_writable_layers_device(hj: Hostjob, block_device: Path) -> None:
    config = base_config("sleep", "300")
    config["windows"] = {"resources": {"storage": {"iops": 500, "bps": 10 << 20}}}
    b = make_bundle(block_device / "bundle", config)
    dev = os.stat(b / "rootfs").st_dev
    assert os.major(dev) != 0  # a real block device
    cid = new_id()
    hj.ok("run", "-d", "-b", str(b), cid)
    device = f"{os.major(dev)}:{os.minor(dev)}"
    if CGROUP_V2:
        limits = job_file(f"/hostjob/{cid}", ("blkio", ""), "io.max").read_text()
        assert f"{device} rbps={10 << 20} wbps={10 << 20} riops=500 wiops=500" in limits
    else:
        base = f"/sys/fs/cgroup/blkio/hostjob/{cid}"
        assert f"{device} 500" in Path(f"{base}/blkio.throttle.read_iops_device").read_text()
        assert f"{device} {10 << 20}" in Path(f"{base}/blkio.throttle.write_bps_device").read_text()
    hj.ok("delete", "--force", cid)


def test_windows_storage_on_no_block_device_is_named_once(hj: Hostjob, tmp_path: Path) -> None:
    tmpfs = tmp_path / "tmpfs"
    tmpfs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(tmpfs)], check=True)
    try:
        config = base_config("true")
        config["windows"] = {"resources": {"storage": {"iops": 500}}}
        b = make_bundle(tmpfs / "bundle", config)
        hj.ok("run", "-b", str(b), new_id())
    finally:
        subprocess.run(["umount", str(tmpfs)], check=True)
    assert hj.log is not None
    logged = hj.log.read_text()
    assert (
        logged.count(
            "windows.resources.storage is ignored: the writable layer is on no block device"
        )
        == 1
    )


def test_windows_cpu_settings_are_exclusive(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["windows"] = {"resources": {"cpu": {"count": 1, "maximum": 100}}}
    assert "mutually exclusive" in hj.fail("create", "-b", str(bundle(config)), new_id())


def test_no_cgroup_left_after_delete(hj: Hostjob, bundle) -> None:
    config = base_config("sleep", "300")
    config["linux"] = {"resources": {"memory": {"limit": 64 << 20}, "cpu": {"shares": 512}}}
    cid = detached(hj, bundle, config)
    made = cgroup_dirs(f"/hostjob/{cid}")
    assert len(made) == 1 if CGROUP_V2 else len(made) >= 5, made  # one a hierarchy
    hj.ok("delete", "--force", cid)
    assert cgroup_dirs(f"/hostjob/{cid}") == []
    for parent in cgroup_dirs("/hostjob"):
        assert any(entry.is_dir() for entry in os.scandir(parent)), f"empty {parent} left behind"


@pytest.mark.parametrize("pids_limit", [None, 8])
def test_delete_force_ends_a_job_whose_init_left_children(
    hj: Hostjob, bundle, pids_limit: int | None
) -> None:
    """The init exits and is reaped while its children live on in its session: its pid
    is free, but still names their session and process group -- where kernels up to 6.1
    answer a pidfd_open of it with EINVAL, not ESRCH. delete --force kills every process
    of the job's cgroup and removes it all the same."""
    config = base_config("sh", "-c", "sleep 300 & sleep 300 & sleep 300 & exit 0")
    if pids_limit is not None:
        config["linux"] = {"resources": {"pids": {"limit": pids_limit}}}
    cid = new_id()
    b = bundle(config)
    hj.ok("create", "-b", str(b), cid)
    init = hj.state(cid)["pid"]
    hj.ok("start", cid)
    assert wait_for(lambda: not alive(init), 10)  # reaped by our subreaper or PID 1
    assert wait_for(
        lambda: len(hj.ok("ps", "--format", "json", cid).strip("[]\n").split(",")) >= 3, 10
    )
    children = json.loads(hj.ok("ps", "--format", "json", cid))
    assert hj.status(cid) == "stopped" and children
    hj.ok("delete", "--force", cid)
    assert wait_for(lambda: not any(alive(pid) for pid in children), 10)
    assert cgroup_dirs(f"/hostjob/{cid}") == []
