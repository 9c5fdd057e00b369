"""Fixtures for the image integration tests: a temp store, and mount cleanup."""

from __future__ import annotations

import os

import pytest

from hostjob.images.store import Store
from hostjob.linux import syscalls


@pytest.fixture(autouse=True)
def _needs_root():
    if os.geteuid() != 0:
        pytest.skip("needs root")


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    yield Store(str(root))
    _unmount_under(str(tmp_path))


@pytest.fixture
def cleanup_mounts(tmp_path):
    """Unmounts anything left mounted under tmp_path, even when the test failed."""
    yield
    _unmount_under(str(tmp_path))


def _unmount_under(prefix: str) -> None:
    prefix = os.path.realpath(prefix)
    for _ in range(100):
        targets = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split(" ")[4]
                if point == prefix or point.startswith(prefix + "/"):
                    targets.append(point)
        if not targets:
            return
        for target in sorted(targets, key=len, reverse=True):
            try:
                syscalls.umount2(target, syscalls.MNT_DETACH)
            except OSError:
                pass
