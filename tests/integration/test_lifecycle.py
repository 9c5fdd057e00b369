"""The OCI lifecycle against the real kernel: every status, move and kill/delete rule."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import (
    Hostjob,
    base_config,
    cgroup_dirs,
    hostjob_env,
    new_id,
    proc_cgroup,
    wait_for,
)


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]


def test_create_start_kill_delete(hj: Hostjob, bundle, tmp_path: Path, no_leaks) -> None:
    cid = new_id()
    b = bundle(base_config("sleep", "300"))
    pid_file = tmp_path / "pid"
    hj.ok("create", "--bundle", str(b), "--pid-file", str(pid_file), cid)

    raw = pid_file.read_bytes()
    assert raw.isdigit(), f"pid file must hold digits only: {raw!r}"
    pid = int(raw)
    state = hj.state(cid)
    assert state["status"] == "created"
    assert state["pid"] == pid
    assert state["bundle"] == str(b)
    assert state["rootfs"] == str(b / "rootfs")
    assert state["id"] == cid
    assert state["created"].endswith("Z")
    assert "owner" in state and "ociVersion" in state
    # Already in its job, and still waiting before exec.
    assert f"/hostjob/{cid}" in proc_cgroup(pid)
    assert "sleep" not in cmdline(pid)
    # No parent left behind: the container process was adopted.
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid != os.getpid()

    hj.ok("start", cid)
    assert hj.status(cid) == "running"
    assert wait_for(lambda: cmdline(pid)[:1] == ["sleep"])

    hj.ok("kill", cid, "KILL")
    assert wait_for(lambda: hj.status(cid) == "stopped")
    assert hj.state(cid)["pid"] == 0
    hj.ok("delete", cid)
    assert "container does not exist" in hj.fail("state", cid)
    no_leaks(cid)


def test_illegal_moves(hj: Hostjob, bundle) -> None:
    cid = new_id()
    b = bundle(base_config("sleep", "300"))
    hj.ok("create", "-b", str(b), cid)
    assert "container with given ID already exists" in hj.fail("create", "-b", str(b), cid)
    hj.ok("start", cid)
    assert "already running" in hj.fail("start", cid)
    assert "not stopped" in hj.fail("delete", cid)
    hj.ok("kill", cid, "9")
    assert wait_for(lambda: hj.status(cid) == "stopped")
    assert "has stopped" in hj.fail("start", cid)
    assert "container not running" in hj.fail("kill", cid)
    hj.ok("kill", "--all", cid, "9")  # on a stopped container: succeeds
    hj.ok("delete", cid)


def test_unknown_ids(hj: Hostjob) -> None:
    for command in (["state"], ["start"], ["kill"], ["delete"]):
        assert "container does not exist" in hj.fail(*command, "nosuch")
    hj.ok("delete", "--force", "nosuch")
    assert "invalid container ID" in hj.fail("state", "../etc")
    assert "invalid container ID" in hj.fail("create", "-b", "/nonexistent", "a/b")
    assert "invalid container ID" in hj.fail("state", "..")


def test_delete_created_kills_it(hj: Hostjob, bundle, tmp_path: Path, no_leaks) -> None:
    cid = new_id()
    pid_file = tmp_path / "pid"
    hj.ok(
        "create", "-b", str(bundle(base_config("sleep", "300"))), "--pid-file", str(pid_file), cid
    )
    pid = int(pid_file.read_text())
    hj.ok("delete", cid)
    assert wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid))
    no_leaks(cid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_delete_force_running(hj: Hostjob, bundle, no_leaks) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(bundle(base_config("sleep", "300"))), cid)
    hj.ok("start", cid)
    hj.ok("delete", "--force", cid)
    no_leaks(cid)


@pytest.mark.parametrize("spelling", ["USR1", "SIGUSR1", "usr1", str(int(signal.SIGUSR1))])
def test_kill_signal_spellings(hj: Hostjob, bundle, tmp_path: Path, spelling: str) -> None:
    cid = new_id()
    marker = tmp_path / "got"
    script = f"trap 'echo usr1 > {marker}; exit 0' USR1; while :; do sleep 0.05; done"
    hj.ok("create", "-b", str(bundle(base_config("sh", "-c", script))), cid)
    hj.ok("start", cid)
    time.sleep(0.2)  # let the shell install its trap
    hj.ok("kill", cid, spelling)
    assert wait_for(lambda: marker.exists())
    assert wait_for(lambda: hj.status(cid) == "stopped")
    hj.ok("delete", cid)


def test_kill_bad_signal(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(bundle(base_config("sleep", "300"))), cid)
    assert "unknown signal" in hj.fail("kill", cid, "NOPE")
    hj.ok("delete", "--force", cid)


def test_kill_default_is_term(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(bundle(base_config("sleep", "300"))), cid)
    hj.ok("start", cid)
    hj.ok("kill", cid)
    assert wait_for(lambda: hj.status(cid) == "stopped")
    hj.ok("delete", cid)


def test_run_exit_status_and_stdio(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("sh", "-c", "read line; echo out:$line; echo err >&2; exit 7"))
    result = hj("run", "-b", str(b), new_id(), input="hello\n")
    assert result.returncode == 7
    assert result.stdout == "out:hello\n"
    assert result.stderr == "err\n"


def test_run_killed_by_signal_is_128_plus_n(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("sh", "-c", "kill -9 $$"))
    assert hj("run", "-b", str(b), new_id()).returncode == 128 + 9


def test_run_forwards_signals(hj: Hostjob, bundle, tmp_path: Path) -> None:
    marker = tmp_path / "term"
    ready = tmp_path / "trapped"
    script = f"trap 'echo term > {marker}; exit 42' TERM; : > {ready}; while :; do sleep 0.05; done"
    b = bundle(base_config("sh", "-c", script))
    runner = subprocess.Popen(
        hj.argv("run", "-b", str(b), new_id()), env=hostjob_env(), stderr=subprocess.DEVNULL
    )
    # The job has its trap (and so run, started before it, forwards): a fixed pause is
    # too short on a slow host.
    assert wait_for(ready.exists), "the job never started"
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=20) == 42
    assert marker.read_text() == "term\n"


def test_run_detach(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    pid_file = tmp_path / "pid"
    hj.ok(
        "run",
        "-d",
        "-b",
        str(bundle(base_config("sleep", "300"))),
        "--pid-file",
        str(pid_file),
        cid,
    )
    assert hj.status(cid) == "running"
    assert int(pid_file.read_text()) == hj.state(cid)["pid"]
    hj.ok("kill", cid, "KILL")
    assert wait_for(lambda: hj.status(cid) == "stopped")
    hj.ok("delete", cid)


def test_run_keep(hj: Hostjob, bundle) -> None:
    cid = new_id()
    assert hj("run", "--keep", "-b", str(bundle(base_config("true"))), cid).returncode == 0
    assert hj.status(cid) == "stopped"
    hj.ok("delete", cid)


def test_state_dir_is_private(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(bundle(base_config("sleep", "300"))), cid)
    mode = os.stat(hj.root / cid).st_mode & 0o777
    assert mode == 0o700
    assert os.stat(hj.root).st_mode & 0o002 == 0
    hj.ok("delete", "--force", cid)


def test_list(hj: Hostjob, bundle) -> None:
    ids = sorted(new_id() for _ in range(2))
    b = bundle(base_config("sleep", "300"))
    for cid in ids:
        hj.ok("create", "-b", str(b), cid)
    hj.ok("start", ids[0])
    assert hj.ok("list", "-q").split() == ids
    import json

    listed = json.loads(hj.ok("list", "--format", "json"))
    assert [c["id"] for c in listed] == ids
    assert {c["id"]: c["status"] for c in listed} == {ids[0]: "running", ids[1]: "created"}
    table = hj.ok("list").splitlines()
    assert table[0].split()[:6] == ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]
    assert any(ids[0] in row and "running" in row and "root" in row for row in table[1:])
    assert "invalid format" in hj.fail("list", "--format", "yaml")
    for cid in ids:
        hj.ok("delete", "--force", cid)
    assert hj.ok("list", "-q") == ""


def test_checkpoint_restore_refused(hj: Hostjob) -> None:
    assert "not supported" in hj.fail("checkpoint", "--image-path", "/tmp/x", "someid")
    assert "not supported" in hj.fail("restore", "--image-path", "/tmp/x", "someid")


def test_cgroup_placement_everywhere(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    pid_file = tmp_path / "pid"
    hj.ok(
        "create", "-b", str(bundle(base_config("sleep", "300"))), "--pid-file", str(pid_file), cid
    )
    pid = int(pid_file.read_text())
    lines = [line for line in proc_cgroup(pid).splitlines() if line]
    assert lines, "the process has cgroups"
    for line in lines:
        assert line.split(":", 2)[2] == f"/hostjob/{cid}", line
    assert cgroup_dirs(f"/hostjob/{cid}")
    hj.ok("delete", "--force", cid)
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_cgroups_path_absolute_and_relative(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    absolute = f"/hostjob-test/{cid}"
    config = base_config("sleep", "300")
    config["linux"] = {"cgroupsPath": absolute}
    pid_file = tmp_path / "pid"
    hj.ok("create", "-b", str(bundle(config)), "--pid-file", str(pid_file), cid)
    assert f":{absolute}\n" in proc_cgroup(int(pid_file.read_text()))
    hj.ok("delete", "--force", cid)
    assert cgroup_dirs(absolute) == []
    for d in cgroup_dirs("/hostjob-test"):
        os.rmdir(d)

    cid = new_id()
    config["linux"] = {"cgroupsPath": f"nested/{cid}"}
    hj.ok("create", "-b", str(bundle(config, "b2")), "--pid-file", str(pid_file), cid)
    assert f":/hostjob/nested/{cid}\n" in proc_cgroup(int(pid_file.read_text()))
    hj.ok("delete", "--force", cid)
    assert cgroup_dirs(f"/hostjob/nested/{cid}") == []


def test_a_record_changed_after_load_is_read_again(hj: Hostjob, bundle) -> None:
    """A verb locks and reloads what `load` read; the second read is skipped only while
    the record file is still the one `load` held open (every write replaces it)."""
    from hostjob.runtime.container import Container

    cid = new_id()
    hj.ok("create", "-b", str(bundle(base_config("sleep", "300"))), cid)
    try:
        changed = Container.load(cid, root=str(hj.root))
        assert changed._held >= 0
        hj.ok("update", "--pids-limit", "77", cid)  # another command rewrites the record
        before = changed.record
        changed.reload()
        assert changed._held == -1
        assert changed.record is not before
        assert "77" in repr(changed.record.config.resources)  # type: ignore[union-attr]

        same = Container.load(cid, root=str(hj.root))
        record = same.record
        same.reload()  # nothing wrote it since: what load read stands
        assert same.record is record and same._held == -1
    finally:
        hj.ok("delete", "--force", cid)
