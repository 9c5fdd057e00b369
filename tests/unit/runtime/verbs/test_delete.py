"""``delete`` by ID without root: what ``--force`` forgives (an ID that is not there),
what it does not without it, and a damaged record left alone unless forced."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hostjob.errors import ContainerNotFound, InvalidState, StateCorrupt
from hostjob.runtime.verbs.delete import delete, delete_by_id
from tests.unit.runtime.verbs.conftest import MakeHandle


def test_an_unknown_id(tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    delete_by_id("gone", root=root, force=True)  # clients delete to be sure
    with pytest.raises(ContainerNotFound):
        delete_by_id("gone", root=root)


def test_a_stopped_container_is_removed(make_handle: MakeHandle) -> None:
    container = make_handle()
    delete_by_id(container.id, root=container.store.root)
    assert not Path(container.store.dir(container.id)).exists()


def test_a_running_container_only_with_force(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    # no fifo: started; its process runs, and its cgroup is nowhere (its freezer reads
    # as not frozen): the status is running
    container = make_handle(sleeper.pid)
    with pytest.raises(InvalidState, match="that is not stopped: running"):
        delete(container)
    assert Path(container.store.dir(container.id)).is_dir()
    assert sleeper.poll() is None


def test_a_damaged_record_stays_unless_forced(make_handle: MakeHandle) -> None:
    container = make_handle()
    state_file = Path(container.store.dir(container.id), "state.json")
    state_file.write_text("{not json")
    with pytest.raises(StateCorrupt):
        delete_by_id(container.id, root=container.store.root)
    assert state_file.read_text() == "{not json"
