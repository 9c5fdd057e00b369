"""Scale: many detached job containers at once; `list`, `state` and
`events --stats` stay fast, and hostjob keeps no resident process per container.

20 containers normally, 200 with ``--long``. The timing bounds are loose (a loaded
2-core CI machine); ``bench/scale`` measures against runc.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from tests.helpers import Hostjob, base_config, cgroup_dirs, containers_left, new_id


def timed(hj: Hostjob, *args: str, rounds: int = 5) -> float:
    """Median wall time of a successful command, in seconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        hj.ok(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hostjob_processes(root: Path) -> list[str]:
    """Live processes whose command line names this state root: hostjob commands."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if str(root).encode() in argv:
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


def test_many_detached_containers(hj: Hostjob, bundle, request) -> None:
    n = 200 if request.config.getoption("--long") else 20
    b = bundle(base_config("sleep", "3600"))
    empty_list = timed(hj, "list")
    ids = [new_id("scale") for _ in range(n)]
    try:
        for cid in ids:
            hj.ok("run", "--detach", "--bundle", str(b), cid, stdin=open(os.devnull))  # noqa: SIM115
        # No monitor, shim or waiting hostjob per container: every command exited.
        assert hostjob_processes(hj.root) == []
        pids = []
        for state in json.loads(hj.ok("list", "--format", "json")):
            assert state["status"] == "running", state
            pids.append(state["pid"])
        assert len(pids) == n
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{ppid}/cmdline", "rb") as f:
                assert b"hostjob" not in f.read(), "a hostjob process is the init's parent"

        full_list = timed(hj, "list")
        json_list = timed(hj, "list", "--format", "json")
        state = timed(hj, "state", ids[n // 2])
        stats = timed(hj, "events", "--stats", ids[n // 2])
        per_container = (full_list - empty_list) / n
        report = (
            f"{n} containers: list {full_list * 1e3:.1f} ms (empty {empty_list * 1e3:.1f} ms,"
            f" {per_container * 1e6:.0f} us per container), list json {json_list * 1e3:.1f} ms,"
            f" state {state * 1e3:.1f} ms, events --stats {stats * 1e3:.1f} ms"
        )
        print(report)
        assert full_list < 1.0 and json_list < 1.0, report
        # reading a record and checking it is cheap (50 ms of slack for a noisy machine)
        assert full_list < empty_list + n * 0.002 + 0.05, report
        assert state < 0.5 and stats < 0.5, report
        # state and events --stats look at one container: they do not grow with n.
        assert state < empty_list * 3 + 0.1, report
    finally:
        for cid in ids:
            hj("delete", "--force", cid)
    for cid in ids:
        assert cgroup_dirs(f"/hostjob/{cid}") == []
    assert containers_left(hj.root) == []
