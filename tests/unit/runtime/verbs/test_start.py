"""``start`` without root: the start byte into the exec fifo the created process reads,
and the fifo gone once it is written; a container that cannot be started says why."""

from __future__ import annotations

import os
import subprocess

import pytest

from hostjob.errors import InvalidState
from hostjob.runtime.status import Status
from hostjob.runtime.verbs.start import start
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_the_start_byte_goes_to_the_reader_and_the_fifo_goes(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid, fifo=True)
    fifo = container.store.fifo(container.id)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the process's end
    try:
        assert container.status() == Status.CREATED
        start(container)
        assert os.read(reader, 8) == b"0"
    finally:
        os.close(reader)
    assert not os.path.exists(fifo)


def test_a_fifo_nobody_reads_is_a_process_that_has_gone(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    container = make_handle(sleeper.pid, fifo=True)
    with pytest.raises(InvalidState, match="cannot start a container that has stopped"):
        start(container)
    assert os.path.exists(container.store.fifo(container.id))  # nothing changed


def test_a_stopped_container_cannot_start(make_handle: MakeHandle) -> None:
    with pytest.raises(InvalidState, match="cannot start a container that has stopped"):
        start(make_handle(fifo=True))
