"""hostjob.linux.signals.pidfd_of: every answer a supported kernel gives for a process that is
gone means gone, wherever a pidfd is opened: ESRCH, and EINVAL -- what 6.1 (Debian 12), 5.15 and 5.14 answer for an
init that was reaped while its pid still names its children's session or process group
(``delete --force`` of such a job failed with ``OSError: [Errno 22]`` and leaked it). The
kernel's answers are driven through ``posix.pidfd_open``, what the code calls."""

from __future__ import annotations

import errno
import os

import pytest

from hostjob.cgroups._manager import Manager
from hostjob.errors import StartError
from hostjob.linux import signals as pidfds
from hostjob.runtime import proc
from hostjob.runtime.sandbox.join import join_namespace

GONE = [
    pytest.param(ProcessLookupError(errno.ESRCH, "No such process"), id="ESRCH"),
    pytest.param(OSError(errno.EINVAL, "Invalid argument"), id="EINVAL"),
]


def refusing(answer: OSError):  # type: ignore[no-untyped-def]
    def pidfd_open(pid: int, flags: int = 0) -> int:
        raise answer

    return pidfd_open


@pytest.mark.parametrize("answer", GONE)
def test_a_gone_process_is_gone_everywhere(
    answer: OSError, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getpid()
    started = proc.start_time(me)
    assert started is not None
    monkeypatch.setattr(pidfds.posix, "pidfd_open", refusing(answer))
    assert pidfds.pidfd_of(me) is None
    assert proc.open_pidfd(me, started) is None
    assert proc.signal_process(me, started, 0) is False  # nothing sent, no error
    with pytest.raises(StartError, match="its init is gone"):
        join_namespace(me, started)()


def test_other_answers_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pidfds.posix, "pidfd_open", refusing(PermissionError(errno.EPERM, "no")))
    with pytest.raises(PermissionError):
        pidfds.pidfd_of(os.getpid())
    assert pidfds.pidfd_of(0) is None and pidfds.pidfd_of(-5) is None


def test_a_real_pidfd_pins_the_process() -> None:
    fd = pidfds.pidfd_of(os.getpid())
    assert fd is not None
    os.close(fd)


class _Members(Manager):
    """A manager whose cgroup lists ``members``; signals are recorded, not sent."""

    def __init__(self, members: list[int]) -> None:
        super().__init__("/hostjob/t", [])
        self.members = members
        self.sent: list[int] = []

    def pids(self) -> list[int]:
        return list(self.members)


@pytest.mark.parametrize("answer", GONE)
def test_the_kill_all_skips_the_gone_and_signals_the_rest(
    answer: OSError, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cgroup's process list still names a reaped init among live children: the
    children are signalled, the init's pid is skipped without an error."""
    real_open = pidfds.posix.pidfd_open
    gone, live = 999_999, os.getpid()

    def pidfd_open(pid: int, flags: int = 0) -> int:
        if pid == gone:
            raise answer
        return real_open(pid, flags)

    monkeypatch.setattr(pidfds.posix, "pidfd_open", pidfd_open)
    manager = _Members([gone, live])
    sent: list[int] = []
    monkeypatch.setattr(
        "hostjob.cgroups._manager.signal_pidfd", lambda fd, pid, sig: sent.append(pid)
    )
    manager._signal_members(manager.pids(), 0)
    assert sent == [live]
