"""Host daemons from images: `run -d IMAGE` under its watcher -- the CRI log
and `logs` with each flag, rotation, exit status and OOM kills in `list`/`state`,
`stop`, restart policies with their back-off, the job surviving its watcher's
SIGKILL, `run -d --rm`, `generate systemd`, `stats` of every running container --
each leaving nothing behind (state, mounts, cgroups, writable layer, log, watcher)."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from hostjob.units import parse_rfc3339_ns
from tests.helpers import (
    BUSYBOX,
    Hostjob,
    alive,
    cgroup_dirs,
    containers_left,
    hostjob_env,
    image_leftovers,
    new_id,
    wait_for,
)

RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) (F|P) (.*)$")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    src = tmp_path_factory.mktemp("daemon-src")
    (src / "bin").mkdir()
    (src / "bin" / "busybox").write_bytes(Path(BUSYBOX).read_bytes())
    (src / "bin" / "busybox").chmod(0o755)
    for applet in ("sh", "echo", "sleep", "cat", "yes", "head", "seq", "kill", "true"):
        (src / "bin" / applet).symlink_to("busybox")
    layout = tmp_path_factory.mktemp("daemon-layout")
    pack(str(src), f"oci:{layout}:v1", entrypoint=["/bin/sh", "-c"], env=["PATH=/bin"])
    pack(str(src), f"oci:{layout}:quit", entrypoint=["/bin/sh", "-c"], env=["PATH=/bin"],
         stop_signal="SIGQUIT")  # fmt: skip
    return f"oci:{layout}"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "store")


class Daemons:
    """`hostjob run -d` of the test image, and what a container leaves behind."""

    def __init__(self, hj: Hostjob, image: str, store: str) -> None:
        self.hj, self.image, self.store = hj, image, store

    def run(self, script: str, *flags: str, tag: str = "v1") -> str:
        cid = new_id("d")
        out = self.hj.ok(
            "run", "-d", "-q", "--store", self.store, "--name", cid, *flags,
            f"{self.image}:{tag}", script,
        )  # fmt: skip
        assert out == f"{cid}\n"
        return cid

    def state(self, cid: str) -> dict:  # type: ignore[type-arg]
        return self.hj.state(cid)

    def listed(self, cid: str) -> dict:  # type: ignore[type-arg]
        return next(c for c in json.loads(self.hj.ok("list", "--format", "json")) if c["id"] == cid)

    def record(self, cid: str) -> dict:  # type: ignore[type-arg]
        return json.loads((self.hj.root / cid / "state.json").read_text())  # type: ignore[no-any-return]

    def watcher(self, cid: str) -> int:
        return int(self.record(cid)["watcher"][0])

    def logs(self, cid: str, *flags: str) -> subprocess.CompletedProcess[str]:
        result = self.hj("logs", *flags, cid)
        assert result.returncode == 0, result.stderr
        return result

    def stopped(self, cid: str) -> bool:
        return self.hj.status(cid) == "stopped" and self.listed(cid)["watcher"] == "gone"

    def log_dir(self, cid: str) -> Path:
        return Path(self.store) / "logs" / cid

    def leftovers(self, cid: str, watcher: int | None = None) -> list[str]:
        return image_leftovers(self.hj.root, Path(self.store), cid, watcher)

    def delete(self, cid: str) -> None:
        watcher = self.watcher(cid)
        self.hj.ok("delete", "--force", cid)
        assert self.leftovers(cid, watcher) == []


@pytest.fixture
def daemons(hj: Hostjob, image: str, store: str) -> Daemons:
    return Daemons(hj, image, store)


# --- the log and `logs` -----------------------------------------------------------------


def test_stdout_and_stderr_go_to_the_cri_log(daemons: Daemons) -> None:
    cid = daemons.run(
        "for i in 1 2 3; do echo out $i; echo err $i >&2; done; echo -n no-newline; sleep 300"
    )
    assert wait_for(
        lambda: "err 3" in daemons.logs(cid).stderr and "out 3" in daemons.logs(cid).stdout
    )
    result = daemons.logs(cid)
    # The line without a newline waits for the rest while its program runs (containerd's way).
    assert result.stdout == "out 1\nout 2\nout 3\n"
    assert result.stderr == "err 1\nerr 2\nerr 3\n"
    # The files: root's alone, in the store, in the CRI format (kubelet, podman k8s-file).
    log_dir = daemons.log_dir(cid)
    assert oct(log_dir.stat().st_mode & 0o777) == "0o700"
    current = log_dir / "container.log"
    assert oct(current.stat().st_mode & 0o777) == "0o600"
    lines = current.read_text().splitlines()
    assert all(RECORD.match(line) for line in lines), lines
    assert [RECORD.match(line).group(1, 2, 3) for line in lines if "out 2" in line or "err 2" in line] == [  # type: ignore[union-attr]
        ("stdout", "F", "out 2"), ("stderr", "F", "err 2"),
    ]  # fmt: skip
    assert not any(" P " in line for line in lines)
    daemons.hj.ok("stop", "-t", "1", cid)
    lines = current.read_text().splitlines()
    assert lines[-1].endswith(" stdout P no-newline")  # its program ended: written as P
    assert daemons.logs(cid).stdout == "out 1\nout 2\nout 3\nno-newline"
    daemons.delete(cid)


def test_logs_flags(daemons: Daemons, tmp_path: Path) -> None:
    # Line 21 comes once the watcher has stamped line 20 (a line's time is when the
    # watcher reads it: on a slow host a fixed pause is no guarantee of two stamps).
    go = tmp_path / "go"
    cid = daemons.run(
        f"for i in $(seq 1 20); do echo line $i; done; while [ ! -e {go} ]; do sleep 0.1; done;"
        " sleep 0.1; echo line 21; sleep 0.1; echo oops >&2; sleep 300"
    )
    assert wait_for(lambda: "line 20" in daemons.logs(cid).stdout)
    go.touch()
    assert wait_for(lambda: "oops" in daemons.logs(cid).stderr)
    assert daemons.logs(cid, "--tail", "3").stdout == "line 20\nline 21\n"
    assert daemons.logs(cid, "--tail", "3").stderr == "oops\n"  # lines of both streams count
    assert daemons.logs(cid, "--tail", "1").stdout == ""
    assert daemons.logs(cid, "--tail", "all").stdout.count("\n") == 21
    assert daemons.logs(cid, "--tail", "0").stdout == ""
    stamped = daemons.logs(cid, "--timestamps", "--tail", "2").stdout.splitlines()
    assert len(stamped) == 1
    when, text = stamped[0].split(" ", 1)
    assert text == "line 21" and parse_rfc3339_ns(when) is not None
    assert daemons.logs(cid, "-t").stdout.count("Z line ") == 21
    # --since: a duration ago, an RFC 3339 time, Unix seconds.
    assert daemons.logs(cid, "--since", "10m").stdout.count("\n") == 21
    assert daemons.logs(cid, "--since", "2000-01-01T00:00:00Z").stdout.count("\n") == 21
    assert daemons.logs(cid, "--since", when).stdout == "line 21\n"
    assert daemons.logs(cid, "--since", when).stderr == "oops\n"
    later = str(time.time() + 3600)
    assert daemons.logs(cid, "--since", later).stdout == ""
    assert "--tail" in daemons.hj.fail("logs", "--tail", "many", cid)
    assert "invalid time" in daemons.hj.fail("logs", "--since", "whenever", cid)
    daemons.delete(cid)


def test_logs_follow_until_the_container_stops(daemons: Daemons) -> None:
    cid = daemons.run("echo first; sleep 1; for i in $(seq 1 5); do echo n $i; sleep 0.1; done")
    follower = subprocess.run(
        daemons.hj.argv("logs", "-f", cid), capture_output=True, text=True, timeout=60,
        env=hostjob_env(),
    )  # fmt: skip
    assert follower.returncode == 0, follower.stderr
    assert follower.stdout == "first\n" + "".join(f"n {i}\n" for i in range(1, 6))
    daemons.delete(cid)


def test_rotation_and_follow_across_rotations(daemons: Daemons) -> None:
    # Numbered lines, slowly enough that a follower keeps up through many rotations (10
    # files of 2 KiB hold ~250 lines: 2.5 s of them, should the follower be held up).
    script = "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo line-$i-padding-padding-padding; case $i in *0|*5) sleep 0.05;; esac; done"
    cid = daemons.run("sleep 1; " + script, "--log-max-size", "2k", "--log-max-files", "10")
    follower = subprocess.Popen(
        daemons.hj.argv("logs", "-f", cid), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=hostjob_env(),
    )  # fmt: skip
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    numbers = [int(line.split("-")[1]) for line in out.splitlines()]
    assert numbers == list(range(1, 401))  # every line, in order, across the rotations
    files = sorted(os.listdir(daemons.log_dir(cid)))
    assert files == sorted(["container.log", *(f"container.log.{i}" for i in range(1, 10))])
    for name in files:
        assert (daemons.log_dir(cid) / name).stat().st_size <= 2048
    kept = [int(line.split("-")[1]) for line in daemons.logs(cid).stdout.splitlines()]
    assert kept == list(range(kept[0], 401)) and kept[0] > 1  # the oldest rotated away
    daemons.delete(cid)


def test_logs_of_a_container_without_a_log(daemons: Daemons, hj: Hostjob, image: str) -> None:
    cid = new_id()
    hj.ok("run", "-q", "--store", daemons.store, "--name", cid, f"{image}:v1", "true")
    assert "keeps no log" in hj.fail("logs", cid)
    assert "does not exist" in hj.fail("logs", "nosuch")
    hj.ok("delete", cid)


# --- exit status ------------------------------------------------------------------------


def test_exit_codes_and_signals_in_list_and_state(daemons: Daemons) -> None:
    code = daemons.run("exit 7")
    killed = daemons.run("kill -9 $$")
    for cid in (code, killed):
        assert wait_for(lambda cid=cid: daemons.stopped(cid))  # type: ignore[misc]
    listed = daemons.listed(code)
    assert listed["exitCode"] == 7 and "exitSignal" not in listed and not listed["oomKilled"]
    created, finished = parse_rfc3339_ns(listed["created"]), parse_rfc3339_ns(listed["finishedAt"])
    assert created is not None and finished is not None and finished >= created
    state = daemons.state(killed)
    assert (state["exitCode"], state["exitSignal"]) == (137, "SIGKILL")
    assert state["restartPolicy"] == "no" and state["restartCount"] == 0
    table = daemons.hj.ok("list").splitlines()
    assert table[0].split()[-4:] == ["EXIT", "FINISHED", "RESTARTS", "WATCHER"]
    row = next(line for line in table if line.startswith(killed))
    assert "137 (SIGKILL)" in row and listed["finishedAt"] != "" and "stopped" in row
    assert listed["finishedAt"] in next(line for line in table if line.startswith(code))
    for cid in (code, killed):
        daemons.delete(cid)


def test_an_oom_killed_job_says_so(daemons: Daemons) -> None:
    # A string that doubles until the job's 16 MiB are gone.
    cid = daemons.run("x=xxxxxxxxxxxxxxxx; while :; do x=$x$x; done", "--memory", "16m")
    assert wait_for(lambda: daemons.stopped(cid), timeout=60)
    state = daemons.state(cid)
    assert state["oomKilled"] is True and state["exitSignal"] == "SIGKILL", state
    assert "OOMKilled" in next(
        row for row in daemons.hj.ok("list").splitlines() if row.startswith(cid)
    )
    daemons.delete(cid)


def test_foreground_run_that_keeps_its_container_records_the_exit(
    hj: Hostjob, image: str, store: str
) -> None:
    cid = new_id()
    assert hj("run", "-q", "--store", store, "--name", cid, f"{image}:v1", "exit 5").returncode == 5
    state = hj.state(cid)
    assert state["exitCode"] == 5 and "restartCount" not in state and "watcher" not in state
    hj.ok("delete", cid)


# --- stop ---------------------------------------------------------------------------------


def test_stop_kills_a_daemon_that_ignores_sigterm_after_the_timeout(daemons: Daemons) -> None:
    # It only prints on TERM, and a child of its own ignores TERM: the whole job goes.
    cid = daemons.run(
        "sh -c \"trap '' TERM; sleep 300\" & trap 'echo got TERM' TERM; while :; do sleep 0.1; done"
    )
    assert wait_for(lambda: daemons.state(cid)["status"] == "running")
    watcher = daemons.watcher(cid)
    pid = daemons.state(cid)["pid"]
    assert daemons.hj.ok("stop", "-t", "1", cid) == f"{cid}\n"
    assert not alive(pid)
    state = daemons.state(cid)
    assert state["status"] == "stopped" and state["exitSignal"] == "SIGKILL", state
    assert "got TERM" in daemons.logs(cid).stdout  # TERM came first, then KILL
    assert not alive(watcher) and cgroup_dirs(f"/hostjob/{cid}")  # the job is kept, empty
    assert json.loads(daemons.hj.ok("ps", "--format", "json", cid)) == []
    assert daemons.hj.ok("stop", cid) == f"{cid}\n"  # stopped already: fine
    assert "does not exist" in daemons.hj.fail("stop", "nosuch")
    daemons.delete(cid)


def test_stop_uses_the_images_stop_signal_and_stops_several(daemons: Daemons) -> None:
    script = "trap 'echo got QUIT; exit 0' QUIT; trap 'echo got USR1; exit 0' USR1; while :; do sleep 0.1; done"
    from_image = daemons.run(script, tag="quit")
    from_flag = daemons.run(script, "--stop-signal", "USR1", tag="quit")
    for cid in (from_image, from_flag):
        assert wait_for(lambda cid=cid: daemons.state(cid)["status"] == "running")  # type: ignore[misc]
    out = daemons.hj.ok("stop", from_image, from_flag)
    assert out.split() == [from_image, from_flag]
    assert daemons.logs(from_image).stdout == "got QUIT\n"
    assert daemons.logs(from_flag).stdout == "got USR1\n"
    assert daemons.state(from_image)["exitCode"] == 0
    for cid in (from_image, from_flag):
        daemons.delete(cid)


# --- restart policies ---------------------------------------------------------------------


def starts(daemons: Daemons, cid: str) -> list[int]:
    """When each run of the program began (its "start" line), in nanoseconds."""
    lines = daemons.logs(cid, "--timestamps").stdout.splitlines()
    return [
        parse_rfc3339_ns(line.split(" ", 1)[0]) or 0 for line in lines if line.endswith(" start")
    ]


def test_on_failure_restarts_n_times_with_a_growing_back_off(daemons: Daemons) -> None:
    cid = daemons.run("echo start; exit 3", "--restart", "on-failure:4")
    assert wait_for(lambda: daemons.stopped(cid), timeout=60)
    state = daemons.state(cid)
    assert state["restartCount"] == 4 and state["exitCode"] == 3
    assert state["restartPolicy"] == "on-failure:4"
    begun = starts(daemons, cid)
    assert len(begun) == 5  # the first run and 4 restarts
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(begun)]
    for gap, least in zip(gaps, (0.1, 0.2, 0.4, 0.8), strict=True):
        assert gap >= least * 0.9, gaps  # 100 ms, doubled each time
    row = next(line for line in daemons.hj.ok("list").splitlines() if line.startswith(cid))
    assert row.split()[-1] == "4"  # RESTARTS (WATCHER is empty once it is done)
    daemons.delete(cid)


def test_on_failure_does_not_restart_a_clean_exit_and_no_never_restarts(daemons: Daemons) -> None:
    clean = daemons.run("echo start; exit 0", "--restart", "on-failure")
    never = daemons.run("echo start; exit 1")
    for cid in (clean, never):
        assert wait_for(lambda cid=cid: daemons.stopped(cid))  # type: ignore[misc]
        assert daemons.state(cid)["restartCount"] == 0 and len(starts(daemons, cid)) == 1
        daemons.delete(cid)


def test_always_restarts_until_stop_and_stop_ends_it(daemons: Daemons) -> None:
    cid = daemons.run("echo start; sleep 0.2; exit 0", "--restart", "always")
    assert wait_for(lambda: daemons.state(cid)["restartCount"] >= 2)
    daemons.hj.ok("stop", "-t", "2", cid)
    count = daemons.state(cid)["restartCount"]
    assert daemons.stopped(cid)
    time.sleep(1.5)  # a restart would have come by now (its back-off is below 1 s)
    assert daemons.state(cid)["status"] == "stopped"
    assert daemons.state(cid)["restartCount"] == count
    daemons.delete(cid)


def test_run_d_refuses_contradictions(hj: Hostjob, image: str, store: str) -> None:
    assert "contradict" in hj.fail(
        "run", "-d", "--rm", "--restart", "always", "--store", store, f"{image}:v1", "true"
    )
    assert "detached" in hj.fail(
        "run", "--restart", "always", "--store", store, f"{image}:v1", "true"
    )
    assert "detached" in hj.fail(
        "run", "--log-max-size", "1m", "--store", store, f"{image}:v1", "true"
    )
    assert "--restart" in hj.fail(
        "run", "-d", "--restart", "sometimes", "--store", store, f"{image}:v1", "true"
    )
    assert "--log-max-size" in hj.fail(
        "run", "-d", "--log-max-size", "12", "--store", store, f"{image}:v1", "true"
    )
    assert containers_left(hj.root) == []


# --- the watcher ----------------------------------------------------------------------------


def test_the_job_survives_its_watchers_sigkill(daemons: Daemons) -> None:
    """The watcher dies: the daemon runs on, never killed by a broken pipe; once the
    pipe is full it waits; `list`, `stop` and `logs` still work; `logs` starts a new
    watcher, which logs what the pipe kept. Lost is at most what the dying watcher had
    read and not written yet (one read): never what was still in the pipe."""
    # 400,000 lines, ~5 MB: more than the pipe holds once the watcher is gone.
    cid = daemons.run(
        "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); echo line $i; done; echo done; sleep 300",
        "--log-max-size",
        "100m",
    )
    # The watcher logs (read from the file: a tail of a fast-growing log can pass line
    # 1000 before the first look, on a loaded host).
    log = daemons.log_dir(cid) / "container.log"
    assert wait_for(lambda: log.exists() and b" line 1000\n" in log.read_bytes())
    watcher = daemons.watcher(cid)
    pid = daemons.state(cid)["pid"]
    os.kill(watcher, signal.SIGKILL)
    assert wait_for(lambda: not alive(watcher))
    listed = daemons.listed(cid)
    assert listed["status"] == "running" and listed["watcher"] == "gone"
    row = next(line for line in daemons.hj.ok("list").splitlines() if line.startswith(cid))
    assert row.rstrip().endswith("gone")
    # Nobody drains the pipe: the writer fills it and waits in write(), alive.
    assert wait_for(lambda: "pipe_write" in _wchan(pid), timeout=60), _wchan(pid)
    time.sleep(0.5)
    assert alive(pid) and daemons.state(cid)["status"] == "running"
    # What the dead watcher wrote (read from the file: `logs` would start a new one).
    logged = (daemons.log_dir(cid) / "container.log").read_bytes().count(b"\n")
    # logs works, and brings a watcher back: what waited in the pipe is logged.
    before = daemons.logs(cid).stdout.splitlines()
    assert len(before) >= logged
    new_watcher = daemons.watcher(cid)
    assert new_watcher != watcher and alive(new_watcher)
    assert daemons.listed(cid)["watcher"] == "running"
    assert wait_for(lambda: daemons.logs(cid, "--tail", "1").stdout == "done\n", timeout=120)
    lines = daemons.logs(cid).stdout.splitlines()
    assert lines[-1] == "done" and len(before) < 400000
    numbers = [int(line.split()[1]) for line in lines[:-1]]
    assert numbers[:logged] == list(range(1, logged + 1))
    assert numbers == sorted(numbers) and numbers[-1] == 400000
    missing = sorted(set(range(1, 400001)) - set(numbers))
    # At most the dying watcher's last read (256 KiB: ~20,000 of these lines), right
    # where it stopped writing; everything the pipe kept is there, in order.
    if missing:
        assert missing == list(range(logged + 1, logged + 1 + len(missing))), missing[:5]
        assert len(missing) * len("line 123456\n") <= 256 * 1024
    daemons.hj.ok("stop", "-t", "1", cid)
    assert not alive(pid) and not alive(new_watcher)
    state = daemons.state(cid)
    assert "exitCode" not in state and state["finishedAt"]  # its parent was the first watcher
    daemons.delete(cid)


def test_stop_and_list_without_a_watcher(daemons: Daemons) -> None:
    cid = daemons.run("sleep 300", "--restart", "always")
    watcher = daemons.watcher(cid)
    pid = daemons.state(cid)["pid"]
    os.kill(watcher, signal.SIGKILL)
    assert wait_for(lambda: not alive(watcher))
    daemons.hj.ok("stop", "-t", "1", cid)
    assert not alive(pid)
    state = daemons.state(cid)
    assert state["status"] == "stopped" and state["watcher"] == "gone" and "exitCode" not in state
    row = next(line for line in daemons.hj.ok("list").splitlines() if line.startswith(cid))
    assert "unknown" in row
    daemons.delete(cid)


def test_one_watcher_per_container(daemons: Daemons) -> None:
    cid = daemons.run("while :; do echo tick; sleep 0.05; done")
    os.kill(daemons.watcher(cid), signal.SIGKILL)
    readers = [subprocess.Popen(daemons.hj.argv("logs", "--tail", "1", cid), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=hostjob_env()) for _ in range(4)]  # fmt: skip
    for reader in readers:
        assert reader.wait(timeout=60) == 0

    def watchers() -> list[int]:
        return [pid for pid in _pids() if _comm(pid) == "hostjob-watcher" and _holds(pid, cid)]

    # The new watcher names itself and takes its hold once it runs: on a slow host that
    # is after the readers are done.
    assert wait_for(lambda: watchers() == [daemons.watcher(cid)]), watchers()
    daemons.delete(cid)


def test_the_watcher_is_small(daemons: Daemons) -> None:
    """A fresh `python -I -S` with only the watcher's modules: its PSS stays under
    10 MiB (measured from /proc/PID/smaps_rollup), also after restarts."""
    cid = daemons.run("echo start; sleep 0.3; exit 1", "--restart", "on-failure:2")
    watcher = daemons.watcher(cid)
    assert wait_for(lambda: _comm(watcher) == "hostjob-watcher")  # named once it runs
    cmdline = Path(f"/proc/{watcher}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1:4] == [b"-I", b"-S", b"-c"]
    assert wait_for(lambda: daemons.state(cid)["restartCount"] == 2)
    pss = _pss_kib(watcher)
    assert pss <= 10 * 1024, f"the watcher's PSS is {pss} KiB"
    assert wait_for(lambda: daemons.stopped(cid))
    daemons.delete(cid)


def test_run_d_rm_leaves_nothing(daemons: Daemons) -> None:
    cid = daemons.run("echo bye; sleep 0.5", "--rm")
    watcher = daemons.watcher(cid)
    assert wait_for(lambda: daemons.leftovers(cid, watcher) == [])
    cid = daemons.run("sleep 300", "--rm")
    watcher = daemons.watcher(cid)
    daemons.hj.ok("stop", "-t", "1", cid)
    assert daemons.leftovers(cid, watcher) == []  # stop of --rm: removed at once


def test_delete_of_a_running_daemon_leaves_nothing(daemons: Daemons) -> None:
    cid = daemons.run("while :; do echo x; sleep 0.01; done", "--restart", "always")
    daemons.delete(cid)  # watcher, job, mounts, log, state


# --- boot, stats, systemd's notification ---------------------------------------------------


def test_generate_systemd_verifies(daemons: Daemons, tmp_path: Path) -> None:
    from tests.helpers import require_peer

    require_peer("systemd", "systemd-analyze")
    env_file = tmp_path / "env"
    env_file.write_text("A=1\n")
    cid = daemons.run(
        'echo "$GREETING"; sleep 300', "--restart", "on-failure:3", "--memory", "64m",
        "-e", "GREETING=hello world $HOME 100%", "--env-file", str(env_file), "--stop-timeout", "7",
    )  # fmt: skip
    unit = daemons.hj.ok("generate", "systemd", cid)
    path = tmp_path / f"hostjob-{cid}.service"
    path.write_text(unit)
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    lines = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    assert lines["Type"] == "notify" and lines["Restart"] == "on-failure"
    assert lines["StartLimitBurst"] == "4" and lines["TimeoutStopSec"] == "22"
    # The environment's values are never in the unit (world-readable, and its command
    # line is every user's to read): a root-only file under the store holds them.
    kept = Path(lines["ExecStart"].split(" --env-file ", 1)[1].split()[0])
    assert f"--root {daemons.hj.root} run --rm --name {cid} --env-file {kept}" in lines["ExecStart"]
    assert "hello world" not in unit and str(env_file) not in unit and "--memory 64m" in unit
    assert kept.read_text() == "A=1\nGREETING=hello world $HOME 100%\n"
    assert (kept.stat().st_uid, stat.S_IMODE(kept.stat().st_mode)) == (0, 0o600)
    assert lines["ExecStop"].endswith(f"stop -t 7 -s 15 {cid}")  # the stop signal named
    # What ExecStart runs is the same container: run it (in the foreground) as systemd would.
    words = lines["ExecStart"].split(" run ", 1)[1]
    assert "-d" not in words.split() and "--restart" not in words
    assert "does not exist" in daemons.hj.fail("generate", "systemd", "nosuch")
    assert "generate" in daemons.hj.fail("generate", "upstart", cid)
    daemons.delete(cid)


def test_foreground_run_tells_systemd_it_is_ready(
    hj: Hostjob, image: str, store: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(30)
    try:
        result = hj("run", "--rm", "-q", "--store", store, f"{image}:v1", 'echo "[$NOTIFY_SOCKET]"',
                    env={"NOTIFY_SOCKET": path})  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert server.recv(100) == b"READY=1"
        assert result.stdout == "[]\n"  # systemd's socket is hostjob run's, not the job's
    finally:
        server.close()


def test_stats_of_every_running_container(daemons: Daemons, hj: Hostjob) -> None:
    one = daemons.run("sleep 300", "--memory", "32m")
    two = daemons.run("sleep 300")
    done = daemons.run("true")
    assert wait_for(lambda: daemons.stopped(done))
    table = hj.ok("stats", "--no-stream", "--interval", "0.2s").splitlines()
    assert table[0].split()[:3] == ["CONTAINER", "STATUS", "CPU"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert set(rows) == {one, two}  # running ones only
    assert "32.0MiB" in rows[one]
    infos = json.loads(hj.ok("stats", "--format", "json", "--interval", "0"))
    assert sorted(i["id"] for i in infos) == sorted([one, two])
    named = json.loads(hj.ok("stats", "--format", "json", "--interval", "0", one))
    assert [i["id"] for i in named] == [one] and named[0]["memory"]["limit"] == 32 << 20
    assert json.loads(hj.ok("stats", "--json", "--interval", "0", one))["id"] == one
    assert "does not exist" in hj.fail("stats", "--no-stream", "nosuch")
    # Named, a stopped container (its job kept until delete) is shown: empty.
    assert " stopped " in hj.ok("stats", "--no-stream", "--interval", "0", done)

    # On a terminal: a live table, redrawn each interval.
    def redrawn(out: str) -> bool:
        return out.count("\x1b[H\x1b[2J") >= 2 and one in out and two in out

    assert redrawn(_on_a_terminal(hj.argv("stats", "--interval", "0.2s"), redrawn))
    for cid in (one, two, done):
        daemons.delete(cid)


# --- a real host daemon: Debian's node exporter -------------------------------------------


def test_node_exporter_from_a_debian_package(hj: Hostjob, store: str, tmp_path: Path) -> None:
    """The issue's case: a Debian daemon binary, packed, run with limits, scraped."""
    binary = _exporter()
    src = tmp_path / "ne"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "node_exporter").write_bytes(binary.read_bytes())
    (src / "bin" / "node_exporter").chmod(0o755)
    archive = tmp_path / "ne.tar"
    pack(str(src), f"oci-archive:{archive}:v1", entrypoint=["/bin/node_exporter"])
    port = _free_port()
    cid = new_id("ne")
    hj.ok("run", "-d", "-q", "--store", store, "--name", cid, "--memory", "64m", "--pids-limit", "32",
          f"oci-archive:{archive}:v1", f"--web.listen-address=127.0.0.1:{port}")  # fmt: skip
    assert wait_for(lambda: _scrape(port) is not None)
    metrics = _scrape(port) or ""
    assert "node_load1 " in metrics and "node_memory_MemTotal_bytes " in metrics
    # it logs to stderr; its watcher copies the lines into the log as they come, so the
    # first may reach the file after the exporter answers a scrape
    logs = lambda: hj("logs", cid)  # noqa: E731
    assert wait_for(lambda: (done := logs()).returncode == 0 and "Listening on" in done.stderr, 15)
    stats = json.loads(hj.ok("stats", "--json", "--interval", "0", cid))
    assert stats["memory"]["limit"] == 64 << 20 and stats["pids"]["limit"] == 32
    watcher = json.loads((hj.root / cid / "state.json").read_text())["watcher"][0]
    hj.ok("stop", cid)
    assert _scrape(port) is None
    assert hj.state(cid)["exitSignal"] == "SIGTERM"
    hj.ok("delete", cid)
    assert Daemons(hj, "", store).leftovers(cid, watcher) == []


