"""hostjob.runtime.status: every status against every move, as one table (no root, no
container: the predicates and the errors each verb raises)."""

from __future__ import annotations

import pytest

from hostjob.errors import ContainerNotRunning, InvalidState
from hostjob.runtime import status
from hostjob.runtime.status import Status

ALL = (Status.CREATING, Status.CREATED, Status.RUNNING, Status.PAUSED, Status.STOPPED)

# status -> the moves it allows (runc's rules; exec and pause as hostjob has them)
ALLOWED = {
    Status.CREATING: set(),
    Status.CREATED: {"start", "signal", "delete", "pause", "exec"},
    Status.RUNNING: {"signal", "pause", "exec"},
    Status.PAUSED: {"signal", "resume"},
    Status.STOPPED: {"delete", "restart"},
}
PREDICATES = {
    "start": status.can_start,
    "signal": status.can_signal,
    "delete": lambda s: status.can_delete(s, force=False),
    "pause": status.can_pause,
    "resume": status.can_resume,
    "exec": status.can_exec,
    "restart": lambda s: status.can_restart(s, "created", stop_requested=False),
}


@pytest.mark.parametrize("current", ALL)
def test_the_transition_table(current: str) -> None:
    allowed = {move for move, predicate in PREDICATES.items() if predicate(current)}
    assert allowed == ALLOWED[current]
    assert status.can_delete(current, force=True)  # --force deletes anything


@pytest.mark.parametrize(
    ("current", "error", "text"),
    [
        (Status.STOPPED, InvalidState, "cannot start a container that has stopped"),
        (Status.RUNNING, InvalidState, "cannot start an already running container"),
        (Status.PAUSED, InvalidState, "cannot start an already running container"),
        (Status.CREATING, InvalidState, "cannot start a container in the creating state"),
    ],
)
def test_start_refusals_say_what_runc_says(current: str, error: type, text: str) -> None:
    with pytest.raises(error, match=rf"^{text}$"):
        status.require_start("c1", current)


def test_each_require_raises_what_its_clients_match() -> None:
    status.require_start("c1", Status.CREATED)
    for current in (Status.CREATED, Status.RUNNING, Status.PAUSED):
        status.require_signal("c1", current)
    for current in (Status.CREATING, Status.STOPPED):
        with pytest.raises(ContainerNotRunning, match=r"^container not running$"):
            status.require_signal("c1", current)
    with pytest.raises(
        InvalidState, match="cannot delete container c1 that is not stopped: running"
    ):
        status.require_delete("c1", Status.RUNNING, force=False)
    status.require_delete("c1", Status.RUNNING, force=True)
    with pytest.raises(InvalidState, match=r"^container already paused$"):
        status.require_pause("c1", Status.PAUSED)
    with pytest.raises(ContainerNotRunning):
        status.require_pause("c1", Status.STOPPED)
    with pytest.raises(InvalidState, match=r"^container not paused$"):
        status.require_resume("c1", Status.RUNNING)
    with pytest.raises(InvalidState, match="paused container"):
        status.require_exec("c1", Status.PAUSED)
    with pytest.raises(ContainerNotRunning):
        status.require_exec("c1", Status.STOPPED)


def test_a_restart_needs_a_finished_create_and_no_stop() -> None:
    status.require_restart("c1", Status.STOPPED, "created", stop_requested=False)
    with pytest.raises(InvalidState, match="stopped by hostjob stop"):
        status.require_restart("c1", Status.STOPPED, "created", stop_requested=True)
    with pytest.raises(InvalidState, match="that is running"):
        status.require_restart("c1", Status.RUNNING, "created", stop_requested=False)
    with pytest.raises(InvalidState, match="its create did not finish"):
        status.require_restart("c1", Status.STOPPED, "creating", stop_requested=False)
