"""The six hook points: when they run, what they get, and what failure means."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, cgroup_dirs, new_id

POINTS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
EXPECTED_STATUS = {
    "prestart": "creating",
    "createRuntime": "creating",
    "createContainer": "creating",
    "startContainer": "created",
    "poststart": "running",
    "poststop": "stopped",
}


def recording_hook(tmp_path: Path) -> Path:
    """A hook that appends '<point> <env HOOKVAR> <stdin state>' to a log."""
    script = tmp_path / "hook.sh"
    log = tmp_path / "hooks.log"
    script.write_text(f'#!/bin/sh\nstate=$(cat); echo "$1 $HOOKVAR $state" >> {log}\n')
    script.chmod(0o755)
    return script


def hooks_config(script: Path, points=POINTS, extra=None) -> dict:  # type: ignore[no-untyped-def]
    config = base_config("sleep", "300")
    config["annotations"] = {"org.example/key": "value"}
    config["hooks"] = {
        point: [{"path": str(script), "args": [str(script), point], "env": ["HOOKVAR=set"]}]
        for point in points
    }
    for point, hook in (extra or {}).items():
        config["hooks"][point] = [hook]
    return config


def read_log(tmp_path: Path) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    entries = []
    for line in (tmp_path / "hooks.log").read_text().splitlines():
        point, var, state = line.split(" ", 2)
        entries.append((point, var, json.loads(state)))
    return entries


def test_every_hook_point_in_order(hj: Hostjob, bundle, tmp_path: Path) -> None:
    script = recording_hook(tmp_path)
    cid = new_id()
    b = bundle(hooks_config(script))
    hj.ok("create", "-b", str(b), cid)
    pid = hj.state(cid)["pid"]
    assert [e[0] for e in read_log(tmp_path)] == ["prestart", "createRuntime", "createContainer"]
    hj.ok("start", cid)
    deadline = time.monotonic() + 10
    while len(read_log(tmp_path)) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    hj.ok("delete", "--force", cid)
    entries = read_log(tmp_path)
    assert [e[0] for e in entries] == list(POINTS)
    for point, var, state in entries:
        assert var == "set"
        assert state["id"] == cid
        assert state["status"] == EXPECTED_STATUS[point], point
        assert state["bundle"] == str(b)
        assert state["annotations"] == {"org.example/key": "value"}
        assert state["ociVersion"]
        if point == "poststop":
            assert "pid" not in state
        else:
            assert state["pid"] == pid, point


@pytest.mark.parametrize("point", ["prestart", "createRuntime", "createContainer"])
def test_failing_create_hook_destroys_container(
    hj: Hostjob, bundle, tmp_path: Path, point: str
) -> None:
    cid = new_id()
    failing = {"path": "/bin/sh", "args": ["sh", "-c", "echo broken-hook >&2; exit 3"]}
    config = base_config("sleep", "300")
    config["hooks"] = {point: [failing]}
    error = hj.fail("create", "-b", str(bundle(config)), cid)
    assert point in error and "exit status 3" in error and "broken-hook" in error
    assert not (hj.root / cid).exists()
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_failing_start_container_hook_stops_it(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    config = base_config("sleep", "300")
    config["hooks"] = {"startContainer": [{"path": "/bin/false"}]}
    hj.ok("create", "-b", str(bundle(config)), cid)
    hj("start", cid)
    deadline = time.monotonic() + 10
    while hj.status(cid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hj.status(cid) == "stopped"  # the program never ran
    hj.ok("delete", cid)


def test_failing_poststart_hook_kills_container(hj: Hostjob, bundle) -> None:
    cid = new_id()
    config = base_config("sleep", "300")
    config["hooks"] = {"poststart": [{"path": "/bin/false"}]}
    hj.ok("create", "-b", str(bundle(config)), cid)
    assert "poststart" in hj.fail("start", cid)
    deadline = time.monotonic() + 10
    while hj.status(cid) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hj.status(cid) == "stopped"
    hj.ok("delete", cid)


def test_failing_poststop_hook_only_warns(hj: Hostjob, bundle, tmp_path: Path) -> None:
    cid = new_id()
    config = base_config("true")
    config["hooks"] = {"poststop": [{"path": "/bin/false"}]}
    hj.ok("create", "-b", str(bundle(config)), cid)
    hj.ok("delete", cid)
    assert not (hj.root / cid).exists()
    records = [json.loads(line) for line in (tmp_path / "hostjob.log").read_text().splitlines()]
    assert any(r["level"] == "warning" and "poststop" in r["msg"] for r in records)


def test_hook_timeout(hj: Hostjob, bundle) -> None:
    cid = new_id()
    config = base_config("true")
    config["hooks"] = {"prestart": [{"path": "/bin/sleep", "args": ["sleep", "30"], "timeout": 1}]}
    started = time.monotonic()
    error = hj.fail("create", "-b", str(bundle(config)), cid)
    assert time.monotonic() - started < 15
    assert "timed out" in error
    assert not (hj.root / cid).exists()


def test_hook_must_be_absolute(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["hooks"] = {"prestart": [{"path": "relative/hook"}]}
    assert "hooks.prestart[0].path" in hj.fail("create", "-b", str(bundle(config)), new_id())


def test_missing_hook_binary(hj: Hostjob, bundle) -> None:
    cid = new_id()
    config = base_config("true")
    config["hooks"] = {"createRuntime": [{"path": "/no/such/hook"}]}
    assert "could not start" in hj.fail("create", "-b", str(bundle(config)), cid)
    assert not (hj.root / cid).exists()
