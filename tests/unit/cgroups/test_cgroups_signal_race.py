"""kill_all never signals a process that took the number of a job process that has
exited between reading cgroup.procs and the signal (pid reuse)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from tests.unit.cgroups.fakefs import FakeCgroup1, FakeCgroup2

if TYPE_CHECKING:
    from collections.abc import Callable
    from subprocess import Popen

    import pytest


def _racing_pids(m: cg.Manager, monkeypatch: pytest.MonkeyPatch, first: list[int]) -> None:
    """The first read lists ``first``; every later one (the re-check) lists nothing,
    as if those processes exited and their numbers went to strangers."""
    reads = iter([first])
    monkeypatch.setattr(type(m), "pids", lambda self: next(reads, []))


def test_v2_rounds_skip_a_recycled_pid(
    fake2: FakeCgroup2, monkeypatch: pytest.MonkeyPatch, spawn: Callable[..., Popen[bytes]]
) -> None:
    fake2.kill_file = False  # no cgroup.kill: signals go process by process
    m = open_manager("/hostjob/race", root=fake2.root)
    m.create()
    stranger = spawn()
    _racing_pids(m, monkeypatch, [stranger.pid])
    m.kill_all(9)
    time.sleep(0.05)
    assert stranger.poll() is None, "a process outside the job was signalled"


def test_v1_frozen_signal_skips_a_recycled_pid(
    fake1: FakeCgroup1, monkeypatch: pytest.MonkeyPatch, spawn: Callable[..., Popen[bytes]]
) -> None:
    m = open_manager("/hostjob/race", root=fake1.root)
    m.create()
    stranger = spawn()
    _racing_pids(m, monkeypatch, [stranger.pid])
    m.kill_all(15)
    time.sleep(0.05)
    assert stranger.poll() is None, "a process outside the job was signalled"


def test_members_are_still_signalled(
    fake2: FakeCgroup2, monkeypatch: pytest.MonkeyPatch, spawn: Callable[..., Popen[bytes]]
) -> None:
    fake2.kill_file = False
    m = open_manager("/hostjob/race", root=fake2.root)
    m.create()
    member = spawn()
    m.add(member.pid)
    m.kill_all(9)
    assert member.wait(timeout=5) == -9
