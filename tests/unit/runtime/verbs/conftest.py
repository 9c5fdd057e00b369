"""A container's record under a tmp state root, as each verb finds it, without root: its
"init" is a ``sleep`` of the test's own (or no process at all), and its ``exec.fifo``
there or not says created or started. Nothing here touches a cgroup: a record made
here names one hostjob did not make (``Record.cgroup`` empty), which no verb touches."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostjob.runtime import proc
from hostjob.runtime.handle import Handle
from hostjob.runtime.record import PHASE_CREATED, Record, StateStore
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from tests.helpers import base_config

MakeHandle = Callable[..., Handle]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process to stand for a container's init."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def make_handle(tmp_path: Path) -> MakeHandle:
    """make_handle(pid=0, fifo=False, **record fields) -> the handle of container c1,
    loaded as a command loads it. ``fifo``: a real exec fifo (created, not started)."""
    store = StateStore(str(tmp_path / "state"))

    def make(pid: int = 0, *, fifo: bool = False, **fields: object) -> Handle:
        job = to_job_config(wire.Spec.decode(base_config()), str(tmp_path), "c1")
        job.cgroups_path = f"/hostjob-unit-{tmp_path.name}/c1"  # as create resolves it
        store.create("c1").release()
        values: dict[str, object] = {
            "id": "c1",
            "pid": pid,
            "start_time": (proc.start_time(pid) or 0) if pid else 0,
            "phase": PHASE_CREATED,
            "created": "2026-12-02T00:00:00Z",
            "owner": "",
            "config": job,
            "undo": [],
            "cgroup": "",  # not one hostjob made: never signalled, frozen or removed
        }
        values.update(fields)
        store.write(Record(**values))
        if fifo:
            os.mkfifo(store.fifo("c1"), 0o600)
        return Handle.load("c1", root=store.root)

    return make
