"""``update`` without root: refused, with the record unchanged, unless the job runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostjob.errors import ContainerNotRunning
from hostjob.runtime.verbs.update import update
from hostjob.spec import resources as wire
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_a_stopped_container_keeps_its_limits(make_handle: MakeHandle) -> None:
    container = make_handle()
    state_file = Path(container.store.dir(container.id), "state.json")
    before = state_file.read_bytes()
    with pytest.raises(ContainerNotRunning):
        update(container, wire.Resources(pids=wire.Pids(limit=50)))
    assert state_file.read_bytes() == before