# --- helpers ----------------------------------------------------------------------------------


def _exporter() -> Path:
    from tests.helpers import INSTALL

    path = Path(
        "/var/cache/hostjob-peers/prometheus-node-exporter/usr/bin/prometheus-node-exporter"
    )
    if not path.exists():
        done = subprocess.run(
            [str(INSTALL), "--peers", "exporter"], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0 or not path.exists():
            pytest.fail(
                f"could not unpack peer exporter: {done.stdout}{done.stderr}", pytrace=False
            )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> str | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode(errors="replace")


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _holds(pid: int, cid: str) -> bool:
    try:
        return any(
            cid in os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


def _pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise AssertionError("no Pss in smaps_rollup")


def _on_a_terminal(argv: list[str], until: Callable[[str], bool], timeout: float = 60) -> str:
    """Run ``argv`` with a pty as its stdout until what it wrote satisfies ``until`` (or
    ``timeout`` seconds pass); what it wrote."""
    import pty
    import select

    master, slave = pty.openpty()
    process = subprocess.Popen(argv, stdout=slave, stderr=subprocess.DEVNULL, env=hostjob_env())
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(out.decode(errors="replace")):
            if select.select([master], [], [], 0.1)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        os.close(master)
    return out.decode(errors="replace")


def test_stop_of_a_bundle_container(hj: Hostjob, bundle) -> None:  # type: ignore[no-untyped-def]
    """`stop` is not only for images: a runc-style detached container stops the same way."""
    from tests.helpers import base_config

    cid = new_id()
    b = bundle(base_config("sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"))
    hj.ok("run", "-d", "--bundle", str(b), cid, stdin=subprocess.DEVNULL)
    pid = hj.state(cid)["pid"]
    assert hj.ok("stop", "-t", "1", cid) == f"{cid}\n"
    assert not alive(pid) and hj.status(cid) == "stopped"
    assert "watcher" not in hj.state(cid)  # no watcher: nothing recorded but the stop
    hj.ok("delete", cid)


def test_kill_is_the_raw_signal_and_the_policy_applies(daemons: Daemons) -> None:
    cid = daemons.run("echo start; sleep 300", "--restart", "on-failure")
    assert wait_for(lambda: len(starts(daemons, cid)) == 1)
    daemons.hj.ok("kill", cid, "KILL")
    assert wait_for(
        lambda: daemons.state(cid)["restartCount"] == 1 and len(starts(daemons, cid)) == 2
    )
    assert daemons.state(cid)["exitSignal"] == "SIGKILL"  # the last exit, while it runs again
    daemons.delete(cid)


def test_a_restarted_program_gets_default_signals(daemons: Daemons) -> None:
    """What the watcher ignores (SIGTERM) and Python ignores (SIGPIPE) is not passed on:
    a restarted program still ends on `stop`'s SIGTERM, and a pipe reader that leaves
    ends its writer silently, as in a shell."""
    script = "echo start; yes | head -n 1 >/dev/null; trap 'echo got TERM; exit 0' TERM; sleep 0.3; exit 1"
    cid = daemons.run(script + "; ", "--restart", "always")
    assert wait_for(
        lambda: (
            daemons.state(cid)["restartCount"] >= 1 and daemons.state(cid)["status"] == "running"
        )
    )
    daemons.hj.ok("stop", "-t", "10", cid)
    result = daemons.logs(cid)
    assert "Broken pipe" not in result.stderr, result.stderr  # yes died of SIGPIPE
    state = daemons.state(cid)
    if "got TERM" in result.stdout:  # stopped while the trap was set: it handled TERM
        assert state["exitCode"] == 0, state
    assert state.get("exitSignal") != "SIGKILL", state  # never killed after the timeout
    daemons.delete(cid)
