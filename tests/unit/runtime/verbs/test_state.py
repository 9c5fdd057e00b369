"""``state`` without root: the runtime-spec document of a container as its record and its
process say, and how the process last ended."""

from __future__ import annotations

import os
import subprocess

from hostjob.runtime.handle import Handle
from hostjob.runtime.record import StateStore
from hostjob.runtime.status import Status
from hostjob.runtime.verbs.state import state
from hostjob.specconv.jobconfig import DaemonConfig
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_a_created_container_shows_its_init(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid, fifo=True)
    document = state(container).to_json()
    assert document["status"] == Status.CREATED and document["pid"] == sleeper.pid
    assert document["id"] == "c1" and document["ociVersion"] == "1.2.0"
    assert document["bundle"] == container.config.bundle
    assert document["rootfs"] == container.config.rootfs
    assert document["created"] == "2026-12-02T00:00:00Z"
    assert "exitCode" not in document and "restartCount" not in document


def test_a_stopped_container_has_no_pid_and_says_how_it_ended(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    container.record_exit(9)  # killed by SIGKILL
    shown = state(container)
    assert (shown.status, shown.pid) == (Status.STOPPED, 0)
    assert (shown.exit_code, shown.exit_signal, shown.oom_killed) == (137, "SIGKILL", False)
    assert shown.finished_at


def test_a_daemons_restarts_and_its_watcher(make_handle: MakeHandle) -> None:
    daemon = DaemonConfig(restart="on-failure", max_retries=3, command=["hostjob", "run"])
    container = make_handle(daemon=daemon, restarts=2, watcher=[os.getpid(), 1])
    shown = state(container)
    # the watcher's start time is not this process's: it has gone
    assert (shown.restart_policy, shown.restart_count, shown.watcher) == ("on-failure:3", 2, "gone")


def test_a_create_that_died_before_its_record(tmp_path) -> None:
    store = StateStore(str(tmp_path / "state"))
    store.create("c2").release()
    shown = state(Handle.load("c2", root=store.root))
    assert (shown.status, shown.pid, shown.bundle, shown.created) == (Status.STOPPED, 0, "", "")
