"""scripts/vm's reading of a guest that stopped without a status: before its runner
started (a kernel that panicked while booting: the command never ran, and the lane boots
once more) or after (the lane's failure). A guest that really panics cannot be made to
on demand: the guest here is a process that has already exited."""

from __future__ import annotations

import argparse
import subprocess
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO


def vm_script() -> ModuleType:
    loader = SourceFileLoader("vm_lane_script", str(REPO / "scripts" / "vm"))
    spec = spec_from_loader(loader.name, loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


class StoppedGuest:
    """A guest whose QEMU has exited."""

    accel = "tcg"

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(["true"])
        self.proc.wait()
        self.start = time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self.start

    def tail(self, lines: int = 15) -> str:
        return "  | Kernel panic - not syncing: Fatal exception in interrupt\n"


@pytest.mark.parametrize("runner_started", [False, True])
def test_a_guest_that_stopped_without_a_status(tmp_path: Path, runner_started: bool) -> None:
    vm = vm_script()
    if runner_started:
        (tmp_path / "started").touch()
    args = argparse.Namespace(boot_timeout=240.0, timeout=3600.0)
    with pytest.raises(vm.LaneError, match="stopped without a status") as caught:
        vm.follow(StoppedGuest(tmp_path), args)
    assert isinstance(caught.value, vm.DiedBooting) is not runner_started
    assert caught.value.code == vm.EXIT_LANE
