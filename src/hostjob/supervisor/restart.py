"""The restart policy of a detached image container: ``--restart no|on-failure[:N]|always``.

docker's and podman's rules: ``always`` restarts whatever the exit, ``on-failure``
when the exit was not a clean 0 (a signal, an unknown end and an OOM kill are
failures), at most N times with ``on-failure:N``; nothing is restarted once ``hostjob
stop`` ended it. Between restarts the watcher waits: 100 ms, doubled after each
restart up to a minute, and back to 100 ms once the process had run for 10 s
(docker's back-off), so a program that fails at once does not spin.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.record import ExitStatus
    from hostjob.specconv.jobconfig import DaemonConfig

POLICIES = ("no", "on-failure", "always")
FIRST_DELAY = 0.1
MAX_DELAY = 60.0
RESET_AFTER = 10.0  # seconds of running that count as a success for the back-off


def parse_restart(text: str) -> tuple[str, int | None]:
    """``--restart``: (policy, maximum restarts or None)."""
    policy, sep, count = text.partition(":")
    if policy not in POLICIES or (sep and policy != "on-failure"):
        raise InvalidArgument(f"--restart {text!r}: expected no, on-failure[:N] or always")
    if not sep:
        return policy, None
    if not count.isascii() or not count.isdigit():
        raise InvalidArgument(f"--restart {text!r}: the number of restarts must be a number")
    return policy, int(count)


def should_restart(
    daemon: DaemonConfig, ended: ExitStatus, restarts: int, stop_requested: bool
) -> bool:
    """Whether the watcher starts the container's process again after ``ended``."""
    if stop_requested:
        return False
    if daemon.restart == "always":
        return True
    if daemon.restart == "on-failure":
        return ended.failed and (daemon.max_retries is None or restarts < daemon.max_retries)
    return False


def next_delay(previous: float, ran_for: float) -> float:
    """The wait before the next restart, given the last one and how long the process
    ran since: 100 ms at first and after a run of 10 s or more, else doubled, at
    most a minute."""
    if previous <= 0 or ran_for >= RESET_AFTER:
        return FIRST_DELAY
    return min(previous * 2, MAX_DELAY)
