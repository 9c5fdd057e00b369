"""What a watcher that failed to create its container tells ``run -d``."""

from __future__ import annotations

from hostjob.errors import ConfigError, HostjobError
from hostjob.supervisor.launch import _error_from, _error_report


def test_a_hostjob_error_comes_back_as_itself() -> None:
    err = _error_from(_error_report(ConfigError("bad", "process.cwd")))
    assert type(err) is ConfigError and str(err) == "process.cwd: bad" and err.exit_code == 1


def test_a_bug_in_the_watcher_is_said_to_be_one() -> None:
    """It said "cannot start the container: ..." and looked like any refusal; a test
    asserting "never an internal error" could not tell a crash from a config error."""
    try:
        raise AttributeError("'NoneType' object has no attribute 'stop_signal'")
    except AttributeError as bug:
        err = _error_from(_error_report(bug))
    assert type(err) is HostjobError and err.exit_code == 1
    assert str(err).startswith(
        "internal error in the container's watcher: AttributeError: 'NoneType' object"
    )
    assert "please report it" in str(err)


def test_an_interrupt_is_no_bug() -> None:
    err = _error_from(_error_report(KeyboardInterrupt()))
    assert str(err) == "cannot start the container: KeyboardInterrupt()"
