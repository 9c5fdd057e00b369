"""``kill`` without root: the init is signalled by its pid and its start time, never a
process that took its pid; ``--all`` touches only a cgroup hostjob made."""

from __future__ import annotations

import signal
import subprocess

import pytest

from hostjob.errors import ContainerNotRunning
from hostjob.runtime.verbs.kill import kill
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_the_init_gets_sigterm_by_default(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    kill(make_handle(sleeper.pid, fifo=True))
    assert sleeper.wait(timeout=10) == -signal.SIGTERM


def test_a_signal_by_number(make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]) -> None:
    kill(make_handle(sleeper.pid, fifo=True), int(signal.SIGKILL))
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


def test_a_process_that_took_the_inits_pid_is_never_hit(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid, fifo=True, start_time=1)  # another process's
    with pytest.raises(ContainerNotRunning):
        kill(container, int(signal.SIGKILL))
    assert sleeper.poll() is None


def test_a_stopped_container_is_not_running(make_handle: MakeHandle) -> None:
    with pytest.raises(ContainerNotRunning):
        kill(make_handle())


def test_all_never_touches_a_cgroup_hostjob_did_not_make(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid, fifo=True)
    assert not container.owns_cgroup()
    kill(container, int(signal.SIGKILL), all_processes=True)  # nothing to do, no error
    assert sleeper.poll() is None
