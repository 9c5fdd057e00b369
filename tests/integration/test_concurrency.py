"""Concurrency: commands on one ID are serialised, on different IDs
they run in parallel, and races between verbs end in a consistent state."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import (
    Hostjob,
    alive,
    base_config,
    cgroup_dirs,
    containers_left,
    hostjob_env,
    mounts_under,
    new_id,
)


def spawn(hj: Hostjob, *args: str) -> tuple[subprocess.Popen[str], object, object]:
    """Start a hostjob command without waiting (output to temp files, not pipes)."""
    out = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by finish)
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115
    proc = subprocess.Popen(
        hj.argv(*args), stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
        env=hostjob_env(),
    )  # fmt: skip
    return proc, out, err


def finish(started: tuple[subprocess.Popen[str], object, object]) -> tuple[int, str]:
    proc, out, err = started
    code = proc.wait(timeout=60)
    err.seek(0)  # type: ignore[attr-defined]
    text = err.read()  # type: ignore[attr-defined]
    out.close()  # type: ignore[attr-defined]
    err.close()  # type: ignore[attr-defined]
    return code, text


def assert_clean(hj: Hostjob, cid: str, mount_point: Path | None = None) -> None:
    assert not (hj.root / cid).exists(), "state directory left"
    assert cgroup_dirs(f"/hostjob/{cid}") == [], "cgroup left"
    if mount_point is not None:
        assert mounts_under(str(mount_point)) == [], "mount left"
        assert not mount_point.exists(), "mount point left"


def consistent_then_gone(hj: Hostjob, cid: str, mount_point: Path | None = None) -> str:
    """`state` answers sensibly; `delete --force` then removes everything."""
    state = hj("state", cid)
    if state.returncode == 0:
        status = json.loads(state.stdout)["status"]
        assert status in ("created", "running", "stopped"), status
    else:
        assert state.stderr.strip() == "container does not exist", state.stderr
        status = "gone"
    hj.ok("delete", "--force", cid)
    assert_clean(hj, cid, mount_point)
    return status


def test_parallel_creates_of_one_id(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("sleep", "300")
    mp = tmp_path / "mp"
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mp)}}
    b = bundle(config)
    cid = new_id()
    started = [spawn(hj, "create", "--bundle", str(b), cid) for _ in range(20)]
    results = [finish(s) for s in started]
    winners = [r for r in results if r[0] == 0]
    losers = [r for r in results if r[0] != 0]
    assert len(winners) == 1, results
    assert winners[0][1] == ""
    for code, err in losers:
        assert code == 1
        assert err.strip() == "container with given ID already exists", err
    # The winner's container is whole: created, its process waiting, one cgroup.
    state = hj.state(cid)
    assert state["status"] == "created"
    with open(f"/proc/{state['pid']}/cgroup") as f:
        assert f"/hostjob/{cid}" in f.read()
    assert sorted(os.listdir(hj.root / cid)) == ["exec.fifo", "state.json"]
    hj.ok("start", cid)
    assert hj.status(cid) == "running"
    hj.ok("delete", "--force", cid)
    assert_clean(hj, cid, mp)


def test_parallel_lifecycles_of_different_ids(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("sleep", "300"))

    def lifecycle(cid: str) -> str:
        for args in (("create", "--bundle", str(b), cid), ("start", cid), ("kill", cid, "KILL")):
            result = hj(*args)
            if result.returncode != 0 or result.stderr:
                return f"{args[0]} {cid}: {result.returncode} {result.stderr}"
        deadline = time.monotonic() + 20
        while json.loads(hj.ok("state", cid))["status"] != "stopped":
            if time.monotonic() > deadline:
                return f"{cid} did not stop"
            time.sleep(0.02)
        result = hj("delete", cid)
        if result.returncode != 0:
            return f"delete {cid}: {result.stderr}"
        return ""

    ids = [new_id() for _ in range(50)]
    with ThreadPoolExecutor(max_workers=50) as pool:
        failures = [f for f in pool.map(lifecycle, ids) if f]
    assert failures == []
    for cid in ids:
        assert_clean(hj, cid)
    assert containers_left(hj.root) == []


@pytest.mark.parametrize("delete_args", [("delete",), ("delete", "--force")])
def test_delete_racing_start(hj: Hostjob, bundle, tmp_path: Path, delete_args) -> None:
    config = base_config("sleep", "300")
    mp = tmp_path / "mp"
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(mp)}}
    b = bundle(config)
    outcomes = set()
    for i in range(12):
        cid = new_id()
        hj.ok("create", "--bundle", str(b), cid)
        pid = hj.state(cid)["pid"]
        first, second = ("start", cid), (*delete_args, cid)
        if i % 2:
            first, second = second, first
        a = spawn(hj, *first)
        if i % 3 == 0:
            time.sleep(0.005 * i)
        c = spawn(hj, *second)
        (code_a, err_a), (code_c, err_c) = finish(a), finish(c)
        start_result, delete_result = ((code_a, err_a), (code_c, err_c))
        if i % 2:
            start_result, delete_result = delete_result, start_result
        for code, err in (start_result, delete_result):
            assert code == 0 or (code == 1 and len(err.strip().splitlines()) == 1), err
            assert "Traceback" not in err
        if start_result[0] != 0:
            assert start_result[1].strip() in (
                "container does not exist",
                "cannot start a container that has stopped",
            ), start_result
        if delete_result[0] != 0:
            assert delete_result[1].strip() == (
                f"cannot delete container {cid} that is not stopped: running"
            ), delete_result
        outcomes.add((start_result[0], delete_result[0]))
        consistent_then_gone(hj, cid, mp)
        assert not alive(pid), "the container process outlived delete --force"
    assert outcomes  # each round ended consistently, whichever verb won


def test_kill_racing_the_inits_exit(hj: Hostjob, bundle) -> None:
    """The init exits on its own while `kill` (and `kill --all`) race it."""
    b = bundle(base_config("sh", "-c", "exit 0"))
    outcomes: set[tuple[int, str]] = set()
    for i in range(15):
        cid = new_id()
        hj.ok("create", "--bundle", str(b), cid)
        hj.ok("start", cid)
        if i % 3 == 1:
            time.sleep(0.002 * i)
        kill = ("kill", "--all", cid, "KILL") if i % 3 == 2 else ("kill", cid, "TERM")
        result = hj(*kill)
        err = result.stderr.strip()
        assert result.returncode == 0 or err == "container not running", err
        outcomes.add((result.returncode, err))
        deadline = time.monotonic() + 10
        while hj.status(cid) != "stopped":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        hj.ok("kill", "--all", cid, "KILL")  # on a stopped container: succeeds
        assert "container not running" in hj.fail("kill", cid, "TERM")
        hj.ok("delete", cid)
        assert_clean(hj, cid)


def test_commands_on_one_id_are_serialised(hj: Hostjob, bundle) -> None:
    """pause/resume/kill/state/delete from many processes at once on one container."""
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    hj.ok("start", cid)
    verbs = [("pause", cid), ("resume", cid), ("state", cid), ("kill", cid, "CONT")] * 5
    started = [spawn(hj, *v) for v in verbs]
    for code, err in (finish(s) for s in started):
        assert code == 0 or err.strip() in ("container already paused", "container not paused"), err
        assert "Traceback" not in err
    if hj.status(cid) == "paused":
        hj.ok("resume", cid)
    assert hj.status(cid) == "running"
    racers = [spawn(hj, "delete", "--force", cid) for _ in range(5)]
    for code, err in (finish(s) for s in racers):
        assert code == 0 or err.strip() == "container does not exist", err
    assert_clean(hj, cid)
