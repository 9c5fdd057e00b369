"""``pause`` and ``resume`` without root: the status each asks for before the freezer
is touched, and the error each move it refuses raises."""

from __future__ import annotations

import subprocess

import pytest

from hostjob.errors import ContainerNotRunning, InvalidState
from hostjob.runtime.handle import Handle
from hostjob.runtime.verbs.pause import pause, resume
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_a_stopped_container_cannot_pause(make_handle: MakeHandle) -> None:
    with pytest.raises(ContainerNotRunning):
        pause(make_handle())


@pytest.mark.parametrize("fifo", [True, False], ids=["created", "stopped"])
def test_only_a_paused_container_resumes(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes], fifo: bool
) -> None:
    container = make_handle(sleeper.pid if fifo else 0, fifo=fifo)
    with pytest.raises(InvalidState, match="container not paused"):
        resume(container)


def test_pause_reads_the_record_again_under_the_lock(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    """Loaded while created; its record rewritten (no process) before the verb locks it:
    the status is the record's on disk, and nothing is frozen."""
    container = make_handle(sleeper.pid, fifo=True)
    again = Handle.load(container.id, root=container.store.root)
    assert again.record is not None
    again.record.pid = again.record.start_time = 0
    again.store.write(again.record)
    with pytest.raises(ContainerNotRunning):
        pause(container)
