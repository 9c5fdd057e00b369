"""hostjob.runtime.handle without root: a container's record under a tmp state root,
changed the way the verbs change it -- undo entries persisted once each, updates under
the lock, how a process ended -- and its status derived from a process that is not there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.errors import ContainerNotFound, StateCorrupt
from hostjob.runtime.handle import Handle, stop_grace
from hostjob.runtime.record import PHASE_CREATED, Record, StateStore
from hostjob.runtime.status import Status
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from tests.helpers import base_config


@pytest.fixture
def handle(tmp_path: Path) -> Handle:
    store = StateStore(str(tmp_path / "state"))
    job = to_job_config(wire.Spec.decode(base_config()), str(tmp_path), "c1")
    store.create("c1").release()
    record = Record(
        id="c1",
        pid=0,
        start_time=0,
        phase=PHASE_CREATED,
        created="2026-12-02T00:00:00Z",
        owner="",
        config=job,
        undo=[],
    )
    store.write(record)
    return Handle.load("c1", root=store.root)


def state_inode(handle: Handle) -> int:
    return os.stat(Path(handle.store.dir(handle.id), "state.json")).st_ino


def test_record_change_writes_each_entry_once(handle: Handle) -> None:
    handle.reload()
    first = state_inode(handle)
    handle.record_change(["remove", "/a"], ["remove", "/b"])
    second = state_inode(handle)
    assert second != first  # one write for both (every write replaces the file)
    handle.record_change(["remove", "/a"])
    handle.record_change()
    assert state_inode(handle) == second  # nothing new: no write
    handle.record_change(["remove", "/b"], ["unmount", "/c", "7"])
    assert state_inode(handle) != second
    again = Handle.load("c1", root=handle.store.root)
    assert again.record is not None
    assert again.record.undo == [["remove", "/a"], ["remove", "/b"], ["unmount", "/c", "7"]]


def test_updates_and_the_exit_go_to_the_record(handle: Handle) -> None:
    ended = handle.record_exit(9)  # a wait status: killed by signal 9
    assert (ended.code, ended.signal, ended.oom_killed) == (137, 9, False)
    handle.set_watcher(os.getpid())
    record = Handle.load("c1", root=handle.store.root).record
    assert record is not None and record.exit is not None
    assert record.exit.code == 137 and record.watcher is not None
    assert record.watcher[0] == os.getpid() and record.watcher[1] > 0
    assert handle.record_exit(None).code is None  # nobody could tell


def test_a_container_whose_process_is_gone_is_stopped(handle: Handle) -> None:
    assert handle.status() == Status.STOPPED  # pid 0: no process
    assert handle.hook_state(Status.STOPPED, None) == {
        "ociVersion": "1.2.0",
        "id": "c1",
        "status": "stopped",
        "bundle": handle.config.bundle,
        "annotations": {},
    }


def test_unknown_damaged_and_half_created(handle: Handle, tmp_path: Path) -> None:
    with pytest.raises(ContainerNotFound):
        Handle.load("nope", root=handle.store.root)
    Path(handle.store.dir("c1"), "state.json").write_text("{not json")
    with pytest.raises(StateCorrupt):
        Handle.load("c1", root=handle.store.root)
    handle.store.create("c2").release()  # a create that died before its first write
    half = Handle.load("c2", root=handle.store.root)
    assert half.record is None and half.status() == Status.STOPPED
    with pytest.raises(ContainerNotFound):
        half.update_record(lambda record: None)


def test_stop_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTJOB_STOP_GRACE", raising=False)
    assert stop_grace() == 5.0
    monkeypatch.setenv("HOSTJOB_STOP_GRACE", "0.5")
    assert stop_grace() == 0.5
    monkeypatch.setenv("HOSTJOB_STOP_GRACE", "soon")
    assert stop_grace() == 5.0
