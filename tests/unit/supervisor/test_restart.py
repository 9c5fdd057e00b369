"""hostjob.supervisor.restart: --restart, when a watcher restarts, and its back-off."""

from __future__ import annotations

import itertools

import pytest

from hostjob.errors import InvalidArgument
from hostjob.runtime.record import ExitStatus
from hostjob.specconv.jobconfig import DaemonConfig
from hostjob.supervisor.restart import (
    FIRST_DELAY,
    MAX_DELAY,
    next_delay,
    parse_restart,
    should_restart,
)


def daemon(restart: str, retries: int | None = None) -> DaemonConfig:
    return DaemonConfig(restart=restart, max_retries=retries)


def ended(code: int | None, signal: int | None = None) -> ExitStatus:
    return ExitStatus(code=code, signal=signal, finished="", oom_killed=False)


def test_parse_restart() -> None:
    assert parse_restart("no") == ("no", None)
    assert parse_restart("always") == ("always", None)
    assert parse_restart("on-failure") == ("on-failure", None)
    assert parse_restart("on-failure:5") == ("on-failure", 5)
    for bad in ("sometimes", "always:3", "no:1", "on-failure:", "on-failure:x", "on-failure:-1"):
        with pytest.raises(InvalidArgument):
            parse_restart(bad)
    # and back as --restart takes it (state's restart_policy)
    assert daemon("on-failure", 5).restart_text() == "on-failure:5"
    assert daemon("on-failure").restart_text() == "on-failure"
    assert daemon("always").restart_text() == "always"
    assert DaemonConfig().restart_text() == "no"


def test_when_a_watcher_restarts() -> None:
    assert not should_restart(daemon("no"), ended(1), 0, False)
    assert should_restart(daemon("always"), ended(0), 7, False)
    assert should_restart(daemon("on-failure"), ended(1), 100, False)
    assert not should_restart(daemon("on-failure"), ended(0), 0, False)
    assert should_restart(daemon("on-failure"), ended(137, 9), 0, False)  # a signal fails
    assert should_restart(daemon("on-failure"), ended(None), 0, False)  # so does "unknown"
    assert should_restart(daemon("on-failure", 3), ended(1), 2, False)
    assert not should_restart(daemon("on-failure", 3), ended(1), 3, False)
    for policy in ("always", "on-failure"):  # never after `stop`
        assert not should_restart(daemon(policy), ended(1), 0, True)


def test_back_off_doubles_to_a_minute_and_resets_after_a_good_run() -> None:
    delays = []
    delay = 0.0
    for _ in range(12):
        delay = next_delay(delay, ran_for=0.01)
        delays.append(delay)
    assert delays[:4] == [FIRST_DELAY, 0.2, 0.4, 0.8]
    assert delays[-1] == MAX_DELAY and max(delays) == MAX_DELAY
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert next_delay(MAX_DELAY, ran_for=10.0) == FIRST_DELAY


def test_exit_status_of_a_wait_status() -> None:
    assert ExitStatus.of(3 << 8, "t", False).code == 3
    killed = ExitStatus.of(9, "t", True)
    assert (killed.code, killed.signal, killed.oom_killed) == (137, 9, True)
    unknown = ExitStatus.of(None, "t", False)
    assert unknown.code is None and unknown.failed
    assert not ExitStatus.of(0, "t", False).failed
